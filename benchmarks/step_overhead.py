"""Our training step against a bare hand-written PyTorch loop, same model, batch and optimizer.

For each architecture, in one process and interleaved (ours, bare, bare, ours, ...), each
round builds both from the same seed and times `STEPS` optimizer steps on one fixed batch;
ours runs the whole `Run.loop` (bookkeeping, sampler thread at 100 ms, final validation on
one sample). Prints the median time ratio over the rounds. Goal: within 3% of the bare loop.

    python benchmarks/step_overhead.py [--rounds 7] [--steps 20] [--arch llama ...]
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from gum_utils import ARCHITECTURES
from gum_utils.core import measure
from gum_utils.core.trainer import Run
from gum_utils.core.config import RunConfig


def config_for(arch: str, steps: int) -> RunConfig:
    return RunConfig(arch=arch, optimizer="adam", steps=steps, batch_size=16, fixed_batch=True, eval_samples=1)


def time_ours(config: RunConfig) -> float:
    run = Run(config)
    run.setup()
    with measure.Sampler(run.device, config.sample_interval_s):
        start = time.perf_counter()
        run.loop()
        return time.perf_counter() - start


def time_bare(config: RunConfig) -> float:
    run = Run(config)
    run.setup()  # the same model, optimizer and first batch as ours
    (micros, _), model, optimizer = run.next_step_batches(), run.model, run.optimizer
    batch = micros[0]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    labels = batch["labels"].reshape(-1)
    items = int((labels != -100).sum())
    start = time.perf_counter()
    for _ in range(config.steps):
        optimizer.zero_grad(set_to_none=True)
        logits = model(**inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=-100, reduction="sum") / items
        loss.backward()
        optimizer.step()
        loss.item()
    return time.perf_counter() - start


def compare(arch: str, rounds: int, steps: int) -> dict:
    config = config_for(arch, steps)
    time_ours(config), time_bare(config)  # warm-up: first allocations, lazy initialisation
    ours, bare = [], []
    for r in range(rounds):
        order = (time_ours, time_bare) if r % 2 == 0 else (time_bare, time_ours)
        for timer in order:
            (ours if timer is time_ours else bare).append(timer(config))
    ratios = [o / b for o, b in zip(ours, bare)]
    return {"arch": arch, "ours_ms": 1000 * statistics.median(ours) / steps,
            "bare_ms": 1000 * statistics.median(bare) / steps, "ratio": statistics.median(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--arch", nargs="*", default=list(ARCHITECTURES), choices=ARCHITECTURES)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds x {args.steps} steps")
    print(f"{'arch':<12}{'ours ms/step':>14}{'bare ms/step':>14}{'ratio':>8}")
    for arch in args.arch:
        row = compare(arch, args.rounds, args.steps)
        print(f"{row['arch']:<12}{row['ours_ms']:>14.2f}{row['bare_ms']:>14.2f}{row['ratio']:>8.3f}", flush=True)


if __name__ == "__main__":
    main()
