"""One cell of the grid: `RunConfig` in, `RunResult` out.

The step is the loop a reader expects (closure = zero grads, forward/backward over the
micro-batches; optimizer.step(closure)), timed and recorded. Failure is a result: a
non-finite loss ends the run as `diverged`, running out of memory as `oom`, anything else
that breaks mid-run as `error`; a bad configuration raises ValueError before anything runs.

With `world_size` > 1 the run spans that many processes: `train()` in a plain process starts
them with torchrun (`gum_utils.launch`) and returns what rank 0 wrote; inside each rank the same
`Run` trains its shard of every batch (`gum_utils.distributed`).
"""

import contextlib
import dataclasses
import difflib
import functools
import inspect
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import (ARCHITECTURES, OPTIMIZERS, PARALLEL, SIZES, STRATEGIES, distributed, environment, flops, hub,
               learning_rates, measure, optim, strategies)
from .choices import check_choice
from .data import EMBEDDED_VOCABULARY, BatchStream, val_batches
from .models import architecture, build_model
from .results import RunResult

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16")
DEVICE_DATA_FRACTION = 0.25  # of free GPU memory a training split may take to live there
HUB_TRAIN_ROWS = 4096  # rows a hub run reads at most; longer runs go round them again  # bfloat16: autocast of the forward pass; weights stay float32


@dataclass
class RunConfig:
    arch: str
    size: str = "tiny"
    optimizer: str = "adam"
    strategy: str = "standard"
    seed: int = 0
    steps: int = 30
    batch_size: int = 16
    micro_batch_size: int | None = None  # accumulation only: samples per forward/backward
    lr: float | None = None  # None: learning_rates.DEFAULT_LR for this architecture and optimizer
    optimizer_options: dict = field(default_factory=dict)  # e.g. {"line_search": "strong_wolfe"}
    fixed_batch: bool = False  # train on the first batch every step: the overfitting sanity check
    eval_every: int | None = None  # validate every N steps (and always at the end)
    eval_samples: int = 256
    device: str = "auto"
    dtype: str = "float32"
    data: str = "embedded"  # or "hub": a dataset by name, the model's own tokenizer (gum_utils.hub)
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
        check_choice("strategy", self.strategy, STRATEGIES)
        check_choice("device", self.device, DEVICES)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("parallel mode", self.parallel, PARALLEL)
        _require(isinstance(self.seed, int) and self.seed >= 0, f"seed must be an integer >= 0, got {self.seed!r}")
        _require(isinstance(self.steps, int) and self.steps >= 1, f"steps must be an integer >= 1, got {self.steps!r}")
        _require(isinstance(self.batch_size, int) and self.batch_size >= 1,
                 f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        _require(self.lr is None or (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0),
                 f"lr must be a number > 0 (or None for the default), got {self.lr!r}")
        _require(self.eval_every is None or (isinstance(self.eval_every, int) and self.eval_every >= 1),
                 f"eval_every must be an integer >= 1 or None, got {self.eval_every!r}")
        _require(isinstance(self.eval_samples, int) and self.eval_samples >= 1,
                 f"eval_samples must be an integer >= 1, got {self.eval_samples!r}")
        _require(self.sample_interval_s > 0, f"sample_interval_s must be > 0, got {self.sample_interval_s!r}")
        _require(isinstance(self.fixed_batch, bool), f"fixed_batch must be True or False, got {self.fixed_batch!r}")
        _require(isinstance(self.optimizer_options, dict),
                 f"optimizer_options must be a dict, got {self.optimizer_options!r}")
        self._validate_processes()
        self._validate_micro_batches()
        self._validate_data()
        _validate_local_paths(self)
        _validate_optimizer_options(self)

    def _validate_data(self) -> None:
        check_choice("data", self.data, hub.DATA_SOURCES)
        for name in ("dataset", "tokenizer", "pretrained"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, str) and value.strip()),
                     f"{name} must be a hub id or a local directory (a non-empty string) or None, got {value!r}")
        if self.data == "embedded":
            _require(self.dataset is None and self.tokenizer is None,
                     "dataset and tokenizer are for data='hub'; the embedded data has its own")
        uses_text = self.arch != "vit"
        _require(self.data == "embedded" or self.size == "paper",
                 "data='hub' feeds the models' real tokenizers and 224-pixel images, so it needs size='paper'")
        _require(self.pretrained is None or self.size == "paper",
                 "a pretrained checkpoint has the published shapes: use size='paper' with it")
        _require(self.pretrained is None or not uses_text or self.data == "hub",
                 f"a pretrained {self.arch} needs its own tokenizer: use data='hub' with it")

    def _validate_processes(self) -> None:
        _require(isinstance(self.world_size, int) and not isinstance(self.world_size, bool) and self.world_size >= 1,
                 f"world_size must be an integer >= 1 (processes of the run), got {self.world_size!r}")
        # One process has nothing to shard: a result saying "fsdp" there would claim what did not happen.
        _require(self.world_size > 1 or self.parallel == "ddp",
                 f"parallel={self.parallel!r} needs world_size > 1; a one-process run keeps the default 'ddp' "
                 "(and records no parallel mode)")
        _require(self.batch_size % self.world_size == 0,
                 f"batch_size={self.batch_size} must be divisible by world_size={self.world_size}: "
                 "every rank trains on an equal share of the batch")

    def _validate_micro_batches(self) -> None:
        micro, share = self.micro_batch_size, self.rank_batch_size
        whole = f"batch_size={self.batch_size}" if self.world_size == 1 else \
            f"the per-rank batch {share} (batch_size={self.batch_size} / world_size={self.world_size})"
        if self.strategy != "accumulation":
            _require(micro in (None, share),
                     f"micro_batch_size is for strategy 'accumulation' only; {self.strategy!r} uses the whole "
                     f"batch (leave micro_batch_size None or equal to {whole})")
            return
        _require(isinstance(micro, int) and micro >= 1,
                 f"strategy 'accumulation' needs micro_batch_size, an integer >= 1, got {micro!r}")
        smaller = "batch_size" if self.world_size == 1 else "the per-rank batch"
        _require(micro < share,
                 f"accumulation needs micro_batch_size < {smaller} (got {micro} and {whole}): "
                 "with one micro-batch it is the standard strategy")
        _require(share % micro == 0, f"micro_batch_size={micro} must divide {whole}")

    @property
    def resolved_lr(self) -> float:
        return self.lr if self.lr is not None else learning_rates.default_lr(self.arch, self.optimizer)

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
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown RunConfig field(s) {unknown}; valid fields: {', '.join(known)}")
        return cls(**values)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


