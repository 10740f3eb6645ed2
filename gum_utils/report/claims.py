"""The source paper's claims, each checked against our tables: one row per claim and comparison.

Every number and verdict below is computed from the data; the paper's value is quoted beside it,
never used to decide. Ratios are compared on the log scale, so a pair of runs counts the same
whatever its loss scale. Each claim is a family of comparisons fixed here in code before any data
is read (FAMILIES: which pairs, at which budgets); its p-values are adjusted by Holm-Bonferroni within
the claim and regime, and a row holds only where its adjusted p-value is below stats.ALPHA (the
interval gives the direction). Imports no torch.
"""

import math

import numpy as np
import pandas as pd

from ..archs import REGISTRY as ARCHS
from ..optim import STUDY_OPTIMIZERS as OPTIMIZERS
from .stats import (DOES_NOT_HOLD, HOLDS, IDENTICAL, after_correction, combine, holm, mean_ci, p_from_interval,
                    paired_difference, relative_gap, shifted, verdict)
from .tables import at_budget_point, at_equal_budget, over_budget_interval

LOSS_WINDOW = 10  # training records averaged at equal steps (every run has the same records there)
BUDGET_FRACTION = 0.1  # at equal samples / time: the training loss averaged over the last 10 % of the common budget
BUDGET_VIEWS = {"equal steps": "step", "equal samples": "samples_seen", "equal time": "time"}  # the paper's first
# Runs of one strategy see the same samples per step, so for them equal steps are equal samples.
SAME_BATCH_VIEWS = {"equal steps (= equal samples)": "step", "equal time": "time"}
MEMORY_MARGIN = 0.05  # "no more memory" holds if accumulation stays within +5% of standard
FLOAT_NOISE = 1e-3  # relative loss-curve differences below this are floating-point, not learning
PAPER_ACCUMULATION_FACTOR = {"nanovlm": 10.0, "llama": 4.0}
PAPER_CHECKPOINTING_LOSS = {"vit": "lower", "modernbert": "higher"}  # elsewhere: "architecture-dependent"
PAPER_CHECKPOINTING_SLOWDOWN = 0.60
ARCH_KIND = {arch.name: arch.kind for arch in ARCHS.values()}
PAPER_GPU_UTILIZATION = {"vision": (96.0, 99.0), "language": (8.0, 15.0)}
NOT_CHECKABLE = "cannot be checked here: no GPU measurements"
NO_TENSOR_PEAK = "cannot be checked here: no tensor-level peak recorded"
ADAM_RIVALS = tuple(name for name in OPTIMIZERS if name != "adam")  # (c) compares Adam with each, none picked
FAMILY = ["claim", "regime"]  # Holm-Bonferroni runs within each claim and regime
# What each claim's family holds, fixed before the data (the page and the methods quote it).
FAMILIES = {
    "(a)": "accumulation vs standard per architecture, at equal steps, equal samples and equal time, paired on "
           "optimizer and seed; where the paper gives a factor, a second family asks whether it is reached",
    "(b)": "accumulation vs standard per architecture, activation bytes and peak tensor memory, paired on "
           "optimizer and seed",
    "(c)": "Adam vs each other optimizer (" + ", ".join(ADAM_RIVALS) + ") per architecture and strategy, at equal "
           "steps and equal time, paired on seed",
    "(d)": "checkpointing vs standard per architecture: training loss at equal steps and equal time; time per "
           "step (slower; by at most the paper's figure), paired on optimizer and seed",
    "(e)": "utilization per architecture against the paper's range; vision vs language per device, paired on "
           "optimizer, strategy and seed",
}
PAPER_SAYS = {
    "(a)": "gradient accumulation lowers the training loss (about 4x on Llama, 10x on nanoVLM)",
    "(b)": "gradient accumulation needs no additional GPU memory",
    "(c)": "Adam is not always the best optimizer (Adadelta and SGD beat it on ModernBERT and Llama)",
    "(d)": "gradient checkpointing changes the loss (improves ViT, degrades ModernBERT) and costs up to 60 % time",
    "(e)": "GPU utilization depends on the architecture (vision 96-99 %, language 8-15 %)",
}
COLUMNS = ["claim", "regime", "arch", "comparison", "budget_view", "measured", "estimate", "low", "high", "unit",
           "n", "p_value", "p_adjusted", "family_size", "verdict", "paper", "note"]


