"""The decision guide: its plans (study/guide.py) and every number its page shows (report/guide.py)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gum_utils.report import guide
from gum_utils.study import guide as planning

ROOT = Path(__file__).resolve().parent.parent

GIB = 2**30


def _guide(points: dict, batch: int = 32, paper_batch: int = 8) -> dict:
    """A guide whose curves are `points`: {(arch, strategy): {micro: peak GiB}} (Adam)."""
    plans = []
    for (arch, strategy), peaks in points.items():
        for micro, gib in peaks.items():
            accumulate = strategy == "accumulation"
            plans.append({"arch": arch, "optimizer": "adam", "strategy": strategy,
                          "batch_size": batch if accumulate else micro, "micro_batch_size": micro if accumulate else None,
                          "peak_bytes": int(gib * GIB), "error": None})
    return {"batch": batch, "paper_batch": paper_batch, "accumulation": batch // paper_batch, "curve_optimizer": "adam",
            "dtype": "float32", "plans": plans}


KNOWN = _guide({("llama", "standard"): {1: 19, 8: 23, 16: 30, 32: 44},
                ("llama", "checkpointing"): {1: 19, 8: 20, 16: 21, 32: 23},
                ("llama", "accumulation"): {1: 19.5, 8: 24, 16: 31}})


def test_the_paper_table_reads_each_strategy_at_the_paper_shapes():
    table = guide.paper_batch_table(KNOWN)
    assert table.loc[("llama", "adam")].to_dict() == {"standard": 23, "checkpointing": 20, "accumulation": 24}


def test_the_largest_micro_batch_for_a_budget_between_two_points_is_the_lower_one():
    curve = guide.curves(KNOWN)
    standard = curve[curve["strategy"] == "standard"]
    assert guide.largest_fitting(standard, 29.9 * GIB) == 8
    assert guide.largest_fitting(standard, 30 * GIB) == 16
    assert guide.largest_fitting(standard, 18 * GIB) is None


def test_the_fastest_strategy_that_reaches_the_batch_uses_the_measured_costs():
    costs = pd.DataFrame([{"arch": "llama", "strategy": "checkpointing", "time_cost": 1.3, "source": "measured"},
                          {"arch": "llama", "strategy": "accumulation", "time_cost": 1.1, "source": "measured"},
                          {"arch": "llama", "strategy": "standard", "time_cost": 1.0, "source": "measured"}])
    fits = guide.fits_table(KNOWN, costs, memory_gib=(16, 24, 40, 48)).set_index("memory_gib")
    assert fits.loc[16, "fastest"].startswith("none")  # even micro-batch 1 needs 19 GiB
    assert fits.loc[24, ["standard", "checkpointing", "accumulation"]].tolist() == ["8", "32", "8 x 4"]
    assert (fits.loc[24, "fastest"], fits.loc[24, "time_cost"]) == ("accumulation", 1.1)  # 1.1 < 1.3
    assert (fits.loc[48, "fastest"], fits.loc[48, "time_cost"]) == ("standard", 1.0)  # it fits: nothing is faster
    cheaper = costs.assign(time_cost=[1.3, 0.9, 1.0])  # accumulation measured cheaper per sample than standard
    assert guide.fits_table(KNOWN, cheaper, memory_gib=(48,)).loc[0, "fastest"] == "standard"
    no_runs = guide.fits_table(KNOWN, guide.time_costs(None), memory_gib=(24,))
    assert (no_runs.loc[0, "fastest"], no_runs.loc[0, "time_cost"]) == ("accumulation", 1.0)  # FLOPs: 1 < 4/3


def test_time_costs_are_per_sample_ratios_paired_on_optimizer_and_seed():
    rows = []
    for seed, noise in ((0, 1.0), (1, 1.02), (2, 0.98)):
        for strategy, batch, seconds in (("standard", 8, 0.1), ("checkpointing", 8, 0.15), ("accumulation", 32, 0.44)):
            rows.append({"regime": "shared", "arch": "vit", "optimizer": "adam", "seed": seed, "strategy": strategy,
                         "batch_size": batch, "mean_step_time_s": seconds * noise, "status": "ok", "device": "cpu"})
    costs = guide.time_costs(pd.DataFrame(rows)).set_index("strategy")
    assert costs.loc["checkpointing", "time_cost"] == pytest.approx(1.5)
    assert costs.loc["accumulation", "time_cost"] == pytest.approx(1.1)  # 0.44 s / 32 against 0.1 s / 8
    assert costs.loc["standard", "source"] == "measured (cpu, 3 pairs)"


def test_a_gpu_recommendation_takes_no_cpu_timings_and_falls_back_to_the_flop_count():
    rows = [{"regime": "shared", "arch": "llama", "optimizer": "adam", "seed": 0, "strategy": strategy,
             "batch_size": batch, "mean_step_time_s": seconds, "status": "ok", "device": device}
            for device, scale in (("cpu", 1.0), ("gpu", 0.01))
            for strategy, batch, seconds in (("standard", 8, 0.1 * scale), ("checkpointing", 8, 0.124 * scale),
                                             ("accumulation", 32, 0.56 * scale * (1.05 if device == "gpu" else 1)))]
    cpu_only = pd.DataFrame([row for row in rows if row["device"] == "cpu"])
    gpu_costs = guide.time_costs(cpu_only, device="gpu")
    assert guide.time_cost(gpu_costs, "llama", "checkpointing") == (pytest.approx(4 / 3), "FLOP count")
    assert guide.time_cost(guide.time_costs(cpu_only, device="cpu"), "llama", "accumulation") == \
        (pytest.approx(1.4), "measured (cpu, 1 pairs)")
    both = guide.time_costs(pd.DataFrame(rows), device="gpu")
    assert guide.time_cost(both, "llama", "accumulation") == (pytest.approx(1.47), "measured (gpu, 1 pairs)")
    no_plans = json.loads((ROOT / "book" / "templates" / "guide.ipynb").read_text())["cells"]
    shown = ["".join(c["source"]) for c in no_plans if "remove-cell" not in c["metadata"].get("tags", [])]
    assert any("display(Markdown(no_plans))" in source for source in shown)  # not in a cell the page drops
    assert any('time_costs(runs, device="gpu")' in "".join(c["source"]) for c in no_plans)


def test_planned_against_measured_gives_the_relative_error_per_cell():
    runs = pd.DataFrame({"regime": "shared", "optimizer": ["adam", "adam", "sgd"], "strategy": "standard",
                         "planned_peak_bytes": [110.0, 110.0, np.nan]})
    checked = guide.planned_against_measured(runs, pd.Series([100.0, 100.0, 50.0]))
    assert checked["error_percent"].tolist() == pytest.approx([10.0])  # sgd has no plan: left out


def test_a_missing_guide_says_how_to_make_it(tmp_path):
    with pytest.raises(guide.GuideMissing, match="make guide"):
        guide.load_guide(tmp_path / "guide.json")


def test_the_guide_traces_each_configuration_once_and_reads_the_cache_after(tmp_path, monkeypatch):
    from gum_utils.planner import trace as planner

    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path))
    todo = planning.tasks(archs=("llama",), optimizers=("adam",), size="tiny")
    keys = [tuple(task.values()) for task in todo]
    assert len(keys) == len(set(keys)) == 2 * 3 + 6 + 6 + 5 - 3  # paper shapes (two precisions), curves less overlaps
    first = planning.build_guide(archs=("llama",), optimizers=("adam",), workers=1, progress=False, size="tiny")
    config = planning.paper_config("llama", "adam", "accumulation", 32, 4, size="tiny")
    row = next(p for p in first["plans"] if (p["strategy"], p["micro_batch_size"]) == ("accumulation", 4))
    assert row["peak_bytes"] == planner.plan(config).peak_bytes and row["error"] is None
    bfloat16 = planning.paper_config("llama", "adam", "standard", first["paper_batch"], size="tiny", dtype="bfloat16")
    bfloat16_peak = planner.plan(bfloat16).peak_bytes
    monkeypatch.setattr(planner, "plan", lambda *a, **k: pytest.fail("traced again"))
    again = planning.build_guide(archs=("llama",), optimizers=("adam",), workers=1, progress=False, size="tiny")
    assert [p["peak_bytes"] for p in again["plans"]] == [p["peak_bytes"] for p in first["plans"]]
    table = guide.paper_batch_table(again)
    assert table.loc[("llama", "adam"), "checkpointing"] < table.loc[("llama", "adam"), "standard"]
    assert list(table.columns) == ["standard", "checkpointing", "accumulation", "standard, bfloat16",
                                   "checkpointing, bfloat16", "accumulation, bfloat16"]
    assert table.loc[("llama", "adam"), "standard, bfloat16"] * GIB == pytest.approx(bfloat16_peak)
    assert len(guide.curves(again)) == 6 + 6 + 5  # the curves stay in float32: no bfloat16 point among them
