"""The grid runner: papermill runs an architecture's notebook once per cell of a profile.

    python -m gum_utils.study.grid --profile cpu --jobs 2 [--stage shared] [--arch llama --optimizer cgd ...]

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

The cells run on Dask (`gum_utils.study.cluster`): `--jobs N` local worker processes, `--scheduler`
a running cluster, `--slurm` SLURM jobs. A task carries the notebook's source and returns the
executed notebook and the result (`gum_utils.study.cell`); this process writes them under `--out`,
so workers share no filesystem with it. A cell whose worker dies is run again elsewhere
(Dask's `distributed.scheduler.allowed-failures`); one whose notebook raises is retried
`--retries` times, then recorded as failed.
"""

import argparse
import contextlib
import csv
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..archs import ARCHITECTURES
from ..core.config import DATA_SOURCES, MAX_SEED, PARALLEL, RunConfig, default_lr
from ..planner.cache import folder_problem as plan_cache_problem
from ..core.results import ResultFileError, RunResult, notebook_problem, write_temporary
from ..core.strategies import ALL_STRATEGIES
from ..optim import STUDY_OPTIMIZERS
from ..stopping import exit_code, sigterm_as_interrupt, stop_signal
from . import paths
from .cell import STARTED_TOPIC, CellFailed, CellJob, error_result, run_cell
from .fingerprint import code_fingerprint
from .profiles import PROFILES, Cell, Profile, cells, profile as get_profile, sweep_cells
from .scratch import remove_stale_scratch
from .tuning import TuningError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DEFAULT_OUT = ROOT / "book" / "runs"
STAGES = ("shared", "sweep", "tuned")
LOG_COLUMNS = ["finished", "profile", "stage", "cells", "skipped", "reused", "ran", "statuses", "minutes",
               "minutes_per_seed", "jobs", "cpus"]


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


def plan(prof: Profile, out_root: Path, selected: list[Cell], jobs: int | None, regime: str = "shared",
         lrs: dict | None = None) -> list[Task]:
    """One task per cell. A sweep cell carries its own rate; `lrs` {(arch, optimizer): lr} tunes a grid.

    `jobs` local workers share this machine's cores; None: the cells run elsewhere, on a worker's own.
    """
    fingerprint = code_fingerprint()
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs else 0
    tasks = []
    for cell in selected:
        parameters = _parameters(prof, cell, (lrs or {}).get((cell.arch, cell.optimizer)))
        notebook = NOTEBOOKS / f"{cell.arch}.ipynb"
        output = paths.notebook_path(out_root, prof.name, regime, cell.arch, cell.stem)
        tasks.append(Task(cell, parameters, notebook, output, cell_key(parameters, notebook, fingerprint), threads))
    return tasks


def _parameters(prof: Profile, cell: Cell, lr: float | None) -> dict:
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
    """A readable result for these parameters and this code, beside a readable executed notebook
    (a recorded failure counts, unless retried)."""
    if not task.result_path.exists() or not task.output.exists() or corrupt_file(task):
        return False
    result = RunResult.from_json(task.result_path)
    return result.cell_key == task.key and not (retry_failed and result.status == "error")


def corrupt_file(task: Task) -> str | None:
    """'<file>: <why>' for a cell's result or notebook that exists but cannot be read; None if none."""
    if task.result_path.exists():
        try:
            RunResult.from_json(task.result_path)
        except ResultFileError as error:
            return str(error)
    if task.output.exists():
        problem = notebook_problem(task.output)
        if problem:
            return f"{task.output}: {problem}"
    return None


def report_corrupt(tasks: list[Task]) -> int:
    """Say which files of the cells about to be redone were corrupt, and why."""
    found = [(task, corrupt_file(task)) for task in tasks]
    found = [(task, problem) for task, problem in found if problem]
    for task, problem in found:
        print(f"redoing {task.name}: {problem}", flush=True)
    return len(found)


def cell_job(task: Task, notebook_text: str, fingerprint: str) -> CellJob:
    return CellJob(task.name, notebook_text, task.parameters, task.key, task.threads, fingerprint)


