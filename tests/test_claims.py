"""Each claim on a synthetic grid whose answer is known by construction."""

import pytest
from test_tables import write_grid

from gum_utils.report import claims, tables
from gum_utils.report.stats import DOES_NOT_HOLD, HOLDS, NOT_DISTINGUISHABLE

VERDICTS = {HOLDS, DOES_NOT_HOLD, NOT_DISTINGUISHABLE, claims.NOT_CHECKABLE}


def _tables(root):
    return tables.runs_table(root), tables.steps_table(root), tables.evals_table(root)


def _seed_noise(seed: int) -> float:
    return 1.0 + 0.05 * seed  # runs differ by seed, so intervals have a width


@pytest.fixture
def halved(tmp_path):
    """Accumulation's loss is exactly half of standard's at every step; checkpointing 1.5x slower."""
    def cell(strategy, seed, **_):
        level = _seed_noise(seed) * (0.5 if strategy == "accumulation" else 1.0)
        return {"level": level, "step_time_s": 0.15 if strategy == "checkpointing" else 0.1}
    return _tables(write_grid(tmp_path, cell, archs=("llama", "vit")))


def _rows(table, claim_start, **equal):
    rows = table[table["claim"].str.startswith(claim_start)]
    for column, value in equal.items():
        rows = rows[rows[column] == value]
    return rows


def test_accumulation_half_the_loss_holds_at_equal_steps(halved):
    table = claims.check_claims(*halved)
    assert set(table["verdict"]) <= VERDICTS and set(table.columns) == set(claims.COLUMNS)
    row = _rows(table, "(a) gradient accumulation lowers training loss", arch="llama",
                budget_view="equal steps").iloc[0]
    assert row["verdict"] == HOLDS and row["estimate"] == pytest.approx(2.0)
    assert "x2" in row["measured"]
    at_least = _rows(table, "(a) gradient accumulation lowers training loss at least 4x", arch="llama",
                     budget_view="equal steps").iloc[0]
    assert at_least["verdict"] == DOES_NOT_HOLD  # 2x is not the paper's 4x
    last_points = claims.accumulation_lowers_loss(halved[1], window=1)
    samples = _rows(last_points, "(a)", arch="vit", budget_view="equal samples").iloc[0]
    # at 16 samples accumulation has made one step: 0.5 * 1.3 against standard's 1.0 after four
    assert samples["estimate"] == pytest.approx(1 / 0.65) and samples["verdict"] == HOLDS


def test_checkpointing_slowdown_and_identical_loss(halved):
    table = claims.checkpointing_effects(halved[0], halved[1])
    slower = _rows(table, "(d) checkpointing slows each step", arch="vit").iloc[0]
    assert slower["verdict"] == HOLDS and slower["estimate"] == pytest.approx(50.0)
    assert _rows(table, "(d) checkpointing slows each step by at most", arch="vit").iloc[0]["verdict"] == HOLDS
    loss = _rows(table, "(d) checkpointing changes the loss", arch="vit").iloc[0]
    assert loss["verdict"] == NOT_DISTINGUISHABLE and "bit-identical" in loss["note"]


def test_at_equal_time_the_slower_checkpointed_run_has_taken_fewer_steps(halved):
    table = claims.checkpointing_effects(halved[0], halved[1], window=1)
    timed = _rows(table, "(d) checkpointing changes the loss", arch="vit", budget_view="equal time").iloc[0]
    # standard ends at 0.4 s after 4 steps; checkpointing (0.15 s a step) is at step 2: loss 1.2x
    assert timed["estimate"] == pytest.approx(20.0) and timed["verdict"] == DOES_NOT_HOLD


def test_identical_losses_are_not_distinguishable(tmp_path):
    runs, steps, evals = _tables(write_grid(tmp_path, lambda seed, **_: {"level": _seed_noise(seed)}))
    table = claims.accumulation_lowers_loss(steps)
    assert (table.query("budget_view == 'equal steps'")["verdict"] == NOT_DISTINGUISHABLE).all()


