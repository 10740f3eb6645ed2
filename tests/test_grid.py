import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import papermill
import pytest

from gum_utils.study import grid
from gum_utils.study.profiles import PROFILES, cells, profile
from gum_utils.core.results import RunResult
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_notebook(tmp_path, **parameters):
    return papermill.execute_notebook(str(ROOT / "notebooks" / "vit.ipynb"), str(tmp_path / "out.ipynb"),
                                      parameters=dict(profile="smoke", result_path=str(tmp_path / "r.json"),
                                                      **parameters),
                                      kernel_name="python3", cwd=str(ROOT / "notebooks"), progress_bar=False)


@pytest.mark.parametrize("parameters, message", [
    ({"lrr": 0.1}, "unknown notebook parameter 'lrr' \\(did you mean 'lr'\\?\\)"),
    ({"optimizer": "lion"}, "unknown optimizer 'lion'.*valid choices: sgd, adam, adagrad, adadelta, cgd, adamw"),
    ({"strategy": "accumulation", "micro_batch_size": 3}, "must divide batch_size"),
])
def test_a_bad_notebook_parameter_fails_with_a_clear_message(tmp_path, parameters, message):
    with pytest.raises(papermill.PapermillExecutionError, match=message):
        run_notebook(tmp_path, **parameters)
    assert not (tmp_path / "r.json").exists()


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(tmp_path):
    tasks = grid.plan(profile("smoke"), tmp_path, cells(profile("smoke"), ["vit"], ["sgd"], ["standard"]), jobs=1)
    good = tasks[0]
    bad = grid.Task(good.cell.__class__("vit", "adam", "standard", 0), dict(good.parameters, lr=-1.0),
                    good.notebook, good.output.with_name("adam-standard-s0.ipynb"), "bad-key", 1)
    counts = grid.run_grid([bad, good], jobs=1, show_progress=False)
    assert counts == {"skipped": 0, "error": 1, "ok": 1}
    assert counts.reran == 1  # the failing notebook ran once more (retries=1), the good one once
    failed = RunResult.from_json(bad.result_path)
    assert failed.status == "error" and "lr must be a number > 0" in failed.error
    assert bad.output.exists()  # the executed notebook keeps the traceback


def test_a_reused_kernel_gives_the_same_records_as_a_fresh_process(tmp_path):
    prof = profile("smoke")
    selected = cells(prof, ["llama", "vit"], ["adam"], ["accumulation", "standard"])
    grid.run_grid(grid.plan(prof, tmp_path, selected, jobs=1), jobs=1, show_progress=False)
    for cell in selected:  # four cells, one after another in the same warm kernel
        params = prof.run_parameters(cell.arch, cell.optimizer, cell.strategy, cell.seed)
        from_grid = RunResult.from_json(tmp_path / "smoke" / "shared" / cell.arch / f"{cell.stem}.json")
        direct = train(RunConfig.from_dict(params))
        assert [r["loss"] for r in from_grid.records] == [r["loss"] for r in direct.records]


def test_a_killed_grid_resumes_without_redoing_finished_cells(tmp_path):
    command = [sys.executable, "-m", "gum_utils.study.grid", "--profile", "smoke", "--jobs", "1", "--out", str(tmp_path),
               "--arch", "vit", "--optimizer", "sgd"]  # three cells: one to finish, one cut short, one not begun
    runs = tmp_path / "smoke" / "shared" / "vit"
    process = subprocess.Popen(command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while len(list(runs.glob("[!.]*.ipynb"))) < 1 and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the grid, its workers and their kernels
    process.wait()
    # A cell is finished when its executed notebook is in place (the result is written before the figures).
    finished = {p.name: p.stat().st_mtime_ns for p in runs.glob("*.json") if p.with_suffix(".ipynb").exists()}
    assert 1 <= len(finished) < 3
    for path in runs.iterdir():  # nothing half-written: every result parses
        if path.suffix == ".json":
            json.loads(path.read_text())
    assert not list(runs.glob("*.tmp"))
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{len(finished)} already done, {3 - len(finished)} to run" in done.stdout
    assert len(list(runs.glob("*.json"))) == 3 and len(list(runs.glob("[!.]*.ipynb"))) == 3
    assert all(runs.joinpath(name).stat().st_mtime_ns == mtime for name, mtime in finished.items())
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "3 already done, 0 to run" in again.stdout


def test_cells_and_profiles_name_the_valid_choices():
    assert len(cells(profile("smoke"))) == 60 and set(PROFILES) == {"smoke", "cpu", "paper"}
    with pytest.raises(ValueError, match="valid choices: smoke, cpu, paper"):
        profile("laptop")
    with pytest.raises(ValueError, match="valid choices: vit, modernbert, llama, nanovlm"):
        cells(profile("smoke"), archs=["gpt2"])


def test_the_cell_key_changes_with_parameters_and_code(tmp_path):
    notebook = ROOT / "notebooks" / "vit.ipynb"
    params = profile("smoke").run_parameters("vit", "sgd", "standard", 0)
    key = grid.cell_key(params, notebook, "code-a")
    assert key == grid.cell_key(dict(params), notebook, "code-a")
    assert key != grid.cell_key(dict(params, seed=1), notebook, "code-a")
    assert key != grid.cell_key(params, notebook, "code-b")


def test_multi_process_runs_form_a_regime_of_their_own_and_the_sweep_stays_one_process():
    import dataclasses

    fsdp = dataclasses.replace(profile("cpu"), world_size=2, parallel="fsdp")
    assert [fsdp.regime(stage) for stage in grid.STAGES] == ["shared-fsdp2", "sweep", "tuned-fsdp2"]
    assert fsdp.run_parameters("vit", "sgd", "standard", 0)["world_size"] == 2
    assert "world_size" not in fsdp.sweep_parameters("vit", "sgd", 0, 0.1)
    assert "world_size" not in profile("cpu").run_parameters("vit", "sgd", "standard", 0)  # one process: as before

