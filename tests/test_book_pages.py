"""Rendering faults checkable from the notebooks' JSON and the book's pages: what a reader sees once."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = {"remove-input", "remove-cell"}


def test_every_analysis_template_hides_its_code():
    shown = [(path.name, i) for path in sorted((ROOT / "book" / "templates").glob("*.ipynb"))
             for i, cell in enumerate(json.loads(path.read_text())["cells"])
             if cell["cell_type"] == "code" and not HIDDEN & set(cell["metadata"].get("tags", []))]
    assert shown == []


def test_the_index_cites_the_paper_and_links_the_decision_guide():
    intro = (ROOT / "book" / "intro.md").read_text()
    assert "arXiv 2608.08961" in intro and "<guide-chapter>`" in intro
    assert '"(guide-chapter)=\\n"' in (ROOT / "book" / "templates" / "guide.ipynb").read_text()


def test_what_the_model_learned_is_shown_once(monkeypatch):
    from gum_utils.study import notebook

    fig = plt.figure()
    shown = []
    monkeypatch.setattr(notebook, "architecture", lambda arch: SimpleNamespace(look=lambda model, config: fig))
    monkeypatch.setattr("IPython.display.display", shown.append)
    assert notebook.look(None, SimpleNamespace(arch="vit")) is None  # no cell value: no second figure
    assert len(shown) == 1 and shown[0].data.startswith(b"\x89PNG") and not plt.fignum_exists(fig.number)


@pytest.mark.parametrize("arch", ["vit", "modernbert", "llama", "nanovlm"])
def test_each_architectures_own_look_is_shown_once_and_leaves_no_figure_open(arch, monkeypatch):
    """The real look of a tiny model of each architecture (the text models' is a table)."""
    from gum_utils.core.config import RunConfig
    from gum_utils.study import notebook

    config = RunConfig(arch=arch, optimizer="sgd", strategy="standard", batch_size=2)
    model = notebook.architecture(arch).build_model(config.size).eval()
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    plt.close("all")
    assert notebook.look(model, config) is None
    assert len(shown) == 1 and shown[0] is not None and plt.get_fignums() == []


def test_the_pages_name_the_peak_they_show():
    from gum_utils.report import tables
    from gum_utils.study import notebook

    for name in ("architecture", "overview"):
        text = (ROOT / "book" / "templates" / f"{name}.ipynb").read_text()
        assert "tables.PEAK_MEMORY_LABEL" in text and '"peak memory (MiB)"' not in text
    assert "RSS" in tables.PEAK_MEMORY_LABEL and "RSS" in notebook.PEAK_LABEL


def test_every_run_notebook_lists_every_parameter_for_papermill_help():
    import papermill

    from gum_utils.study import notebook

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        listed = papermill.inspect_notebook(str(path))
        assert set(listed) == set(notebook.parameter_names()), path.name
        source = "".join(json.loads(path.read_text())["cells"][1]["source"])
        namespace = {}
        exec(source, namespace)  # the cell as written runs the profile's cell unchanged
        config = notebook.read_parameters(path.stem, namespace)[0]
        assert config == notebook.read_parameters(path.stem, {"profile": "cpu"})[0]


def test_a_run_page_shows_the_learning_rate_used_not_none():
    from gum_utils.core.results import RunResult
    from gum_utils.study import notebook

    result = RunResult(config={"arch": "vit", "optimizer": "adam", "lr": None}, status="ok",
                       summary={"lr": 0.001}, environment={})
    assert notebook.config_table(result).loc["lr", "value"] == "0.001 (the default for vit and adam)"
    given = RunResult(config={"arch": "vit", "optimizer": "adam", "lr": 0.01}, status="ok", summary={"lr": 0.01},
                      environment={})
    assert notebook.config_table(given).loc["lr", "value"] == "0.01"


def test_a_looks_mosaic_holds_each_image_whole_under_its_own_coloured_title():
    from gum_utils.archs.base import image_mosaic

    images = [np.full((4, 5), value) for value in (0.25, 0.5, 0.75)]
    fig = image_mosaic(images, ["a", "b", "c"], ["tab:green", "tab:red", "tab:green"], columns=2, suptitle="s")
    (ax,) = fig.axes
    canvas = np.ma.filled(ax.images[0].get_array(), np.nan)
    for image in images:  # each one a whole 4 x 5 block of its value, nowhere else
        rows, cols = np.nonzero(canvas == image[0, 0])
        assert len(rows) == 20 and np.ptp(rows) == 3 and np.ptp(cols) == 4
    assert np.isnan(canvas).sum() == canvas.size - 60  # the rest is background
    assert [(t.get_text(), t.get_color()) for t in ax.texts] == [("a", "tab:green"), ("b", "tab:red"), ("c", "tab:green")]
    plt.close(fig)
