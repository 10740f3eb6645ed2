"""The folder of the runs' plans: one small JSON file per configuration and code.

A cache is a cache: an entry that cannot be read (garbled, `null`, another shape) is named
once, ignored and written again; a folder that cannot be written means the plan is traced
and not stored, said once. A run never fails for it. Imports no torch (the grid checks the
folder before its first cell).
"""

import json
import os
import sys
import tempfile
from pathlib import Path

from ..core.results import write_atomically

PLAN_CACHE_VARIABLE = "GUM_PLAN_CACHE"  # a folder for the runs' plans (default ~/.cache/gum/plans), or "off"

_said: set[str] = set()  # what this process has warned of already


def cache_off() -> bool:
    return os.environ.get(PLAN_CACHE_VARIABLE) == "off"


def cache_folder() -> Path:
    folder = os.environ.get(PLAN_CACHE_VARIABLE) or Path(os.environ.get("XDG_CACHE_HOME") or
                                                         Path.home() / ".cache") / "gum" / "plans"
    return Path(folder)


def read_entry(file: Path, field_name: str) -> int | None:
    """The number an entry holds; None where there is none yet or it is not a cache entry
    (then named once: the caller traces again and the new entry replaces it)."""
    try:
        entry = json.loads(file.read_text())
    except (FileNotFoundError, NotADirectoryError):  # none yet (a folder that cannot be one is said on writing)
        return None
    except OSError as error:
        problem = f"cannot be read ({error.strerror or error})"
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        problem = f"is not valid JSON ({error})"
    else:
        value = entry.get(field_name) if isinstance(entry, dict) else None
        if type(value) is int and value >= 0:
            return value
        problem = f"holds no {field_name} count (found {json.dumps(entry)[:80]})"
    _warn_once(f"plan cache entry {file} {problem}: ignored, traced again and rewritten")
    return None


def store_entry(file: Path, text: str) -> None:
    """Write an entry whole (parallel workers may plan the same configuration: the last one stays);
    a folder that cannot be written is said once and the plan is simply not stored."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(file, text)
    except OSError as error:
        _warn_once(_unwritable(file.parent, error))


def folder_problem() -> str | None:
    """One line if the cache folder cannot be written (None: it can, or the cache is off)."""
    if cache_off():
        return None
    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".gum-write-check-"):
            pass
    except OSError as error:
        return _unwritable(folder, error)
    return None


def _unwritable(folder, error: Exception) -> str:
    why = getattr(error, "strerror", None) or error
    return (f"plan cache folder {folder} is not writable ({why}): plans are traced and not stored "
            f"(set {PLAN_CACHE_VARIABLE} to a writable folder, or to off)")


def _warn_once(message: str) -> None:
    if message in _said:
        return
    _said.add(message)
    print(f"warning: {message}", file=sys.stderr, flush=True)  # one line, in the run's notebook too
