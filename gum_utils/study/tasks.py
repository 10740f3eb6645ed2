"""The cells a stage runs and their keys: one task per cell, with its notebook's parameters, where its
files go, and the key that says whether a finished result is still this cell's. Imports no torch.
"""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..archs import ARCHITECTURES
from ..core.config import default_lr
from ..optim import STUDY_OPTIMIZERS
from . import paths
from .fingerprint import code_fingerprint
from .profiles import Cell, Profile, cells, sweep_cells
from .tuning import TuningError

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
STAGES = ("shared", "sweep", "tuned")  # in study order: the tuned grid needs the sweep's answer


def cell_key(parameters: dict, notebook: Path, fingerprint: str) -> str:
    text = json.dumps(parameters, sort_keys=True) + fingerprint + hashlib.sha256(notebook.read_bytes()).hexdigest()
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Task:
    cell: Cell
    parameters: dict
    notebook: Path
    output: Path  # the executed notebook; the result sits beside it as .json
    key: str
    threads: int  # OMP threads of the cell's kernel; 0: the cores its worker may use

    @property
    def result_path(self) -> Path:
        return paths.result_path(self.output)

    @property
    def name(self) -> str:
        return f"{self.cell.arch}/{self.cell.stem}"


def tasks_for(prof: Profile, out_root: Path, selected: list[Cell], jobs: int | None, regime: str = "shared",
         lrs: dict | None = None) -> list[Task]:
    """One task per cell. A sweep cell carries its own rate; `lrs` {(arch, optimizer): lr} tunes a grid.

    `jobs` local workers share this machine's cores; None: the cells run elsewhere, on a worker's own.
    """
    fingerprint = code_fingerprint()
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs else 0
    tasks = []
    for cell in selected:
        parameters = cell_parameters(prof, cell, (lrs or {}).get((cell.arch, cell.optimizer)))
        notebook = NOTEBOOKS / f"{cell.arch}.ipynb"
        output = paths.notebook_path(out_root, prof.name, regime, cell.arch, cell.stem)
        tasks.append(Task(cell, parameters, notebook, output, cell_key(parameters, notebook, fingerprint), threads))
    return tasks


def cell_parameters(prof: Profile, cell: Cell, lr: float | None) -> dict:
    if cell.lr is not None:
        return prof.sweep_parameters(cell.arch, cell.optimizer, cell.seed, cell.lr)
    chosen = None if lr is None or lr == default_lr(cell.arch, cell.optimizer) else lr  # the default: shared twin
    return prof.run_parameters(cell.arch, cell.optimizer, cell.strategy, cell.seed, chosen)


def chosen_lrs(prof: Profile, out_root: Path, archs, optimizers) -> dict:
    """The rate each (arch, optimizer) asked for got from its sweep's results under out_root."""
    from .tuning import chosen_lrs as from_sweep, sweep_runs

    root = out_root / prof.name
    runs = sweep_runs(root)
    pairs = [(a, o) for a in archs or ARCHITECTURES for o in optimizers or STUDY_OPTIMIZERS]
    if runs.empty:
        raise TuningError(f"no sweep results under {root / 'sweep'}: run the sweep stage first (--stage sweep)")
    return from_sweep(runs, pairs)


def stage_tasks(prof: Profile, stage: str, out_root: Path, jobs: int, archs=None, optimizers=None,
                strategies=None, seeds=None) -> list[Task]:
    """The tasks of one stage for the subset asked (the sweep is always the standard strategy)."""
    if stage == "sweep":
        return tasks_for(prof, out_root, sweep_cells(prof, archs, optimizers), jobs, "sweep")
    selected = cells(prof, archs, optimizers, strategies, seeds)
    lrs = chosen_lrs(prof, out_root, archs, optimizers) if stage == "tuned" else None
    return tasks_for(prof, out_root, selected, jobs, prof.regime(stage), lrs)

