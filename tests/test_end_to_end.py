"""The smoke profile end to end: every cell of the grid, a tuned subset, the analysis, the book, a browser."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gum_utils import ARCHITECTURES, STRATEGIES, STUDY_OPTIMIZERS

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(*args, timeout):
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_smoke_profile_grid_analysis_book_and_browser(tmp_path):
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("_build", "runs", "report", "_toc.yml"))
    grid = ("gum_utils.study.grid", "--profile", "smoke", "--jobs", "2", "--out", str(book / "runs"))
    out = run(*grid, "--stage", "shared", timeout=900)
    assert "ok 60" in out and "to run on 2 local worker(s)" in out, out  # a Dask LocalCluster of 2
    runs = book / "runs" / "smoke" / "shared"
    for arch in ARCHITECTURES:
        assert len(list((runs / arch).glob("[!.]*.ipynb"))) == len(STUDY_OPTIMIZERS) * len(STRATEGIES)
    # the tuning stages on a subset: the whole smoke sweep would double the test's time
    out = run(*grid, "--stage", "sweep", "tuned", "--arch", "vit", "--optimizer", "sgd", "adam", timeout=600)
    assert "stage sweep finished" in out and "stage tuned finished" in out, out
    assert len(list((runs.parent / "sweep" / "vit").glob("[!.]*.json"))) == 2 * 5
    assert len(list((runs.parent / "tuned" / "vit").glob("[!.]*.json"))) == 2 * len(STRATEGIES)
    run("gum_utils.report.book", "--profile", "smoke", "--book-dir", str(book), timeout=900)
    html = book / "_build" / "html"
    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html")}
    for name in ("intro", "methods", "claims", "overview", "environment"):
        assert any(name in page for page in pages), (name, sorted(pages)[:20])
    for arch in ARCHITECTURES:
        assert any(f"architecture-{arch}" in page for page in pages), arch
        tuned_and_swept = 2 * len(STRATEGIES) + 2 * 5 if arch == "vit" else 0
        assert sum(f"/{arch}/" in page for page in pages) == len(STUDY_OPTIMIZERS) * len(STRATEGIES) + tuned_and_swept
    vit_page = next(html.rglob("architecture-vit.html")).read_text()
    assert "tuned lr" in vit_page and "Loss by training time" in vit_page
    images = list((html / "_images").glob("*.png"))
    assert len(images) >= 4 * 4
    run("gum_utils.report.browser_check", str(html), "--screenshots", str(tmp_path / "shots"), timeout=600)
    assert (tmp_path / "shots").exists() and list((tmp_path / "shots").glob("*.png"))
