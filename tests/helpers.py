"""Small shared pieces for the tests: a model and a batch of each architecture, Ctrl-C for a child."""

import signal

import torch

from gum_utils.core.batches import BatchStream
from gum_utils.archs import architecture, build_model


def model_and_batch(arch: str, batch_size: int = 8, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(arch)
    model.train()
    batch = next(BatchStream(architecture(arch), "train", architecture(arch).shape("tiny"), batch_size, seed))
    return model, batch


def ctrl_c_as_a_terminal_delivers_it() -> None:
    """A child process's `preexec_fn`: SIGINT's default disposition. A suite started as a background
    job hands its children an ignored SIGINT (the shell's rule, which gum keeps), and a child told to
    stop by Ctrl-C would sleep through it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def gradients(model) -> dict:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}



def quadratic_closure(x, a, b, optimizer):
    """The closure of f(x) = x'Ax/2 - b'x over the one tensor `x`, in x's dtype (CGD's line-search problems)."""
    a, b = torch.as_tensor(a, dtype=x.dtype), torch.as_tensor(b, dtype=x.dtype)

    def closure():
        optimizer.zero_grad()
        loss = 0.5 * x @ a @ x - b @ x
        loss.backward()
        return loss

    return closure
