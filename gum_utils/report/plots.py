"""The study's figures: each function takes tables (gum_utils.report.tables) and returns a matplotlib Figure.

Each optimizer keeps one colour in every figure. Means are over seeds with a 95 % t-interval
(bands, error bars). A cell whose runs failed is drawn as a marked gap with its status, never
left out silently. Imports no torch.
"""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.patches import Patch, Rectangle

from ..archs import ARCHITECTURES
from ..choices import check_choice
from ..core.strategies import ALL_STRATEGIES  # every strategy a run may have used, in order
from ..optim import OPTIMIZERS
from .stats import summarize
from .tables import tensor_peak

OPTIMIZER_COLORS = dict(zip(OPTIMIZERS, sns.color_palette("colorblind", len(OPTIMIZERS))))
STRATEGY_COLORS = dict(zip(ALL_STRATEGIES, sns.color_palette("Set2", len(ALL_STRATEGIES))))
MEMORY_COLORS = dict(zip(("params", "grads", "optimizer_state", "activations"), sns.color_palette("pastel", 4)))
X_LABELS = {"step": "optimizer step", "samples_seen": "samples seen", "time_s": "training time (s)"}
MIB = 2**20


def _select(frame: pd.DataFrame, **equal) -> pd.DataFrame:
    """Rows whose columns equal the given values (None = any)."""
    for column, value in equal.items():
        if value is not None:
            frame = frame[frame[column] == value]
    return frame


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"]


def _present(order, values) -> list:
    """The known order first, then anything else the data holds (a new optimizer still shows)."""
    values = set(values)
    return [v for v in order if v in values] + sorted(values - set(order))


def _failures(frame: pd.DataFrame) -> str:
    bad = frame[frame["status"] != "ok"].drop_duplicates("run")
    return "\n".join(f"{r.optimizer}/{r.strategy}/s{r.seed}: {r.status}" for r in bad.itertuples())


def _mark_failures(ax, frame: pd.DataFrame) -> None:
    text = _failures(frame)
    if text:
        ax.text(0.98, 0.98, "not ok:\n" + text, transform=ax.transAxes, ha="right", va="top", fontsize=7,
                color="tab:red", bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "tab:red"})


