"""One run's result: its schema, its atomic JSON file, and many files read into one tidy table.

This module imports neither torch nor transformers, so the grid runner and the analysis
notebooks read results quickly.
"""

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

STATUSES = ("ok", "diverged", "oom", "error")
SCHEMA_VERSION = 1


@dataclass
class RunResult:
    config: dict
    status: str = "ok"
    error: str | None = None
    records: list[dict] = field(default_factory=list)  # one per optimizer step
    evals: list[dict] = field(default_factory=list)  # validation at a few points and at the end
    summary: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # bytes: params, grads, optimizer_state, activations
    utilization: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    cell_key: str | None = None  # set by the grid: parameters and code this result was made from
    schema_version: int = SCHEMA_VERSION

    def to_json(self, path) -> Path:
        """Write atomically: a reader sees the old file or the whole new one, never half of it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(_finite(asdict(self)), indent=1, allow_nan=False))
        return path

    @classmethod
    def from_json(cls, path) -> "RunResult":
        """Read a result file; a file that is not one (cut short, not an object, another schema)
        raises ResultFileError naming the file and what is wrong with it."""
        raw = _read_object(Path(path))
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in raw.items() if key in known})


class ResultFileError(ValueError):
    """A result file that cannot be read as a result: the message names the file and the reason."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = Path(path), reason


def _read_object(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text())
    except OSError as error:
        raise ResultFileError(path, f"cannot be read ({error.strerror or error})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultFileError(path, f"is not valid JSON (cut short or garbled: {error})") from None
    if not isinstance(raw, dict):
        raise ResultFileError(path, f"holds {_json_kind(raw)}, not a result object")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultFileError(path, f"has schema_version {version!r}; this code reads {SCHEMA_VERSION}")
    if not isinstance(raw.get("config"), dict):
        raise ResultFileError(path, "has no config object")
    problem = _shape_problem(raw)
    if problem:
        raise ResultFileError(path, problem)
    return raw


# What the book and the grid read of a result, by field: (the JSON types allowed, required).
_SHAPE = {"status": ((str,), True), "records": ((list,), True), "evals": ((list,), True),
          "summary": ((dict,), True), "error": ((str, type(None)), False), "memory": ((dict,), False),
          "utilization": ((dict,), False), "environment": ((dict,), False), "cell_key": ((str, type(None)), False)}


def _shape_problem(raw: dict) -> str | None:
    """Why a result that parses is still not one (a field missing or of the wrong type, an unknown
    status, a run "ok" with no steps); None when it is whole."""
    for name, (types, required) in _SHAPE.items():
        if name not in raw:
            if required:
                return f"has no {name!r} field"
        elif not isinstance(raw[name], types):
            wanted = " or ".join("null" if kind is type(None) else _json_kind(kind()) for kind in types)
            return f"has {name!r} {_json_kind(raw[name])}, not {wanted}"
    if raw["status"] not in STATUSES:
        return f"has status {raw['status']!r}, not one of {', '.join(STATUSES)}"
    if not all(isinstance(entry, dict) for entry in raw["records"] + raw["evals"]):
        return "has records or evals that are not objects"
    if raw["status"] == "ok" and not (raw["records"] and raw["summary"]):
        return "is status 'ok' but holds no steps or no summary"
    return None


def write_atomically(path: Path, text: str) -> None:
    """A temporary file beside `path`, flushed to disk, then renamed over it: readers see the old
    file or the whole new one."""
    tmp = write_temporary(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_temporary(path: Path, text: str) -> Path:
    """`text` in a new hidden file beside `path`, flushed to disk, for the caller to rename over
    `path`; nothing is left behind if the write fails (a full disk). Readable by all (mkstemp's
    0600 would hide runs from a book server)."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def _finite(value):
    """JSON has no NaN or infinity: a non-finite number becomes null (the status says why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def result_files(root) -> list[Path]:
    return sorted(Path(root).rglob("*.json"))


def load_results(root) -> list[RunResult]:
    """Every result under `root`; an unreadable file raises ResultFileError naming it."""
    return [RunResult.from_json(path) for path in result_files(root)]


def _json_kind(value) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number", dict: "an object"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def notebook_problem(path) -> str | None:
    """Why an executed notebook cannot be read (cut short, not a notebook); None when it parses."""
    import nbformat

    try:
        nbformat.read(path, as_version=4)
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    except Exception as error:  # nbformat's NotJSONError, a JSON that is no notebook, a bad version
        return f"is not a readable notebook ({type(error).__name__}: {str(error)[:200]})"
    return None


def unreadable_results(root) -> dict[Path, str]:
    """{path: reason} of every file under `root` that is not a readable result."""
    problems = {}
    for path in result_files(root):
        try:
            RunResult.from_json(path)
        except ResultFileError as error:
            problems[path] = error.reason
    return problems
