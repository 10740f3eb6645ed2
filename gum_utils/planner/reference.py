"""The instrument the planner is checked against: the same training step run for real.

`measured_peak` builds the run's model and optimizer (line search included) and runs two steps;
on the CPU it reads the peak of live tensor bytes from the profiler's allocator events, on a GPU
`torch.cuda.max_memory_allocated`. Nothing here is shared with the trace but how a run is built.
"""

import torch

from ..archs import architecture
from ..core import measure
from ..core.batches import BatchStream
from ..core.config import RunConfig
from ..core.strategies import strategy as strategy_spec
from ..core.trainer import forward_backward, precision_context
from .trace import build_run, data_shape, micro_batching


def measured_peak(config: RunConfig, seq_len: int | None = None, device: str = "cpu") -> int:
    """The peak of live tensor bytes of the same two steps, run for real: model, optimizer
    and the step's micro-batches are made inside the measurement (the data split is not).

    On the CPU both steps run under the profiler (a tensor made before it started would be freed
    unseen); on a GPU the peak is `torch.cuda.max_memory_allocated` above what was allocated before."""
    micro, _ = micro_batching(config, None)
    stream = BatchStream(architecture(config.arch), "train", data_shape(config, seq_len), config.rank_batch_size,
                         config.seed)
    batch, items = next(stream), stream.last_counts[0]
    where = torch.device(device)
    precision = precision_context(where, config.dtype)

    def two_steps():
        torch.manual_seed(config.seed)
        with where:
            model, optimizer = build_run(config, lambda: architecture(config.arch).build_model(config.size))
        micros = [{key: value.to(where) for key, value in micro.items()}
                  for micro in strategy_spec("accumulation").micro_batches(batch, micro)]  # own storage each
        for _ in range(2):
            _closure_step(model, optimizer, micros, items, precision)

    return measure.tensor_peak_bytes(two_steps) if where.type == "cpu" else _cuda_peak_bytes(two_steps, where)


def _cuda_peak_bytes(fn, device) -> int:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def _closure_step(model, optimizer, micros, items, precision):
    def closure():
        optimizer.zero_grad(set_to_none=True)
        return forward_backward(model, micros, items, precision)
    return optimizer.step(closure)
