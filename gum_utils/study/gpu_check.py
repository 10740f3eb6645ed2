"""The prepared GPU check: every architecture at paper size, a few steps per cell, one table.

    PYTHONPATH=. python -m gum_utils.study.gpu_check            # make gpu-check: 4 archs x 2 optimizers x 3 strategies
    python -m gum_utils.study.gpu_check --device cpu --optimizers sgd --strategies standard \\
        --steps 1 --batch-size 1                           # make paper-smoke: paper size on the CPU

It needs only torch, transformers and numpy (a GPU machine's stock image): no papermill,
pandas or plotting. Each run is the study's own `train()` on the embedded data, so the table
shows what the paper profile will meet: time per step, peak memory, NVML utilization, model
FLOPs utilization and status. A cell that would not fit in memory is skipped with a message.
"""

import argparse
import gc
import json
import sys
import time
from pathlib import Path

import torch

from ..archs import ARCHITECTURES, SIZES, architecture
from ..archs.base import count_parameters
from ..core import nvml
from ..core.config import DTYPES, RunConfig
from ..core.results import write_atomically
from ..core.run import train
from ..core.strategies import ALL_STRATEGIES, STRATEGIES, strategy as strategy_spec
from ..core.trainer import resolve_device
from ..planner.record import references
from ..optim import OPTIMIZERS, optimizer as optimizer_spec

CHECK_OPTIMIZERS = ("adam", "cgd")  # torch's most used, and the one we wrote
GIB = 1024**3
ACTIVATION_MARGIN_BYTES = 2 * GIB  # rough room for activations at batch 1-8, so a tight fit is skipped
COLUMNS = [  # (heading, summary key, scale, format)
    ("step ms", "mean_step_time_s", 1e3, "{:.0f}"),
    ("peak GiB", "peak_memory_bytes", 1 / GIB, "{:.1f}"),  # max_memory_allocated on a GPU, the process's RSS on a CPU
    ("tensors GiB", "cpu_tensor_peak_bytes", 1 / GIB, "{:.1f}"),  # on a CPU: the real step's peak of live tensors
    ("planned GiB", "planned_peak_bytes", 1 / GIB, "{:.1f}"),  # the memory planner's prediction (planner/trace.py)
    ("data GiB", "device_data_bytes", 1 / GIB, "{:.1f}"),  # the training split, where it lives on the GPU
    ("plan err %", "plan_error_percent", 1, "{:+.1f}"),  # (planned step + data - peak) / peak
    ("util %", "mean_gpu_util_percent", 1, "{:.0f}"),
    ("power W", "mean_gpu_power_w", 1, "{:.0f}"),
    ("energy J", "energy_j", 1, "{:.0f}"),
    ("TFLOP/s", "model_tflops_per_s", 1, "{:.2f}"),
    ("MFU %", "mfu", 100, "{:.1f}"),
    ("samples/s", "samples_per_s", 1, "{:.1f}"),
]


def needed_bytes(arch: str, size: str, optimizer: str) -> int:
    """Weights, gradients and optimizer state in float32, plus a margin for activations."""
    with torch.device("meta"):
        parameters = count_parameters(architecture(arch).build_model(size))
    return parameters * (8 + optimizer_spec(optimizer).state_bytes_per_parameter()) + ACTIVATION_MARGIN_BYTES


def free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) * 1024


def skip_reason(arch: str, size: str, optimizer: str, device: torch.device) -> str | None:
    """Why this cell cannot run here, or None when it fits."""
    need, have = needed_bytes(arch, size, optimizer), free_bytes(device)
    if need <= have:
        return None
    return f"needs about {need / GIB:.1f} GiB, {have / GIB:.1f} GiB free on {device}"


def check_configs(args) -> list[RunConfig]:
    """The cells of the check: paper profile shapes (accumulation: micro-batches of --batch-size)."""
    configs = []
    for arch in args.archs:
        for optimizer in args.optimizers:
            for strategy in args.strategies:
                accumulate = strategy_spec(strategy).splits_batch
                configs.append(RunConfig(
                    arch=arch, size=args.size, optimizer=optimizer, strategy=strategy, steps=args.steps,
                    batch_size=args.batch_size * (args.accumulation if accumulate else 1),
                    micro_batch_size=args.batch_size if accumulate else None,
                    eval_samples=args.batch_size, device=args.device, dtype=args.dtype))
    return configs


def plan_error_percent(summary: dict) -> float | None:
    """How far the planner's step, plus the training split kept on the GPU, is from the measured peak
    of tensors: max_memory_allocated on a GPU, the profiler's live tensors on a CPU (its RSS holds the
    libraries and the allocator's cache too: ViT's plan read -65 % against it)."""
    planned = summary.get("planned_peak_bytes")
    peak = summary.get("cpu_tensor_peak_bytes") or summary.get("peak_memory_bytes")
    if not planned or not peak:
        return None
    return 100 * (planned + (summary.get("device_data_bytes") or 0) - peak) / peak