def _legend(fig, colors: dict, keys, title: str) -> None:
    handles = [Patch(color=colors.get(k, "grey"), label=k) for k in keys]
    fig.legend(handles=handles, title=title, loc="center right", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout(rect=(0, 0, 0.88, 1))


def _band(ax, curve: pd.DataFrame, x: str, color, label=None) -> None:
    ax.plot(curve[x], curve["mean"], color=color, label=label, lw=1.4)
    ax.fill_between(curve[x], curve["low"], curve["high"], color=color, alpha=0.2, lw=0)


def _smoothed(steps: pd.DataFrame, window: int) -> pd.DataFrame:
    """Each run's loss as a rolling mean of `window` steps: one batch's loss is too noisy to read."""
    rolled = steps.sort_values(["run", "step"]).groupby("run")["loss"].rolling(window, min_periods=1).mean()
    return steps.sort_values(["run", "step"]).assign(loss=rolled.reset_index(level=0, drop=True))


def _binned(frame: pd.DataFrame, x: str, width: float | None) -> pd.DataFrame:
    """Seeds never share a time stamp: put time on a common grid so their mean and band exist."""
    if width is None or frame.empty:
        return frame
    on_grid = frame.assign(**{x: (frame[x] / width).round() * width})
    return on_grid.drop_duplicates(["run", x], keep="last")  # one point per run and bin, or n would be inflated


def loss_curves(steps_df, evals_df=None, arch: str = "vit", x: str = "step", regime: str = "shared",
                smooth: int = 10, time_bins: int = 60, runs_df=None):
    """Training loss per strategy panel, one mean line (95 % CI band) per optimizer; validation as dots.

    The y range follows the runs' own (smoothed) curves, so a wide band from few seeds is clipped
    rather than flattening every line. `runs_df` (the runs table) marks failed runs that recorded
    no step at all; without it only failures with steps are marked.
    """
    check_choice("x axis", x, tuple(X_LABELS))
    steps = _smoothed(_select(steps_df, arch=arch, regime=regime), smooth)
    width = float(steps[x].max()) / time_bins if x == "time_s" and len(steps) and steps[x].max() > 0 else None
    steps = _binned(steps, x, width)
    outcomes = steps if runs_df is None else _select(runs_df, arch=arch, regime=regime)
    evals = None if evals_df is None else _select(evals_df, arch=arch, regime=regime)  # once, not per line
    # every run failed before its first step: one panel that lists the failures
    strategies = _present(ALL_STRATEGIES, set(steps["strategy"]) | set(outcomes["strategy"])) or ["no step recorded"]
    fig, axes = plt.subplots(1, len(strategies), figsize=(4.2 * len(strategies), 3.6), sharey=True, squeeze=False)
    for ax, strategy in zip(axes[0], strategies):
        panel = steps[steps["strategy"] == strategy]
        for optimizer in _present(OPTIMIZERS, panel["optimizer"].unique()):
            color = OPTIMIZER_COLORS.get(optimizer, "grey")
            _band(ax, summarize(_ok(panel[panel["optimizer"] == optimizer]).dropna(subset=["loss"]), [x], "loss"),
                  x, color, optimizer)
            if evals is not None:
                vals = _binned(_ok(_select(evals, strategy=strategy, optimizer=optimizer)), x, width)
                dots = summarize(vals, [x], "val_loss")
                ax.scatter(dots[x], dots["mean"], color=color, edgecolor="black", s=28, zorder=3)
        _mark_failures(ax, outcomes[outcomes["strategy"] == strategy])
        ax.set(title=strategy, xlabel=X_LABELS[x])
    finite = _ok(steps)["loss"].dropna()
    if len(finite):
        margin = 0.05 * (finite.max() - finite.min()) or 0.1
        axes[0, 0].set_ylim(finite.min() - margin, finite.max() + margin)
    axes[0, 0].set_ylabel("loss (nats); dots: validation")
    fig.suptitle(f"{arch}: training loss (rolling mean of {smooth} steps) by {X_LABELS[x]}; "
                 "mean over seeds, 95 % CI band")
    _legend(fig, OPTIMIZER_COLORS, _present(OPTIMIZERS, steps["optimizer"].unique()), "optimizer")
    return fig


def _cell_table(runs: pd.DataFrame, value: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """optimizer x strategy: mean of `value` over ok runs, and a text per cell (with failures named)."""
    optimizers = _present(OPTIMIZERS, runs["optimizer"].unique())
    strategies = _present(ALL_STRATEGIES, runs["strategy"].unique())
    spread = summarize(_ok(runs).dropna(subset=[value]), ["optimizer", "strategy"], value)
    means = spread.pivot(index="optimizer", columns="strategy", values="mean").reindex(index=optimizers,
                                                                                      columns=strategies)
    half = (spread.assign(half=spread["high"] - spread["mean"])
            .pivot(index="optimizer", columns="strategy", values="half").reindex(index=optimizers, columns=strategies))
    # the 95 % half-width under the mean, where seeds give one
    text = pd.DataFrame([[("" if pd.isna(m) else f"{m:.3g}") + ("" if pd.isna(h) else f"\n±{h:.2g}")
                          for m, h in zip(means.loc[o], half.loc[o])] for o in optimizers],
                        index=optimizers, columns=strategies)
    for (optimizer, strategy), cell in runs.groupby(["optimizer", "strategy"]):
        bad = cell[cell["status"] != "ok"]["status"]
        if len(bad):
            counts = bad.value_counts().items()
            text.loc[optimizer, strategy] += "\n" + ", ".join(f"{n}/{len(cell)} {s}" for s, n in counts)
    return means, text.apply(lambda column: column.str.strip())


def loss_heatmap(runs_df, arch: str = "vit", regime: str = "shared"):
    """Final training loss and validation loss, optimizer x strategy, mean over seeds; failed cells hatched."""
    runs = _select(runs_df, arch=arch, regime=regime)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.8))  # two-line cells need the height
    for ax, (value, label) in zip(axes, (("final_loss", "final training loss"), ("val_loss", "validation loss"))):
        means, text = _cell_table(runs, value)
        sns.heatmap(means, annot=text.values, fmt="", cmap="viridis_r", ax=ax, cbar_kws={"label": f"{label} (nats)"},
                    annot_kws={"fontsize": 8})
        for i, j in zip(*np.where(means.isna().values)):  # no ok run: hatch it, the status says why
            ax.add_patch(Rectangle((j, i), 1, 1, fill=False, hatch="xx", edgecolor="tab:red", lw=0))
            ax.text(j + 0.5, i + 0.5, text.iat[i, j] or "no run", ha="center", va="center", fontsize=8, color="tab:red")
        ax.set(title=label, xlabel="memory strategy", ylabel="optimizer")
        ax.tick_params(axis="x", labelrotation=0)
        ax.tick_params(axis="y", labelrotation=0)  # optimizer names side by side would overlap
    fig.suptitle(f"{arch}: loss at the end of training (mean over seeds)")
    fig.tight_layout()
    return fig