def save_outcome(task: Task, outcome) -> str:
    """Write a cell's new result and notebook to temporaries, then swap them in: a write that fails
    (a full disk, a read-only folder) leaves the old pair as it was, and the cell counts as failed."""
    staged = []
    try:
        task.output.parent.mkdir(parents=True, exist_ok=True)
        staged.append((write_temporary(task.result_path, outcome.result_text), task.result_path))
        if outcome.notebook_text is not None:
            staged.append((write_temporary(task.output, outcome.notebook_text), task.output))
    except OSError as error:
        for tmp, _ in staged:
            tmp.unlink()
        return _unwritten(task, error, "its old files stay as they were")
    task.output.unlink(missing_ok=True)  # an existing notebook marks the cell finished: none beside a new result
    for tmp, path in staged:  # renames in one folder: the new result, then the notebook that marks it done
        os.replace(tmp, path)
    return outcome.status


def _record_error(task: Task, error: str) -> str:
    """A failure with no notebook (the worker or the cluster broke): the next grid runs the cell again."""
    task.output.unlink(missing_ok=True)
    try:
        error_result(task.parameters, task.key, error).to_json(task.result_path)
    except OSError as write_error:
        return _unwritten(task, write_error, "the next grid runs it again")
    return "error"


def _unwritten(task: Task, error: OSError, then: str) -> str:
    """A cell whose files could not be written (a full disk, a read-only folder): said, counted failed."""
    print(f"gum_utils.study.grid: {task.name}: its new files could not be written ({error.strerror or error}); "
          f"the cell counts as failed and {then}", file=sys.stderr, flush=True)
    return "error"


class GridCounts(dict):
    """The count of each status, when (seconds from the start) each seed's last cell finished, and
    how many cells started more than once (a worker died under them, or their notebook raised)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed_done_s: dict[int, float] = {}
        self.reran = 0

    def failed(self) -> int:
        return sum(n for status, n in self.items() if status not in ("ok", "skipped"))


def run_grid(tasks: list[Task], jobs: int = 1, force: bool = False, retry_failed: bool = False,
             show_progress: bool = True, client=None, retries: int = 1) -> GridCounts:
    """Run the tasks not yet done on the Dask `client` (None: a local cluster of `jobs` workers).

    Returns the count of each status. A notebook that raises is run `retries` more times.
    """
    from .cluster import describe, open_client

    todo = [t for t in tasks if force or not is_done(t, retry_failed)]
    counts = GridCounts(skipped=len(tasks) - len(todo))
    if not force:
        report_corrupt(todo)
    if show_progress:
        where = describe(client) if client is not None else f"{jobs} local worker(s)"
        print(f"{len(tasks)} cells: {counts['skipped']} already done, {len(todo)} to run on {where}", flush=True)
    if not todo:
        return counts
    try:
        if client is None:
            with open_client(jobs) as local:
                return _run_on(local, todo, counts, show_progress, retries)
        return _run_on(client, todo, counts, show_progress, retries)
    except KeyboardInterrupt:
        raise GridInterrupted(None, counts) from None


def _run_on(client, todo: list[Task], counts: GridCounts, show_progress: bool, retries: int) -> GridCounts:
    from distributed import as_completed
    from tqdm import tqdm

    started = time.perf_counter()
    left = {seed: sum(t.cell.seed == seed for t in todo) for seed in {t.cell.seed for t in todo}}
    starts: dict[str, int] = {}
    client.subscribe_topic(STARTED_TOPIC, lambda event: _count_start(starts, event))
    futures = _submit(client, todo, retries)
    try:
        with tqdm(total=len(todo), unit="cell", disable=not show_progress) as bar:
            for future in as_completed(futures):
                task = futures.pop(future)
                status = _collect(task, future)
                counts[status] = counts.get(status, 0) + 1
                left[task.cell.seed] -= 1
                if not left[task.cell.seed]:
                    counts.seed_done_s[task.cell.seed] = time.perf_counter() - started
                counts.reran = sum(n > 1 for n in starts.values())
                bar.set_postfix(failed=counts.failed(), reran=counts.reran, last=f"{task.name}:{status}")
                bar.update()
    finally:
        client.unsubscribe_topic(STARTED_TOPIC)
    return counts


def _count_start(starts: dict, event) -> None:
    _, message = event
    starts[message["key"]] = starts.get(message["key"], 0) + 1


def _submit(client, todo: list[Task], retries: int) -> dict:
    """One Dask task per cell; it carries the notebook's text, not its path."""
    fingerprint = code_fingerprint()
    texts = {notebook: notebook.read_text() for notebook in {task.notebook for task in todo}}
    futures = {}
    for task in todo:
        job = cell_job(task, texts[task.notebook], fingerprint)
        key = f"cell-{task.cell.arch}-{task.cell.stem}-{uuid.uuid4().hex[:8]}"  # unique: a rerun is a new task
        futures[client.submit(run_cell, job, key=key, retries=retries, pure=False)] = task
    return futures


