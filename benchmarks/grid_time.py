"""Where the grid's time goes: training, evaluation, the run's set-up, the plan and tensor-peak
measurements, the rest of the notebook, and what the grid adds around it (kernel start, papermill,
Dask, writing), as shares of the workers' wall time (stage minutes x jobs, from grid-log.csv).

    python benchmarks/grid_time.py                   # runs a fixed subset (12 cpu cells, --jobs 1) first
    python benchmarks/grid_time.py --out results     # reads a grid that ran already (each stage logged)

The per-cell overhead is everything but training and evaluation, per cell that ran.
"""

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SUBSET = ["--arch", "llama", "vit", "--optimizer", "adam", "sgd", "--seed", "0", "--stage", "shared"]
PARTS = ("training", "evaluation", "set-up in the run", "plan + tensor peak", "rest of the run loop",
         "rest of the notebook", "around the notebook (kernel, papermill, Dask, writing)")


def stage_seconds(root: Path, profile: str) -> dict:
    """Per stage, the workers' seconds (wall x jobs) of its last logged run, and the cells it ran."""
    stages = {}
    with open(root / profile / "grid-log.csv") as handle:
        for row in csv.DictReader(handle):
            stages[row["stage"]] = (float(row["minutes"]) * 60 * int(row["jobs"] or 1), int(row["ran"] or 0))
    return stages


def cell_parts(result: dict, notebook_s: float) -> dict:
    s = result["summary"]
    train, evaluation, setup = s["train_time_s"], s.get("eval_s", 0.0), s.get("setup_s", 0.0)
    measured = s.get("plan_s", 0.0) + s.get("tensor_peak_s", 0.0)
    return {"training": train, "evaluation": evaluation, "set-up in the run": setup, "plan + tensor peak": measured,
            "rest of the run loop": s["total_time_s"] - train - evaluation - setup,
            "rest of the notebook": notebook_s - s["total_time_s"] - measured}


def stage_parts(folder: Path, twins: Path | None = None) -> tuple[dict, int]:
    """The parts summed over the cells this stage ran; `twins`: the folder whose runs it may have reused."""
    totals, cells = dict.fromkeys(PARTS[:-1], 0.0), 0
    for notebook in folder.rglob("*.ipynb"):
        result_file = notebook.with_suffix(".json")
        if not result_file.exists() or _reused(result_file, folder, twins):
            continue
        duration = json.loads(notebook.read_text())["metadata"].get("papermill", {}).get("duration")
        result = json.loads(result_file.read_text())
        if duration is None or not result.get("summary"):
            continue
        for part, seconds in cell_parts(result, duration).items():
            totals[part] += seconds
        cells += 1
    return totals, cells


def _reused(result_file: Path, folder: Path, twins: Path | None) -> bool:
    """A tuned cell copied from its shared twin (the grid's reuse_twins): its time was spent in shared."""
    twin = None if twins is None else twins / result_file.relative_to(folder)
    return twin is not None and twin.exists() and twin.read_bytes() == result_file.read_bytes()


def report(root: Path, profile: str) -> None:
    for stage, (wall, ran) in stage_seconds(root, profile).items():
        twins = root / profile / "shared" if stage == "tuned" else None
        totals, cells = stage_parts(root / profile / stage, twins)
        if not cells:
            continue
        totals[PARTS[-1]] = wall - sum(totals.values())
        print(f"\nstage {stage}: {cells} cells, {wall:.0f} worker-seconds ({ran} ran in the logged run)")
        for part in PARTS:
            print(f"  {part:<58} {totals[part]:8.1f} s  {100 * totals[part] / wall:5.1f} %")
        overhead = wall - totals["training"] - totals["evaluation"]
        print(f"  per-cell overhead outside training and evaluation: {overhead / cells:.2f} s; "
              f"training {100 * totals['training'] / wall:.1f} % of the wall")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="a grid's output folder (default: run the fixed subset)")
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="gum-grid-time-"))
        subprocess.run([sys.executable, "-m", "gum_utils.study.grid", "--profile", args.profile, "--jobs", "1",
                        "--out", str(args.out), *SUBSET], check=True)
    report(args.out, args.profile)


if __name__ == "__main__":
    main()
