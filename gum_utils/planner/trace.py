"""Will it fit? The memory of one training step, predicted without allocating it.

`plan(config)` builds the run's real model, optimizer, strategy and batch shapes as fake
tensors (`FakeTensorMode`: shapes and dtypes, no storage), gives the optimizer the state a
first step leaves, and traces the next training step with PyTorch's own `MemTracker`: its
peak of live tensor bytes and what was live at that peak. `planner.reference.measured_peak`
runs the same steps for real, an instrument independent of the tracker, to check it.
"""

import functools
import json
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode
from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker, _MemRefType
from torch.utils._python_dispatch import TorchDispatchMode

from ..archs import architecture
from ..archs.base import DataShape
from ..core.batches import BatchStream
from ..core.config import RunConfig
from ..core.strategies import strategy as strategy_spec
from ..core.trainer import forward_backward, precision_context, summed_loss
from ..optim import build_optimizer, optimizer as optimizer_spec

BREAKDOWN_KEYS = ("params", "grads", "optimizer_state", "activations", "temporaries")
# MemTracker's kinds of memory, in the breakdown's terms. The batch (tracked as "other")
# is an input of the forward pass, so it counts with the activations.
_KINDS = {
    _MemRefType.PARAM: "params", _MemRefType.BUFFER: "params", _MemRefType.GRAD: "grads",
    _MemRefType.OPT: "optimizer_state", _MemRefType.ACT: "activations", _MemRefType.OTH: "activations",
    _MemRefType.TEMP: "temporaries",
}
_CPU = torch.device("cpu")


@dataclass
class Plan:
    """A step's predicted peak (bytes) and what was live at that peak."""
    peak_bytes: int
    breakdown: dict
    micro_batch_size: int
    micro_batches: int
    model_state_bytes: int = 0  # weights, gradients and optimizer state once the step is done
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"peak_bytes": self.peak_bytes, "breakdown": dict(self.breakdown),
                "model_state_bytes": self.model_state_bytes,
                "micro_batch_size": self.micro_batch_size, "micro_batches": self.micro_batches,
                "notes": list(self.notes)}


# ----------------------------------------------------------------------------- the batch

@dataclass(frozen=True)
class BatchTemplate:
    """One row's shape and dtype per batch key, and the supervised items of the step's window."""
    rows: tuple  # ((key, row shape, dtype), ...)
    items: int
    images_per_sample: int | None
    # No padding in the batch (an attention mask of ones): a real step then skips the causal mask.
    unpadded: bool = False
    # How the step takes its loss, (model, micro-batch) -> loss; None: the study's (trainer.summed_loss).
    step_loss: object = None

    def fake_batch(self, size: int) -> dict:
        """A batch of `size` rows; under FakeTensorMode nothing is allocated."""
        return {key: torch.empty((size, *shape), dtype=dtype) for key, shape, dtype in self.rows}


def data_shape(config: RunConfig, seq_len: int | None = None) -> DataShape:
    shape = architecture(config.arch).shape(config.size)
    return shape if seq_len is None else replace(shape, seq_len=seq_len)


@functools.lru_cache(maxsize=32)
def batch_template(arch: str, size: str, shape: DataShape, batch_size: int, seed: int = 0) -> BatchTemplate:
    """A training batch's layout, read from real data before any fake mode (counts need real labels).

    Drawn from the validation split: its rows have the training rows' shapes, it is a tenth of the
    size (ViT's paper-size training images take minutes to make), and a run has it loaded already.
    Only the item count differs, and it divides the loss: it changes no memory."""
    stream = BatchStream(architecture(arch), "val", shape, batch_size, seed)
    batch = next(stream)
    rows = tuple((key, tuple(value.shape[1:]), value.dtype) for key, value in batch.items())
    images = batch["pixel_values"].shape[1] if batch.get("pixel_values") is not None and \
        batch["pixel_values"].dim() == 5 else None
    return BatchTemplate(rows, stream.last_counts[0], images)


# ------------------------------------------------------------------ data-dependent steps