# Fields that hold whole numbers, and whether None is allowed; a bool is not one (True == 1).
INTEGER_FIELDS = {"seed": False, "steps": False, "batch_size": False, "micro_batch_size": True,
                  "eval_every": True, "eval_samples": False}  # world_size: _validate_processes
NUMBER_FIELDS = {"lr": True, "sample_interval_s": False}


def _validate_types(config: "RunConfig") -> None:
    """Whole numbers are ints, numbers are ints or floats, and never bools: `steps=True` is a slip."""
    for name, optional in INTEGER_FIELDS.items():
        value = getattr(config, name)
        _require((optional and value is None) or (isinstance(value, int) and not isinstance(value, bool)),
                 f"{name} must be an integer{' or None' if optional else ''}, got {value!r}")
    for name, optional in NUMBER_FIELDS.items():
        value = getattr(config, name)
        _require((optional and value is None) or (isinstance(value, (int, float)) and not isinstance(value, bool)),
                 f"{name} must be a number{' or None' if optional else ''}, got {value!r}")


def _validate_local_paths(config: "RunConfig") -> None:
    """A dataset, tokenizer or checkpoint named as a local path must be a directory now, not mid-run."""
    for name in ("dataset", "tokenizer", "pretrained"):
        value = getattr(config, name)
        if value is not None and hub._is_local(value):
            _require(Path(value).expanduser().is_dir(), f"{name} {value!r} is not a local directory "
                     "(a hub id has the form 'name' or 'owner/name')")


def _validate_optimizer_options(config: "RunConfig") -> None:
    """Names against the optimizer's constructor, values by building it on one scalar parameter."""
    builder = optim.BUILDERS[config.optimizer]
    options = config.optimizer_options
    valid = [name for name in inspect.signature(builder).parameters if name not in ("params", "lr")]
    for name in options:
        _require(name != "lr", "the learning rate is the field lr, not an optimizer option")
        check_choice(f"{config.optimizer} option", name, valid)
    try:
        builder([torch.zeros(1, requires_grad=True)], lr=config.resolved_lr, **options)
    except (TypeError, ValueError, RuntimeError) as error:
        raise ValueError(f"optimizer_options {options!r} are not valid for {config.optimizer}: {error}") from None


def _listing_unknown_fields(init):
    """RunConfig(stpes=5) names the closest field and every valid one, not just the stray keyword."""
    @functools.wraps(init)
    def checked(self, *args, **kwargs):
        valid = [f.name for f in dataclasses.fields(RunConfig)]
        for name in kwargs:
            if name not in valid:
                hint = difflib.get_close_matches(name, valid, n=1)
                raise TypeError(f"RunConfig has no field {name!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
                                + f"; valid fields: {', '.join(valid)}")
        init(self, *args, **kwargs)
    return checked


