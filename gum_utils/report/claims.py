"""The source paper's claims, each checked against our tables: one row per claim and comparison.

Every number and verdict below is computed from the data (stats.verdict on a t-interval across
seeds); the paper's value is quoted beside it, never used to decide. Ratios are compared on the
log scale, so a pair of runs counts the same whatever its loss scale. Imports no torch.
"""

import math

import numpy as np
import pandas as pd

from ..archs import REGISTRY as ARCHS
from .stats import combine, mean_ci, paired_difference, shifted, verdict
from .tables import at_equal_budget

LOSS_WINDOW = 10  # training records averaged at the budget: one batch's loss is noisy
BUDGET_VIEWS = {"equal steps": "step", "equal samples": "samples_seen", "equal time": "time"}  # the paper's first
# Runs of one strategy see the same samples per step, so for them equal steps are equal samples.
SAME_BATCH_VIEWS = {"equal steps (= equal samples)": "step", "equal time": "time"}
MEMORY_MARGIN = 0.05  # "no more memory" holds if accumulation stays within +5% of standard
FLOAT_NOISE = 1e-3  # relative loss differences below this are floating-point, not learning
PAPER_ACCUMULATION_FACTOR = {"nanovlm": 10.0, "llama": 4.0}
PAPER_CHECKPOINTING_LOSS = {"vit": "lower", "modernbert": "higher"}  # elsewhere: "architecture-dependent"
PAPER_CHECKPOINTING_SLOWDOWN = 0.60
ARCH_KIND = {arch.name: arch.kind for arch in ARCHS.values()}
PAPER_GPU_UTILIZATION = {"vision": (96.0, 99.0), "language": (8.0, 15.0)}
NOT_CHECKABLE = "cannot be checked here: no GPU measurements"
COLUMNS = ["claim", "regime", "arch", "comparison", "budget_view", "measured", "estimate", "low", "high", "unit",
           "n", "verdict", "paper", "note"]


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
    return paired_difference(np.log(a.where(a > 0)), np.log(b.where(b > 0)))


def _num(value, fmt: str = ".3g") -> str:
    return format(value, fmt) if value is not None and np.isfinite(value) else "n/a"


def _interval(result: dict, show=lambda v: v, fmt: str = ".3g") -> str:
    shown = [_num(show(result[key]), fmt) for key in ("mean", "low", "high")]
    return f"{shown[0]} [95% CI {shown[1]}, {shown[2]}]" if result["n"] >= 2 else f"{shown[0]} (no interval)"


def _pct(result: dict) -> str:  # a log ratio shown as a percentage change
    return _interval(result, lambda v: 100 * math.expm1(v), "+.1f") + " %"


def _note(frame: pd.DataFrame, result: dict, *extra: str) -> str:
    bad = frame[frame["status"] != "ok"].drop_duplicates("run")
    parts = ["left out (not ok): " + ", ".join(f"{r.optimizer}/{r.strategy}/s{r.seed} {r.status}"
                                                 for r in bad.itertuples())] if len(bad) else []
    if result["n"] < 2:
        parts.append(f"{result['n']} pair(s): no interval, so no verdict either way")
    return "; ".join(parts + [e for e in extra if e])


def _row(claim, group, comparison, view, measured, numbers, unit, result, decided, paper, note) -> dict:
    estimate, low, high = numbers
    return dict(zip(COLUMNS, [claim, group.get("regime"), group.get("arch", "all"), comparison, view, measured,
                              estimate, low, high, unit, result["n"], decided, paper, note]))


def _numbers(result: dict, show=lambda v: v) -> tuple:
    """(estimate, low, high) for the table's numeric columns, on the scale the row reports."""
    return tuple(show(result[key]) if np.isfinite(result[key]) else math.nan for key in ("mean", "low", "high"))


def _as_ratio(result: dict) -> tuple:
    return _numbers(result, math.exp)


def _as_percent(result: dict) -> tuple:  # a log ratio as a percentage change
    return _numbers(result, lambda v: 100 * math.expm1(v))


def _paired_by(by, axis: str) -> str:
    return "paired by " + ", ".join(_keys(by, axis))


