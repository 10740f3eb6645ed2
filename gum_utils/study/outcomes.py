"""What a cell left on disk: whether it is done, what is corrupt, a tuned cell reused from its shared twin,
and a finished cell's new files swapped in whole. Imports no torch.
"""

import os
import shutil
import sys

from ..core.results import ResultFileError, RunResult, notebook_problem, write_temporary
from .cell import error_result
from .tasks import Task


def reuse_twins(tasks: list[Task], twins: list[Task]) -> int:
    """Copy a finished twin (same cell key: same parameters and code) instead of rerunning it."""
    finished = {twin.key: twin for twin in twins if is_done(twin)}
    reused = 0
    for task in tasks:
        twin = finished.get(task.key)
        if twin is not None and not is_done(task):
            task.output.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(twin.result_path, task.result_path)
            shutil.copyfile(twin.output, task.output)  # the notebook last: it marks the cell finished
            reused += 1
    return reused


def is_done(task: Task, retry_failed: bool = False) -> bool:
    """A readable result for these parameters and this code, beside a readable executed notebook
    (a recorded failure counts, unless retried)."""
    if not task.result_path.exists() or not task.output.exists() or corrupt_file(task):
        return False
    result = RunResult.from_json(task.result_path)
    return result.cell_key == task.key and not (retry_failed and result.status == "error")


def corrupt_file(task: Task) -> str | None:
    """'<file>: <why>' for a cell's result or notebook that exists but cannot be read; None if none."""
    if task.result_path.exists():
        try:
            RunResult.from_json(task.result_path)
        except ResultFileError as error:
            return str(error)
    if task.output.exists():
        problem = notebook_problem(task.output)
        if problem:
            return f"{task.output}: {problem}"
    return None


def report_corrupt(tasks: list[Task]) -> int:
    """Say which files of the cells about to be redone were corrupt, and why."""
    found = [(task, corrupt_file(task)) for task in tasks]
    found = [(task, problem) for task, problem in found if problem]
    for task, problem in found:
        print(f"redoing {task.name}: {problem}", flush=True)
    return len(found)


def save_outcome(task: Task, outcome) -> str:
    """Write a cell's new result and notebook to temporaries, then swap them in: a write that fails
    (a full disk, a read-only folder) leaves the old pair as it was, and the cell counts as failed."""
    staged = []
    try:
        task.output.parent.mkdir(parents=True, exist_ok=True)
        staged.append((write_temporary(task.result_path, outcome.result_text), task.result_path))
        if outcome.notebook_text is not None:
            staged.append((write_temporary(task.output, outcome.notebook_text), task.output))
    except OSError as error:
        for tmp, _ in staged:
            tmp.unlink()
        return _unwritten(task, error, "its old files stay as they were")
    task.output.unlink(missing_ok=True)  # an existing notebook marks the cell finished: none beside a new result
    for tmp, path in staged:  # renames in one folder: the new result, then the notebook that marks it done
        os.replace(tmp, path)
    return outcome.status


def record_error(task: Task, error: str) -> str:
    """A failure with no notebook (the worker or the cluster broke): the next grid runs the cell again."""
    task.output.unlink(missing_ok=True)
    try:
        error_result(task.parameters, task.key, error).to_json(task.result_path)
    except OSError as write_error:
        return _unwritten(task, write_error, "the next grid runs it again")
    return "error"


def _unwritten(task: Task, error: OSError, then: str) -> str:
    """A cell whose files could not be written (a full disk, a read-only folder): said, counted failed."""
    print(f"gum_utils.study.grid: {task.name}: its new files could not be written ({error.strerror or error}); "
          f"the cell counts as failed and {then}", file=sys.stderr, flush=True)
    return "error"

