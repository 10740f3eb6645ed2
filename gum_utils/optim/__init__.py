"""The optimizers, one registry entry each: how to build it, its default learning rate, the state it keeps.

torch.optim's four from the paper, torch's AdamW (not in the paper: available to a run, left out of
the study's grid), and our nonlinear conjugate gradient descent (`cgd.py`). Adding an optimizer is
one entry in REGISTRY and one test. An architecture may override a default learning rate
(`Architecture.lr_overrides`). Importing this package imports no torch.
"""

import inspect
from dataclasses import dataclass

from ..choices import check_choice


@dataclass(frozen=True)
class Optimizer:
    name: str
    import_path: str  # "module:Class", imported when the optimizer is built
    default_lr: float
    state_tensors: int  # float tensors of a parameter's size the optimizer keeps per parameter
    in_study: bool = True  # part of the profiles' grid (the paper's five)

    @property
    def cls(self) -> type:
        import importlib

        module, _, name = self.import_path.partition(":")
        return getattr(importlib.import_module(module), name)

    def state_bytes_per_parameter(self, element_size: int = 4) -> int:
        return self.state_tensors * element_size

    def option_names(self) -> tuple:
        """What `optimizer_options` may set: the constructor's keywords besides params and lr."""
        parameters = inspect.signature(self.cls.__init__).parameters
        return tuple(name for name in parameters if name not in ("self", "params", "lr"))

    def build(self, params, lr: float, **options):
        return self.cls(params, lr=lr, **options)


REGISTRY = {optimizer.name: optimizer for optimizer in (
    Optimizer("sgd", "torch.optim:SGD", 0.1, state_tensors=0),  # no momentum: no state
    Optimizer("adam", "torch.optim:Adam", 1e-3, state_tensors=2),
    Optimizer("adagrad", "torch.optim:Adagrad", 1e-2, state_tensors=1),
    # Adadelta's 1.0 is its textbook value: its own step size adapts, lr only scales it.
    Optimizer("adadelta", "torch.optim:Adadelta", 1.0, state_tensors=2),
    Optimizer("cgd", "gum_utils.optim.cgd:CGD", 0.02, state_tensors=2),  # previous gradient, direction
    Optimizer("adamw", "torch.optim:AdamW", 1e-3, state_tensors=2, in_study=False),
)}
OPTIMIZERS = tuple(REGISTRY)
STUDY_OPTIMIZERS = tuple(name for name, optimizer in REGISTRY.items() if optimizer.in_study)


def optimizer(name: str) -> Optimizer:
    check_choice("optimizer", name, OPTIMIZERS)
    return REGISTRY[name]


def build_optimizer(name: str, params, lr: float, **options):
    """torch.optim's optimizers or our CGD; `options` go to the constructor (e.g. CGD's line_search)."""
    return optimizer(name).build(params, lr, **options)