def _analysed(frame: pd.DataFrame, strategies=None) -> pd.DataFrame:
    """The rows a claim looks at: sweep runs choose learning rates and test no claim."""
    keep = frame["regime"] != "sweep"
    return frame[keep & frame["strategy"].isin(strategies)] if strategies else frame[keep]


def _groups(frame: pd.DataFrame, by):
    for key, group in frame.groupby(list(by)):
        yield dict(zip(by, key)), group


def _pairs(frame, value: str, axis: str, a: str, b: str, keys) -> tuple[pd.Series, pd.Series]:
    """`value` of the ok runs with axis == a and axis == b, indexed by `keys` so they pair up."""
    ok = frame[frame["status"] == "ok"]
    side = lambda name: ok[ok[axis] == name].groupby(list(keys))[value].mean()  # noqa: E731
    return side(a), side(b)


def _keys(by, axis: str) -> list[str]:
    """Pair on whatever the group leaves free: e.g. by arch, strategies paired per optimizer and seed."""
    return [key for key in ("arch", "optimizer", "strategy", "seed") if key not in by and key != axis]


def _log_ratio(a: pd.Series, b: pd.Series) -> dict:
    """The paired log ratio; `identical` is judged on the values themselves, not on their logs."""
    result = paired_difference(np.log(a.where(a > 0)), np.log(b.where(b > 0)))
    both = pd.concat([a, b], axis=1, join="inner").dropna()
    return {**result, "relative_gap": relative_gap(both.iloc[:, 0], both.iloc[:, 1])}


def _num(value, fmt: str = ".3g") -> str:
    return format(value, fmt) if value is not None and np.isfinite(value) else "n/a"


def _interval(result: dict, show=lambda v: v, fmt: str = ".3g") -> str:
    shown = [_num(show(result[key]), fmt) for key in ("mean", "low", "high")]
    return f"{shown[0]} [95% CI {shown[1]}, {shown[2]}]" if result["n"] >= 2 else f"{shown[0]} (no interval)"


def _pct(result: dict) -> str:  # a log ratio shown as a percentage change
    return _interval(result, lambda v: 100 * math.expm1(v), "+.1f") + " %"


def _left_out(frame: pd.DataFrame) -> list[str]:
    bad = frame[frame["status"] != "ok"].drop_duplicates("run")
    return ["left out (not ok): " + ", ".join(f"{r.optimizer}/{r.strategy}/s{r.seed} {r.status}"
                                              for r in bad.itertuples())] if len(bad) else []


def _note(frame: pd.DataFrame, result: dict, *extra: str, left_out=None) -> str:
    parts = list(_left_out(frame) if left_out is None else left_out)
    if result["n"] < 2 and not result.get("relative_gap", math.nan) <= 0:
        parts.append(f"{result['n']} pair(s): no interval, so no verdict either way")
    return "; ".join(parts + [e for e in extra if e])


def _row(claim, group, comparison, view, measured, numbers, unit, result, decided, paper, note) -> dict:
    """One comparison; its p-value is the test's (or the interval's), adjusted later with its family."""
    estimate, low, high = numbers
    p = result["p_value"] if "p_value" in result else p_from_interval(result) if "mean" in result else math.nan
    return dict(zip(COLUMNS, [claim, group.get("regime"), group.get("arch", "all"), comparison, view, measured,
                              estimate, low, high, unit, result["n"], p, math.nan, 0, decided, paper, note]))


def corrected(table: pd.DataFrame) -> pd.DataFrame:
    """Holm-Bonferroni within each claim and regime: p_adjusted, the family's size, and verdicts that a
    family-wise error rate of stats.ALPHA allows (a decisive row whose adjusted p is not below it is not)."""
    if table.empty:
        return table
    families = table.groupby(FAMILY, dropna=False, sort=False)
    table = table.assign(family_size=families["claim"].transform("size"),
                         p_adjusted=families["p_value"].transform(holm))
    return table.assign(verdict=[after_correction(v, p) for v, p in zip(table["verdict"], table["p_adjusted"])])


def _numbers(result: dict, show=lambda v: v) -> tuple:
    """(estimate, low, high) for the table's numeric columns, on the scale the row reports."""
    return tuple(show(result[key]) if np.isfinite(result[key]) else math.nan for key in ("mean", "low", "high"))


def _as_ratio(result: dict) -> tuple:
    return _numbers(result, math.exp)


def _as_percent(result: dict) -> tuple:  # a log ratio as a percentage change
    return _numbers(result, lambda v: 100 * math.expm1(v))