def row(config: RunConfig, summary: dict, utilization: dict, status: str, note: str = "") -> dict:
    values = {**summary, **{key: utilization.get(key) for key in ("mean_gpu_util_percent", "mean_gpu_power_w",
                                                                   "energy_j")},
              "plan_error_percent": plan_error_percent(summary)}
    return {"arch": config.arch, "optimizer": config.optimizer, "strategy": config.strategy, "status": status,
            **{key: values.get(key) for _, key, _, _ in COLUMNS}, "note": note}


def _cell_text(value, scale, form) -> str:
    return "-" if value is None else form.format(value * scale)


def format_table(rows: list[dict]) -> str:
    """A plain-text table; fields a device does not report (a CPU's GPU utilization) show '-'."""
    headings = ["arch", "optimizer", "strategy", "status"] + [h for h, _, _, _ in COLUMNS]
    lines = [[r["arch"], r["optimizer"], r["strategy"], r["status"]]
             + [_cell_text(r.get(key), scale, form) for _, key, scale, form in COLUMNS] for r in rows]
    widths = [max(len(str(cell)) for cell in column) for column in zip(headings, *lines)]
    render = lambda cells: "  ".join(str(c).rjust(w) if i >= 4 else str(c).ljust(w)  # noqa: E731
                                     for i, (c, w) in enumerate(zip(cells, widths)))
    out = [render(headings), render(["-" * w for w in widths])] + [render(line) for line in lines]
    notes = [f"{r['arch']}/{r['optimizer']}/{r['strategy']}: {r['note']}" for r in rows if r["note"]]
    return "\n".join(out + ([""] + notes if notes else []))


def run_check(configs: list[RunConfig], echo=print, out: Path | None = None) -> list[dict]:
    """Each cell in turn; with `out`, the rows so far are written after every cell (a check cut short keeps them)."""
    rows = []
    for number, config in enumerate(configs, 1):
        device = resolve_device(config.device)
        reason = skip_reason(config.arch, config.size, config.optimizer, device)
        started = time.perf_counter()
        if reason:
            rows.append(row(config, {}, {}, "skipped", reason))
        else:
            result = train(config)  # its model released: the reference measurement builds its own
            result.summary.update(references(config))
            rows.append(row(config, result.summary, result.utilization, result.status, result.error or ""))
        echo(f"[{number}/{len(configs)}] {config.arch} {config.optimizer} {config.strategy}: "
             f"{rows[-1]['status']} in {time.perf_counter() - started:.1f} s", flush=True)
        if out:
            _write_rows(out, rows)
        gc.collect()  # free this cell's model before the next one is built
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def _write_rows(out: Path, rows: list[dict]) -> None:
    write_atomically(out, json.dumps(rows, indent=1))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=list(ARCHITECTURES), choices=ARCHITECTURES)
    parser.add_argument("--optimizers", nargs="+", default=list(CHECK_OPTIMIZERS), choices=OPTIMIZERS)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=ALL_STRATEGIES)
    parser.add_argument("--size", default="paper", choices=SIZES)
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per cell (the first is warm-up)")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per forward/backward")
    parser.add_argument("--accumulation", type=int, default=4, help="micro-batches per step under accumulation")
    parser.add_argument("--device", default="cuda", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dtype", default="float32", choices=DTYPES)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.accumulation < 2:
        parser.error("--steps and --batch-size must be >= 1, --accumulation >= 2")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here (use --device cpu for the paper-size CPU smoke)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device != "cpu" and nvml.binding() is None:
        print("NVML readings (utilization, power, energy) need NVIDIA's binding: pip install nvidia-ml-py; "
              "the check runs without them", flush=True)
    started = time.perf_counter()
    rows = run_check(check_configs(args), out=args.out)
    print()
    print(format_table(rows))
    print(f"\n{len(rows)} cells in {(time.perf_counter() - started) / 60:.1f} min on "
          f"{torch.cuda.get_device_name() if args.device != 'cpu' and torch.cuda.is_available() else 'the CPU'}; "
          "util % is NVML's share of time a kernel ran, not how busy the cores were; MFU counts model FLOPs "
          "(see gum_utils/core/flops.py) against the device's dense peak.")
    failed = [r for r in rows if r["status"] not in ("ok", "skipped")]
    return 1 if failed else 0


if __name__ == "__main__":
    from ..stopping import run_command

    sys.exit(run_command("gum_utils.study.gpu_check", main))
