"""Steps and evals tables built in memory from a known loss-per-sample curve, for analyses with known answers.

A run's loss at a record is the curve at the samples it had trained on BEFORE that step (the grid
records a step's loss from the forward pass before its update), times a per-run factor, plus
per-record noise; an evaluation after step s reads the curve at the samples trained after it.
Vectorised (no result files), so hundreds of simulated grids build in well under a second.
"""

import numpy as np
import pandas as pd

from gum_utils.report import tables


def decaying(samples, scale: float = 400.0):
    """One loss-per-sample-trained curve: 1 + 2 exp(-samples / scale) nats."""
    return 1.0 + 2.0 * np.exp(-np.asarray(samples, dtype=float) / scale)


def run_grid(regimes=("shared",), archs=("vit",), optimizers=("adam", "sgd"), strategies=("standard",),
             seeds=(0, 1, 2), batch=None, step_time=None, level=None) -> pd.DataFrame:
    """One row per run with its identity; batch/step_time/level(optimizer, strategy) override the defaults
    (batch 4, accumulation 16; 0.1 s a step; level 1, a factor on the curve)."""
    index = pd.MultiIndex.from_product([regimes, archs, optimizers, strategies, seeds],
                                       names=["regime", "arch", "optimizer", "strategy", "seed"])
    runs = index.to_frame(index=False)
    key = list(zip(runs["optimizer"], runs["strategy"]))
    runs["batch_size"] = [(batch or {}).get(k, 16 if k[1] == "accumulation" else 4) for k in key]
    runs["step_time_s"] = [(step_time or {}).get(k, 0.1) for k in key]
    runs["level"] = [(level or {}).get(k, 1.0) for k in key]
    runs["run"] = runs[["regime", "arch", "optimizer", "strategy", "seed"]].astype(str).agg("/".join, axis=1)
    return runs.assign(profile="synthetic", lr=1e-3, status="ok")


def steps_frame(runs: pd.DataFrame, steps: int = 100, curve=decaying, run_noise: float = 0.0,
                record_noise: float = 0.0, rng=None) -> pd.DataFrame:
    """Training records of every run, as tables.steps_table gives them."""
    rng = rng if rng is not None else np.random.default_rng(0)
    factor = runs["level"] * (1 + run_noise * rng.standard_normal(len(runs)))
    rows = runs.loc[runs.index.repeat(steps)].reset_index(drop=True)
    step = np.tile(np.arange(1, steps + 1), len(runs))
    before = (step - 1) * rows["batch_size"].to_numpy()
    loss = curve(before) * np.repeat(factor.to_numpy(), steps) * (1 + record_noise * rng.standard_normal(len(rows)))
    table = rows.assign(step=step, loss=loss, samples_seen=before + rows["batch_size"],
                        time_s=step * rows["step_time_s"])
    return tables.with_trained_axes(table.drop(columns="level"), "records")


def evals_frame(runs: pd.DataFrame, steps: int = 100, every: int = 10, curve=decaying, run_noise: float = 0.0,
                rng=None, column: str = "val_loss") -> pd.DataFrame:
    """Evaluations after every `every` steps (and the last), as tables.evals_table gives them."""
    rng = rng if rng is not None else np.random.default_rng(0)
    at = np.unique(np.r_[np.arange(every, steps + 1, every), steps])
    factor = runs["level"] * (1 + run_noise * rng.standard_normal(len(runs)))
    rows = runs.loc[runs.index.repeat(len(at))].reset_index(drop=True)
    step = np.tile(at, len(runs))
    samples = step * rows["batch_size"].to_numpy()
    table = rows.assign(step=step, samples_seen=samples, time_s=step * rows["step_time_s"],
                        **{column: curve(samples) * np.repeat(factor.to_numpy(), len(at))})
    return tables.with_trained_axes(table.drop(columns=["level", "step_time_s"]), "evals")
