"""A book from results where nothing finished: each page that shows finished runs' data says, in a
sentence, that none of its runs finished, and lists what failed and why (not pages of pandas errors)."""

import re
from html import unescape

import pytest

from gum_utils.study.dispatch import run_grid

from gum_utils.study.tasks import Task, tasks_for
from gum_utils.study.profiles import cells, profile
from test_book import copy_book_sources, run_module


def _text(page) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", page.read_text())))


@pytest.mark.slow
def test_a_book_of_failed_runs_says_so_on_each_page_and_shows_why(tmp_path):
    book_dir = copy_book_sources(tmp_path / "book")
    smoke = profile("smoke")
    tasks = tasks_for(smoke, book_dir / "runs", cells(smoke, ["vit"], ["sgd", "adam"], ["standard"]), jobs=1)
    failing = [Task(t.cell, dict(t.parameters, lr=-1.0), t.notebook, t.output, t.key, t.threads) for t in tasks]
    assert run_grid(failing, jobs=1, show_progress=False) == {"skipped": 0, "error": 2}
    run_module("gum_utils.report.book", "--profile", "smoke", "--book-dir", str(book_dir))  # as a reader runs it
    pages = book_dir / "_build" / "html" / "report" / "smoke"
    vit = _text(pages / "architecture-vit.html")
    assert "No run of ViT finished" in vit and vit.count("lr must be a number > 0") == 2
    assert 'id="arch-vit"' in (pages / "architecture-vit.html").read_text()  # other pages' links still land
    for name in ("overview", "claims"):
        assert "No run of this profile finished" in _text(pages / f"{name}.html")
