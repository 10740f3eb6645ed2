"""Dask's own cost per grid cell: the same work submitted to a LocalCluster and called in this process.

In one process and interleaved (Dask, direct, direct, Dask, ...), median over the rounds:

- a trivial task that takes a cell's job (the notebook's source, its parameters) and returns a
  cell's outcome of an executed notebook's size: its round trip is all Dask (scheduling,
  pickling, transfer), the cost each cell pays on top of its notebook;
- one smoke cell (vit, sgd, standard) through `gum_utils.study.cell.run_cell` on a warm kernel, on a
  worker and in this process: the same cost, seen beside a real (if tiny) cell.

Goal: under 0.2 s per cell. The cluster has 2 workers, as `--jobs 2`; tasks go one at a time.

    python benchmarks/dask_overhead.py [--rounds 5] [--tasks 20] [--no-cell]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gum_utils.study.dispatch import cell_job

from gum_utils.study.tasks import tasks_for
from gum_utils.study.cell import CellOutcome, code_fingerprint, run_cell
from gum_utils.study.cluster import open_client
from gum_utils.study.profiles import cells, profile

EXECUTED_NOTEBOOK_CHARS = 210_000  # a smoke cell's executed notebook, figures included


def echo_outcome(job) -> CellOutcome:
    """Does nothing a cell would not: receives its job, returns an outcome of a cell's size."""
    return CellOutcome("ok", '{"status": "ok"}', "x" * EXECUTED_NOTEBOOK_CHARS)


def smoke_job(out: Path):
    task = tasks_for(profile("smoke"), out, cells(profile("smoke"), ["vit"], ["sgd"], ["standard"]), jobs=2)[0]
    return cell_job(task, task.notebook.read_text(), code_fingerprint())


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def interleaved(on_dask, direct, rounds: int) -> tuple[list[float], list[float]]:
    """Seconds of each per round, alternating which goes first."""
    dask_s, direct_s = [], []
    for round_ in range(rounds):
        pair = [(dask_s, on_dask), (direct_s, direct)]
        for times, run in pair if round_ % 2 == 0 else reversed(pair):
            times.append(timed(run))
    return dask_s, direct_s


def report(name: str, dask_s: list[float], direct_s: list[float], per: int = 1) -> None:
    """Medians per cell, Dask's overhead (difference of medians), the ratio and the rounds' spread."""
    dask, direct = statistics.median(dask_s) / per, statistics.median(direct_s) / per
    spread = f"dask {min(dask_s) / per:.4f}-{max(dask_s) / per:.4f}, direct {min(direct_s) / per:.4f}-" \
             f"{max(direct_s) / per:.4f}"
    ratio = f"ratio {dask / direct:.3f}" if direct > 1e-3 else "ratio n/a (direct ~0)"
    print(f"{name}: median of {len(dask_s)} rounds, per cell: dask {dask:.4f} s, direct {direct:.4f} s, "
          f"overhead {dask - direct:+.4f} s ({'within' if dask - direct < 0.2 else 'OVER'} the 0.2 s goal), "
          f"{ratio}; rounds' range {spread}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=20, help="trivial tasks per round")
    parser.add_argument("--no-cell", action="store_true", help="skip the smoke cell")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as out, open_client(2) as client:
        job = smoke_job(Path(out))

        def trivial_on_dask():
            for _ in range(args.tasks):
                client.submit(echo_outcome, job, pure=False).result()

        def trivial_direct():
            for _ in range(args.tasks):
                echo_outcome(job)

        trivial_on_dask()  # the workers' first task unpickles the code
        report("trivial task (cell-sized)", *interleaved(trivial_on_dask, trivial_direct, args.rounds), args.tasks)
        if not args.no_cell:
            def cell_on_dask():
                client.submit(run_cell, job, pure=False).result()

            def cell_direct():
                run_cell(job)

            client.gather([client.submit(run_cell, job, pure=False) for _ in range(2)])  # both workers' kernels
            cell_direct()  # and this process's start warm
            report("smoke cell (vit sgd)", *interleaved(cell_on_dask, cell_direct, args.rounds))


if __name__ == "__main__":
    main()
