"""What a run costs: a background sampler of utilization, and an exact memory breakdown.

The sampler reads NVML (GPU utilization, memory, power, energy) where a GPU is present and
the process's CPU utilization and RSS (psutil) always. The breakdown counts bytes exactly:
parameters, gradients, optimizer state, and activations as the bytes of tensors saved for
backward in one micro-batch, which is what gradient checkpointing saves.
"""

import threading
import time
from contextlib import contextmanager

import psutil
import torch


def _nvml_handle(device: torch.device):
    """An NVML handle for the run's GPU, or None where there is no GPU or no NVML."""
    if device.type != "cuda":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    except Exception:  # NVMLError_LibraryNotFound and friends: measure the CPU only
        return None


class Sampler:
    """Samples utilization every `interval_s` in a daemon thread; use as a context manager."""

    def __init__(self, device: torch.device, interval_s: float = 0.1):
        self.interval_s = interval_s
        self.samples: list[dict] = []
        self._process = psutil.Process()
        self._gpu = _nvml_handle(device)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gum-sampler", daemon=True)
        self._energy_start_mj = None

    def __enter__(self):
        self._t0 = time.perf_counter()
        self._process.cpu_percent(None)  # the first reading only starts psutil's interval
        self._energy_start_mj = self._energy_mj()
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
        if self._gpu is None:
            return None
        import pynvml

        try:
            return pynvml.nvmlDeviceGetTotalEnergyConsumption(self._gpu)
        except pynvml.NVMLError:  # older GPUs have no energy counter
            return None

    def _sample(self):
        sample = {
            "t_s": time.perf_counter() - self._t0,
            "cpu_percent": self._process.cpu_percent(None),
            "rss_bytes": self._process.memory_info().rss,
            "gpu_util_percent": None, "gpu_memory_bytes": None, "gpu_power_w": None,
        }
        if self._gpu is not None:
            import pynvml

            try:
                sample["gpu_util_percent"] = pynvml.nvmlDeviceGetUtilizationRates(self._gpu).gpu
                sample["gpu_memory_bytes"] = pynvml.nvmlDeviceGetMemoryInfo(self._gpu).used
                sample["gpu_power_w"] = pynvml.nvmlDeviceGetPowerUsage(self._gpu) / 1000
            except pynvml.NVMLError:
                pass
        self.samples.append(sample)

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
            "peak_rss_bytes": max((s["rss_bytes"] for s in self.samples), default=None),
            "energy_j": energy_j,
            "interval_s": self.interval_s,
            "timeline": self.samples,
        }


def _storage_key(tensor: torch.Tensor):
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (views and ties count once)."""
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
