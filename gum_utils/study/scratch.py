"""Scratch folders of cells and kernels: named after the process that owns them, removed however a
cell ends, and removed by a later grid once their process is gone (killed). Imports neither torch nor Dask.
"""

import atexit
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

# Scratch folders are named <prefix><pid of the owning process>-<random>: a later grid removes
# those whose process is gone (killed), and never one whose process still runs.
CELL_PREFIX, KERNEL_PREFIX = "gum-cell-", "gum-kernel-"
_LIVE_SCRATCH: set = set()  # this process's scratch folders, removed at exit if a cell was cut short


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


atexit.register(_remove_live_scratch)  # a cell cut short by the worker's exit
