"""One cell of the grid, run where a Dask worker is: the task function and the worker's warm kernel.

A task carries everything a cell needs (the notebook's source, its parameters, its cell key)
and returns the executed notebook and the result as text, so a worker needs the gum_utils
package installed and nothing of the client's disk. Each cell runs in a scratch directory of
its own, removed afterwards. The client writes what comes back into the book's run folder.
Imports no torch.
"""

import atexit
import contextlib
import functools
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

from .results import RunResult

PACKAGE = Path(__file__).resolve().parent
# The code a result depends on; a change here invalidates the results (plots and book do not).
TRAINING_CODE = ("__init__.py", "cgd.py", "choices.py", "data.py", "distributed.py", "flops.py", "hub.py",
                 "launch.py", "learning_rates.py", "measure.py", "models.py", "notebook.py", "nvml.py", "optim.py",
                 "profiles.py", "results.py", "strategies.py", "train.py", "looks.py")
KERNEL_ENV = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
STARTED_TOPIC = "gum-cell-started"  # a worker logs each start: the client counts the cells run again
# Scratch folders are named <prefix><pid of the owning process>-<random>: a later grid removes
# those whose process is gone (killed), and never one whose process still runs.
CELL_PREFIX, KERNEL_PREFIX = "gum-cell-", "gum-kernel-"
_LIVE_SCRATCH: set = set()  # this process's scratch folders, removed at exit if a cell was cut short


def code_fingerprint() -> str:
    digest = hashlib.sha256()
    files = [PACKAGE / name for name in TRAINING_CODE] + sorted((PACKAGE / "assets").glob("*"))
    for path in files:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class CellJob:
    """What a worker needs to run one cell: no path of the client's disk."""

    name: str  # arch/stem, for messages
    notebook_text: str = field(repr=False)
    parameters: dict = field(repr=False)
    key: str
    threads: int  # OMP threads of the kernel; 0: the cores this worker may use
    fingerprint: str  # the client's training code, checked against the worker's


@dataclass(frozen=True)
class CellOutcome:
    status: str
    result_text: str = field(repr=False)
    notebook_text: str | None = field(repr=False)  # None where papermill wrote nothing
    error: str | None = None


class CellFailed(Exception):
    """The notebook raised (or wrote no result): Dask retries the task, then the client records this outcome."""

    def __init__(self, outcome: CellOutcome):
        super().__init__(outcome.error)
        self.outcome = outcome

    def __reduce__(self):  # the outcome travels with the exception, not as its message
        return CellFailed, (self.outcome,)


def run_cell(job: CellJob) -> CellOutcome:
    """The grid's task: execute one cell's notebook in a scratch directory; return what it wrote."""
    _announce_start(job)
    if job.fingerprint != _worker_fingerprint():
        raise RuntimeError(f"{job.name}: this worker's gum_utils differs from the client's; "
                           "install the same version on every worker")
    threads = str(job.threads or _own_cores())
    # Dask's nanny pins the BLAS libraries to one thread; the cell's kernel gets the cell's threads.
    os.environ.update(KERNEL_ENV, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    with _ONE_CELL_AT_A_TIME, cell_scratch() as scratch:
        outcome, raised = _run_in(scratch, job)
    if raised and outcome.status == "error":
        raise CellFailed(outcome)
    return outcome


def owned_scratch(prefix: str) -> Path:
    """A new folder in the temporary directory, named after this process (see remove_stale_scratch)."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    _LIVE_SCRATCH.add(path)
    return path


def release_scratch(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _LIVE_SCRATCH.discard(path)


@contextlib.contextmanager
def cell_scratch():
    """A cell's scratch folder, removed however the cell ends (an exception, Ctrl-C, the worker's exit)."""
    path = owned_scratch(CELL_PREFIX)
    try:
        yield path
    finally:
        release_scratch(path)


def remove_stale_scratch(root=None) -> list[Path]:
    """Remove the cell and kernel folders (kernel connection files included) that killed processes
    left: only gum's own prefixes, and only where the process named in the folder is gone."""
    root = Path(root or tempfile.gettempdir())
    stale = [path for prefix in (CELL_PREFIX, KERNEL_PREFIX) for path in root.glob(f"{prefix}*")
             if _owner_is_gone(path.name[len(prefix):])]
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)
    return stale


def _owner_is_gone(rest: str) -> bool:
    pid, dash, _ = rest.partition("-")
    if not (dash and pid.isdigit()):  # not a name this code gives: leave it alone
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def _remove_live_scratch() -> None:
    for path in list(_LIVE_SCRATCH):
        release_scratch(path)


@functools.cache
def _worker_fingerprint() -> str:
    return code_fingerprint()


