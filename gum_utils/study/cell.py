"""One cell of the grid, run where a Dask worker is: the task function and the worker's warm kernel.

A task carries everything a cell needs (the notebook's source, its parameters, its cell key)
and returns the executed notebook and the result as text, so a worker needs the gum_utils
package installed and nothing of the client's disk. Each cell runs in a scratch directory of
its own, removed afterwards. The client writes what comes back into the book's run folder.
Imports no torch.
"""

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

from ..core.results import RunResult
from .fingerprint import code_fingerprint
from .kernels import KERNEL_ENV, KERNEL_START_TIMEOUT_S, ONE_CELL_AT_A_TIME, WARM, warm_engine
from .scratch import cell_scratch

STARTED_TOPIC = "gum-cell-started"  # a worker logs each start: the client counts the cells run again


class _ParametersTheNotebookChecks(logging.Filter):
    """A notebook's parameter cell names only the cell's axes; the notebook checks every other name
    itself (a misspelt one fails it), so papermill's warning about each of them is noise in the grid."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Passed unknown parameter")


logging.getLogger("papermill").addFilter(_ParametersTheNotebookChecks())


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
    with ONE_CELL_AT_A_TIME, cell_scratch() as scratch:
        outcome, raised = _execute_in(scratch, job)
    if raised and outcome.status == "error":
        raise CellFailed(outcome)
    return outcome


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


def _execute_in(scratch: Path, job: CellJob) -> tuple[CellOutcome, bool]:
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
        # Written once, at the end (or where a cell raised): not after each of its cells.
        papermill.execute_notebook(str(notebook), str(executed), parameters=parameters, kernel_name="python3",
                                   engine_name=warm_engine(), request_save_on_cell_execute=False,
                                   progress_bar=False, log_output=False, start_timeout=KERNEL_START_TIMEOUT_S)
    except Exception as exc:  # the executed notebook keeps the traceback
        if isinstance(exc, papermill.PapermillExecutionError):  # the cell's own exception, not papermill's
            return f"{exc.ename}: {exc.evalue}"[:2000]
        return f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        WARM.reset()
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


class KernelShutdown(WorkerPlugin):
    """Shut the warm kernel down when a Dask worker closes."""

    name = "gum-kernel-shutdown"
    idempotent = True

    def teardown(self, worker) -> None:
        WARM.shutdown()
