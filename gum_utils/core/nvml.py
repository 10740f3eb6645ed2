"""NVIDIA's management library (NVML) through NVIDIA's own binding, `pynvml` (package nvidia-ml-py):
utilization, memory, power and energy of a GPU.

Where the binding or the driver's library is missing, or there is no GPU, `open_device` returns None
and nothing is sampled. NVML's "utilization" is the fraction of the last sample period in which at
least one kernel ran on the GPU, not how busy its cores were: a single small kernel keeps it at 100 %.
"""

_binding = None  # the initialised pynvml module; False once it proved unusable


def binding():
    """pynvml, initialised, or None where it cannot be imported or NVML cannot start."""
    global _binding
    if _binding is None:
        try:
            import pynvml

            pynvml.nvmlInit()
            _binding = pynvml
        except Exception:  # ImportError, or pynvml.NVMLError: no library, no driver
            _binding = False
    return _binding or None


class Device:
    """One GPU's counters; each reading is None when the GPU does not report it."""

    def __init__(self, nvml, handle):
        self._nvml, self._handle = nvml, handle

    def _read(self, function: str):
        try:
            return getattr(self._nvml, function)(self._handle)
        except self._nvml.NVMLError:
            return None

    def utilization_percent(self):
        rates = self._read("nvmlDeviceGetUtilizationRates")
        return rates.gpu if rates is not None else None

    def memory_used_bytes(self):
        memory = self._read("nvmlDeviceGetMemoryInfo")
        return memory.used if memory is not None else None

    def power_w(self):
        milliwatts = self._read("nvmlDeviceGetPowerUsage")
        return milliwatts / 1000 if milliwatts is not None else None

    def energy_mj(self):
        """Millijoules since the driver loaded (Volta and newer); None on older GPUs."""
        return self._read("nvmlDeviceGetTotalEnergyConsumption")


def open_device(cuda_index: int = 0, pci_bus_id: str | None = None):
    """The NVML device behind CUDA device `cuda_index`, or None without NVML.

    CUDA renumbers devices under CUDA_VISIBLE_DEVICES and NVML does not, so the PCI bus id
    (from torch's device properties) finds the right one; without it the index is used.
    """
    nvml = binding()
    if nvml is None:
        return None
    try:
        handle = (nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id) if pci_bus_id
                  else nvml.nvmlDeviceGetHandleByIndex(cuda_index))
    except nvml.NVMLError:
        return None
    return Device(nvml, handle)
