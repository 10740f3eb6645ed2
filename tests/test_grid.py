import json
import os
import signal
import subprocess
import tempfile
import sys
import time
from pathlib import Path

import papermill
from traitlets.config import Config
import pytest
from helpers import ctrl_c_as_a_terminal_delivers_it

from gum_utils.study import dispatch, grid

from gum_utils.study.dispatch import cell_job, run_grid

from gum_utils.study.outcomes import corrupt_file, is_done, report_corrupt

from gum_utils.study.tasks import STAGES, Task, cell_key, chosen_lrs, tasks_for
from gum_utils.study.profiles import PROFILES, cells, profile
from gum_utils.core.results import RunResult
from gum_utils.core.config import RunConfig
from gum_utils.core.run import train
from gum_utils.study.kernels import socket_options

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_notebook(tmp_path, **parameters):
    return papermill.execute_notebook(str(ROOT / "notebooks" / "vit.ipynb"), str(tmp_path / "out.ipynb"),
                                      parameters=dict(profile="smoke", result_path=str(tmp_path / "r.json"),
                                                      **parameters),
                                      kernel_name="python3", cwd=str(ROOT / "notebooks"), progress_bar=False,
                                      config=Config({"KernelManager": socket_options(tmp_path)}))  # no port to race for


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
    tasks = tasks_for(profile("smoke"), tmp_path, cells(profile("smoke"), ["vit"], ["sgd"], ["standard"]), jobs=1)
    good = tasks[0]
    bad = Task(good.cell.__class__("vit", "adam", "standard", 0), dict(good.parameters, lr=-1.0),
                    good.notebook, good.output.with_name("adam-standard-s0.ipynb"), "bad-key", 1)
    counts = run_grid([bad, good], jobs=1, show_progress=False)
    assert counts == {"skipped": 0, "error": 1, "ok": 1}
    assert counts.reran == 1  # the failing notebook ran once more (retries=1), the good one once
    failed = RunResult.from_json(bad.result_path)
    assert failed.status == "error" and "lr must be a number > 0" in failed.error
    assert bad.output.exists()  # the executed notebook keeps the traceback


def test_a_reused_kernel_gives_the_same_records_as_a_fresh_process(tmp_path, all_cores):
    prof = profile("smoke")
    selected = cells(prof, ["llama", "vit"], ["adam"], ["accumulation", "standard"])
    run_grid(tasks_for(prof, tmp_path, selected, jobs=1), jobs=1, show_progress=False)
    for cell in selected:  # four cells, one after another in the same warm kernel
        params = prof.run_parameters(cell.arch, cell.optimizer, cell.strategy, cell.seed)
        from_grid = RunResult.from_json(tmp_path / "smoke" / "shared" / cell.arch / f"{cell.stem}.json")
        direct = train(RunConfig.from_dict(params))
        assert [r["loss"] for r in from_grid.records] == [r["loss"] for r in direct.records]


LEFT_IN_THE_KERNEL = """
import gc, torch
gc.unfreeze()  # the frozen objects too: a model frozen by a reset would be a leak
alive = gc.get_objects()
gc.freeze()
# transformers keeps stateless activation modules of its own: what a run made holds parameters
print(sum(isinstance(o, torch.nn.Parameter) for o in alive), sum(isinstance(o, torch.optim.Optimizer) for o in alive))
del alive
print([n for n in get_ipython().user_ns if not n.startswith('_') and n not in
       ('In', 'Out', 'get_ipython', 'exit', 'quit', 'open', 'gc', 'torch')])
"""


def test_a_warm_kernel_holds_nothing_of_its_last_cell_and_one_client_serves_every_cell(tmp_path):
    from gum_utils.study.cell import run_cell
    from gum_utils.study.fingerprint import code_fingerprint
    from gum_utils.study.kernels import WARM

    prof = profile("smoke")
    tasks = tasks_for(prof, tmp_path, cells(prof, ["vit", "llama"], ["sgd"], ["standard"]), jobs=1)
    outcomes = [run_cell(cell_job(task, task.notebook.read_text(), code_fingerprint())) for task in tasks]
    assert [outcome.status for outcome in outcomes] == ["ok", "ok"]
    client = WARM.client()
    said = []
    try:
        client.execute_interactive(LEFT_IN_THE_KERNEL, timeout=60, output_hook=lambda message: said.append(
            message["content"].get("text", "")) if message["msg_type"] == "stream" else None)
        assert "".join(said).split() == ["0", "0", "[]"]  # no parameter or optimizer alive, no name left
        assert client is WARM.client()  # the cells, their resets and this question: one client
    finally:
        WARM.shutdown()


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
    key = cell_key(params, notebook, "code-a")
    assert key == cell_key(dict(params), notebook, "code-a")
    assert key != cell_key(dict(params, seed=1), notebook, "code-a")
    assert key != cell_key(params, notebook, "code-b")


