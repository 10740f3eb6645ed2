"""Result files as tidy tables: one row per run, per training step, per evaluation, per utilization sample.

A run that failed (diverged, oom, error) keeps its row in the runs table with its status, so a
missing number always has a visible reason. Imports no torch.
"""

import functools
from pathlib import Path

import numpy as np
import pandas as pd

from ..choices import check_choice
from ..core.results import RunResult, result_files
from ..study import paths

# The columns that say which run a row belongs to; `run` (the file's path without suffix) is unique.
RUN_ID = ["run", "profile", "regime", "arch", "optimizer", "strategy", "seed", "lr", "batch_size", "status"]
MEMORY_PARTS = ("params", "grads", "optimizer_state", "activations")
SUMMARY_COLUMNS = ["final_loss", "val_loss", "val_accuracy", "val_perplexity", "mean_step_time_s", "total_time_s",
                   "samples_per_s", "tokens_per_s", "peak_memory_bytes", "cuda_max_allocated_bytes",
                   "cuda_max_reserved_bytes", "cpu_tensor_peak_bytes", "peak_rss_bytes", "planned_peak_bytes",
                   "flops_per_step", "model_tflops_per_s", "mfu"]
# world_size and parallel tell a multi-process run from a one-process one (parallel None there).
RUN_COLUMNS = (RUN_ID + ["micro_batch_size", "world_size", "parallel", "steps", "dtype", "data", "error"]
               + SUMMARY_COLUMNS
               + [f"mem_{part}" for part in MEMORY_PARTS]
               + ["mem_total", "mean_cpu_percent", "mean_gpu_util_percent", "utilization_percent", "device",
                  "mean_gpu_power_w", "energy_j", "samples_seen_total", "path"])
CELL = ["regime", "arch", "optimizer", "strategy"]  # a cell of the grid: its runs differ only by seed
# Per-cell numbers the book tabulates: name -> (runs column, scale to the unit shown).
CELL_METRICS = {"val_loss": ("val_loss", 1.0), "final_loss": ("final_loss", 1.0),
                "val_accuracy": ("val_accuracy", 1.0), "step_ms": ("mean_step_time_s", 1e3),
                "peak_mib": ("peak_memory_bytes", 2.0**-20), "state_mib": ("mem_total", 2.0**-20),
                "utilization": ("utilization_percent", 1.0), "mfu_percent": ("mfu", 100.0)}
BUDGETS = {"samples_seen": "samples_seen", "step": "step", "time": "time_s"}  # budget name -> steps column
# budget name -> the column of what a row's number had trained on (tables.with_trained_axes)
TRAINED = {"samples_seen": "samples_trained", "time": "time_trained"}


def _identity(path: Path, root: Path, result: RunResult) -> dict:
    """Who the run is: the config where it says, else the file name (a failed run may lack fields)."""
    config, where = result.config, paths.locate(path)
    named = paths.parse_stem(where.stem)
    lr = result.summary.get("lr", config.get("lr"))
    return {
        "run": path.relative_to(root).with_suffix("").as_posix(),
        "profile": where.profile, "regime": where.regime,
        "arch": config.get("arch", where.arch),
        "optimizer": config.get("optimizer", named.get("optimizer")),
        "strategy": config.get("strategy", named.get("strategy") or "standard"),
        "seed": int(config.get("seed", named.get("seed", -1))),
        "lr": float(lr if lr is not None else named.get("lr") or "nan"),
        "batch_size": config.get("batch_size"), "status": result.status,
    }


def _load(root) -> list[tuple[dict, RunResult, Path]]:
    """Every result under `root`, read once per process while no file changes: a page asks for its
    runs, steps, evaluations and utilization, and each of those read all 725 files again."""
    root = Path(root).resolve()
    stamps = ((path, path.stat()) for path in result_files(root))
    return _read(root, tuple((path, stat.st_mtime_ns, stat.st_size) for path, stat in stamps))


@functools.lru_cache(maxsize=2)
def _read(root: Path, files: tuple) -> list[tuple[dict, RunResult, Path]]:
    loaded = []
    for path, _, _ in files:
        result = RunResult.from_json(path)
        loaded.append((_identity(path, root, result), result, path.relative_to(root)))
    return loaded


