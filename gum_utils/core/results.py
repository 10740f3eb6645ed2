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
        raw = json.loads(Path(path).read_text())
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in raw.items() if key in known})


def write_atomically(path: Path, text: str) -> None:
    """A temporary file beside `path`, flushed to disk, then renamed over it: readers see the old
    file or the whole new one. Readable by all (mkstemp's 0600 would hide runs from a book server)."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


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
    return [RunResult.from_json(path) for path in result_files(root)]
