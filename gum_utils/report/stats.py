"""Few-seed statistics: t-intervals, paired differences, family-wise correction, and the verdict a claim gets.

A verdict comes from a test and its interval: with one seed there is none, so nothing is
distinguishable, unless the two sides are equal within floating-point noise in every pair
(`identical`: more seeds cannot separate what is computed the same way). Where a comparison belongs
to a family, its p-value is adjusted (Holm) before it decides; the interval gives the direction.
"""

import functools
import math
import numpy as np
import pandas as pd
from scipy import optimize, stats as st

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_DISTINGUISHABLE = "not distinguishable at this number of seeds"
IDENTICAL = "identical"
FLOAT_TOLERANCE = 1e-6  # relative difference below which two float32 results are the same computation
ALPHA = 0.05  # family-wise error rate of the verdicts (the intervals are 1 - ALPHA)
DIRECTIONS = ("lower", "higher", "different")  # what the claim says about the difference


@functools.lru_cache(maxsize=256)
def _t_quantile(confidence: float, n: int) -> float:
    """The t quantile of a two-sided interval with n values (scipy is slow for one number at a time)."""
    return float(st.t.ppf((1 + confidence) / 2, n - 1))


def _half_width(std, n, confidence: float):
    """t-interval half width; NaN for n < 2 (one value has no spread, so no interval)."""
    if np.ndim(n) == 0:
        return _t_quantile(confidence, int(n)) * float(std) / math.sqrt(n) if n >= 2 else math.nan
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        t = st.t.ppf((1 + confidence) / 2, np.where(n >= 2, n - 1, np.nan))
        return t * np.asarray(std, dtype=float) / np.sqrt(n)


def mean_ci(values, confidence: float = 0.95) -> dict:
    """Mean of the finite values and its t-interval: {mean, low, high, n}. n=1: NaN bounds."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    half = float(_half_width(x.std(ddof=1), n, confidence)) if n >= 2 else math.nan
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def summarize(frame: pd.DataFrame, by, value: str, confidence: float = 0.95) -> pd.DataFrame:
    """mean_ci of `value` per group of `by`, all groups at once (for curves with many points)."""
    groups = frame.groupby(list(by))[value].agg(["mean", "std", "count"]).reset_index()
    half = _half_width(groups["std"].fillna(0), groups["count"], confidence)
    return groups.assign(low=groups["mean"] - half, high=groups["mean"] + half, n=groups["count"])


def paired_difference(a, b, confidence: float = 0.95) -> dict:
    """a - b matched by index (seed, or any run key); a pair missing either side is left out.

    Returns {mean, low, high, n} of the differences, mean_a, mean_b, the paired t-test's p_value and
    the pairs' relative_gap (0: every pair bit-equal).
    """
    a, b = pd.Series(a, dtype=float), pd.Series(b, dtype=float)
    shared = a.index.intersection(b.index)
    x, y = a.reindex(shared).to_numpy(), b.reindex(shared).to_numpy()
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = x[finite], y[finite]
    result = mean_ci(x - y, confidence)
    return {**result, "mean_a": x.mean() if len(x) else math.nan, "mean_b": y.mean() if len(y) else math.nan,
            "p_value": _paired_p(x - y), "confidence": confidence, "relative_gap": relative_gap(x, y)}


def _paired_p(differences: np.ndarray) -> float:
    """The paired t-test's two-sided p-value; NaN for fewer than 2 pairs (no test). Zero spread is the
    limit of the test: 0 for a nonzero difference, 1 for none."""
    n = len(differences)
    if n < 2:
        return math.nan
    spread = differences.std(ddof=1)
    if spread == 0:
        return 0.0 if differences.mean() != 0 else 1.0
    return float(2 * st.t.sf(abs(differences.mean()) / (spread / math.sqrt(n)), n - 1))


def relative_gap(a, b) -> float:
    """The largest |a - b| / max(|a|, |b|) over the pairs (0 where every pair is bit-equal); NaN: no pair."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(a):
        return math.nan
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        gaps = np.where(a == b, 0.0, np.abs(a - b) / scale)
    return float(gaps.max())


