"""The book: built from a few real smoke runs into a temporary copy of book/, then read back.

The slow tests run the grid for six smoke cells (ViT, SGD and Adam, every strategy), build the
book from them with gum_utils.report.book (warnings are errors), and check the HTML as files and in
headless Chromium. The fast ones check the table of contents and the missing-results message.
"""

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gum_utils import STRATEGIES
from gum_utils.report import book
from gum_utils.core.results import RunResult

ROOT = Path(__file__).resolve().parent.parent
BOOK_SOURCES = ("_config.yml", "intro.md", "methods.md", "appendix.md", "templates", "_static")
ARCH, OPTIMIZERS, PROFILE = "vit", ("sgd", "adam"), "smoke"
MULTI = "shared-ddp2"  # the regime of runs over two processes (DDP)
REPORT = f"report/{PROFILE}"
ANALYSIS_PAGES = [f"{REPORT}/setup", f"{REPORT}/architecture-{ARCH}", f"{REPORT}/overview", f"{REPORT}/claims",
                  f"{REPORT}/environment"]


def run_module(*args, cwd=ROOT, timeout=600):
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def copy_book_sources(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in BOOK_SOURCES:
        source = ROOT / "book" / name
        if source.is_dir():
            shutil.copytree(source, target / name)
        elif source.exists():
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def built_book(tmp_path_factory):
    """(book directory, html directory) of a book built from six fresh smoke runs and one run
    over two processes (a regime of its own)."""
    book_dir = copy_book_sources(tmp_path_factory.mktemp("book"))
    run_module("gum_utils.study.grid", "--profile", PROFILE, "--out", str(book_dir / "runs"), "--arch", ARCH,
               "--optimizer", *OPTIMIZERS, "--jobs", "2")
    run_module("gum_utils.study.grid", "--profile", PROFILE, "--out", str(book_dir / "runs"), "--arch", ARCH,
               "--optimizer", OPTIMIZERS[0], "--strategy", "standard", "--stage", "shared", "--world-size", "2")
    whole_notebook(book_dir / OTHER_PROFILE_PAGE)  # another profile's run: never built into this profile's book
    done = run_module("gum_utils.report.book", "--profile", PROFILE, "--book-dir", str(book_dir))
    html = book_dir / "_build" / "html"
    assert str(html / "index.html") in done.stdout  # the command says where the book is
    return book_dir, html


OTHER_PROFILE_PAGE = "runs/paper/shared/vit/sgd-standard-s0.ipynb"


def run_docnames() -> list[str]:
    return [f"runs/{PROFILE}/shared/{ARCH}/{optimizer}-{strategy}-s0"
            for optimizer in OPTIMIZERS for strategy in STRATEGIES]


class ImageSources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs).get("src", ""))


def image_sources(page: Path) -> list[str]:
    parser = ImageSources()
    parser.feed(page.read_text())
    return parser.sources


@pytest.mark.slow
def test_every_chapter_is_in_the_html(built_book):
    _, html = built_book
    expected = ["index", "intro", "methods", "appendix", f"{REPORT}/runs-{ARCH}"] + ANALYSIS_PAGES + run_docnames()
    missing = [docname for docname in expected if not (html / f"{docname}.html").exists()]
    assert not missing, f"pages missing from the build: {missing}"
    assert not (html / REPORT / "architecture-llama.html").exists(), "a page for an architecture without results"
    assert "claims, checked" in (html / REPORT / "claims.html").read_text()
    appendix = (html / REPORT / f"runs-{ARCH}.html").read_text()
    assert all(f"{optimizer} · {strategy} · seed 0" in appendix for optimizer in OPTIMIZERS for strategy in STRATEGIES)
    # the run pages are built outside the toc: no page's sidebar lists them (it did, every run on every page)
    assert f"runs/{PROFILE}/shared/{ARCH}/" not in (html / "intro.html").read_text()
    assert not (html / OTHER_PROFILE_PAGE).with_suffix(".html").exists()
    # nor in the search index: a search finds the analysis pages (and the runs pages that list the runs)
    index = (html / "searchindex.js").read_text()
    index = json.loads(index[index.index("(") + 1:index.rindex(")")])
    found = {index["docnames"][page] for pages in index["terms"].values()
             for page in (pages if isinstance(pages, list) else [pages])}
    assert f"{REPORT}/claims" in found and f"{REPORT}/runs-{ARCH}" in found
    assert not any(docname.startswith("runs/") for docname in found)


