"""The Dask loop: a stage's tasks not yet done submitted to the cluster, their outcomes written as they
come back, counted, and the progress shown. Imports no torch.
"""

import time
import uuid

from .cell import STARTED_TOPIC, CellFailed, CellJob, run_cell
from .fingerprint import code_fingerprint
from .outcomes import is_done, record_error, report_corrupt, save_outcome
from .tasks import Task


def cell_job(task: Task, notebook_text: str, fingerprint: str) -> CellJob:
    return CellJob(task.name, notebook_text, task.parameters, task.key, task.threads, fingerprint)


class GridCounts(dict):
    """The count of each status, when (seconds from the start) each seed's last cell finished, and
    how many cells started more than once (a worker died under them, or their notebook raised)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed_done_s: dict[int, float] = {}
        self.reran = 0

    def failed(self) -> int:
        return sum(n for status, n in self.items() if status not in ("ok", "skipped"))


class GridInterrupted(Exception):
    """Ctrl-C during a stage: what that stage had finished (kept on disk) travels with it."""

    def __init__(self, stage: str | None, counts: dict):
        super().__init__(stage)
        self.stage, self.counts = stage, counts


def run_grid(tasks: list[Task], jobs: int = 1, force: bool = False, retry_failed: bool = False,
             show_progress: bool = True, client=None, retries: int = 1) -> GridCounts:
    """Run the tasks not yet done on the Dask `client` (None: a local cluster of `jobs` workers).

    Returns the count of each status. A notebook that raises is run `retries` more times.
    """
    from .cluster import describe, open_client

    todo = [t for t in tasks if force or not is_done(t, retry_failed)]
    counts = GridCounts(skipped=len(tasks) - len(todo))
    if not force:
        report_corrupt(todo)
    if show_progress:
        where = describe(client) if client is not None else f"{jobs} local worker(s)"
        print(f"{len(tasks)} cells: {counts['skipped']} already done, {len(todo)} to run on {where}", flush=True)
    if not todo:
        return counts
    try:
        if client is None:
            with open_client(jobs) as local:
                return _dispatch_on(local, todo, counts, show_progress, retries)
        return _dispatch_on(client, todo, counts, show_progress, retries)
    except KeyboardInterrupt:
        raise GridInterrupted(None, counts) from None


def _dispatch_on(client, todo: list[Task], counts: GridCounts, show_progress: bool, retries: int) -> GridCounts:
    from distributed import as_completed
    from tqdm import tqdm

    started = time.perf_counter()
    left = {seed: sum(t.cell.seed == seed for t in todo) for seed in {t.cell.seed for t in todo}}
    starts: dict[str, int] = {}
    client.subscribe_topic(STARTED_TOPIC, lambda event: _count_start(starts, event))
    futures = _submit(client, todo, retries)
    try:
        with tqdm(total=len(todo), unit="cell", disable=not show_progress) as bar:
            for future in as_completed(futures):
                task = futures.pop(future)
                status = _collect(task, future)
                counts[status] = counts.get(status, 0) + 1
                left[task.cell.seed] -= 1
                if not left[task.cell.seed]:
                    counts.seed_done_s[task.cell.seed] = time.perf_counter() - started
                counts.reran = sum(n > 1 for n in starts.values())
                bar.set_postfix(failed=counts.failed(), reran=counts.reran, last=f"{task.name}:{status}")
                bar.update()
    finally:
        client.unsubscribe_topic(STARTED_TOPIC)
    return counts


def _count_start(starts: dict, event) -> None:
    _, message = event
    starts[message["key"]] = starts.get(message["key"], 0) + 1


def _submit(client, todo: list[Task], retries: int) -> dict:
    """One Dask task per cell; it carries the notebook's text, not its path."""
    fingerprint = code_fingerprint()
    texts = {notebook: notebook.read_text() for notebook in {task.notebook for task in todo}}
    futures = {}
    for task in todo:
        job = cell_job(task, texts[task.notebook], fingerprint)
        key = f"cell-{task.cell.arch}-{task.cell.stem}-{uuid.uuid4().hex[:8]}"  # unique: a rerun is a new task
        futures[client.submit(run_cell, job, key=key, retries=retries, pure=False)] = task
    return futures


def _collect(task: Task, future) -> str:
    """Write what a finished task brought back; return the cell's status."""
    try:
        outcome = future.result()
    except CellFailed as failed:  # the notebook raised on every try: its executed notebook shows why
        outcome = failed.outcome
    except Exception as exc:  # the worker died on every try, or the cluster broke: record, go on
        return record_error(task, f"{type(exc).__name__}: {exc}"[:2000])
    finally:
        future.release()
    return save_outcome(task, outcome)

