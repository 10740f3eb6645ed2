"""One torchrun launch of every two-rank scenario the distributed tests compare (importing torch
and transformers costs seconds per process, so they share one launch).

Run as `torchrun --nproc_per_node=2 tests/distributed_worker.py OUT`: rank 0 saves, per scenario,
the trained parameters, the RunResult and every rank's recorded losses to OUT/<name>.pt.
"""

import sys
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist

from gum_utils.core import distributed, trainer
from gum_utils.core.batches import count_items
from gum_utils.core.distributed import SINGLE
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train_model

# Padded text under accumulation: micro-batches hold unequal numbers of target tokens.
BASE = dict(arch="llama", strategy="accumulation", steps=1, batch_size=8, micro_batch_size=2, eval_samples=16,
            device="cpu", sample_interval_s=0.05)
SCENARIOS = {
    "ddp": dict(optimizer="sgd", parallel="ddp"),
    "fsdp": dict(optimizer="sgd", parallel="fsdp"),
    "naive": dict(optimizer="sgd", parallel="ddp"),
    "ddp-adam": dict(optimizer="adam", parallel="ddp"),
    "fsdp-adam": dict(optimizer="adam", parallel="fsdp"),
    "ddp-cgd": dict(optimizer="cgd", optimizer_options={"line_search": "strong_wolfe"}, parallel="ddp", steps=2),
    "fsdp-cgd": dict(optimizer="cgd", optimizer_options={"line_search": "strong_wolfe"}, parallel="fsdp", steps=2),
}


def config(name: str, world_size: int = 2) -> RunConfig:
    values = dict(BASE, **SCENARIOS[name], world_size=world_size)
    if world_size == 1:
        values.pop("parallel")
    return RunConfig(**values)


def mean_of_micro_batch_means(model, micros, window_items, precision=nullcontext, ranks=SINGLE):
    """The tempting window loss: each micro-batch's own mean, averaged (and DDP averages the ranks)."""
    window_loss = torch.zeros(())
    for index, micro in enumerate(micros):
        with ranks.gradient_sync(model, index == len(micros) - 1):
            with precision():
                loss = trainer.summed_loss(model, micro) / count_items(micro) / len(micros)
            loss.backward()
        window_loss += loss.detach()
    return ranks.sum(window_loss) / ranks.world_size


def run(name: str, out: Path) -> None:
    exact = trainer.forward_backward
    if name == "naive":
        trainer.forward_backward = mean_of_micro_batch_means
    try:
        result, model = train_model(config(name))
    finally:
        trainer.forward_backward = exact
    losses = [None] * dist.get_world_size()
    dist.all_gather_object(losses, [record["loss"] for record in result.records])
    state = distributed.full_state_dict(model)
    if dist.get_rank() == 0:
        torch.save({"state": state, "result": result.__dict__, "rank_losses": losses}, out / f"{name}.pt")


def main() -> None:
    warnings.simplefilter("ignore")  # FSDP2's notes on view outputs, once per rank and scenario
    out = Path(sys.argv[1])
    for name in SCENARIOS:
        run(name, out)
    distributed.end_rank(0)


if __name__ == "__main__":
    main()
