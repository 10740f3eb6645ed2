"""The optimizer factory and the one table of default learning rates.

The defaults are the `shared` regime of the study: one learning rate per optimizer and
architecture, the same for every strategy and seed. Adding an optimizer is one entry in
BUILDERS and one column in DEFAULT_LR.
"""

import torch

from . import ARCHITECTURES, OPTIMIZERS
from .cgd import CGD
from .choices import check_choice

BUILDERS = {
    "sgd": torch.optim.SGD,
    "adam": torch.optim.Adam,
    "adagrad": torch.optim.Adagrad,
    "adadelta": torch.optim.Adadelta,
    "cgd": CGD,
}
assert tuple(BUILDERS) == OPTIMIZERS

# Per architecture (rows) and optimizer (columns). Adadelta's 1.0 is its textbook value:
# its own step size adapts, lr only scales it.
DEFAULT_LR = {
    "vit":        {"sgd": 0.05, "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.01},
    "modernbert": {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
    "llama":      {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
    "nanovlm":    {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
}
assert tuple(DEFAULT_LR) == ARCHITECTURES and all(tuple(row) == OPTIMIZERS for row in DEFAULT_LR.values())


def default_lr(arch: str, optimizer: str) -> float:
    check_choice("architecture", arch, ARCHITECTURES)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    return DEFAULT_LR[arch][optimizer]


def build_optimizer(name: str, params, lr: float, **options) -> torch.optim.Optimizer:
    """torch.optim's four, or our CGD; `options` go to the constructor (e.g. CGD's line_search)."""
    check_choice("optimizer", name, OPTIMIZERS)
    return BUILDERS[name](params, lr=lr, **options)

