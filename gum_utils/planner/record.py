"""A run's plan and reference peak, recorded beside it by the study (the training core calls no planner).

Both are computed once per configuration's memory fields and code, then read from the cache
(`planner.cache`): tracing and measuring take seconds, the grid runs each configuration many times.
"""

import functools
import hashlib
import json
import time
from pathlib import Path

import torch

from ..core.code_digest import code_digest
from ..core.config import RunConfig
from . import reference, trace
from .cache import cache_folder, cache_off, read_entry, store_entry


def references(config: RunConfig) -> dict:
    """The planner's prediction and, on the CPU, the real step's peak of live tensor bytes (the
    profiler's allocator events), with the seconds each took: for a run's summary, taken after
    training so timed steps see neither."""
    started = time.perf_counter()
    planned = planned_peak_bytes(config)
    traced = time.perf_counter()
    measured = cpu_tensor_peak_bytes(config)
    return {"planned_peak_bytes": planned, "cpu_tensor_peak_bytes": measured,
            "plan_s": traced - started, "tensor_peak_s": time.perf_counter() - traced}


def planned_peak_bytes(config: RunConfig) -> int | None:
    """The predicted peak of a run's step, for its summary: traced once per configuration's memory
    fields and code, then read from a JSON file. None where the planner does not model the run:
    several processes (DDP buckets, FSDP shards) or the hub's data and checkpoints (their shapes
    come from the hub). A configuration the planner cannot trace gives None: a run never fails for it.
    With GUM_PLAN_CACHE=off, None for all (the tests of notebook runs do so: they test the planner apart)."""
    return _once_per_configuration(config, "peak_bytes", lambda: trace.plan(config).peak_bytes)


def cpu_tensor_peak_bytes(config: RunConfig) -> int | None:
    """The measured peak of live tensor bytes of a CPU run's step, for its summary (claim (b) judges it):
    `measured_peak` of the configuration's memory fields, run once per configuration and code and read
    from a JSON file after that. Tensor bytes do not depend on the seed or the rate, and the
    measurement uses the key's own seed, so every run of a configuration records the same number
    whichever ran first. None on a GPU (its runs record `max_memory_allocated`) and where
    `planned_peak_bytes` is None."""
    if trace.target_device(config) == "cuda":
        return None
    def measure_the_key():  # the key's own seed: the same number for every run of the configuration
        return reference.measured_peak(RunConfig.from_dict(json.loads(trace.memory_key(config))))

    return _once_per_configuration(config, "measured_tensor_peak_bytes", measure_the_key)


def cached_peak_bytes(config: RunConfig) -> int | None:
    """The planned peak already on disk (None: not traced yet, or not cached)."""
    file = _cache_file(config, "peak_bytes")
    return read_entry(file, "peak_bytes") if file else None


def _cache_file(config: RunConfig, field_name: str) -> Path | None:
    if config.world_size > 1 or config.data != "embedded" or config.pretrained is not None \
            or cache_off():
        return None
    return cache_folder() / f"{_plan_cache_key(config)}.{field_name}.json"


def _once_per_configuration(config: RunConfig, field_name: str, compute) -> int | None:
    file = _cache_file(config, field_name)
    if file is None:
        return None
    cached = read_entry(file, field_name)  # a bad entry is named, then traced again and replaced
    if cached is not None:
        return cached
    try:
        with torch.random.fork_rng(devices=[]):  # the run's random streams stay as they were
            value = compute()
    except Exception:  # noqa: BLE001 (a number missing is recorded as None, the run stands)
        return None
    store_entry(file, json.dumps({"config": trace.memory_key(config), field_name: value}))
    return value


def _plan_cache_key(config: RunConfig) -> str:
    return hashlib.sha256((trace.memory_key(config) + planner_code()).encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def planner_code() -> str:
    """The code a plan depends on: the training layers' and the planner's files, and torch's and
    transformers' versions."""
    package = Path(__file__).resolve().parent.parent
    files = sorted([package / "choices.py", *(p for layer in ("archs", "optim", "core", "planner") for p in
                                              (package / layer).rglob("*.py"))])
    return code_digest(package, files)
