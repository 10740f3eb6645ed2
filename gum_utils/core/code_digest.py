"""One digest of code files and of the libraries they run on: what a cached result depends on.
The grid's cell key and the planner's cache both use it. Imports no torch."""

import hashlib
from importlib import metadata
from pathlib import Path

LIBRARIES = ("torch", "transformers")


def library_versions(libraries=LIBRARIES) -> str:
    return " ".join(f"{name}=={metadata.version(name)}" for name in libraries)


def code_digest(package: Path, files, libraries=LIBRARIES) -> str:
    """sha256 of the libraries' versions and each file's path (relative to `package`) and bytes."""
    digest = hashlib.sha256(library_versions(libraries).encode())
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
