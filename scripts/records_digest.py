"""Digests of what runs record, to prove a refactor changed no number (bit for bit).

    python scripts/records_digest.py --write scripts/records-digest.json   # before the change
    python scripts/records_digest.py --check scripts/records-digest.json   # after it

Each configuration is a cell of the cpu profile; its digest covers every record's loss and counts,
every validation, the memory breakdown and the FLOP count: everything a run measures except times.
The floats depend on the CPU's kernels (with and without AVX-512 they differ in every configuration:
c975452's own code missed its own reference on another machine), so the file names the machine it
was taken on and a check elsewhere says so: take the reference at the base commit on this machine.
"""

import argparse
import hashlib
import json
import platform
import sys

import torch

from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.study.profiles import profile

CELLS = [  # (arch, optimizer, strategy, seed): all four architectures, every optimizer and strategy, CGD thrice
    ("vit", "adam", "standard", 0), ("vit", "cgd", "accumulation", 0), ("vit", "sgd", "checkpointing", 1),
    ("modernbert", "sgd", "checkpointing", 0), ("modernbert", "adagrad", "standard", 1),
    ("llama", "cgd", "standard", 0), ("llama", "adadelta", "accumulation", 0), ("llama", "adam", "checkpointing", 2),
    ("nanovlm", "adam", "checkpointing", 0), ("nanovlm", "cgd", "standard", 2),
]
TIMES = ("step_time_s",)


def measured(result) -> dict:
    """What a run measured, less wall-clock times (they differ from run to run)."""
    records = [{k: v for k, v in r.items() if k not in TIMES} for r in result.records]
    return {"status": result.status, "records": records, "evals": result.evals, "memory": result.memory,
            "flops_per_step": result.summary.get("flops_per_step")}


MACHINE_KEY = "_machine"


def machine() -> str:
    """What the floats depend on: the CPU (its model and whether it has AVX-512) and torch."""
    try:
        with open("/proc/cpuinfo") as info:
            text = info.read()
        model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "")
    except OSError:
        text, model = "", platform.processor()
    return f"{model or platform.machine()}, {'with' if 'avx512f' in text else 'without'} AVX-512, torch {torch.__version__}"


def digest(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def digests(steps: int | None) -> dict:
    cpu = profile("cpu")
    out = {}
    for arch, optimizer, strategy, seed in CELLS:
        parameters = cpu.run_parameters(arch, optimizer, strategy, seed)
        if steps:
            parameters["steps"] = steps
        result = train(RunConfig.from_dict(dict(parameters, device="cpu")))
        out[f"{arch}/{optimizer}-{strategy}-s{seed}"] = digest(measured(result))
        print(f"{arch}/{optimizer}-{strategy}-s{seed}: {result.status}, {len(result.records)} records", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", metavar="FILE")
    action.add_argument("--check", metavar="FILE")
    parser.add_argument("--steps", type=int, help="fewer steps than the cpu profile's, for a quick look")
    args = parser.parse_args(argv)
    found = digests(args.steps)
    if args.write:
        with open(args.write, "w") as out:
            json.dump({MACHINE_KEY: machine(), **found}, out, indent=1, sort_keys=True)
        return 0
    with open(args.check) as handle:
        expected = json.load(handle)
    taken_on = expected.pop(MACHINE_KEY, "an unnamed machine")
    if taken_on != machine():
        print(f"note: the reference was taken on {taken_on}; this is {machine()}: floats may differ in every "
              "configuration for that alone (take the reference at the base commit here)")
    differ = [name for name in expected if found.get(name) != expected[name]]
    print(f"{len(expected) - len(differ)} of {len(expected)} configurations bit-identical"
          + (f"; differ: {', '.join(differ)}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
