"""The one place that defines the profiles: which grid to run, how long, at which size.

`smoke` is for CI (seconds per cell), `cpu` is the default (tiny models, embedded data,
the whole grid on two cores), `paper` is the published shapes on a GPU. Accumulation
follows the paper's comparison: the micro-batch of the standard run, `accumulation`
micro-batches per step, so the same activation memory sees k times the samples per step.

A profile with `sweep_steps` also tunes: a short learning-rate sweep per architecture and
optimizer (standard strategy, `sweep_factors` times the shared default), then the grid again
with each optimizer's best value (see `gum_utils.study.tuning`).
"""

from dataclasses import dataclass

from ..archs import ARCHITECTURES
from ..choices import check_choice
from ..core.strategies import ALL_STRATEGIES, STRATEGIES, strategy as strategy_spec
from ..optim import OPTIMIZERS, STUDY_OPTIMIZERS
from . import paths
from .tuning import SWEEP_FACTORS, swept


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
    data: str = "embedded"  # or "hub": datasets by name (gum_utils.archs.hub); `--data` overrides it
    world_size: int = 1  # processes per run (torchrun); `--world-size` and `--parallel` set them
    parallel: str = "ddp"
    sweep_steps: int | None = None  # None: no tuning stage
    sweep_factors: tuple = SWEEP_FACTORS
    sweep_seeds: tuple = (1000,)  # none of the grid's: a tuned run never repeats the sweep run that chose it
    description: str = ""

    @property
    def stages(self) -> tuple:
        """The grid's stages in the order they must run: the tuned grid needs the sweep's answer."""
        return ("shared", "sweep", "tuned") if self.sweep_steps else ("shared",)

    def regime(self, stage: str) -> str:
        """The folder a stage's runs go to: multi-process runs form a regime of their own beside
        the one-process runs (e.g. `shared-fsdp2`). The sweep only picks rates: one process."""
        if stage == "sweep" or self.world_size == 1:
            return stage
        return f"{stage}-{self.parallel}{self.world_size}"

    def run_parameters(self, arch: str, optimizer: str, strategy: str, seed: int, lr: float | None = None) -> dict:
        """The notebook parameters (RunConfig fields) of one cell of this profile's grid.

        `lr` None keeps the optimizer's shared default, so a tuned cell that chose the default
        has the very parameters (and cell key) of its shared twin.
        """
        accumulate = strategy_spec(strategy).splits_batch
        parameters = {
            "arch": arch, "size": self.size, "optimizer": optimizer, "strategy": strategy, "seed": seed,
            "steps": self.steps,
            "batch_size": self.batch_size * (self.accumulation if accumulate else 1),
            "micro_batch_size": self.batch_size if accumulate else None,
            "eval_every": self.eval_every, "eval_samples": self.eval_samples, "device": self.device,
            "data": self.data,
        }
        if self.world_size > 1:
            parameters.update(world_size=self.world_size, parallel=self.parallel)
        return parameters if lr is None else dict(parameters, lr=lr)

    def sweep_parameters(self, arch: str, optimizer: str, seed: int, lr: float) -> dict:
        """A sweep run: standard strategy, `sweep_steps` steps, validated once at the end."""
        parameters = dict(self.run_parameters(arch, optimizer, "standard", seed, lr), steps=self.sweep_steps,
                          eval_every=None)
        parameters.pop("world_size", None), parameters.pop("parallel", None)
        return parameters


PROFILES = {
    "smoke": Profile("smoke", "tiny", steps=3, batch_size=4, accumulation=2, eval_samples=16, sweep_steps=2,
                     description="every cell for 3 steps: checks the pipeline, measures nothing"),
    # 5 seeds: what the confirmatory family needs to detect a 5 % loss difference (report.claims.DESIGN_EFFECT;
    # a test checks the count against the pilot's spread). Two regimes x 60 cells each, and a 100-run sweep.
    "cpu": Profile("cpu", "tiny", steps=120, batch_size=8, accumulation=4, seeds=(0, 1, 2, 3, 4), eval_every=30,
                   eval_samples=128, sweep_steps=60,
                   description="tiny models on the embedded data, 5 seeds, tuned and shared, on a laptop"),
    "paper": Profile("paper", "paper", steps=25, batch_size=8, accumulation=4, eval_every=5, eval_samples=64,
                     sweep_steps=10, device="cuda", data="hub",
                     description="the published shapes for the paper's 25 steps, on a GPU, on datasets by name "
                                 "(--data embedded: on the embedded data, offline)"),
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

    lr: float | None = None  # a sweep's learning rate; None in the grid's regimes

    @property
    def stem(self) -> str:
        return paths.stem(self.optimizer, self.strategy, self.seed, self.lr)


def _pick(kind: str, chosen, valid: tuple, default: tuple | None = None) -> tuple:
    """The values named (each checked against `valid`), or the study's `default` (else all valid ones)."""
    for value in chosen or ():
        check_choice(kind, value, valid)
    return tuple(chosen) if chosen else (default or valid)


def cells(prof: Profile, archs=None, optimizers=None, strategies=None, seeds=None) -> list[Cell]:
    """The grid, or the subset named (None = all), seed by seed: the first seed's grid finishes first."""
    archs = _pick("architecture", archs, ARCHITECTURES)
    optimizers = _pick("optimizer", optimizers, OPTIMIZERS, STUDY_OPTIMIZERS)
    strategies = _pick("strategy", strategies, ALL_STRATEGIES, STRATEGIES)
    seeds = tuple(seeds) if seeds else prof.seeds
    return [Cell(a, o, s, seed) for seed in seeds for a in archs for o in optimizers for s in strategies]


def sweep_cells(prof: Profile, archs=None, optimizers=None) -> list[Cell]:
    """The learning-rate sweep: standard strategy, the profile's sweep seeds, every swept rate."""
    archs = _pick("architecture", archs, ARCHITECTURES)
    optimizers = _pick("optimizer", optimizers, OPTIMIZERS, STUDY_OPTIMIZERS)
    return [Cell(a, o, "standard", seed, lr) for seed in prof.sweep_seeds for a in archs for o in optimizers
            for lr in swept(a, o, prof.sweep_factors)]
