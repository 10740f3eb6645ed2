"""Open the built book in headless Chromium, as a reader would, and check that it shows everything.

    python -m gum_utils.report.browser_check book/_build/html --screenshots DIR

Opens the index and every page of the table of contents, and checks that every image loaded
(complete, with a natural width), that each analysis page has at least one figure, that no
page loads anything from the network, and that local links point at files that exist. Saves
screenshots of the index and of one chapter. Exits 1 with the list of problems otherwise.

Uses Debian's chromium and chromedriver; Selenium Manager is never asked to download anything.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..archs import ARCHITECTURES
from .book import FIGURE_PAGES

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000")
SCREENSHOT_HEIGHT_LIMIT = 4000  # px: a whole chapter, without a screenshot the size of a poster

# What the page shows, gathered in the browser in one go.
INSPECT_PAGE = """
const article = document.querySelector('article, .bd-article, main') || document.body;
const external = [];
for (const el of document.querySelectorAll('script[src], link[href], img[src], iframe[src], source[src]')) {
  const url = el.src || el.href || '';
  const fetched = el.tagName !== 'LINK' || /stylesheet|preload|icon|modulepreload/.test(el.rel);
  if (fetched && /^(https?:)?\\/\\//.test(el.getAttribute('src') || el.getAttribute('href') || '')) external.push(url);
}
return {
  title: document.title,
  ready: document.readyState,
  images: Array.from(document.images).map(i => ({src: i.currentSrc || i.src, complete: i.complete,
                                                  width: i.naturalWidth})),
  figures: article.querySelectorAll('img').length,
  external: external,
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
};
"""


@dataclass
class Report:
    pages: int = 0
    images: int = 0
    problems: list = field(default_factory=list)
    screenshots: list = field(default_factory=list)


# --- which pages --------------------------------------------------------------------------

def built_pages(html_dir: Path) -> list[str]:
    """The documents Sphinx built: the toc's pages and the run pages outside it."""
    index = html_dir / "searchindex.js"
    if not index.exists():
        raise FileNotFoundError(f"{index} is missing: is {html_dir} a built book?")
    text = index.read_text()
    start, end = text.index("(") + 1, text.rindex(")")
    return json.loads(text[start:end])["docnames"]


def needs_figure(docname: str) -> bool:
    name = docname.rsplit("/", 1)[-1]
    return docname.startswith("report/") and name.startswith(FIGURE_PAGES)


def pick_chapter(docnames: list[str]) -> str | None:
    """The chapter to photograph: the first architecture page, else any analysis page."""
    figures = [d for d in docnames if needs_figure(d)]
    chapters = sorted((d for d in figures if "architecture-" in d), key=lambda d: _arch_rank(d.rsplit("-", 1)[-1]))
    return chapters[0] if chapters else figures[0] if figures else None


def _arch_rank(arch: str) -> tuple:
    return (ARCHITECTURES.index(arch), "") if arch in ARCHITECTURES else (len(ARCHITECTURES), arch)


# --- the browser --------------------------------------------------------------------------

def start_browser(profile_dir: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # if Selenium Manager ever ran, it must not download
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.set_capability("goog:loggingPrefs", {"browser": "SEVERE"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    return driver


def open_page(driver, path: Path) -> dict:
    driver.get(path.as_uri())
    deadline = time.monotonic() + 20
    while driver.execute_script("return document.readyState") != "complete" and time.monotonic() < deadline:
        time.sleep(0.1)
    return driver.execute_script(INSPECT_PAGE)


def console_errors(driver) -> list[str]:
    try:
        return [entry["message"] for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
    except Exception:  # a driver without the log endpoint: the DOM checks still stand
        return []


def screenshot(driver, path: Path, whole_page: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if whole_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(max(int(height), 1000), SCREENSHOT_HEIGHT_LIMIT))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    return path


# --- the checks ---------------------------------------------------------------------------

def image_problems(docname: str, page: dict) -> list[str]:
    return [f"{docname}: image did not load: {image['src']}" for image in page["images"]
            if not image["complete"] or not image["width"]]


def link_problems(docname: str, page: dict) -> list[str]:
    """Local links (pages, downloads, figures) must point at files that exist."""
    missing = []
    for href in page["links"]:
        url = urlparse(href)
        if url.scheme == "file" and not Path(unquote(url.path)).exists():
            missing.append(f"{docname}: broken link to {unquote(url.path)}")
    return sorted(set(missing))


def page_problems(docname: str, page: dict, errors: list[str]) -> list[str]:
    problems = image_problems(docname, page) + link_problems(docname, page)
    problems += [f"{docname}: loads from the network: {url}" for url in page["external"]]
    problems += [f"{docname}: browser error: {message}" for message in errors]
    if needs_figure(docname) and page["figures"] == 0:
        problems.append(f"{docname}: an analysis page without a figure")
    return problems


def check_book(html_dir: Path, screenshots: Path | None) -> Report:
    html_dir = html_dir.resolve()
    report = Report()
    docnames = built_pages(html_dir)
    chapter = pick_chapter(docnames)
    with tempfile.TemporaryDirectory(prefix="gum-chromium-") as profile_dir:
        driver = start_browser(profile_dir)
        try:
            for docname in ["index"] + [d for d in docnames if d != "index"]:
                check_one(driver, html_dir, docname, report)
                if screenshots and docname in ("index", chapter):
                    name = "index.png" if docname == "index" else f"chapter-{docname.rsplit('/', 1)[-1]}.png"
                    report.screenshots.append(screenshot(driver, screenshots / name, docname != "index"))
        finally:
            driver.quit()
    return report


def check_one(driver, html_dir: Path, docname: str, report: Report) -> None:
    path = html_dir / f"{docname}.html"
    if not path.exists():
        report.problems.append(f"{docname}: listed as built but {path} is missing")
        return
    page = open_page(driver, path)
    report.pages += 1
    report.images += len(page["images"])
    report.problems += page_problems(docname, page, console_errors(driver))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("html_dir", type=Path, help="the built HTML, e.g. book/_build/html")
    parser.add_argument("--screenshots", type=Path, help="folder for screenshots of the index and one chapter")
    args = parser.parse_args(argv)
    try:
        report = check_book(args.html_dir, args.screenshots)
    except FileNotFoundError as error:
        print(f"browser_check: {error}", file=sys.stderr)
        return 1
    for path in report.screenshots:
        print(f"screenshot: {path}")
    if report.problems:
        print(f"browser_check: {len(report.problems)} problem(s) in {report.pages} pages:", file=sys.stderr)
        for problem in report.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    print(f"browser_check: {report.pages} pages and {report.images} images, all loaded")
    return 0


if __name__ == "__main__":
    from ..stopping import run_command

    sys.exit(run_command("gum_utils.report.browser_check", main))