def accumulation_lowers_loss(steps_df, by=("regime", "arch"), window: int = LOSS_WINDOW) -> pd.DataFrame:
    """(a) Training loss of accumulation vs standard, at equal steps and at equal samples."""
    rows, claim = [], "(a) gradient accumulation lowers training loss"
    compared = _analysed(steps_df, ["standard", "accumulation"])
    for view, budget in BUDGET_VIEWS.items():
        for group, frame in _groups(at_equal_budget(compared, budget, by=by, window=window), by):
            standard, accumulated = _pairs(frame, "loss", "strategy", "standard", "accumulation", _keys(by, "strategy"))
            ratio = _log_ratio(standard, accumulated)  # > 0: accumulation lower
            at = f"{budget} <= {_num(frame['budget_value'].max(), 'g')}, mean of last {window} records"
            measured = (f"train loss standard {_num(standard.mean())} vs accumulation {_num(accumulated.mean())} "
                        f"nats ({at}); standard/accumulation = x{_interval(ratio, math.exp)}")
            factor = PAPER_ACCUMULATION_FACTOR.get(group.get("arch"))
            paper = f"about {factor:g}x lower" if factor else "lower (consistently)"
            # the sign of the effect, then (where the paper gives one) its size
            checks = [(claim, verdict(ratio, "higher"))] + ([(claim + f" at least {factor:g}x", verdict(
                shifted(ratio, math.log(factor)), "higher"))] if factor else [])
            for name, decided in checks:
                rows.append(_row(name, group, f"accumulation vs standard, {_paired_by(by, 'strategy')}", view,
                                 measured, _as_ratio(ratio), "x (standard/accumulation)", ratio, decided, paper,
                                 _note(frame, ratio)))
    return pd.DataFrame(rows, columns=COLUMNS)


def accumulation_memory(runs_df, by=("regime", "arch"), margin: float = MEMORY_MARGIN) -> pd.DataFrame:
    """(b) Accumulation needs no more memory than standard (within `margin`)."""
    rows = []
    compared = _analysed(runs_df, ["standard", "accumulation"])
    measures = (("mem_activations", "activation bytes of one micro-batch"), ("peak_memory_bytes", "peak memory"))
    for metric, label in measures:
        for group, frame in _groups(compared, by):
            accumulated, standard = _pairs(frame, metric, "strategy", "accumulation", "standard", _keys(by, "strategy"))
            growth = _log_ratio(accumulated, standard)
            devices = ", ".join(sorted(frame["device"].dropna().unique()))
            measured = (f"{label}: accumulation {_num(accumulated.mean() / 2**20)} MiB vs standard "
                        f"{_num(standard.mean() / 2**20)} MiB; change {_pct(growth)}")
            why = "peak on cpu is the process RSS (interpreter and data included)" if "cpu" in devices else ""
            rows.append(_row("(b) accumulation needs no more memory", group, f"{label}, accumulation vs standard "
                             f"(within +{margin:.0%}), {_paired_by(by, 'strategy')}", "per run", measured,
                             _as_percent(growth), "% change", growth,
                             verdict(shifted(growth, math.log1p(margin)), "lower"), "no additional GPU memory",
                             _note(frame, growth, f"device: {devices}", why)))
    return pd.DataFrame(rows, columns=COLUMNS)


def adam_not_always_best(evals_df, by=("regime", "arch", "strategy")) -> pd.DataFrame:
    """(c) Per cell, is Adam beaten by the best other optimizer on validation loss (last common eval)?"""
    rows, claim = [], "(c) Adam is not always the best optimizer"
    for view, budget in SAME_BATCH_VIEWS.items():
        for group, frame in _groups(at_equal_budget(_analysed(evals_df), budget, by=by, metric="val_loss"), by):
            rows.append(_adam_row(claim, group, frame, view, by))
    table = pd.DataFrame(rows, columns=COLUMNS)
    overall = [_row(claim + " (anywhere)", {"regime": regime}, "any cell above", view,
                    f"{(part['verdict'] == 'holds').sum()} of {len(part)} cells hold", (math.nan,) * 3, "",
                    {"n": int(part["n"].sum())}, combine(part["verdict"], "any"), "not always superior", "")
               for (regime, view), part in table.groupby(["regime", "budget_view"], sort=False)]
    return pd.concat([table, pd.DataFrame(overall, columns=COLUMNS)], ignore_index=True)