def _collect(task: Task, future) -> str:
    """Write what a finished task brought back; return the cell's status."""
    try:
        outcome = future.result()
    except CellFailed as failed:  # the notebook raised on every try: its executed notebook shows why
        outcome = failed.outcome
    except Exception as exc:  # the worker died on every try, or the cluster broke: record, go on
        return _record_error(task, f"{type(exc).__name__}: {exc}"[:2000])
    finally:
        future.release()
    return save_outcome(task, outcome)


def stage_tasks(prof: Profile, stage: str, out_root: Path, jobs: int, archs=None, optimizers=None,
                strategies=None, seeds=None) -> list[Task]:
    """The tasks of one stage for the subset asked (the sweep is always the standard strategy)."""
    if stage == "sweep":
        return plan(prof, out_root, sweep_cells(prof, archs, optimizers), jobs, "sweep")
    selected = cells(prof, archs, optimizers, strategies, seeds)
    lrs = chosen_lrs(prof, out_root, archs, optimizers) if stage == "tuned" else None
    return plan(prof, out_root, selected, jobs, prof.regime(stage), lrs)


def log_stage(path: Path, row: dict) -> None:
    """Append one stage's timing: the README and the book read how long a study took from here."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LOG_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def run_stage(prof: Profile, stage: str, out_root: Path, jobs: int | None, force: bool, retry_failed: bool,
              subset: dict, client, retries: int = 1) -> GridCounts:
    """One stage on the Dask `client`; `jobs`: its local workers (None: workers elsewhere)."""
    from .cluster import worker_count

    started = time.perf_counter()
    tasks = stage_tasks(prof, stage, out_root, jobs, **subset)
    reused = 0
    if stage == "tuned" and not force:
        reused = reuse_twins(tasks, stage_tasks(prof, "shared", out_root, jobs, **subset))
    print(f"stage {stage}: " + (f"{reused} cell(s) reused from shared (the sweep chose the default); "
                                if reused else ""), end="", flush=True)
    try:
        counts = run_grid(tasks, jobs or 1, force, retry_failed, client=client, retries=retries)
    except GridInterrupted as stop:
        raise GridInterrupted(stage, stop.counts) from None
    minutes = (time.perf_counter() - started) / 60
    statuses = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "skipped")
    if counts.reran:
        statuses += f" ({counts.reran} re-run)"
    per_seed = "; ".join(f"seed {seed} {s / 60:.1f}" for seed, s in sorted(counts.seed_done_s.items()))
    print(f"stage {stage} finished in {minutes:.1f} min: skipped {counts['skipped']}"
          + (f", {statuses}" if statuses else "") + (f" (each seed done after, min: {per_seed})" if per_seed else ""))
    log_stage(out_root / prof.name / "grid-log.csv", {
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "profile": prof.name, "stage": stage, "cells": len(tasks),
        "skipped": counts["skipped"] - reused, "reused": reused, "ran": len(tasks) - counts["skipped"],
        "statuses": statuses, "minutes": round(minutes, 2), "minutes_per_seed": per_seed,
        "jobs": jobs or worker_count(client), "cpus": os.cpu_count()})
    return counts


class GridOptionError(ValueError):
    """An option the grid cannot run with, found before any cell starts: one line, exit code 2."""


class GridInterrupted(Exception):
    """Ctrl-C during a stage: what that stage had finished (kept on disk) travels with it."""

    def __init__(self, stage: str | None, counts: dict):
        super().__init__(stage)
        self.stage, self.counts = stage, counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    parser.add_argument("--stage", nargs="*", choices=STAGES,
                        help="stages to run, in study order (default: every stage of the profile)")
    parser.add_argument("--out", type=_folder, default=DEFAULT_OUT, help="root of the executed notebooks and results")
    parser.add_argument("--arch", nargs="*", help="a subset of architectures")
    parser.add_argument("--optimizer", nargs="*", help="a subset of optimizers")
    parser.add_argument("--strategy", nargs="*", help="a subset of strategies")
    parser.add_argument("--seed", nargs="*", type=int, help="seeds (default: the profile's)")
    parser.add_argument("--world-size", type=int, default=1,
                        help="processes per run (torchrun; one per GPU): its runs form the regime <stage>-<parallel><N>")
    parser.add_argument("--parallel", choices=PARALLEL, help="with --world-size > 1: ddp (default) or fsdp (FSDP2)")
    parser.add_argument("--data", choices=DATA_SOURCES,
                        help="embedded data or datasets by name from the hub (default: the profile's)")
    parser.add_argument("--force", action="store_true", help="redo cells that are already done")
    parser.add_argument("--retry-failed", action="store_true", help="redo cells recorded as errors")
    parser.add_argument("--retries", type=int, default=1, help="runs again of a cell whose notebook raises")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an expected failure too")
    _add_cluster_options(parser)
    args = parser.parse_args(argv)
    totals: dict = {}
    try:
        with sigterm_as_interrupt():  # `timeout`, SLURM and kill stop the grid as Ctrl-C does: finished cells kept
            return _run(parser, args, totals)
    except GridOptionError as error:
        print(f"gum_utils.study.grid: error: {error}", file=sys.stderr)
        return 2
    except (GridInterrupted, KeyboardInterrupt) as stop:
        remove_stale_scratch()  # what the workers it just ended left (their processes are gone now)
        print(interrupted_summary(stop, totals), file=sys.stderr)
        return exit_code()
    except (OSError, ResultFileError, TuningError) as error:  # the cluster, the disk, a result: not a bug here
        if args.debug:
            raise
        one_line = " ".join(str(error).split())
        print(f"gum_utils.study.grid: {type(error).__name__}: {one_line} (--debug shows the traceback)", file=sys.stderr)
        return 1


def _folder(text: str) -> Path:
    if not text.strip():  # Path("") is the working directory: results would land wherever the grid was started
        raise argparse.ArgumentTypeError("needs a folder, got an empty name")
    return Path(text)


def interrupted_summary(stop: BaseException, totals: dict) -> str:
    """One line: what is done (and kept), and how to go on."""
    done = dict(totals)
    if isinstance(stop, GridInterrupted):
        for status, n in stop.counts.items():
            done[status] = done.get(status, 0) + n
    finished = sum(n for status, n in done.items() if status != "skipped")
    where = f" in stage {stop.stage}" if isinstance(stop, GridInterrupted) and stop.stage else ""
    kept = ", ".join(f"{status} {n}" for status, n in done.items() if n) or "nothing yet"
    return (f"gum_utils.study.grid: stopped by {stop_signal().name}{where}: {finished} cell(s) finished in this run and kept ({kept}); "
            "run the same command again to resume (finished cells are skipped)")


def _run(parser: argparse.ArgumentParser, args, totals: dict) -> int:
    if (args.scheduler or args.slurm) and args.jobs is not None:
        parser.error("--jobs is the size of a local cluster: leave it out with --scheduler or --slurm")
    if args.scheduler and args.slurm:
        parser.error("--scheduler and --slurm exclude each other")
    if args.slurm and not shutil.which("sbatch"):  # else the cluster would wait for jobs that never start
        parser.error("--slurm submits jobs with sbatch, which is not on PATH here")
    jobs = None if args.scheduler or args.slurm else (1 if args.jobs is None else args.jobs)
    if (jobs is not None and jobs < 1) or args.retries < 0 or args.max_jobs < 1:
        parser.error("--jobs and --max-jobs must be >= 1, --retries >= 0")
    prof = get_profile(args.profile)
    if args.data:
        prof = dataclasses.replace(prof, data=args.data)
    if args.world_size < 1:
        parser.error("--world-size must be >= 1")
    if args.world_size > 1:
        prof = dataclasses.replace(prof, world_size=args.world_size, parallel=args.parallel or "ddp")
    stages = [stage for stage in STAGES if stage in (args.stage or prof.stages)]
    unknown = [stage for stage in stages if stage not in prof.stages]
    if unknown:
        parser.error(f"profile {prof.name!r} has no stage {', '.join(unknown)}; its stages: {', '.join(prof.stages)}")
    subset = {"archs": _unique(args.arch), "optimizers": _unique(args.optimizer), "strategies": _unique(args.strategy),
              "seeds": _unique(args.seed)}  # `--seed 0 0` is one seed: each cell runs once
    try:
        cells(prof, **subset)  # a misspelt subset fails here, before anything runs
    except ValueError as error:
        parser.error(str(error))
    check_options(args, prof, subset)
    if jobs is not None and plan_cache_problem():  # local workers share this machine's cache: said once, here
        print(f"gum_utils.study.grid: warning: {plan_cache_problem()}", file=sys.stderr, flush=True)
    stale = remove_stale_scratch()
    if stale:
        print(f"removed {len(stale)} scratch folder(s) that killed grids left in {stale[0].parent}", flush=True)
    started = time.perf_counter()
    with output_lock(args.out / prof.name), _open_cluster(args, jobs) as client:
        for stage in stages:
            counts = run_stage(prof, stage, args.out, jobs, args.force, args.retry_failed, subset, client,
                               args.retries)
            for status, n in counts.items():
                totals[status] = totals.get(status, 0) + n
    minutes = (time.perf_counter() - started) / 60
    errors = totals.get("error", 0)
    print(f"grid {prof.name} ({', '.join(stages)}) finished in {minutes:.1f} min: "
          + ", ".join(f"{k} {v}" for k, v in totals.items())
          + (f"; {errors} cell(s) ended in error (their notebooks and results say why; --retry-failed runs them "
             "again)" if errors else ""))
    return 1 if errors else 0  # diverged and oom are findings of the study; an error is not


# --- options checked before the first cell ------------------------------------------------

def check_options(args, prof: Profile, subset: dict) -> None:
    """Every option a cell would fail on, checked now: raises GridOptionError with one line."""
    for option, valid in (("stage", STAGES), ("arch", ARCHITECTURES), ("optimizer", STUDY_OPTIMIZERS),
                          ("strategy", ALL_STRATEGIES), ("seed", ("integers",))):
        if getattr(args, option) == []:  # argparse takes `--stage` alone as an empty list: not "all"
            raise GridOptionError(f"--{option} needs one or more values ({', '.join(valid)}); leave it out for all")
    bad_seeds = [seed for seed in args.seed or () if not 0 <= seed <= MAX_SEED]
    if bad_seeds:
        raise GridOptionError(f"--seed takes integers from 0 to {MAX_SEED}, got {', '.join(map(str, bad_seeds))}")
    if args.parallel and args.world_size == 1:
        raise GridOptionError(f"--parallel {args.parallel} spans several processes: give --world-size N (N > 1) too")
    check_cell_configs(prof, subset)
    check_writable(args.out)
    if prof.device == "cuda" and not (args.scheduler or args.slurm) and local_gpu_count() == 0:
        raise GridOptionError(f"the {prof.name} profile runs every cell on a GPU (device cuda) and torch sees none "
                              "on this machine: use --profile cpu (or smoke) here, or GPU workers elsewhere "
                              "(--scheduler tcp://HOST:PORT, or --slurm --gpus-per-job N)")
    if args.scheduler:
        check_scheduler(args.scheduler)


def _unique(values: list | None) -> list | None:
    return None if values is None else list(dict.fromkeys(values))


def check_cell_configs(prof: Profile, subset: dict) -> None:
    """Each selected cell's RunConfig, built as its notebook builds it: the config's rules (data and
    size, world size and micro-batches, ...) are checked in one place, and a cell that breaks one
    fails the grid here, before any cell runs. Sweep cells are one-process standard runs of the same."""
    for cell in cells(prof, **subset):
        try:
            RunConfig.from_dict(_parameters(prof, cell, None))
        except ValueError as error:
            raise GridOptionError(f"cell {cell.arch}/{cell.stem} of profile {prof.name!r} "
                                  f"({prof.size} size, {prof.data} data, world size {prof.world_size}) "
                                  f"would fail: {error}") from None


def local_gpu_count(timeout_s: float = 120.0) -> int:
    """The CUDA devices torch sees here, asked in a child process (this one imports no torch)."""
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                              capture_output=True, text=True, timeout=timeout_s)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


@contextlib.contextmanager
def output_lock(folder: Path):
    """One grid at a time on a profile's output folder: a second would run every cell the first runs.
    An flock, so a grid killed with -9 leaves no stale lock; the file names the holder's process."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".grid.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise GridOptionError(f"another grid ({holder}) is running on {folder}: let it finish (finished cells "
                                  "are skipped when you run again) or give another --out") from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield


