import json

import pytest
import torch

from gum_utils import ARCHITECTURES, OPTIMIZERS, STRATEGIES
from gum_utils.core import trainer
from gum_utils.core.results import RunResult
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train


def cell(arch, optimizer="adam", strategy="standard", **overrides):
    micro = {"micro_batch_size": 4} if strategy == "accumulation" else {}
    values = dict(arch=arch, optimizer=optimizer, strategy=strategy, steps=4, batch_size=8,
                  eval_samples=16, sample_interval_s=0.05, **micro)
    values.update(overrides)
    return RunConfig(**values)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_cell_trains_to_a_finite_decreasing_loss_on_a_fixed_batch(arch, optimizer, strategy):
    result = train(cell(arch, optimizer, strategy, steps=6, fixed_batch=True))
    assert result.status == "ok", result.error
    losses = [r["loss"] for r in result.records]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0], losses


def test_records_summary_and_breakdown_are_filled():
    result = train(cell("llama", "adam", "accumulation", steps=5, batch_size=8, micro_batch_size=4, eval_every=2))
    record = result.records[-1]
    assert {"step", "loss", "samples_seen", "tokens_seen", "items_seen", "step_time_s"} <= set(record)
    assert record["step"] == 5 and record["samples_seen"] == 40 and record["tokens_seen"] > record["items_seen"]
    assert [e["step"] for e in result.evals] == [2, 4, 5]
    summary = result.summary
    assert summary["val_loss"] > 0 and summary["val_perplexity"] > 1 and 0 <= summary["val_accuracy"] <= 1
    assert summary["mean_step_time_s"] > 0 and summary["peak_memory_bytes"] > 0 and summary["tokens_per_s"] > 0
    # where the run's time went besides its steps (benchmarks/grid_time.py reads these)
    parts = [summary[key] for key in ("train_time_s", "eval_s", "setup_s")]
    assert all(part > 0 for part in parts) and sum(parts) <= summary["total_time_s"]
    memory = result.memory
    assert memory["optimizer_state"] >= 2 * memory["params"] and memory["grads"] == memory["params"]
    assert memory["activations"] > 0
    assert result.utilization["timeline"] and result.environment["torch"] == torch.__version__


def test_checkpointing_run_reports_fewer_activation_bytes():
    standard = train(cell("llama", "sgd", "standard", steps=1))
    checkpointed = train(cell("llama", "sgd", "checkpointing", steps=1))
    assert checkpointed.memory["activations"] < standard.memory["activations"]
    assert checkpointed.memory["params"] == standard.memory["params"]


def test_accumulation_activations_are_those_of_one_micro_batch():
    small = train(cell("vit", "sgd", "standard", steps=1, batch_size=4))
    accumulated = train(cell("vit", "sgd", "accumulation", steps=1, batch_size=16, micro_batch_size=4))
    assert accumulated.memory["activations"] == small.memory["activations"]
    assert accumulated.records[0]["samples_seen"] == 16


def test_same_seed_gives_bit_identical_loss_records():
    first = train(cell("modernbert", "adam", "accumulation", steps=4))
    second = train(cell("modernbert", "adam", "accumulation", steps=4))
    third = train(cell("modernbert", "adam", "accumulation", steps=4, seed=1))
    assert [r["loss"] for r in first.records] == [r["loss"] for r in second.records]
    assert first.summary["val_loss"] == second.summary["val_loss"]
    assert [r["loss"] for r in first.records] != [r["loss"] for r in third.records]


def test_a_non_finite_loss_is_recorded_as_diverged_without_raising():
    result = train(cell("llama", "sgd", steps=30, lr=1e6))
    assert result.status == "diverged" and "non-finite" in result.error
    assert result.records[-1]["step"] < 30
    assert result.summary["steps_completed"] == len(result.records)


