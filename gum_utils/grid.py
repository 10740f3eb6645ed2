"""The grid runner: papermill runs an architecture's notebook once per cell of a profile.

    python -m gum_utils.grid --profile cpu --jobs 2 [--stage shared] [--arch llama --optimizer cgd ...]

A profile runs in stages, each a regime of the study: `shared` (every optimizer at its default
learning rate, as in the paper), then, where the profile tunes, `sweep` (a short learning-rate
sweep per architecture and optimizer) and `tuned` (the grid again, each optimizer at the rate
its sweep chose). Each cell writes `<out>/<profile>/<regime>/<arch>/<stem>.ipynb` and, beside
it, the run's result `.json` (stem `<optimizer>-<strategy>-s<seed>`, in a sweep
`<optimizer>-lr<rate>-s<seed>`). A cell whose result exists for the same parameters and code
is skipped, so an interrupted grid resumes where it stopped (`--force` redoes it); a tuned cell
whose parameters are those of a finished shared cell (its sweep chose the default) reuses that
run. A cell that fails is recorded with status "error" and the grid goes on. Each stage's time
is appended to `<out>/<profile>/grid-log.csv`. Imports no torch.
"""

import argparse
import atexit
import csv
import hashlib
import json
import os
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from .profiles import Cell, Profile, cells, profile as get_profile, PROFILES, sweep_cells
from .results import RunResult
from .tuning import TuningError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "book" / "runs"
# The code a result depends on; a change here invalidates the results (plots and book do not).
TRAINING_CODE = ("__init__.py", "cgd.py", "choices.py", "data.py", "distributed.py", "launch.py", "learning_rates.py",
                 "measure.py", "models.py", "notebook.py", "optim.py", "profiles.py", "results.py", "strategies.py",
                 "train.py", "looks.py")
STAGES = ("shared", "sweep", "tuned")
LOG_COLUMNS = ["finished", "profile", "stage", "cells", "skipped", "reused", "ran", "statuses", "minutes",
               "minutes_per_seed", "jobs", "cpus"]
KERNEL_ENV = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}


def code_fingerprint() -> str:
    digest = hashlib.sha256()
    package = ROOT / "gum_utils"
    files = [package / name for name in TRAINING_CODE] + sorted((package / "assets").glob("*"))
    for path in files:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


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
    threads: int

    @property
    def result_path(self) -> Path:
        return self.output.with_suffix(".json")

    @property
    def name(self) -> str:
        return f"{self.cell.arch}/{self.cell.stem}"


