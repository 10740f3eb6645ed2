"""`RunConfig`: everything one run is, validated before anything runs. Imports no torch.

A name that is a choice (architecture, optimizer, strategy) is checked here once; the trainer
looks its object up from the registry and works with that.
"""

import dataclasses
import difflib
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..archs import ARCHITECTURES, SIZES, architecture, hub
from ..choices import check_choice, require
from ..optim import OPTIMIZERS, optimizer as optimizer_spec
from .strategies import ALL_STRATEGIES, strategy as strategy_spec

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16")  # bfloat16: autocast of the forward pass; weights stay float32
DATA_SOURCES = ("embedded", "hub")  # hub: datasets by name (gum_utils.archs.hub)
PARALLEL = ("ddp", "fsdp")  # how one run spans several processes (gum_utils.core.distributed)
DEVICE_SWITCHES = ("capturable", "fused")  # optimizer options whose device torch checks only when it steps
MAX_SEED = 2**32 - 1  # the range every random stream takes; a larger seed would fail only inside the run


def default_lr(arch: str, optimizer: str) -> float:
    """The shared regime's learning rate: the architecture's own where it sets one, else the optimizer's."""
    spec = optimizer_spec(optimizer)
    return architecture(arch).lr_overrides.get(optimizer, spec.default_lr)


class UnknownFieldError(TypeError, ValueError):
    """A name RunConfig lacks: a TypeError as a keyword (Python's own kind), a ValueError as a dict's key
    (what callers of from_dict and the notebooks catch). One check, in `_listing_unknown_fields`."""