def _bars(ax, frame: pd.DataFrame, value: str, x: str, hue: str, colors: dict, scale: float = 1.0) -> None:
    """Mean of `value` (x `scale`) per x and hue with 95 % CI error bars; an X where no run is ok."""
    xs = _present(ALL_STRATEGIES if x == "strategy" else ARCHITECTURES, frame[x].unique())
    hues = _present(OPTIMIZERS if hue == "optimizer" else ALL_STRATEGIES, frame[hue].unique())
    stats = summarize(_ok(frame).assign(**{value: frame[value] * scale}).dropna(subset=[value]), [x, hue], value)
    stats = stats.set_index([x, hue])
    width = 0.8 / max(len(hues), 1)
    for h, name in enumerate(hues):
        for i, group in enumerate(xs):
            where = i - 0.4 + width * (h + 0.5)
            if (group, name) in stats.index:
                row = stats.loc[(group, name)]
                error = np.array([[row["mean"] - row["low"]], [row["high"] - row["mean"]]])
                ax.bar(where, row["mean"], width, color=colors.get(name, "grey"),
                       yerr=None if np.isnan(error).any() else error, capsize=2)
            elif ((frame[x] == group) & (frame[hue] == name)).any():
                ax.text(where, 0, "X", ha="center", va="bottom", color="tab:red", fontweight="bold")
    ax.set_xticks(range(len(xs)), xs)
    ax.set_xlabel({"strategy": "memory strategy", "arch": "architecture"}[x])


