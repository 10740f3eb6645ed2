"""Memory sizes as a reader writes them ('24GiB', '40GB', '16g') and the nominal memory of common GPUs.

The planner's budgets; imports no torch, so the command line checks its arguments at once.
"""

import re

from ..choices import check_choice

# Nominal total memory of common GPUs, in GiB, as the vendors' datasheets state it (NVIDIA: T4 16 GB,
# L4 24 GB, GeForce RTX 4090 24 GB, A100 40 GB and 80 GB, L40S 48 GB, H100 80 GB, H200 141 GB).
# These are totals: the memory free for tensors is less (the CUDA context and the caching
# allocator's fragmentation take some, e.g. nvidia-smi shows an H100's as 79.6 GiB).
GPU_MEMORY_GIB = {
    "T4-16GB": 16, "L4-24GB": 24, "RTX4090-24GB": 24, "A100-40GB": 40, "L40S-48GB": 48,
    "A100-80GB": 80, "H100-80GB": 80, "H200-141GB": 141,
}
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
MEMORY_FORMS = ("a number of bytes (e.g. 1000000), or a number with a unit: KB/MB/GB/TB (powers of 1000), "
                "KiB/MiB/GiB/TiB (powers of 1024), or k/m/g/t (powers of 1024), e.g. '24GiB', '40GB', '16g'")


def parse_memory(text: str) -> int:
    """Bytes of a memory size such as '24GiB', '40GB', '16g' or '512MiB' (case-insensitive)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if unit not in _UNITS:
        raise ValueError(f"cannot read memory size {text!r}; valid forms: {MEMORY_FORMS}")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"memory size {text!r} must be more than 0 bytes")
    return size


def gpu_memory(name: str) -> int:
    """Nominal total bytes of a GPU in GPU_MEMORY_GIB, by name (case-insensitive)."""
    names = {key.lower(): key for key in GPU_MEMORY_GIB}
    check_choice("GPU", names.get(str(name).lower(), name), tuple(GPU_MEMORY_GIB))
    return GPU_MEMORY_GIB[names[str(name).lower()]] * 2**30
