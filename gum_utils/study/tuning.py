"""Choosing each optimizer's learning rate from its sweep: the lowest validation loss wins.

A swept rate counts only if every seed of it finished (`ok`): a rate that diverged once is not
a rate to recommend. The choice is made per architecture and optimizer on the mean validation
loss over the sweep's seeds; a choice at the lowest or highest rate swept is flagged, since the
best value may lie beyond the range. Imports no torch.
"""

import math

import numpy as np
import pandas as pd

from ..core.config import default_lr
from ..core.results import RunResult, result_files
from . import paths

# Five log-spaced factors over two orders of magnitude around the default: x0.1 ... x10.
SWEEP_FACTORS = tuple(float(f"{factor:.3g}") for factor in np.logspace(-1, 1, 5))

CHOICE_COLUMNS = ["arch", "optimizer", "default_lr", "chosen_lr", "factor", "val_loss", "swept", "ok_rates",
                  "at_edge", "note"]


def swept(arch: str, optimizer: str, factors=SWEEP_FACTORS) -> list[float]:
    """The default times each factor, to 3 significant digits (the value a sweep file is named by)."""
    return [float(f"{default_lr(arch, optimizer) * factor:.3g}") for factor in factors]


class TuningError(RuntimeError):
    """The tuned grid was asked for before its sweep ran."""


def _rate_scores(runs: pd.DataFrame) -> pd.DataFrame:
    """Per swept rate: mean validation loss, and whether every seed of it finished with one."""
    scored = runs.assign(usable=(runs["status"] == "ok") & runs["val_loss"].notna())
    return scored.groupby("lr").agg(val_loss=("val_loss", "mean"), usable=("usable", "all")).reset_index()


def _choice(arch: str, optimizer: str, runs: pd.DataFrame) -> dict:
    default = default_lr(arch, optimizer)
    scores = _rate_scores(runs)
    good = scores[scores["usable"]]
    lowest, highest = scores["lr"].min(), scores["lr"].max()
    swept = ", ".join(f"{lr:g}" for lr in scores["lr"])
    if good.empty:
        return dict(zip(CHOICE_COLUMNS, [arch, optimizer, default, default, 1.0, math.nan, swept, 0, False,
                                         "no swept rate finished: the shared default is kept"]))
    best = good.loc[good["val_loss"].idxmin()]
    at_edge = bool(best["lr"] in (lowest, highest))
    side = "lowest" if best["lr"] == lowest else "highest"
    note = f"best at the {side} rate swept: the optimum may lie beyond the range" if at_edge else ""
    return dict(zip(CHOICE_COLUMNS, [arch, optimizer, default, float(best["lr"]), float(best["lr"]) / default,
                                     float(best["val_loss"]), swept, len(good), at_edge, note]))


def sweep_runs(profile_root) -> pd.DataFrame:
    """The sweep's runs under a profile's folder: regime, arch, optimizer, lr, status, val_loss (empty if none)."""
    rows = []
    for path in result_files(profile_root / "sweep") if (profile_root / "sweep").is_dir() else []:
        result, where = RunResult.from_json(path), paths.locate(path)
        config = result.config
        lr = result.summary.get("lr", config.get("lr"))
        rows.append({"regime": where.regime, "arch": config.get("arch", where.arch),
                     "optimizer": config.get("optimizer", paths.parse_stem(where.stem).get("optimizer")),
                     "lr": float(lr if lr is not None else paths.parse_stem(where.stem).get("lr") or math.nan),
                     "status": result.status, "val_loss": result.summary.get("val_loss")})
    columns = ["regime", "arch", "optimizer", "lr", "status", "val_loss"]
    return pd.DataFrame(rows, columns=columns).astype({"lr": float, "val_loss": float})


def choose(runs_df: pd.DataFrame) -> pd.DataFrame:
    """One row per architecture and optimizer swept in `runs_df` (the runs table; other regimes ignored)."""
    sweep = runs_df[runs_df["regime"] == "sweep"]
    rows = [_choice(arch, optimizer, runs) for (arch, optimizer), runs in sweep.groupby(["arch", "optimizer"])]
    return pd.DataFrame(rows, columns=CHOICE_COLUMNS)


def chosen_lrs(runs_df: pd.DataFrame, pairs) -> dict:
    """{(arch, optimizer): chosen lr} for each pair asked; a pair without a sweep is an error."""
    choices = choose(runs_df).set_index(["arch", "optimizer"])["chosen_lr"]
    missing = [f"{arch}/{optimizer}" for arch, optimizer in pairs if (arch, optimizer) not in choices.index]
    if missing:
        raise TuningError(f"no sweep results for {', '.join(missing)}: run the sweep stage first "
                          "(python -m gum_utils.study.grid --stage sweep ...)")
    return {pair: float(choices[pair]) for pair in pairs}
