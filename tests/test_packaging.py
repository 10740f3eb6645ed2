"""What the project promises installers: conda's environment.yml and pip's pyproject.toml agree."""

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

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
