"""The smoke profile end to end: every cell of the grid, the analysis, the book, a browser."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gum_utils import ARCHITECTURES, OPTIMIZERS, STRATEGIES

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run(*args, timeout):
    done = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_smoke_profile_grid_analysis_book_and_browser(tmp_path):
    book = tmp_path / "book"
    shutil.copytree(ROOT / "book", book, ignore=shutil.ignore_patterns("_build", "runs", "report", "_toc.yml"))
    out = run("gum_utils.grid", "--profile", "smoke", "--jobs", "2", "--out", str(book / "runs"), timeout=900)
    assert "ok 60" in out, out
    runs = book / "runs" / "smoke" / "shared"
    for arch in ARCHITECTURES:
        assert len(list((runs / arch).glob("[!.]*.ipynb"))) == len(OPTIMIZERS) * len(STRATEGIES)
    run("gum_utils.book", "--profile", "smoke", "--book-dir", str(book), timeout=900)
    html = book / "_build" / "html"
    pages = {p.relative_to(html).as_posix() for p in html.rglob("*.html")}
    for name in ("intro", "methods", "claims", "overview", "environment"):
        assert any(name in page for page in pages), (name, sorted(pages)[:20])
    for arch in ARCHITECTURES:
        assert any(f"architecture-{arch}" in page for page in pages), arch
        assert sum(f"/{arch}/" in page for page in pages) == len(OPTIMIZERS) * len(STRATEGIES)
    images = list((html / "_images").glob("*.png"))
    assert len(images) >= 4 * 4
    run("gum_utils.browser_check", str(html), "--screenshots", str(tmp_path / "shots"), timeout=600)
    assert (tmp_path / "shots").exists() and list((tmp_path / "shots").glob("*.png"))
