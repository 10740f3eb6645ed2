"""The memory strategies, one object each: how it prepares the model, what wraps its forward pass,
how it splits a step's batch, and whether the planner can trace it.

Every strategy reduces to the same loop over micro-batches (one for standard and checkpointing;
see `trainer.forward_backward`). Adding a strategy is a subclass here, its entry in REGISTRY, and
one test; the study's grid runs STRATEGIES, the others run where named (a notebook, `--strategy`).
Importing this module imports no torch.
"""

import contextlib

from ..choices import check_choice, require
from .batches import split_batch


class Strategy:
    """Standard training: the whole batch in one forward and backward pass."""

    name = "standard"
    splits_batch = False  # takes micro-batches of micro_batch_size per step
    not_planned = None  # why the planner cannot trace it (None: it can)

    def prepare(self, model) -> None:
        """Change the model before training (and before activations are metered)."""

    def forward_context(self, precision, device):
        """The forward pass's context factory: the precision's (autocast or none), and the strategy's own."""
        return precision

    def micro_batches(self, batch: dict, micro_batch_size: int) -> list[dict]:
        return [batch]

    def check_micro_batch(self, micro: int | None, share: int, whole: str) -> None:
        """A config's micro_batch_size for a per-process batch of `share` samples (`whole` says it in words)."""
        require(micro in (None, share), f"micro_batch_size is for strategy 'accumulation' only; {self.name!r} uses "
                                        f"the whole batch (leave micro_batch_size None or equal to {whole})")


class Checkpointing(Strategy):
    """The model's own non-reentrant gradient checkpointing: activations recomputed in backward."""

    name = "checkpointing"

    def prepare(self, model) -> None:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x renamed it
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


class Accumulation(Strategy):
    """Gradient accumulation: the step's batch in micro-batches, one optimizer step for them all."""

    name = "accumulation"
    splits_batch = True

    def micro_batches(self, batch: dict, micro_batch_size: int) -> list[dict]:
        # Own storage per micro-batch, as a loader would give: a view would keep the whole batch alive.
        return [{key: value.clone() for key, value in micro.items()} for micro in split_batch(batch, micro_batch_size)]

    def check_micro_batch(self, micro: int | None, share: int, whole: str) -> None:
        require(isinstance(micro, int) and not isinstance(micro, bool) and micro >= 1,
                f"strategy 'accumulation' needs micro_batch_size, an integer >= 1, got {micro!r}")
        smaller = "batch_size" if whole.startswith("batch_size") else "the per-rank batch"
        require(micro < share, f"accumulation needs micro_batch_size < {smaller} (got {micro} and {whole}): "
                               "with one micro-batch it is the standard strategy")
        require(share % micro == 0, f"micro_batch_size={micro} must divide {whole}")


class Offload(Strategy):
    """Activation offloading: what the forward saves for backward waits in host memory (pinned on a
    GPU) and comes back in backward (`torch.autograd.graph.save_on_cpu`): device memory for copies.
    On a CPU run it changes no number but the time; its activations are metered as 0 device bytes."""

    name = "offload"
    not_planned = ("activation offloading keeps the saved activations in host memory, and the planner "
                   "traces on fake CPU tensors, where host and device are one: it is not planned")

    def forward_context(self, precision, device):
        import torch

        @contextlib.contextmanager
        def offloaded():
            with precision(), torch.autograd.graph.save_on_cpu(pin_memory=device.type == "cuda"):
                yield
        return offloaded


REGISTRY = {strategy.name: strategy for strategy in (Strategy(), Checkpointing(), Accumulation(), Offload())}
ALL_STRATEGIES = tuple(REGISTRY)  # every name a run accepts
STRATEGIES = ("standard", "checkpointing", "accumulation")  # the study's grid: the paper's three


def strategy(name: str) -> Strategy:
    check_choice("strategy", name, ALL_STRATEGIES)
    return REGISTRY[name]


def is_checkpointing(model) -> bool:
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else model.is_gradient_checkpointing)
