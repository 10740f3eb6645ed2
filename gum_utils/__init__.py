"""gum: Gradient Under Microscope, a reproducible study of memory-efficient training.

The package in layers; each imports only those above it in this list:

    choices.py   one check for every named choice
    stopping.py  how every command stops on Ctrl-C or SIGTERM (one line, exit 130 or 143)
    archs/       one file per architecture: configs, embedded and hub data, learning rates, its look
    optim/       the optimizer registry and our CGD
    core/        one run: RunConfig, strategies, the trainer, distributed runs, measurement
    planner/     will a step fit: the trace, its reference measurement, the budget search, the cache,
                 a reader's own config.json
    study/       profiles, the grid on Dask, tuning, run paths, the notebooks' helpers (records a run's plan)
    plan.py      the memory planner's command line (over planner/ and the report's measured time costs)
    report/      tables, statistics, claims, figures, the book (imports neither torch nor Dask)

The names of the grid's axes, derived from the registries. Importing the package is cheap:
torch and transformers load only when a run is set up, so the grid runner and the report stay light.
"""

import sys

if sys.argv[:1] == ["-m"]:  # being located by `python -m gum_utils.<command>` (Python's own marker)
    from .stopping import stop_quietly_from_the_start

    stop_quietly_from_the_start()

from .archs import ARCHITECTURES, SIZES
from .core.config import PARALLEL
from .core.strategies import STRATEGIES
from .optim import OPTIMIZERS, STUDY_OPTIMIZERS

__all__ = ["ARCHITECTURES", "OPTIMIZERS", "STUDY_OPTIMIZERS", "STRATEGIES", "SIZES", "PARALLEL"]
__version__ = "0.1.0"