def test_the_build_reads_the_toc_and_the_run_pages_and_leaves_out_every_other_source(tmp_path):
    contents = {"root": "intro", "parts": [{"chapters": [{"file": "methods", "sections": [{"file": "report/cpu/setup"}]},
                                                         {"file": "appendix", "sections": [{"file": "report/cpu/runs-vit"}]}]}]}
    assert book.toc_docnames(contents) == {"intro", "methods", "report/cpu/setup", "appendix", "report/cpu/runs-vit"}
    for name in ("intro.md", "methods.md", "appendix.md", "report/cpu/setup.ipynb", "report/cpu/runs-vit.md",
                 "runs/cpu/shared/vit/sgd-standard-s0.ipynb", "runs/cpu/shared/vit/sgd-standard-s0.json",
                 "runs/cpu/shared/vit/cut-s0.ipynb", "runs/smoke/shared/vit/sgd-standard-s0.ipynb",
                 "report/smoke/setup.ipynb", "templates/setup.ipynb", "_build/html/_sources/intro.md", ".logs/x.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    built = book.toc_docnames(contents) | {"runs/cpu/shared/vit/sgd-standard-s0"}
    assert book.sources_left_out(tmp_path, built) == [
        "report/smoke/setup.ipynb", "runs/cpu/shared/vit/cut-s0.ipynb", "runs/smoke/shared/vit/sgd-standard-s0.ipynb",
        "templates/setup.ipynb"]


@pytest.mark.slow
def test_a_run_over_two_processes_is_shown_beside_the_one_process_runs(built_book):
    book_dir, html = built_book
    result = RunResult.from_json(book_dir / "runs" / PROFILE / MULTI / ARCH / f"{OPTIMIZERS[0]}-standard-s0.json")
    assert result.status == "ok", result.error
    assert result.summary["world_size"] == 2 and result.summary["parallel"] == "ddp"
    chapter = (html / REPORT / f"architecture-{ARCH}.html").read_text()
    assert f"{MULTI} regime" in chapter and "shared regime" in chapter
    assert (html / "runs" / PROFILE / MULTI / ARCH / f"{OPTIMIZERS[0]}-standard-s0.html").exists()


@pytest.mark.slow
def test_every_figure_referenced_exists(built_book):
    _, html = built_book
    missing, figures = [], {}
    for page in html.rglob("*.html"):
        sources = [s for s in image_sources(page) if not s.startswith("data:")]
        figures[page.relative_to(html).with_suffix("").as_posix()] = len(sources)
        missing += [f"{page.relative_to(html)}: {s}" for s in sources if not (page.parent / s).resolve().is_file()]
    assert not missing, f"figures referenced but not written: {missing}"
    for docname in (f"{REPORT}/architecture-{ARCH}", f"{REPORT}/overview", f"{REPORT}/claims"):
        assert figures.get(docname, 0) >= 1, f"{docname} shows no figure"


@pytest.mark.slow
def test_downloads_and_tables_are_written(built_book):
    book_dir, html = built_book
    for name in ("runs", "steps", "evals", "best", "cells", "claims"):
        assert (book_dir / REPORT / "data" / f"{name}.csv").stat().st_size > 0
    assert list((html / "_downloads").rglob("best.csv")), "the overview's CSV is not offered for download"


@pytest.mark.slow
def test_the_browser_sees_every_page_and_figure(built_book, tmp_path):
    _, html = built_book
    done = run_module("gum_utils.report.browser_check", str(html), "--screenshots", str(tmp_path), timeout=300)
    assert "all loaded" in done.stdout
    assert (tmp_path / "index.png").stat().st_size > 0
    assert (tmp_path / f"chapter-architecture-{ARCH}.png").stat().st_size > 0


def test_no_results_says_to_run_the_grid(tmp_path, capsys):
    copy_book_sources(tmp_path)
    assert book.main(["--profile", "paper", "--book-dir", str(tmp_path)]) == 1
    assert "make grid PROFILE=paper" in capsys.readouterr().err


def test_runs_outside_the_book_are_refused(tmp_path, capsys):
    book_dir = copy_book_sources(tmp_path / "book")
    assert book.main(["--profile", PROFILE, "--book-dir", str(book_dir), "--runs", str(tmp_path / "elsewhere")]) == 1
    assert "must lie inside the book directory" in capsys.readouterr().err


def test_the_appendix_lists_runs_per_architecture_in_study_order(tmp_path):
    for path in ("shared/llama/sgd-standard-s0", "shared/vit/cgd-standard-s1", "shared/vit/sgd-accumulation-s0",
                 "shared/vit/sgd-standard-s0", "shared/vit/.adam-standard-s0.partial", "sweep/vit/adam-lr0.001-s0"):
        notebook = tmp_path / "runs" / PROFILE / f"{path}.ipynb"
        notebook.parent.mkdir(parents=True, exist_ok=True)
        notebook.write_text("{}")
    pages = book.run_pages(tmp_path / "runs" / PROFILE, tmp_path)
    assert [(p.arch, p.regime, p.stem) for p in pages] == [
        ("vit", "shared", "sgd-standard-s0"), ("vit", "shared", "sgd-accumulation-s0"),
        ("vit", "shared", "cgd-standard-s1"), ("vit", "sweep", "adam-lr0.001-s0"),
        ("llama", "shared", "sgd-standard-s0")]
    assert book.run_title(pages[3]) == "adam · lr 0.001 · seed 0"
    entries = book.appendix_pages(PROFILE, pages, tmp_path)
    # the run pages are linked from their architecture's page, not listed in the toc (built as orphans)
    assert entries == [{"file": f"{REPORT}/runs-vit"}, {"file": f"{REPORT}/runs-llama"}]
    vit_page = (tmp_path / REPORT / "runs-vit.md").read_text()
    assert vit_page.count("no result file") == 4
    assert "| [adam · lr 0.001 · seed 0](../../runs/{}/sweep/vit/adam-lr0.001-s0.ipynb) | sweep |".format(PROFILE) in vit_page


def whole_notebook(path: Path) -> Path:
    import nbformat

    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1\n" * 100)]), path)
    return path


def test_the_book_with_the_loopback_down_is_one_line_at_once(tmp_path, capsys, monkeypatch):
    """As under `unshare -rn` (lo down): binding 127.0.0.1 fails; the kernels would wait 60 s each."""
    import socket
    import time

    book_dir = copy_book_sources(tmp_path / "book")
    RunResult(config={"arch": ARCH}, records=[{"loss": 1.0}], summary={"loss": 1.0}).to_json(
        book_dir / "runs" / PROFILE / "shared" / ARCH / "sgd-standard-s0.json")

    def unreachable(self, address):
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket.socket, "bind", unreachable)
    started = time.perf_counter()
    assert book.main(["--profile", PROFILE, "--book-dir", str(book_dir), "--no-build"]) == 1
    assert time.perf_counter() - started < 5
    assert capsys.readouterr().err == (
        "gum_utils.report.book: executing the book's notebooks (Jupyter kernels) needs the loopback interface "
        "(127.0.0.1), which does not answer here (Network is unreachable); bring it up (ip link set lo up)\n")
    assert not (book_dir / REPORT).exists()  # stopped before executing anything