def _paired_by(by, axis: str) -> str:
    return "paired by " + ", ".join(_keys(by, axis))


def _training_loss_at(steps, budget: str, by, window: int) -> pd.DataFrame:
    """Equal steps: the mean of the last `window` records (every run has the same ones); equal samples or
    time: the mean over the last BUDGET_FRACTION of the common budget, on what each record had trained on."""
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


def accumulation_lowers_loss(steps_df, by=("regime", "arch"), window: int = LOSS_WINDOW) -> pd.DataFrame:
    """(a) Training loss of accumulation vs standard, at equal steps, equal samples and equal time."""
    rows, claim = [], "(a) gradient accumulation lowers training loss"
    compared = _analysed(steps_df, ["standard", "accumulation"])
    for view, budget in BUDGET_VIEWS.items():
        for group, frame in _groups(_training_loss_at(compared, budget, by, window), by):
            standard, accumulated = _pairs(frame, "loss", "strategy", "standard", "accumulation", _keys(by, "strategy"))
            ratio = _log_ratio(standard, accumulated)  # > 0: accumulation lower
            measured = (f"train loss standard {_num(standard.mean())} vs accumulation {_num(accumulated.mean())} "
                        f"nats ({_where(frame, window)}); standard/accumulation = x{_interval(ratio, math.exp)}")
            factor = PAPER_ACCUMULATION_FACTOR.get(group.get("arch"))
            paper = f"about {factor:g}x lower" if factor else "lower (consistently)"
            # the sign of the effect, then (where the paper gives one) its size
            checks = [(claim, ratio)] + ([(claim + f" at least {factor:g}x", shifted(ratio, math.log(factor)))]
                                         if factor else [])
            for name, tested in checks:
                rows.append(_row(name, group, f"accumulation vs standard, {_paired_by(by, 'strategy')}", view,
                                 measured, _as_ratio(ratio), "x (standard/accumulation)", tested,
                                 verdict(tested, "higher"), paper, _note(frame, ratio)))
    return corrected(pd.DataFrame(rows, columns=COLUMNS))


def tensor_peak(runs_df: pd.DataFrame) -> pd.Series:
    """Each run's peak of live tensor bytes: torch.cuda.max_memory_allocated on a GPU (peak_memory_bytes in
    older results), the allocator-level CPU tensor peak on the CPU; NaN where the run recorded none."""
    gpu = runs_df["device"] == "gpu"
    cuda = runs_df.get("cuda_max_allocated_bytes", pd.Series(np.nan, index=runs_df.index))
    cuda = cuda.fillna(runs_df["peak_memory_bytes"].where(gpu))
    cpu = runs_df.get("cpu_tensor_peak_bytes", pd.Series(np.nan, index=runs_df.index))
    return cuda.where(gpu, cpu).astype(float)


def _rss_context(frame: pd.DataFrame) -> str:
    """The process's resident-set peak, said beside the verdict and never judged (it is mostly the runtime)."""
    rss = frame.get("peak_rss_bytes", pd.Series(dtype=float)).dropna()
    rss = rss if len(rss) else frame.loc[frame["device"] == "cpu", "peak_memory_bytes"].dropna()
    return f"process RSS peak (context, not judged): {_num(rss.mean() / 2**20)} MiB" if len(rss) else ""


def accumulation_memory(runs_df, by=("regime", "arch"), margin: float = MEMORY_MARGIN) -> pd.DataFrame:
    """(b) Accumulation needs no more memory than standard (within `margin`), judged on tensor bytes."""
    rows = []
    compared = _analysed(runs_df, ["standard", "accumulation"])
    compared = compared.assign(peak_tensor_bytes=tensor_peak(compared))
    measures = (("mem_activations", "activation bytes of one micro-batch"),
                ("peak_tensor_bytes", "peak tensor memory"))
    for metric, label in measures:
        for group, frame in _groups(compared, by):
            accumulated, standard = _pairs(frame, metric, "strategy", "accumulation", "standard", _keys(by, "strategy"))
            growth = _log_ratio(accumulated, standard)
            devices = ", ".join(sorted(frame["device"].dropna().unique()))
            measured = (f"{label}: accumulation {_num(accumulated.mean() / 2**20)} MiB vs standard "
                        f"{_num(standard.mean() / 2**20)} MiB; change {_pct(growth)}")
            tested = shifted(growth, math.log1p(margin))
            decided = verdict(tested, "lower") if frame[metric].notna().any() else NO_TENSOR_PEAK
            rows.append(_row("(b) accumulation needs no more memory", group, f"{label}, accumulation vs standard "
                             f"(within +{margin:.0%}), {_paired_by(by, 'strategy')}", "per run", measured,
                             _as_percent(growth), "% change", tested, decided, "no additional GPU memory",
                             _note(frame, growth, f"device: {devices}", _rss_context(frame))))
    return corrected(pd.DataFrame(rows, columns=COLUMNS))