class KnownAnswers(TorchDispatchMode):
    """Answers the few reads of tensor values a fake trace cannot make, where the memory does not depend on them.

    SmolVLM drops all-zero padding images (a boolean index: its size depends on the pixels)
    and splits the image features per sample (`tolist()` of the per-sample image counts).
    Our batches hold no padding image, so the index keeps every image and every sample has
    `images_per_sample` of them; a check (a boolean read) passes. CGD reads dot products
    (floats) to choose beta and restarts: every branch updates its state in place, so any
    value (1.0) gives the same memory. Other reads fail with a clear error instead of a guess.
    """

    def __init__(self, images_per_sample: int | None):
        super().__init__()
        self.images_per_sample = images_per_sample

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            return func(*args, **(kwargs or {}))  # fake mode knows constants (e.g. an optimizer's step count)
        except (DataDependentOutputException, DynamicOutputShapeException):
            if func is torch.ops.aten.index.Tensor and _is_mask_index(args[1]):
                return _keep_all(args[0], args[1][0])
            if func is torch.ops.aten._local_scalar_dense.default:
                return self._scalar(args[0])
            raise

    def _scalar(self, tensor):
        if tensor.dtype == torch.bool:
            return True
        if tensor.is_floating_point():
            return 1.0
        if self.images_per_sample is None:
            raise ValueError("the planner cannot trace this model: its step reads an integer from the data "
                             "(a data-dependent shape); only the study's image batches are known to it")
        return self.images_per_sample


def _is_mask_index(indices) -> bool:
    return len(indices) == 1 and indices[0] is not None and indices[0].dtype == torch.bool


def _keep_all(tensor, mask):
    """tensor[mask] with every mask element true: a copy, rows flattened over the mask's dims."""
    return tensor.reshape(-1, *tensor.shape[mask.dim():]).clone()


# ----------------------------------------------------------------------------- the step

class StepPeakTracker(MemTracker):
    """MemTracker keeping only the step's peak, the one number a plan reads.

    After every op MemTracker also updates the peak of each module on the call stack, walking all
    the modules it has seen: 75 of the 99 s of a paper-size nanoVLM trace (550 modules, 31,636 ops).
    The step's peak and its snapshot are updated exactly as MemTracker does it."""

    def _update_peak_stats(self, peak_state) -> None:
        for device, snapshot in self._curr_mem_snap.items():
            if self._peak_mem.get(device, 0) < snapshot[_TOTAL_KEY]:
                self._peak_mem[device] = snapshot[_TOTAL_KEY]
                self._peak_mem_snap[device] = dict(snapshot)


def _prime_optimizer(model, optimizer) -> None:
    """The optimizer's state as a first step leaves it, without tracing that step's forward and
    backward (half the trace): a step on zero gradients (fake: nothing is allocated). A parameter
    that would get no gradient gets state here; the study's models have none such (their plans
    with a traced first step are the same to the byte, 4 architectures x 5 optimizers x 2 strategies)."""
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _resetting(tracker: MemTracker, precision):
    """The forward's precision context, first clearing MemTracker's module statistics:
    it refuses a second forward of the root module (a micro-batch, a step) otherwise."""
    @contextmanager
    def context():
        tracker.reset_mod_stats()
        with precision():
            yield
    return context


def _build_model(config: RunConfig, make_model):
    """The run's model with its strategy applied; under fake mode nothing is allocated."""
    model = make_model().train()
    model.tie_weights()  # no_init_weights (below) leaves tied weights untied
    strategy_spec(config.strategy).prepare(model)
    return model


def _build_optimizer(config: RunConfig, model, traced: bool = True):
    """The run's optimizer. For the trace (`traced`), CGD's line search is left out: its step needs
    real loss values, and its repeated evaluations hold what the fixed step holds (a test measures
    the line search as configured against the plan)."""
    options = dict(config.optimizer_options)
    if traced:
        options.pop("line_search", None)
    if target_device(config) == "cuda" and "foreach" in optimizer_spec(config.optimizer).option_names():
        # torch's optimizers step all tensors at once on a GPU (full-size temporaries) and one by one
        # on the CPU; traced on fake CPU tensors, they must be told (H200: Llama + Adam + checkpointing
        # measured 23.02 GiB, traced 20.37 per tensor and 23.02 with foreach).
        options.setdefault("foreach", True)
    return build_optimizer(config.optimizer, model.parameters(), config.resolved_lr, **options)


def build_run(config: RunConfig, make_model):
    """The model and the optimizer exactly as the run configures them (the measurement's)."""
    model = _build_model(config, make_model)
    return model, _build_optimizer(config, model, traced=False)


def target_device(config: RunConfig) -> str:
    """'cuda' or 'cpu': where the planned run steps ('auto' is this machine's choice)."""
    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.device


def _fake_model_maker(config: RunConfig):
    from transformers.initialization import no_init_weights

    def make():
        # Random initialisation reads values (trunc_normal_ needs a real scalar): skip it.
        with no_init_weights():
            return architecture(config.arch).build_model(config.size)
    return make


# Micro-batches an accumulation step is traced over. The first allocates the gradients; every later
# one starts from the same live memory (weights, gradients, optimizer state, every micro-batch's input,
# the previous micro-batch's activations freed) and takes the same path, so its peak is the second's.
# All micro-batches' inputs are made and stay live, as in a run; only the first two are traced
# (tests/test_plan.py checks the snapshots against MemTracker's trace of every micro-batch).
TRACED_MICRO_BATCHES = 2


