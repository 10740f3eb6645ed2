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
import csv
import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

from ..core.config import DATA_SOURCES, PARALLEL
from ..core.results import ResultFileError
from ..planner.cache import folder_problem as plan_cache_problem
from ..stopping import exit_code, sigterm_as_interrupt, stop_signal
from .dispatch import GridCounts, GridInterrupted, run_grid
from .outcomes import reuse_twins
from .preflight import GridOptionError, check_options, output_lock
from .profiles import PROFILES, Profile, cells, profile as get_profile
from .scratch import remove_stale_scratch
from .tasks import STAGES, stage_tasks
from .tuning import TuningError


ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "book" / "runs"


LOG_COLUMNS = ["finished", "profile", "stage", "cells", "skipped", "reused", "ran", "statuses", "minutes",
               "minutes_per_seed", "jobs", "cpus"]


def log_stage(path: Path, row: dict) -> None:
    """Append one stage's timing: the README and the book read how long a study took from here."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=LOG_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


@dataclasses.dataclass(frozen=True)
class GridRun:
    """What one command runs: a profile's stages, where their files go, on which workers, redoing what."""
    profile: Profile
    stages: tuple
    out: Path
    jobs: int | None  # local worker processes; None: the workers are elsewhere (a scheduler, SLURM)
    subset: dict
    force: bool = False
    retry_failed: bool = False
    retries: int = 1


def run_stage(run: GridRun, stage: str, client) -> GridCounts:
    """One stage of `run` on the Dask `client`."""
    from .cluster import worker_count

    prof, out_root, jobs, subset = run.profile, run.out, run.jobs, run.subset
    started = time.perf_counter()
    tasks = stage_tasks(prof, stage, out_root, jobs, **subset)
    reused = 0
    if stage == "tuned" and not run.force:
        reused = reuse_twins(tasks, stage_tasks(prof, "shared", out_root, jobs, **subset))
    print(f"stage {stage}: " + (f"{reused} cell(s) reused from shared (the sweep chose the default); "
                                if reused else ""), end="", flush=True)
    try:
        counts = run_grid(tasks, jobs or 1, run.force, run.retry_failed, client=client, retries=run.retries)
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
            return _run_grid(parser, args, totals)
    except GridOptionError as error:
        print(f"gum_utils.study.grid: error: {error}", file=sys.stderr)
        return 2
    except (GridInterrupted, KeyboardInterrupt) as stop:
        print(interrupted_summary(stop, totals), file=sys.stderr)
        return exit_code()
    except (OSError, ResultFileError, TuningError) as error:  # the cluster, the disk, a result: not a bug here
        if args.debug:
            raise
        one_line = " ".join(str(error).split())
        print(f"gum_utils.study.grid: {type(error).__name__}: {one_line} (--debug shows the traceback)", file=sys.stderr)
        return 1
    finally:  # however the grid ended (Ctrl-C, SIGTERM, a full disk, a write error): its ended workers' scratch
        remove_stale_scratch()


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


def _run_grid(parser: argparse.ArgumentParser, args, totals: dict) -> int:
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
    run = GridRun(prof, tuple(stages), args.out, jobs, subset, args.force, args.retry_failed, args.retries)
    started = time.perf_counter()
    with output_lock(args.out / prof.name), _open_cluster(args, jobs) as client:
        for stage in run.stages:
            for status, n in run_stage(run, stage, client).items():
                totals[status] = totals.get(status, 0) + n
    minutes = (time.perf_counter() - started) / 60
    errors = totals.get("error", 0)
    print(f"grid {prof.name} ({', '.join(stages)}) finished in {minutes:.1f} min: "
          + ", ".join(f"{k} {v}" for k, v in totals.items())
          + (f"; {errors} cell(s) ended in error (their notebooks and results say why; --retry-failed runs them "
             "again)" if errors else ""))
    return 1 if errors else 0  # diverged and oom are findings of the study; an error is not


def _unique(values: list | None) -> list | None:
    return None if values is None else list(dict.fromkeys(values))


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
