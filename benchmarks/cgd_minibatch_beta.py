"""What fixed-step CGD does on mini-batches: its betas and restarts over a short training run.

Trains the tiny model of one architecture with CGD (the grid's fixed step) through the study's
own `train`, whose records carry each step's beta and restart, and prints their distribution with
the seconds per step; optionally the same with `same_batch_y=True` (y from one batch, one more
forward/backward per step) and the final training losses of both.

    python benchmarks/cgd_minibatch_beta.py [--arch vit] [--steps 40] [--same-batch-y]
"""

import argparse
import statistics

import pandas as pd

from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.report.tables import cgd_behaviour


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="vit")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--same-batch-y", action="store_true", help="also run the same_batch_y option")
    args = parser.parse_args()
    variants = [{}] + ([{"same_batch_y": True}] if args.same_batch_y else [])
    for options in variants:
        config = RunConfig(arch=args.arch, optimizer="cgd", steps=args.steps, device="cpu", optimizer_options=options)
        result = train(config)
        seconds = statistics.median(r["step_time_s"] for r in result.records)
        last = [r["loss"] for r in result.records[-10:]]
        steps = pd.DataFrame(result.records).assign(regime="-", arch=args.arch)
        behaviour = cgd_behaviour(steps).drop(columns=["regime", "arch"]).iloc[0].to_dict()
        print(f"{args.arch} cgd {options or 'default'}: {result.status}; {behaviour}; "
              f"median step {seconds:.3f} s; mean loss of the last 10 steps {statistics.mean(last):.3f}")


if __name__ == "__main__":
    main()
