"""One run over two processes (gloo, CPU) trains exactly as one process on the union of the data.

Every two-rank scenario runs in one torchrun launch (`distributed_worker.py`, a module fixture);
the one-process references run here. One more launch goes through `train()` end to end.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distributed_worker import config
from gum_utils.report import tables
from gum_utils.core.batches import BatchStream, count_items, split_batch
from gum_utils.archs import architecture
from gum_utils.core.results import RunResult
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train, train_model

ROOT = Path(__file__).resolve().parent.parent
EXACT = 1e-6  # max parameter difference after an SGD step: float rounding only
# Adam's first step is lr g / (|g| + eps), which turns the rounding of near-zero gradient entries
# into ~1e-6; CGD's line search interpolates between close float32 losses over two steps, so the
# order of FSDP's reduce-scatter sums shows (4e-5 on one machine, 1.4e-4 on this project's, the same
# before and after the layering). The ranks still agree bit for bit; these bound the distance to one process.
TOLERANCE = {"sgd": EXACT, "adam": 1e-5, "cgd": 5e-4}
# The same for the losses, relative: FSDP's sums move CGD's second loss by about 1.2e-6.
LOSS_TOLERANCE = {"sgd": 1e-6, "adam": 1e-6, "cgd": 1e-5}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ranks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(ROOT / "tests" / "distributed_worker.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {path.stem: torch.load(path, weights_only=False) for path in out.glob("*.pt")}


@pytest.fixture(scope="module")
def one_process():
    """The one-process references: (result, model) per optimizer, same data and seed."""
    return {name: train_model(config(name, world_size=1)) for name in ("ddp", "ddp-adam", "ddp-cgd")}


def max_difference(model, state) -> float:
    return max((value - state[key]).abs().max().item() for key, value in model.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("name, reference", [("ddp", "ddp"), ("fsdp", "ddp"), ("ddp-adam", "ddp-adam"),
                                             ("fsdp-adam", "ddp-adam"), ("ddp-cgd", "ddp-cgd"),
                                             ("fsdp-cgd", "ddp-cgd")])
def test_two_ranks_with_accumulation_match_one_process(two_ranks, one_process, name, reference):
    ranks, (single, model) = two_ranks[name], one_process[reference]
    assert ranks["result"]["status"] == "ok", ranks["result"]["error"]
    assert max_difference(model, ranks["state"]) < TOLERANCE[single.config["optimizer"]]
    losses = [record["loss"] for record in single.records]
    assert ranks["rank_losses"][0] == ranks["rank_losses"][1]  # every rank saw the same global loss
    assert ranks["rank_losses"][0] == pytest.approx(losses, rel=LOSS_TOLERANCE[single.config["optimizer"]])
    assert ranks["result"]["summary"]["val_loss"] == pytest.approx(single.summary["val_loss"], rel=1e-5)
    assert ranks["result"]["records"][-1]["items_seen"] == single.records[-1]["items_seen"]


@pytest.mark.slow
def test_a_mean_of_micro_batch_means_does_not_match(two_ranks, one_process):
    batch = next(BatchStream(architecture("llama"), "train", architecture("llama").shape("tiny"), 8, 0))
    assert len({count_items(micro) for micro in split_batch(batch, 2)}) > 1  # else both losses agree
    assert max_difference(one_process["ddp"][1], two_ranks["naive"]["state"]) > 100 * EXACT


@pytest.mark.slow
def test_fsdp_holds_less_model_state_per_rank_than_ddp(two_ranks):
    def state_bytes(name):
        return [sum(memory[part] for part in ("params", "grads", "optimizer_state"))
                for memory in two_ranks[name]["result"]["summary"]["rank_memory"]]

    ddp, fsdp = state_bytes("ddp-adam"), state_bytes("fsdp-adam")
    assert len(ddp) == len(fsdp) == 2
    assert max(fsdp) < 0.6 * min(ddp)  # about half: each rank holds its shard


@pytest.mark.slow
def test_train_launches_torchrun_and_reads_back_the_result(tmp_path):
    result, model = train_model(RunConfig(arch="vit", optimizer="adam", steps=2, batch_size=8, eval_samples=16,
                                          device="cpu", sample_interval_s=0.05, world_size=2, parallel="ddp"))
    assert result.status == "ok", result.error
    summary = result.summary
    assert summary["world_size"] == 2 and summary["parallel"] == "ddp" and result.config["world_size"] == 2
    assert len(summary["rank_peak_memory_bytes"]) == 2 and min(summary["rank_peak_memory_bytes"]) > 0
    assert summary["peak_memory_bytes"] == max(summary["rank_peak_memory_bytes"])
    assert [memory["params"] for memory in summary["rank_memory"]] == [result.memory["params"]] * 2
    assert result.records[-1]["samples_seen"] == 16 and model is not None
    result.to_json(tmp_path / "cpu" / "shared" / "vit" / "adam-standard-s0.json")
    row = tables.runs_table(tmp_path).iloc[0]
    assert row["world_size"] == 2 and row["parallel"] == "ddp"


@pytest.mark.slow
def test_a_failing_rank_ends_the_launch_with_its_error():
    # valid up front, but SGD's differentiable step updates leaf tensors in place: each rank raises
    result, model = train_model(RunConfig(arch="vit", batch_size=8, device="cpu", world_size=2, optimizer="sgd",
                                          optimizer_options={"differentiable": True}))
    assert result.status == "error" and model is None
    assert result.error.startswith("rank ") and "in-place operation" in result.error


def test_a_failed_launch_is_an_error_result(monkeypatch):
    from gum_utils.core import run as launch

    monkeypatch.setattr(launch, "command", lambda world_size, folder: [sys.executable, "-c", "raise SystemExit(3)"])
    result, model = train_model(RunConfig(arch="vit", batch_size=8, world_size=2))
    assert result.status == "error" and "status 3" in result.error and model is None
    assert isinstance(result, RunResult) and result.summary["world_size"] == 2


@pytest.mark.parametrize("overrides, message", [
    (dict(world_size=0), "world_size must be an integer >= 1"),
    (dict(world_size=1.5), "world_size must be an integer >= 1"),
    (dict(world_size=2, parallel="zero3"), "unknown parallel mode 'zero3'.*valid choices: ddp, fsdp"),
    (dict(parallel="fsdp"), "parallel='fsdp' needs world_size > 1"),
    (dict(world_size=3, batch_size=8), "batch_size=8 must be divisible by world_size=3"),
    (dict(world_size=2, batch_size=8, strategy="accumulation", micro_batch_size=4),
     r"micro_batch_size < the per-rank batch \(got 4 and the per-rank batch 4"),
    (dict(world_size=2, batch_size=8, strategy="accumulation", micro_batch_size=3), "must divide the per-rank batch"),
])
def test_bad_process_configuration_raises_naming_the_valid_choices(overrides, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**dict(dict(arch="llama"), **overrides))


def test_one_process_records_its_world_and_no_parallel_mode():
    result = train(RunConfig(arch="vit", optimizer="sgd", steps=1, batch_size=4, eval_samples=8, device="cpu"))
    assert result.summary["world_size"] == 1 and result.summary["parallel"] is None
    assert result.summary["rank_memory"] == [result.memory]
