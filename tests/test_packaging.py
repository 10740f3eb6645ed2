"""What the project promises installers: conda's environment.yml and pip's pyproject.toml agree."""

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_names_the_same_packages_and_versions_as_pyproject():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(entry["pip"] for entry in environment["dependencies"] if isinstance(entry, dict))
    listed = {str(Requirement(line)) for line in pip if not line.startswith("-")}
    declared = {str(Requirement(line)) for line in pyproject()["project"]["dependencies"]}
    assert listed == declared
    assert "--editable .[test]" in pip and "--constraint constraints.txt" in pip


def test_the_license_is_an_spdx_expression():
    assert pyproject()["project"]["license"] == "MIT"


def test_make_reproduce_installs_no_test_extras_and_make_test_does():
    makefile = (ROOT / "Makefile").read_text()
    stamp = next(block for block in makefile.split("\n\n") if "\n$(STAMP): " in "\n" + block)
    assert '-e ".[book]"' in stamp and "[test]" not in stamp
    assert "reproduce: $(STAMP)" in makefile and "test: $(TEST_STAMP)" in makefile
    assert "$(TEST_STAMP): $(STAMP)" in makefile and '-e ".[test]"' in makefile


def declared_distributions() -> set[str]:
    project = pyproject()["project"]
    lines = project["dependencies"] + [line for extra in project["optional-dependencies"].values() for line in extra]
    return {canonicalize_name(Requirement(line).name) for line in lines}


def third_party_imports(package: Path) -> set[str]:
    """Top-level names of every absolute import in the package that is neither stdlib nor its own."""
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {package.name}


def test_every_third_party_import_in_the_package_is_declared():
    distributions = importlib.metadata.packages_distributions()
    imports = third_party_imports(ROOT / "gum_utils")
    assert {"yaml", "jupyter_client", "torch", "pynvml"} <= imports  # the scan sees lazy imports too
    undeclared = {name: distributions.get(name) for name in imports
                  if not {canonicalize_name(d) for d in distributions.get(name, [])} & declared_distributions()}
    assert undeclared == {}


def test_torch_is_pinned_by_the_constraints_not_by_the_requirements():
    """A GPU or cluster user keeps their own torch build; the CPU path (`make`, -c constraints.txt) gets the pin."""
    torch = next(Requirement(line) for line in pyproject()["project"]["dependencies"] if line.startswith("torch"))
    pinned = next(Requirement(line) for line in (ROOT / "constraints.txt").read_text().splitlines()
                  if line.startswith("torch=="))
    assert not any(spec.operator == "==" for spec in torch.specifier)
    assert torch.specifier.contains("2.11.0") and torch.specifier.contains(next(iter(pinned.specifier)).version)
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
