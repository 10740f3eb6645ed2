"""How one optimizer step's gradient is computed: standard, checkpointing, accumulation.

Every strategy reduces to the same loop over micro-batches (one for standard and
checkpointing). The loss of the window is a sum over all its items (target tokens or
samples) divided by the total count of real items in the window, so that 4 micro-batches
of 4 give exactly the gradient of one batch of 16, padding included; over several processes
the window spans every rank's micro-batches, so 2 ranks give the gradient of one process.
"""

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import STRATEGIES
from .choices import check_choice
from .data import count_items, split_batch
from .distributed import SINGLE, Ranks


@dataclass(frozen=True)
class Strategy:
    name: str
    checkpointing: bool = False
    accumulates: bool = False


REGISTRY = {
    "standard": Strategy("standard"),
    "checkpointing": Strategy("checkpointing", checkpointing=True),
    "accumulation": Strategy("accumulation", accumulates=True),
}
assert tuple(REGISTRY) == STRATEGIES


def strategy(name: str) -> Strategy:
    check_choice("strategy", name, STRATEGIES)
    return REGISTRY[name]


def prepare_model(model: torch.nn.Module, name: str) -> None:
    """Switch on the model's own (non-reentrant) gradient checkpointing where the strategy asks."""
    if not strategy(name).checkpointing:
        return
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x renamed it
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def is_checkpointing(model: torch.nn.Module) -> bool:
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else model.is_gradient_checkpointing)


def micro_batches(batch: dict, name: str, micro_batch_size: int) -> list[dict]:
    if not strategy(name).accumulates:
        return [batch]
    # Own storage per micro-batch, as a loader would give: a view would keep the whole batch alive.
    return [{key: value.clone() for key, value in micro.items()} for micro in split_batch(batch, micro_batch_size)]


def summed_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy summed over the batch's real items (labels are pre-shifted; -100 is ignored)."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    logits = model(**inputs).logits
    labels = batch["labels"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")


def forward_backward(model: torch.nn.Module, micros: list[dict], window_items: int,
                     precision=nullcontext, ranks: Ranks = SINGLE) -> torch.Tensor:
    """Accumulate into .grad the gradient of the window's mean loss; return that loss (detached).

    `precision` is a context for the forward pass only (e.g. bfloat16 autocast), as autocast asks.
    Over several processes (`ranks`), `window_items` counts the items of every rank's micro-batches,
    gradients are synchronised on the last micro-batch only, and the loss returned is the sum over
    ranks: the global window loss, the same on every rank (a line search decides on it).
    """
    window_loss = torch.zeros((), device=micros[0]["labels"].device)
    last = len(micros) - 1
    for index, micro in enumerate(micros):
        with ranks.gradient_sync(model, index == last):
            with precision():
                loss = summed_loss(model, micro) / window_items
            ranks.backward(loss)
        window_loss += loss.detach()
    return ranks.sum(window_loss)


def window_items(micros: list[dict]) -> int:
    return sum(count_items(micro) for micro in micros)