def _peak_snapshots(configs: list, template: BatchTemplate, micro_batch_size: int, micro_batches: int,
                    make_model) -> list[tuple[dict, dict]]:
    """Per config (one run under several optimizers), MemTracker's snapshots of the second step:
    at its peak, and once it is done.

    The forward and backward are traced once for all of them: an optimizer's state does not change
    there (only in its step), so its bytes add to every point of that trace. Each optimizer's step
    is then traced from the gradients the backward left. The step's peak is the higher of the two,
    the backward's on a tie (it comes first): what one trace of the whole step finds, to the byte
    (tests/test_plan.py checks it against whole-step traces)."""
    with FakeTensorMode(), KnownAnswers(template.images_per_sample), _masks_as_fed(template.unpadded):
        model = _build_model(configs[0], make_model)
        micros = [template.fake_batch(micro_batch_size) for _ in range(micro_batches)]
        backward_peak = _backward_peak(model, micros, micros[:TRACED_MICRO_BATCHES], template.items,
                                       configs[0].dtype, template.step_loss or summed_loss)
        gradients = [(parameter, parameter.grad) for parameter in model.parameters()]
        return [_step_snapshots(model, _build_optimizer(config, model), gradients, micros, backward_peak)
                for config in configs]


@contextmanager
def _masks_as_fed(unpadded: bool):
    """transformers never skips the causal mask of a fake tensor (it takes the trace for an export);
    a real step of an unpadded batch does (its mask is all ones: SDPA's is_causal instead, 7 % less
    on a small Qwen2). For an unpadded batch the trace is told it is not tracing; the mask's one
    value read, whether all of it is one, KnownAnswers answers true."""
    if not unpadded:
        yield
        return
    import transformers.masking_utils as masking

    traced = masking.is_tracing
    masking.is_tracing = lambda tensor=None: False
    try:
        yield
    finally:
        masking.is_tracing = traced


def _backward_peak(model, micros: list, traced: list, items: int, dtype: str, loss_of) -> dict:
    """The peak of the step's forward and backward, no optimizer state live (the step starts with
    the gradients set to None, as Run's closure leaves them)."""
    tracker = StepPeakTracker()
    precision = _resetting(tracker, precision_context(_CPU, dtype))
    tracker.track_external(model, micros)
    with tracker:
        forward_backward(model, traced, items, precision, loss_of=loss_of)
    return tracker.get_tracker_snapshot("peak").get(_CPU, {})


def _step_snapshots(model, optimizer, gradients: list, micros: list, backward_peak: dict) -> tuple[dict, dict]:
    _prime_optimizer(model, optimizer)
    for parameter, gradient in gradients:
        parameter.grad = gradient
    tracker = StepPeakTracker()
    tracker.track_external(model, optimizer, micros)
    state = tracker.get_tracker_snapshot().get(_CPU, {}).get(_MemRefType.OPT, 0)
    with tracker:
        optimizer.step()
    after = tracker.get_tracker_snapshot().get(_CPU, {})
    step_peak = _temporaries_apart(dict(tracker.get_tracker_snapshot("peak").get(_CPU, {})),
                                   after.get(_MemRefType.OPT, 0))
    during_backward = dict(backward_peak)
    during_backward[_MemRefType.OPT] = during_backward.get(_MemRefType.OPT, 0) + state
    during_backward[_TOTAL_KEY] = during_backward.get(_TOTAL_KEY, 0) + state
    peak = during_backward if during_backward[_TOTAL_KEY] >= step_peak.get(_TOTAL_KEY, 0) else step_peak
    return peak, after


def _temporaries_apart(snapshot: dict, kept_state: int) -> dict:
    """MemTracker counts all the optimizer allocates in its step as its state; what lies above the
    state the step leaves is the step's temporaries (torch's multi-tensor step on a GPU: one
    parameter-sized buffer, which made an 8B Llama's Adam look like 12 bytes a parameter). The total stays."""
    extra = snapshot.get(_MemRefType.OPT, 0) - kept_state
    if extra > 0:
        snapshot[_MemRefType.OPT] -= extra
        snapshot[_MemRefType.TEMP] = snapshot.get(_MemRefType.TEMP, 0) + extra
    return snapshot


def _breakdown(snapshot: dict) -> dict:
    breakdown = dict.fromkeys(BREAKDOWN_KEYS, 0)
    for kind, key in _KINDS.items():
        breakdown[key] += snapshot.get(kind, 0)
    return breakdown