RunConfig.__init__ = _listing_unknown_fields(RunConfig.__init__)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no GPU; use device='cpu' or 'auto'")
    return torch.device(name)


def _to_device(batch: dict, device: torch.device) -> dict:
    """Copy a batch to the device; on a GPU from pinned memory, so the copy overlaps the running step."""
    if device.type == "cuda":
        return {key: value if value.is_cuda else value.pin_memory().to(device, non_blocking=True)
                for key, value in batch.items()}
    return {key: value.to(device) for key, value in batch.items()}


def keeps_split_on_device(stream: BatchStream, device: torch.device, free_bytes: int | None = None) -> bool:
    """Whether the training split goes to the GPU once, ahead of training: where it takes at most
    a quarter of the free memory (and is not masked on the host)."""
    if device.type != "cuda" or stream.arch == "modernbert":
        return False
    free = free_bytes if free_bytes is not None else torch.cuda.mem_get_info(device)[0]
    return stream.nbytes <= free * DEVICE_DATA_FRACTION


def precision_context(device: torch.device, dtype: str):
    """A factory of the forward pass's precision context: bfloat16 autocast, or float32 as is."""
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


def _is_oom(error: BaseException) -> bool:
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[dict], precision=contextlib.nullcontext) -> dict:
    """Validation loss over all items of `batches`, token/sample accuracy, and perplexity."""
    was_training = model.training
    model.eval()
    total_loss, total_items, correct = 0.0, 0, 0
    for batch in batches:
        inputs = {key: value for key, value in batch.items() if key != "labels"}
        with precision():
            logits = model(**inputs).logits
        logits = logits.float()
        labels = batch["labels"]
        valid = labels != -100
        total_loss += torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction="sum").item()
        correct += (logits.argmax(-1)[valid] == labels[valid]).sum().item()
        total_items += valid.sum().item()
    model.train(was_training)
    loss = total_loss / total_items
    return {"val_loss": loss, "val_accuracy": correct / total_items,
            "val_perplexity": math.exp(loss) if loss < 700 else math.inf}