def test_multi_process_runs_form_a_regime_of_their_own_and_the_sweep_stays_one_process():
    import dataclasses

    fsdp = dataclasses.replace(profile("cpu"), world_size=2, parallel="fsdp")
    assert [fsdp.regime(stage) for stage in STAGES] == ["shared-fsdp2", "sweep", "tuned-fsdp2"]
    assert fsdp.run_parameters("vit", "sgd", "standard", 0)["world_size"] == 2
    assert "world_size" not in fsdp.sweep_parameters("vit", "sgd", 0, 0.1)
    assert "world_size" not in profile("cpu").run_parameters("vit", "sgd", "standard", 0)  # one process: as before



def finished_cell(tmp_path, stem_optimizer="sgd"):
    """A smoke task with a whole result of its key and a whole executed notebook beside it."""
    import nbformat

    prof = profile("smoke")
    task = tasks_for(prof, tmp_path, cells(prof, ["vit"], [stem_optimizer], ["standard"]), jobs=1)[0]
    RunResult(config=task.parameters, cell_key=task.key, records=[{"loss": 1.0}], summary={"loss": 1.0}).to_json(
        task.result_path)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n" * 100)]), task.output)
    return task


@pytest.mark.parametrize("damage, named, reason", [
    ("halve notebook", "output", "is not a readable notebook"),
    ("halve result", "result_path", "is not valid JSON"),
    ("null result", "result_path", "holds null, not a result object"),
    ("array result", "result_path", "holds an array, not a result object"),
])
def test_a_corrupt_result_or_notebook_is_not_done_and_the_grid_names_it(tmp_path, capsys, damage, named, reason):
    task = finished_cell(tmp_path)
    assert is_done(task) and corrupt_file(task) is None
    path = getattr(task, named)
    text = {"null result": "null", "array result": "[1, 2, 3]"}.get(damage, path.read_text()[: path.stat().st_size // 2])
    path.write_text(text)
    assert not is_done(task)
    assert report_corrupt([task]) == 1
    assert f"redoing vit/sgd-standard-s0: {path}: {reason}" in capsys.readouterr().out


def test_a_corrupt_tuned_result_does_not_block_choosing_the_rates(tmp_path):
    from test_tuning import sweep_of

    sweep_of(tmp_path, "adam", [(lr, 0, 3.0 - lr) for lr in (1e-4, 1e-3, 1e-2)])
    tuned = tmp_path / "cpu" / "tuned" / "vit" / "adam-standard-s0.json"
    tuned.parent.mkdir(parents=True)
    tuned.write_text('{"config": {"ar')
    assert chosen_lrs(profile("cpu"), tmp_path, ["vit"], ["adam"]) == {("vit", "adam"): 1e-2}


def closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the probe goes


@pytest.fixture
def no_cluster(monkeypatch):
    """Fails the test if the grid gets as far as opening a cluster (that is where cells start)."""
    def refuse(args, jobs):
        raise AssertionError("a cluster was opened: the option was not checked before the first cell")
    monkeypatch.setattr(grid, "_open_cluster", refuse)


@pytest.mark.parametrize("options, message", [
    (["--seed", "-3"], "--seed takes integers from 0 to 4294967295, got -3"),
    # The cells' own RunConfigs judge these (one validation): the message names the cell and the profile.
    (["--data", "hub"], "cell vit/sgd-standard-s0 of profile 'smoke' \\(tiny size, hub data, .* needs size='paper'"),
    (["--world-size", "3"], "world size 3\\) would fail: batch_size=4 must be divisible by world_size=3"),
    (["--world-size", "2"], "cell vit/sgd-accumulation-s0 .* accumulation needs micro_batch_size < the per-rank batch"),
    (["--parallel", "fsdp"], "--parallel fsdp spans several processes: give --world-size N"),
    (["--scheduler", "foo"], "--scheduler 'foo' is not an address of the form tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:PORT"], "no Dask scheduler answers at tcp://127.0.0.1:\\d+ within 3 s"),
])
def test_each_bad_grid_option_is_one_line_before_any_cell(tmp_path, capsys, no_cluster, options, message):
    import re
    import time

    options = [option.replace("PORT", str(closed_port())) for option in options]
    started = time.perf_counter()
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gum_utils.study.grid: error: ") and re.search(message, err), err
    assert time.perf_counter() - started < 5


def test_a_grid_with_the_loopback_down_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    """With `lo` down (seen in a network namespace: `unshare -rn`), Dask timed out after 30 s with 72
    lines; the socket check says it at once. Here binding 127.0.0.1 fails as it does there."""
    import socket

    from distributed import LocalCluster

    def unreachable(self, address):
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "bind", unreachable)
    monkeypatch.setattr(LocalCluster, "__init__", lambda *a, **k: pytest.fail("Dask was started"))
    started = time.perf_counter()
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), "--arch", "vit"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs the loopback interface (127.0.0.1)" in err and "Network is unreachable" in err
    assert time.perf_counter() - started < 5


