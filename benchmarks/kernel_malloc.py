"""What Dask's MALLOC_TRIM_THRESHOLD_ cost a training kernel that inherited it (the grid's kernels no
longer do: `gum_utils.study.kernels.NOT_INHERITED`).

One cpu-profile cell's training, each in a fresh process with one thread, alternately with the variable
set as Dask's nanny sets it and without; median over the rounds of the training seconds, and their ratio.
Set, glibc's adaptive mmap threshold is off: every tensor above 128 KiB is a fresh mmap zeroed page by page.

    python benchmarks/kernel_malloc.py [--rounds 5] [--arch llama] [--strategy standard]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

DASK_SETTING = {"MALLOC_TRIM_THRESHOLD_": "65536"}  # distributed.yaml: nanny.pre-spawn-environ
TRAIN = """
import json, os, sys
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.study.profiles import profile
result = train(RunConfig.from_dict(profile("cpu").run_parameters(sys.argv[1], "adam", sys.argv[2], 0)))
times = os.times()
print(json.dumps({"train_s": result.summary["train_time_s"], "loss": result.summary["final_loss"],
                  "user_s": times.user, "system_s": times.system}))
"""


def one_run(arch: str, strategy: str, with_setting: bool) -> dict:
    env = {name: value for name, value in os.environ.items() if name not in DASK_SETTING}
    env.update(OMP_NUM_THREADS="1", **(DASK_SETTING if with_setting else {}))
    done = subprocess.run([sys.executable, "-c", TRAIN, arch, strategy], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--arch", default="llama")
    parser.add_argument("--strategy", default="standard")
    args = parser.parse_args()
    runs = {True: [], False: []}
    for round_ in range(args.rounds):
        for with_setting in ((True, False) if round_ % 2 == 0 else (False, True)):  # interleaved
            runs[with_setting].append(one_run(args.arch, args.strategy, with_setting))
    for with_setting, label in ((True, "inherited (before)"), (False, "not inherited (now)")):
        rows = runs[with_setting]
        print(f"{label:20s} training {statistics.median(r['train_s'] for r in rows):6.2f} s "
              f"(system {statistics.median(r['system_s'] for r in rows):5.2f} s of the process)")
    same = {r["loss"] for r in runs[True]} == {r["loss"] for r in runs[False]}
    ratio = statistics.median(r["train_s"] for r in runs[True]) / statistics.median(r["train_s"] for r in runs[False])
    print(f"{args.arch} {args.strategy}: inherited / not inherited = {ratio:.2f}x; "
          f"final losses {'bit-identical' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