def p_from_interval(comparison: dict) -> float:
    """The two-sided t-test p-value of mean = 0 that the t-interval implies (for means and shifted ones)."""
    n, mean, low, high = comparison["n"], comparison["mean"], comparison["low"], comparison["high"]
    if n < 2 or not np.isfinite([mean, low, high]).all():
        return math.nan
    t_crit = _t_quantile(comparison.get("confidence", 0.95), int(n))
    se = (high - low) / (2 * t_crit)
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * st.t.sf(abs(mean) / se, n - 1))


def shifted(comparison: dict, offset: float) -> dict:
    """The comparison against `offset` instead of 0 (e.g. "at least 4x" is log ratio - log 4 > 0).

    Its p-value is that of the shifted test, and it is never `identical` (equal sides are a distance
    `offset` from the threshold, which the interval judges).
    """
    moved = {**comparison, **{key: comparison[key] - offset for key in ("mean", "low", "high")}}
    return {**moved, "p_value": p_from_interval(moved), "relative_gap": math.nan}


def holm(p_values) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values of one family. A comparison without a p-value (no data) still
    counts in the family's size, as the family was fixed before the data; it gets no adjusted value."""
    p = np.asarray(p_values, dtype=float)
    filled = np.where(np.isfinite(p), p, 1.0)
    order = np.argsort(filled, kind="stable")
    scaled = (len(p) - np.arange(len(p))) * filled[order]
    adjusted = np.empty_like(filled)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return np.where(np.isfinite(p), adjusted, np.nan)


def after_correction(decided: str, p_adjusted: float, alpha: float = ALPHA) -> str:
    """A verdict from the interval, kept only where the adjusted p-value is below alpha (else not decided)."""
    if decided in (HOLDS, DOES_NOT_HOLD) and not p_adjusted < alpha:
        return NOT_DISTINGUISHABLE
    return decided


def verdict(comparison: dict, direction: str = "lower") -> str:
    """holds if the interval excludes 0 on the claimed side, does not hold if on the other side;
    identical if every pair is equal within FLOAT_TOLERANCE (relative_gap, set by paired_difference)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    if comparison.get("relative_gap", math.nan) <= FLOAT_TOLERANCE:
        return IDENTICAL
    low, high = comparison["low"], comparison["high"]
    if comparison["n"] < 2 or not (np.isfinite(low) and np.isfinite(high)):
        return NOT_DISTINGUISHABLE
    below, above = high < 0, low > 0
    if direction == "different":
        return HOLDS if below or above else NOT_DISTINGUISHABLE
    claimed, opposite = (below, above) if direction == "lower" else (above, below)
    return HOLDS if claimed else DOES_NOT_HOLD if opposite else NOT_DISTINGUISHABLE


def combine(verdicts, how: str = "all") -> str:
    """"all": every part must hold (one failing part fails it); "any": one holding part suffices."""
    verdicts = list(verdicts)
    decisive, other = (DOES_NOT_HOLD, HOLDS) if how == "all" else (HOLDS, DOES_NOT_HOLD)
    if decisive in verdicts:
        return decisive
    return other if verdicts and all(v == other for v in verdicts) else NOT_DISTINGUISHABLE


def describe(frame: pd.DataFrame, by, values, confidence: float = 0.95) -> pd.DataFrame:
    """Per group of `by`: each value's mean and t-interval (columns v, v_low, v_high) and its n."""
    parts = []
    for value in values:
        part = summarize(frame.dropna(subset=[value]), by, value, confidence).set_index(list(by))
        parts.append(part[["mean", "low", "high", "n"]].rename(columns={
            "mean": value, "low": f"{value}_low", "high": f"{value}_high", "n": f"{value}_n"}))
    return pd.concat(parts, axis=1).reset_index() if parts else frame[list(by)].drop_duplicates()


def interval_text(mean, low, high, fmt: str = ".3g") -> str:
    """"m [low, high]"; "m" alone where there is no interval (one seed), "–" where there is no mean."""
    if mean is None or not np.isfinite(mean):
        return "–"
    if low is None or not (np.isfinite(low) and np.isfinite(high)):
        return format(mean, fmt)
    return f"{mean:{fmt}} [{low:{fmt}}, {high:{fmt}}]"