def micro_batching(config: RunConfig, micro_batch_size: int | None) -> tuple[int, int]:
    micro = micro_batch_size or config.effective_micro_batch_size
    if not strategy_spec(config.strategy).splits_batch:
        return micro, 1
    return micro, -(-config.rank_batch_size // micro)


def plan(config: RunConfig, micro_batch_size: int | None = None, seq_len: int | None = None,
         template: BatchTemplate | None = None, make_model=None) -> Plan:
    """The predicted peak of one training step of `config` (the second step), and its breakdown.

    `micro_batch_size` overrides the config's (accumulation: the step's micro-batches of that
    size make its batch; otherwise the whole step is one batch of that size). A study model's
    plan (no `template`, no `make_model`) is traced once per process and configuration.
    """
    if template is None and make_model is None:
        return plan_optimizers(config, [config.optimizer], micro_batch_size, seq_len)[config.optimizer]
    return _traced_plans([config], micro_batch_size, seq_len, template, make_model)[0]


def plan_optimizers(config: RunConfig, optimizers, micro_batch_size: int | None = None,
                    seq_len: int | None = None) -> dict:
    """{optimizer: plan(config under it)} for a study model, the forward and backward traced once
    for all (the guide plans five optimizers per shape). Other optimizers take their default options."""
    configs = {name: config if name == config.optimizer else
               RunConfig.from_dict(dict(config.to_dict(), optimizer=name, optimizer_options={}))
               for name in optimizers}
    keys = {name: (memory_key(each), micro_batch_size, seq_len) for name, each in configs.items()}
    missing = list(dict.fromkeys(key for key in keys.values() if key not in _PLANS))
    if missing:
        traced = _traced_plans([RunConfig.from_dict(json.loads(key[0])) for key in missing],
                               micro_batch_size, seq_len, None, None)
        _PLANS.update(zip(missing, traced))
    return {name: _copy(_PLANS[key]) for name, key in keys.items()}


# RunConfig fields that change nothing in one step's memory: plans differing only there are one.
# (The device counts only as CPU or GPU: see _build_optimizer.)
_NOT_MEMORY = ("seed", "steps", "lr", "fixed_batch", "eval_every", "eval_samples", "sample_interval_s")
_PLANS = {}  # (memory key, micro-batch, seq_len) -> Plan: each study configuration traced once per process


def memory_key(config: RunConfig) -> str:
    values = {key: value for key, value in config.to_dict().items() if key not in _NOT_MEMORY}
    return json.dumps(dict(values, device=target_device(config)), sort_keys=True)


def _copy(found: Plan) -> Plan:
    return replace(found, breakdown=dict(found.breakdown), notes=list(found.notes))


def _traced_plans(configs: list, micro_batch_size, seq_len, template, make_model) -> list[Plan]:
    """The plans of `configs`, which differ in their optimizer only."""
    config = configs[0]
    refused = strategy_spec(config.strategy).not_planned
    if refused:
        raise ValueError(f"strategy {config.strategy!r}: {refused}")
    micro, count = micro_batching(config, micro_batch_size)
    template = template or batch_template(config.arch, config.size, data_shape(config, seq_len),
                                          config.rank_batch_size, config.seed)
    snapshots = _peak_snapshots(configs, template, micro, count, make_model or _fake_model_maker(config))
    return [_plan_of(each, micro, count, *found) for each, found in zip(configs, snapshots)]


# Measured (tests/test_plan.py), not modelled: on a CPU, bfloat16 autocast's matmul backward
# (aten::mm inside AddmmBackward0) allocates scratch no op-level trace sees. Not measured on a GPU yet.
BFLOAT16_CPU_NOTE = ("bfloat16 on a CPU: the matmul backward may allocate scratch no op-level trace sees, "
                     "depending on the CPU's kernels; measured up to 6 % above the plan on ViT (0.1 % on another "
                     "CPU), within 0.1 % on Llama and ModernBERT; not yet measured on a GPU")


def _plan_of(config: RunConfig, micro: int, count: int, snapshot: dict, after: dict) -> Plan:
    state = sum(after.get(kind, 0) for kind in (_MemRefType.PARAM, _MemRefType.GRAD, _MemRefType.OPT))
    notes = []
    if config.optimizer_options.get("line_search"):
        notes.append("CGD's line search repeats the forward/backward at the same peak; traced as one evaluation")
    if config.dtype == "bfloat16" and target_device(config) == "cpu":
        notes.append(BFLOAT16_CPU_NOTE)
    breakdown = _breakdown(snapshot)
    return Plan(sum(breakdown.values()), breakdown, micro, count, state, notes)
