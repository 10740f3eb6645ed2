"""Predicted (gum_utils.planner.trace) against measured (profiler allocator events) peaks on the CPU.

Every architecture x optimizer x strategy at the tiny size and two micro-batch sizes; prints one
JSON line per case and a summary (worst relative error, quantiles). Usage:
    python scripts/validate_plan.py [--size tiny] [--micro 4 8] [--arch ...] [--out FILE]
"""

import argparse
import json
import statistics
import time

from gum_utils import ARCHITECTURES, OPTIMIZERS, STRATEGIES
from gum_utils.core.config import RunConfig
from gum_utils.planner.reference import measured_peak
from gum_utils.planner.trace import plan

ACCUMULATED_BATCH = 16  # accumulation's batch; standard and checkpointing take the micro-batch as their batch


def case_config(arch, size, optimizer, strategy, micro, batch=ACCUMULATED_BATCH) -> RunConfig:
    accumulates = strategy == "accumulation"
    return RunConfig(arch=arch, size=size, optimizer=optimizer, strategy=strategy,
                     batch_size=batch if accumulates else micro,
                     micro_batch_size=micro if accumulates else None)


def check(config: RunConfig, device: str = "cpu") -> dict:
    started = time.perf_counter()
    predicted = plan(config)
    plan_s = time.perf_counter() - started
    measured = measured_peak(config, device=device)
    return {"arch": config.arch, "size": config.size, "optimizer": config.optimizer, "strategy": config.strategy,
            "batch_size": config.batch_size, "micro_batch_size": config.effective_micro_batch_size,
            "predicted_bytes": predicted.peak_bytes, "measured_bytes": measured,
            "error": predicted.peak_bytes / measured - 1, "plan_s": plan_s, "breakdown": predicted.breakdown}


def summary(rows: list[dict]) -> dict:
    errors = sorted(abs(r["error"]) for r in rows)
    worst = max(rows, key=lambda r: abs(r["error"]))
    return {"cases": len(rows), "worst": {k: worst[k] for k in ("arch", "optimizer", "strategy", "micro_batch_size",
                                                                  "error")},
            "median_abs_error": statistics.median(errors), "within_1pct": sum(e <= 0.01 for e in errors),
            "within_10pct": sum(e <= 0.10 for e in errors)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--micro", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--arch", nargs="+", default=list(ARCHITECTURES))
    parser.add_argument("--optimizer", nargs="+", default=list(OPTIMIZERS))
    parser.add_argument("--strategy", nargs="+", default=list(STRATEGIES))
    parser.add_argument("--out", help="also write the JSON lines here")
    parser.add_argument("--device", default="cpu", help="where the measured steps run (cuda: max_memory_allocated)")
    parser.add_argument("--batch-size", type=int, default=ACCUMULATED_BATCH, help="accumulation's batch")
    args = parser.parse_args(argv)
    rows = []
    out = open(args.out, "w") if args.out else None
    for arch in args.arch:
        for optimizer in args.optimizer:
            for strategy in args.strategy:
                for micro in args.micro:
                    config = case_config(arch, args.size, optimizer, strategy, micro, args.batch_size)
                    rows.append(check(config, args.device))
                    line = json.dumps(rows[-1])
                    print(line, flush=True)
                    if out:
                        print(line, file=out, flush=True)
    print(json.dumps({"summary": summary(rows)}))


if __name__ == "__main__":
    main()