def test_an_unwritable_out_is_one_line_before_any_cell(tmp_path, capsys, no_cluster):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert grid.main(["--profile", "smoke", "--out", str(blocker / "runs")]) == 2
    assert f"--out {blocker / 'runs'} is not a writable folder: Not a directory" in capsys.readouterr().err


def main_without_interrupt(argv) -> int:
    """grid.main, failing the test (not ending the test session) if a KeyboardInterrupt gets out."""
    try:
        return grid.main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C reached the user as a KeyboardInterrupt traceback")


def test_a_good_world_size_and_subset_pass_the_checks(tmp_path, monkeypatch):
    opened = []
    monkeypatch.setattr(grid, "_open_cluster", lambda args, jobs: opened.append(jobs) or (_ for _ in ()).throw(
        KeyboardInterrupt()))
    assert main_without_interrupt(["--profile", "smoke", "--out", str(tmp_path), "--world-size", "2",
                                   "--strategy", "standard", "--seed", "0"]) == 130
    assert opened == [1]


def test_ctrl_c_stops_with_one_line_saying_what_is_done_and_how_to_resume(tmp_path, capsys, monkeypatch):
    import contextlib
    import types

    client = types.SimpleNamespace(cluster=None, scheduler=types.SimpleNamespace(address="tcp://here:1"))
    monkeypatch.setattr(grid, "_open_cluster", lambda args, jobs: contextlib.nullcontext(client))

    def interrupted_after_one(client, todo, counts, show_progress, retries):
        counts["ok"] = 1
        raise KeyboardInterrupt

    monkeypatch.setattr(dispatch, "_dispatch_on", interrupted_after_one)
    assert main_without_interrupt(["--profile", "smoke", "--out", str(tmp_path), "--arch", "vit", "--optimizer", "sgd",
                                   "--stage", "shared"]) == 130
    err = capsys.readouterr().err
    assert err == ("gum_utils.study.grid: stopped by SIGINT in stage shared: 1 cell(s) finished in this run and kept "
                   "(ok 1); run the same command again to resume (finished cells are skipped)\n")


HOLD_SCRATCH = """
import sys, time
from gum_utils.study import scratch as gum_scratch
with gum_scratch.cell_scratch() as scratch:
    (scratch / "executed.ipynb").write_text("{}")
    print(scratch, flush=True)
    time.sleep(60)
"""


