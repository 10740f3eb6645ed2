"""Jupyter Book's `build` command with Sphinx reading and writing the pages in several processes.

`python -m gum_utils.report.sphinx_parallel JOBS build ...` is `jupyter-book build ...` with
`jobs` passed to the function the command calls (its command line has no option for it).
sphinx_multitoc_numbering, which sphinx_external_toc always loads, does not say whether it is
parallel safe, so Sphinx would read serially (and warn, which -W makes an error): it only
replaces a method of Sphinx's toctree collector at set-up, which the main process runs, so it
is declared safe here.
"""

import functools
import sys


def _declared_parallel_safe(setup):
    def wrapped(app):
        return dict(setup(app) or {}, parallel_read_safe=True, parallel_write_safe=True)
    return wrapped


def main(jobs: int, arguments: list[str]) -> None:
    import jupyter_book.sphinx
    import sphinx_multitoc_numbering
    from jupyter_book.cli.main import main as jupyter_book_command

    sphinx_multitoc_numbering.setup = _declared_parallel_safe(sphinx_multitoc_numbering.setup)
    jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx, jobs=jobs)
    jupyter_book_command(arguments)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