def test_out_of_memory_is_a_status(monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(trainer, "forward_backward", out_of_memory)
    result = train(cell("vit", steps=2))
    assert result.status == "oom" and "out of memory" in result.error


def test_any_other_failure_is_an_error_status(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(trainer, "forward_backward", broken)
    result = train(cell("vit", steps=2))
    assert result.status == "error" and "shape mismatch" in result.error


@pytest.mark.parametrize("overrides, message", [
    (dict(arch="gpt"), "valid choices: vit, modernbert, llama, nanovlm"),
    (dict(optimizer="lion"), "valid choices: sgd, adam, adagrad, adadelta, cgd, adamw"),
    (dict(strategy="cpu_offload"), "valid choices: standard, checkpointing, accumulation, offload"),
    (dict(size="large"), "valid choices: tiny, paper"),
    (dict(device="tpu"), "valid choices: auto, cpu, cuda"),
    (dict(lr=0), "lr must be a number > 0"),
    (dict(lr=-1e-3), "lr must be a number > 0"),
    (dict(steps=0), "steps must be an integer >= 1"),
    (dict(batch_size=0), "batch_size must be"),
    (dict(strategy="accumulation", batch_size=8, micro_batch_size=3), "must divide batch_size"),
    (dict(strategy="accumulation", batch_size=8, micro_batch_size=8), "micro_batch_size < batch_size"),
    (dict(strategy="accumulation", batch_size=8, micro_batch_size=None), "needs micro_batch_size"),
    (dict(strategy="standard", batch_size=8, micro_batch_size=4), "for strategy 'accumulation' only"),
    (dict(sample_interval_s=float("inf")), "sample_interval_s must be a finite number > 0"),  # was: null
])
def test_bad_configuration_raises_at_once_naming_the_valid_choices(overrides, message):
    values = dict(arch="vit")
    values.update(overrides)
    with pytest.raises(ValueError, match=message):
        RunConfig(**values)


def test_a_run_records_the_held_out_rows_it_evaluated_not_only_those_asked_for(monkeypatch):
    monkeypatch.setenv("GUM_PLAN_CACHE", "off")
    few, many = train(cell("vit", steps=1, eval_samples=8)), train(cell("vit", steps=1, eval_samples=1_000_000))
    assert few.summary["val_samples"] == few.summary["test_samples"] == 8
    evaluated = many.summary["val_samples"]
    assert 8 < evaluated < 1_000_000 and many.config["eval_samples"] == 1_000_000  # the split holds fewer
    assert many.summary["test_samples"] > 0


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="RunConfig has no field 'lrr' \\(did you mean 'lr'\\?\\); valid fields: arch"):
        RunConfig.from_dict({"arch": "vit", "lrr": 0.1})


def test_result_round_trips_through_an_atomic_json_file(tmp_path):
    result = train(cell("nanovlm", "cgd", steps=2))
    path = result.to_json(tmp_path / "sub" / "run.json")
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]  # no temporary left behind
    again = RunResult.from_json(path)
    assert again == RunResult(**json.loads(path.read_text()))
    assert again.records == result.records and again.memory == result.memory and again.status == "ok"


def test_non_finite_numbers_are_written_as_null(tmp_path):
    result = RunResult(config={}, status="diverged", records=[{"step": 1, "loss": float("nan")}])
    text = result.to_json(tmp_path / "r.json").read_text()
    assert "NaN" not in text and RunResult.from_json(tmp_path / "r.json").records[0]["loss"] is None


def test_a_step_that_fails_keeps_the_records_of_the_steps_before_it(monkeypatch):
    from gum_utils.core import trainer as train_module

    calls, original = [], train_module.Run.step

    def fails_at_step_3(self, micros, items):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom at step 3")
        return original(self, micros, items)

    monkeypatch.setattr(train_module.Run, "step", fails_at_step_3)
    result = train(RunConfig(arch="llama", steps=5, batch_size=4))
    assert result.status == "error" and "boom at step 3" in result.error
    assert [r["step"] for r in result.records] == [1, 2] and result.summary["final_loss"] == result.records[-1]["loss"]
    assert result.summary["device_data_bytes"] == 0  # a CPU run keeps its data where it is


