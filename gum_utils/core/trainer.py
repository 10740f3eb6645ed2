"""The trainer: one cell of the grid, `RunConfig` in, `RunResult` out.

The step is the loop a reader expects (closure = zero grads, forward/backward over the
micro-batches; optimizer.step(closure)), timed and recorded. Failure is a result: a
non-finite loss ends the run as `diverged`, running out of memory as `oom`, anything else
that breaks mid-run as `error`; a bad configuration raises ValueError before anything runs.

With `world_size` > 1 the run spans that many processes: `train()` in a plain process starts
them with torchrun (`gum_utils.core.run.launch`) and returns what rank 0 wrote; inside each rank the
same `Run` trains its shard of every batch (`gum_utils.core.distributed`).
"""

import contextlib
import math
import time
import traceback

import torch
import torch.nn.functional as F

from ..archs import architecture, hub
from ..archs.base import halves
from ..archs.embedded import EMBEDDED_VOCABULARY
from ..optim import build_optimizer
from . import distributed, environment, flops, measure
from .batches import BatchStream, count_items, val_batches
from .config import RunConfig, default_lr
from .distributed import SINGLE, Ranks
from .results import RunResult
from .strategies import strategy as strategy_spec

DEVICE_DATA_FRACTION = 0.25  # of free GPU memory a training split may take to live there
HUB_TRAIN_ROWS = 4096  # rows a hub run reads at most; longer runs go round them again


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
    if device.type != "cuda" or stream.arch.masks_batches:
        return False
    free = free_bytes if free_bytes is not None else torch.cuda.mem_get_info(device)[0]
    return stream.nbytes <= free * DEVICE_DATA_FRACTION


def precision_context(device: torch.device, dtype: str):
    """A factory of the forward pass's precision context: bfloat16 autocast, or float32 as is."""
    return lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")


