"""What a result depends on, as one hash: every file of the layers a run executes, and the versions
of torch and transformers. A cell whose fingerprint changed is run again; the report's files are
left out (a new figure does not change a number). Imports neither torch nor Dask.
"""

import hashlib
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
NOT_RESULTS = ("report",)  # folders of gum_utils whose code changes no result
LIBRARIES = ("torch", "transformers")


def fingerprinted_files(package: Path = PACKAGE) -> list[Path]:
    """Every file under the package but the report's and bytecode, in a fixed order."""
    return sorted(path for path in package.rglob("*") if path.is_file() and "__pycache__" not in path.parts
                  and path.relative_to(package).parts[0] not in NOT_RESULTS)


def library_versions() -> str:
    return " ".join(f"{name}=={metadata.version(name)}" for name in LIBRARIES)


def code_fingerprint(package: Path = PACKAGE) -> str:
    digest = hashlib.sha256(library_versions().encode())
    for path in fingerprinted_files(package):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