def judged_loss(evals_df: pd.DataFrame, regime: str) -> str:
    """The tuned regime is judged on the held-out test split where the evaluations have it (its rates were
    chosen on validation); every other regime, and results without a test split, on validation."""
    has_test = "test_loss" in evals_df and evals_df.loc[evals_df["regime"] == regime, "test_loss"].notna().any()
    return "test_loss" if regime == "tuned" and has_test else "val_loss"


def _with_judged_loss(evals_df: pd.DataFrame) -> pd.DataFrame:
    """A `judged_loss` column: each regime's loss of judged_loss, and `judged_split` naming it."""
    split = evals_df["regime"].map({r: judged_loss(evals_df, r) for r in evals_df["regime"].unique()})
    test = evals_df["test_loss"] if "test_loss" in evals_df else np.nan
    return evals_df.assign(judged_loss=evals_df["val_loss"].where(split == "val_loss", test), judged_split=split)


def adam_not_always_best(evals_df, by=("regime", "arch", "strategy")) -> pd.DataFrame:
    """(c) Per architecture and strategy, Adam against EACH other optimizer (ADAM_RIVALS, none chosen from the
    data), paired on seed, at one budget point every run reaches (interpolated between evaluations)."""
    rows, claim, by = [], "(c) Adam is not always the best optimizer", list(by)
    analysed = _with_judged_loss(_analysed(evals_df))
    splits = analysed.groupby("regime")["judged_split"].first()
    for view, budget in SAME_BATCH_VIEWS.items():
        aligned = at_budget_point(analysed, budget, "judged_loss", by=by)
        ok = aligned[aligned["status"] == "ok"]
        table = ok.groupby(by + _keys(by, "optimizer") + ["optimizer"])["judged_loss"].mean().unstack("optimizer")
        losses = {key: part.droplevel(by) for key, part in table.groupby(level=by)}
        for group, frame in _groups(aligned, by):
            cell = losses.get(tuple(group.values()), pd.DataFrame())
            rows.extend(_adam_rows(claim, group, frame, view, splits[group["regime"]], cell))
    table = corrected(pd.DataFrame(rows, columns=COLUMNS))
    return pd.concat([table, _anywhere(table, claim)], ignore_index=True)


def _adam_rows(claim, group, frame, view, metric: str, losses: pd.DataFrame) -> list[dict]:
    """One row per rival: losses holds one column per optimizer, one row per seed of this cell."""
    split = "test" if metric == "test_loss" else "validation"
    at = f"{split} loss at {frame['budget'].iloc[0]} = {_num(frame['budget_value'].max(), 'g')}, interpolated"
    rows, left_out = [], _left_out(frame)
    for rival in ADAM_RIVALS:
        adam, other = (losses[name] if name in losses else pd.Series(dtype=float) for name in ("adam", rival))
        diff = paired_difference(adam, other)  # > 0: Adam worse than this rival
        measured = f"adam {_num(adam.mean())} vs {rival} {_num(other.mean())} nats ({at}); difference {_interval(diff)}"
        rows.append(_row(claim, group, f"adam vs {rival}, strategy {group.get('strategy')}, paired by seed", view,
                         measured, _numbers(diff), "nats (adam - other)", diff, verdict(diff, "higher"),
                         "Adadelta and SGD beat Adam on ModernBERT and Llama", _note(frame, diff, left_out=left_out)))
    return rows


def _anywhere(table: pd.DataFrame, claim: str) -> pd.DataFrame:
    """Per regime and view: holds only where an adjusted comparison holds (Holm keeps the family-wise rate)."""
    rows = []
    for (regime, view), part in table.groupby(["regime", "budget_view"], sort=False):
        holding = int((part["verdict"] == HOLDS).sum())
        rows.append(_row(claim + " (anywhere)", {"regime": regime}, f"any of the {len(part)} comparisons above", view,
                         f"{holding} of {len(part)} comparisons hold after Holm correction", (math.nan,) * 3, "",
                         {"n": int(part["n"].sum())}, combine(part["verdict"], "any"), "not always superior", ""))
    summary = pd.DataFrame(rows, columns=COLUMNS)
    sizes = table.groupby("regime")["claim"].size()
    lowest = table.groupby(["regime", "budget_view"])["p_adjusted"].min()
    return summary.assign(family_size=summary["regime"].map(sizes).fillna(0).astype(int),
                          p_adjusted=[lowest.get((r, v), math.nan) for r, v in
                                      zip(summary["regime"], summary["budget_view"])])


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


