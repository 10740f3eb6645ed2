"""Tables from result files: every run kept, identities parsed, runs aligned at equal budgets.

`write_run` builds a small result file; test_stats/test_plots/test_claims reuse it.
"""

import numpy as np
import pandas as pd
import pytest

from gum_utils import STRATEGIES, STUDY_OPTIMIZERS
from gum_utils.report import tables
from gum_utils.core.results import RunResult


def write_run(root, arch="vit", optimizer="adam", strategy="standard", seed=0, losses=(2.0, 1.5, 1.0),
              batch_size=4, status="ok", regime="shared", profile="cpu", val_loss=None, step_time_s=0.1,
              cpu_percent=50.0, gpu_percent=None, activations=1000, peak=10**6, stem=None, lr=0.001,
              tensor_peak=None):
    """A result file as the grid writes it; losses per step (None = non-finite)."""
    records = [{"step": i + 1, "loss": loss, "samples_seen": batch_size * (i + 1), "tokens_seen": 0,
                "items_seen": batch_size * (i + 1), "step_time_s": step_time_s} for i, loss in enumerate(losses)]
    final = val_loss if val_loss is not None else losses[-1]
    evaluation = {"step": len(losses), "samples_seen": batch_size * len(losses), "val_loss": final,
                  "val_accuracy": 0.5, "val_perplexity": 2.0}
    ok = status == "ok"
    recorded = status in ("ok", "diverged")  # a diverged run keeps its steps up to the non-finite loss
    result = RunResult(
        config={"arch": arch, "optimizer": optimizer, "strategy": strategy, "seed": seed, "steps": len(losses),
                "batch_size": batch_size, "micro_batch_size": batch_size // 4 if strategy == "accumulation" else None,
                "lr": None},
        status=status, error=None if ok else "boom",
        records=records if recorded else [], evals=[evaluation] if ok else [],
        summary={"lr": lr, "final_loss": losses[-1], "val_loss": final, "mean_step_time_s": step_time_s,
                 "peak_memory_bytes": peak, "peak_rss_bytes": peak, "cpu_tensor_peak_bytes": tensor_peak} if ok else {},
        memory={"params": 100, "grads": 100, "optimizer_state": 200, "activations": activations},
        utilization={"device": "gpu" if gpu_percent is not None else "cpu", "mean_cpu_percent": cpu_percent,
                     "mean_gpu_util_percent": gpu_percent, "energy_j": None,
                     "timeline": [{"t_s": 0.1 * i, "cpu_percent": cpu_percent, "rss_bytes": peak,
                                   "gpu_util_percent": gpu_percent} for i in range(3)]})
    stem = stem or f"{optimizer}-{strategy}-s{seed}"
    return result.to_json(root / profile / regime / arch / f"{stem}.json")


def write_grid(root, cell=lambda **key: {}, archs=("vit",), optimizers=STUDY_OPTIMIZERS, strategies=STRATEGIES,
               seeds=(0, 1, 2), steps=4):
    """A whole grid; cell(arch=, optimizer=, strategy=, seed=) returns write_run overrides, and "level"
    (the last loss; earlier steps are higher by 10 % a step)."""
    for arch in archs:
        for optimizer in optimizers:
            for strategy in strategies:
                for seed in seeds:
                    options = {"level": 1.0, **cell(arch=arch, optimizer=optimizer, strategy=strategy, seed=seed)}
                    level = options.pop("level")
                    losses = tuple(level * (1 + 0.1 * (steps - 1 - i)) for i in range(steps))
                    batch = 16 if strategy == "accumulation" else 4
                    options = {"losses": losses, "batch_size": batch, **options}
                    write_run(root, arch, optimizer, strategy, seed, **options)
    return root


@pytest.fixture
def root(tmp_path):
    write_run(tmp_path, strategy="standard", losses=(2.0, 1.6, 1.2, 1.0), batch_size=4)
    write_run(tmp_path, strategy="accumulation", losses=(1.8, 1.0, 0.6, 0.4), batch_size=16)
    write_run(tmp_path, optimizer="cgd", strategy="standard", status="diverged", losses=(2.0, None))
    failed = RunResult(config={"arch": "vit"}, status="error", error="no kernel")  # a config lacking fields
    failed.to_json(tmp_path / "cpu" / "shared" / "vit" / "sgd-checkpointing-s1.json")
    write_run(tmp_path, regime="sweep", stem="adam-lr1e-3-s0", lr=None)
    return tmp_path


