"""Intervals and verdicts with answers known by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from gum_utils.report import stats
from gum_utils.report.stats import DOES_NOT_HOLD, HOLDS, IDENTICAL, NOT_DISTINGUISHABLE


def test_mean_ci_is_the_t_interval():
    values = [1.0, 2.0, 3.0, 4.0]
    result = stats.mean_ci(values)
    half = st.t.ppf(0.975, 3) * np.std(values, ddof=1) / 2
    assert result["mean"] == 2.5 and result["n"] == 4
    assert (result["low"], result["high"]) == pytest.approx((2.5 - half, 2.5 + half))


def test_one_value_has_no_interval_and_no_verdict():
    result = stats.mean_ci([3.0, float("nan")])
    assert result["n"] == 1 and result["mean"] == 3.0 and math.isnan(result["low"]) and math.isnan(result["high"])
    assert stats.verdict(stats.paired_difference([1.0], [5.0]), "lower") == NOT_DISTINGUISHABLE


def test_known_mean_difference_holds():
    a = pd.Series([1.0, 1.1, 0.9, 1.05], index=[0, 1, 2, 3])
    b = a + 2.0 + pd.Series([0.01, -0.01, 0.02, 0.0], index=a.index)
    diff = stats.paired_difference(a, b)
    assert diff["mean"] == pytest.approx(-2.005) and diff["p_value"] < 1e-4
    assert stats.verdict(diff, "lower") == HOLDS
    assert stats.verdict(diff, "higher") == DOES_NOT_HOLD  # the opposite direction
    assert stats.verdict(diff, "different") == HOLDS


def test_bit_identical_pairs_are_identical_not_undecided():
    diff = stats.paired_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert diff["mean"] == 0 and diff["relative_gap"] == 0
    assert stats.verdict(diff, "lower") == IDENTICAL and stats.verdict(diff, "different") == IDENTICAL
    one_seed = stats.paired_difference([2.5], [2.5])  # no interval, yet more seeds cannot separate them
    assert one_seed["n"] == 1 and stats.verdict(one_seed, "higher") == IDENTICAL


def test_identical_needs_every_pair_within_the_tolerance():
    close = stats.paired_difference([1.0, 2.0, 3.0], [1.0 + 5e-7, 2.0, 3.0])  # relative 5e-7
    assert close["relative_gap"] == pytest.approx(5e-7 / (1 + 5e-7)) and stats.verdict(close) == IDENTICAL
    apart = stats.paired_difference([1.0, 2.0, 3.0], [1.0 + 1e-4, 2.0, 3.0 - 1e-4])  # real, if tiny, spread
    assert stats.verdict(apart) == NOT_DISTINGUISHABLE
    # a threshold test on identical sides is decided by its interval, never called identical
    assert stats.verdict(stats.shifted(close, 0.5), "lower") == HOLDS


def test_p_value_from_an_interval_matches_the_t_test():
    a, b = [1.0, 1.3, 0.8, 1.2], [0.9, 1.0, 0.85, 0.95]
    diff = stats.paired_difference(a, b)
    assert diff["p_value"] == pytest.approx(st.ttest_rel(a, b).pvalue)
    assert stats.p_from_interval(diff) == pytest.approx(diff["p_value"])
    moved = stats.shifted(diff, 0.1)  # the test of mean = 0.1
    expected = st.ttest_1samp(np.subtract(a, b), 0.1).pvalue
    assert moved["p_value"] == pytest.approx(expected) and math.isnan(moved["relative_gap"])


def test_holm_adjusts_by_rank_keeps_order_and_counts_missing_comparisons():
    # by hand: sorted 0.01, 0.02, 0.04 -> 3*0.01, 2*0.02, 1*0.04 -> 0.03, 0.04, 0.04 (monotone)
    assert stats.holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    adjusted = stats.holm([0.01, float("nan")])  # the comparison without data still counts: m = 2
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])
    assert stats.holm([0.5, 0.9]).max() <= 1.0


def test_after_correction_keeps_only_what_the_adjusted_p_allows():
    assert stats.after_correction(HOLDS, 0.01) == HOLDS
    assert stats.after_correction(HOLDS, 0.2) == NOT_DISTINGUISHABLE
    assert stats.after_correction(DOES_NOT_HOLD, float("nan")) == NOT_DISTINGUISHABLE
    assert stats.after_correction(IDENTICAL, float("nan")) == IDENTICAL


def test_pairs_match_by_seed_and_drop_the_unpaired():
    a = pd.Series({0: 1.0, 1: 2.0, 2: 3.0})
    b = pd.Series({1: 1.0, 2: 2.0, 3: 9.0})
    diff = stats.paired_difference(a, b)
    assert diff["n"] == 2 and diff["mean"] == 1.0


def test_shifted_tests_against_a_threshold():
    ratio = {"mean": 1.0, "low": 0.9, "high": 1.1, "n": 3}
    assert stats.verdict(stats.shifted(ratio, 0.5), "higher") == HOLDS
    assert stats.verdict(stats.shifted(ratio, 1.5), "higher") == DOES_NOT_HOLD


def test_combine():
    assert stats.combine([HOLDS, HOLDS]) == HOLDS
    assert stats.combine([HOLDS, DOES_NOT_HOLD]) == DOES_NOT_HOLD
    assert stats.combine([HOLDS, NOT_DISTINGUISHABLE]) == NOT_DISTINGUISHABLE
    assert stats.combine([NOT_DISTINGUISHABLE, HOLDS], "any") == HOLDS
    assert stats.combine([DOES_NOT_HOLD, DOES_NOT_HOLD], "any") == DOES_NOT_HOLD
    assert stats.combine([], "any") == NOT_DISTINGUISHABLE


def test_summarize_matches_mean_ci_per_group():
    frame = pd.DataFrame({"g": ["a"] * 3 + ["b"], "v": [1.0, 2.0, 4.0, 5.0]})
    out = stats.summarize(frame, ["g"], "v").set_index("g")
    expected = stats.mean_ci([1.0, 2.0, 4.0])
    assert (out.loc["a", "low"], out.loc["a", "high"]) == pytest.approx((expected["low"], expected["high"]))
    assert out.loc["b", "n"] == 1 and math.isnan(out.loc["b", "low"])


def test_unknown_direction_is_refused():
    with pytest.raises(ValueError):
        stats.verdict({"mean": 0, "low": -1, "high": 1, "n": 3}, "smaller")


# --- power: against statsmodels (an instrument other than ours) and a Monte Carlo ------------------
@pytest.mark.parametrize("effect, n, alpha", [(0.5, 10, 0.05), (1.2, 5, 0.05), (2.0, 5, 0.05 / 14),
                                              (0.8, 20, 0.01), (3.0, 3, 0.05)])
def test_power_equals_statsmodels_paired_t_power(effect, n, alpha):
    from statsmodels.stats.power import TTestPower

    expected = TTestPower().power(effect_size=effect, nobs=n, alpha=alpha, alternative="two-sided")
    assert np.isfinite(expected)  # the cases are chosen where statsmodels' lower tail is finite
    assert stats.power(effect, 1.0, n, alpha) == pytest.approx(expected, rel=1e-6)
    assert stats.power(effect * 0.02, 0.02, n, alpha) == pytest.approx(expected, rel=1e-6)  # only effect / sd counts


def test_detectable_effect_and_seeds_needed_invert_statsmodels():
    from statsmodels.stats.power import TTestPower

    for n, alpha in ((10, 0.05), (8, 0.01)):  # where statsmodels' power is finite (at 0.05/14, n=5 it is NaN)
        solved = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=stats.POWER)
        assert stats.detectable_effect(0.0123, n, alpha) / 0.0123 == pytest.approx(solved, rel=1e-4)
    alpha = 0.05 / 14
    assert stats.power(stats.detectable_effect(0.0123, 5, alpha), 0.0123, 5, alpha) == pytest.approx(stats.POWER)
    needed = stats.seeds_needed(math.log1p(0.05), 0.0123, alpha)
    assert needed == 5 and stats.power(math.log1p(0.05), 0.0123, needed - 1, alpha) < stats.POWER
    assert stats.seeds_needed(0.0, 1.0) == stats.MOST_SEEDS + 1 and math.isnan(stats.detectable_effect(1.0, 1))


def test_power_matches_a_simulated_paired_t_test():
    """At alpha/14 statsmodels' lower tail is NaN; a Monte Carlo of the t-test itself is the check."""
    rng, n, alpha, effect = np.random.default_rng(3), 5, 0.05 / 14, 2.5
    samples = rng.normal(effect, 1.0, size=(20000, n))
    p = st.ttest_1samp(samples, 0.0, axis=1).pvalue
    assert (p < alpha).mean() == pytest.approx(stats.power(effect, 1.0, n, alpha), abs=0.01)


def test_power_of_an_intersection_union_test_is_the_product():
    single = stats.power(1.5, 1.0, 8, 0.05)
    assert stats.power(1.5, 1.0, 8, 0.05, components=3) == pytest.approx(single ** 3)
