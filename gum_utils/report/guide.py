"""The decision guide: what fits on a GPU of a given size, and at what cost in time, from the plans.

Reads the guide's plans (`study/guide.py` writes them: paper-size models traced by the planner)
and this profile's runs (for each strategy's measured time cost); computes every number the
guide page shows. Imports no torch.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.strategies import STRATEGIES

GUIDE_MEMORY_GIB = (16, 24, 40, 48, 80, 141)  # common GPU sizes (T4 ... H200), nominal GiB
GIB = 2**30
# Without measured runs: a checkpointed step recomputes the forward pass (a forward is about a
# third of a training step's FLOPs: backward is twice the forward), accumulation does the same
# FLOPs per sample as standard.
FLOP_TIME_COST = {"standard": 1.0, "checkpointing": 4 / 3, "accumulation": 1.0}


class GuideMissing(FileNotFoundError):
    """The guide's plans were not computed yet."""


def load_guide(path) -> dict:
    path = Path(path)
    if not path.exists():
        raise GuideMissing(f"{path}: no guide plans yet; compute them with: make guide "
                           "(python -m gum_utils.study.guide)")
    return json.loads(path.read_text())


def plans_frame(guide: dict) -> pd.DataFrame:
    columns = ["arch", "optimizer", "strategy", "batch_size", "micro_batch_size", "dtype", "peak_bytes", "error"]
    frame = pd.DataFrame(guide["plans"]).reindex(columns=columns)
    return frame.assign(micro=frame["micro_batch_size"].fillna(frame["batch_size"]).astype(int),
                        dtype=frame["dtype"].astype(object).fillna(guide["dtype"]),  # a guide before bfloat16: one precision
                        peak_gib=frame["peak_bytes"].astype(float) / GIB)


def paper_batch_table(guide: dict) -> pd.DataFrame:
    """Predicted peak (GiB) per architecture and optimizer (rows) and strategy (columns), at the paper
    profile's shapes: standard and checkpointing at its batch, accumulation at `accumulation` times it.
    The curves' precision first (columns named by strategy), then each other precision planned
    (columns "strategy, dtype")."""
    plans, batch = plans_frame(guide), guide["paper_batch"]
    paper = plans[(plans["micro"] == batch) & ((plans["strategy"] == "accumulation")
                                                == (plans["batch_size"] == batch * guide["accumulation"]))]
    paper = paper.assign(column=paper["strategy"].where(paper["dtype"] == guide["dtype"],
                                                        paper["strategy"] + ", " + paper["dtype"]))
    table = paper.pivot_table(index=["arch", "optimizer"], columns="column", values="peak_gib", sort=False)
    order = [strategy if dtype == guide["dtype"] else f"{strategy}, {dtype}"
             for dtype in dict.fromkeys([guide["dtype"], *guide.get("paper_dtypes", ())]) for strategy in STRATEGIES]
    return table.reindex(columns=[column for column in order if column in table.columns]).rename_axis(columns=None)


def curves(guide: dict) -> pd.DataFrame:
    """The curve optimizer's predicted peak per architecture, strategy and micro-batch (the traced points)."""
    plans, batch = plans_frame(guide), guide["batch"]
    curve = plans[(plans["optimizer"] == guide["curve_optimizer"]) & (plans["dtype"] == guide["dtype"])]
    curve = curve[(curve["strategy"] != "accumulation") | (curve["batch_size"] == batch)]
    return curve[["arch", "strategy", "micro", "peak_bytes", "peak_gib"]].dropna(subset=["peak_bytes"]) \
        .sort_values(["arch", "strategy", "micro"]).reset_index(drop=True)


def largest_fitting(curve: pd.DataFrame, budget_bytes: float) -> int | None:
    """The largest traced micro-batch whose predicted peak fits the budget, or None."""
    fitting = curve.loc[curve["peak_bytes"] <= budget_bytes, "micro"]
    return int(fitting.max()) if len(fitting) else None


def time_costs(runs_df: pd.DataFrame | None, device: str | None = None) -> pd.DataFrame:
    """Per architecture and strategy: time per sample relative to standard, and where it comes from.

    Measured: the shared regime's runs that finished (on `device`, "gpu" or "cpu", where given: tiny
    CPU runs say nothing of a paper-size model's cost on a GPU), paired on optimizer and seed, the
    median of (time per step / samples per step) over the pair; else the FLOP count (FLOP_TIME_COST)."""
    rows = []
    runs = _finished_shared(runs_df)
    if device is not None and "device" in runs:
        runs = runs[runs["device"] == device]
    archs = sorted(runs["arch"].unique()) if len(runs) else []
    for arch in archs:
        per_sample = runs[runs["arch"] == arch].assign(
            per_sample=lambda f: f["mean_step_time_s"] / f["batch_size"])
        wide = per_sample.pivot_table(index=["optimizer", "seed"], columns="strategy", values="per_sample")
        for strategy in STRATEGIES:
            if strategy in wide and "standard" in wide:
                ratio = (wide[strategy] / wide["standard"]).dropna()
                if len(ratio):
                    device = ", ".join(sorted(runs.loc[runs["arch"] == arch, "device"].dropna().unique()))
                    rows.append({"arch": arch, "strategy": strategy, "time_cost": float(ratio.median()),
                                 "source": f"measured ({device}, {len(ratio)} pairs)"})
    return pd.DataFrame(rows, columns=["arch", "strategy", "time_cost", "source"])