def _own_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _announce_start(job: CellJob) -> None:
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # called directly, not as a Dask task
        return
    worker.log_event(STARTED_TOPIC, {"key": worker.get_current_task(), "cell": job.name, "worker": worker.address,
                                     "pid": os.getpid()})


def _run_in(scratch: Path, job: CellJob) -> tuple[CellOutcome, bool]:
    """The outcome, and whether the notebook raised or wrote no result."""
    notebook, executed, result_path = scratch / "cell.ipynb", scratch / "executed.ipynb", scratch / "result.json"
    notebook.write_text(job.notebook_text)
    parameters = dict(job.parameters, result_path=str(result_path), cell_key=job.key)
    parameters.pop("arch")
    error = _execute(notebook, executed, parameters)
    notebook_text = None
    if executed.exists():
        _hide_parameter_cells(executed)
        notebook_text = executed.read_text()
    status, raised = _record_status(job, result_path, error)
    return CellOutcome(status, result_path.read_text(), notebook_text, error), raised


def _execute(notebook: Path, executed: Path, parameters: dict) -> str | None:
    import papermill

    try:  # no cwd: the warm kernel keeps its own, and the worker's threads share the process's
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters, kernel_name="python3",
                                   progress_bar=False, log_output=False, km=_WARM.kernel())
    except Exception as exc:  # the executed notebook keeps the traceback
        if isinstance(exc, papermill.PapermillExecutionError):  # the cell's own exception, not papermill's
            return f"{exc.ename}: {exc.evalue}"[:2000]
        return f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        _WARM.reset()
    return None


def _record_status(job: CellJob, result_path: Path, error: str | None) -> tuple[str, bool]:
    """The notebook's own result, or an error result where the notebook failed before writing it."""
    if result_path.exists():
        result = RunResult.from_json(result_path)
        if result.cell_key == job.key:
            if error and result.status == "ok":  # trained, then the report broke: still a failure
                result.status, result.error = "error", error
                result.to_json(result_path)
            return result.status, error is not None
    error_result(job.parameters, job.key, error or "the notebook wrote no result").to_json(result_path)
    return "error", True


def error_result(parameters: dict, key: str, error: str) -> RunResult:
    return RunResult(config=parameters, status="error", error=error, cell_key=key)


def _hide_parameter_cells(path: Path) -> None:
    """The book shows the run's configuration in a table; the parameter cells would only repeat it."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("parameters" in tags or "injected-parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(notebook, path)


class WarmKernel:
    """One Jupyter kernel per worker process, reused from cell to cell with its namespace reset.

    Importing torch and transformers takes ~5 s of CPU, several times a tiny cell's training;
    a warm kernel pays it once per worker. Every run seeds itself, so results do not depend on
    what ran before (a test checks a reused kernel against a fresh one). A kernel that died
    is replaced. The kernel lives in a directory of its own (its cwd and start-up log),
    removed when it is shut down.
    """

    WARM_UP = "import gum_utils.train, gum_utils.looks, gum_utils.notebook, matplotlib.pyplot"

    def __init__(self):
        self._manager = None
        self._home = None
        self._log = None

    def kernel(self):
        if self._manager is None or not self._manager.is_alive():
            from jupyter_client import KernelManager

            self.shutdown()
            remove_stale_scratch()  # what killed workers on this machine left
            self._home = owned_scratch(KERNEL_PREFIX)
            # The kernel's own start-up chatter goes to a log, not over the progress bar.
            self._log = open(self._home / "kernel.log", "a")
            # Its connection file too lives in its folder, so removing the folder removes it.
            self._manager = KernelManager(kernel_name="python3", connection_file=str(self._home / "kernel.json"))
            self._manager.start_kernel(cwd=str(self._home), env=dict(os.environ), stdout=self._log,
                                       stderr=self._log)
            self._run(self.WARM_UP)
        return self._manager

    def reset(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._run("get_ipython().run_line_magic('reset', '-f')")

    def _run(self, code: str) -> None:
        client = self._manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
            client.execute_interactive(code, timeout=120, output_hook=lambda message: None)
        finally:
            client.stop_channels()

    def shutdown(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._manager.shutdown_kernel(now=True)
        self._manager = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._home is not None:
            release_scratch(self._home)
            self._home = None


_WARM = WarmKernel()
_ONE_CELL_AT_A_TIME = threading.Lock()  # a worker started with more threads still shares one kernel
atexit.register(_WARM.shutdown)  # a worker that exits without closing (a killed one's kernel sees its parent go)
atexit.register(_remove_live_scratch)  # a cell cut short by the worker's exit


class KernelShutdown(WorkerPlugin):
    """Shut the warm kernel down when a Dask worker closes."""

    name = "gum-kernel-shutdown"
    idempotent = True

    def teardown(self, worker) -> None:
        _WARM.shutdown()
