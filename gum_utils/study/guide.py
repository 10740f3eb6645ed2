"""The decision guide's plans: every architecture at paper size, traced by the planner, no run.

    python -m gum_utils.study.guide            # make guide (make reproduce runs it before the book)

For each architecture and study optimizer, the predicted peak of each strategy at the paper
profile's shapes (standard and checkpointing at its batch, accumulation at `accumulation` times
that batch in micro-batches of it), in float32 and in bfloat16 autocast. For Adam, the peak of each
strategy at micro-batches 1, 2, 4, ... up to the guide's batch (the accumulation run's batch), in
float32: the points the book draws and from which it reads, for common GPU sizes, what fits.
Planned for a GPU. Plans are
cached on disk (planner/record.py), so a second guide reads them; the first traces 176 steps in
parallel processes, the five optimizers of a shape over one forward and backward (planner/trace.py:
plan_optimizers). Written to one JSON file that the report (no torch) reads: book/plans/guide.json.
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from ..archs import ARCHITECTURES
from ..core.config import RunConfig
from ..planner.record import cached_peak_bytes, planner_code
from ..core.results import write_atomically
from ..core.strategies import STRATEGIES
from ..optim import STUDY_OPTIMIZERS
from . import paths
from .profiles import PROFILES

GUIDE_FILE = Path(__file__).resolve().parents[2] / "book" / paths.GUIDE_IN_BOOK
CURVE_OPTIMIZER = "adam"  # the paper's reference optimizer: the micro-batch curves are drawn for it
CURVE_DTYPE = "float32"  # the curves' precision; the paper shapes are planned in PAPER_DTYPES
PAPER_DTYPES = ("float32", "bfloat16")
SCHEMA = 1


def guide_batch(profile: str = "paper") -> int:
    """The batch the guide asks each strategy to reach: the paper profile's accumulation batch."""
    shape = PROFILES[profile]
    return shape.batch_size * shape.accumulation


def micro_batches(batch: int) -> list[int]:
    """1, 2, 4, ... up to `batch` (each divides a power-of-two batch)."""
    sizes, size = [], 1
    while size <= batch:
        sizes.append(size)
        size *= 2
    return sizes if sizes[-1] == batch else sizes + [batch]


def paper_config(arch: str, optimizer: str, strategy: str, batch_size: int, micro_batch_size=None,
                 size: str = "paper", dtype: str = CURVE_DTYPE) -> RunConfig:
    return RunConfig(arch=arch, size=size, optimizer=optimizer, strategy=strategy, batch_size=batch_size,
                     micro_batch_size=micro_batch_size, device="cuda", dtype=dtype)


def tasks(archs=ARCHITECTURES, optimizers=STUDY_OPTIMIZERS, profile: str = "paper", size: str = "paper") -> list[dict]:
    """Every configuration the guide traces, once each: the paper shapes in each of PAPER_DTYPES, then
    Adam's curves (`size` other than paper: the same shapes on smaller models, for the tests)."""
    shape, batch = PROFILES[profile], guide_batch(profile)
    found = {}
    for arch in archs:
        for dtype in PAPER_DTYPES:
            for optimizer in optimizers:
                for strategy in STRATEGIES:
                    accumulate = strategy == "accumulation"
                    found.setdefault((arch, optimizer, strategy, batch if accumulate else shape.batch_size,
                                      shape.batch_size if accumulate else None, dtype), "paper")
        for strategy in STRATEGIES if CURVE_OPTIMIZER in optimizers else ():
            for micro in micro_batches(batch):
                if strategy != "accumulation":
                    found.setdefault((arch, CURVE_OPTIMIZER, strategy, micro, None, CURVE_DTYPE), "curve")
                elif micro < batch:  # one micro-batch of the whole batch is the standard strategy
                    found.setdefault((arch, CURVE_OPTIMIZER, strategy, batch, micro, CURVE_DTYPE), "curve")
    return [dict(zip(("arch", "optimizer", "strategy", "batch_size", "micro_batch_size", "dtype"), key), size=size)
            for key in found]


