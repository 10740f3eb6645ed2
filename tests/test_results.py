"""Reading result files: a file that is not a result of this schema is named, with the reason."""

import json

import pytest

from gum_utils.core.results import (SCHEMA_VERSION, ResultFileError, RunResult, load_results, notebook_problem,
                                    unreadable_results)


def a_result(tmp_path, name="r.json"):
    return RunResult(config={"arch": "vit"}, records=[{"loss": 1.0}], summary={"loss": 1.0}, cell_key="k").to_json(tmp_path / name)


@pytest.mark.parametrize("text, reason", [
    ('{"config": {"arch": "vi', "is not valid JSON \\(cut short or garbled"),
    ("null", "holds null, not a result object"),
    ("[1, 2, 3]", "holds an array, not a result object"),
    ('{"config": {}, "schema_version": 0}', f"has schema_version 0; this code reads {SCHEMA_VERSION}"),
    ('{"config": {}}', f"has schema_version None; this code reads {SCHEMA_VERSION}"),
    (f'{{"config": 3, "schema_version": {SCHEMA_VERSION}}}', "has no config object"),
])
def test_a_file_that_is_not_a_result_is_named_with_the_reason(tmp_path, text, reason):
    path = tmp_path / "adam-standard-s0.json"
    path.write_text(text)
    with pytest.raises(ResultFileError, match=f"^{path}: {reason}") as raised:
        RunResult.from_json(path)
    assert raised.value.path == path


def whole(**fields) -> str:
    """A whole result's JSON with `fields` changed (None: the field left out)."""
    raw = {"schema_version": SCHEMA_VERSION, "config": {"arch": "vit"}, "status": "ok", "records": [{"loss": 1.0}],
           "evals": [], "summary": {"loss": 1.0}}
    raw.update(fields)
    return json.dumps({key: value for key, value in raw.items() if value is not None})


@pytest.mark.parametrize("text, reason", [
    (whole(summary=None), "has no 'summary' field"),
    (whole(summary=[]), "has 'summary' an array, not an object"),
    (whole(status="bogus"), "has status 'bogus', not one of ok, diverged, oom, error"),
    (whole(status=3), "has 'status' a number, not a string"),
    (whole(records={"loss": 1}), "has 'records' an object, not an array"),
    (whole(records=[1, 2]), "has records or evals that are not objects"),
    (whole(error=5), "has 'error' a number, not a string or null"),
    (whole(cell_key=[]), "has 'cell_key' an array, not a string or null"),
    (whole(records=[], summary={}), "is status 'ok' but holds no steps or no summary"),
    (json.dumps({"schema_version": SCHEMA_VERSION, "config": {}}), "has no 'status' field"),
])
def test_a_result_that_parses_but_has_the_wrong_shape_is_named_and_redone(tmp_path, text, reason):
    path = tmp_path / "smoke" / "shared" / "vit" / "sgd-standard-s0.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ResultFileError, match=f"^{path}: {reason}$"):
        RunResult.from_json(path)
    assert unreadable_results(tmp_path) == {path: reason.replace("\\", "")}


def test_whole_results_of_each_status_pass_the_shape_check(tmp_path):
    for status in ("ok", "diverged", "oom"):
        (tmp_path / f"{status}.json").write_text(whole(status=status))
    RunResult(config={"arch": "vit"}, status="error", error="why", cell_key="k").to_json(tmp_path / "error.json")
    assert sorted(r.status for r in load_results(tmp_path)) == ["diverged", "error", "ok", "oom"]


def test_load_results_names_the_corrupt_file_and_unreadable_results_lists_only_it(tmp_path):
    good = a_result(tmp_path, "a.json")
    bad = tmp_path / "b.json"
    bad.write_text(good.read_text()[: len(good.read_text()) // 2])
    with pytest.raises(ResultFileError, match=f"{bad}: is not valid JSON"):
        load_results(tmp_path)
    assert list(unreadable_results(tmp_path)) == [bad]
    bad.unlink()
    assert [r.cell_key for r in load_results(tmp_path)] == ["k"] and unreadable_results(tmp_path) == {}


def test_a_truncated_notebook_is_a_problem_and_a_whole_one_is_not(tmp_path):
    import nbformat

    path = tmp_path / "run.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n" * 200)]), path)
    assert notebook_problem(path) is None
    path.write_text(path.read_text()[: path.stat().st_size // 2])
    assert "is not a readable notebook (NotJSONError" in notebook_problem(path)
    path.write_text(json.dumps([1]))
    assert "is not a readable notebook" in notebook_problem(path)
