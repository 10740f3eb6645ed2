"""Activation offloading, the fourth strategy, proves a strategy is one unit (core/strategies.py):
it runs from a config, a notebook's parameters and `--strategy offload`, gives standard's numbers on
a CPU, and the planner refuses it in one line. The study's grid keeps the paper's three."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gum_utils.planner import trace as planner
from gum_utils.planner import record
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.core.strategies import ALL_STRATEGIES, STRATEGIES
from gum_utils.optim import OPTIMIZERS
from gum_utils.study import paths
from gum_utils.study.profiles import cells, profile

ROOT = Path(__file__).resolve().parent.parent


def _run(strategy: str):
    return train(RunConfig(arch="llama", optimizer="adam", strategy=strategy, steps=3, batch_size=4,
                           eval_samples=8, device="cpu"))


def test_offload_saves_the_activations_through_save_on_cpu_and_changes_no_number(monkeypatch):
    monkeypatch.setenv("GUM_PLAN_CACHE", "off")
    standard = _run("standard")
    entered = []
    original = torch.autograd.graph.save_on_cpu

    def spy(*args, **kwargs):
        entered.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", spy)
    offload = _run("offload")
    assert offload.status == "ok" and entered and all(k == {"pin_memory": False} for k in entered)
    assert [r["loss"] for r in offload.records] == [r["loss"] for r in standard.records]  # bit for bit
    assert offload.evals[-1]["val_loss"] == standard.evals[-1]["val_loss"]


def test_the_planner_refuses_offload_in_one_line_and_a_run_records_no_plan():
    config = RunConfig(arch="llama", optimizer="adam", strategy="offload", batch_size=2)
    with pytest.raises(ValueError, match="strategy 'offload': activation offloading .* it is not planned"):
        planner.plan(config)
    assert record.planned_peak_bytes(config) is None  # the run stands; its plan is missing
    done = subprocess.run([sys.executable, "-m", "gum_utils.plan", "--strategy", "offload", "--batch-size", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].endswith("it is not planned")


def test_offload_runs_where_named_and_not_in_the_studys_grid():
    smoke = profile("smoke")
    assert "offload" in ALL_STRATEGIES and "offload" not in STRATEGIES
    assert {cell.strategy for cell in cells(smoke)} == set(STRATEGIES)
    assert {cell.strategy for cell in cells(smoke, ["vit"], ["sgd"], ["offload"])} == {"offload"}


@pytest.mark.parametrize("strategy", [*ALL_STRATEGIES, "cpu_offload2"])
def test_any_registered_name_parses_in_a_run_file_name(strategy):
    for optimizer in OPTIMIZERS:
        assert paths.parse_stem(paths.stem(optimizer, strategy, 3)) == {
            "optimizer": optimizer, "strategy": strategy, "lr": None, "seed": 3, "sweep": False}