def _run_row(identity: dict, result: RunResult, relative: Path) -> dict:
    summary, usage, memory = result.summary, result.utilization, result.memory
    parts = {f"mem_{part}": memory.get(part) for part in MEMORY_PARTS}
    known = [value for value in parts.values() if value is not None]
    gpu = usage.get("mean_gpu_util_percent")
    return {
        **identity, "micro_batch_size": result.config.get("micro_batch_size"),
        "world_size": result.config.get("world_size", 1), "parallel": summary.get("parallel"),
        "steps": result.config.get("steps"), "dtype": result.config.get("dtype", "float32"),
        "data": result.config.get("data", "embedded"), "error": result.error,
        **{column: summary.get(column) for column in SUMMARY_COLUMNS}, **parts,
        "mem_total": sum(known) if len(known) == len(MEMORY_PARTS) else None,
        "mean_cpu_percent": usage.get("mean_cpu_percent"), "mean_gpu_util_percent": gpu,
        "utilization_percent": gpu if gpu is not None else usage.get("mean_cpu_percent"),
        "device": usage.get("device", result.environment.get("device")), "mean_gpu_power_w": usage.get("mean_gpu_power_w"), "energy_j": usage.get("energy_j"),
        "samples_seen_total": result.records[-1]["samples_seen"] if result.records else 0,
        "path": relative.with_suffix(".ipynb").as_posix(),
    }


def _numeric(frame: pd.DataFrame, skip=()) -> pd.DataFrame:
    """JSON nulls arrive as None; make every measured column a float so means and plots work."""
    text = {"run", "profile", "regime", "arch", "optimizer", "strategy", "status", "error", "device", "path", "dtype",
            "data", "parallel", "restart_reason", *skip}
    for column in frame.columns.difference(list(text)):
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _runs(loaded) -> pd.DataFrame:
    return _numeric(pd.DataFrame([_run_row(*item) for item in loaded], columns=RUN_COLUMNS))


def _rows(loaded, part: str) -> pd.DataFrame:
    """One row per entry of `part` (records / evals / timeline), each with its run's identity."""
    rows = []
    for identity, result, _ in loaded:
        entries = result.utilization.get("timeline", []) if part == "timeline" else getattr(result, part)
        device = {"device": result.utilization.get("device")} if part == "timeline" else {}
        rows.extend({**identity, **device, **entry} for entry in entries)
    return _numeric(pd.DataFrame(rows) if rows else pd.DataFrame(columns=RUN_ID))


def runs_table(root) -> pd.DataFrame:
    return _runs(_load(root))


UNFINISHED_COLUMNS = ["arch", "regime", "optimizer", "strategy", "seed", "status", "error"]


def finished_any(runs_df: pd.DataFrame, arch: str | None = None) -> bool:
    """Whether any run (of `arch`, where given) finished: a page with nothing finished has no data."""
    runs = runs_df if arch is None else runs_df[runs_df["arch"] == arch]
    return bool(len(runs)) and bool((runs["status"] == "ok").any())


def unfinished_runs(runs_df: pd.DataFrame, arch: str | None = None) -> pd.DataFrame:
    """The runs (of `arch`) that did not finish, with the first line of why."""
    runs = runs_df if arch is None else runs_df[runs_df["arch"] == arch]
    runs = runs[runs["status"] != "ok"].reindex(columns=UNFINISHED_COLUMNS)
    first_line = runs["error"].fillna("").astype(str).str.strip().str.split("\n").str[0].str.slice(0, 200)
    return runs.assign(error=first_line).sort_values(UNFINISHED_COLUMNS[:5]).reset_index(drop=True)


def _steps(loaded) -> pd.DataFrame:
    steps = _rows(loaded, "records")
    if not steps.empty:  # wall-clock spent in training steps so far: the "time" budget
        steps["time_s"] = steps.groupby("run")["step_time_s"].cumsum()
        steps = with_trained_axes(steps, "records")
    return steps


def tensor_peak(runs_df: pd.DataFrame) -> pd.Series:
    """Each run's peak of live tensor bytes: torch.cuda.max_memory_allocated on a GPU (peak_memory_bytes in
    older results), the allocator-level CPU tensor peak on the CPU; NaN where the run recorded none."""
    gpu = runs_df["device"] == "gpu"
    cuda = runs_df.get("cuda_max_allocated_bytes", pd.Series(np.nan, index=runs_df.index))
    cuda = cuda.fillna(runs_df["peak_memory_bytes"].where(gpu))
    cpu = runs_df.get("cpu_tensor_peak_bytes", pd.Series(np.nan, index=runs_df.index))
    return cuda.where(gpu, cpu).astype(float)


