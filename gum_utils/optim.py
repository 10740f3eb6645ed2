"""The optimizer factory: torch.optim's four and our CGD, by name.

Adding an optimizer is one entry in BUILDERS and one column in learning_rates.DEFAULT_LR.
"""

import torch

from . import OPTIMIZERS
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


def build_optimizer(name: str, params, lr: float, **options) -> torch.optim.Optimizer:
    """torch.optim's four, or our CGD; `options` go to the constructor (e.g. CGD's line_search)."""
    check_choice("optimizer", name, OPTIMIZERS)
    return BUILDERS[name](params, lr=lr, **options)