def test_runs_table_keeps_every_run_with_its_status(root):
    runs = tables.runs_table(root)
    assert len(runs) == 5 and set(tables.RUN_COLUMNS) <= set(runs.columns)
    failed = runs[runs["status"] == "error"].iloc[0]
    assert (failed["optimizer"], failed["strategy"], failed["seed"]) == ("sgd", "checkpointing", 1)
    assert runs.set_index("status").loc["diverged", "optimizer"] == "cgd"
    standard = runs[(runs["regime"] == "shared") & (runs["strategy"] == "standard") & (runs["status"] == "ok")].iloc[0]
    assert standard["mem_total"] == 1400 and standard["samples_seen_total"] == 16
    assert standard["utilization_percent"] == 50.0 and standard["device"] == "cpu"
    assert standard["path"] == "cpu/shared/vit/adam-standard-s0.ipynb" and standard["profile"] == "cpu"


def test_the_tables_read_each_result_once_and_again_when_it_changes(root, monkeypatch):
    reads = []
    real = RunResult.from_json
    monkeypatch.setattr(RunResult, "from_json", staticmethod(lambda path: reads.append(path) or real(path)))
    tables.runs_table(root), tables.steps_table(root), tables.evals_table(root), tables.utilization_table(root)
    assert len(reads) == 5  # four tables, each file read once
    write_run(root, strategy="standard", losses=(2.0, 1.6, 1.2, 0.25), batch_size=4)  # the grid reruns a cell
    rerun = tables.runs_table(root)
    assert len(reads) == 10 and rerun.query("regime == 'shared' and strategy == 'standard' and status == 'ok'")["final_loss"].item() == 0.25


def test_sweep_learning_rate_comes_from_the_file_name_when_unrecorded(root):
    sweep = tables.runs_table(root).query("regime == 'sweep'").iloc[0]
    assert sweep["lr"] == pytest.approx(1e-3) and sweep["optimizer"] == "adam"


def test_steps_evals_and_utilization_rows_carry_the_run(root):
    steps = tables.steps_table(root)
    assert len(steps) == 4 + 4 + 2 + 3  # the errored run has no records
    times = steps.query("run == 'cpu/shared/vit/adam-standard-s0'")["time_s"]
    assert times.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert set(tables.RUN_ID) <= set(tables.evals_table(root).columns)
    assert len(tables.utilization_table(root)) == 3 * 4  # the errored run sampled nothing
    assert steps["loss"].isna().sum() == 1  # the diverged step: null in JSON, NaN here


def test_at_equal_samples_meets_accumulation_where_standard_ends(root):
    steps = tables.steps_table(root).query("regime == 'shared'")
    aligned = tables.at_equal_budget(steps, "samples_seen")
    adam = aligned[aligned["optimizer"] == "adam"].set_index("strategy")
    assert adam.loc["standard", "budget_value"] == 16  # standard's last point: 4 steps x 4 samples
    assert adam.loc["accumulation", "loss"] == 1.8 and adam.loc["accumulation", "at_step"] == 1
    assert pd.isna(aligned.set_index("status").loc["diverged", "loss"])  # kept, with no number


def test_evals_carry_the_training_time_spent_before_them(root):
    evals = tables.evals_table(root).query("regime == 'shared' and optimizer == 'adam'").set_index("strategy")
    assert evals.loc["standard", "time_s"] == pytest.approx(0.4)  # after 4 steps of 0.1 s
    at_time = tables.at_equal_budget(tables.evals_table(root).query("regime == 'shared'"), "time", metric="val_loss")
    assert at_time.set_index("strategy").loc["accumulation", "val_loss"] == pytest.approx(0.4)


def test_at_equal_steps_window_and_explicit_value(root):
    steps = tables.steps_table(root).query("regime == 'shared' and optimizer == 'adam'")
    by_step = tables.at_equal_budget(steps, "step", window=2).set_index("strategy")
    assert by_step.loc["accumulation", "loss"] == pytest.approx(0.5)
    fixed = tables.at_equal_budget(steps, "step", value=2).set_index("strategy")
    assert fixed.loc["standard", "loss"] == 1.6
    timed = tables.at_equal_budget(steps, "time", value=0.25).set_index("strategy")
    assert timed.loc["standard", "at_step"] == 2


