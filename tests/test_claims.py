"""Each claim on a synthetic grid whose answer is known by construction."""

import numpy as np
import pytest
import synthetic_tables as synthetic
from scipy import stats as st
from test_tables import write_grid

from gum_utils import STUDY_OPTIMIZERS as OPTIMIZERS
from gum_utils.report import claims, tables
from gum_utils.report.stats import DOES_NOT_HOLD, HOLDS, IDENTICAL, NOT_DISTINGUISHABLE

VERDICTS = {HOLDS, DOES_NOT_HOLD, NOT_DISTINGUISHABLE, IDENTICAL, claims.NOT_CHECKABLE, claims.NO_TENSOR_PEAK}


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
    samples = _rows(table, "(a)", arch="vit", budget_view="equal samples").iloc[0]
    # both have trained on 12 samples at most (standard's last record); over samples 10.8-12 standard's
    # curve (1.3, 1.2, 1.1, 1.0 at 0, 4, 8, 12) averages 1.015, accumulation's (0.65, 0.6, ... at 0, 16, ...)
    # averages 0.614375
    assert samples["estimate"] == pytest.approx(1.015 / 0.614375) and samples["verdict"] == HOLDS


def test_checkpointing_slowdown_and_identical_loss(halved):
    table = claims.checkpointing_effects(halved[0], halved[1])
    slower = _rows(table, "(d) checkpointing slows each step", arch="vit").iloc[0]
    assert slower["verdict"] == HOLDS and slower["estimate"] == pytest.approx(50.0)
    assert _rows(table, "(d) checkpointing slows each step by at most", arch="vit").iloc[0]["verdict"] == HOLDS
    loss = _rows(table, "(d) checkpointing changes the loss", arch="vit").iloc[0]
    assert loss["verdict"] == IDENTICAL and "bit-identical" in loss["note"]


def test_at_equal_time_the_slower_checkpointed_run_has_taken_fewer_steps(halved):
    table = claims.checkpointing_effects(halved[0], halved[1], window=1)
    timed = _rows(table, "(d) checkpointing changes the loss", arch="vit", budget_view="equal time").iloc[0]
    # both have trained 0.3 s at most (standard before its 4th step); over 0.27-0.3 s standard (1.3, 1.2,
    # 1.1, 1.0 at 0, 0.1, 0.2, 0.3 s) averages 1.015, checkpointing (1.3, 1.2, 1.1 at 0, 0.15, 0.3 s) 1.11
    assert timed["estimate"] == pytest.approx(100 * (1.11 / 1.015 - 1)) and timed["verdict"] == DOES_NOT_HOLD


def test_identical_losses_are_identical(tmp_path):
    runs, steps, evals = _tables(write_grid(tmp_path, lambda seed, **_: {"level": _seed_noise(seed)}))
    table = claims.accumulation_lowers_loss(steps)
    assert (table.query("budget_view == 'equal steps'")["verdict"] == IDENTICAL).all()


def test_one_seed_gives_no_verdict_and_says_so(tmp_path):
    def cell(strategy, **_):
        return {"level": 0.5 if strategy == "accumulation" else 1.0}
    runs, steps, evals = _tables(write_grid(tmp_path, cell, optimizers=("adam",), seeds=(0,)))
    row = claims.accumulation_lowers_loss(steps, by=("regime", "arch", "optimizer")).iloc[0]
    assert row["n"] == 1 and row["verdict"] == NOT_DISTINGUISHABLE and "no interval" in row["note"]


def test_memory_is_judged_on_tensor_bytes_and_rss_is_only_context(tmp_path):
    def cell(arch, strategy, seed, **_):
        doubled = arch == "llama" and strategy == "accumulation"
        tensors = None if arch == "modernbert" else (2 if doubled else 1) * 40 * 2**20 + seed
        return {"peak": 800 * 2**20, "tensor_peak": tensors}  # the same RSS everywhere
    runs = tables.runs_table(write_grid(tmp_path, cell, archs=("llama", "vit", "modernbert")))
    peak = claims.accumulation_memory(runs).query("comparison.str.startswith('peak')", engine="python")
    verdicts = peak.set_index("arch")["verdict"]
    assert verdicts["vit"] == HOLDS and verdicts["llama"] == DOES_NOT_HOLD
    assert verdicts["modernbert"] == claims.NO_TENSOR_PEAK  # no tensor peak recorded: RSS does not stand in
    assert "RSS peak (context, not judged): 800 MiB" in peak.set_index("arch").loc["vit", "note"]


