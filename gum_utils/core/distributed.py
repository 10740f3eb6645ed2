"""One run over several processes: the process group, the wrapped model, each rank's share of a step.

A rank is one process (one GPU with NCCL, or a CPU process with gloo) started by torchrun
(see `gum_utils.core.run`). Every rank draws the same global batch and keeps its own contiguous
shard, so the union over ranks is exactly the one-process batch. `ddp` replicates the model
(DistributedDataParallel); `fsdp` shards parameters, gradients and optimizer state (FSDP2's
`fully_shard`) over the ranks, one group per transformer block.
"""

import contextlib
import datetime
import inspect
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

# A rank that died leaves its peers waiting in a collective; torchrun ends them sooner, this is the backstop.
TIMEOUT = datetime.timedelta(minutes=10)
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


class RankFailed(Exception):
    """A rank's run failed; its peers may wait in a collective, so the whole launch must end."""

    def __init__(self, result):
        super().__init__(result.error)
        self.result = result


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: its rank of `world_size`, how the model is split, its device."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    parallel: str | None = None  # None: one process, nothing to split

    def shard(self, batch: dict) -> dict:
        """This rank's contiguous slice of the global batch, in its own storage (as a loader gives)."""
        if self.world_size == 1:
            return batch
        n = len(next(iter(batch.values()))) // self.world_size
        return {key: value[self.rank * n:(self.rank + 1) * n].clone() for key, value in batch.items()}

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over ranks (in place); every rank gets the same value."""
        if self.world_size > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def gather(self, value) -> list:
        """Every rank's `value`, in rank order (on every rank: small Python objects only)."""
        if self.world_size == 1:
            return [value]
        values = [None] * self.world_size
        dist.all_gather_object(values, value)
        return values

    @contextlib.contextmanager
    def gradient_sync(self, model: torch.nn.Module, sync: bool):
        """Synchronise gradients over ranks in this forward/backward only if `sync` (the last micro-batch)."""
        if self.parallel == "ddp" and not sync:
            with model.no_sync():
                yield
            return
        if self.parallel == "fsdp":
            model.set_requires_gradient_sync(sync)
        yield

    def backward(self, loss: torch.Tensor) -> None:
        # DDP and FSDP2 divide the gradients' sum over ranks by world_size. The loss is already
        # divided by the item count of all ranks, so the ranks' gradients must add up, not
        # average: the factor undoes the division (exactly, for a power of two).
        (loss * self.world_size if self.world_size > 1 else loss).backward()


SINGLE = Ranks(torch.device("cpu"))  # one process: nothing to shard, sum or sync (the device is unused)


def launched_as_rank() -> bool:
    """Inside a process group already, or a process torchrun started (its variables are set)."""
    return dist.is_initialized() or all(name in os.environ for name in TORCHRUN_VARIABLES)


def join(world_size: int, parallel: str, device: torch.device) -> Ranks:
    """This process's Ranks, joining the process group torchrun set up (once per process)."""
    if world_size == 1:
        return Ranks(device)
    if device.type == "cuda":  # one rank per GPU
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    if dist.get_world_size() != world_size:
        raise ValueError(f"world_size={world_size} in the config, but the process group has "
                         f"{dist.get_world_size()} processes")
    return Ranks(device, dist.get_rank(), world_size, parallel)


def end_rank(code: int = 0) -> None:
    """End this rank now, its files written, without tearing the process group down.

    Under gloo (torch 2.13) the group's destructor joins its worker threads while holding the
    GIL, and a worker may still need the GIL to free a finished collective's tensors: ranks
    hung at exit that way. The operating system frees everything just as well.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the classes transformers keeps whole (_no_split_modules) that repeat.

    A once-only one (an embedding layer) stays in the root group with the rest, where the
    head's weight tied to the embedding lives too.
    """
    names = set(getattr(model, "_no_split_modules", None) or ())
    found = [module for module in model.modules() if type(module).__name__ in names]
    repeats = {name for name in names if sum(type(m).__name__ == name for m in found) > 1}
    return [module for module in found if type(module).__name__ in repeats]


def wrap(model: torch.nn.Module, ranks: Ranks, unused_parameters: bool = False) -> torch.nn.Module:
    """The model as trained over the ranks: DDP's wrapper, or the model itself sharded in place."""
    if ranks.world_size == 1:
        return model
    if ranks.parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # Gradients as views of the all-reduce buckets: no second copy, so the breakdown stays
        # exact; buffers (rotary tables, position ids) are constants: no broadcast per forward.
        buffers = ({"forward_sync_buffers": False} if "forward_sync_buffers" in
                   inspect.signature(DistributedDataParallel).parameters else {"broadcast_buffers": False})
        return DistributedDataParallel(
            model, device_ids=[ranks.device.index] if ranks.device.type == "cuda" else None,
            gradient_as_bucket_view=True, find_unused_parameters=unused_parameters, **buffers)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ranks.device.type, (ranks.world_size,))
    for block in transformer_blocks(model):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def full_state_dict(model: torch.nn.Module) -> dict | None:
    """The whole model's state on CPU, on rank 0 (None elsewhere); under FSDP2 every rank must call it."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):  # the shards are gathered: a collective
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return state if rank() == 0 else None
    if rank() != 0:
        return None
    return {key: value.detach().cpu() for key, value in unwrap(model).state_dict().items()}


def gather_memory(summary: dict, memory: dict, ranks: Ranks) -> dict:
    """Per-rank peak memory and model-state breakdown (local shards under FSDP2), for rank 0's summary.

    The run's peak_memory_bytes becomes the largest rank's: what one device must hold.
    """
    per_rank = ranks.gather({"peak_memory_bytes": summary.get("peak_memory_bytes"), "memory": dict(memory)})
    peaks = [entry["peak_memory_bytes"] for entry in per_rank]
    known = [peak for peak in peaks if peak is not None]
    return {"world_size": ranks.world_size, "parallel": ranks.parallel,
            "peak_memory_bytes": max(known) if known else None,
            "rank_peak_memory_bytes": peaks, "rank_memory": [entry["memory"] for entry in per_rank]}