def test_a_corrupt_result_stops_the_book_naming_the_file_before_anything_runs(tmp_path, capsys):
    book_dir = copy_book_sources(tmp_path / "book")
    runs = book_dir / "runs" / PROFILE / "shared" / ARCH
    RunResult(config={"arch": ARCH}, records=[{"loss": 1.0}], summary={"loss": 1.0}).to_json(runs / "sgd-standard-s0.json")
    (runs / "adam-standard-s0.json").write_text('{"config": {"ar')
    (runs / "adam-accumulation-s0.json").write_text("null")
    assert book.main(["--profile", PROFILE, "--book-dir", str(book_dir), "--no-build"]) == 1
    err = capsys.readouterr().err
    assert "2 result file(s) cannot be read" in err and "Traceback" not in err
    assert f"{runs / 'adam-standard-s0.json'}: is not valid JSON" in err
    assert f"{runs / 'adam-accumulation-s0.json'}: holds null, not a result object" in err
    assert not (book_dir / REPORT).exists()  # stopped before executing anything


def test_a_truncated_run_notebook_is_left_out_with_a_note_on_its_page(tmp_path):
    runs = tmp_path / "runs" / PROFILE / "shared"
    good = whole_notebook(runs / ARCH / "sgd-standard-s0.ipynb")
    cut = whole_notebook(runs / ARCH / "sgd-checkpointing-s0.ipynb")
    cut.write_text(cut.read_text()[: cut.stat().st_size // 2])
    only = whole_notebook(runs / "llama" / "adam-standard-s0.ipynb")
    only.write_text("[1]")
    pages, left_out = book.readable_pages(book.run_pages(runs.parent, tmp_path), tmp_path)
    assert [p.stem for p in pages] == [good.stem]
    assert sorted(p.stem for p in left_out) == ["adam-standard-s0", "sgd-checkpointing-s0"]
    entries = book.appendix_pages(PROFILE, pages, tmp_path, left_out)
    assert [e["file"] for e in entries] == [f"{REPORT}/runs-vit", f"{REPORT}/runs-llama"]
    vit_page = (tmp_path / REPORT / "runs-vit.md").read_text()
    assert "```{warning}" in vit_page and "left out of the book" in vit_page
    assert f"`runs/{PROFILE}/shared/{ARCH}/sgd-checkpointing-s0.ipynb`: is not a readable notebook" in vit_page


def fake_build(succeeds: bool):
    """Stands in for Jupyter Book: writes a page into --path-output, prints Sphinx's progress lines,
    and exits 0 only when it `succeeds`."""
    class Build:
        def __init__(self, command, **kwargs):
            html = Path(command[command.index("--path-output") + 1]) / "_build" / "html"
            html.mkdir(parents=True)
            (html / ("index.html" if succeeds else "half.html")).write_text("new")
            self.stdout = iter(["reading sources... [  3%] intro\n", "reading sources... [  7%] methods\n",
                                "reading sources... [ 12%] appendix\n", "\x1b[01mwriting output... \x1b[39;49;00m[100%] intro\n"])

        def wait(self):
            return 0 if succeeds else 1
    return Build


def test_a_failed_build_keeps_the_last_good_book_and_a_good_one_replaces_it(tmp_path, monkeypatch, capsys):
    copy_book_sources(tmp_path)
    html = tmp_path / "_build" / "html"
    html.mkdir(parents=True)
    (html / "index.html").write_text("old")
    (html / "old-profile-page.html").write_text("old")
    monkeypatch.setattr(book.subprocess, "Popen", fake_build(succeeds=False))
    with pytest.raises(book.BookError, match=f"the last good book is kept: {html / 'index.html'}"):
        book.build_html(tmp_path, tmp_path)
    assert sorted(p.name for p in html.iterdir()) == ["index.html", "old-profile-page.html"]
    assert (html / "index.html").read_text() == "old"
    monkeypatch.setattr(book.subprocess, "Popen", fake_build(succeeds=True))
    capsys.readouterr()
    assert book.build_html(tmp_path, tmp_path) == html / "index.html"
    # one line per tenth of each phase reaches the console, the whole output the log
    assert capsys.readouterr().out == ("book: reading sources 0 %\nbook: reading sources 10 %\n"
                                       "book: writing output 100 %\n")
    assert "reading sources... [  7%] methods" in (tmp_path / "_build" / "build.log").read_text()
    assert [p.name for p in html.iterdir()] == ["index.html"] and (html / "index.html").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "_build").iterdir()) == ["build.log", "html"]  # no staging left