class Run:
    """The state of one training run; `train()` below is the whole public story."""

    def __init__(self, config: RunConfig):
        self.config = config
        # One process, or this rank of a torchrun launch (on a GPU machine, the GPU of LOCAL_RANK).
        self.ranks = distributed.join(config.world_size, config.parallel, resolve_device(config.device))
        self.device = self.ranks.device
        self.result = RunResult(config=config.to_dict(), environment=environment.describe(self.device))
        self._batches = None
        self.model = None

    def setup(self):
        config = self.config
        torch.manual_seed(config.seed)
        spec = architecture(config.arch)
        self.shape = spec.shape(config.size)
        self.precision = precision_context(self.device, config.dtype)
        self.timer = measure.StepTimer(self.device)
        with self.device:  # initialised where it trains: a 1B model builds in seconds on a GPU
            self.model = build_model(config.arch, config.size, config.pretrained)
        self.model.to(self.device).train()
        train_split, val_split, vocab = self.splits()
        self.stream = BatchStream(config.arch, "train", self.shape, config.batch_size, config.seed,
                                  prepared=train_split, vocab=vocab)
        self.device_data_bytes = 0  # counted in the GPU's peak memory where the split lives there
        if keeps_split_on_device(self.stream, self.device):
            self.device_data_bytes = self.stream.nbytes
            self.stream.to(self.device)
        self.val = [_to_device(b, self.device) for b in val_batches(
            config.arch, self.shape, config.effective_micro_batch_size, limit=config.eval_samples, prepared=val_split)]
        micros, counts = self.next_step_batches()
        self.flops_per_step = self.step_flops(micros, counts[0])  # before checkpointing: model FLOPs
        strategies.prepare_model(self.model, config.strategy)
        self.activations, unused = self.activation_bytes(micros, counts[0])
        # Metered on the plain model, this rank's micro-batch only; then wrapped for the ranks.
        self.model = distributed.wrap(self.model, self.ranks, unused_parameters=unused)
        self.optimizer = optim.build_optimizer(config.optimizer, self.model.parameters(), config.resolved_lr,
                                               **config.optimizer_options)

    def splits(self):
        """(train, val, masking vocabulary): None for the embedded splits, else read from the hub."""
        config = self.config
        if config.data == "embedded":
            return None, None, EMBEDDED_VOCABULARY
        if config.arch == "nanovlm":
            self.shape = hub.nanovlm_shape(self.model.config, self.shape)
        source = hub.source(config.arch, config.dataset, config.tokenizer, config.pretrained)
        rows = min(config.steps * config.batch_size, HUB_TRAIN_ROWS)
        train_split, val_split, vocab = hub.load_splits(config.arch, source, self.shape, self.model.config, rows,
                                                        config.eval_samples)
        return train_split, val_split, vocab or EMBEDDED_VOCABULARY

    def next_step_batches(self):
        """The next step's micro-batches on the device, and its (items, samples, tokens) counts.

        Setup fetched the first step's batches already; the loop asks for each following step's.
        Over several processes the micro-batches are this rank's share, the counts those of the whole batch.
        """
        if self._batches is None or not self.config.fixed_batch:
            batch = next(self.stream)
            counts = self.stream.last_counts  # of the whole batch, all ranks' shares: every rank draws it
            batch = self.ranks.shard(batch)
            micros = strategies.micro_batches(batch, self.config.strategy, self.config.effective_micro_batch_size)
            self._batches = [_to_device(m, self.device) for m in micros], counts
        return self._batches

    def forward_backward(self, micros, items):
        return strategies.forward_backward(self.model, micros, items, self.precision, self.ranks)

    def step(self, micros, items):
        def closure():
            self.optimizer.zero_grad(set_to_none=True)
            return self.forward_backward(micros, items)

        return self.optimizer.step(closure)

    def step_flops(self, micros, items) -> int:
        """Model FLOPs of one step (all ranks), counted on this rank's first micro-batch (all have its shape)."""
        counted = flops.count_flops(lambda: strategies.forward_backward(self.model, micros[:1], items, self.precision))
        self.model.zero_grad(set_to_none=True)
        return counted * len(micros) * self.ranks.world_size

    def activation_bytes(self, micros, items) -> tuple[int, bool]:
        """Bytes saved for backward by one micro-batch, metered in an untimed pass before training
        (on the model not yet wrapped: no collectives); and whether a parameter got no gradient."""
        meter = measure.SavedTensorMeter(self.model)
        with meter.recording():
            strategies.forward_backward(self.model, micros[:1], items, self.precision)
        unused = any(p.grad is None for p in self.model.parameters() if p.requires_grad)
        self.model.zero_grad(set_to_none=True)
        return meter.bytes, unused

    def evaluate_into_result(self, step: int):
        samples_seen = self.result.records[-1]["samples_seen"] if self.result.records else 0
        self.result.evals.append({"step": step, "samples_seen": samples_seen,
                                  **evaluate(self.model, self.val, self.precision)})

    def record(self, step: int, loss: torch.Tensor, start, end, counts) -> bool:
        """Append a finished step's record; False (and status diverged) if its loss is not finite."""
        records = self.result.records
        last = records[-1] if records else {"samples_seen": 0, "tokens_seen": 0, "items_seen": 0}
        loss = loss.item()
        records.append({"step": step, "loss": loss, "samples_seen": last["samples_seen"] + counts[1],
                        "tokens_seen": last["tokens_seen"] + counts[2], "items_seen": last["items_seen"] + counts[0],
                        "step_time_s": self.timer.seconds(start, end)})
        if math.isfinite(loss):
            return True
        self.result.status = "diverged"
        self.result.error = f"non-finite loss {loss} at step {step}"
        return False

    def loop(self):
        """Train; the host reads a step's loss only after launching the next, so a GPU never waits.

        The next batch is prepared (and copied) while the device runs the current step; a
        validation reads the pending step first, so records and evaluations stay in order.
        """
        config = self.config
        micros, counts = self._batches
        self.pending = None  # the step launched last, its loss not yet read
        for step in range(1, config.steps + 1):
            start = self.timer.mark()
            loss = self.step(micros, counts[0])
            end = self.timer.mark()
            if step == 1:
                self.result.memory = measure.memory_breakdown(self.model, self.optimizer, self.activations)
            upcoming = self.next_step_batches() if step < config.steps else None
            if not self.record_pending():
                return
            self.pending = (step, loss.detach(), start, end, counts)
            if upcoming is None:
                break
            micros, counts = upcoming
            if config.eval_every and step % config.eval_every == 0:
                if not self.record_pending():
                    return
                self.evaluate_into_result(step)
        if not self.record_pending():
            return
        self.evaluate_into_result(config.steps)

    def record_pending(self) -> bool:
        """Record the step launched last, if any (also when a later step failed: it finished).
        False where its loss was not finite."""
        pending, self.pending = getattr(self, "pending", None), None
        return pending is None or self.record(*pending)


def train(config: RunConfig) -> RunResult:
    """Train one cell of the grid and return what it measured; never raises for diverged/oom/error."""
    return train_model(config)[0]