def test_memory_equal_holds_and_doubled_does_not(tmp_path):
    def cell(arch, strategy, **_):
        doubled = arch == "llama" and strategy == "accumulation"
        return {"activations": 2000 if doubled else 1000}
    runs = tables.runs_table(write_grid(tmp_path, cell, archs=("llama", "vit")))
    table = claims.accumulation_memory(runs).query("comparison.str.startswith('activation')", engine="python")
    assert table.set_index("arch").loc["vit", "verdict"] == HOLDS
    assert table.set_index("arch").loc["llama", "verdict"] == DOES_NOT_HOLD


@pytest.mark.parametrize("adam_offset, expected", [(+0.5, HOLDS), (-0.5, DOES_NOT_HOLD)])
def test_adam_against_each_other_optimizer(tmp_path, adam_offset, expected):
    def cell(optimizer, seed, **_):
        base = {"sgd": 1.0, "adam": 1.0 + adam_offset}.get(optimizer, 3.0)
        return {"level": base * _seed_noise(seed)}
    evals = tables.evals_table(write_grid(tmp_path, cell, archs=("modernbert",), strategies=("standard",)))
    table = claims.adam_not_always_best(evals)
    rows = table[table["arch"] == "modernbert"]
    assert len(rows) == len(claims.ADAM_RIVALS) * len(claims.SAME_BATCH_VIEWS)  # fixed before the data
    assert (rows["family_size"] == len(rows)).all() and (rows["p_adjusted"] >= rows["p_value"]).all()
    sgd = rows[rows["comparison"].str.startswith("adam vs sgd")].iloc[0]
    assert sgd["verdict"] == expected
    assert (rows[~rows["comparison"].str.startswith("adam vs sgd")]["verdict"] == DOES_NOT_HOLD).all()  # 3.0 > adam
    assert (table[table["arch"] == "all"]["verdict"] == expected).all()


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


def test_one_loss_per_sample_curve_is_undecided_at_equal_samples_and_holds_at_equal_steps():
    runs = synthetic.run_grid(optimizers=OPTIMIZERS, strategies=("standard", "accumulation"))
    steps = synthetic.steps_frame(runs, run_noise=0.01, record_noise=0.01, rng=np.random.default_rng(1))
    table = claims.accumulation_lowers_loss(steps).set_index("budget_view")
    assert table.loc["equal samples", "verdict"] == NOT_DISTINGUISHABLE
    assert table.loc["equal samples", "low"] < 1 < table.loc["equal samples", "high"]
    assert table.loc["equal steps", "verdict"] == HOLDS  # accumulation has trained on 4x the samples there
    # the window of the last 10 records (the old reading) spans 4x the samples for accumulation: biased
    old = tables.at_equal_budget(steps, "samples_seen", window=10).groupby("strategy")["loss"].mean()
    assert old["standard"] / old["accumulation"] == pytest.approx(0.92, abs=0.01)


def test_five_optimizers_from_one_distribution_rarely_hold_anywhere():
    """200 simulated grids (one regime each): a false "holds" for (c) in a regime at most 5 % family-wise."""
    sets = 200
    runs = synthetic.run_grid(regimes=tuple(f"set{i}" for i in range(sets)), optimizers=OPTIMIZERS)
    evals = synthetic.evals_frame(runs, steps=40, run_noise=0.05, rng=np.random.default_rng(7))
    table = claims.adam_not_always_best(evals)
    rows, anywhere = table[table["arch"] != "all"], table[table["arch"] == "all"]
    false_holds = rows.groupby("regime")["verdict"].apply(lambda v: (v == HOLDS).any())
    margin = st.binom.ppf(0.99, sets, 0.05) / sets  # 5 % plus what 200 draws may add by chance
    assert false_holds.mean() <= margin
    holding = anywhere[anywhere["verdict"] == HOLDS]["regime"]
    assert set(holding) <= set(false_holds[false_holds].index)  # "anywhere" only where an adjusted row holds
    assert (rows["p_adjusted"] >= rows["p_value"]).all() and (rows["family_size"] == 8).all()