@pytest.mark.parametrize("overrides, message", [
    (dict(steps=True), "steps must be an integer, got True"),
    (dict(lr=True), "lr must be a number or None, got True"),
    (dict(seed=True), "seed must be an integer, got True"),
    (dict(batch_size=8.0), "batch_size must be an integer, got 8.0"),
    (dict(sample_interval_s="fast"), "sample_interval_s must be a number, got 'fast'"),
    (dict(optimizer="sgd", optimizer_options={"bogus": 1}),
     "unknown sgd option 'bogus'; valid choices: momentum, dampening, weight_decay, nesterov"),
    (dict(optimizer="adam", optimizer_options={"beta": (0.9, 0.99)}), "unknown adam option 'beta' \\(did you mean 'betas'"),
    (dict(optimizer="cgd", optimizer_options={"line_search": "bogus"}),
     "not valid for cgd: unknown line search 'bogus'; valid choices: None, armijo, strong_wolfe"),
    (dict(optimizer="cgd", optimizer_options={"c1": 0.5, "c2": 0.1}), "not valid for cgd: need 0 < c1 < c2 < 1"),
    (dict(optimizer="sgd", optimizer_options={"momentum": -1}), "not valid for sgd: Invalid momentum value: -1"),
    (dict(optimizer="adam", optimizer_options={"lr": 0.1}), "the learning rate is the field lr"),
    (dict(optimizer="adam", optimizer_options={"foreach": "yes"}), "adam option foreach takes true, false or null, got 'yes'"),
    (dict(optimizer="sgd", optimizer_options={"nesterov": 1}), "sgd option nesterov takes true or false, got 1"),
    (dict(optimizer="adam", device="cpu", optimizer_options={"capturable": True}),
     "not valid for adam: If capturable=True, params and state_steps must be on supported devices"),
    (dict(seed=2**32), "seed must be an integer from 0 to 4294967295, got 4294967296"),
    (dict(size="paper", pretrained="/no/such/checkpoint"), "pretrained '/no/such/checkpoint' is not a local directory"),
])
def test_type_slips_optimizer_options_and_missing_paths_fail_before_anything_runs(overrides, message):
    with pytest.raises(ValueError, match=message):
        RunConfig(**dict(dict(arch="vit"), **overrides))


def test_good_optimizer_options_pass():
    assert RunConfig(arch="vit", optimizer="cgd", optimizer_options={"line_search": "strong_wolfe"}).optimizer == "cgd"
    assert RunConfig(arch="vit", optimizer="sgd", optimizer_options={"momentum": 0.9, "nesterov": True}).lr is None
    assert RunConfig(arch="vit", optimizer="adam", optimizer_options={"foreach": None, "amsgrad": True}).lr is None


def test_a_misspelt_field_lists_the_valid_ones():
    with pytest.raises(TypeError, match="RunConfig has no field 'stpes' \\(did you mean 'steps'\\?\\); "
                                        "valid fields: arch, size, optimizer, strategy, seed, steps"):
        RunConfig(arch="vit", stpes=5)


def test_an_interactive_run_that_ends_in_error_fails_with_the_whole_message_but_a_grid_cell_does_not(
        tmp_path, monkeypatch):
    from gum_utils.core import run as train_module
    from gum_utils.study import notebook

    error = "RuntimeError: " + "a long reason " * 20
    monkeypatch.setattr(train_module, "train_model",
                        lambda config: (RunResult(config={"arch": "vit"}, status="error", error=error), None))
    path = tmp_path / "r.json"
    with pytest.raises(notebook.RunFailed) as raised:
        notebook.run(RunConfig(arch="vit"), path)
    assert str(raised.value).endswith(error) and str(path) in str(raised.value)
    assert RunResult.from_json(path).status == "error"  # the result is written first
    result, _ = notebook.run(RunConfig(arch="vit"), tmp_path / "g.json", cell_key="k")  # under the grid
    assert result.status == "error" and RunResult.from_json(tmp_path / "g.json").cell_key == "k"


def test_a_result_folder_that_refuses_writes_is_said_before_training(tmp_path, monkeypatch):
    from gum_utils.core import run as train_module
    from gum_utils.study import notebook

    monkeypatch.setattr(train_module, "train_model", lambda config: pytest.fail("trained before the check"))
    (tmp_path / "a-file").write_text("")  # a folder under a file: unwritable even for root
    with pytest.raises(notebook.ResultNotWritable, match=r"a-file/interactive: the run's result cannot be written there \(Not a "
                                                          r"directory\); nothing was trained"):
        notebook.run(RunConfig(arch="vit"), tmp_path / "a-file" / "interactive" / "r.json")


def test_interactive_results_go_under_the_checkout_and_do_not_overwrite_each_other(tmp_path, monkeypatch):
    from pathlib import Path

    from gum_utils.study import notebook

    monkeypatch.chdir(tmp_path)  # run from anywhere: the repository root, notebooks/, elsewhere
    namespace = {"profile": "smoke", "optimizer": "sgd", "seed": 2}
    first = notebook.read_parameters("vit", namespace)[1]
    second = notebook.read_parameters("vit", namespace)[1]
    root = Path(__file__).resolve().parent.parent
    assert first.is_absolute() and first.parent == root / "results" / "interactive"
    assert first.name.startswith("vit-sgd-standard-s2-") and first.suffix == ".json"
    assert first != second


