"""Where a run's files live and what they are called: the one module that writes and reads run paths.

    <runs>/<profile>/<regime>/<arch>/<stem>.ipynb    the executed notebook
    <runs>/<profile>/<regime>/<arch>/<stem>.json     its result, beside it

A stem is `<optimizer>-<strategy>-s<seed>` in a grid and `<optimizer>-lr<rate>-s<seed>` in a
sweep. Imports neither torch nor Dask.
"""

import re
from dataclasses import dataclass
from pathlib import Path

# The rate may hold "-" (e.g. 1e-05), so it is matched last but for the seed.
GUIDE_IN_BOOK = "plans/guide.json"  # the decision guide's plans, relative to the book folder
# Any name a registry accepts (lower case, digits, underscores; no '-', the separator).
STEM = re.compile(r"^(?P<optimizer>[a-z][a-z0-9_]*)-(?:lr(?P<lr>.+)|(?P<strategy>[a-z][a-z0-9_]*))-s(?P<seed>\d+)$")


def stem(optimizer: str, strategy: str, seed: int, lr: float | None = None) -> str:
    """A grid cell's file stem; with `lr`, a sweep run's (its strategy is always standard)."""
    return f"{optimizer}-lr{lr:g}-s{seed}" if lr is not None else f"{optimizer}-{strategy}-s{seed}"


def parse_stem(name: str) -> dict:
    """{optimizer, strategy, lr, seed} from a stem; empty where the name is not one (a file of another kind)."""
    found = STEM.match(name)
    if not found:
        return {}
    parts = found.groupdict()
    return {"optimizer": parts["optimizer"], "strategy": parts["strategy"] or "standard",
            "lr": float(parts["lr"]) if parts["lr"] else None, "seed": int(parts["seed"]), "sweep": bool(parts["lr"])}


def notebook_path(runs: Path, profile: str, regime: str, arch: str, name: str) -> Path:
    return Path(runs) / profile / regime / arch / f"{name}.ipynb"


def result_path(notebook: Path) -> Path:
    return Path(notebook).with_suffix(".json")


@dataclass(frozen=True)
class RunLocation:
    """What a run file's place says of it."""

    profile: str
    regime: str
    arch: str
    stem: str


def locate(path: Path) -> RunLocation:
    """The profile, regime, architecture and stem of a run's notebook or result file."""
    path = Path(path)
    return RunLocation(path.parent.parent.parent.name, path.parent.parent.name, path.parent.name, path.stem)


def run_notebooks(profile_root: Path) -> list[Path]:
    """Every executed run notebook of a profile (not the half-written ones a writer hides behind a dot)."""
    return [notebook for notebook in Path(profile_root).glob("*/*/*.ipynb")
            if not notebook.name.startswith(".") and not notebook.parent.parent.name.startswith(".")]