def scratch_holder(tmp_path):
    """A process inside a cell's scratch folder (in tmp_path, its TMPDIR), and that folder."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-c", HOLD_SCRATCH], env=env, stdout=subprocess.PIPE, text=True,
                               preexec_fn=ctrl_c_as_a_terminal_delivers_it)
    scratch = Path(process.stdout.readline().strip())
    assert scratch.parent == tmp_path and scratch.name.startswith(f"gum-cell-{process.pid}-")
    return process, scratch


def test_a_cell_interrupted_with_sigint_leaves_no_scratch(tmp_path):
    process, scratch = scratch_holder(tmp_path)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    assert not scratch.exists() and list(tmp_path.iterdir()) == []


def test_what_a_killed_cell_left_is_removed_by_the_next_grid_and_nothing_else(tmp_path):
    from gum_utils.study import scratch as gum_scratch

    process, scratch = scratch_holder(tmp_path)
    process.kill()
    process.wait(timeout=30)
    assert scratch.exists()  # SIGKILL: nothing in the process could remove it
    dead = process.pid
    kernel = tmp_path / f"gum-kernel-{dead}-abc"
    kernel.mkdir()
    (kernel / "kernel.json").write_text("{}")  # the kernel's connection file lives in its folder
    alive = tmp_path / f"gum-cell-{os.getpid()}-xyz"  # a running grid's cell: in use
    unnamed = tmp_path / "gum-cell-q1w2e3r4"  # not a name this code gives
    others = tmp_path / f"other-{dead}-abc"
    for path in (alive, unnamed, others):
        path.mkdir()
    assert sorted(gum_scratch.remove_stale_scratch(tmp_path)) == sorted([scratch, kernel])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([alive.name, unnamed.name, others.name])


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), OSError(5, "Input/output error"),
                                     KeyboardInterrupt()])
def test_a_grid_ended_by_a_full_disk_a_write_error_or_a_stop_removes_its_workers_scratch(tmp_path, monkeypatch, failure):
    """The workers a failing grid ends leave their cells' folders; the grid removes them as it exits,
    not the next grid (a cell's own folder goes in its `finally`; a worker's exit can cut that short)."""
    from gum_utils.study import grid

    process, scratch = scratch_holder(tmp_path)
    process.kill()
    process.wait(timeout=30)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def run_then_fail(*args):
        assert scratch.exists()  # the grid began with a dead worker's folder and has not removed it yet
        raise failure

    monkeypatch.setattr(grid, "_run_grid", run_then_fail)
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path / "out")]) in (1, 130)
    assert not scratch.exists()


def test_the_warm_kernel_keeps_its_connection_and_socket_files_in_its_own_folder_and_removes_them(monkeypatch):
    from gum_utils.study import kernels

    monkeypatch.setattr(kernels.WarmKernel, "WARM_UP", "1")  # no torch import: only where the files go
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")  # as Dask's nanny sets it for a worker
    monkeypatch.setenv("GUM_INHERITED", "yes")
    warm = kernels.WarmKernel()
    manager = warm.kernel()
    home = Path(manager.connection_file).parent
    try:
        assert home.name.startswith(f"gum-kernel-{os.getpid()}-") and Path(manager.connection_file).exists()
        said = []
        warm.client().execute_interactive(
            "import os; print(os.environ.get('MALLOC_TRIM_THRESHOLD_'), os.environ.get('GUM_INHERITED'))\n"
            "from ipykernel.connect import get_connection_info; print(get_connection_info(unpack=True)['transport'])",
            timeout=60, output_hook=lambda message: said.append(message["content"].get("text", "")))
        # the worker's malloc setting stays with the worker; the sockets are files, no TCP port to race for
        assert "".join(said).split() == ["None", "yes", "ipc"]
        assert sorted(path.name for path in home.glob("kernel-*")) == [f"kernel-{port}" for port in range(1, 6)]
    finally:
        warm.shutdown()
    assert not home.exists()


def test_papermill_says_nothing_of_the_parameters_a_notebook_checks_itself(caplog):
    import logging

    from gum_utils.study import cell  # noqa: F401 (importing it quiets that one warning)

    logger = logging.getLogger("papermill")
    with caplog.at_level(logging.WARNING, logger="papermill"):
        logger.warning("Passed unknown parameter: steps")
        logger.warning("Input notebook does not contain a cell with tag 'parameters'")
    assert [record.getMessage() for record in caplog.records] == [
        "Input notebook does not contain a cell with tag 'parameters'"]


def test_a_run_notebook_shows_no_warning_and_its_look_once(tmp_path):
    run_notebook(tmp_path, optimizer="sgd")
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    stderr = [o["text"] for c in cells for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not any("Warning" in "".join(text) for text in stderr), stderr
    look = next(c for c in cells if c["cell_type"] == "code" and "nb.look(" in "".join(c["source"]))
    assert [o["output_type"] for o in look["outputs"]] == ["display_data"]  # the figure, once
    panels = next(c for c in cells if c["cell_type"] == "code" and "nb.show_run(" in "".join(c["source"]))
    assert [sorted(o["data"]) for o in panels["outputs"]] == [["image/png", "text/plain"]]  # drawn once, closed