def trace(group: list[dict]) -> list[dict]:
    """The plans of tasks that differ in their optimizer only (one forward and backward traced for
    all, then read from the disk cache where traced before); a plan that fails says why."""
    from ..planner.record import planned_peak_bytes
    from ..planner.trace import plan_optimizers

    configs = [paper_config(**task) for task in group]
    started = time.perf_counter()
    try:
        plans = plan_optimizers(configs[0], [config.optimizer for config in configs])
        peaks, error = [plans[config.optimizer].peak_bytes for config in configs], None
        for config in configs:
            planned_peak_bytes(config)  # leaves the peak in the disk cache (traced once in this process)
    except Exception as failure:  # noqa: BLE001 (a configuration the planner cannot trace is reported)
        peaks, error = [None] * len(group), f"{type(failure).__name__}: {failure}"
    seconds = round((time.perf_counter() - started) / len(group), 1)
    return [dict(task, peak_bytes=peak, error=error, seconds=seconds) for task, peak in zip(group, peaks)]


def by_shape(todo: list[dict]) -> list[list[dict]]:
    """The tasks grouped by all but their optimizer, the largest groups first (the last to finish
    are then short: the workers end together)."""
    groups = {}
    for task in todo:
        groups.setdefault(tuple((key, value) for key, value in task.items() if key != "optimizer"), []).append(task)
    return sorted(groups.values(), key=len, reverse=True)


def build_guide(archs=ARCHITECTURES, optimizers=STUDY_OPTIMIZERS, workers: int = 2, progress: bool = True,
                size: str = "paper") -> dict:
    from tqdm import tqdm

    todo = tasks(archs, optimizers, size=size)
    rows, missing = [], []
    for task in todo:
        peak = cached_peak_bytes(paper_config(**task))
        (missing.append(task) if peak is None else rows.append(dict(task, peak_bytes=peak, error=None, seconds=0.0)))
    groups = by_shape(missing)
    with tqdm(total=len(todo), initial=len(rows), unit="plan", disable=not progress, desc="guide") as bar:
        if workers > 1 and len(groups) > 1:
            with ProcessPoolExecutor(workers) as pool:
                for traced in pool.map(trace, groups):
                    rows.extend(traced), bar.update(len(traced))
        else:
            for group in groups:
                traced = trace(group)
                rows.extend(traced), bar.update(len(traced))
    order = {tuple(task.values()): number for number, task in enumerate(todo)}
    rows.sort(key=lambda row: order[tuple(row[key] for key in todo[0])])
    return {"schema": SCHEMA, "batch": guide_batch(), "paper_batch": PROFILES["paper"].batch_size,
            "accumulation": PROFILES["paper"].accumulation, "size": size, "curve_optimizer": CURVE_OPTIMIZER,
            "device": "cuda", "dtype": CURVE_DTYPE, "paper_dtypes": list(PAPER_DTYPES), "code": planner_code()[:16], "plans": rows}


def write_guide(guide: dict, file: Path = GUIDE_FILE) -> Path:
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(file, json.dumps(guide, indent=1))
    return file


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes tracing at once (each holds one paper-size fake model)")
    parser.add_argument("--arch", nargs="+", default=list(ARCHITECTURES), choices=ARCHITECTURES,
                        help="the architectures the guide covers (default all)")
    parser.add_argument("--out", type=Path, default=GUIDE_FILE)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    started = time.perf_counter()
    guide = build_guide(archs=tuple(args.arch), workers=args.workers)
    failed = [row for row in guide["plans"] if row["error"]]
    path = write_guide(guide, args.out)
    print(f"{len(guide['plans'])} plans ({len(failed)} failed) in {(time.perf_counter() - started) / 60:.1f} min: {path}")
    for row in failed:
        print(f"  {row['arch']}/{row['optimizer']}/{row['strategy']} batch {row['batch_size']} {row['dtype']}: "
              f"{row['error']}")
    return 0


if __name__ == "__main__":
    from ..stopping import run_command

    sys.exit(run_command("gum_utils.study.guide", main))