def checkpointing_effects(runs_df, steps_df, by=("regime", "arch"), window: int = LOSS_WINDOW) -> pd.DataFrame:
    """(d) Checkpointing vs standard: training loss at equal steps (same batch) and time per step."""
    rows, keys = [], _keys(by, "strategy")
    steps = _analysed(steps_df, ["standard", "checkpointing"])
    for view, budget in SAME_BATCH_VIEWS.items():
        for group, frame in _groups(_training_loss_at(steps, budget, by, window), by):
            standard, checkpointed = _pairs(frame, "loss", "strategy", "standard", "checkpointing", keys)
            change = _log_ratio(checkpointed, standard)
            direction = PAPER_CHECKPOINTING_LOSS.get(group.get("arch"), "different")
            curves = steps.merge(pd.DataFrame([group]), on=list(by))
            why = (_curve_difference_note(curves) if budget == "step" else
                   "at equal time the slower checkpointed run has taken fewer steps")
            rows.append(_row("(d) checkpointing changes the loss", group,
                             f"checkpointing vs standard ({direction}), {_paired_by(by, 'strategy')}", view,
                             f"train loss change {_pct(change)} ({_where(frame, window)})", _as_percent(change),
                             "% change", change, verdict(change, direction),
                             "improves ViT, severely degrades ModernBERT", _note(frame, change, why)))
    runs = _analysed(runs_df, ["standard", "checkpointing"])
    for group, frame in _groups(runs, by):
        standard, checkpointed = _pairs(frame, "mean_step_time_s", "strategy", "standard", "checkpointing", keys)
        slowdown = _log_ratio(checkpointed, standard)
        measured = (f"time per step {_num(1e3 * standard.mean())} ms standard vs {_num(1e3 * checkpointed.mean())} ms "
                    f"checkpointing; change {_pct(slowdown)}")
        at_most = shifted(slowdown, math.log1p(PAPER_CHECKPOINTING_SLOWDOWN))
        for claim, tested, direction in (("(d) checkpointing slows each step", slowdown, "higher"),
                                         (f"(d) checkpointing slows each step by at most "
                                          f"{PAPER_CHECKPOINTING_SLOWDOWN:.0%}", at_most, "lower")):
            rows.append(_row(claim, group, f"checkpointing vs standard, {_paired_by(by, 'strategy')}", "per step",
                             measured, _as_percent(slowdown), "% change", tested, verdict(tested, direction),
                             "training time up to +60%", _note(frame, slowdown)))
    return corrected(pd.DataFrame(rows, columns=COLUMNS))


def _range_p(parts: list[tuple[str, dict]]) -> float:
    """A range check is two one-sided tests (above the low end, below the high end): it holds only if both
    do, so its p is the larger (intersection-union); it fails on the side that fails."""
    failing = [p_from_interval(part) for decided, part in parts if decided == DOES_NOT_HOLD]
    return min(failing) if failing else max(p_from_interval(part) for _, part in parts)


