"""What the grid writes for a finished cell, without running one (no Dask, no notebook)."""

import errno
import types

import pytest

from gum_utils.core.results import RunResult
from gum_utils.study import grid, outcomes, preflight
from gum_utils.study.dispatch import GridCounts
from gum_utils.study.outcomes import record_error, save_outcome
from gum_utils.study.preflight import GridOptionError, check_scheduler, local_gpu_count, output_lock
from gum_utils.study.tasks import tasks_for
from gum_utils.study.profiles import cells, profile


def smoke_task(tmp_path):
    prof = profile("smoke")
    return tasks_for(prof, tmp_path, cells(prof, ["vit"], ["sgd"], ["standard"], [0]), jobs=1)[0]


def old_pair(task):
    task.output.parent.mkdir(parents=True)
    RunResult(config={"old": True}, status="error", error="old", cell_key=task.key).to_json(task.result_path)
    task.output.write_text('{"old": "notebook"}')
    return task.result_path.read_text(), task.output.read_text()


def outcome(status="ok"):
    return types.SimpleNamespace(result_text='{"new": "result"}', notebook_text='{"new": "notebook"}', status=status)


@pytest.mark.parametrize("failing_write", [1, 2])  # the result's temporary, or the notebook's
def test_a_failed_write_leaves_the_old_pair_and_counts_the_cell_failed(tmp_path, monkeypatch, capsys, failing_write):
    task = smoke_task(tmp_path)
    before = old_pair(task)
    writes = []
    real = outcomes.write_temporary

    def full_disk(path, text):
        writes.append(path)
        if len(writes) == failing_write:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text)

    monkeypatch.setattr(outcomes, "write_temporary", full_disk)
    assert save_outcome(task, outcome()) == "error"
    assert (task.result_path.read_text(), task.output.read_text()) == before
    assert sorted(p.name for p in task.output.parent.iterdir()) == ["sgd-standard-s0.ipynb", "sgd-standard-s0.json"]
    assert capsys.readouterr().err == ("gum_utils.study.grid: vit/sgd-standard-s0: its new files could not be written "
                                       "(No space left on device); the cell counts as failed and its old files stay "
                                       "as they were\n")


def test_a_new_pair_replaces_the_old_one_whole(tmp_path):
    task = smoke_task(tmp_path)
    old_pair(task)
    assert save_outcome(task, outcome("diverged")) == "diverged"
    assert (task.result_path.read_text(), task.output.read_text()) == ('{"new": "result"}', '{"new": "notebook"}')
    assert len(list(task.output.parent.iterdir())) == 2  # no temporaries left


def test_a_failure_record_that_cannot_be_written_is_said_and_the_grid_goes_on(tmp_path, monkeypatch, capsys):
    task = smoke_task(tmp_path)
    old_pair(task)

    def read_only(self, path):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(RunResult, "to_json", read_only)
    assert record_error(task, "the worker died") == "error"
    assert not task.output.exists()  # not done: the next grid runs it again
    assert "(Read-only file system); the cell counts as failed and the next grid runs it again" in capsys.readouterr().err


@pytest.fixture
def stages_counted(monkeypatch):
    """The grid with each stage replaced by the counts given; returns the setter."""
    import contextlib

    monkeypatch.setattr(grid, "_open_cluster", lambda args, jobs: contextlib.nullcontext(None))

    def counting(**statuses):
        monkeypatch.setattr(grid, "run_stage", lambda *a, **k: GridCounts(skipped=0, **statuses))
    return counting


def test_a_grid_with_a_cell_in_error_exits_1_and_says_how_many(tmp_path, capsys, stages_counted):
    stages_counted(ok=2, error=1)
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), "--stage", "shared"]) == 1
    assert "ok 2, error 1; 1 cell(s) ended in error (their notebooks and results say why" in capsys.readouterr().out
    stages_counted(ok=2, diverged=1, oom=1)  # findings of the study, not failures of the grid
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), "--stage", "shared"]) == 0


def test_the_paper_profile_without_a_gpu_is_one_line_before_any_cell(tmp_path, capsys, monkeypatch):
    def refuse(args, jobs):
        raise AssertionError("a cluster was opened: the device was not checked before the first cell")

    monkeypatch.setattr(grid, "_open_cluster", refuse)
    monkeypatch.setattr(preflight, "local_gpu_count", lambda: 0)
    for data in ([], ["--data", "embedded"]):
        assert grid.main(["--profile", "paper", "--out", str(tmp_path), *data]) == 2
        err = capsys.readouterr().err
        assert err == ("gum_utils.study.grid: error: the paper profile runs every cell on a GPU (device cuda) and torch "
                       "sees none on this machine: use --profile cpu (or smoke) here, or GPU workers elsewhere "
                       "(--scheduler tcp://HOST:PORT, or --slurm --gpus-per-job N)\n")


