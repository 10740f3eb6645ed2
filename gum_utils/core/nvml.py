"""NVIDIA's management library (NVML) read through ctypes: utilization, memory, power, energy.

The driver ships `libnvidia-ml.so.1` wherever a GPU runs, so reading it directly needs no
Python package (a GPU machine's stock image has only torch, transformers and numpy).
Where there is no library or no GPU, `open_device` returns None and nothing is sampled.

NVML's "utilization" is the fraction of the last sample period in which at least one
kernel ran on the GPU, not how busy its cores were: a single small kernel keeps it at 100 %.
"""

import ctypes

_LIBRARY = "libnvidia-ml.so.1"
_SUCCESS = 0
_library = None


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def _load():
    """The initialised library, or None where it cannot be loaded or initialised."""
    global _library
    if _library is None:
        try:
            library = ctypes.CDLL(_LIBRARY)
            _library = library if library.nvmlInit_v2() == _SUCCESS else False
        except (OSError, AttributeError):
            _library = False
    return _library or None


class Device:
    """One GPU's counters; each reading is None when the GPU does not report it."""

    def __init__(self, library, handle):
        self._library, self._handle = library, handle

    def _read(self, function: str, value):
        call = getattr(self._library, function, None)
        if call is None or call(self._handle, ctypes.byref(value)) != _SUCCESS:
            return None
        return value

    def utilization_percent(self):
        rates = self._read("nvmlDeviceGetUtilizationRates", _Utilization())
        return rates.gpu if rates is not None else None

    def memory_used_bytes(self):
        memory = self._read("nvmlDeviceGetMemoryInfo", _Memory())
        return memory.used if memory is not None else None

    def power_w(self):
        milliwatts = self._read("nvmlDeviceGetPowerUsage", ctypes.c_uint())
        return milliwatts.value / 1000 if milliwatts is not None else None

    def energy_mj(self):
        """Millijoules since the driver loaded (Volta and newer); None on older GPUs."""
        millijoules = self._read("nvmlDeviceGetTotalEnergyConsumption", ctypes.c_ulonglong())
        return millijoules.value if millijoules is not None else None


def open_device(cuda_index: int = 0, pci_bus_id: str | None = None):
    """The NVML device behind CUDA device `cuda_index`, or None without NVML.

    CUDA renumbers devices under CUDA_VISIBLE_DEVICES and NVML does not, so the PCI bus id
    (from torch's device properties) finds the right one; without it the index is used.
    """
    library = _load()
    if library is None:
        return None
    handle = ctypes.c_void_p()
    if pci_bus_id:
        found = library.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id.encode(), ctypes.byref(handle))
    else:
        found = library.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(cuda_index), ctypes.byref(handle))
    return Device(library, handle) if found == _SUCCESS else None