def _adam_row(claim, group, frame, view, by) -> dict:
    means = frame[frame["status"] == "ok"].groupby("optimizer")["val_loss"].mean().dropna()
    others = means.drop("adam", errors="ignore")
    rival = others.idxmin() if len(others) else "none"
    adam, best = _pairs(frame, "val_loss", "optimizer", "adam", rival, _keys(by, "optimizer"))
    diff = paired_difference(adam, best)  # > 0: Adam worse than the best other optimizer
    lowest = f"{means.idxmin()} {_num(means.min())}" if len(means) else "n/a"
    at = f"last validation at {frame['budget'].iloc[0]} <= {_num(frame['budget_value'].max(), 'g')}"
    measured = (f"lowest mean val loss: {lowest} nats ({at}); adam {_num(adam.mean())} vs {rival} "
                f"{_num(best.mean())}; adam - {rival} = {_interval(diff)} nats")
    return _row(claim, group, f"adam vs {rival} (best other), strategy {group.get('strategy')}", view, measured,
                _numbers(diff), "nats", diff, verdict(diff, "higher"),
                "Adadelta and SGD beat Adam on ModernBERT and Llama", _note(frame, diff))


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
        for group, frame in _groups(at_equal_budget(steps, budget, by=by, window=window), by):
            standard, checkpointed = _pairs(frame, "loss", "strategy", "standard", "checkpointing", keys)
            change = _log_ratio(checkpointed, standard)
            direction = PAPER_CHECKPOINTING_LOSS.get(group.get("arch"), "different")
            curves = steps.merge(pd.DataFrame([group]), on=list(by))
            why = (_curve_difference_note(curves) if budget == "step" else
                   "at equal time the slower checkpointed run has taken fewer steps")
            rows.append(_row(f"(d) checkpointing changes the loss ({direction})", group,
                             f"checkpointing vs standard, {_paired_by(by, 'strategy')}", view,
                             f"train loss change {_pct(change)} ({budget} <= "
                             f"{_num(frame['budget_value'].max(), 'g')})", _as_percent(change), "% change", change,
                             verdict(change, direction), "improves ViT, severely degrades ModernBERT",
                             _note(frame, change, why)))
    runs = _analysed(runs_df, ["standard", "checkpointing"])
    for group, frame in _groups(runs, by):
        standard, checkpointed = _pairs(frame, "mean_step_time_s", "strategy", "standard", "checkpointing", keys)
        slowdown = _log_ratio(checkpointed, standard)
        measured = (f"time per step {_num(1e3 * standard.mean())} ms standard vs {_num(1e3 * checkpointed.mean())} ms "
                    f"checkpointing; change {_pct(slowdown)}")
        for claim, decided in (("(d) checkpointing slows each step", verdict(slowdown, "higher")),
                               (f"(d) checkpointing slows each step by at most {PAPER_CHECKPOINTING_SLOWDOWN:.0%}",
                                verdict(shifted(slowdown, math.log1p(PAPER_CHECKPOINTING_SLOWDOWN)), "lower"))):
            rows.append(_row(claim, group, f"checkpointing vs standard, {_paired_by(by, 'strategy')}", "per step",
                             measured, _as_percent(slowdown), "% change",
                             slowdown, decided, "training time up to +60%", _note(frame, slowdown)))
    return pd.DataFrame(rows, columns=COLUMNS)


def utilization_by_architecture(runs_df, by=("regime",)) -> pd.DataFrame:
    """(e) GPU utilization per architecture vs the paper's ranges; vision vs language on the device measured."""
    rows, runs = [], _analysed(runs_df).assign(kind=lambda d: d["arch"].map(ARCH_KIND))
    for group, frame in _groups(runs, list(by) + ["arch"]):
        kind = ARCH_KIND.get(group["arch"], "unknown")
        low, high = PAPER_GPU_UTILIZATION.get(kind, (math.nan, math.nan))
        gpu = frame[(frame["device"] == "gpu") & (frame["status"] == "ok")]
        measured_on = gpu if len(gpu) else frame[frame["status"] == "ok"]
        result = mean_ci(measured_on["mean_gpu_util_percent" if len(gpu) else "mean_cpu_percent"])
        decided = (combine([verdict(shifted(result, low), "higher"), verdict(shifted(result, high), "lower")])
                   if len(gpu) else NOT_CHECKABLE)
        devices = ", ".join(sorted(frame["device"].dropna().unique()))
        measured = (f"GPU utilization {_interval(result)} %" if len(gpu) else
                    f"no GPU runs (device: {devices}); CPU utilization {_interval(result)} % of one core")
        rows.append(_row(f"(e) {kind} model GPU utilization in the paper's range", group, f"{kind}: {low:g}-{high:g} %",
                         "per run", measured, _numbers(result), "%", result, decided,
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
    return pd.DataFrame(rows, columns=COLUMNS)


def check_claims(runs_df, steps_df, evals_df) -> pd.DataFrame:
    """Every claim, one row per comparison; regime "sweep" is left out (it picks learning rates)."""
    return pd.concat([accumulation_lowers_loss(steps_df), accumulation_memory(runs_df), adam_not_always_best(evals_df),
                      checkpointing_effects(runs_df, steps_df), utilization_by_architecture(runs_df)],
                     ignore_index=True)
