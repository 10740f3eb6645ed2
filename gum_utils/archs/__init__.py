"""The architectures of the study, one file and one `Architecture` object each (see `base.py`).

Adding an architecture is a file here with its object, its name in `_MODULES`, and a notebook.
Importing this package imports neither torch nor transformers.
"""

import importlib

from ..choices import check_choice
from .base import SIZES, Architecture, DataShape

_MODULES = ("vit", "modernbert", "llama", "nanovlm")  # the study's order: tables and the book follow it
REGISTRY: dict[str, Architecture] = {
    arch.name: arch for arch in (importlib.import_module(f".{name}", __name__).ARCHITECTURE for name in _MODULES)}
ARCHITECTURES = tuple(REGISTRY)


def architecture(name: str) -> Architecture:
    """The architecture called `name`; a bad name fails naming the valid ones."""
    check_choice("architecture", name, ARCHITECTURES)
    return REGISTRY[name]


def build_model(arch: str, size: str = "tiny", pretrained: str | None = None):
    return architecture(arch).build_model(size, pretrained)


__all__ = ["ARCHITECTURES", "SIZES", "REGISTRY", "Architecture", "DataShape", "architecture", "build_model"]