def test_a_failed_analysis_notebook_is_reported_without_terminal_colour_codes(tmp_path, monkeypatch):
    import papermill

    coloured = "\x1b[0;31mKeyError\x1b[0m: \x1b[1;32m'step'\x1b[0m"
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: (_ for _ in ()).throw(RuntimeError(coloured)))
    chapter = book.Chapter("overview", "report/cpu/overview", {}, {})
    with pytest.raises(book.BookError) as raised:
        book.execute_chapter(chapter, tmp_path)
    assert "RuntimeError: KeyError: 'step'" in str(raised.value) and "\x1b" not in str(raised.value)


def _probe_template(book_dir: Path, name: str, code: str) -> None:
    import nbformat

    template = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    template.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (book_dir / "templates").mkdir(parents=True, exist_ok=True)
    nbformat.write(template, book_dir / "templates" / f"{name}.ipynb")


def test_analysis_pages_share_a_warm_kernel_yet_each_starts_clean_in_its_own_book(tmp_path):
    import nbformat

    said = lambda output: nbformat.read(output, as_version=4).cells[0].outputs[0]["text"].split()  # noqa: E731
    first, second = tmp_path / "first", tmp_path / "second"
    _probe_template(first, "leave", "import matplotlib.pyplot as plt\nleft = plt.figure()\nprint('left')")
    # Over TCP two kernels started at once by two workers can be given the same port; one that lost its
    # IOPub port stays alive and never answers (a book build waited 300 s on one in CI): socket files.
    _probe_template(second, "probe", "import os, matplotlib.pyplot as plt\n"
                    "from ipykernel.connect import get_connection_info\n"
                    "print(get_connection_info(unpack=True)['transport'], os.getpid(), os.getcwd(), "
                    "'left' in dir(), len(plt.get_fignums()))")
    try:
        assert said(book.execute_chapter(book.Chapter("leave", "report/cpu/leave", {}, {}), first)) == ["left"]
        home = Path(book.ANALYSIS.kernel().connection_file).parent
        kernel_pid = book.ANALYSIS.kernel().provisioner.process.pid
        output = book.execute_chapter(book.Chapter("probe", "report/cpu/probe", {}, {}), second)
        assert said(output) == ["ipc", str(kernel_pid), str(second.resolve()), "False", "0"]
    finally:
        book.ANALYSIS.shutdown()
    assert not home.exists()  # its connection and socket files went with it


def test_a_failed_analysis_leaves_the_earlier_report_folder_as_it_was(tmp_path):
    earlier = tmp_path / "report" / "cpu"
    (earlier / "data").mkdir(parents=True)
    (earlier / "claims.ipynb").write_text("earlier")
    with pytest.raises(book.BookError):
        with book.fresh_report(tmp_path, "cpu") as report:
            assert list(report.iterdir()) == [report / "data"]  # empty while the analysis runs
            (report / "claims.ipynb").write_text("half")
            raise book.BookError("claims.ipynb failed")
    assert (earlier / "claims.ipynb").read_text() == "earlier"
    with book.fresh_report(tmp_path, "cpu") as report:
        (report / "claims.ipynb").write_text("new")
    assert (earlier / "claims.ipynb").read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["cpu"]  # nothing set aside is left
