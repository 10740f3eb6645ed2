"""Intervals and verdicts with answers known by hand."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from gum_utils.report import stats
from gum_utils.report.stats import DOES_NOT_HOLD, HOLDS, NOT_DISTINGUISHABLE


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


def test_identical_samples_are_not_distinguishable():
    diff = stats.paired_difference([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert diff["mean"] == 0 and stats.verdict(diff, "lower") == NOT_DISTINGUISHABLE
    assert stats.verdict(diff, "different") == NOT_DISTINGUISHABLE


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