def test_a_slower_optimizer_is_read_at_the_same_time_budget_between_evaluations():
    runs = synthetic.run_grid(optimizers=("adam", "sgd"), step_time={("sgd", "standard"): 0.101})
    evals = synthetic.evals_frame(runs, steps=120, every=30)
    aligned = tables.at_budget_point(evals, "time", "val_loss", by=("regime", "arch", "strategy"))
    sgd = aligned[aligned["optimizer"] == "sgd"].iloc[0]
    assert (aligned["budget_value"] == 12.0).all()  # the fastest run's end, for every run
    assert sgd["at_step"] == pytest.approx(12.0 / 0.101)  # between its evaluations at steps 90 and 120
    assert sgd["val_loss"] == pytest.approx(synthetic.decaying(4 * 12.0 / 0.101), rel=2e-3)
    table = claims.adam_not_always_best(evals)
    timed = table[(table["budget_view"] == "equal time") & (table["arch"] != "all")]
    assert timed["measured"].str.contains("time = 12, interpolated").all()


def test_the_tuned_regime_is_judged_on_the_test_split():
    runs = synthetic.run_grid(regimes=("shared", "tuned"), optimizers=OPTIMIZERS,
                              level={("adam", "standard"): 0.9})  # adam best on validation
    evals = synthetic.evals_frame(runs, run_noise=0.005, rng=np.random.default_rng(3))
    worse_on_test = np.where(evals["optimizer"] == "adam", 1.3, 1.0)  # but worst on the held-out test split
    evals = evals.assign(test_loss=(evals["val_loss"] * worse_on_test).where(evals["regime"] == "tuned"))
    table = claims.adam_not_always_best(evals)
    rows = table[table["arch"] != "all"].set_index("regime")
    assert (rows.loc["tuned", "verdict"] == HOLDS).all() and rows.loc["tuned", "measured"].str.contains("test").all()
    assert (rows.loc["shared", "verdict"] == DOES_NOT_HOLD).all()
    assert rows.loc["shared", "measured"].str.contains("validation loss").all()


def test_findings_say_the_claim_the_measurement_and_the_family_count(halved):
    table = claims.check_claims(*halved)
    sentences = claims.findings(table)
    assert len(sentences) == len(claims.PAPER_SAYS)
    accumulation = sentences[0]
    assert accumulation.startswith("**(a)** The paper says gradient accumulation lowers the training loss")
    # llama at equal steps: standard/accumulation exactly 2 for every pair; 6 of the 9 (a) comparisons hold
    assert "Measured (equal steps, llama, regime shared): 2 [95% CI 2, 2]" in accumulation
    assert "*holds*" in accumulation and "holds in 6 after Holm correction" in accumulation


def test_the_methods_page_states_the_alignment_and_tolerance_the_code_uses():
    import re
    from pathlib import Path

    from gum_utils.report.stats import FLOAT_TOLERANCE
    methods = (Path(__file__).resolve().parent.parent / "book" / "methods.md").read_text()
    assert f"mean of its last {claims.LOSS_WINDOW} records" in methods
    assert f"the last {claims.BUDGET_FRACTION * 100:g} %" in methods
    assert float(re.search(r"relative difference below ([0-9.e-]+),", methods).group(1)) == FLOAT_TOLERANCE
    assert "Holm-Bonferroni" in methods and "held-out test split" in methods


def test_the_rate_sensitivity_sentence_names_each_verdict_that_moves_between_regimes():
    import pandas as pd

    rows = [("shared", "equal steps", HOLDS), ("tuned", "equal steps", HOLDS),
            ("shared", "equal time", HOLDS), ("tuned", "equal time", NOT_DISTINGUISHABLE),
            ("shared", "equal samples", HOLDS)]  # not in both regimes: left out
    table = pd.DataFrame([{"claim": "(a) accumulation lowers the loss", "regime": regime, "arch": "vit",
                           "comparison": "accumulation/standard", "budget_view": view, "verdict": verdict}
                          for regime, view, verdict in rows])
    sentence = claims.rate_sensitivity(table)
    assert "Of claim (a)'s 2 comparisons made in both regimes" in sentence and "1 reach the same verdict" in sentence
    assert f"vit, equal time, accumulation/standard: {HOLDS} (shared) -> {NOT_DISTINGUISHABLE} (tuned)" in sentence
    assert "is not shown" in claims.rate_sensitivity(table[table["regime"] == "shared"])