def test_write_csv(root, tmp_path_factory):
    out = tmp_path_factory.mktemp("csv")
    written = tables.write_csv(root, out)
    assert sorted(written) == ["evals", "runs", "steps"]
    assert len(pd.read_csv(written["runs"])) == 5


def test_empty_root_gives_empty_tables(tmp_path):
    assert tables.runs_table(tmp_path).empty and tables.steps_table(tmp_path).empty


def test_cell_summary_gives_mean_and_interval_over_the_seeds(tmp_path):
    for seed, loss in enumerate((1.0, 2.0, 3.0)):
        write_run(tmp_path, seed=seed, val_loss=loss, losses=(3.0, loss), step_time_s=0.01 * (seed + 1))
    write_run(tmp_path, seed=3, status="diverged", losses=(3.0, None))
    summary = tables.cell_summary(tables.runs_table(tmp_path)).iloc[0]
    assert (summary["runs"], summary["ok"]) == (4, 3)
    half = 4.302653 * 1.0 / 3**0.5  # t(0.975, 2) * sd / sqrt(n)
    assert summary["val_loss"] == 2.0 and summary["val_loss_high"] == pytest.approx(2.0 + half, rel=1e-5)
    assert summary["step_ms"] == pytest.approx(20.0)
    shown = tables.with_intervals(tables.cell_summary(tables.runs_table(tmp_path)), ["val_loss"]).iloc[0]
    assert shown["val_loss"] == f"2 [{2 - half:.3g}, {2 + half:.3g}]" and "val_loss_low" not in shown


def test_interval_mean_is_the_integral_over_the_common_budget_and_never_extrapolates():
    import synthetic_tables as synthetic

    runs = synthetic.run_grid(optimizers=("adam",), strategies=("standard", "accumulation"), seeds=(0,))
    steps = synthetic.steps_frame(runs, steps=10, curve=lambda s: 100.0 - np.asarray(s, dtype=float))
    mean = tables.over_budget_interval(steps, "samples_seen", fraction=0.5).set_index("strategy")
    # standard trained on at most 36 samples before its last step: the budget; a straight line's mean
    # over samples 18-36 is its value at 27, whatever the spacing of the records
    assert (mean["budget_value"] == 36).all() and mean["loss"].tolist() == pytest.approx([73.0, 73.0])
    point = tables.at_budget_point(steps, "samples_seen", value=30).set_index("strategy")
    assert point.loc["accumulation", "loss"] == pytest.approx(70.0)  # between its records at 16 and 32 samples
    assert point.loc["accumulation", "at_step"] == pytest.approx(1 + 30 / 16)
    beyond = tables.at_budget_point(steps, "samples_seen", value=100).set_index("strategy")
    assert np.isnan(beyond.loc["standard", "loss"]) and beyond.loc["accumulation", "loss"] == pytest.approx(0.0)


def test_cgd_behaviour_summarises_its_step_records():
    records = [dict(beta=None, restarted=True, restart_reason="first step", line_search_stalled=False, n_evals=1),
               dict(beta=0.5, restarted=False, restart_reason=None, line_search_stalled=False, n_evals=1),
               dict(beta=3.0, restarted=False, restart_reason=None, line_search_stalled=False, n_evals=1),
               dict(beta=None, restarted=True, restart_reason="negative beta", line_search_stalled=True, n_evals=4),
               dict(beta=1.5, restarted=False, restart_reason=None, line_search_stalled=False, n_evals=2),
               dict(beta=0.9, restarted=False, restart_reason=None, line_search_stalled=True, n_evals=3)]
    steps = pd.DataFrame(records).assign(regime="shared", arch="vit", optimizer="cgd")
    row = tables.cgd_behaviour(steps).iloc[0]
    assert (row["steps"], row["n_beta"], row["beta_median"], row["beta_max"]) == (6, 4, 1.2, 3.0)
    assert row["beta_share_above_1"] == 0.5 and row["n_stalled"] == 2 and row["mean_evals"] == 2
    assert row["restarts"] == "first step 1, negative beta 1"
    assert tables.cgd_behaviour(steps.drop(columns=["restarted"])).empty  # runs of other optimizers record none
