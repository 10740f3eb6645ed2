"""The one place that defines the profiles: which grid to run, how long, at which size.

`smoke` is for CI (seconds per cell), `cpu` is the default (tiny models, embedded data,
the whole grid on two cores), `paper` is the published shapes on a GPU. Accumulation
follows the paper's comparison: the micro-batch of the standard run, `accumulation`
micro-batches per step, so the same activation memory sees k times the samples per step.
"""

from dataclasses import dataclass

from . import ARCHITECTURES, OPTIMIZERS, STRATEGIES
from .choices import check_choice


@dataclass(frozen=True)
class Profile:
    name: str
    size: str
    steps: int
    batch_size: int
    accumulation: int  # micro-batches per step under the accumulation strategy
    seeds: tuple = (0,)
    eval_every: int | None = None
    eval_samples: int = 256
    device: str = "auto"
    description: str = ""

    def run_parameters(self, arch: str, optimizer: str, strategy: str, seed: int) -> dict:
        """The notebook parameters (RunConfig fields) of one cell of this profile's grid."""
        accumulate = strategy == "accumulation"
        return {
            "arch": arch, "size": self.size, "optimizer": optimizer, "strategy": strategy, "seed": seed,
            "steps": self.steps,
            "batch_size": self.batch_size * (self.accumulation if accumulate else 1),
            "micro_batch_size": self.batch_size if accumulate else None,
            "eval_every": self.eval_every, "eval_samples": self.eval_samples, "device": self.device,
        }


PROFILES = {
    "smoke": Profile("smoke", "tiny", steps=3, batch_size=4, accumulation=2, eval_samples=16,
                     description="every cell for 3 steps: checks the pipeline, measures nothing"),
    "cpu": Profile("cpu", "tiny", steps=150, batch_size=16, accumulation=4, eval_every=50, eval_samples=256,
                   description="tiny models on the embedded data, the whole grid on a laptop"),
    "paper": Profile("paper", "paper", steps=25, batch_size=8, accumulation=4, eval_every=5, eval_samples=64,
                     device="cuda", description="the published shapes for the paper's 25 steps, on a GPU"),
}


def profile(name: str) -> Profile:
    check_choice("profile", name, tuple(PROFILES))
    return PROFILES[name]


@dataclass(frozen=True)
class Cell:
    arch: str
    optimizer: str
    strategy: str
    seed: int

    @property
    def stem(self) -> str:
        return f"{self.optimizer}-{self.strategy}-s{self.seed}"


def cells(prof: Profile, archs=None, optimizers=None, strategies=None, seeds=None) -> list[Cell]:
    """The grid, or the subset named (None = all), in a stable order."""
    def pick(kind, chosen, valid):
        for value in chosen or ():
            check_choice(kind, value, valid)
        return tuple(chosen) if chosen else valid

    archs = pick("architecture", archs, ARCHITECTURES)
    optimizers = pick("optimizer", optimizers, OPTIMIZERS)
    strategies = pick("strategy", strategies, STRATEGIES)
    seeds = tuple(seeds) if seeds else prof.seeds
    return [Cell(a, o, s, seed) for a in archs for o in optimizers for s in strategies for seed in seeds]
