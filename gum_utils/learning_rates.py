"""The learning rates: the shared regime's one table, and the values a sweep tries around it.

The defaults are the `shared` regime of the study: one learning rate per optimizer and
architecture, the same for every strategy and seed. Imports no torch, so the grid runner
can plan a sweep without it.
"""

import numpy as np

from . import ARCHITECTURES, OPTIMIZERS
from .choices import check_choice

# Per architecture (rows) and optimizer (columns). Adadelta's 1.0 is its textbook value:
# its own step size adapts, lr only scales it.
DEFAULT_LR = {
    "vit":        {"sgd": 0.05, "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.01},
    "modernbert": {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
    "llama":      {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
    "nanovlm":    {"sgd": 0.1,  "adam": 1e-3, "adagrad": 1e-2, "adadelta": 1.0, "cgd": 0.02},
}
assert tuple(DEFAULT_LR) == ARCHITECTURES and all(tuple(row) == OPTIMIZERS for row in DEFAULT_LR.values())

# Five log-spaced factors over two orders of magnitude around the default: x0.1 ... x10.
SWEEP_FACTORS = tuple(float(f"{factor:.3g}") for factor in np.logspace(-1, 1, 5))


def default_lr(arch: str, optimizer: str) -> float:
    check_choice("architecture", arch, ARCHITECTURES)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    return DEFAULT_LR[arch][optimizer]


def swept(arch: str, optimizer: str, factors=SWEEP_FACTORS) -> list[float]:
    """The default times each factor, to 3 significant digits (the value a sweep file is named by)."""
    return [float(f"{default_lr(arch, optimizer) * factor:.3g}") for factor in factors]
