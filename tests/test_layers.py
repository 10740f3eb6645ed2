"""The package's layers: each imports only those below it, the report imports neither torch nor Dask,
and the cache key follows every file a result depends on."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gum_utils.study import fingerprint

PACKAGE = Path(__file__).resolve().parent.parent / "gum_utils"
# Each layer and what it may import of the package (itself always).
BASE = {"choices", "stopping"}  # a name check and how a command stops: below everything, importing nothing
ALLOWED = {
    "choices": set(),
    "stopping": set(),
    "archs": BASE,
    "optim": BASE,
    "core": BASE | {"archs", "optim"},
    "planner": BASE | {"archs", "optim", "core"},
    "study": BASE | {"archs", "optim", "core", "planner"},
    "report": BASE | {"archs", "optim", "core", "planner", "study"},
    # the planner's command line (gum_utils/plan.py), on top: it reads measured time costs through the report
    "plan": BASE | {"archs", "optim", "core", "planner", "study", "report"},
}


def layer_of(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def package_imports(path: Path) -> set[str]:
    """The top-level parts of gum_utils a module imports, wherever the import stands (inside functions too)."""
    tree, found = ast.parse(path.read_text()), set()
    own = path.relative_to(PACKAGE).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's own folder
                base = own[: len(own) - (node.level - 1)] if node.level > 1 else own
                parts = (*base, *(node.module or "").split(".")) if node.module else base
                if parts:
                    found.add(parts[0])
                else:  # "from . import x" at the top level
                    found.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("gum_utils."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("gum_utils."))
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if layer_of(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_each_module_imports_only_the_layers_below_it(path):
    layer = layer_of(path)
    wrong = package_imports(path) - ALLOWED[layer] - {layer}
    assert not wrong, f"{path.relative_to(PACKAGE)} ({layer}) imports {sorted(wrong)}"


def test_every_module_belongs_to_a_layer():
    top = {path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or path.is_dir()}
    assert top - {"__init__", "__pycache__", "assets"} == set(ALLOWED)


def test_the_report_imports_neither_torch_nor_dask_nor_transformers():
    check = ("import sys, gum_utils.report.book, gum_utils.report.browser_check, gum_utils.report.claims, "
             "gum_utils.report.plots, gum_utils.report.stats, gum_utils.report.tables; "
             "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'dask', 'distributed'}); "
             "print(heavy); sys.exit(bool(heavy))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cache_key_changes_with_a_file_added_to_the_training_layers(tmp_path):
    import shutil

    copy = tmp_path / "gum_utils"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = fingerprint.code_fingerprint(copy)
    (copy / "core" / "new_module.py").write_text("X = 1\n")
    added = fingerprint.code_fingerprint(copy)
    (copy / "report" / "new_figure.py").write_text("Y = 1\n")
    assert added != before  # a new training file is part of the key, with no list to keep
    assert fingerprint.code_fingerprint(copy) == added  # the report's code changes no result


def test_the_cache_key_names_the_torch_and_transformers_versions(monkeypatch):
    before = fingerprint.code_fingerprint()
    assert "torch==2.13.0" in fingerprint.library_versions() and "transformers==" in fingerprint.library_versions()
    monkeypatch.setattr(fingerprint, "LIBRARIES", ("torch", "numpy"))
    assert fingerprint.code_fingerprint() != before
