"""The source paper's claims, checked against our tables: one row per comparison.

Every number and verdict is computed from the data; the paper's value is quoted beside it, never
used to decide. Two kinds of rows:

- *confirmatory*: the paper's claims as it states them (CONFIRMATORY, written here before any data
  is read), one family per regime, Holm-corrected within it; these alone make the findings.
- *exploratory*: every other comparison of the grid, with its estimate, interval and raw
  (uncorrected) p-value; never counted in a finding.

The replicate is the seed: each comparison pairs runs on seed, and a row about an architecture
averages its configurations (e.g. the five optimizers) within a seed first, so n is the number of
seeds. A quantity that is the same for every seed (a tensor peak) is judged per configuration,
never tested as if its copies were replicates. Losses, memory and time are compared on the log
scale. Every tested row states the smallest effect its design detects with stats.POWER power at its
own alpha. A run that did not finish is an outcome of its comparison: a claim whose favoured side
did not finish cannot hold ("did not finish"), and a verdict resting on fewer seeds says so.
Imports no torch.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..archs import REGISTRY as ARCHS
from ..optim import STUDY_OPTIMIZERS as OPTIMIZERS
from .stats import (ALPHA, DOES_NOT_HOLD, FLOAT_TOLERANCE, HOLDS, IDENTICAL, MOST_SEEDS, NOT_DISTINGUISHABLE,
                    POWER, after_correction, detectable_effect, holm, mean_ci, p_from_interval, pooled_sd, relative_gap, seeds_needed,
                    shifted, verdict, _paired_p)
from .tables import RUN_ID, at_budget_point, at_equal_budget, over_budget_interval, tensor_peak

LOSS_WINDOW = 10  # training records averaged at equal steps (every run has the same records there)
BUDGET_FRACTION = 0.1  # at equal samples / time: the training loss averaged over the last 10 % of the common budget
BUDGET_VIEWS = {"equal steps": "step", "equal samples": "samples_seen", "equal time": "time"}  # the paper's first
# Runs of one strategy see the same samples per step, so for them equal steps are equal samples.
SAME_BATCH_VIEWS = {"equal steps (= equal samples)": "step", "equal time": "time"}
PAPER_VIEW = "equal steps"  # the paper compares runs after the same number of epochs / steps
MEMORY_MARGIN = 0.05  # "no more memory" holds if accumulation stays within +5% of standard
FLOAT_NOISE = 1e-3  # relative loss-curve differences below this are floating-point, not learning
PAPER_ACCUMULATION_FACTOR = {"nanovlm": 10.0, "llama": 4.0}
PAPER_CHECKPOINTING_LOSS = {"vit": "lower", "modernbert": "higher"}
PAPER_CHECKPOINTING_SLOWDOWN = 0.60
PAPER_BETTER_THAN_ADAM = {"modernbert": ("adadelta", "sgd"), "llama": ("adadelta", "sgd")}
ARCH_KIND = {arch.name: arch.kind for arch in ARCHS.values()}
PAPER_GPU_UTILIZATION = {"vision": (96.0, 99.0), "language": (8.0, 15.0)}
# The design (the methods page): the cpu profile's seeds detect a DESIGN_EFFECT relative loss
# difference with stats.POWER power at Holm's first step in the confirmatory family, for a spread
# DESIGN_SAFETY times DESIGN_SPREAD, the largest seed-to-seed sd of a paired log ratio among its loss
# comparisons in the cpu profile's 3-seed pilot (2026-12-04; each from 2-4 degrees of freedom, hence
# the margin). nanoVLM's accumulation effect is the exception: its training loss is averaged over a
# few answer tokens a batch, and its pilot spread (NOISY_SPREAD) would need about 28 seeds.
DESIGN_EFFECT = 0.05
DESIGN_SPREAD = 0.0041
DESIGN_SAFETY = 3.0
NOISY_SPREAD = 0.0625
ADAM_RIVALS = tuple(name for name in OPTIMIZERS if name != "adam")  # every rival, none picked from the data
DID_NOT_FINISH = "did not finish"
NOT_CHECKABLE = "cannot be checked here: no GPU measurements"
NO_TENSOR_PEAK = "cannot be checked here: no tensor-level peak recorded"
CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
DETERMINISTIC = "configurations (one deterministic value each; no test)"
SEEDS = "seeds (paired)"
SEED_MEANS = "seeds (paired; the five optimizers averaged within a seed)"
RUN_MEANS = "seeds (its runs averaged within a seed)"
PAPER_SAYS = {
    "(a)": "gradient accumulation lowers the training loss, about 10x on nanoVLM and 4x on Llama",
    "(b)": "gradient accumulation needs no additional GPU memory",
    "(c)": "Adadelta and SGD beat Adam on ModernBERT and Llama",
    "(d)": "checkpointing improves ViT's loss, degrades ModernBERT's, and costs up to 60 % time",
    "(e)": "GPU utilization is 96-99 % for vision models and 8-15 % for language models",
}
COLUMNS = ["claim", "family", "regime", "arch", "comparison", "budget_view", "measured", "estimate", "low", "high",
           "unit", "n", "replicate", "unfinished", "p_value", "p_adjusted", "family_size", "alpha", "detectable",
           "seeds_needed", "verdict", "paper", "note", "sd", "pool", "effect", "direction", "threshold"]


# What each comparison is called, in the rows and in the family below (one key per row: claim, arch,
# comparison, view), so the family's text and the rows' grouping cannot drift apart.
AVERAGED = "optimizers averaged"
ACCUMULATION_CLAIM = "(a) accumulation lowers the training loss"
MEMORY_CLAIM = f"(b) accumulation needs no more memory (within +{MEMORY_MARGIN:.0%})"
ADAM_CLAIM = "(c) a rival beats adam"
CHECKPOINT_LOSS_CLAIM = "(d) checkpointing changes the training loss"
AT_MOST_CLAIM = f"(d) checkpointing slows a step by at most {PAPER_CHECKPOINTING_SLOWDOWN:.0%}"
PEAK_MEMORY = "peak tensor memory"


def factor_claim(factor: float) -> str:
    return f"{ACCUMULATION_CLAIM} by at least {factor:g}x"


def accumulation_comparison(level: str, factor: float | None = None) -> str:
    return f"standard / accumulation{f' over {factor:g}x' if factor else ''}, {level}"


def memory_comparison(label: str) -> str:
    return f"{label}, accumulation vs standard, every optimizer"


def adam_comparison(rival: str, strategy: str) -> str:
    return f"adam vs {rival}, strategy {strategy}"


def checkpoint_loss_comparison(direction: str | None, level: str) -> str:
    return f"checkpointing / standard ({direction or 'different'}), {level}"


def checkpoint_time_comparison(level: str) -> str:
    return f"checkpointing / standard, {level}"


def utilization_claim(kind: str) -> str:
    return f"(e) {kind} model GPU utilization in the paper's range"


def utilization_comparison(kind: str) -> str:
    low, high = PAPER_GPU_UTILIZATION[kind]
    return f"{kind}: {low:g}-{high:g} %"


def _confirmatory() -> tuple:
    """(claim, arch, comparison, view) of every comparison of the confirmatory family."""
    keys = []
    for arch, factor in PAPER_ACCUMULATION_FACTOR.items():
        keys += [(ACCUMULATION_CLAIM, arch, accumulation_comparison(AVERAGED), PAPER_VIEW),
                 (factor_claim(factor), arch, accumulation_comparison(AVERAGED, factor), PAPER_VIEW)]
    keys += [(MEMORY_CLAIM, arch, memory_comparison(PEAK_MEMORY), "per configuration") for arch in ARCH_KIND]
    keys += [(ADAM_CLAIM, arch, adam_comparison(rival, "standard"), next(iter(SAME_BATCH_VIEWS)))
             for arch, rivals in PAPER_BETTER_THAN_ADAM.items() for rival in rivals]
    keys += [(CHECKPOINT_LOSS_CLAIM, arch, checkpoint_loss_comparison(direction, AVERAGED), PAPER_VIEW)
             for arch, direction in PAPER_CHECKPOINTING_LOSS.items()]
    keys += [(AT_MOST_CLAIM, arch, checkpoint_time_comparison(AVERAGED), "per step") for arch in ARCH_KIND]
    keys += [(utilization_claim(kind), arch, utilization_comparison(kind), "per run")
             for arch, kind in ARCH_KIND.items() if kind in PAPER_GPU_UTILIZATION]
    return tuple(keys)


# The confirmatory family, fixed before the data: the paper's claims at its own view (losses at equal
# steps), one family per regime; (b) per configuration; (e) only where a GPU measured. The methods
# page lists it (a test checks), and the claims page prints family_text().
CONFIRMATORY_FAMILY = _confirmatory()


def tested_family_size(device: str = "cpu") -> int:
    """How many comparisons of the confirmatory family are tests on this device: (b) is judged per
    configuration, (e) needs a GPU."""
    untested = ("(b)",) if device == "gpu" else ("(b)", "(e)")
    return sum(not claim.startswith(untested) for claim, *_ in CONFIRMATORY_FAMILY)


EXPLORATORY_FAMILIES = {
    "(a)": "accumulation vs standard, training loss, each architecture (optimizers averaged) and each optimizer, "
           "at equal steps, samples and time",
    "(b)": "activation bytes of one micro-batch, accumulation vs standard, per configuration",
    "(c)": "adam vs each other optimizer, each architecture and strategy, at equal steps (and equal time where "
           "every evaluation scores the judged split)",
    "(d)": "checkpointing vs standard per architecture and optimizer: training loss at equal steps, time per step",
    "(e)": "vision vs language models' utilization on the device measured (the CPU stands in without a GPU)",
}


# --- one comparison ------------------------------------------------------------------------------
def _analysed(frame: pd.DataFrame, strategies=None) -> pd.DataFrame:
    """The rows a claim looks at: sweep runs choose learning rates and test no claim."""
    keep = frame["regime"] != "sweep"
    return frame[keep & frame["strategy"].isin(strategies)] if strategies else frame[keep]


def with_every_run(frame: pd.DataFrame, runs_df: pd.DataFrame | None) -> pd.DataFrame:
    """A steps or evals table with a row for each run that has none there (a run that failed before its
    first record or evaluation), so a comparison sees it did not finish instead of missing it."""
    if runs_df is None or runs_df.empty:
        return frame
    missing = runs_df.loc[~runs_df["run"].isin(frame["run"]), [c for c in RUN_ID if c in runs_df]]
    return pd.concat([frame, missing], ignore_index=True) if len(missing) else frame


def _label(frame: pd.DataFrame) -> list[str]:
    return [f"{r.arch}/{r.optimizer}/{r.strategy}/s{r.seed} {r.status}" for r in frame.itertuples()]


def compare(frame: pd.DataFrame, value: str, axis: str, a: str, b: str, over=(), log: bool = True) -> dict:
    """a vs b on `value`: the difference (of logs) per seed, averaged over the configurations `over`
    within a seed; only seeds where every run of both sides finished enter the test.

    Returns mean/low/high/n/p_value of the per-seed differences, their sd, the raw sides' means, the
    relative_gap of the raw pairs (0: bit-equal) and the unfinished runs of each side. Plain Python
    over the pairs (a few dozen rows): the page and the design's simulations call it thousands of
    times, and a dozen pandas operations each cost about 30 ms a call.
    """
    over, sides = list(over), frame[frame[axis].isin([a, b])]
    finished = (sides["status"] == "ok").to_numpy()
    raw = sides[value].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        values = np.where(finished & (raw > 0 if log else True), raw, np.nan)
    wide = _pairs(zip(*(sides[column].tolist() for column in over + ["seed"])), sides[axis].tolist(), values, a)
    components = max(1, len({key[:-1] for key in wide})) if over else 1
    keys = sorted(wide)
    pairs = np.array([wide[key] for key in keys], dtype=float).reshape(-1, 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        diffs = np.log(pairs[:, 0]) - np.log(pairs[:, 1]) if log else pairs[:, 0] - pairs[:, 1]
    by_seed: dict = {}
    for key, diff in zip(keys, diffs.tolist()):
        by_seed.setdefault(key[-1], []).append(diff)
    per_seed = {seed: _kahan_mean(found) for seed, found in by_seed.items()
                if sum(not math.isnan(d) for d in found) == components}
    kept = np.array([key[-1] in per_seed for key in keys], dtype=bool)
    complete = pairs[kept & ~np.isnan(pairs).any(axis=1)]
    differences = np.array(list(per_seed.values()), dtype=float)
    return {**mean_ci(differences), "p_value": _paired_p(differences), "confidence": 0.95,
            "sd": float(differences.std(ddof=1)) if len(differences) >= 2 else math.nan,
            "relative_gap": relative_gap(complete[:, 0], complete[:, 1]) if len(complete) else math.nan,
            "mean_a": float(complete[:, 0].mean()) if len(complete) else math.nan,
            "mean_b": float(complete[:, 1].mean()) if len(complete) else math.nan,
            "seeds": int(sides["seed"].nunique()), "components": components,
            "unfinished": {side: _label(sides[(sides[axis] == side) & ~finished]) if not finished.all() else []
                           for side in (a, b)}}


def _pairs(keys, sides: list, values: np.ndarray, a) -> dict:
    """{(configuration..., seed): [a's value, b's value]}, each the first usable value of its run(s)
    (NaN where none); rows with a missing key are left out."""
    wide: dict = {}
    for key, side, value in zip(keys, sides, values):
        if any(part is None or (isinstance(part, float) and math.isnan(part)) for part in key):
            continue
        slot = wide.setdefault(key, [math.nan, math.nan])
        column = 0 if side == a else 1
        if math.isnan(slot[column]):
            slot[column] = float(value)
    return wide


def _kahan_mean(values: list) -> float:
    """The mean of the non-NaN values, summed with compensation (as pandas' grouped mean is)."""
    total = compensation = 0.0
    count = 0
    for value in values:
        if math.isnan(value):
            continue
        count += 1
        adjusted = value - compensation
        running = total + adjusted
        compensation = (running - total) - adjusted
        total = running
    return total / count if count else math.nan


def decide(result: dict, direction: str, favoured: str | None) -> str:
    """The verdict: a claim whose favoured side has runs that did not finish cannot hold (nor can a
    two-sided one with any); otherwise the interval decides (stats.verdict)."""
    unfinished = result.get("unfinished", {})
    if (unfinished.get(favoured) if favoured else any(unfinished.values())):
        return DID_NOT_FINISH
    return verdict(result, direction)


def _unfinished_text(result: dict) -> str:
    parts = [f"{side} {len(runs)}: {', '.join(runs)}" for side, runs in result.get("unfinished", {}).items() if runs]
    return "; ".join(parts)


def _seeds_note(result: dict) -> str:
    """Says where the verdict rests on fewer seeds than were run."""
    if result["n"] < result.get("seeds", 0) and any(result.get("unfinished", {}).values()):
        return f"judged on {result['n']} of {result['seeds']} seeds (the others have a run that did not finish)"
    if result["n"] < 2 and not result.get("relative_gap", math.nan) <= 0:
        return f"{result['n']} seed(s): no interval, so no verdict either way"
    return ""


# --- rows ----------------------------------------------------------------------------------------
def _num(value, fmt: str = ".3g") -> str:
    return format(value, fmt) if value is not None and np.isfinite(value) else "n/a"


# unit -> (the column's name, from the log scale to the unit, format)
UNITS = {"ratio": ("x", math.exp, "x{:.3g}"), "percent": ("% change", lambda v: 100 * math.expm1(v), "{:+.1f} %"),
         "points": ("percentage points", lambda v: v, "{:.3g}")}


def _shown(value: float, unit: str) -> float:
    return UNITS[unit][1](value) if np.isfinite(value) else math.nan


def effect_text(result: dict, unit: str) -> str:
    """The estimate with its 95 % interval in the row's unit; bit-equal pairs say so instead."""
    fmt = UNITS[unit][2]
    if result.get("relative_gap", math.nan) == 0:
        return "bit-identical in every pair"
    shown = [_shown(result[key], unit) for key in ("mean", "low", "high")]
    if not np.isfinite(shown[0]):
        return "no finished pair"
    if result["n"] < 2 or not np.isfinite(shown[1]):
        return fmt.format(shown[0]) + " (no interval)"
    return f"{fmt.format(shown[0])} [95% CI {fmt.format(shown[1])}, {fmt.format(shown[2])}]"


@dataclass
class Row:
    """One comparison as the table shows it, before its family's correction and power are added.

    `offset` makes it a threshold test (the log-ratio minus the paper's figure); its spread then
    repeats its base comparison's (the pooled sd counts a spread once)."""
    claim: str
    group: dict
    comparison: str
    view: str
    measured: str
    result: dict
    unit: str
    replicate: str
    paper: str
    note: str = ""
    offset: float = 0.0
    decided: str = NOT_DISTINGUISHABLE
    direction: str = "different"

    @property
    def key(self) -> tuple:
        return self.claim, self.group.get("arch", "all"), self.comparison, self.view

    @property
    def family(self) -> str:
        return CONFIRMATORY if self.key in CONFIRMATORY_FAMILY else EXPLORATORY

    def tested(self, direction: str, favoured: str | None) -> "Row":
        """The verdict of its (threshold) test, and a note where it rests on fewer seeds than were run."""
        result = shifted(self.result, self.offset) if self.offset else self.result
        self.decided, self.direction = decide({**self.result, **result}, direction, favoured), direction
        self.note = "; ".join(part for part in (_seeds_note(self.result), self.note) if part)
        return self

    def record(self) -> dict:
        result = shifted(self.result, self.offset) if self.offset else self.result
        numbers = [_shown(self.result.get(key, math.nan), self.unit) for key in ("mean", "low", "high")]
        pool = "|".join(map(str, (self.group.get("regime"), self.family, self.claim[:3], self.view, self.replicate,
                                  self.group.get("arch"))))
        values = [self.claim, self.family, self.group.get("regime"), self.group.get("arch", "all"), self.comparison,
                  self.view, self.measured, *numbers, UNITS[self.unit][0], self.result.get("n", 0), self.replicate,
                  _unfinished_text(self.result), result.get("p_value", math.nan), math.nan, 0, math.nan, math.nan,
                  math.nan, self.decided, self.paper, self.note, self.result.get("sd", math.nan), pool,
                  result.get("mean", math.nan), self.direction, self.offset]
        return dict(zip(COLUMNS, values))


def _groups(frame: pd.DataFrame, by):
    for key, group in frame.groupby(list(by)):
        yield dict(zip(by, key if isinstance(key, tuple) else (key,))), group


def _levels(frame: pd.DataFrame):
    """An architecture's rows: its optimizers averaged within a seed, then each optimizer alone."""
    yield AVERAGED, frame, ["optimizer"], SEED_MEANS
    for optimizer, part in frame.groupby("optimizer"):
        yield optimizer, part, [], SEEDS


# --- (a) accumulation and the loss -----------------------------------------------------------------
def _training_loss_at(steps, budget: str, window: int) -> pd.DataFrame:
    """Equal steps: the mean of the last `window` records (every run has the same ones); equal samples or
    time: the mean over the last BUDGET_FRACTION of the budget every run of the architecture reaches."""
    by = ("regime", "arch")
    if budget == "step":
        return at_equal_budget(steps, "step", by=by, window=window)
    return over_budget_interval(steps, budget, "loss", by=by, fraction=BUDGET_FRACTION)


def _where(frame: pd.DataFrame, window: int) -> str:
    """Says which stretch of budget the numbers average, read from the aligned table."""
    budget, high = frame["budget"].iloc[0], frame["budget_value"].max()
    if budget == "step":
        return f"steps <= {_num(high, 'g')}, mean of the last {window} records"
    trained = {"samples_seen": "samples trained", "time": "training time (s)"}[budget]
    return (f"mean over {trained} {_num((1 - BUDGET_FRACTION) * high, 'g')}-{_num(high, 'g')}, the last "
            f"{BUDGET_FRACTION:.0%} of the common budget")


def accumulation_lowers_loss(steps_df, runs_df=None, window: int = LOSS_WINDOW) -> list[Row]:
    """(a) Training loss of standard over accumulation (above 1: accumulation lower); where the paper
    gives a factor, whether the architecture's averaged ratio reaches it."""
    rows = []
    compared = _analysed(with_every_run(steps_df, runs_df), ["standard", "accumulation"])
    for view, budget in BUDGET_VIEWS.items():
        for group, frame in _groups(_training_loss_at(compared, budget, window), ("regime", "arch")):
            factor = PAPER_ACCUMULATION_FACTOR.get(group["arch"])
            paper = f"about {factor:g}x lower" if factor else "lower (consistently)"
            for level, part, over, replicate in _levels(frame):
                result = compare(part, "loss", "strategy", "standard", "accumulation", over)
                measured = (f"train loss standard {_num(result['mean_a'])} vs accumulation {_num(result['mean_b'])} "
                            f"nats ({_where(part, window)}); standard/accumulation = {effect_text(result, 'ratio')}")
                rows.append(Row(ACCUMULATION_CLAIM, group, accumulation_comparison(level), view, measured, result,
                                "ratio", replicate, paper).tested("higher", "accumulation"))
                if factor and level == AVERAGED:
                    rows.append(Row(factor_claim(factor), group, accumulation_comparison(level, factor), view,
                                    measured, result, "ratio", replicate, paper,
                                    offset=math.log(factor)).tested("higher", "accumulation"))
    return rows


# --- (b) accumulation and memory: deterministic per configuration ----------------------------------
def per_configuration_growth(frame: pd.DataFrame, value: str, a: str = "accumulation",
                             b: str = "standard") -> pd.DataFrame:
    """Per optimizer: a's value over b's minus 1 (the worst pairing of seeds where it varies by seed),
    from every run that recorded one (a memory peak does not depend on whether training converged)."""
    sides = frame[frame["strategy"].isin([a, b])].dropna(subset=[value])
    per_config = sides.groupby(["optimizer", "strategy"])[value].agg(["max", "min"]).unstack("strategy")
    if per_config.empty or not {a, b} <= set(per_config["max"].columns):
        return pd.DataFrame(columns=["growth", "varies"])
    growth = per_config["max"][a] / per_config["min"][b] - 1
    varies = (per_config["max"] != per_config["min"]).any(axis=1)
    return pd.DataFrame({"growth": growth, "varies": varies}).dropna(subset=["growth"])


def bound_verdict(growth: pd.Series, margin: float) -> str:
    """holds if every configuration stays within `margin`, does not hold if any goes past it;
    identical if every configuration is exactly equal."""
    if growth.empty:
        return NOT_DISTINGUISHABLE
    if (growth == 0).all():
        return IDENTICAL
    return HOLDS if (growth <= margin).all() else DOES_NOT_HOLD


def bound_text(growth: pd.DataFrame, label: str) -> str:
    """"identical in every configuration", or the worst configuration and how many are identical."""
    if growth.empty:
        return f"{label}: no configuration recorded it on both strategies"
    if (growth["growth"] == 0).all():
        return f"{label}: identical in every configuration ({len(growth)})"
    worst, same = growth["growth"].idxmax(), int((growth["growth"] == 0).sum())
    varies = " (it varies by seed: the worst pairing taken)" if growth["varies"].any() else ""
    identical = f"; identical in {same} of {len(growth)} configurations" if same else ""
    return f"{label}: worst {100 * growth.loc[worst, 'growth']:+.1f} % ({worst}){identical}{varies}"


def accumulation_memory(runs_df, margin: float = MEMORY_MARGIN) -> list[Row]:
    """(b) Accumulation needs no more memory than standard (within `margin`), in every configuration."""
    rows = []
    compared = _analysed(runs_df, ["standard", "accumulation"])
    compared = compared.assign(peak_tensor_bytes=tensor_peak(compared))
    for metric, label in (("peak_tensor_bytes", PEAK_MEMORY), ("mem_activations", "activation bytes of one micro-batch")):
        for group, frame in _groups(compared, ("regime", "arch")):
            growth = per_configuration_growth(frame, metric)
            worst = growth["growth"].max() if len(growth) else math.nan
            result = {"mean": math.log1p(worst) if np.isfinite(worst) else math.nan, "low": math.nan,
                      "high": math.nan, "n": len(growth)}
            devices = ", ".join(sorted(frame["device"].dropna().unique()))
            row = Row(MEMORY_CLAIM, group, memory_comparison(label), "per configuration", bound_text(growth, label),
                      result, "percent", DETERMINISTIC, "no additional GPU memory",
                      "; ".join(p for p in (f"device: {devices}", _rss_context(frame)) if p))
            row.decided = bound_verdict(growth["growth"], margin) if frame[metric].notna().any() else NO_TENSOR_PEAK
            rows.append(row)
    return rows


def _rss_context(frame: pd.DataFrame) -> str:
    """The process's resident-set peak, said beside the verdict and never judged (it is mostly the runtime)."""
    rss = frame.get("peak_rss_bytes", pd.Series(dtype=float)).dropna()
    rss = rss if len(rss) else frame.loc[frame["device"] == "cpu", "peak_memory_bytes"].dropna()
    return f"process RSS peak (context, not judged): {_num(rss.mean() / 2**20)} MiB" if len(rss) else ""


# --- (c) Adam against each rival -------------------------------------------------------------------
def judged_loss(evals_df: pd.DataFrame, regime: str) -> str:
    """The tuned regime is judged on the held-out test split where the evaluations have it (its rates were
    chosen on validation); every other regime, and results without a test split, on validation."""
    has_test = "test_loss" in evals_df and evals_df.loc[evals_df["regime"] == regime, "test_loss"].notna().any()
    return "test_loss" if regime == "tuned" and has_test else "val_loss"


def scored_at_every_evaluation(evals_df: pd.DataFrame, regime: str) -> bool:
    """Whether every evaluation of the regime scores its judged split. Where not (the test split is scored
    at a run's end), only equal steps can read it: at equal time the budget falls between evaluations."""
    part = evals_df[(evals_df["regime"] == regime) & (evals_df["status"] == "ok")]
    return bool(part[judged_loss(evals_df, regime)].notna().all()) if len(part) else True


def _with_judged_loss(evals_df: pd.DataFrame) -> pd.DataFrame:
    split = evals_df["regime"].map({r: judged_loss(evals_df, r) for r in evals_df["regime"].unique()})
    test = evals_df["test_loss"] if "test_loss" in evals_df else np.nan
    return evals_df.assign(judged_loss=evals_df["val_loss"].where(split == "val_loss", test))


def adam_not_always_best(evals_df, runs_df=None) -> list[Row]:
    """(c) Per architecture and strategy, Adam against EACH other optimizer (none chosen from the data):
    the rival's loss over Adam's (below 0 %: the rival lower), at a budget point every run reaches."""
    by = ["regime", "arch", "strategy"]
    analysed = _with_judged_loss(_analysed(with_every_run(evals_df, runs_df)))
    regimes = sorted(analysed["regime"].unique())
    split = {regime: "test" if judged_loss(evals_df, regime) == "test_loss" else "validation" for regime in regimes}
    scored = {regime: scored_at_every_evaluation(evals_df, regime) for regime in regimes}
    rows = {(regime, view): [] for regime in regimes for view in SAME_BATCH_VIEWS}  # the page's order: by regime
    for view, budget in SAME_BATCH_VIEWS.items():  # every regime's groups read in one pass
        readable = analysed[analysed["regime"].map(scored) | (budget == "step")]
        if readable.empty:  # (a regime left out here: the claims page says so, from scored_at_every_evaluation)
            continue
        for group, frame in _groups(at_budget_point(readable, budget, "judged_loss", by=by), by):
            at = f"{split[group['regime']]} loss at {frame['budget'].iloc[0]} = {_num(frame['budget_value'].max(), 'g')}"
            for rival in ADAM_RIVALS:
                result = compare(frame, "judged_loss", "optimizer", rival, "adam")
                measured = (f"{rival} {_num(result['mean_a'])} vs adam {_num(result['mean_b'])} nats ({at}); "
                            f"{rival}/adam = {effect_text(result, 'percent')}")
                paper = ("beats adam" if rival in PAPER_BETTER_THAN_ADAM.get(group["arch"], ())
                         else "adam not always the best")
                rows[group["regime"], view].append(Row(ADAM_CLAIM, group, adam_comparison(rival, group["strategy"]),
                                                       view, measured, result, "percent", SEEDS, paper
                                                       ).tested("lower", rival))
    return [row for part in rows.values() for row in part]


# --- (d) checkpointing: loss (at equal steps only) and time ----------------------------------------
def _curve_difference_note(steps: pd.DataFrame) -> str:
    """Say from the data whether checkpointed and standard loss curves differ beyond rounding."""
    ok = steps[steps["status"] == "ok"]
    keys = ["regime", "arch", "optimizer", "seed", "step"]
    both = ok[ok.strategy == "standard"].merge(ok[ok.strategy == "checkpointing"], on=keys, suffixes=("_s", "_c"))
    if both.empty:
        return "no paired loss curves"
    gap = float(((both["loss_c"] - both["loss_s"]).abs() / both["loss_s"].abs()).max())
    if gap == 0:
        return (f"loss curves bit-identical over {len(both)} paired steps: checkpointing recomputes the same "
                "activations, so gradients are the same and it cannot change the loss")
    if gap < FLOAT_NOISE:
        return (f"loss curves differ by at most {gap:.1e} (relative): floating-point reordering in the recomputation, "
                "an artifact, not an effect on learning")
    return (f"loss curves differ by up to {gap:.2g} (relative), beyond rounding: at identical seeds the gradients "
            "should match, so this points to nondeterminism (e.g. re-drawn dropout), an artifact to fix")


def checkpointing_effects(runs_df, steps_df, window: int = LOSS_WINDOW) -> list[Row]:
    """(d) Checkpointing vs standard: the training loss at equal steps only (at equal time the slower
    run has taken fewer steps: that is its slowdown, which has rows of its own) and the time per step."""
    rows = []
    steps = _analysed(with_every_run(steps_df, runs_df), ["standard", "checkpointing"])
    for group, frame in _groups(_training_loss_at(steps, "step", window), ("regime", "arch")):
        direction = PAPER_CHECKPOINTING_LOSS.get(group["arch"])
        favoured = {"lower": "checkpointing", "higher": "standard"}.get(direction)
        why = _curve_difference_note(steps[(steps["regime"] == group["regime"]) & (steps["arch"] == group["arch"])])
        for level, part, over, replicate in _levels(frame):
            result = compare(part, "loss", "strategy", "checkpointing", "standard", over)
            rows.append(Row(CHECKPOINT_LOSS_CLAIM, group, checkpoint_loss_comparison(direction, level), PAPER_VIEW,
                            f"train loss change {effect_text(result, 'percent')} ({_where(part, window)})", result,
                            "percent", replicate, "improves ViT, severely degrades ModernBERT",
                            why).tested(direction or "different", favoured))
    for group, frame in _groups(_analysed(runs_df, ["standard", "checkpointing"]), ("regime", "arch")):
        for level, part, over, replicate in _levels(frame):
            result = compare(part, "mean_step_time_s", "strategy", "checkpointing", "standard", over)
            measured = (f"time per step {_num(1e3 * result['mean_b'])} ms standard vs "
                        f"{_num(1e3 * result['mean_a'])} ms checkpointing; change {effect_text(result, 'percent')}")
            comparison, paper = checkpoint_time_comparison(level), "training time up to +60%"
            rows += [Row(AT_MOST_CLAIM, group, comparison, "per step", measured, result, "percent", replicate, paper,
                         offset=math.log1p(PAPER_CHECKPOINTING_SLOWDOWN)).tested("lower", None),
                     Row("(d) checkpointing slows a step", group, comparison, "per step", measured, result, "percent",
                         replicate, paper).tested("higher", None)]
    return rows


# --- (e) utilization -------------------------------------------------------------------------------
def _range_p(parts: list[tuple[str, dict]]) -> float:
    """A range check is two one-sided tests (above the low end, below the high end): it holds only if both
    do, so its p is the larger (intersection-union); it fails on the side that fails."""
    failing = [p_from_interval(part) for decided, part in parts if decided == DOES_NOT_HOLD]
    return min(failing) if failing else max(p_from_interval(part) for _, part in parts)


def _seed_means(frame: pd.DataFrame, value: str) -> pd.Series:
    """The mean of `value` over a group's finished runs, per seed: the replicate of a per-architecture number."""
    return frame[frame["status"] == "ok"].groupby("seed")[value].mean().dropna()


def _in_range(result: dict, low: float, high: float) -> tuple[str, float]:
    """Both ends must hold, one failing end fails it; its p by _range_p."""
    parts = [(verdict(shifted(result, low), "higher"), shifted(result, low)),
             (verdict(shifted(result, high), "lower"), shifted(result, high))]
    verdicts = [v for v, _ in parts]
    decided = (DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else
               HOLDS if all(v == HOLDS for v in verdicts) else NOT_DISTINGUISHABLE)
    return decided, _range_p(parts)


def utilization_by_architecture(runs_df) -> list[Row]:
    """(e) GPU utilization per architecture vs the paper's ranges; vision vs language on the device measured."""
    rows, runs = [], _analysed(runs_df).assign(kind=lambda d: d["arch"].map(ARCH_KIND))
    for group, frame in _groups(runs, ("regime", "arch")):
        kind = ARCH_KIND.get(group["arch"])
        if kind not in PAPER_GPU_UTILIZATION:
            continue
        gpu = frame[frame["device"] == "gpu"]
        result = mean_ci(_seed_means(gpu, "mean_gpu_util_percent"))
        devices = ", ".join(sorted(frame["device"].dropna().unique()))
        row = Row(utilization_claim(kind), group, utilization_comparison(kind), "per run",
                  f"GPU utilization {effect_text(result, 'points')} %" if len(gpu) else f"no GPU runs (device: {devices})",
                  result, "points", RUN_MEANS, "vision 96-99 %, language 8-15 % GPU")
        row.decided, row.result["p_value"] = (_in_range(result, *PAPER_GPU_UTILIZATION[kind]) if len(gpu)
                                              else (NOT_CHECKABLE, math.nan))
        rows.append(row)
    for group, frame in _groups(runs, ("regime", "device")):
        value = "utilization_percent"
        difference = (_seed_means(frame[frame["kind"] == "vision"], value)
                      - _seed_means(frame[frame["kind"] == "language"], value)).dropna()
        result = {**mean_ci(difference.to_numpy()), "p_value": _paired_p(difference.to_numpy())}
        stand_in = "" if group["device"] == "gpu" else "CPU as a stand-in: the paper's claim is about the GPU"
        row = Row(f"(e) vision models use the {group['device']} more than language models", group,
                  "vision - language", "per run",
                  f"{group['device']} utilization difference {effect_text(result, 'points')} percentage points",
                  {**result, "sd": float(np.std(difference, ddof=1)) if len(difference) > 1 else math.nan},
                  "points", RUN_MEANS, "vision 96-99 % vs language 8-15 % GPU", stand_in)
        row.decided = verdict(result, "higher")
        rows.append(row)
    return rows


# --- families, correction and power ----------------------------------------------------------------
def corrected(table: pd.DataFrame) -> pd.DataFrame:
    """Holm-Bonferroni over each regime's confirmatory family (its tested rows: every row but the
    deterministic and the uncheckable; a row whose runs did not finish counts in the family's size
    and gets no adjusted p); exploratory rows are judged on their raw p at stats.ALPHA. Then each
    row's alpha, smallest detectable effect and, where not distinguishable, seeds needed (_with_power)."""
    if table.empty:
        return table
    table = table.reset_index(drop=True)
    tested = (table["replicate"] != DETERMINISTIC) & ~table["verdict"].isin([NOT_CHECKABLE, NO_TENSOR_PEAK])
    confirm, explore = tested & (table["family"] == CONFIRMATORY), tested & (table["family"] == EXPLORATORY)
    p = table["p_value"].where(table["verdict"] != DID_NOT_FINISH)
    families, registered = table[confirm].assign(p=p).groupby("regime"), _registered(table)
    table.loc[confirm, "family_size"] = families["claim"].transform(lambda g: max(len(g), registered))
    table.loc[confirm, "p_adjusted"] = families["p"].transform(lambda g: holm_within(g, registered))
    table.loc[confirm, "alpha"] = ALPHA / table.loc[confirm, "family_size"]  # Holm's first step
    table.loc[explore, "p_adjusted"] = p[explore]
    table.loc[explore, "alpha"] = ALPHA
    table.loc[tested, "verdict"] = [after_correction(v, q) for v, q in
                                    zip(table.loc[tested, "verdict"], table.loc[tested, "p_adjusted"])]
    return _with_power(table)


def _registered(table: pd.DataFrame) -> int:
    """The pre-registered family's size on the device the table measured: a comparison the data lacks
    (an architecture not run) still counts, untested, as the family was fixed before the data."""
    measured_gpu = table["claim"].str.startswith("(e)") & (table["verdict"] != NOT_CHECKABLE)
    return tested_family_size("gpu" if measured_gpu.any() else "cpu")


def holm_within(p_values: pd.Series, size: int) -> np.ndarray:
    """Holm over a family of `size` of which these are the comparisons present (the rest untested)."""
    padded = np.concatenate([p_values.to_numpy(dtype=float), np.ones(max(0, size - len(p_values)))])
    return holm(padded)[:len(p_values)]


def _pooled_sds(table: pd.DataFrame) -> pd.Series:
    """Per pool (one claim, view, kind of replicate and architecture within a family: the noise differs
    far more between architectures than between comparisons) the rows' seed-to-seed spreads pooled; a
    threshold test's spread is its base's, counted once; bit-identical rows have no spread to pool."""
    spreads = table[table["verdict"] != IDENTICAL].drop_duplicates(["pool", "arch", "sd", "n"])
    return spreads.groupby("pool").apply(lambda g: pooled_sd(g["sd"], g["n"]), include_groups=False)


def _with_power(table: pd.DataFrame) -> pd.DataFrame:
    """Each tested row's smallest effect detectable at stats.POWER (its pool's sd, its n, its alpha; in
    the row's unit, on the side the claim names, from its threshold for a threshold test) and, for a row not
    distinguishable, the seeds that would detect the effect it measured."""
    sds = _pooled_sds(table)
    tested = table["alpha"].notna() & (table["verdict"] != IDENTICAL)
    detectable, needed = [], []
    for row in table[tested].to_dict("records"):
        sd = sds.get(row["pool"], math.nan)
        detectable.append(_in_unit(_claimed_side(detectable_effect(sd, int(row["n"]), row["alpha"]), row), row["unit"]))
        undecided = row["verdict"] == NOT_DISTINGUISHABLE and np.isfinite(row["effect"])
        needed.append(seeds_needed(row["effect"], sd, row["alpha"]) if undecided else math.nan)
    table.loc[tested, "detectable"] = detectable
    table.loc[tested, "seeds_needed"] = needed
    return table


def _claimed_side(effect: float, row) -> float:
    """The detectable effect as a value of the row's estimate on the side the claim names: e.g. for
    "at most +60 %", the slowdowns below which the test would have confirmed it."""
    sign = {"lower": -1.0, "higher": 1.0}.get(row["direction"], 1.0)
    return row["threshold"] + sign * effect


def _in_unit(effect: float, unit: str) -> float:
    """A detectable effect on the log scale in the row's unit: a factor above 1 or a percentage change."""
    if not np.isfinite(effect):
        return math.nan
    return {"x": math.exp(effect), "% change": 100 * math.expm1(effect)}.get(unit, effect)


def check_claims(runs_df, steps_df, evals_df) -> pd.DataFrame:
    """Every claim, one row per comparison; regime "sweep" is left out (it picks learning rates)."""
    rows = (accumulation_lowers_loss(steps_df, runs_df) + accumulation_memory(runs_df)
            + adam_not_always_best(evals_df, runs_df)
            + checkpointing_effects(runs_df, steps_df) + utilization_by_architecture(runs_df))
    return corrected(pd.DataFrame([row.record() for row in rows], columns=COLUMNS))


# --- the findings: from the confirmatory rows only -------------------------------------------------
def _qualifier(row) -> str:
    """What tells a confirmatory row from the others of its architecture, in a word or two."""
    claim, comparison = row["claim"], row["comparison"]
    if claim.startswith(ADAM_CLAIM):
        return comparison.split(",")[0].replace("adam vs ", "")
    if " at least " in claim:
        return "at least " + claim.rsplit(" ", 1)[-1]
    if claim == AT_MOST_CLAIM:
        return f"time at most +{PAPER_CHECKPOINTING_SLOWDOWN:.0%}"
    if claim == CHECKPOINT_LOSS_CLAIM:
        return "loss"
    return ""


def _estimate(row) -> str:
    """"x1.03 [1.02, 1.04]" or "+0.1 % [-1.3, +1.5]"; a deterministic row its worst configuration."""
    if row["verdict"] == IDENTICAL:
        return ""
    if row["replicate"] == DETERMINISTIC:
        return row["measured"].split(": ", 1)[-1].split(";")[0]
    unit = {"x": "x{:.3g}", "% change": "{:+.1f}"}.get(row["unit"], "{:.3g}")
    bounds = (unit.replace("x", "", 1).format(row["low"]), unit.replace("x", "", 1).format(row["high"]))
    interval = f" [{bounds[0]}, {bounds[1]}]" if np.isfinite(row["low"]) else ""
    suffix = " %" if row["unit"] == "% change" else ""
    return f"{unit.format(row['estimate'])}{suffix}{interval}" if np.isfinite(row["estimate"]) else "n/a"


def _said(row) -> str:
    words = {NOT_DISTINGUISHABLE: "undecided"}.get(row["verdict"], row["verdict"])
    return " ".join(part for part in (_qualifier(row), _estimate(row), words) if part)


def _detectable(rows: pd.DataFrame) -> str:
    """The smallest effect each architecture's first tested row could have seen; for a bound ("at most
    +60 %"), the true values for which its test would have confirmed the bound."""
    tested = rows.dropna(subset=["detectable"]).drop_duplicates("arch")
    fmt = lambda r: f"x{r['detectable']:.3g}" if r["unit"] == "x" else f"{r['detectable']:+.1f} %"  # noqa: E731
    per_arch = lambda part: ", ".join(f"{fmt(r)} ({r['arch']})" for _, r in part.iterrows())  # noqa: E731
    bounds = tested["claim"].str.contains(" at most ")
    said = []
    if (~bounds).any():
        said.append(f"it could have seen {per_arch(tested[~bounds])}")
    for direction, side in (("lower", "below"), ("higher", "above")):
        these = tested[bounds & (tested["direction"] == direction)]
        if not these.empty:
            said.append(f"it would have confirmed the bound for a true change {side} {per_arch(these)}")
    return "".join(f"; {part}" for part in said)


def finding(table: pd.DataFrame, letter: str, regime: str) -> str:
    """One sentence per claim and regime: the paper's claim, then per architecture the confirmatory
    estimates and verdicts, and the smallest effect the design could have seen."""
    rows = table[(table["family"] == CONFIRMATORY) & table["claim"].str.startswith(letter)
                 & (table["regime"] == regime) & (table["verdict"] != NOT_CHECKABLE)]
    says = f"**{letter}** The paper says {PAPER_SAYS[letter]}."
    if rows.empty:
        checkable = table["claim"].str.startswith(letter) & (table["regime"] == regime)
        return says + (f" Here: {NOT_CHECKABLE}." if checkable.any() else " This regime has no runs it compares.")
    views = " and ".join(dict.fromkeys(rows["budget_view"]))
    parts = "; ".join(f"{arch} " + ", ".join(_said(row) for _, row in part.iterrows())
                      for arch, part in rows.groupby("arch", sort=False))
    return f"{says} Here ({views}): {parts}{_detectable(rows)}."


def findings(table: pd.DataFrame, regime: str) -> list[str]:
    """finding() for each of the paper's claims, in the paper's order."""
    return [finding(table, letter, regime) for letter in PAPER_SAYS]


def rate_sensitivity(table: pd.DataFrame, claim: str = "(a)") -> str:
    """How claim (a)'s verdicts move between the shared rate and the rate tuned at the standard batch
    (accumulation is not tuned at its own batch): the same comparison in both regimes, side by side."""
    rows = table[table["claim"].str.startswith(claim) & table["regime"].isin(["shared", "tuned"])]
    keys = ["claim", "arch", "comparison", "budget_view"]
    paired = rows.pivot_table(index=keys, columns="regime", values="verdict", aggfunc="first").dropna()
    if paired.empty or not {"shared", "tuned"} <= set(paired.columns):
        return (f"Claim {claim} was not run in both regimes here, so its sensitivity to the learning rate "
                "(accumulation takes the rate tuned at the standard batch) is not shown.")
    moved = paired[paired["shared"] != paired["tuned"]]
    text = (f"Sensitivity to the rate: accumulation takes the rate tuned at the standard batch, not one of its own. "
            f"Of claim {claim}'s {len(paired)} comparisons made in both regimes (the shared default rate and "
            f"the tuned rate), {len(paired) - len(moved)} reach the same verdict in both")
    if moved.empty:
        return text + "."
    changes = "; ".join(f"{arch}, {view}, {comparison}: {row['shared']} (shared) -> {row['tuned']} (tuned)"
                        for (_, arch, comparison, view), row in moved.iterrows())
    return text + f", and {len(moved)} move: {changes}."


def family_text() -> str:
    """The families as the page and the methods state them, from the same definitions the rows use."""
    confirmatory = "; ".join(f"{claim}, {arch} ({comparison}; {view})" for claim, arch, comparison, view
                             in CONFIRMATORY_FAMILY)
    exploratory = "; ".join(f"{letter} {text}" for letter, text in EXPLORATORY_FAMILIES.items())
    return (f"Confirmatory (one family per regime, Holm-corrected): {confirmatory}. "
            f"Exploratory (raw p at {ALPHA:g}, uncorrected, never a finding): {exploratory}.")


def how_verdicts_are_reached() -> str:
    """The claims page's definitions, from the constants the code uses (a test checks them)."""
    return f"""How a verdict is reached
: runs are paired on seed (same architecture, optimizer and seed, differing only in what is compared);
  a row about an architecture averages its five optimizers within a seed first, so the replicate is
  always the seed. The per-seed differences (of logs: losses, memory and time are ratios) give a mean,
  a 95 % t-interval and a paired t-test's p-value. The *confirmatory* family (the paper's claims as it
  states them, fixed in code before the data) is Holm-corrected within each regime; *exploratory* rows
  show their raw p-value at {ALPHA:g} and are never a finding. A quantity that is the same for every
  seed (a tensor peak) is judged per configuration: within the margin in every one, or not.

holds
: the (adjusted) p-value is below {ALPHA:g} and the interval lies on the side the paper claims.

does not hold
: the (adjusted) p-value is below {ALPHA:g} and the interval lies on the other side.

identical
: the two sides are equal within floating-point noise in every pair (relative difference below
  {FLOAT_TOLERANCE:g}): the same computation, which more seeds cannot separate.

did not finish
: a run on the side the claim favours diverged or failed, so the claim cannot hold there; a verdict
  that rests on fewer seeds than were run says so in its note.

not distinguishable at this number of seeds
: not decisive; the row says the smallest effect its design detects with {POWER:.0%} power at its own
  alpha (Holm's first step for the confirmatory family) and how many seeds its measured effect needs.

cannot be checked here
: the measurement the claim is about does not exist in this profile (GPU utilization without a GPU).

The budget views
: *equal steps* is the paper's view: each run's training loss is the mean of its
  last {LOSS_WINDOW} records. *equal samples* and *equal time* average each run's loss curve over
  the last {BUDGET_FRACTION:.0%} of the budget every run reaches, on what it had trained on before each
  record.
  Validation is read at one budget point every run reaches, interpolated between evaluations."""


# --- the tables the claims page shows ----------------------------------------------------------------
SHOWN = {"regime": "regime", "claim": "claim", "arch": "architecture", "comparison": "comparison", "budget_view": "budget view",
         "estimate_text": "estimate [95 % CI]", "measured": "measured", "replicate": "replicate (n)",
         "p_shown": "p (adjusted where confirmatory)", "detectable_text": "could have seen",
         "seeds_text": "seeds it needs", "verdict": "verdict", "paper": "the paper says", "note": "note"}


def _detectable_shown(row) -> str:
    if not np.isfinite(row["detectable"]):
        return ""
    return f"x{row['detectable']:.3g}" if row["unit"] == "x" else f"{row['detectable']:+.1f} %" \
        if row["unit"] == "% change" else f"{row['detectable']:.3g} {row['unit']}"


def shown_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows as the page shows them: the estimate with its interval (a deterministic row its worst
    configuration), the p-value the verdict used, the effect the design could have seen and, where
    undecided, the seeds that would decide it."""
    if table.empty:
        return table.assign(**{column: [] for column in SHOWN if column not in table})
    p_shown = table["p_adjusted"].where(table["family"] == CONFIRMATORY, table["p_value"])
    return table.assign(
        estimate_text=[_estimate(row) for _, row in table.iterrows()],
        replicate=[f"{r} ({n})" if r != DETERMINISTIC else r for r, n in zip(table["replicate"], table["n"])],
        p_shown=[f"{p:.2g}" if np.isfinite(p) else "" for p in p_shown.astype(float)],
        detectable_text=[_detectable_shown(row) for _, row in table.iterrows()],
        seeds_text=[f"{int(s)}" if np.isfinite(s) and s <= MOST_SEEDS else (f"more than {MOST_SEEDS}"
                    if np.isfinite(s) else "") for s in table["seeds_needed"].astype(float)],
    )