def _finished_shared(runs_df) -> pd.DataFrame:
    if runs_df is None or not len(runs_df):
        return pd.DataFrame(columns=["arch", "strategy", "optimizer", "seed", "mean_step_time_s", "batch_size"])
    runs = runs_df[(runs_df["status"] == "ok") & runs_df["mean_step_time_s"].notna()]
    return runs[runs["regime"] == "shared"] if (runs["regime"] == "shared").any() else runs


def time_cost(costs: pd.DataFrame, arch: str, strategy: str) -> tuple[float, str]:
    found = costs[(costs["arch"] == arch) & (costs["strategy"] == strategy)]
    if len(found):
        return float(found["time_cost"].iloc[0]), found["source"].iloc[0]
    return FLOP_TIME_COST[strategy], "FLOP count"


def fastest_strategy(costs: dict) -> str | None:
    """Of the strategies that reach the batch ({name: time cost per sample}), the fastest: standard
    wherever it does (the same work in the fewest, largest steps), else the lowest cost."""
    if "standard" in costs:
        return "standard"
    return min(costs, key=lambda name: (costs[name], name)) if costs else None


def fits_table(guide: dict, costs: pd.DataFrame, memory_gib=GUIDE_MEMORY_GIB) -> pd.DataFrame:
    """Per architecture and memory size, to train at the guide's batch with the curve optimizer: each
    strategy's largest traced micro-batch that fits, and the fastest strategy that reaches the batch:
    standard wherever it fits (no recompute, one step), else the lower time cost of checkpointing
    and accumulation."""
    batch, rows = guide["batch"], []
    curve_of = curves(guide)
    for arch in curve_of["arch"].unique():
        for gib in memory_gib:
            row = {"arch": arch, "memory_gib": gib}
            reaching = {}  # strategy: (time cost, its source)
            for strategy in STRATEGIES:
                curve = curve_of[(curve_of["arch"] == arch) & (curve_of["strategy"] == strategy)]
                largest = largest_fitting(curve, gib * GIB)
                if strategy == "accumulation" and largest is not None:
                    row[strategy] = f"{largest} x {batch // largest}"
                else:
                    row[strategy] = "-" if largest is None else str(largest)
                # accumulation reaches the batch in batch / micro steps from any micro-batch that fits
                if largest == batch or (strategy == "accumulation" and largest is not None):
                    reaching[strategy] = time_cost(costs, arch, strategy)
            if reaching:
                fastest = fastest_strategy({strategy: cost for strategy, (cost, _) in reaching.items()})
                cost, source = reaching[fastest]
                row.update(fastest=fastest, time_cost=cost, source=source)
            else:
                row.update(fastest="none (see the planner for bfloat16 or another optimizer)", time_cost=math.nan,
                           source="")
            rows.append(row)
    return pd.DataFrame(rows, columns=["arch", "memory_gib", *STRATEGIES, "fastest", "time_cost", "source"])


def guide_figure(guide: dict, memory_gib=GUIDE_MEMORY_GIB):
    """Predicted peak against micro-batch per strategy, one panel per architecture, GPU sizes drawn across."""
    import matplotlib.pyplot as plt

    curve_of = curves(guide)
    archs = list(curve_of["arch"].unique())
    fig, axes = plt.subplots(1, len(archs), figsize=(3.4 * len(archs), 3.8), squeeze=False)
    for ax, arch in zip(axes[0], archs):
        for strategy in STRATEGIES:
            curve = curve_of[(curve_of["arch"] == arch) & (curve_of["strategy"] == strategy)]
            ax.plot(curve["micro"], curve["peak_gib"], marker="o", label=strategy)
        top = curve_of.loc[curve_of["arch"] == arch, "peak_gib"].max()
        for gib in memory_gib:
            if gib <= max(top * 1.5, memory_gib[0]):
                ax.axhline(gib, color="grey", lw=0.7, ls="--")
                ax.annotate(f"{gib} GiB", (1, gib), fontsize=7, color="grey", va="bottom")
        ax.set_xscale("log", base=2)
        ticks = sorted(curve_of.loc[curve_of["arch"] == arch, "micro"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set(title=arch, xlabel="micro-batch", ylabel="predicted peak (GiB)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{guide['curve_optimizer']}, {guide['dtype']}, paper size: accumulation reaches batch "
                 f"{guide['batch']} in micro-batches of the size shown")
    fig.tight_layout()
    return fig


def planned_against_measured(runs_df: pd.DataFrame, measured: pd.Series) -> pd.DataFrame:
    """Per cell: the planner's peak beside the measured tensor peak (`measured`, one value per run),
    and the relative error of the plan."""
    runs = runs_df.assign(measured=measured)
    runs = runs[runs["planned_peak_bytes"].notna() & runs["measured"].notna()] \
        if "planned_peak_bytes" in runs else runs.iloc[0:0].assign(planned_peak_bytes=np.nan)
    cells = runs.groupby(["regime", "optimizer", "strategy"], sort=False)[["planned_peak_bytes", "measured"]].mean()
    return cells.assign(error_percent=100 * (cells["planned_peak_bytes"] - cells["measured"]) / cells["measured"],
                        planned_mib=cells["planned_peak_bytes"] / 2**20,
                        measured_mib=cells["measured"] / 2**20)[["planned_mib", "measured_mib", "error_percent"]]
