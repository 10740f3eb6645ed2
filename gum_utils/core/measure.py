"""What a run costs: a background sampler of utilization, and an exact memory breakdown.

The sampler reads NVML (GPU utilization, memory, power, energy; see `gum_utils.core.nvml`) where
a GPU is present, and the process's CPU utilization and resident memory always, from the
standard library, so a GPU machine's stock image needs no extra package. The breakdown
counts bytes exactly: parameters, gradients, optimizer state, and activations as the bytes
of tensors saved for backward in one micro-batch, which is what gradient checkpointing saves.
"""

import os
import resource
import threading
import time
from contextlib import contextmanager

import torch

from ..optim.cgd import local_shard
from . import nvml

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _nvml_device(device: torch.device):
    """The NVML device of the run's GPU, or None where there is no GPU or no NVML."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index or 0
    props = torch.cuda.get_device_properties(index)
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    bus_id = f"{parts[0]:08x}:{parts[1]:02x}:{parts[2]:02x}.0" if None not in parts else None
    return nvml.open_device(index, bus_id)


def _cpu_seconds() -> float:
    """CPU time of this process, all threads, user and system."""
    times = os.times()
    return times.user + times.system


def _rss_bytes() -> int:
    """Resident memory now (Linux), or the peak so far where /proc is absent."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_rss_high_water() -> bool:
    """Start the kernel's resident-memory high-water mark afresh (Linux: clear_refs 5); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def rss_high_water_bytes() -> int | None:
    """The kernel's record of the highest resident memory since the last reset (VmHWM), not a sample of it."""
    try:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        return None


class Sampler:
    """Samples utilization every `interval_s` in a daemon thread; use as a context manager."""

    def __init__(self, device: torch.device, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self._gpu = _nvml_device(device)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gum-sampler", daemon=True)
        self._energy_start_mj = None
        self._high_water = False  # whether the kernel's high-water mark was reset as sampling began

    def __enter__(self):
        self._t0 = self._last_wall = time.perf_counter()
        self._last_cpu = _cpu_seconds()
        self._energy_start_mj = self._energy_mj()
        self._high_water = reset_rss_high_water()  # the run's own peak, not the interpreter's start-up
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()  # one at the end, so even a short run has a reading
        return False

    def _run(self):
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _energy_mj(self):
        return self._gpu.energy_mj() if self._gpu is not None else None

    def _cpu_percent(self, now: float) -> float:
        """CPU time over wall time since the last sample: 200 % is two cores busy."""
        cpu = _cpu_seconds()
        wall = now - self._last_wall
        percent = 100 * (cpu - self._last_cpu) / wall if wall > 0 else 0.0
        self._last_cpu, self._last_wall = cpu, now
        return percent

    def _sample(self):
        now = time.perf_counter()
        gpu = self._gpu
        self.samples.append({
            "t_s": now - self._t0,
            "cpu_percent": self._cpu_percent(now),
            "rss_bytes": _rss_bytes(),
            "gpu_util_percent": gpu.utilization_percent() if gpu else None,
            "gpu_memory_bytes": gpu.memory_used_bytes() if gpu else None,
            "gpu_power_w": gpu.power_w() if gpu else None,
        })

    def summary(self) -> dict:
        """Means and peaks of the samples, and the energy the GPU used meanwhile (joules)."""
        def mean(key):
            values = [s[key] for s in self.samples if s[key] is not None]
            return sum(values) / len(values) if values else None

        energy_end = self._energy_mj()
        energy_j = None
        if energy_end is not None and self._energy_start_mj is not None:
            energy_j = (energy_end - self._energy_start_mj) / 1000
        return {
            "device": "gpu" if self._gpu is not None else "cpu",
            "mean_cpu_percent": mean("cpu_percent"),
            "mean_gpu_util_percent": mean("gpu_util_percent"),
            "mean_gpu_power_w": mean("gpu_power_w"),
            "peak_gpu_memory_bytes": max((s["gpu_memory_bytes"] or 0 for s in self.samples), default=None)
            if self._gpu is not None else None,
            "peak_rss_bytes": max((s["rss_bytes"] for s in self.samples), default=None),  # the highest sample
            "rss_high_water_bytes": rss_high_water_bytes() if self._high_water else None,
            "energy_j": energy_j,
            "interval_s": self.interval_s,
            "timeline": self.samples,
        }


class StepTimer:
    """Times steps without making the host wait: CUDA events on a GPU, the wall clock on a CPU.

    A mark is taken as the step is queued; `seconds` is read later, once the step is done,
    so timing adds no synchronisation of its own.
    """

    def __init__(self, device: torch.device):
        self._cuda = device.type == "cuda"

    def mark(self):
        if not self._cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        if not self._cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1000


def _storage_key(tensor: torch.Tensor):
    storage = local_shard(tensor).untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and ties count once; local shards only)."""
    seen = {_storage_key(t) for t in tensors if isinstance(t, torch.Tensor)}
    return sum(nbytes for _, _, nbytes in seen)


def parameter_bytes(model: torch.nn.Module) -> int:
    return tensor_bytes(model.parameters())


def gradient_bytes(model: torch.nn.Module) -> int:
    return tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values())


class SavedTensorMeter:
    """Counts the bytes autograd saves for backward, deduplicated by storage, parameters excluded."""

    def __init__(self, model: torch.nn.Module):
        self._parameters = {_storage_key(p) for p in model.parameters()}
        self._seen: set = set()

    @property
    def bytes(self) -> int:
        return sum(nbytes for _, _, nbytes in self._seen)

    def _pack(self, tensor):
        key = _storage_key(tensor)
        if key not in self._parameters:
            self._seen.add(key)
        return tensor

    @contextmanager
    def recording(self):
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor):
            yield self


def memory_breakdown(model, optimizer, activation_bytes: int) -> dict:
    return {
        "params": parameter_bytes(model),
        "grads": gradient_bytes(model),
        "optimizer_state": optimizer_state_bytes(optimizer),
        "activations": activation_bytes,
    }


def reset_device_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def device_peaks(device: torch.device) -> dict:
    if device.type != "cuda":
        return {"cuda_max_allocated_bytes": None, "cuda_max_reserved_bytes": None}
    return {
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
        "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved(device),
    }


def _allocation_events(prof):
    """The allocator's events of a finished profile: (time ns, signed bytes), frees negative."""
    from torch._C._profiler import _EventType

    stack, events = list(prof.profiler.kineto_results.experimental_event_tree()), []
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size))
    return sorted(events)


def tensor_peak_bytes(fn) -> int:
    """The peak of live CPU tensor bytes while `fn()` runs, above what was live before it.

    Read from the profiler's allocator events (the running sum of allocated minus freed
    bytes, at its maximum): an instrument independent of the memory planner it checks,
    and exact where resident memory (RSS) is not (the C allocator keeps freed pages).
    """
    from torch.profiler import ProfilerActivity, profile

    # Kineto prints two lines per profile on stderr (profiler_start/stop) above its own log levels'
    # defaults: a grid would print them for every run. Read when a profile starts; a user's setting stays.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for _, nbytes in _allocation_events(prof):
        live += nbytes
        peak = max(peak, live)
    return peak