def check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".gum-write-check-"):
            pass
    except OSError as error:
        raise GridOptionError(f"--out {out} is not a writable folder: {error.strerror or error}") from None


def check_scheduler(address: str, timeout: float = 3.0) -> None:
    """A scheduler that answers within `timeout` seconds, before the client waits its 30 s."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if parts.scheme not in ("tcp", "tls") or not host or not port:
        raise GridOptionError(f"--scheduler {address!r} is not an address of the form tcp://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise GridOptionError(f"no Dask scheduler answers at {address} within {timeout:g} s "
                              f"({error.strerror or error}); start one with `dask scheduler`") from None
    found = _not_a_scheduler(f"{parts.scheme}://{parts.netloc}", timeout) if parts.scheme == "tcp" else None
    if found:
        raise GridOptionError(f"--scheduler {address} is not a Dask scheduler: {found}")


_NOT_DASK = "(a dashboard's port, 8787 by default, is not its scheduler's, 8786 by default)"


def _not_a_scheduler(address: str, timeout: float) -> str | None:
    """None where a Dask scheduler answers Dask's handshake and identity call within `timeout`; else
    what was found: a Dask worker, a server that never speaks Dask (HTTP), bytes that are not Dask's."""
    import asyncio

    from distributed.comm import connect

    async def identity():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        return f"something accepts connections there but gives no Dask handshake within {timeout:g} s {_NOT_DASK}"
    except Exception as error:  # noqa: BLE001 (what a non-Dask peer's bytes make of Dask's reader: said, not raised)
        said = " ".join(str(error).split())[:100]
        return f"what answers there does not speak Dask ({type(error).__name__}: {said}) {_NOT_DASK}"
    kind = reply.get("type") if isinstance(reply, dict) else None
    return None if kind == "Scheduler" else f"a Dask {kind or 'peer'} answers there, not a scheduler"


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where the cells run (default: a local Dask cluster of --jobs workers)")
    where.add_argument("--jobs", type=int, help="local worker processes, one cell each at a time (default 1)")
    where.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="a running Dask scheduler to submit to")
    where.add_argument("--slurm", action="store_true", help="SLURM jobs of one worker each, scaled adaptively")
    where.add_argument("--queue", help="SLURM partition")
    where.add_argument("--account", help="SLURM account")
    where.add_argument("--gpus-per-job", type=int, default=0, help="GPUs of each SLURM job")
    where.add_argument("--cpus-per-job", type=int, default=4, help="cores of each SLURM job")
    where.add_argument("--memory-per-job", default="16GB", help="memory of each SLURM job")
    where.add_argument("--walltime", help="time limit of each SLURM job, e.g. 02:00:00")
    where.add_argument("--max-jobs", type=int, default=4, help="SLURM jobs at most at once")


def _open_cluster(args, jobs: int | None):
    from .cluster import SlurmJobs, open_client

    slurm = SlurmJobs(args.queue, args.account, args.gpus_per_job, args.walltime, args.cpus_per_job,
                      args.memory_per_job, args.max_jobs) if args.slurm else None
    return open_client(jobs or 1, args.scheduler, slurm)


if __name__ == "__main__":
    sys.exit(main())
