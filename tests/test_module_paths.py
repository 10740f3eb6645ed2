"""Every `gum_utils.<dotted>` or `gum_utils/<path>` the project names (code, messages, help texts,
book, README, Makefile, notebooks) exists: a module or package, then at most one top-level name in it."""

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".txt", ".ipynb", ".cfg", ""}
SKIPPED_FOLDERS = {".git", ".venv", "_build", "runs", "report", "results", "__pycache__", ".ipynb_checkpoints"}
DOTTED = re.compile(r"\bgum_utils(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
SLASHED = re.compile(r"\bgum_utils(?:/[A-Za-z0-9_.]+)+/?")

# Stale names in files another helper owns right now; each entry must still be there (so the list
# shrinks as they are fixed): (file, the stale name).
OWNED_ELSEWHERE: set = set()  # none now


def scanned_files():
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        folders = relative.parts[:-1]
        # pip's editable install writes gum_utils.egg-info/ (a build output, git-ignored) into the checkout
        if path.is_file() and path.suffix in SCANNED_SUFFIXES and path.name != "tokenizer.json" \
                and not SKIPPED_FOLDERS & set(folders) and not any(f.endswith(".egg-info") for f in folders):
            yield relative


def module_file(parts: list[str]) -> Path | None:
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def dotted_resolves(name: str) -> bool:
    """The longest prefix that is a module, then at most one name defined at its top level."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        found = module_file(parts[:end])
        if found is not None:
            rest = parts[end:]
            return not rest or (len(rest) == 1 and rest[0] in top_level_names(found))
    return False


def slashed_resolves(name: str) -> bool:
    return (ROOT / name.rstrip("/.")).exists()


def unresolved(text: str) -> set[str]:
    return ({m for m in DOTTED.findall(text) if not dotted_resolves(m)}
            | {m.rstrip(".") for m in SLASHED.findall(text) if not slashed_resolves(m)})


def test_the_resolver_knows_modules_packages_and_their_names():
    assert dotted_resolves("gum_utils.study.cluster") and dotted_resolves("gum_utils.report")
    assert dotted_resolves("gum_utils.study.cell.run_cell") and dotted_resolves("gum_utils.ARCHITECTURES")
    assert not dotted_resolves("gum_utils.cluster") and not dotted_resolves("gum_utils.core.launch")
    assert not dotted_resolves("gum_utils.study.cell.no_such_function")
    assert slashed_resolves("gum_utils/report/book.py") and slashed_resolves("gum_utils/archs/")
    assert not slashed_resolves("gum_utils/book.py")
    assert unresolved("see `gum_utils.tables` and gum_utils/data.py.") == {"gum_utils.tables", "gum_utils/data.py"}


def test_every_module_path_the_project_names_exists():
    stale, pending = [], set()
    for relative in scanned_files():
        if relative == Path(__file__).resolve().relative_to(ROOT):
            continue  # this file names stale paths as its examples
        for name in unresolved((ROOT / relative).read_text(errors="replace")):
            if (str(relative), name) in OWNED_ELSEWHERE:
                pending.add((str(relative), name))
            else:
                stale.append(f"{relative}: {name}")
    assert stale == []
    assert pending == OWNED_ELSEWHERE, f"fixed since, drop from OWNED_ELSEWHERE: {OWNED_ELSEWHERE - pending}"
