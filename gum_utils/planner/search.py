"""The budget search: the largest micro-batch of each strategy whose step fits a memory budget,
and, where none does, the single changes that would fit. Each probe is a `trace.plan`.
"""

from ..core.config import RunConfig
from ..optim import OPTIMIZERS
from . import trace
from .trace import BatchTemplate


def _strategy_config(config: RunConfig, strategy: str) -> RunConfig | None:
    """`config` under another strategy, at its batch (accumulation needs a batch of 2 or more)."""
    values = dict(config.to_dict(), strategy=strategy, micro_batch_size=None)
    if strategy == "accumulation":
        if config.rank_batch_size < 2:
            return None
        values["micro_batch_size"] = 1  # any valid one: the search sets the micro-batch
    return RunConfig.from_dict(values)


def largest_fitting(peak, budget_bytes: int, upper: int) -> int | None:
    """The largest m in [1, upper] with peak(m) <= budget (peak rising with m), or None.

    The next probe is where the line through the two nearest traced points meets the budget
    (activations grow linearly with the micro-batch, so it usually lands at once), or the
    bracket's middle where that line points past it; every probe shrinks the bracket.
    """
    points = {1: peak(1)}
    if points[1] > budget_bytes:
        return None
    low, high = 1, upper + 1  # low fits; high does not, or lies past the range
    while high - low > 1:
        probe = _probe(points, low, high, budget_bytes)
        points[probe] = peak(probe)
        if points[probe] <= budget_bytes:
            low = probe
        else:
            high = probe
    return low


def _probe(points: dict, low: int, high: int, budget: int) -> int:
    others = [m for m in points if m != low]
    if not others:
        return low + 1
    other = min(others, key=lambda m: abs(m - low))
    slope = (points[other] - points[low]) / (other - low)
    guess = low + int((budget - points[low]) // slope) if slope > 0 else high
    if guess < high:
        return max(guess, low + 1)
    # Past the bracket: try the top of the range once (all may fit), else halve the bracket
    # (the line misleads on a curve bending up).
    return high - 1 if high - 1 not in points and high - 1 == max(high - 1, *points) else (low + high) // 2


def largest_micro_batch(config: RunConfig, budget_bytes: int, strategy: str | None = None,
                        template: BatchTemplate | None = None, make_model=None, seq_len: int | None = None) -> dict:
    """Per strategy: the largest micro-batch (at most the requested batch) whose step fits the budget.

    Standard and checkpointing take their micro-batch as the whole batch: `fits` says whether the
    requested batch does. Accumulation reaches the batch in `accumulation_steps` micro-batches of
    `micro_batch_size`, the largest divisor of the batch that fits.
    """
    name = strategy or config.strategy
    variant = _strategy_config(config, name)
    batch = config.rank_batch_size
    if variant is None:
        return {"strategy": name, "largest_micro_batch": None, "fits": False, "reason": "batch of 1"}
    peaks: dict = {}

    def peak(micro):
        if micro not in peaks:
            peaks[micro] = trace.plan(variant, micro, seq_len, template, make_model).peak_bytes
        return peaks[micro]

    largest = largest_fitting(peak, budget_bytes, batch)
    result = {"strategy": name, "largest_micro_batch": largest, "fits": largest == batch,
              "peak_bytes": peak(largest) if largest else None}  # at the micro-batch it would run
    if name == "accumulation":
        divisor = max((d for d in range(1, (largest or 0) + 1) if batch % d == 0), default=None)
        result.update(micro_batch_size=divisor, accumulation_steps=batch // divisor if divisor else None,
                      fits=divisor is not None, peak_bytes=peak(divisor) if divisor else None)
    return result


def what_would_fit(config: RunConfig, budget_bytes: int, seq_len: int | None = None,
                   template: BatchTemplate | None = None, make_model=None) -> list[dict]:
    """Where even micro-batch 1 does not fit: single changes (another optimizer, bfloat16,
    checkpointing) and their peak at micro-batch 1, those that fit first. A reader's own model
    comes with its `template` and `make_model`."""
    changes = [{"optimizer": name} for name in OPTIMIZERS if name != config.optimizer]
    changes += [{"dtype": "bfloat16"}] if config.dtype != "bfloat16" else []
    changes += [{"strategy": "checkpointing"}] if config.strategy != "checkpointing" else []
    options = []
    for change in changes:
        values = dict(config.to_dict(), micro_batch_size=None, batch_size=1, **change)
        values["strategy"] = change.get("strategy", "standard")  # at micro-batch 1 accumulation is standard
        peak = trace.plan(RunConfig.from_dict(values), seq_len=seq_len, template=template, make_model=make_model).peak_bytes
        options.append({"change": change, "peak_bytes": peak, "fits": peak <= budget_bytes})
    return sorted(options, key=lambda option: (not option["fits"], option["peak_bytes"]))
