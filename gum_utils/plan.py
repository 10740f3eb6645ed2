"""`python -m gum_utils.plan`: will a training step fit? The command line over `gum_utils.planner`.

    python -m gum_utils.plan --arch llama --size paper --optimizer adam --strategy accumulation \\
        --batch-size 32 --micro-batch-size 4 [--seq-len 1024] [--dtype bfloat16] [--device cpu] \\
        [--memory 24GiB | --gpu A100-40GB] [--model-config PATH] [--json]

Arguments are checked before anything is traced; torch loads only when a plan is made.
"""

from .core.config import RunConfig
from .core.memory_sizes import GPU_MEMORY_GIB, MEMORY_FORMS, gpu_memory, parse_memory

def _parser():
    import argparse

    from .archs import ARCHITECTURES, SIZES
    from .core.config import DTYPES
    from .core.strategies import ALL_STRATEGIES
    from .optim import OPTIMIZERS
    from .study.profiles import PROFILES

    parser = argparse.ArgumentParser(prog="python -m gum_utils.plan",
                                     description="Predict a training step's peak memory; with a budget, what fits.")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--arch", choices=ARCHITECTURES, default="llama")
    model.add_argument("--model-config", metavar="PATH", help="a transformers config.json (causal LM, masked LM "
                       "or image classifier) planned in place of --arch/--size")
    parser.add_argument("--size", choices=SIZES, default="tiny")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adam")
    parser.add_argument("--strategy", choices=ALL_STRATEGIES, default="standard")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int)
    parser.add_argument("--seq-len", type=int, help="text length (default: the architecture's; 512 for --model-config)")
    parser.add_argument("--step", choices=("trainer", "gum"), help="with --model-config: the training step "
                        "planned: trainer (default: a transformers Trainer's, the loss from the model's own labels "
                        "path) or gum (the study's: the loss from the logits, summed)")
    parser.add_argument("--padded", action="store_true", help="with --model-config: text batches hold padding "
                        "(the attention mask is then built in full; default: no padding, SDPA's causal kernel)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="where the run would step (default cuda: torch's optimizers then step all tensors at "
                             "once, and their full-size temporaries count)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--memory", help=f"a memory budget: {MEMORY_FORMS}")
    budget.add_argument("--gpu", help=f"a GPU's memory as budget, one of: {', '.join(GPU_MEMORY_GIB)}")
    parser.add_argument("--results", metavar="PROFILE", default="cpu", choices=tuple(PROFILES),
                        help="whose measured runs give each strategy's time cost (book/runs/PROFILE; default cpu); "
                             "without them the FLOP count does")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def budget_bytes(args) -> int | None:
    if args.memory is not None:
        return parse_memory(args.memory)
    return gpu_memory(args.gpu) if args.gpu is not None else None


def run_options(args) -> dict:
    """The RunConfig fields the command line sets, checked (a RunConfig validates them) before any tracing."""
    run = dict(optimizer=args.optimizer, strategy=args.strategy, batch_size=args.batch_size,
               micro_batch_size=args.micro_batch_size, dtype=args.dtype, device=args.device)
    RunConfig(arch=args.arch, size=args.size, **run)
    if (args.padded or args.step) and not args.model_config:
        raise ValueError("--padded and --step are for --model-config: the study's models are planned on their "
                         "own data and step")
    if not args.model_config:
        check_text_options(args, args.arch)
    return run


def check_text_options(args, arch: str) -> None:
    """--seq-len and --padded shape text batches: refused for an image classifier, not ignored."""
    if arch == "vit" and (args.seq_len is not None or args.padded):
        raise ValueError("--seq-len and --padded are for text models; an image classifier takes images of its "
                         "own size (config.json's image_size, or --size)")


def run_cli(args, budget: int | None) -> dict:
    """The plan of the command line's run, and with a budget what fits, as one dict."""
    from .core.strategies import STRATEGIES
    from .planner import search, trace

    run = run_options(args)
    if args.model_config:
        from .planner.model_config import plan_model_config

        step = args.step or "trainer"
        config, template, make = plan_model_config(args.model_config, args.seq_len or 512, args.padded, step, **run)
        check_text_options(args, config.arch)
    else:  # the study's model: its plans are cached, and its data gives the batch
        config, template, make = RunConfig(arch=args.arch, size=args.size, **run), None, None
    result = trace.plan(config, seq_len=args.seq_len, template=template, make_model=make).to_dict()
    if args.model_config:
        result["step"] = step
        result["notes"].append("planned for " + ("a transformers Trainer step (the loss from the model's labels "
                                                 "path)" if step == "trainer" else "the study's step (--step gum)"))
    if budget is None:
        return result
    result.update(budget_bytes=budget, batch_size=config.rank_batch_size, fits=result["peak_bytes"] <= budget)
    searches = {name: search.largest_micro_batch(config, budget, name, template, make, args.seq_len)
                for name in STRATEGIES}
    result["largest_micro_batch"] = {name: found["largest_micro_batch"] for name, found in searches.items()}
    for name, found in searches.items():
        found["time_cost"], found["time_source"] = time_cost(None if args.model_config else args.arch, name,
                                                             args.results, "gpu" if args.device == "cuda" else "cpu")
    result["strategies"] = searches
    if not any(found["largest_micro_batch"] for found in searches.values()):
        result["what_would_fit"] = search.what_would_fit(config, budget, args.seq_len, template, make)
    result["recommendation"] = recommendation(searches)
    return result


def recommendation(searches: dict) -> str | None:
    """Of the strategies that reach the batch within the budget, the fastest (the guide's rule)."""
    from .report.guide import fastest_strategy

    return fastest_strategy({name: found["time_cost"] for name, found in searches.items() if found["fits"]})


def time_cost(arch: str | None, strategy: str, profile: str, device: str) -> tuple[float, str]:
    """A strategy's time per sample relative to standard: measured by a profile's runs of `arch` on
    `device` ("gpu" for a plan on a GPU, "cpu") where they exist, else the FLOP count (report/guide.py),
    with its source."""
    from pathlib import Path

    from .report import guide, tables

    runs_root = Path(__file__).resolve().parent.parent / "book" / "runs" / profile
    costs = guide.time_costs(tables.runs_table(runs_root) if arch and runs_root.is_dir() else None, device)
    cost, source = guide.time_cost(costs, arch, strategy)
    return cost, f"{source} of the {profile} profile" if source.startswith("measured") else source


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _report(result: dict) -> str:
    lines = [f"predicted peak: {_gib(result['peak_bytes'])} ({result['peak_bytes']} bytes)"]
    lines += [f"  {key:<16} {_gib(value)}" for key, value in result["breakdown"].items()]
    lines += [f"note: {note}" for note in result["notes"]]
    if "budget_bytes" in result:
        lines.append(f"budget {_gib(result['budget_bytes'])}: {'fits' if result['fits'] else 'does not fit'}")
        for name, found in result["strategies"].items():
            largest = found["largest_micro_batch"]
            text = "does not fit even at micro-batch 1" if largest is None else f"largest micro-batch {largest}"
            if found.get("accumulation_steps"):
                text += f"; {found['accumulation_steps']} x {found['micro_batch_size']} makes the batch"
            text += f"; time per sample x{found['time_cost']:.2f} of standard ({found['time_source']})"
            lines.append(f"  {name:<14} {text}")
        for option in result.get("what_would_fit", []):
            mark = "fits" if option["fits"] else "does not fit"
            lines.append(f"  at micro-batch 1 with {_change(option['change'])}: {_gib(option['peak_bytes'])}, {mark}")
        lines += _verdict(result)
    return "\n".join(lines)


def _change(change: dict) -> str:
    """{"optimizer": "sgd"} as "optimizer sgd" (one change, or several joined)."""
    return " and ".join(f"{key} {value}" for key, value in change.items())


def _verdict(result: dict) -> list[str]:
    """The strategies that cannot reach the batch, then the recommendation in one line."""
    batch, budget = result["batch_size"], result["budget_bytes"]
    short = [f"{name} (largest micro-batch {found['largest_micro_batch'] or 'none'})"
             for name, found in result["strategies"].items() if not found["fits"]]
    lines = [f"cannot reach batch {batch} in {_gib(budget)}: {', '.join(short)}"] if short else []
    best = result["recommendation"]
    if best is None:
        fitting = [option for option in result.get("what_would_fit", []) if option["fits"]]
        hint = f"; at micro-batch 1, {_change(fitting[0]['change'])} would fit" if fitting else ""
        return lines + [f"no strategy reaches batch {batch} in {_gib(budget)}{hint}"]
    found = result["strategies"][best]
    steps = (f"{found['accumulation_steps']} micro-batches of {found['micro_batch_size']}"
             if found.get("accumulation_steps") else f"batch {batch}")
    spare = budget - found["peak_bytes"]
    room = "a tight fit" if spare < 0.05 * budget else f"{_gib(spare)} to spare"
    return lines + [f"use {best}, {steps}: {_gib(found['peak_bytes'])} of {_gib(budget)}, {room}"]


def main(argv=None) -> int:
    import json
    import sys

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        budget = budget_bytes(args)  # bad sizes and names fail here, before anything is traced
        run_options(args)
        result = run_cli(args, budget)
    except ValueError as error:
        if type(error).__name__ == "ModelConfigError":  # the file is wrong, not the usage: one line
            print(f"{parser.prog}: error: {error}", file=sys.stderr)
            return 2
        parser.error(str(error))
    print(json.dumps(result) if args.json else _report(result), file=sys.stdout)
    return 0


if __name__ == "__main__":
    from .stopping import run_command

    raise SystemExit(run_command("python -m gum_utils.plan", main))
