"""Every command stopped by Ctrl-C or SIGTERM: one line on stderr, exit 130 or 143, cleanup run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ctrl_c_as_a_terminal_delivers_it

from gum_utils import stopping

ROOT = Path(__file__).resolve().parent.parent

HOLDER = """
import sys, time
from pathlib import Path
from gum_utils.stopping import run_command

def main():
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        Path(sys.argv[1]).write_text("cleaned up")
    return 0

sys.exit(run_command("holder", main))
"""


def _started(args, tmp_path, until: str):
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path)))
    for line in process.stdout:
        if until in line:
            return process
    raise AssertionError(f"never printed {until!r}: {process.stderr.read()}")


def test_ctrl_c_in_a_command_is_one_line_and_130(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert stopping.run_command("prog", interrupted) == 130
    assert capsys.readouterr().err == "prog: stopped by SIGINT\n"
    assert signal.getsignal(signal.SIGTERM) is not stopping._interrupt  # restored after


def test_sigterm_runs_the_cleanup_then_one_line_and_143(tmp_path):
    marker = tmp_path / "marker"
    process = _started([sys.executable, "-c", HOLDER, str(marker)], tmp_path, "ready")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143
    assert process.stderr.read() == "holder: stopped by SIGTERM\n" and marker.read_text() == "cleaned up"


def test_a_grid_stopped_by_sigterm_mid_cell_says_what_it_kept_and_exits_143(tmp_path):
    args = [sys.executable, "-m", "gum_utils.study.grid", "--profile", "smoke", "--out", str(tmp_path / "runs"),
            "--arch", "vit", "--optimizer", "sgd", "--stage", "shared", "--jobs", "1"]
    process = _started(args, tmp_path, "to run on")
    time.sleep(1)  # the cluster's start and the first cell: a SIGTERM there, too, ends in one line
    process.send_signal(signal.SIGTERM)
    started = time.perf_counter()
    assert process.wait(timeout=60) == 143
    assert time.perf_counter() - started < 30
    err = process.stderr.read()
    last = err.strip().splitlines()[-1]
    assert last.startswith("gum_utils.study.grid: stopped by SIGTERM") and "run the same command again" in last
    assert "Traceback" not in err and "WARNING" not in err, err  # not Dask's cancellations either
    assert list(tmp_path.glob("gum-*")) == []  # the ended worker's cell and kernel folders are removed


@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_command_stopped_during_its_imports_says_one_line_with_the_signals_status(signum, status, tmp_path):
    """`python -m` imports the command's packages before its code runs (seconds of torch): a probe
    package that imports gum_utils there and waits stands in for that window."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "__init__.py").write_text("import time\nimport gum_utils\nprint('ready', flush=True)\ntime.sleep(60)\n")
    (probe / "main.py").write_text("")
    process = subprocess.Popen([sys.executable, "-m", "probe.main"], cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=f"{tmp_path}:{ROOT}"),
                               preexec_fn=ctrl_c_as_a_terminal_delivers_it)
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signum)
    assert process.wait(timeout=30) == -signum  # the shell reads 128 + signal: 130, 143
    assert process.stderr.read() == f"python -m probe.main: stopped by {signum.name}\n" and 128 + signum == status
