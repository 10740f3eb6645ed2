"""Learning-rate tuning: the sweep's rates, the choice from its results, the tuned grid."""

import math

import nbformat
import pytest

from gum_utils.study.dispatch import run_grid

from gum_utils.study.outcomes import is_done, reuse_twins

from gum_utils.study.tasks import stage_tasks, tasks_for
from gum_utils.study import tuning
from gum_utils.report import tables
from gum_utils.study.tuning import SWEEP_FACTORS, swept
from gum_utils.core.config import default_lr
from gum_utils.study.profiles import Cell, cells, profile, sweep_cells
from gum_utils.core.results import RunResult
from test_tables import write_run


def test_the_sweep_spans_two_orders_of_magnitude_log_spaced():
    rates = swept("vit", "adam")
    assert len(rates) >= 5 and rates[len(rates) // 2] == default_lr("vit", "adam")
    assert max(rates) / min(rates) == pytest.approx(100)
    ratios = [b / a for a, b in zip(rates, rates[1:])]
    assert max(ratios) / min(ratios) < 1.01  # equal steps on the log scale
    assert SWEEP_FACTORS[0] == 0.1 and SWEEP_FACTORS[-1] == 10


def test_sweep_cells_are_standard_runs_at_each_rate_named_by_it():
    prof = profile("cpu")
    sweep = sweep_cells(prof, ["llama"], ["sgd"])
    assert [c.lr for c in sweep] == swept("llama", "sgd", prof.sweep_factors)
    assert {c.strategy for c in sweep} == {"standard"} and sweep[0].stem == "sgd-lr0.01-s1000"
    assert not set(prof.sweep_seeds) & set(prof.seeds)  # a tuned run never repeats the sweep run that chose it
    parameters = prof.sweep_parameters("llama", "sgd", 0, 0.01)
    assert parameters["steps"] == prof.sweep_steps < prof.steps and parameters["lr"] == 0.01


def sweep_of(root, optimizer="adam", results=()):
    """results: (lr, seed, val_loss or a failed status)."""
    for lr, seed, outcome in results:
        status = outcome if isinstance(outcome, str) else "ok"
        write_run(root, optimizer=optimizer, seed=seed, regime="sweep", stem=f"{optimizer}-lr{lr:g}-s{seed}", lr=lr,
                  status=status, val_loss=None if status != "ok" else outcome,
                  losses=(2.0, 1.0) if status == "ok" else (2.0, None))
    return tuning.choose(tables.runs_table(root / "cpu"))


def test_the_lowest_validation_loss_wins_and_a_rate_that_failed_once_is_out(tmp_path):
    choice = sweep_of(tmp_path, results=[(1e-4, 0, 2.0), (1e-3, 0, 1.5), (1e-2, 0, 0.9), (1e-2, 1, "diverged"),
                                         (1e-1, 0, 3.0), (1e-2 / 3, 0, 1.2), (1e-2 / 3, 1, 1.3)]).iloc[0]
    assert choice["chosen_lr"] == pytest.approx(1e-2 / 3) and choice["val_loss"] == pytest.approx(1.25)
    assert choice["factor"] == pytest.approx(choice["chosen_lr"] / default_lr("vit", "adam"))
    assert not choice["at_edge"] and choice["ok_rates"] == 4


def test_a_choice_at_the_edge_of_the_range_says_so(tmp_path):
    choice = sweep_of(tmp_path, results=[(1e-4, 0, 2.0), (1e-3, 0, 1.5), (1e-2, 0, 0.9)]).iloc[0]
    assert choice["chosen_lr"] == 1e-2 and choice["at_edge"] and "highest" in choice["note"]


def test_a_sweep_with_no_finished_rate_keeps_the_default(tmp_path):
    choice = sweep_of(tmp_path, results=[(1e-4, 0, "diverged"), (1e-3, 0, "error")]).iloc[0]
    assert choice["chosen_lr"] == default_lr("vit", "adam") and math.isnan(choice["val_loss"])
    assert "default is kept" in choice["note"]


def test_the_tuned_grid_refuses_to_run_before_its_sweep(tmp_path):
    with pytest.raises(tuning.TuningError, match="run the sweep stage first"):
        stage_tasks(profile("smoke"), "tuned", tmp_path, 1, ["vit"], ["sgd"])


@pytest.mark.slow
def test_tuning_on_smoke_picks_the_one_rate_that_does_not_diverge(tmp_path):
    """A sweep whose answer is known: every rate but 0.02 blows SGD up within the smoke run's steps."""
    prof = profile("smoke")
    rates = (0.02, 1e8, 1e12, 1e16, 1e30)
    sweep = tasks_for(prof, tmp_path, [Cell("vit", "sgd", "standard", 0, lr) for lr in rates], 1, "sweep")
    counts = run_grid(sweep, jobs=1, show_progress=False)
    assert counts == {"skipped": 0, "ok": 1, "diverged": 4}
    choice = tuning.choose(tables.runs_table(tmp_path / "smoke")).iloc[0]
    assert choice["chosen_lr"] == 0.02 and choice["at_edge"]  # 0.02 is also the lowest rate swept
    tuned = stage_tasks(prof, "tuned", tmp_path, 1, ["vit"], ["sgd"], ["standard"])
    assert [t.parameters["lr"] for t in tuned] == [0.02]
    assert run_grid(tuned, jobs=1, show_progress=False) == {"skipped": 0, "ok": 1}
    result = RunResult.from_json(tmp_path / "smoke" / "tuned" / "vit" / "sgd-standard-s0.json")
    assert result.config["lr"] == 0.02 and result.summary["lr"] == 0.02


def test_a_tuned_cell_that_chose_the_default_reuses_its_shared_twin(tmp_path):
    prof = profile("smoke")
    default = default_lr("vit", "sgd")
    for lr, loss in ((default / 10, 2.0), (default, 1.0), (default * 10, 3.0)):
        write_run(tmp_path, optimizer="sgd", regime="sweep", profile="smoke", stem=f"sgd-lr{lr:g}-s0", lr=lr,
                  val_loss=loss)
    selected = cells(prof, ["vit"], ["sgd"], ["standard"])
    shared = tasks_for(prof, tmp_path, selected, 1, "shared")
    twin = shared[0]
    RunResult(config=twin.parameters, cell_key=twin.key, records=[{"loss": 1.0}],
              summary={"lr": default}).to_json(twin.result_path)
    nbformat.write(nbformat.v4.new_notebook(), twin.output)  # a notebook that parses: the twin is done
    tuned = stage_tasks(prof, "tuned", tmp_path, 1, ["vit"], ["sgd"], ["standard"])
    assert "lr" not in tuned[0].parameters and tuned[0].key == twin.key
    assert reuse_twins(tuned, shared) == 1
    assert is_done(tuned[0]) and tuned[0].result_path.read_text() == twin.result_path.read_text()
    assert reuse_twins(tuned, shared) == 0  # already there: nothing copied twice