# Frozen: a config is validated once, when it is built, and cannot change after (dataclasses.replace
# builds, and so validates, a new one).
@dataclass(frozen=True)
class RunConfig:
    arch: str
    size: str = "tiny"
    optimizer: str = "adam"
    strategy: str = "standard"
    seed: int = 0
    steps: int = 30
    batch_size: int = 16
    micro_batch_size: int | None = None  # accumulation only: samples per forward/backward
    lr: float | None = None  # None: default_lr(arch, optimizer)
    optimizer_options: dict = field(default_factory=dict)  # e.g. {"line_search": "strong_wolfe"}
    fixed_batch: bool = False  # train on the first batch every step: the overfitting sanity check
    eval_every: int | None = None  # validate every N steps (and always at the end)
    eval_samples: int = 256
    device: str = "auto"
    dtype: str = "float32"
    data: str = "embedded"  # or "hub": a dataset by name, the model's own tokenizer (gum_utils.archs.hub)
    dataset: str | None = None  # hub only: an id ("name" or "name:subset") or a save_to_disk directory
    tokenizer: str | None = None  # hub only: a tokenizer (ViT: image processor) id or directory
    pretrained: str | None = None  # a checkpoint id or save_pretrained directory to fine-tune
    sample_interval_s: float = 0.1
    world_size: int = 1  # processes of one run (torchrun); batch_size is split across them
    parallel: str = "ddp"  # world_size > 1: "ddp" replicates the model, "fsdp" shards it; 1 process keeps "ddp"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _validate_types(self)  # first: the checks below compare numbers
        check_choice("architecture", self.arch, ARCHITECTURES)
        check_choice("size", self.size, SIZES)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("strategy", self.strategy, ALL_STRATEGIES)
        check_choice("device", self.device, DEVICES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("parallel mode", self.parallel, PARALLEL)
        require(isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED,
                f"seed must be an integer from 0 to {MAX_SEED}, got {self.seed!r}")
        require(isinstance(self.steps, int) and self.steps >= 1, f"steps must be an integer >= 1, got {self.steps!r}")
        require(isinstance(self.batch_size, int) and self.batch_size >= 1,
                f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        require(self.lr is None or (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0),
                f"lr must be a number > 0 (or None for the default), got {self.lr!r}")
        require(self.eval_every is None or (isinstance(self.eval_every, int) and self.eval_every >= 1),
                f"eval_every must be an integer >= 1 or None, got {self.eval_every!r}")
        require(isinstance(self.eval_samples, int) and self.eval_samples >= 1,
                f"eval_samples must be an integer >= 1, got {self.eval_samples!r}")
        require(0 < self.sample_interval_s < math.inf,
                f"sample_interval_s must be a finite number > 0, got {self.sample_interval_s!r}")
        require(isinstance(self.fixed_batch, bool), f"fixed_batch must be True or False, got {self.fixed_batch!r}")
        require(isinstance(self.optimizer_options, dict),
                f"optimizer_options must be a dict, got {self.optimizer_options!r}")
        self._validate_processes()
        self._validate_micro_batches()
        self._validate_data()
        _validate_local_paths(self)
        _validate_optimizer_options(self)

    def _validate_data(self) -> None:
        check_choice("data", self.data, DATA_SOURCES)
        for name in ("dataset", "tokenizer", "pretrained"):
            value = getattr(self, name)
            require(value is None or (isinstance(value, str) and value.strip()),
                    f"{name} must be a hub id or a local directory (a non-empty string) or None, got {value!r}")
        if self.data == "embedded":
            require(self.dataset is None and self.tokenizer is None,
                    "dataset and tokenizer are for data='hub'; the embedded data has its own")
        require(self.data == "embedded" or self.size == "paper",
                "data='hub' feeds the models' real tokenizers and 224-pixel images, so it needs size='paper'")
        require(self.pretrained is None or self.size == "paper",
                "a pretrained checkpoint has the published shapes: use size='paper' with it")
        require(self.pretrained is None or not architecture(self.arch).reads_text or self.data == "hub",
                f"a pretrained {self.arch} needs its own tokenizer: use data='hub' with it")

    def _validate_processes(self) -> None:
        require(isinstance(self.world_size, int) and not isinstance(self.world_size, bool) and self.world_size >= 1,
                f"world_size must be an integer >= 1 (processes of the run), got {self.world_size!r}")
        # One process has nothing to shard: a result saying "fsdp" there would claim what did not happen.
        require(self.world_size > 1 or self.parallel == "ddp",
                f"parallel={self.parallel!r} needs world_size > 1; a one-process run keeps the default 'ddp' "
                "(and records no parallel mode)")
        require(self.batch_size % self.world_size == 0,
                f"batch_size={self.batch_size} must be divisible by world_size={self.world_size}: "
                "every rank trains on an equal share of the batch")

    def _validate_micro_batches(self) -> None:
        share = self.rank_batch_size
        whole = f"batch_size={self.batch_size}" if self.world_size == 1 else \
            f"the per-rank batch {share} (batch_size={self.batch_size} / world_size={self.world_size})"
        strategy_spec(self.strategy).check_micro_batch(self.micro_batch_size, share, whole)

    @property
    def resolved_lr(self) -> float:
        return self.lr if self.lr is not None else default_lr(self.arch, self.optimizer)

    @property
    def rank_batch_size(self) -> int:
        """Samples per step on each process (all of them on one)."""
        return self.batch_size // self.world_size

    @property
    def effective_micro_batch_size(self) -> int:
        return self.micro_batch_size or self.rank_batch_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        return cls(**values)


# Fields that hold whole numbers, and whether None is allowed; a bool is not one (True == 1).
INTEGER_FIELDS = {"seed": False, "steps": False, "batch_size": False, "micro_batch_size": True,
                  "eval_every": True, "eval_samples": False}  # world_size: _validate_processes
NUMBER_FIELDS = {"lr": True, "sample_interval_s": False}


def _validate_types(config: "RunConfig") -> None:
    """Whole numbers are ints, numbers are ints or floats, and never bools: `steps=True` is a slip."""
    for name, optional in INTEGER_FIELDS.items():
        value = getattr(config, name)
        require((optional and value is None) or (isinstance(value, int) and not isinstance(value, bool)),
                 f"{name} must be an integer{' or None' if optional else ''}, got {value!r}")
    for name, optional in NUMBER_FIELDS.items():
        value = getattr(config, name)
        require((optional and value is None) or (isinstance(value, (int, float)) and not isinstance(value, bool)),
                 f"{name} must be a number{' or None' if optional else ''}, got {value!r}")


def _validate_local_paths(config: "RunConfig") -> None:
    """A dataset, tokenizer or checkpoint named as a local path must be a directory now, not mid-run."""
    for name in ("dataset", "tokenizer", "pretrained"):
        value = getattr(config, name)
        if value is not None and hub.is_local(value):
            require(Path(value).expanduser().is_dir(), f"{name} {value!r} is not a local directory "
                     "(a hub id has the form 'name' or 'owner/name')")


def _validate_optimizer_options(config: "RunConfig") -> None:
    """Names against the optimizer's constructor, values by building it on one scalar parameter."""
    spec, options = optimizer_spec(config.optimizer), config.optimizer_options
    for name in options:
        require(name != "lr", "the learning rate is the field lr, not an optimizer option")
        check_choice(f"{config.optimizer} option", name, spec.option_names())
    if not options:
        return  # the defaults are the optimizer's own: nothing to try (and no torch to import)
    _check_switches(config.optimizer, spec, options)
    import torch

    try:
        parameter = torch.ones(1, requires_grad=True)
        built = spec.build([parameter], config.resolved_lr, **options)
        on_cpu = config.device == "cpu" or (config.device == "auto" and not torch.cuda.is_available())
        if on_cpu and any(options.get(name) for name in DEVICE_SWITCHES):  # torch refuses them at the first step
            built.step(_square_closure(built, parameter))
    except (TypeError, ValueError, RuntimeError, AssertionError) as error:  # torch asserts capturable's device
        raise ValueError(f"optimizer_options {options!r} are not valid for {config.optimizer}: {error}") from None


def _check_switches(name: str, spec, options: dict) -> None:
    """An on/off option (foreach, capturable, ...) takes a boolean: torch reads "yes" as true unchecked."""
    import inspect

    for option, parameter in inspect.signature(spec.cls.__init__).parameters.items():
        switch = isinstance(parameter.default, bool) or parameter.annotation == (bool | None)
        if option in options and switch and not isinstance(options[option], bool) \
                and not (parameter.default is None and options[option] is None):
            allowed = "true, false or null" if parameter.default is None else "true or false"
            raise ValueError(f"{name} option {option} takes {allowed}, got {options[option]!r}")


def _square_closure(optimizer, parameter):
    """The loss x^2 of the one scalar parameter: a step of any optimizer, CGD's line search included."""
    def closure():
        optimizer.zero_grad()
        loss = (parameter ** 2).sum()
        loss.backward()
        return loss
    return closure


def _listing_unknown_fields(init):
    """RunConfig(stpes=5) names the closest field and every valid one, not just the stray keyword."""
    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        valid = [f.name for f in dataclasses.fields(RunConfig)]
        for name in kwargs:
            if name not in valid:
                hint = difflib.get_close_matches(name, valid, n=1)
                raise UnknownFieldError(f"RunConfig has no field {name!r}"
                                        + (f" (did you mean {hint[0]!r}?)" if hint else "")
                                        + f"; valid fields: {', '.join(valid)}")
        init(self, *args, **kwargs)
    return checked


RunConfig.__init__ = _listing_unknown_fields(RunConfig.__init__)
