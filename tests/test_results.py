"""Reading result files: a file that is not a result of this schema is named, with the reason."""

import json

import pytest

from gum_utils.core.results import (SCHEMA_VERSION, ResultFileError, RunResult, load_results, notebook_problem,
                                    unreadable_results)


def a_result(tmp_path, name="r.json"):
    return RunResult(config={"arch": "vit"}, cell_key="k").to_json(tmp_path / name)


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
