"""The README is a short user guide that agrees with the project: its length, its numbers, its links."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_short_guide_with_the_two_commands_and_the_three_uses():
    assert len(README.splitlines()) <= 155
    for command in ("make reproduce", "make test", "make lab", "python -m gum_utils.plan", "--slurm"):
        assert command in README
    assert "arXiv 2608.08961" in README


def test_the_readme_states_the_pinned_torch_and_no_gpu_measurement():
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert set(re.findall(r"torch (\d+\.\d+(?:\.\d+)?)", README)) == {pinned}
    assert "H200" not in README and "5 seeds" in README


def test_every_docs_page_the_readme_names_exists_and_make_has_the_targets_it_names():
    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", README))
    assert named >= {"docs/performance.md", "docs/planner-internals.md", "docs/library.md", "docs/cluster.md"}
    assert all((ROOT / page).is_file() for page in named)
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    assert set(re.findall(r"`make ([\w-]+)", README)) <= targets