def plan(prof: Profile, out_root: Path, selected: list[Cell], jobs: int, regime: str = "shared",
         lrs: dict | None = None) -> list[Task]:
    """One task per cell. A sweep cell carries its own rate; `lrs` {(arch, optimizer): lr} tunes a grid."""
    fingerprint = code_fingerprint()
    threads = max(1, (os.cpu_count() or 1) // jobs)
    tasks = []
    for cell in selected:
        parameters = _parameters(prof, cell, (lrs or {}).get((cell.arch, cell.optimizer)))
        notebook = NOTEBOOKS / f"{cell.arch}.ipynb"
        output = out_root / prof.name / regime / cell.arch / f"{cell.stem}.ipynb"
        tasks.append(Task(cell, parameters, notebook, output, cell_key(parameters, notebook, fingerprint), threads))
    return tasks


def _parameters(prof: Profile, cell: Cell, lr: float | None) -> dict:
    if cell.lr is not None:
        return prof.sweep_parameters(cell.arch, cell.optimizer, cell.seed, cell.lr)
    from .learning_rates import default_lr

    chosen = None if lr is None or lr == default_lr(cell.arch, cell.optimizer) else lr  # the default: shared twin
    return prof.run_parameters(cell.arch, cell.optimizer, cell.strategy, cell.seed, chosen)


def chosen_lrs(prof: Profile, out_root: Path, archs, optimizers) -> dict:
    """The rate each (arch, optimizer) asked for got from its sweep's results under out_root."""
    from . import ARCHITECTURES, OPTIMIZERS
    from .tables import runs_table
    from .tuning import chosen_lrs as from_sweep

    root = out_root / prof.name
    runs = runs_table(root) if (root / "sweep").is_dir() else None
    pairs = [(a, o) for a in archs or ARCHITECTURES for o in optimizers or OPTIMIZERS]
    if runs is None or runs.empty:
        raise TuningError(f"no sweep results under {root / 'sweep'}: run the sweep stage first (--stage sweep)")
    return from_sweep(runs, pairs)


def reuse_twins(tasks: list[Task], twins: list[Task]) -> int:
    """Copy a finished twin (same cell key: same parameters and code) instead of rerunning it."""
    finished = {twin.key: twin for twin in twins if is_done(twin)}
    reused = 0
    for task in tasks:
        twin = finished.get(task.key)
        if twin is not None and not is_done(task):
            task.output.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(twin.result_path, task.result_path)
            shutil.copyfile(twin.output, task.output)  # the notebook last: it marks the cell finished
            reused += 1
    return reused


def is_done(task: Task, retry_failed: bool = False) -> bool:
    """A result for these parameters and this code exists (a recorded failure counts, unless retried)."""
    if not task.result_path.exists() or not task.output.exists():
        return False
    try:
        result = RunResult.from_json(task.result_path)
    except (ValueError, TypeError):
        return False
    return result.cell_key == task.key and not (retry_failed and result.status == "error")


def run_task(task: Task) -> str:
    """Execute one cell's notebook (in a worker process); return the run's status."""
    import papermill

    os.environ.update(KERNEL_ENV, OMP_NUM_THREADS=str(task.threads))
    task.output.parent.mkdir(parents=True, exist_ok=True)
    partial = task.output.with_name(f".{task.output.stem}.partial.ipynb")
    parameters = dict(task.parameters, result_path=str(task.result_path), cell_key=task.key)
    parameters.pop("arch")
    task.result_path.unlink(missing_ok=True)  # a stale result must not stand in for this run
    error = _execute(papermill, task, partial, parameters)
    if partial.exists():
        _hide_parameter_cells(partial)
        os.replace(partial, task.output)
    return _record_status(task, error)


def _execute(papermill, task: Task, partial: Path, parameters: dict) -> str | None:
    try:
        papermill.execute_notebook(str(task.notebook), str(partial), parameters=parameters, kernel_name="python3",
                                   cwd=str(task.notebook.parent), progress_bar=False, log_output=False,
                                   km=_WARM.kernel(task.notebook.parent, task.output.parents[2] / ".logs"))
    except Exception as exc:  # the executed notebook keeps the traceback; the grid goes on
        if isinstance(exc, papermill.PapermillExecutionError):  # the cell's own exception, not papermill's
            return f"{exc.ename}: {exc.evalue}"[:2000]
        return f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        _WARM.reset()
    return None


class WarmKernel:
    """One Jupyter kernel per worker, reused from cell to cell with its namespace reset.

    Importing torch and transformers takes ~5 s of CPU, several times a tiny cell's training;
    a warm kernel pays it once per worker. Every run seeds itself, so results do not depend on
    what ran before (a test checks a reused kernel against a fresh one). A kernel that died
    is replaced.
    """

    WARM_UP = "import gum_utils.train, gum_utils.looks, gum_utils.notebook, matplotlib.pyplot"

    def __init__(self):
        self._manager = None

    def kernel(self, cwd: Path, logs: Path):
        if self._manager is None or not self._manager.is_alive():
            from jupyter_client import KernelManager

            logs.mkdir(parents=True, exist_ok=True)
            # The kernel's own start-up chatter goes to a log, not over the progress bar.
            log = open(logs / f"kernel-{os.getpid()}.log", "a")
            self._manager = KernelManager(kernel_name="python3")
            self._manager.start_kernel(cwd=str(cwd), env=dict(os.environ), stderr=log, stdout=log)
            self._run(self.WARM_UP)
        return self._manager

    def reset(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._run("get_ipython().run_line_magic('reset', '-f')")

    def _run(self, code: str) -> None:
        client = self._manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
            client.execute_interactive(code, timeout=120, output_hook=lambda message: None)
        finally:
            client.stop_channels()

    def shutdown(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._manager.shutdown_kernel(now=True)


_WARM = WarmKernel()
atexit.register(_WARM.shutdown)


def _record_status(task: Task, error: str | None) -> str:
    """The notebook's own result, or an error result where the notebook failed before writing it."""
    if task.result_path.exists():
        result = RunResult.from_json(task.result_path)
        if result.cell_key == task.key:
            if error and result.status == "ok":  # trained, then the report broke: still a failure
                result.status, result.error = "error", error
                result.to_json(task.result_path)
            return result.status
    return _record_error(task, error or "the notebook wrote no result")


def _record_error(task: Task, error: str) -> str:
    RunResult(config=task.parameters, status="error", error=error, cell_key=task.key).to_json(task.result_path)
    return "error"


def _hide_parameter_cells(path: Path) -> None:
    """The book shows the run's configuration in a table; the parameter cells would only repeat it."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("parameters" in tags or "injected-parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(notebook, path)


class GridCounts(dict):
    """The count of each status, and when (seconds from the start) each seed's last cell finished."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed_done_s: dict[int, float] = {}


def run_grid(tasks: list[Task], jobs: int, force: bool = False, retry_failed: bool = False,
             show_progress: bool = True) -> GridCounts:
    """Run the tasks not yet done, `jobs` at a time; return the count of each status."""
    from tqdm import tqdm

    started = time.perf_counter()
    todo = [t for t in tasks if force or not is_done(t, retry_failed)]
    counts = GridCounts(skipped=len(tasks) - len(todo))
    left = {seed: sum(t.cell.seed == seed for t in todo) for seed in {t.cell.seed for t in todo}}
    if show_progress:
        print(f"{len(tasks)} cells: {counts['skipped']} already done, {len(todo)} to run on {jobs} worker(s)",
              flush=True)
    with ProcessPoolExecutor(max_workers=jobs) as pool, tqdm(total=len(todo), unit="cell",
                                                                disable=not show_progress) as bar:
        futures = {pool.submit(run_task, task): task for task in todo}
        for future in as_completed(futures):
            task = futures[future]
            try:
                status = future.result()
            except Exception as exc:  # the worker itself broke: record, go on
                status = _record_error(task, str(exc))
            counts[status] = counts.get(status, 0) + 1
            left[task.cell.seed] -= 1
            if not left[task.cell.seed]:
                counts.seed_done_s[task.cell.seed] = time.perf_counter() - started
            bar.set_postfix(failed=sum(v for k, v in counts.items() if k not in ("ok", "skipped")),
                            last=f"{task.name}:{status}")
            bar.update()
    return counts


def stage_tasks(prof: Profile, stage: str, out_root: Path, jobs: int, archs=None, optimizers=None,
                strategies=None, seeds=None) -> list[Task]:
    """The tasks of one stage for the subset asked (the sweep is always the standard strategy)."""
    if stage == "sweep":
        return plan(prof, out_root, sweep_cells(prof, archs, optimizers), jobs, "sweep")
    selected = cells(prof, archs, optimizers, strategies, seeds)
    lrs = chosen_lrs(prof, out_root, archs, optimizers) if stage == "tuned" else None
    return plan(prof, out_root, selected, jobs, stage, lrs)


def log_stage(path: Path, row: dict) -> None:
    """Append one stage's timing: the README and the book read how long a study took from here."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LOG_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def run_stage(prof: Profile, stage: str, out_root: Path, jobs: int, force: bool, retry_failed: bool,
              subset: dict) -> GridCounts:
    started = time.perf_counter()
    tasks = stage_tasks(prof, stage, out_root, jobs, **subset)
    reused = 0
    if stage == "tuned" and not force:
        reused = reuse_twins(tasks, stage_tasks(prof, "shared", out_root, jobs, **subset))
    print(f"stage {stage}: " + (f"{reused} cell(s) reused from shared (the sweep chose the default); "
                                if reused else ""), end="", flush=True)
    counts = run_grid(tasks, jobs, force, retry_failed)
    minutes = (time.perf_counter() - started) / 60
    statuses = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "skipped")
    per_seed = "; ".join(f"seed {seed} {s / 60:.1f}" for seed, s in sorted(counts.seed_done_s.items()))
    print(f"stage {stage} finished in {minutes:.1f} min: skipped {counts['skipped']}"
          + (f", {statuses}" if statuses else "") + (f" (each seed done after, min: {per_seed})" if per_seed else ""))
    log_stage(out_root / prof.name / "grid-log.csv", {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "profile": prof.name, "stage": stage, "cells": len(tasks),
        "skipped": counts["skipped"] - reused, "reused": reused, "ran": len(tasks) - counts["skipped"],
        "statuses": statuses, "minutes": round(minutes, 2), "minutes_per_seed": per_seed, "jobs": jobs,
        "cpus": os.cpu_count()})
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    parser.add_argument("--jobs", type=int, default=1, help="cells run at once")
    parser.add_argument("--stage", nargs="*", choices=STAGES,
                        help="stages to run, in study order (default: every stage of the profile)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="root of the executed notebooks and results")
    parser.add_argument("--arch", nargs="*", help="a subset of architectures")
    parser.add_argument("--optimizer", nargs="*", help="a subset of optimizers")
    parser.add_argument("--strategy", nargs="*", help="a subset of strategies")
    parser.add_argument("--seed", nargs="*", type=int, help="seeds (default: the profile's)")
    parser.add_argument("--force", action="store_true", help="redo cells that are already done")
    parser.add_argument("--retry-failed", action="store_true", help="redo cells recorded as errors")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    prof = get_profile(args.profile)
    stages = [stage for stage in STAGES if stage in (args.stage or prof.stages)]
    unknown = [stage for stage in stages if stage not in prof.stages]
    if unknown:
        parser.error(f"profile {prof.name!r} has no stage {', '.join(unknown)}; its stages: {', '.join(prof.stages)}")
    subset = {"archs": args.arch, "optimizers": args.optimizer, "strategies": args.strategy, "seeds": args.seed}
    try:
        cells(prof, **subset)  # a misspelt subset fails here, before anything runs
    except ValueError as error:
        parser.error(str(error))
    started, totals = time.perf_counter(), {}
    for stage in stages:
        try:
            counts = run_stage(prof, stage, args.out, args.jobs, args.force, args.retry_failed, subset)
        except TuningError as error:
            print(f"gum_utils.grid: {error}", file=sys.stderr)
            return 1
        for status, n in counts.items():
            totals[status] = totals.get(status, 0) + n
    minutes = (time.perf_counter() - started) / 60
    print(f"grid {prof.name} ({', '.join(stages)}) finished in {minutes:.1f} min: "
          + ", ".join(f"{k} {v}" for k, v in totals.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
