"""What a result depends on, as one hash: every file of the layers a run executes, and the versions
of torch and transformers. A cell whose fingerprint changed is run again; the report's files are
left out (a new figure does not change a number). Imports neither torch nor Dask.
"""

from pathlib import Path

from ..core import code_digest

PACKAGE = Path(__file__).resolve().parent.parent
NOT_RESULTS = ("report",)  # folders of gum_utils whose code changes no result
LIBRARIES = code_digest.LIBRARIES


def fingerprinted_files(package: Path = PACKAGE) -> list[Path]:
    """Every file under the package but the report's and bytecode, in a fixed order."""
    return sorted(path for path in package.rglob("*") if path.is_file() and "__pycache__" not in path.parts
                  and path.relative_to(package).parts[0] not in NOT_RESULTS)


def library_versions() -> str:
    return code_digest.library_versions(LIBRARIES)


def code_fingerprint(package: Path = PACKAGE) -> str:
    return code_digest.code_digest(package, fingerprinted_files(package), LIBRARIES)
