"""gum: Gradient Under Microscope, a reproducible study of memory-efficient training.

The three axes of the grid. Importing the package is cheap: torch and transformers load
only when a module that trains is imported, so the grid runner and the analysis stay light.
"""

ARCHITECTURES = ("vit", "modernbert", "llama", "nanovlm")
OPTIMIZERS = ("sgd", "adam", "adagrad", "adadelta", "cgd")
STRATEGIES = ("standard", "checkpointing", "accumulation")
SIZES = ("tiny", "paper")
PARALLEL = ("ddp", "fsdp")  # how one run spans several processes (gum_utils.distributed)

__all__ = ["ARCHITECTURES", "OPTIMIZERS", "STRATEGIES", "SIZES", "PARALLEL"]
__version__ = "0.1.0"
