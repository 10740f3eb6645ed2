"""Few-seed statistics: t-intervals, paired differences, and the verdict a claim gets from them.

A verdict comes only from an interval: with one seed there is none, so nothing is distinguishable.
"""

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats as st

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
NOT_DISTINGUISHABLE = "not distinguishable at this number of seeds"
DIRECTIONS = ("lower", "higher", "different")  # what the claim says about the difference


def _half_width(std, n, confidence: float):
    """t-interval half width; NaN for n < 2 (one value has no spread, so no interval)."""
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

    Returns {mean, low, high, n} of the differences, mean_a, mean_b and the paired t-test's p_value.
    """
    pairs = pd.concat([pd.Series(a, dtype=float), pd.Series(b, dtype=float)], axis=1, keys=["a", "b"])
    pairs = pairs[np.isfinite(pairs).all(axis=1)]
    result = mean_ci(pairs["a"] - pairs["b"], confidence)
    with warnings.catch_warnings():  # identical pairs have zero spread: scipy warns and gives NaN
        warnings.simplefilter("ignore")
        p = st.ttest_rel(pairs["a"], pairs["b"]).pvalue if len(pairs) >= 2 else math.nan
    return {**result, "mean_a": pairs["a"].mean(), "mean_b": pairs["b"].mean(), "p_value": float(p),
            "confidence": confidence}


def shifted(comparison: dict, offset: float) -> dict:
    """The comparison against `offset` instead of 0 (e.g. "at least 4x" is log ratio - log 4 > 0)."""
    return {**comparison, **{key: comparison[key] - offset for key in ("mean", "low", "high")}}


def verdict(comparison: dict, direction: str = "lower") -> str:
    """holds if the interval excludes 0 on the claimed side, does not hold if on the other side."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
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