# --- power: what a design could have seen ---------------------------------------------------------
POWER = 0.8  # the power at which a row's smallest detectable effect is stated
MOST_SEEDS = 1000  # seeds_needed answers "more than this" beyond it


def power(effect: float, sd: float, n: int, alpha: float = ALPHA, components: int = 1) -> float:
    """The chance that a two-sided paired t-test on n pairs rejects mean = 0 at `alpha`, when the true
    mean difference is `effect` and the pairs' standard deviation `sd` (noncentral t, n - 1 degrees of
    freedom, both tails). With `components` > 1: that all of that many independent such tests reject
    (an intersection-union test, which holds only where every component does)."""
    if n < 2 or not sd > 0:
        return math.nan
    return float(_powers(effect, sd, np.array([n]), alpha, components)[0])


def _powers(effect: float, sd: float, ns: np.ndarray, alpha: float, components: int) -> np.ndarray:
    """power() for each n >= 2 of `ns` in one call of scipy (one at a time, scipy's overhead dominates)."""
    critical = st.t.ppf((1 + (1 - alpha)) / 2, ns - 1) if alpha < 1 else np.zeros(len(ns))
    noncentrality = abs(effect) * np.sqrt(ns) / sd
    upper = st.nct.sf(critical, ns - 1, noncentrality)
    lower = st.nct.cdf(-critical, ns - 1, noncentrality)  # the wrong tail: at most alpha / 2
    return (upper + np.where(np.isfinite(lower), np.minimum(lower, alpha / 2), 0.0)) ** components  # scipy: NaN for ~0


def detectable_effect(sd: float, n: int, alpha: float = ALPHA, target: float = POWER, components: int = 1) -> float:
    """The smallest true effect (in sd's unit) that the design detects with `target` power."""
    if n < 2 or not sd > 0:
        return math.nan
    return sd * _detectable_in_sds(int(n), float(alpha), float(target), int(components))


@functools.lru_cache(maxsize=4096)
def _detectable_in_sds(n: int, alpha: float, target: float, components: int) -> float:
    """detectable_effect for sd = 1 (power depends on effect / sd alone), computed once per design."""
    high = 1.0
    while power(high, 1.0, n, alpha, components) < target:
        high *= 2
    return float(optimize.brentq(lambda e: power(e, 1.0, n, alpha, components) - target, 0.0, high, xtol=1e-12))


def seeds_needed(effect: float, sd: float, alpha: float = ALPHA, target: float = POWER, components: int = 1) -> int:
    """The fewest pairs that detect `effect` with `target` power (MOST_SEEDS + 1: more than MOST_SEEDS):
    power grows with n, so the first of 2, 4, 8, ... that is enough brackets it, then every n below it."""
    if not (sd > 0 and abs(effect) > 0):
        return MOST_SEEDS + 1
    probes = np.array([*(2 ** k for k in range(1, MOST_SEEDS.bit_length())), MOST_SEEDS])
    enough = np.flatnonzero(_powers(effect, sd, probes, alpha, components) >= target)
    if not enough.size:
        return MOST_SEEDS + 1
    high = int(probes[enough[0]])
    below = np.arange(high // 2 + 1 if enough[0] else 2, high)
    if below.size:
        enough_below = np.flatnonzero(_powers(effect, sd, below, alpha, components) >= target)
        if enough_below.size:
            return int(below[enough_below[0]])
    return high


def pooled_sd(sds, ns) -> float:
    """sqrt(sum (n_i - 1) s_i^2 / sum (n_i - 1)) over the groups with n_i >= 2 and a finite s_i."""
    sds, ns = np.asarray(sds, dtype=float), np.asarray(ns, dtype=float)
    used = np.isfinite(sds) & (ns >= 2)
    df = (ns[used] - 1).sum()
    return float(math.sqrt(((ns[used] - 1) * sds[used] ** 2).sum() / df)) if df > 0 else math.nan