def memory_figure(runs_df, arch: str = "vit", regime: str = "shared"):
    """Peak memory per cell, and the exact breakdown (params, grads, optimizer state, activations)."""
    runs = _select(runs_df, arch=arch, regime=regime)
    fig, (peak, parts) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [1, 1.3]})
    runs = runs.assign(peak_tensor_bytes=tensor_peak(runs))
    tensors = runs["peak_tensor_bytes"].notna().any()  # older CPU results have only the process RSS
    _bars(peak, runs, "peak_tensor_bytes" if tensors else "peak_memory_bytes", "strategy", "optimizer",
          OPTIMIZER_COLORS, 1 / MIB)
    device = ", ".join(sorted(runs["device"].dropna().unique()))
    what = "live tensors" if tensors else "process RSS" if device == "cpu" else "max allocated"
    peak.set(title=f"peak memory ({what}, {device})", ylabel=f"peak memory (MiB, {what})")
    # Byte counts are exact even for a run that later diverged, so every run with them counts here.
    cells = runs.groupby(["strategy", "optimizer"])[[f"mem_{p}" for p in MEMORY_COLORS]].mean() / MIB
    cells = cells.reindex([(s, o) for s in _present(ALL_STRATEGIES, runs["strategy"].unique())
                           for o in _present(OPTIMIZERS, runs["optimizer"].unique())])
    left = np.zeros(len(cells))
    for part, color in MEMORY_COLORS.items():  # horizontal, so the cell names stay readable
        parts.barh(range(len(cells)), cells[f"mem_{part}"].fillna(0), left=left, color=color, label=part)
        left += cells[f"mem_{part}"].fillna(0).to_numpy()
    for i in np.where(cells.isna().all(axis=1))[0]:
        parts.text(0, i, "X no measurement", va="center", color="tab:red", fontweight="bold")
    parts.set_yticks(range(len(cells)), [f"{s} / {o}" for s, o in cells.index], fontsize=7)
    parts.invert_yaxis()
    parts.set(title="memory breakdown (exact tensor bytes)", xlabel="memory (MiB)")
    # below the axis label, not over it
    parts.legend(title="part", fontsize=8, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.suptitle(f"{arch}: memory per optimizer and strategy")
    _legend(fig, OPTIMIZER_COLORS, _present(OPTIMIZERS, runs["optimizer"].unique()), "optimizer")
    return fig


def _bar_figure(runs_df, arch, regime, value, scale, ylabel, title):
    runs = _select(runs_df, arch=arch, regime=regime)
    fig, ax = plt.subplots(figsize=(7, 3.8))
    _bars(ax, runs, value, "strategy", "optimizer", OPTIMIZER_COLORS, scale)
    ax.set(ylabel=ylabel, title=f"{arch}: {title} (mean over seeds, 95 % CI)")
    _legend(fig, OPTIMIZER_COLORS, _present(OPTIMIZERS, runs["optimizer"].unique()), "optimizer")
    return fig


def step_time(runs_df, arch: str = "vit", regime: str = "shared"):
    return _bar_figure(runs_df, arch, regime, "mean_step_time_s", 1e3, "time per step (ms)", "time per optimizer step")


def _utilization_label(frame: pd.DataFrame) -> str:
    return "GPU utilization (%)" if (frame["device"] == "gpu").any() else "CPU utilization (% of one core)"


def utilization(runs_df, arch: str = "vit", regime: str = "shared"):
    """Mean utilization per cell: the GPU's where one was used, else the process's CPU."""
    label = _utilization_label(_select(runs_df, arch=arch, regime=regime))
    return _bar_figure(runs_df, arch, regime, "utilization_percent", 1.0, label, "utilization")


def utilization_timeline(util_df, arch: str = "vit", regime: str = "shared", seed: int = 0):
    """Utilization over a run's time, one panel per strategy, one line per optimizer (one seed)."""
    samples = _select(util_df, arch=arch, regime=regime, seed=seed)
    column = "gpu_util_percent" if samples["gpu_util_percent"].notna().any() else "cpu_percent"
    strategies = _present(ALL_STRATEGIES, samples["strategy"].unique())
    fig, axes = plt.subplots(1, len(strategies), figsize=(4.2 * len(strategies), 3.4), sharey=True, squeeze=False)
    for ax, strategy in zip(axes[0], strategies):
        for optimizer, run in samples[samples["strategy"] == strategy].groupby("optimizer"):
            ax.plot(run["t_s"], run[column], color=OPTIMIZER_COLORS.get(optimizer, "grey"), lw=1)
        ax.set(title=strategy, xlabel="time since start of run (s)")
    axes[0, 0].set_ylabel(_utilization_label(samples.assign(device="gpu" if column.startswith("gpu") else "cpu")))
    if samples[column].notna().any():  # a single sampling spike should not flatten the rest
        axes[0, 0].set_ylim(0, max(105.0, 1.1 * samples[column].quantile(0.99)))
    fig.suptitle(f"{arch}: utilization over time (seed {seed})")
    _legend(fig, OPTIMIZER_COLORS, _present(OPTIMIZERS, samples["optimizer"].unique()), "optimizer")
    return fig


def architectures_summary(runs_df, regime: str = "shared"):
    """Across architectures: validation loss per optimizer, and time, memory and utilization per strategy."""
    runs = _select(runs_df, regime=regime)
    runs = runs.assign(peak_tensor_bytes=tensor_peak(runs))
    tensors = runs["peak_tensor_bytes"].notna().any()  # older CPU results have only the process RSS
    fig, axes = plt.subplots(2, 2, figsize=(12, 7.5))
    panels = ((axes[0, 0], "val_loss", "optimizer", 1.0, "validation loss (nats), all strategies"),
              (axes[0, 1], "mean_step_time_s", "strategy", 1e3, "time per step (ms)"),
              (axes[1, 0], "peak_tensor_bytes" if tensors else "peak_memory_bytes", "strategy", 1 / MIB,
               "peak memory (MiB, live tensors)" if tensors else "peak memory (MiB, process)"),
              (axes[1, 1], "utilization_percent", "strategy", 1.0, _utilization_label(runs)))
    for ax, value, hue, scale, label in panels:
        _bars(ax, runs, value, "arch", hue, OPTIMIZER_COLORS if hue == "optimizer" else STRATEGY_COLORS, scale)
        ax.set(ylabel=label, title=label.split(" (")[0])
    # the legends name what ran (adamw is in the registry, not in the study's grid)
    axes[0, 0].legend(handles=[Patch(color=OPTIMIZER_COLORS[o], label=o)
                               for o in _present(OPTIMIZERS, runs["optimizer"].unique())], fontsize=7, ncol=2)
    axes[0, 1].legend(handles=[Patch(color=STRATEGY_COLORS[s], label=s)
                               for s in _present(ALL_STRATEGIES, runs["strategy"].unique())], fontsize=7)
    fig.suptitle(f"all architectures ({regime} regime; mean over runs, 95 % CI; X: no ok run)")
    fig.tight_layout()
    return fig


def lr_sensitivity(sweep_runs_df, arch: str = "vit", chosen: dict | None = None):
    """Validation loss vs learning rate per optimizer; the chosen value starred, a choice at the edge flagged."""
    runs = _select(sweep_runs_df, arch=arch)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    edges = []
    for optimizer in _present(OPTIMIZERS, runs["optimizer"].unique()):
        swept = runs[runs["optimizer"] == optimizer]
        curve = summarize(_ok(swept).dropna(subset=["val_loss"]), ["lr"], "val_loss").sort_values("lr")
        color = OPTIMIZER_COLORS.get(optimizer, "grey")
        ax.errorbar(curve["lr"], curve["mean"], yerr=[curve["mean"] - curve["low"], curve["high"] - curve["mean"]],
                    color=color, marker="o", ms=4, capsize=2, label=optimizer)
        for lr in sorted(set(swept["lr"]) - set(curve["lr"])):  # no ok run at this rate: diverged or failed
            ax.plot(lr, 1, marker="x", color=color, ms=8, transform=ax.get_xaxis_transform(), clip_on=False)
        best = (chosen or {}).get(optimizer, curve.loc[curve["mean"].idxmin(), "lr"] if len(curve) else None)
        if best is not None and best in set(curve["lr"]):
            ax.plot(best, curve.set_index("lr").loc[best, "mean"], marker="*", ms=16, color=color, mec="black")
            if best in (swept["lr"].min(), swept["lr"].max()):
                edges.append(optimizer)
    ax.set_xscale("log")
    ax.set(xlabel="learning rate (log scale)", ylabel="validation loss (nats)",
           title=f"{arch}: learning-rate sensitivity (star: chosen; x at top: no ok run)")
    if edges:
        ax.text(0.01, 0.01, f"chosen at the edge of the swept range: {', '.join(edges)} (widen the sweep)",
                transform=ax.transAxes, fontsize=8, color="tab:red")
    ax.legend(title="optimizer", fontsize=8)
    fig.tight_layout()
    return fig


def _on_budget_grid(frame: pd.DataFrame, x: str, budget: float, bins: int) -> pd.DataFrame:
    """Each run's loss averaged within `bins` equal bins of [0, budget] on x: strategies with different batches
    then share the same points, and a bin averages the same stretch of samples for every run."""
    width = budget / bins
    binned = frame.assign(**{x: (np.minimum(frame[x] // width, bins - 1) + 0.5) * width})
    return binned.groupby(["run", "strategy", "optimizer", x], as_index=False)["loss"].mean()


def equal_samples_curves(steps_df, arch: str = "vit", regime: str = "shared", bins: int = 40,
                         fraction: float = 0.1):
    """Training loss against the samples each record had trained on, the strategies on ONE shared axis per
    optimizer panel (mean over seeds, 95 % CI band), up to the budget every run reaches; the shaded
    stretch is the last `fraction` of it, over which the claims page averages each run's loss."""
    steps = _ok(_select(steps_df, arch=arch, regime=regime)).dropna(subset=["loss", "samples_trained"])
    budget = steps.groupby("run")["samples_trained"].max().min() if len(steps) else 0.0
    steps = steps[steps["samples_trained"] <= budget]
    optimizers = _present(OPTIMIZERS, steps["optimizer"].unique())
    fig, axes = plt.subplots(1, max(len(optimizers), 1), figsize=(3.2 * max(len(optimizers), 1) + 1.5, 3.4),
                             sharex=True, sharey=True, squeeze=False)
    curves = _on_budget_grid(steps, "samples_trained", budget, bins) if budget > 0 else steps
    for ax, optimizer in zip(axes[0], optimizers):
        panel = curves[curves["optimizer"] == optimizer]
        for strategy in _present(ALL_STRATEGIES, panel["strategy"].unique()):
            _band(ax, summarize(panel[panel["strategy"] == strategy], ["samples_trained"], "loss"),
                  "samples_trained", STRATEGY_COLORS.get(strategy, "grey"), strategy)
        ax.axvspan((1 - fraction) * budget, budget, color="grey", alpha=0.15, lw=0)
        ax.set(title=optimizer, xlabel="samples trained before the step")
    axes[0, 0].set_ylabel("training loss (nats)")
    fig.suptitle(f"{arch}, {regime}: training loss at equal samples, strategies on one axis "
                 f"(shaded: the last {fraction:.0%} of the common budget, {budget:g} samples)")
    _legend(fig, STRATEGY_COLORS, _present(ALL_STRATEGIES, steps["strategy"].unique()), "strategy")
    return fig
