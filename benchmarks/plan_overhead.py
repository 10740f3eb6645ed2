"""What recording the planner's prediction (and the CPU tensor peak) beside each run costs the cpu grid.

Each distinct memory configuration is traced and measured once (`planner.record.planned_peak_bytes`,
`planner.record.cpu_tensor_peak_bytes`, then read from the cache); every cell of that configuration
trains. In one process, interleaved per configuration (trace and measure in a fresh cache, then
train one cell with the cache off; medians of the rounds), the one-off costs are spread over the
grid's cells per configuration (the profile's shared and sweep cells over its distinct memory
configurations) and printed as a share of the grid's training time. Goal (issue 16): the
prediction adds at most 2 %.

    python benchmarks/plan_overhead.py [--profile cpu] [--archs ...] [--optimizers adam] [--rounds 5]
"""

import argparse
import os
import statistics
import tempfile
import time

from gum_utils.archs import ARCHITECTURES
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.core.strategies import STRATEGIES
from gum_utils.planner import cache, record, trace
from gum_utils.study.profiles import cells, profile, sweep_cells


def timed(work) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def one_off_costs(config: RunConfig) -> tuple[float, float]:
    """Seconds to trace the plan, then to measure the tensor peak, of a configuration the cache has not seen."""
    with tempfile.TemporaryDirectory() as folder:
        os.environ[cache.PLAN_CACHE_VARIABLE] = folder
        trace._PLANS.clear()
        return timed(lambda: record.planned_peak_bytes(config)), timed(lambda: record.cpu_tensor_peak_bytes(config))


def training_cost(config: RunConfig) -> float:
    os.environ[cache.PLAN_CACHE_VARIABLE] = "off"
    return timed(lambda: train(config))


def cells_per_configuration(prof) -> float:
    """The shared and sweep cells over the grid's distinct memory configurations. Tuned cells are
    left out (those at the default rate reuse their shared twin): the overhead is an upper bound."""
    grid = cells(prof)
    configurations = {(c.arch, c.optimizer, c.strategy) for c in grid}
    return (len(grid) + len(sweep_cells(prof))) / len(configurations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--optimizers", nargs="+", default=["adam"])
    parser.add_argument("--archs", nargs="+", default=list(ARCHITECTURES), choices=ARCHITECTURES)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    prof = profile(args.profile)
    plans, peaks, trainings = [], [], []
    for arch in args.archs:
        for optimizer in args.optimizers:
            for strategy in STRATEGIES:
                config = RunConfig(**prof.run_parameters(arch, optimizer, strategy, seed=0))
                rounds = [(*one_off_costs(config), training_cost(config)) for _ in range(args.rounds)]
                planned, measured, run = (statistics.median(column) for column in zip(*rounds))
                plans.append(planned), peaks.append(measured), trainings.append(run)
                print(f"{arch:10} {optimizer:8} {strategy:13} plan {planned:5.2f} s, tensor peak {measured:5.2f} s, "
                      f"one cell's training {run:6.2f} s")
    per_configuration = cells_per_configuration(prof)
    grid_training_s = sum(trainings) * per_configuration
    print(f"{per_configuration:.2f} cells per configuration in the {prof.name} grid; of its training time:")
    print(f"  the planner's prediction (goal: at most 2 %): {100 * sum(plans) / grid_training_s:.2f} %")
    print(f"  the CPU tensor peak (claim (b)):               {100 * sum(peaks) / grid_training_s:.2f} %")


if __name__ == "__main__":
    main()