def utilization_by_architecture(runs_df, by=("regime",)) -> pd.DataFrame:
    """(e) GPU utilization per architecture vs the paper's ranges; vision vs language on the device measured."""
    rows, runs = [], _analysed(runs_df).assign(kind=lambda d: d["arch"].map(ARCH_KIND))
    for group, frame in _groups(runs, list(by) + ["arch"]):
        kind = ARCH_KIND.get(group["arch"], "unknown")
        low, high = PAPER_GPU_UTILIZATION.get(kind, (math.nan, math.nan))
        gpu = frame[(frame["device"] == "gpu") & (frame["status"] == "ok")]
        measured_on = gpu if len(gpu) else frame[frame["status"] == "ok"]
        result = mean_ci(measured_on["mean_gpu_util_percent" if len(gpu) else "mean_cpu_percent"])
        parts = [(verdict(shifted(result, low), "higher"), shifted(result, low)),
                 (verdict(shifted(result, high), "lower"), shifted(result, high))]
        decided = combine([v for v, _ in parts]) if len(gpu) else NOT_CHECKABLE
        tested = {**result, "p_value": _range_p(parts) if len(gpu) else math.nan}
        devices = ", ".join(sorted(frame["device"].dropna().unique()))
        measured = (f"GPU utilization {_interval(result)} %" if len(gpu) else
                    f"no GPU runs (device: {devices}); CPU utilization {_interval(result)} % of one core")
        rows.append(_row(f"(e) {kind} model GPU utilization in the paper's range", group, f"{kind}: {low:g}-{high:g} %",
                         "per run", measured, _numbers(result), "%", tested, decided,
                         "vision 96-99 %, language 8-15 % GPU", _note(frame, result)))
    for group, frame in _groups(runs, list(by) + ["device"]):
        vision, language = _pairs(frame, "utilization_percent", "kind", "vision", "language",
                                  ["optimizer", "strategy", "seed"])
        diff = paired_difference(vision, language)
        stand_in = "" if group["device"] == "gpu" else "CPU as a stand-in: the paper's claim is about the GPU"
        rows.append(_row(f"(e) vision models use the {group['device']} more than language models", group,
                         "vision - language, paired by optimizer, strategy, seed", "per run",
                         f"{group['device']} utilization difference {_interval(diff)} percentage points",
                         _numbers(diff), "percentage points", diff,
                         verdict(diff, "higher"), "vision 96-99 % vs language 8-15 % GPU",
                         _note(frame, diff, stand_in)))
    return corrected(pd.DataFrame(rows, columns=COLUMNS))


def check_claims(runs_df, steps_df, evals_df) -> pd.DataFrame:
    """Every claim, one row per comparison; regime "sweep" is left out (it picks learning rates)."""
    return pd.concat([accumulation_lowers_loss(steps_df), accumulation_memory(runs_df), adam_not_always_best(evals_df),
                      checkpointing_effects(runs_df, steps_df), utilization_by_architecture(runs_df)],
                     ignore_index=True)


def _headline(rows: pd.DataFrame) -> pd.Series:
    """The row a finding quotes: the claim's first statement in its first view (the paper's), the one with
    the strongest evidence there (smallest adjusted p); every other row is in the tables below."""
    first = rows[(rows["claim"] == rows["claim"].iloc[0]) & (rows["budget_view"] == rows["budget_view"].iloc[0])]
    return first.loc[first["p_adjusted"].fillna(np.inf).idxmin()] if len(first) else rows.iloc[0]


def _tally(rows: pd.DataFrame) -> str:
    counts = rows["verdict"].value_counts()
    said = [f"{counts.get(name, 0)} {name}" for name in (HOLDS, DOES_NOT_HOLD, IDENTICAL) if counts.get(name, 0)]
    undecided = len(rows) - sum(counts.get(name, 0) for name in (HOLDS, DOES_NOT_HOLD, IDENTICAL))
    return ", ".join(said + ([f"{undecided} undecided or not checkable"] if undecided else [])) or "none"


def finding(table: pd.DataFrame, letter: str) -> str:
    """One sentence per claim of the paper: what it says, what this run measured, how the family came out."""
    rows = table[table["claim"].str.startswith(letter) & ~table["claim"].str.endswith("(anywhere)")]
    says = f"**{letter}** The paper says {PAPER_SAYS[letter]}."
    if rows.empty:
        return says + " This run holds no pair of runs that this claim compares."
    top = _headline(rows)
    effect = (f"{_num(top['estimate'])} [95% CI {_num(top['low'])}, {_num(top['high'])}] {top['unit']}"
              if np.isfinite(top["low"]) else f"{_num(top['estimate'])} {top['unit']} (no interval)")
    sizes = ", ".join(str(int(size)) for size in sorted(rows["family_size"].unique()))
    holding = int((rows["verdict"] == HOLDS).sum())
    return (f"{says} Measured ({top['budget_view']}, {top['arch']}, regime {top['regime']}): {effect}, verdict "
            f"*{top['verdict']}* (adjusted p = {_num(top['p_adjusted'], '.2g')}). Over all its {len(rows)} "
            f"comparisons, it holds in {holding} after Holm correction ({_tally(rows)}; families of {sizes} "
            f"comparisons per claim and regime).")


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


def findings(table: pd.DataFrame) -> list[str]:
    """finding() for each of the paper's claims, in the paper's order."""
    return [finding(table, letter) for letter in PAPER_SAYS]