def summed_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy summed over the batch's real items (labels are pre-shifted; -100 is ignored)."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    logits = model(**inputs).logits
    labels = batch["labels"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")


def forward_backward(model: torch.nn.Module, micros: list[dict], window_items: int,
                     precision=contextlib.nullcontext, ranks: Ranks = SINGLE, loss_of=summed_loss) -> torch.Tensor:
    """Accumulate into .grad the gradient of the window's mean loss; return that loss (detached).

    The loss of the window is a sum over all its items (target tokens or samples) divided by the
    total count of real items in the window, so 4 micro-batches of 4 give exactly the gradient of
    one batch of 16, padding included. `precision` is a context for the forward pass only (e.g.
    bfloat16 autocast). Over several processes (`ranks`), `window_items` counts the items of every
    rank's micro-batches, gradients are synchronised on the last micro-batch only, and the loss
    returned is the sum over ranks: the global window loss, the same on every rank. `loss_of`
    (model, micro-batch) -> its summed loss; the planner swaps in a reader's own step's.
    """
    window_loss = torch.zeros((), device=micros[0]["labels"].device)
    last = len(micros) - 1
    for index, micro in enumerate(micros):
        with ranks.gradient_sync(model, index == last):
            with precision():
                loss = loss_of(model, micro) / window_items
            ranks.backward(loss)
        window_loss += loss.detach()
    return ranks.sum(window_loss)


def window_items(micros: list[dict]) -> int:
    return sum(count_items(micro) for micro in micros)


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
        self.device_data_bytes = 0  # the training split's bytes where it is kept on the device
        self.flops_per_step = None  # model FLOPs of one step, once set-up has counted them
        self.pending = None  # the step launched last, its loss not yet read
        self.seconds = {"setup_s": 0.0, "eval_s": 0.0}  # where a run's time goes besides its steps
        # The held-out rows evaluated: eval_samples asks, a split may hold fewer (the summary says which)
        self.evaluated = {"val_samples": 0, "test_samples": 0}

    def setup(self):
        config = self.config
        torch.manual_seed(config.seed)
        self.arch, self.strategy = architecture(config.arch), strategy_spec(config.strategy)
        self.shape = self.arch.shape(config.size)
        self.precision = self.strategy.forward_context(precision_context(self.device, config.dtype), self.device)
        self.timer = measure.StepTimer(self.device)
        with self.device:  # initialised where it trains: a 1B model builds in seconds on a GPU
            self.model = self.arch.build_model(config.size, config.pretrained)
        self.model.to(self.device).train()
        train_split, held, vocab = self.splits()
        self.stream = BatchStream(self.arch, "train", self.shape, config.batch_size, config.seed,
                                  prepared=train_split, vocab=vocab)
        self.device_data_bytes = 0  # counted in the GPU's peak memory where the split lives there
        if keeps_split_on_device(self.stream, self.device):
            self.device_data_bytes = self.stream.nbytes
            self.stream.to(self.device)
        self.val, self.test = (self.held_out_batches(split, held[split]) for split in ("val", "test"))
        self.evaluated = {f"{name}_samples": sum(len(b["labels"]) for b in batches)
                          for name, batches in (("val", self.val), ("test", self.test))}
        micros, counts = self.next_step_batches()
        self.flops_per_step = self.step_flops(micros, counts[0])  # before checkpointing: model FLOPs
        self.strategy.prepare(self.model)
        self.activations, unused = self.activation_bytes(micros, counts[0])
        # Metered on the plain model, this rank's micro-batch only; then wrapped for the ranks.
        self.model = distributed.wrap(self.model, self.ranks, unused_parameters=unused)
        self.optimizer = build_optimizer(config.optimizer, self.model.parameters(), config.resolved_lr,
                                         **config.optimizer_options)

    def held_out_batches(self, split: str, prepared: dict | None) -> list[dict]:
        """The first eval_samples rows of a held-out split (val or test), on the device."""
        config = self.config
        return [_to_device(b, self.device) for b in val_batches(
            self.arch, self.shape, config.effective_micro_batch_size, limit=config.eval_samples,
            prepared=prepared, split=split)]

    def splits(self):
        """(train, {val, test}, masking vocabulary): None for the embedded splits, else read from the hub."""
        config = self.config
        if config.data == "embedded":
            return None, {"val": None, "test": None}, EMBEDDED_VOCABULARY
        self.shape = self.arch.hub_shape(self.model.config, self.shape)
        source = hub.source(self.arch, config.dataset, config.tokenizer, config.pretrained)
        rows = min(config.steps * config.batch_size, HUB_TRAIN_ROWS)
        train_split, val_split, vocab = hub.load_splits(self.arch, source, self.shape, self.model.config, rows,
                                                        2 * config.eval_samples)
        return train_split, halves(val_split), vocab or EMBEDDED_VOCABULARY

    def next_step_batches(self):
        """The next step's micro-batches on the device, and its (items, samples, tokens) counts.

        Setup fetched the first step's batches already; the loop asks for each following step's.
        Over several processes the micro-batches are this rank's share, the counts those of the whole batch.
        """
        if self._batches is None or not self.config.fixed_batch:
            batch = next(self.stream)
            counts = self.stream.last_counts  # of the whole batch, all ranks' shares: every rank draws it
            batch = self.ranks.shard(batch)
            micros = self.strategy.micro_batches(batch, self.config.effective_micro_batch_size)
            self._batches = [_to_device(m, self.device) for m in micros], counts
        return self._batches

    def forward_backward(self, micros, items):
        return forward_backward(self.model, micros, items, self.precision, self.ranks)

    def step(self, micros, items):
        def closure():
            self.optimizer.zero_grad(set_to_none=True)
            return self.forward_backward(micros, items)

        return self.optimizer.step(closure)

    def step_flops(self, micros, items) -> int:
        """Model FLOPs of one step (all ranks), counted on this rank's first micro-batch (all have its shape)."""
        counted = flops.count_flops(lambda: forward_backward(self.model, micros[:1], items, self.precision))
        self.model.zero_grad(set_to_none=True)
        return counted * len(micros) * self.ranks.world_size

    def activation_bytes(self, micros, items) -> tuple[int, bool]:
        """Bytes saved for backward by one micro-batch, metered in an untimed pass before training
        (on the model not yet wrapped: no collectives); and whether a parameter got no gradient."""
        meter = measure.SavedTensorMeter(self.model)
        with meter.recording():
            forward_backward(self.model, micros[:1], items, self.precision)
        unused = any(p.grad is None for p in self.model.parameters() if p.requires_grad)
        self.model.zero_grad(set_to_none=True)
        return meter.bytes, unused

    def evaluate_into_result(self, step: int, final: bool = False):
        """Validate; at the end also test, on the half of the held-out data tuning never reads."""
        started = time.perf_counter()
        samples_seen = self.result.records[-1]["samples_seen"] if self.result.records else 0
        scores = evaluate(self.model, self.val, self.precision)
        if final:
            scores.update({key.replace("val_", "test_"): value
                           for key, value in evaluate(self.model, self.test, self.precision).items()})
        self.result.evals.append({"step": step, "samples_seen": samples_seen, **scores})
        self.seconds["eval_s"] += time.perf_counter() - started

    def record(self, step: int, loss: torch.Tensor, start, end, counts, optimizer_said: dict) -> bool:
        """Append a finished step's record; False (and status diverged) if its loss is not finite."""
        records = self.result.records
        last = records[-1] if records else {"samples_seen": 0, "tokens_seen": 0, "items_seen": 0}
        loss = loss.item()
        records.append({"step": step, "loss": loss, "samples_seen": last["samples_seen"] + counts[1],
                        "tokens_seen": last["tokens_seen"] + counts[2], "items_seen": last["items_seen"] + counts[0],
                        "step_time_s": self.timer.seconds(start, end), **optimizer_said})
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
            self.pending = (step, loss.detach(), start, end, counts, self.optimizer_said())
            if upcoming is None:
                break
            micros, counts = upcoming
            if config.eval_every and step % config.eval_every == 0:
                if not self.record_pending():
                    return
                self.evaluate_into_result(step)
        if not self.record_pending():
            return
        self.evaluate_into_result(config.steps, final=True)

    def optimizer_said(self) -> dict:
        """What the optimizer tells of its last step (CGD: its beta, restarts, evaluations), for the record."""
        step_record = getattr(self.optimizer, "step_record", None)
        return step_record() if step_record else {}

    def record_pending(self) -> bool:
        """Record the step launched last, if any (also when a later step failed: it finished).
        False where its loss was not finite."""
        pending, self.pending = self.pending, None
        return pending is None or self.record(*pending)


def train_in_process(config: RunConfig):
    """Train `config` in this process (one rank of a multi-process run, or the whole of a one-process run).

    Returns (RunResult, trained model or None); never raises for diverged/oom/error, except that a
    failed rank raises RankFailed: its peers may wait in a collective, so the launch must end.
    """
    run = Run(config)
    started = time.perf_counter()
    sampler = measure.Sampler(run.device, config.sample_interval_s)
    try:
        run.setup()
        run.seconds["setup_s"] = time.perf_counter() - started
        measure.reset_device_peak(run.device)
        with sampler:
            run.loop()
    except Exception as error:  # a failed run is a result too; the grid goes on
        _keep_last_finished_step(run)
        run.result.status = "oom" if _is_oom(error) else "error"
        run.result.error = "".join(traceback.format_exception_only(type(error), error)).strip()
        run.result.environment["traceback"] = traceback.format_exc()
    _summarise(run.result, time.perf_counter() - started, sampler, run.device)
    run.result.summary.update(device_data_bytes=run.device_data_bytes, **run.seconds, **run.evaluated)
    _add_flops(run.result, run.flops_per_step, config.dtype, run.ranks.world_size)
    if run.ranks.world_size > 1 and run.result.status in ("oom", "error"):
        raise distributed.RankFailed(run.result)
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
        "test_loss": last_eval.get("test_loss"),
        "test_accuracy": last_eval.get("test_accuracy"),
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
    return default_lr(config["arch"], config["optimizer"])


def _per_second(steady: list[dict], key: str, records: list[dict]):
    """Throughput over the steady steps: items per step divided by time per step."""
    if len(records) < 2:
        return None
    amount = records[-1][key] - records[0][key]
    seconds = sum(r["step_time_s"] for r in steady)
    return amount / seconds if seconds > 0 else None
