"""The plan cache is a cache: a bad entry or an unwritable folder never fails a run."""

import errno
import types

import pytest

from gum_utils.planner import trace as planner
from gum_utils.planner import record
from gum_utils.planner import cache as plan_cache
from gum_utils.core.config import RunConfig

CONFIG = RunConfig("llama", optimizer="sgd", steps=1, batch_size=2, device="cpu")


@pytest.fixture
def traced(monkeypatch):
    """The planner replaced by a known peak; the list counts its traces."""
    traces = []
    monkeypatch.setattr(planner, "plan", lambda config: traces.append(config) or types.SimpleNamespace(peak_bytes=123))
    return traces


@pytest.mark.parametrize("content", [b'{"peak_bytes": 12', b"null", b"[1, 2]", b'{"config": {}}', b'{"peak_bytes": "x"}',
                                     b'{"peak_bytes": -5}', b'{"peak_bytes": true}', b"\xff\xfe", b""])
def test_a_bad_entry_is_named_once_ignored_and_rewritten(tmp_path, monkeypatch, capsys, traced, content):
    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path))
    entry = record._cache_file(CONFIG, "peak_bytes")
    entry.write_bytes(content)
    assert record.planned_peak_bytes(CONFIG) == 123 and len(traced) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"warning: plan cache entry {entry} ") \
        and err.rstrip().endswith("ignored, traced again and rewritten"), err
    assert record.cached_peak_bytes(CONFIG) == 123  # rewritten whole
    assert record.planned_peak_bytes(CONFIG) == 123 and len(traced) == 1  # read, not traced again
    assert capsys.readouterr().err == ""


def test_a_bad_entry_read_for_the_guide_is_named_and_counts_as_not_planned(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path))
    record._cache_file(CONFIG, "peak_bytes").write_text("null")
    assert record.cached_peak_bytes(CONFIG) is None
    assert "holds no peak_bytes count (found null)" in capsys.readouterr().err


def _not_a_folder(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return blocker / "plans"


@pytest.mark.parametrize("where", ["GUM_PLAN_CACHE", "XDG_CACHE_HOME", "HOME"])
def test_an_unwritable_cache_folder_means_traced_not_stored_said_once(tmp_path, monkeypatch, capsys, traced, where):
    for variable in ("GUM_PLAN_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(where, str(_not_a_folder(tmp_path)))
    assert [record.planned_peak_bytes(CONFIG) for _ in range(3)] == [123] * 3 and len(traced) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not writable (Not a directory): plans are traced and not stored" in err, err
    assert plan_cache.folder_problem() == err.removeprefix("warning: ").rstrip("\n")  # the grid's line


def test_a_read_only_file_system_means_traced_not_stored(tmp_path, monkeypatch, capsys, traced):
    """As under a read-only HOME (the tests run as root here, where a chmod would not stop a write)."""
    def read_only(path, text):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path / "ro"))
    monkeypatch.setattr(plan_cache, "write_atomically", read_only)
    assert record.planned_peak_bytes(CONFIG) == 123 and record.planned_peak_bytes(CONFIG) == 123
    err = capsys.readouterr().err
    assert err == (f"warning: plan cache folder {tmp_path / 'ro'} is not writable (Read-only file system): plans are "
                   "traced and not stored (set GUM_PLAN_CACHE to a writable folder, or to off)\n")


def test_the_grid_says_once_before_any_cell_that_the_cache_folder_is_unwritable(tmp_path, monkeypatch, capsys):
    from gum_utils.study import grid

    monkeypatch.setenv("GUM_PLAN_CACHE", str(_not_a_folder(tmp_path)))

    def stop(args, jobs):
        raise KeyboardInterrupt  # where the first cell would start

    monkeypatch.setattr(grid, "_open_cluster", stop)
    assert grid.main(["--profile", "smoke", "--out", str(tmp_path / "runs"), "--arch", "vit"]) == 130
    warning = capsys.readouterr().err.splitlines()[0]
    assert warning.startswith("gum_utils.study.grid: warning: plan cache folder ") and "not writable" in warning
    monkeypatch.setenv("GUM_PLAN_CACHE", str(tmp_path / "fine"))
    assert plan_cache.folder_problem() is None
