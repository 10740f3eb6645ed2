"""Build the study's book for one profile: analysis notebooks, tables of numbers, the HTML.

    python -m gum_utils.report.book --profile cpu [--runs book/runs] [--book-dir book] [--out DIR] [--no-build]

1. executes the analysis templates (`book/templates/*.ipynb`) with papermill into
   `book/report/<profile>/`, one architecture chapter per architecture that has results;
2. writes the tidy tables as CSV under `book/report/<profile>/data/`;
3. writes `book/_toc.yml` for this profile (intro, methods, the analysis chapters, the
   environment, and an appendix with a page per architecture linking its executed run notebooks,
   which are built as pages outside the toc);
4. builds the HTML with Jupyter Book 1.x, warnings as errors, and prints where index.html is.

The grid executed the run notebooks already, so the build only renders. Imports no torch
(the notebooks it executes may).
"""

import argparse
import atexit
import multiprocessing.util
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..archs import ARCHITECTURES, REGISTRY as ARCHS
from ..core.results import RunResult, notebook_problem, result_files, unreadable_results
from ..core.strategies import ALL_STRATEGIES  # every strategy a run may have used, in order
from ..optim import OPTIMIZERS
from ..study import kernels, paths
from ..study.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BOOK = ROOT / "book"
REGIMES = ("shared", "tuned", "sweep")  # the order the appendix lists them in
# Pages whose reader expects a figure: the browser check asserts at least one on each.
FIGURE_PAGES = ("architecture-", "overview", "claims")
KERNEL_ENV = {**kernels.KERNEL_ENV, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
BUILD_OUTPUTS = ("html", ".doctrees", "jupyter_execute")  # what a build writes under _build


class BookError(RuntimeError):
    """A problem the reader can fix; main() prints it without a traceback."""


@dataclass(frozen=True)
class Chapter:
    """One analysis notebook to execute: a template, the page it becomes, its parameters."""
    template: str
    page: str  # docname relative to the book, without suffix
    parameters: dict
    placeholders: dict  # {{ name }} in the template's markdown cells -> the value for this page
    role: str = ""  # its place in the table of contents where not its template's (a page of no finished runs)

    @property
    def place(self) -> str:
        return self.role or self.template


@dataclass(frozen=True)
class RunPage:
    arch: str
    regime: str
    stem: str
    docname: str


# --- what the results hold ---------------------------------------------------------------

def profile_root(runs: Path, profile: str) -> Path:
    return runs / profile


def run_pages(runs_root: Path, book_dir: Path) -> list[RunPage]:
    """Every executed run notebook of the profile, in the order the appendix lists them."""
    pages = []
    for notebook in paths.run_notebooks(runs_root):
        where = paths.locate(notebook)
        docname = notebook.relative_to(book_dir).with_suffix("").as_posix()
        pages.append(RunPage(where.arch, where.regime, where.stem, docname))
    return sorted(pages, key=_run_order)


def _rank(value, order) -> tuple:
    """Known names in their study order, anything new after them, alphabetically."""
    return (order.index(value), "") if value in order else (len(order), str(value))


def _run_order(page: RunPage) -> tuple:
    named = paths.parse_stem(page.stem)
    return (_rank(page.arch, ARCHITECTURES), _rank(page.regime, REGIMES), _rank(named.get("optimizer"), OPTIMIZERS),
            _rank(named.get("strategy"), ALL_STRATEGIES), named.get("lr") or 0.0, named.get("seed", -1), page.stem)


def run_title(page: RunPage) -> str:
    named = paths.parse_stem(page.stem)
    if not named:
        return page.stem
    detail = f"lr {named['lr']:g}" if named["sweep"] else named["strategy"]
    return f"{named['optimizer']} · {detail} · seed {named['seed']}"


def architectures(pages: list[RunPage]) -> list[str]:
    return sorted({page.arch for page in pages}, key=lambda arch: _rank(arch, ARCHITECTURES))


def arch_title(arch: str) -> str:
    return ARCHS[arch].title if arch in ARCHS else arch


def require_results(runs_root: Path, profile: str) -> None:
    if not runs_root.is_dir() or not result_files(runs_root):
        raise BookError(f"no results for profile {profile!r} under {runs_root}: "
                        f"run `make grid PROFILE={profile}` first")


def require_readable_results(runs_root: Path) -> None:
    """Stop before anything runs when a result file cannot be read, naming each one and why."""

    problems = unreadable_results(runs_root)
    if problems:
        listed = "\n".join(f"  {path}: {reason}" for path, reason in problems.items())
        raise BookError(f"{len(problems)} result file(s) cannot be read:\n{listed}\n"
                        "rerun the grid (it redoes these cells) or remove them, then build the book again")


def readable_pages(pages: list[RunPage], book_dir: Path) -> tuple[list[RunPage], dict]:
    """The run pages whose notebook parses, and {page: why} for those left out of the book."""

    problems = {page: notebook_problem(book_dir / f"{page.docname}.ipynb") for page in pages}
    return [page for page in pages if not problems[page]], {page: why for page, why in problems.items() if why}


def require_loopback() -> None:
    """Jupyter's kernels talk over 127.0.0.1: with it down each notebook waits 60 s, six times over."""
    from ..study.cluster import ClusterUnavailable, check_loopback

    try:
        check_loopback(needed_by="executing the book's notebooks (Jupyter kernels)", otherwise="")
    except ClusterUnavailable as error:
        raise BookError(str(error)) from None


def require_inside(runs: Path, book_dir: Path) -> None:
    """The appendix pages are the run notebooks themselves, so they must lie in the book's tree."""
    try:
        runs.resolve().relative_to(book_dir.resolve())
    except ValueError:
        raise BookError(f"--runs {runs} must lie inside the book directory {book_dir}: "
                        "the book includes the executed run notebooks") from None


# --- executing the analysis templates ----------------------------------------------------

# The pages that show finished runs' data: (label, title) of the page that says none finished instead.
NEEDS_FINISHED = {"overview": ("overview-chapter", "Across architectures"),
                  "claims": ("claims-chapter", "The paper's claims, checked")}


def chapters(profile: str, runs_root: Path, book_dir: Path, archs: list[str]) -> list[Chapter]:
    from .tables import finished_any, runs_table

    report = f"report/{profile}"
    common = {"profile": profile, "runs_root": runs_root.resolve().relative_to(book_dir.resolve()).as_posix(),
              "data_dir": f"{report}/data"}
    runs = runs_table(runs_root)
    pages = [Chapter("setup", f"{report}/setup", dict(common), {})]
    for arch in archs:
        page, title = f"{report}/architecture-{arch}", arch_title(arch)
        pages.append(Chapter("architecture", page, dict(common, arch=arch), {"arch": arch, "arch_title": title})
                     if finished_any(runs, arch) else
                     unfinished_chapter("architecture", page, common, f"arch-{arch}", title, arch))
    for name in ("overview", "claims", "environment"):
        page = f"{report}/{name}"
        pages.append(unfinished_chapter(name, page, common, *NEEDS_FINISHED[name])
                     if name in NEEDS_FINISHED and not finished_any(runs) else Chapter(name, page, dict(common), {}))
    pages.insert(-1, Chapter("guide", f"{report}/guide", dict(common, guide_file=paths.GUIDE_IN_BOOK), {}))
    return pages


def unfinished_chapter(role: str, page: str, common: dict, label: str, title: str, arch: str | None = None) -> Chapter:
    """A page whose runs all failed: one sentence and what failed and why, in place of its analysis
    (which would be a page of pandas errors), under the label other pages link to."""
    scope = f"of {title}" if arch else "of this profile"
    parameters = {key: common[key] for key in ("profile", "runs_root")}
    return Chapter("unfinished", page, dict(parameters, arch=arch), {"label": label, "title": title, "scope": scope},
                   role)


# The analysis notebooks run one after another on one warm kernel per worker process: pandas, matplotlib
# and the report's modules are imported once, and the result files read once (tables caches them per
# process), where a fresh kernel per page paid both every time (4-6 s a page). Each page starts in an
# empty namespace (the kernel's reset; the inline backend closes every figure it shows), in the book's folder.
ANALYSIS = kernels.WarmKernel("gum-analysis-kernel", warm_up=(
    "import matplotlib.pyplot, pandas, IPython.display, gum_utils.report.claims, gum_utils.report.plots, "
    "gum_utils.report.tables; import gc; gc.freeze(); del gc"))
atexit.register(ANALYSIS.shutdown)


def _analysis_worker() -> None:
    """A pool worker's set-up: its kernel is shut down as the worker ends (a pool's workers end through
    multiprocessing's finalizers, not atexit)."""
    multiprocessing.util.Finalize(ANALYSIS, ANALYSIS.shutdown, exitpriority=10)


def execute_chapter(chapter: Chapter, book_dir: Path) -> Path:
    """Run one template with papermill on the worker's analysis kernel, in the book's folder (so
    relative paths read alike everywhere)."""
    import papermill

    os.environ.update(KERNEL_ENV)
    template = book_dir / "templates" / f"{chapter.template}.ipynb"
    output = book_dir / f"{chapter.page}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        ANALYSIS.run(f"import os; os.chdir({str(book_dir.resolve())!r})")
        papermill.execute_notebook(str(template), str(output), parameters=chapter.parameters, kernel_name="python3",
                                   engine_name=kernels.warm_engine(ANALYSIS), progress_bar=False, log_output=False,
                                   start_timeout=kernels.KERNEL_START_TIMEOUT_S)
    except Exception as error:  # the executed notebook keeps the traceback; say where it is
        raise BookError(f"{template.name} failed for {chapter.page}: {type(error).__name__}: "
                        f"{without_colours(str(error))[-1500:]}\n(the executed notebook with the traceback: "
                        f"{output})") from None
    finally:
        ANALYSIS.reset()
    finish_notebook(output, chapter.placeholders)
    return output


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def without_colours(text: str) -> str:
    """A kernel's traceback is coloured for a terminal; in a message or a log its codes are noise."""
    return ANSI_ESCAPE.sub("", text)


def finish_notebook(path: Path, placeholders: dict) -> None:
    """Fill the page's placeholders and hide the parameter cells (the page shows its data, not its inputs)."""
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        tags = cell.metadata.setdefault("tags", [])
        if ("parameters" in tags or "injected-parameters" in tags) and "remove-cell" not in tags:
            tags.append("remove-cell")
        if cell.cell_type == "markdown":
            cell.source = fill_placeholders(cell.source, placeholders)
    nbformat.write(notebook, path)


def fill_placeholders(text: str, values: dict) -> str:
    for name, value in values.items():
        text = text.replace("{{ " + name + " }}", str(value))
    return text


def execute_chapters(pages: list[Chapter], book_dir: Path, jobs: int) -> None:
    """The notebooks over `jobs` worker processes, each with its own kernel (kernels and event loops never
    share a process).
    A line as each one finishes; stopped (Ctrl-C, SIGTERM), the workers are ended at once rather
    than waited for (34 s)."""
    pool = ProcessPoolExecutor(max_workers=max(1, jobs), initializer=_analysis_worker)
    errors, started = [], time.perf_counter()
    try:
        futures = {pool.submit(execute_chapter, page, book_dir): page for page in pages}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                future.result()
            except BookError as error:
                errors.append(str(error))
            print(f"book: analysis {done}/{len(pages)} {futures[future].page}.ipynb "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
    except KeyboardInterrupt:
        for worker in list(getattr(pool, "_processes", {}).values()):  # their kernels see their parent go
            worker.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if errors:
        raise BookError("\n\n".join(errors))


@contextmanager
def fresh_report(book_dir: Path, profile: str):
    """An empty report folder (a chapter from an earlier run must not outlive its data); the earlier
    one is set aside meanwhile and comes back if the analysis fails or is stopped."""
    report = book_dir / "report" / profile
    earlier = report.with_name(f".earlier-{profile}")
    shutil.rmtree(earlier, ignore_errors=True)
    if report.exists():
        report.rename(earlier)
    (report / "data").mkdir(parents=True)
    try:
        yield report
    except BaseException:
        if earlier.exists():
            shutil.rmtree(report, ignore_errors=True)
            earlier.rename(report)
        raise
    shutil.rmtree(earlier, ignore_errors=True)


# --- the table of contents ---------------------------------------------------------------

def appendix_pages(profile: str, pages: list[RunPage], book_dir: Path, left_out: dict | None = None) -> list[dict]:
    """One generated page per architecture listing its runs (status included) and linking each run's page;
    a run notebook in `left_out` ({page: why}) is listed with the reason instead of a link.

    The run pages are not in the table of contents: Sphinx copies the whole toctree into every page it
    writes, so with 725 runs in the sidebar the build grew with the square of the runs (6 of its 7
    minutes). They are built as orphans (`sphinx_orphans`), reached from these pages."""
    left_out = left_out or {}
    entries = []
    for arch in architectures(pages + list(left_out)):
        own = [page for page in pages if page.arch == arch]
        docname = f"report/{profile}/runs-{arch}"
        lines = [f"# {arch_title(arch)} runs", "",
                 f"Every executed run notebook of `{arch}` in the `{profile}` profile, as the grid left it "
                 "(parameters, loss, time, memory, utilization, and what the model learned).", "",
                 "| run | regime | status |", "| --- | --- | --- |"]
        for page in own:
            result_path = book_dir / f"{page.docname}.json"
            status = RunResult.from_json(result_path).status if result_path.exists() else "no result file"
            link = os.path.relpath(book_dir / f"{page.docname}.ipynb", (book_dir / docname).parent)
            lines.append(f"| [{run_title(page)}]({Path(link).as_posix()}) | {page.regime} | {status} |")
        lines += left_out_lines([page for page in left_out if page.arch == arch], left_out, book_dir)
        page_path = book_dir / f"{docname}.md"
        page_path.parent.mkdir(parents=True, exist_ok=True)
        page_path.write_text("\n".join(lines) + "\n")
        entries.append({"file": docname})
    return entries


def left_out_lines(pages: list[RunPage], left_out: dict, book_dir: Path) -> list[str]:
    """A visible note for each run notebook the book could not include."""
    if not pages:
        return []
    lines = ["", "```{warning}", "These run notebooks could not be read and are left out of the book; "
             "rerun the grid (it redoes these cells):", ""]
    lines += [f"- `{page.docname}.ipynb`: {left_out[page]}" for page in pages]
    return lines + ["```"]


def toc(profile: str, analysis: list[Chapter], appendix: list[dict]) -> dict:
    by_template = {}
    for chapter in analysis:
        by_template.setdefault(chapter.place, []).append({"file": chapter.page})
    study = [{"file": "methods", "sections": by_template["setup"]}] + by_template["architecture"]
    study += by_template["overview"] + by_template["claims"] + by_template["guide"]
    return {
        "format": "jb-book",
        "root": "intro",
        "parts": [
            {"caption": f"The study ({profile} profile)", "chapters": study},
            {"caption": "Reference", "chapters": by_template["environment"]
             + [{"file": "appendix", "sections": appendix}]},
        ],
    }


def write_toc(book_dir: Path, content: dict) -> Path:
    import yaml

    path = book_dir / "_toc.yml"
    header = "# Generated by gum_utils.report.book for one profile; edit book.py, not this file.\n"
    path.write_text(header + yaml.safe_dump(content, sort_keys=False, allow_unicode=True))
    return path


# --- the HTML ----------------------------------------------------------------------------

def staging_dir(out: Path) -> Path:
    """An empty folder for a new build, inside _build (which the book's sources exclude)."""
    staging = out / "_build" / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def swap_in(staging: Path, out: Path) -> None:
    """Replace the previous build's outputs with the new ones (pages of another profile must not linger)."""
    for name in BUILD_OUTPUTS:
        new, current = staging / "_build" / name, out / "_build" / name
        if current.exists():
            current.rename(staging / f"previous-{name}")
        if new.exists():
            new.rename(current)
    shutil.rmtree(staging, ignore_errors=True)


SPHINX_PROGRESS = re.compile(r"^(reading sources|writing output)\.\.\. \[\s*(\d+)%\]")


SOURCE_SUFFIXES = (".md", ".ipynb", ".rst", ".myst")  # what Jupyter Book reads as pages


def toc_docnames(entry) -> set[str]:
    """Every page a table of contents names (its root, chapters and sections, at any depth)."""
    if isinstance(entry, list):
        return set().union(*map(toc_docnames, entry))
    if not isinstance(entry, dict):
        return set()
    own = {entry[key] for key in ("root", "file") if key in entry}
    return own.union(*(toc_docnames(value) for value in entry.values()))


def sources_left_out(book_dir: Path, built: set[str]) -> list[str]:
    """Every page source under the book that is not to be built (another profile's runs and report, a
    run notebook that cannot be read, anything else): the run pages lie outside the toc, so Sphinx
    no longer leaves out what the toc does not name by itself."""
    left_out = []
    for folder, subfolders, files in os.walk(book_dir):
        subfolders[:] = [name for name in subfolders if name != "_build" and not name.startswith(".")]
        for name in files:
            path = Path(folder, name).relative_to(book_dir)
            if path.suffix in SOURCE_SUFFIXES and path.with_suffix("").as_posix() not in built:
                left_out.append(path.as_posix())
    return sorted(left_out)


def write_build_config(book_dir: Path, left_out: list[str], run_pages_folder: str, staging: Path) -> Path:
    """The book's _config.yml for this build: the sources to leave out added to its exclude_patterns,
    and the folder whose pages are built outside the toc (`sphinx_orphans`)."""
    import yaml

    config = yaml.safe_load((book_dir / "_config.yml").read_text())
    config["exclude_patterns"] = list(config.get("exclude_patterns", [])) + left_out
    config.setdefault("sphinx", {}).setdefault("config", {})["gum_run_pages"] = run_pages_folder
    path = staging / "_config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return path


def build_html(book_dir: Path, out: Path, built: set[str] = frozenset(), run_pages_folder: str = "runs",
               jobs: int = 1) -> Path:
    """Build the pages in `built` (docnames; those under `run_pages_folder` outside the toc) into a fresh
    folder and swap it in only when the build succeeded: a failed build leaves the last good book where
    it was. Sphinx reads and writes the pages in `jobs` processes. The full log goes to a file, a line
    per tenth of each phase to the console."""
    staging = staging_dir(out)
    log = out / "_build" / "build.log"
    config = write_build_config(book_dir, sources_left_out(book_dir, built), run_pages_folder, staging)
    command = [sys.executable, "-m", "gum_utils.report.sphinx_parallel", str(max(1, jobs)), "build", str(book_dir),
               "--path-output", str(staging), "--toc", str(book_dir / "_toc.yml"), "--config", str(config),
               "-W", "--keep-going"]
    with open(log, "w") as handle:
        build = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=book_dir,
                                 text=True, errors="replace")
        shown: dict = {}
        for line in build.stdout:
            handle.write(line)
            show_progress(line, shown)
        returncode = build.wait()
    if returncode != 0 or not (staging / "_build" / "html" / "index.html").exists():
        shutil.rmtree(staging, ignore_errors=True)
        raise BookError(f"the book build failed (warnings count as errors):\n{build_problems(log)}\n"
                        f"(the whole log: {log})\n{kept_book(out)}")
    swap_in(staging, out)
    return out / "_build" / "html" / "index.html"


def show_progress(line: str, shown: dict) -> None:
    """Sphinx's "reading sources... [ 42%] page" as "book: reading sources 40 %", once per tenth."""
    match = SPHINX_PROGRESS.match(without_colours(line))
    if match:
        phase, percent = match[1], int(match[2]) // 10 * 10
        if percent > shown.get(phase, -1):
            shown[phase] = percent
            print(f"book: {phase} {percent} %", flush=True)


def kept_book(out: Path) -> str:
    index = out / "_build" / "html" / "index.html"
    return f"the last good book is kept: {index}" if index.exists() else "there was no earlier book to keep"


def build_problems(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    problems = [line for line in lines if "WARNING" in line or "ERROR" in line or "Error" in line]
    return "\n".join(problems[-40:] or lines[-40:])


# --- the command -------------------------------------------------------------------------

def make_book(profile: str, book_dir: Path = DEFAULT_BOOK, runs: Path | None = None, out: Path | None = None,
              build: bool = True, jobs: int = 2) -> Path | None:
    """The whole pipeline; returns index.html (None with build=False)."""
    from .tables import write_csv

    book_dir = book_dir.resolve()
    runs = (runs or book_dir / "runs").resolve()
    require_inside(runs, book_dir)
    runs_root = profile_root(runs, profile)
    require_results(runs_root, profile)
    require_readable_results(runs_root)
    require_loopback()
    pages, left_out = readable_pages(run_pages(runs_root, book_dir), book_dir)
    for page, why in left_out.items():
        print(f"gum_utils.report.book: leaving out {page.docname}.ipynb: {why}", file=sys.stderr)
    with fresh_report(book_dir, profile) as report:
        write_csv(runs_root, report / "data")
        analysis = chapters(profile, runs_root, book_dir, architectures(pages + list(left_out)))
        execute_chapters(analysis, book_dir, jobs)
    contents = toc(profile, analysis, appendix_pages(profile, pages, book_dir, left_out))
    write_toc(book_dir, contents)
    built = toc_docnames(contents) | {page.docname for page in pages}
    folder = runs_root.relative_to(book_dir).as_posix()
    return build_html(book_dir, (out or book_dir).resolve(), built, folder, jobs) if build else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu", choices=tuple(PROFILES))
    parser.add_argument("--book-dir", type=Path, default=DEFAULT_BOOK, help="the book's sources (default: book/)")
    parser.add_argument("--runs", type=Path, help="root of the executed runs, inside the book (default: BOOK/runs)")
    parser.add_argument("--out", type=Path, help="where _build/html goes (default: the book directory)")
    parser.add_argument("--no-build", action="store_true", help="execute the notebooks and write the toc only")
    parser.add_argument("--jobs", type=int, default=2, help="processes for the analysis notebooks and for Sphinx")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        index = make_book(args.profile, args.book_dir, args.runs, args.out, not args.no_build, args.jobs)
    except BookError as error:
        print(f"gum_utils.report.book: {error}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - started
    if index is None:
        print(f"analysis notebooks for {args.profile} in {args.book_dir / 'report' / args.profile} ({seconds:.0f} s)")
    else:
        print(f"book for {args.profile} built in {seconds:.0f} s: {index}")
    return 0


if __name__ == "__main__":
    from ..stopping import run_command

    sys.exit(run_command("gum_utils.report.book", main))
