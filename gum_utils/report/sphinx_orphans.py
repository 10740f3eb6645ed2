"""A Sphinx extension of the book: the run notebooks are pages outside the table of contents.

`gum_utils.report.book` leaves them out of the toc (Sphinx copies the whole toctree into every
page it writes, so 725 runs in the sidebar made the build grow with the square of the runs),
links them from each architecture's runs page, and names their folder in `gum_run_pages`.
Marked orphan here, Sphinx does not warn (an error under -W) that no toctree includes them. They
are left out of the search index too: stemming every word of 700 near-identical pages was a fifth of
the build, and a search for "loss" should find the analysis, not every run (their runs pages list them).
"""


def mark_run_pages(app, env) -> None:
    folder = app.config.gum_run_pages.rstrip("/") + "/"
    for docname in env.found_docs:
        if docname.startswith(folder):
            env.metadata[docname].update(orphan=True, nosearch=True)


def setup(app) -> dict:
    app.add_config_value("gum_run_pages", "runs", "env")
    app.connect("env-updated", mark_run_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