def test_one_seed_gives_no_verdict_and_says_so(tmp_path):
    def cell(strategy, **_):
        return {"level": 0.5 if strategy == "accumulation" else 1.0}
    runs, steps, evals = _tables(write_grid(tmp_path, cell, optimizers=("adam",), seeds=(0,)))
    row = claims.accumulation_lowers_loss(steps, by=("regime", "arch", "optimizer")).iloc[0]
    assert row["n"] == 1 and row["verdict"] == NOT_DISTINGUISHABLE and "no interval" in row["note"]


def test_memory_equal_holds_and_doubled_does_not(tmp_path):
    def cell(arch, strategy, **_):
        doubled = arch == "llama" and strategy == "accumulation"
        return {"activations": 2000 if doubled else 1000}
    runs = tables.runs_table(write_grid(tmp_path, cell, archs=("llama", "vit")))
    table = claims.accumulation_memory(runs).query("comparison.str.startswith('activation')", engine="python")
    assert table.set_index("arch").loc["vit", "verdict"] == HOLDS
    assert table.set_index("arch").loc["llama", "verdict"] == DOES_NOT_HOLD


@pytest.mark.parametrize("adam_offset, expected", [(+0.5, HOLDS), (-0.5, DOES_NOT_HOLD)])
def test_adam_against_the_best_other_optimizer(tmp_path, adam_offset, expected):
    def cell(optimizer, seed, **_):
        base = {"sgd": 1.0, "adam": 1.0 + adam_offset}.get(optimizer, 3.0)
        return {"level": base * _seed_noise(seed)}
    evals = tables.evals_table(write_grid(tmp_path, cell, archs=("modernbert",), strategies=("standard",)))
    table = claims.adam_not_always_best(evals)
    cell_row = table[table["arch"] == "modernbert"].iloc[0]
    assert cell_row["verdict"] == expected and "adam vs sgd" in cell_row["comparison"]
    assert table[table["arch"] == "all"].iloc[0]["verdict"] == expected


def test_failed_runs_are_left_out_and_named(tmp_path):
    def cell(optimizer, strategy, seed, **_):
        failed = (optimizer, strategy, seed) == ("cgd", "standard", 1)
        return {"status": "diverged", "losses": (1.0, None)} if failed else {}
    runs, steps, evals = _tables(write_grid(tmp_path, cell))
    row = claims.accumulation_lowers_loss(steps).iloc[0]
    assert "cgd/standard/s1 diverged" in row["note"] and row["n"] == 14


def test_utilization_cannot_be_checked_without_a_gpu_but_can_with_one(tmp_path):
    def cpu_cell(arch, **_):
        return {"cpu_percent": 90.0 if arch == "vit" else 40.0}
    runs = tables.runs_table(write_grid(tmp_path / "cpu", cpu_cell, archs=("vit", "llama"), seeds=(0, 1)))
    table = claims.utilization_by_architecture(runs)
    per_arch = table[table["claim"].str.contains("range")]
    assert (per_arch["verdict"] == claims.NOT_CHECKABLE).all() and "device: cpu" in per_arch.iloc[0]["measured"]
    stand_in = table[table["claim"].str.contains("more than")].iloc[0]
    assert stand_in["verdict"] == HOLDS and "stand-in" in stand_in["note"]

    def gpu_cell(arch, seed, **_):
        return {"gpu_percent": (97.0 if arch == "vit" else 10.0) + 0.5 * seed}
    runs = tables.runs_table(write_grid(tmp_path / "gpu", gpu_cell, archs=("vit", "llama"), seeds=(0, 1, 2)))
    per_arch = claims.utilization_by_architecture(runs).query("claim.str.contains('range')", engine="python")
    assert (per_arch["verdict"] == HOLDS).all()