def with_trained_axes(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Add the budget a row's number was measured at: samples_trained, time_trained (columns of TRAINED).

    A training record's loss comes from the forward pass BEFORE its step's update, so it reflects the
    samples and time of the previous records (0 for step 1); an evaluation comes after its step, so
    it reflects everything up to and including it. Runs with larger batches then meet smaller ones
    at the point where both have trained on the same samples.
    """
    check_choice("kind of table", kind, ("records", "evals"))
    if frame.empty:
        return frame.assign(**{column: pd.Series(dtype=float) for column in TRAINED.values()})
    if kind == "evals":
        return frame.assign(samples_trained=frame["samples_seen"], time_trained=frame["time_s"])
    ordered = frame.sort_values(["run", "step"])
    before = ordered.groupby("run")[["samples_seen", "time_s"]].shift(1).fillna(0.0)
    return ordered.assign(samples_trained=before["samples_seen"], time_trained=before["time_s"])


def steps_table(root) -> pd.DataFrame:
    return _steps(_load(root))


def _evals(loaded, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Evaluations, each with the training time spent up to it (so they align on the time budget too)."""
    evals = _rows(loaded, "evals")
    steps = _steps(loaded) if steps is None else steps
    if evals.empty or steps.empty:
        return evals.assign(time_s=pd.Series(dtype=float))
    return with_trained_axes(evals.merge(steps[["run", "step", "time_s"]], on=["run", "step"], how="left"), "evals")


def evals_table(root) -> pd.DataFrame:
    return _evals(_load(root))


def utilization_table(root) -> pd.DataFrame:
    return _rows(_load(root), "timeline")


def at_equal_budget(steps_df: pd.DataFrame, budget: str = "samples_seen", value=None,
                    by=("regime", "arch"), window: int = 1, metric: str = "loss") -> pd.DataFrame:
    """Each run's `metric` at the largest point <= a budget common to the runs compared.

    The budget is samples seen, optimizer steps or cumulative step time ("time"). By default it is,
    per group of `by`, the largest budget every ok run of the group reaches, so accumulation (k times
    the samples per step) meets standard at equal samples. `window` > 1 averages the last `window`
    points up to the budget, to tame per-batch noise. Works on the evals table too (metric="val_loss").
    One row per run of steps_df, failed runs included (NaN where they have no point).
    """
    column, by = BUDGETS[budget], list(by)
    ok = steps_df[steps_df["status"] == "ok"]
    if value is None:
        limits = ok.groupby(by + ["run"])[column].max().groupby(by).min().rename("budget_value")
    else:
        limits = steps_df[by].drop_duplicates().assign(budget_value=float(value)).set_index(by)["budget_value"]
    points = steps_df.merge(limits.reset_index(), on=by, how="left")
    points = points[points[column] <= points["budget_value"]].sort_values(["run", column])
    tail = points.groupby("run").tail(window).groupby("run")
    measured = pd.DataFrame({metric: tail[metric].mean(), "reached": tail[column].max(), "at_step": tail["step"].max()})
    runs = steps_df[RUN_ID].drop_duplicates("run").merge(limits.reset_index(), on=by, how="left")
    return runs.merge(measured, left_on="run", right_index=True, how="left").assign(budget=budget)


def _axis(budget: str) -> str:
    """The column a budget is read on: what the number had trained on (steps stay steps)."""
    check_choice("budget", budget, tuple(BUDGETS))
    return TRAINED.get(budget, "step")


def _common_budget(frame: pd.DataFrame, axis: str, metric: str, by: list, value) -> pd.DataFrame:
    """Per group of `by`: the largest budget every ok run with a number reaches (or `value` for all)."""
    groups = frame[by].drop_duplicates()
    if value is not None:
        return groups.assign(budget_value=float(value))
    ok = frame[(frame["status"] == "ok") & frame[metric].notna()]
    reached = ok.groupby(by + ["run"])[axis].max().groupby(by).min().rename("budget_value").reset_index()
    return groups.merge(reached, on=by, how="left")


def _segments(frame: pd.DataFrame, axis: str, metric: str, limits: pd.DataFrame, by: list) -> pd.DataFrame:
    """Each run's points sorted on the axis, each with the point before it: the pieces of its linear curve."""
    points = frame.dropna(subset=[metric, axis]).merge(limits, on=by, how="left")
    points = points.sort_values(["run", axis], kind="stable").assign(s1=lambda d: d["step"])
    points = points.assign(x1=points[axis], y1=points[metric])
    before = points.groupby("run")[["x1", "y1", "s1"]].shift(1)
    return points.assign(x0=before["x1"], y0=before["y1"], s0=before["s1"])


def _linear(segments: pd.DataFrame, at: pd.Series, y: str = "y") -> pd.Series:
    """The segment's line at `at` (its end point where it has no start, a run's first point, or no width)."""
    width = segments["x1"] - segments["x0"]
    fraction = ((at - segments["x0"]) / width.where(width > 0)).fillna(1.0)
    start = segments[f"{y}0"].fillna(segments[f"{y}1"])
    return start + fraction * (segments[f"{y}1"] - start)


def _read_point(segments: pd.DataFrame) -> pd.DataFrame:
    """Each run's number and (fractional) step at its budget_value; NaN outside the run's range."""
    at = segments["budget_value"]
    holding = segments[(segments["x1"] >= at) & ((segments["x0"] <= at) | (segments["x1"] == at))]
    first = holding.groupby("run").head(1)
    return pd.DataFrame({"value": _linear(first, first["budget_value"]).to_numpy(),
                         "at_step": _linear(first, first["budget_value"], "s").to_numpy()}, index=first["run"])


def _read_interval(segments: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """Each run's mean over [(1 - fraction) B, B] of its piecewise-linear curve: the integral over the
    interval divided by its width, so sparse and dense records weigh the same stretch of budget alike."""
    high = segments["budget_value"]
    low = (1 - fraction) * high
    start, end = np.maximum(segments["x0"], low), np.minimum(segments["x1"], high)
    piece = (end - start).clip(lower=0).fillna(0)
    area = piece * (_linear(segments, start) + _linear(segments, end)) / 2
    per_run = segments.assign(area=area.where(piece > 0, 0.0), low=low).groupby("run").agg(
        area=("area", "sum"), first=("x1", "min"), last=("x1", "max"), low=("low", "first"),
        high=("budget_value", "first"))
    # a run counts only if its curve spans the whole interval (no extrapolation)
    covered = ((per_run["first"] <= per_run["low"]) & (per_run["last"] >= per_run["high"])
               & (per_run["high"] > per_run["low"]))
    point = _read_point(segments)
    if fraction == 0:
        return point
    value = (per_run["area"] / (per_run["high"] - per_run["low"])).where(covered)
    return point.assign(value=value.reindex(point.index))


def _read_runs(frame, axis: str, metric: str, limits: pd.DataFrame, by: list, fraction=None) -> pd.DataFrame:
    """Each run's `metric` at the budget (fraction None) or over its last `fraction`, where it reaches it."""
    segments = _segments(frame, axis, metric, limits, by)
    read = _read_point(segments) if fraction is None else _read_interval(segments, fraction)
    reached = segments.groupby("run")["x1"].max().clip(upper=segments.groupby("run")["budget_value"].first())
    return read.rename(columns={"value": metric}).reindex(reached.index).assign(reached=reached)


def _aligned(frame, budget, by, measured, limits) -> pd.DataFrame:
    runs = frame[RUN_ID].drop_duplicates("run").merge(limits, on=by, how="left")
    return runs.merge(measured, left_on="run", right_index=True, how="left").assign(budget=budget)


def at_budget_point(frame: pd.DataFrame, budget: str = "samples_seen", metric: str = "loss",
                    by=("regime", "arch"), value=None) -> pd.DataFrame:
    """Each run's `metric` at one budget point common to the runs compared, interpolated between its points.

    Samples and time are read on what a number had trained on (tables.with_trained_axes), so a run with
    k times the batch meets the others where both have trained on the same samples. The budget is, per
    group of `by`, the largest every ok run reaches (or `value`). Validation is interpolated linearly
    between evaluations, never snapped to the last one before the budget (a slower run would be judged
    a whole evaluation interval earlier). One row per run, failed runs included (NaN where they have none).
    """
    by, axis = list(by), _axis(budget)
    limits = _common_budget(frame, axis, metric, by, value)
    measured = _read_runs(frame, axis, metric, limits, by)
    return _aligned(frame, budget, by, measured, limits)


def over_budget_interval(frame: pd.DataFrame, budget: str = "samples_seen", metric: str = "loss",
                         by=("regime", "arch"), fraction: float = 0.1, value=None) -> pd.DataFrame:
    """Each run's `metric` averaged over the same budget interval, the last `fraction` of the common budget.

    The average is the integral of the run's piecewise-linear curve over the interval divided by its
    width, so it tames per-batch noise without depending on how many records a run has there (a window
    of the last N records spans k times the samples for a run with k times the batch).
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be within [0, 1], not {fraction!r}")
    by, axis = list(by), _axis(budget)
    limits = _common_budget(frame, axis, metric, by, value)
    measured = _read_runs(frame, axis, metric, limits, by, fraction)
    return _aligned(frame, budget, by, measured, limits).assign(budget_low=lambda d: (1 - fraction) * d["budget_value"])


CGD_BEHAVIOUR = ["steps", "n_beta", "beta_median", "beta_max", "beta_share_above_1", "restarts", "n_stalled",
                 "mean_evals"]


def cgd_behaviour(steps_df: pd.DataFrame, by=("regime", "arch")) -> pd.DataFrame:
    """What CGD did step by step, per group of `by`, from the records of its runs (CGD.step_record): how
    many steps used a beta, its median, largest value and share above 1 (a beta above 1 lengthens the
    previous direction: momentum that grows), restarts by reason, stalled line searches, closure calls."""
    by = list(by)
    if "restarted" not in steps_df:
        return pd.DataFrame(columns=by + CGD_BEHAVIOUR)
    rows = []
    for key, part in steps_df[steps_df["restarted"].notna()].groupby(by):
        betas = part["beta"].dropna()
        reasons = part.loc[part["restarted"].astype(bool), "restart_reason"].value_counts()
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "steps": len(part),
                     "n_beta": len(betas), "beta_median": betas.median() if len(betas) else None,
                     "beta_max": betas.max() if len(betas) else None,
                     "beta_share_above_1": (betas > 1).mean() if len(betas) else None,
                     "restarts": ", ".join(f"{reason} {count}" for reason, count in reasons.items()),
                     "n_stalled": int(part["line_search_stalled"].astype(bool).sum()),
                     "mean_evals": part["n_evals"].mean()})
    return pd.DataFrame(rows, columns=by + CGD_BEHAVIOUR)


def cell_summary(runs_df: pd.DataFrame, keys=CELL, metrics=tuple(CELL_METRICS)) -> pd.DataFrame:
    """Per cell: how many runs and how many ok, and each metric's mean and 95 % interval over its ok runs."""
    from .stats import describe

    ok = runs_df[runs_df["status"] == "ok"]
    scaled = ok.assign(**{name: ok[CELL_METRICS[name][0]] * CELL_METRICS[name][1] for name in metrics})
    counts = runs_df.groupby(list(keys)).agg(runs=("run", "size"), ok=("status", lambda s: int((s == "ok").sum())))
    numbers = describe(scaled, list(keys), metrics) if len(scaled) else None
    summary = counts.reset_index()
    return summary.merge(numbers, on=list(keys), how="left") if numbers is not None else summary


def with_intervals(summary: pd.DataFrame, metrics, fmt: str = ".3g") -> pd.DataFrame:
    """The summary with each metric as one text column "mean [low, high]" (its _low/_high/_n dropped)."""
    from .stats import interval_text

    shown = summary.copy()
    for name in metrics:
        shown[name] = [interval_text(m, lo, hi, fmt) for m, lo, hi in
                       zip(summary[name], summary[f"{name}_low"], summary[f"{name}_high"])]
    extra = [f"{name}_{part}" for name in metrics for part in ("low", "high", "n")]
    return shown.drop(columns=[c for c in extra if c in shown])


def write_csv(root, out_dir) -> dict[str, Path]:
    """runs.csv, steps.csv and evals.csv for readers who want the numbers without this package."""
    loaded, out_dir = _load(root), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = _steps(loaded)
    tables = {"runs": _runs(loaded), "steps": steps, "evals": _evals(loaded, steps)}
    written = {}
    for name, table in tables.items():
        written[name] = out_dir / f"{name}.csv"
        table.to_csv(written[name], index=False)
    return written


# What the runs table's `peak_mib` is (summary["peak_memory_bytes"]): named so on every page, since the
# memory figure beside it shows live tensor bytes.
PEAK_MEMORY_LABEL = "peak memory (MiB; process RSS on a CPU, max allocated on a GPU)"