def train_model(config: RunConfig):
    """As `train`, and also return the trained model (None if it could not be built).

    A multi-process config in a plain process is launched with torchrun; the model returned
    then is a fresh one holding the full state rank 0 saved. Inside a rank, the model is
    that rank's wrapped (DDP) or sharded (FSDP2) one, and a failure raises RankFailed.
    """
    config.validate()
    if config.world_size > 1 and not distributed.launched_as_rank():
        from .launch import launch

        return launch(config)
    run = Run(config)
    started = time.perf_counter()
    sampler = measure.Sampler(run.device, config.sample_interval_s)
    try:
        run.setup()
        measure.reset_device_peak(run.device)
        with sampler:
            run.loop()
    except Exception as error:  # a failed run is a result too; the grid goes on
        _keep_last_finished_step(run)
        run.result.status = "oom" if _is_oom(error) else "error"
        run.result.error = "".join(traceback.format_exception_only(type(error), error)).strip()
        run.result.environment["traceback"] = traceback.format_exc()
    _summarise(run.result, time.perf_counter() - started, sampler, run.device)
    run.result.summary["device_data_bytes"] = getattr(run, "device_data_bytes", 0)
    _add_flops(run.result, getattr(run, "flops_per_step", None), config.dtype, run.ranks.world_size)
    if run.ranks.world_size > 1 and run.result.status in ("oom", "error"):
        raise distributed.RankFailed(run.result)  # its peers may wait in a collective: end the launch
    run.result.summary.update(distributed.gather_memory(run.result.summary, run.result.memory, run.ranks))
    return run.result, run.model


def _keep_last_finished_step(run: Run) -> None:
    """The step before the failing one finished: its record belongs in the result."""
    try:
        run.record_pending()
    except Exception:  # a broken device may refuse even that; the failure itself is what matters
        pass


def _summarise(result: RunResult, total_time_s: float, sampler: measure.Sampler, device: torch.device) -> None:
    records = result.records
    # The first step pays for warm-up (allocations, lazy init); time the steady state.
    steady = records[1:] or records
    step_time = sum(r["step_time_s"] for r in steady) / len(steady) if steady else None
    last_eval = result.evals[-1] if result.evals else {}
    usage = sampler.summary() if sampler.samples else {}
    result.utilization = usage
    peaks = measure.device_peaks(device)
    result.summary = {
        "steps_completed": len(records),
        "lr": result.config.get("lr") or _default_lr(result.config),
        "final_loss": records[-1]["loss"] if records else None,
        "val_loss": last_eval.get("val_loss"),
        "val_accuracy": last_eval.get("val_accuracy"),
        "val_perplexity": last_eval.get("val_perplexity"),
        "total_time_s": total_time_s,
        "train_time_s": sum(r["step_time_s"] for r in records),
        "mean_step_time_s": step_time,
        "samples_per_s": _per_second(steady, "samples_seen", records),
        "tokens_per_s": _per_second(steady, "tokens_seen", records),
        "peak_memory_bytes": peaks["cuda_max_allocated_bytes"] or usage.get("peak_rss_bytes"),
        "model_state_bytes": sum(result.memory.values()) if result.memory else None,
        **peaks,
    }


def _add_flops(result: RunResult, flops_per_step: int | None, dtype: str, world_size: int = 1) -> None:
    """Counted model FLOPs per step, the FLOP/s achieved, and MFU where the device's peak is known.

    Over several processes the FLOPs are those of all ranks, and the peak that of all their devices.
    """
    step_time = result.summary.get("mean_step_time_s")
    precision = flops.matmul_precision(dtype)
    peak = flops.peak_tflops(result.environment.get("device_name"), precision) \
        if result.environment.get("device", "").startswith("cuda") else None
    peak = peak * world_size if peak is not None else None
    result.summary.update({
        "flops_per_step": flops_per_step,
        "model_tflops_per_s": flops_per_step / step_time / 1e12 if flops_per_step and step_time else None,
        "peak_tflops": peak,
        "mfu": flops.mfu(flops_per_step, step_time, peak),
        "matmul_precision": precision,
        "flop_method": flops.METHOD,
    })


def _default_lr(config: dict):
    return learning_rates.default_lr(config["arch"], config["optimizer"])


def _per_second(steady: list[dict], key: str, records: list[dict]):
    """Throughput over the steady steps: items per step divided by time per step."""
    if len(records) < 2:
        return None
    amount = records[-1][key] - records[0][key]
    seconds = sum(r["step_time_s"] for r in steady)
    return amount / seconds if seconds > 0 else None