def test_a_cgd_run_records_each_steps_beta_and_restart_and_others_record_none():
    cgd = train(RunConfig("vit", optimizer="cgd", steps=4, batch_size=4, device="cpu"))
    first, later = cgd.records[0], cgd.records[1:]
    assert first["restarted"] and first["restart_reason"] == "first step" and first["beta"] is None
    assert all(("beta" in r and "restarted" in r and r["n_evals"] == 1) for r in later)
    assert all((r["beta"] is None) == r["restarted"] for r in later)  # a beta exactly where it did not restart
    sgd = train(RunConfig("vit", optimizer="sgd", steps=2, batch_size=4, device="cpu"))
    assert not any("beta" in r for r in sgd.records)


def test_the_final_evaluation_also_scores_the_test_half():
    result = train(RunConfig("llama", steps=2, batch_size=4, eval_every=1, eval_samples=8, device="cpu"))
    assert [("test_loss" in e) for e in result.evals] == [False, True]
    final = result.evals[-1]
    assert final["test_loss"] > 0 and final["test_loss"] != final["val_loss"]
    assert result.summary["test_loss"] == final["test_loss"]


def test_a_run_records_the_planned_and_the_measured_tensor_peak_once_per_configuration(tmp_path, monkeypatch):
    """The study records them (a notebook's run, as the grid's cells do); the training core calls no planner."""
    from gum_utils.planner import record, reference
    from gum_utils.planner import trace as planner
    from gum_utils.study import notebook

    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path))
    config = cell("llama", "sgd", "standard", steps=1, batch_size=2, seed=3)
    assert "planned_peak_bytes" not in train(config).summary
    first = notebook.run(config, tmp_path / "runs" / "first.json", cell_key="k")[0]
    planned, measured = first.summary["planned_peak_bytes"], first.summary["cpu_tensor_peak_bytes"]
    assert planned == planner.plan(config).peak_bytes > 0
    assert measured == reference.measured_peak(cell("llama", "sgd", "standard", batch_size=2))  # the key's seed
    assert abs(planned - measured) <= 0.01 * measured  # two instruments, one step
    assert first.summary["plan_s"] > 0 and first.summary["tensor_peak_s"] > 0
    assert RunResult.from_json(tmp_path / "runs" / "first.json").summary["planned_peak_bytes"] == planned
    assert len(list(tmp_path.glob("*.json"))) == 2
    monkeypatch.setattr(planner, "plan", lambda *a, **k: pytest.fail("traced again"))
    monkeypatch.setattr(reference, "measured_peak", lambda *a, **k: pytest.fail("measured again"))
    again = notebook.run(cell("llama", "sgd", "standard", steps=2, batch_size=2, seed=1),  # the same memory
                         tmp_path / "runs" / "again.json", cell_key="k")[0]
    assert (again.summary["planned_peak_bytes"], again.summary["cpu_tensor_peak_bytes"]) == (planned, measured)
    assert record.planned_peak_bytes(cell("llama", "sgd", "standard", batch_size=2, world_size=2)) is None
    assert record.cpu_tensor_peak_bytes(cell("llama", "sgd", "standard", batch_size=2, device="cuda")) is None
    monkeypatch.setenv("GUM_PLAN_CACHE", "off")
    assert record.planned_peak_bytes(config) is None and record.cpu_tensor_peak_bytes(config) is None


def test_gpu_check_holds_no_trained_model_while_it_measures_the_reference_step(tmp_path, monkeypatch):
    """make paper-smoke's Llama was killed at 23.6 GB resident on a 24 GB machine: the trained model
    (weights and gradients) was still held while the reference measurement built and stepped a second."""
    import gc

    from transformers import PreTrainedModel

    from gum_utils.planner import record
    from gum_utils.study import gpu_check

    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path))
    alive = []

    def measure(config):
        gc.collect()
        alive.append(sum(issubclass(type(thing), PreTrainedModel) for thing in gc.get_objects()))  # type(): no proxy warns
        return 1

    monkeypatch.setattr(record, "cpu_tensor_peak_bytes", measure)
    rows = gpu_check.run_check([cell("llama", "sgd", "standard", steps=1, batch_size=2, device="cpu")],
                               echo=lambda *a, **k: None)
    assert rows[0]["status"] == "ok" and rows[0]["planned_peak_bytes"] > 0 and alive == [0]
