"""The grid on Dask: a worker killed mid-cell, a running scheduler on loopback, SLURM job scripts."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import ctrl_c_as_a_terminal_delivers_it

from gum_utils.study.dispatch import run_grid

from gum_utils.study.outcomes import is_done

from gum_utils.study.tasks import tasks_for
from gum_utils.study.cell import STARTED_TOPIC
from gum_utils.study.cluster import SlurmJobs, open_client
from gum_utils.study.profiles import cells, profile
from gum_utils.core.results import RunResult

ROOT = Path(__file__).resolve().parent.parent


def vit_tasks(out: Path, strategies: list[str], jobs: int | None):
    prof = profile("smoke")
    return tasks_for(prof, out, cells(prof, ["vit"], ["sgd"], strategies), jobs)


def kill_the_first_worker_to_start_a_cell(client, killed: list, after_s: float = 1.0, timeout_s: float = 120):
    deadline = time.time() + timeout_s
    while time.time() < deadline and not killed:
        events = client.get_events(STARTED_TOPIC)
        if events:
            time.sleep(after_s)  # inside the cell: its kernel is warming up or training
            os.kill(events[0][1]["pid"], signal.SIGKILL)
            killed.append(events[0][1]["cell"])
        time.sleep(0.1)


@pytest.mark.slow
def test_a_cell_whose_worker_is_killed_runs_again_and_the_grid_completes(tmp_path):
    tasks = vit_tasks(tmp_path, ["standard", "checkpointing"], jobs=2)
    killed = []
    with open_client(2) as client:
        killer = threading.Thread(target=kill_the_first_worker_to_start_a_cell, args=(client, killed))
        killer.start()
        counts = run_grid(tasks, client=client, show_progress=False)
        killer.join()
    assert killed, "no cell started"
    assert counts == {"skipped": 0, "ok": 2} and counts.reran >= 1
    for task in tasks:
        assert RunResult.from_json(task.result_path).status == "ok" and task.output.exists()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(*command: str, cwd: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # where the worker imports gum_utils from
    return subprocess.Popen([sys.executable, "-m", "dask", *command], cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()  # a worker closes: its plugins shut the warm kernel down
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.slow
def test_a_grid_runs_on_a_running_scheduler_and_its_worker_leaves_no_kernel(tmp_path):
    address = f"tcp://127.0.0.1:{free_port()}"
    scheduler = start("scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard",
                      cwd=tmp_path)
    worker = start("worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard", cwd=tmp_path)
    try:
        out = tmp_path / "runs"
        done = subprocess.run([sys.executable, "-m", "gum_utils.study.grid", "--profile", "smoke", "--stage", "shared",
                               "--scheduler", address, "--out", str(out), "--arch", "vit", "--optimizer", "sgd",
                               "--strategy", "standard"], cwd=ROOT, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert f"to run on the cluster at {address}" in done.stdout and "ok 1" in done.stdout, done.stdout
        task = vit_tasks(out, ["standard"], jobs=None)[0]
        assert is_done(task) and RunResult.from_json(task.result_path).status == "ok"
        descendants = psutil.Process(worker.pid).children(recursive=True)
        assert any("ipykernel" in " ".join(p.cmdline()) for p in descendants)  # kept warm for the next cell
    finally:
        stop(worker)
        stop(scheduler)
    _, alive = psutil.wait_procs(descendants, timeout=10)
    assert not alive


def test_the_slurm_job_script_asks_for_the_options_given():
    jobs = SlurmJobs(queue="gpu", account="proj-42", gpus_per_job=2, walltime="02:00:00", cpus_per_job=8,
                     memory_per_job="32GB")
    cluster = jobs.cluster(scheduler_options={"host": "127.0.0.1", "dashboard_address": None})
    try:
        script = cluster.job_script()
    finally:
        cluster.close()
    lines = set(script.splitlines())
    for directive in ("-p gpu", "-A proj-42", "--gpus=2", "-t 02:00:00", "--cpus-per-task=8"):
        assert f"#SBATCH {directive}" in lines, script
    assert "--nthreads 1" in script  # one cell at a time per worker: its warm kernel serves one


def test_a_slurm_cluster_leaves_ctrl_c_to_the_grid():
    """dask_jobqueue sets Ctrl-C to sys.exit on import (exit status 0, nothing said): a fresh process,
    where nothing imported it yet, keeps its handler through the cluster's set-up."""
    probe = ("import signal\nfrom gum_utils.study.cluster import SlurmJobs\n"
             "cluster = SlurmJobs().cluster(scheduler_options={'host': '127.0.0.1', 'dashboard_address': None})\n"
             "cluster.close()\nprint(signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          preexec_fn=ctrl_c_as_a_terminal_delivers_it)
    assert done.stdout.strip().splitlines()[-1:] == ["True"], done.stdout + done.stderr[-2000:]


def test_the_local_cluster_listens_on_loopback_only_and_says_nothing_when_8787_is_taken(recwarn):
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 8787))  # or another cluster on this machine has it: taken either way
        held.listen()
    except OSError:
        pass
    with held, open_client(1) as client:
        services = client.scheduler_info()["services"]
        listening = {c.laddr for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}
    assert not [w for w in recwarn if "already in use" in str(w.message)]
    assert services["dashboard"] != 8787 and all(ip == "127.0.0.1" for ip, _ in listening)