def test_the_gpus_the_grid_counts_are_the_ones_torch_sees():
    import torch

    assert local_gpu_count() == torch.cuda.device_count()


def serving(handler):
    """A throwaway server on a free loopback port, each connection given to `handler` in a thread; its address."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))

    def accept():
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=handler, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return f"tcp://127.0.0.1:{listener.getsockname()[1]}"


def http_server() -> str:
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"tcp://127.0.0.1:{server.server_address[1]}"


def answers_http_at_once(connection):  # what a proxy in front of an unroutable address did
    connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")


@pytest.mark.parametrize("start, found", [
    (http_server, "something accepts connections there but gives no Dask handshake within 3 s \\(a dashboard's port"),
    (lambda: serving(answers_http_at_once), "what answers there does not speak Dask \\("),
])
def test_a_scheduler_address_that_is_not_a_dask_scheduler_is_one_line_within_seconds(tmp_path, capsys, monkeypatch,
                                                                                     start, found):
    import re
    import time

    def refuse(args, jobs):
        raise AssertionError("a cluster was opened: the scheduler was not checked before the first cell")

    monkeypatch.setattr(grid, "_open_cluster", refuse)
    address = start()
    started = time.perf_counter()
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), "--scheduler", address]) == 2
    assert time.perf_counter() - started < 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(f"gum_utils.study.grid: error: --scheduler {address} is not a Dask "
                                             f"scheduler: {found}", err), err


def test_a_dask_scheduler_passes_the_check_and_its_worker_does_not():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, protocol="tcp://", host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"dashboard": False}) as cluster:
        check_scheduler(cluster.scheduler_address)
        worker = next(iter(cluster.scheduler_info["workers"]))
        with pytest.raises(GridOptionError, match="a Dask Worker answers there, not a scheduler$"):
            check_scheduler(worker)


@pytest.mark.parametrize("options, message", [
    (["--stage"], "--stage needs one or more values \\(shared, sweep, tuned\\); leave it out for all"),
    (["--arch"], "--arch needs one or more values \\(vit, modernbert, llama, nanovlm\\)"),
    (["--seed"], "--seed needs one or more values"),
    (["--seed", "0", str(2**32)], "--seed takes integers from 0 to 4294967295, got 4294967296"),
    (["--seed", str(10**23)], "--seed takes integers from 0 to 4294967295, got 100000000000000000000000"),
])
def test_an_empty_subset_or_a_seed_out_of_range_is_one_line_before_any_cell(tmp_path, capsys, monkeypatch, options,
                                                                         message):
    import re

    def refuse(args, jobs):
        raise AssertionError("a cluster was opened: the option was not checked before the first cell")

    monkeypatch.setattr(grid, "_open_cluster", refuse)
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(f"gum_utils.study.grid: error: {message}", err), err


def test_an_empty_out_is_refused_not_the_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stopped:
        grid.main(["--profile", "smoke", "--out", ""])
    assert stopped.value.code == 2 and "argument --out: needs a folder, got an empty name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_repeated_optimizers_and_seeds_run_each_cell_once(tmp_path, monkeypatch, capsys):
    import contextlib

    ran = []
    monkeypatch.setattr(grid, "_open_cluster", lambda args, jobs: contextlib.nullcontext(None))
    monkeypatch.setattr(grid, "run_grid", lambda tasks, *a, **k: ran.extend(t.name for t in tasks) or GridCounts(
        skipped=0, ok=len(tasks)))
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path), "--stage", "shared", "--arch", "vit", "vit",
                      "--optimizer", "sgd", "sgd", "--strategy", "standard", "--seed", "0", "0"]) == 0
    assert ran == ["vit/sgd-standard-s0"] and "ok 1" in capsys.readouterr().out


def test_a_second_grid_on_the_same_out_is_one_line_and_runs_nothing(tmp_path, capsys, monkeypatch):
    import contextlib
    import os

    opened = []
    monkeypatch.setattr(grid, "_open_cluster", lambda args, jobs: opened.append(jobs) or contextlib.nullcontext(None))
    monkeypatch.setattr(grid, "run_stage", lambda *a, **k: GridCounts(skipped=0, ok=1))
    argv = ["--profile", "smoke", "--out", str(tmp_path), "--stage", "shared"]
    with output_lock(tmp_path / "smoke"):  # the first grid, still running
        assert grid.main(argv) == 2
    assert opened == [] and capsys.readouterr().err == (
        f"gum_utils.study.grid: error: another grid (pid {os.getpid()}) is running on {tmp_path / 'smoke'}: let it "
        "finish (finished cells are skipped when you run again) or give another --out\n")
    assert grid.main(argv) == 0 and opened == [1]  # the first one done: the lock is free again
