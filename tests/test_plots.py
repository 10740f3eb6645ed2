"""Each figure on a small synthetic grid: the panels and lines expected, failed cells marked."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from test_tables import write_grid, write_run  # noqa: E402

from gum_utils import STUDY_OPTIMIZERS as OPTIMIZERS  # noqa: E402
from gum_utils.report import plots, tables  # noqa: E402


def _cell(optimizer, strategy, seed, **_):
    if (optimizer, strategy) == ("cgd", "accumulation"):  # a whole cell diverged
        return {"status": "diverged", "losses": (2.0, None)}
    return {"level": 1.0 + 0.1 * OPTIMIZERS.index(optimizer) + 0.02 * seed}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = write_grid(tmp_path_factory.mktemp("grid"), _cell, archs=("vit", "llama"), seeds=(0, 1))
    return {"runs": tables.runs_table(root), "steps": tables.steps_table(root), "evals": tables.evals_table(root),
            "util": tables.utilization_table(root)}


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)


@pytest.mark.parametrize("x", ["step", "samples_seen", "time_s"])
def test_loss_curves(grid, x):
    fig = plots.loss_curves(grid["steps"], grid["evals"], "vit", x=x)
    assert len(fig.axes) == 3
    assert [len(ax.lines) for ax in fig.axes] == [5, 5, 5]  # cgd's diverged cell still gets its (short) line
    assert len(fig.axes[0].collections) >= 5  # CI bands and validation dots
    assert "cgd/accumulation/s0: diverged" in _texts(fig)
    assert fig.axes[0].get_xlabel() in plots.X_LABELS.values()


def test_loss_curves_refuse_an_unknown_axis(grid):
    with pytest.raises(ValueError):
        plots.loss_curves(grid["steps"], x="epochs")


def test_optimizer_colours_are_the_same_everywhere(grid):
    curves = plots.loss_curves(grid["steps"], arch="vit")
    bars = plots.step_time(grid["runs"], "vit")
    line = next(l for l in curves.axes[0].lines if l.get_label() == "adam")
    assert matplotlib.colors.same_color(line.get_color(), plots.OPTIMIZER_COLORS["adam"])
    assert any(matplotlib.colors.same_color(p.get_facecolor(), plots.OPTIMIZER_COLORS["adam"])
               for p in bars.axes[0].patches)


def test_heatmap_marks_the_failed_cell(grid):
    fig = plots.loss_heatmap(grid["runs"], "vit")
    heat_axes = [ax for ax in fig.axes if ax.get_title()]
    assert len(heat_axes) == 2
    assert "2/2 diverged" in _texts(fig) and "±" in _texts(fig)  # the half-width under each mean
    assert any(p.get_hatch() == "xx" for p in heat_axes[0].patches)


def test_memory_figure(grid):
    fig = plots.memory_figure(grid["runs"], "vit")
    peak, parts = fig.axes[:2]
    assert "X" in [t.get_text() for t in peak.texts]  # cgd/accumulation: no ok run for the peak
    assert len(parts.patches) == 4 * 15  # four parts stacked for every cell (bytes exist for the diverged too)


def test_time_and_utilization_bars(grid):
    for figure in (plots.step_time, plots.utilization):
        fig = figure(grid["runs"], "vit")
        assert len(fig.axes[0].patches) == 14 and "X" in _texts(fig)  # 15 cells, one with no ok run
    assert "CPU utilization" in plots.utilization(grid["runs"], "vit").axes[0].get_ylabel()


def test_utilization_timeline(grid):
    fig = plots.utilization_timeline(grid["util"], "vit")
    assert len(fig.axes) == 3 and [len(ax.lines) for ax in fig.axes] == [5, 5, 5]


def test_architectures_summary(grid):
    fig = plots.architectures_summary(grid["runs"])
    assert len(fig.axes) == 4 and all(ax.get_ylabel() for ax in fig.axes)
    legend = [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
    assert legend == list(OPTIMIZERS)  # what ran: no adamw


def test_lr_sensitivity_marks_the_choice_and_the_edge(tmp_path):
    sweeps = {"adam": {1e-4: 2.0, 1e-3: 1.0, 1e-2: 1.5}, "sgd": {0.01: 2.0, 0.1: 1.8, 1.0: 1.2}}
    for optimizer, losses in sweeps.items():
        for lr, loss in losses.items():
            for seed in (0, 1):
                write_run(tmp_path, optimizer=optimizer, regime="sweep", seed=seed, lr=lr, val_loss=loss + 0.01 * seed,
                          stem=f"{optimizer}-lr{lr:g}-s{seed}")
    fig = plots.lr_sensitivity(tables.runs_table(tmp_path), "vit")
    ax = fig.axes[0]
    stars = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 2 and ax.get_xscale() == "log"
    assert "edge of the swept range: sgd" in _texts(fig)  # sgd's best is its largest rate: widen the sweep
    # a diverged larger rate brackets sgd's best: it is shown, and the choice is no longer at the edge
    write_run(tmp_path, optimizer="sgd", regime="sweep", lr=10.0, status="diverged", stem="sgd-lr10-s0")
    fig = plots.lr_sensitivity(tables.runs_table(tmp_path), "vit")
    assert any(line.get_marker() == "x" for line in fig.axes[0].lines) and "edge" not in _texts(fig)


def test_an_architecture_whose_runs_all_failed_shows_its_failures(tmp_path):
    for optimizer in ("sgd", "adam"):  # e.g. a grid run with a bad seed: every cell ends in `error`, no step
        write_run(tmp_path, arch="vit", optimizer=optimizer, status="error", losses=(None,))
    write_run(tmp_path, arch="llama", optimizer="sgd")  # a good run beside them
    root = tmp_path / "cpu"
    runs, steps, evals = tables.runs_table(root), tables.steps_table(root), tables.evals_table(root)
    for x in ("step", "time_s"):
        fig = plots.loss_curves(steps, evals, arch="vit", x=x, runs_df=runs)
        assert "adam/standard/s0: error" in _texts(fig) and "sgd/standard/s0: error" in _texts(fig)
    assert [ax.get_title() for ax in plots.loss_curves(steps, evals, arch="vit").axes] == ["no step recorded"]


def test_equal_samples_curves_put_every_strategy_on_one_samples_axis(grid):
    fig = plots.equal_samples_curves(grid["steps"], "vit")
    optimizers = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in optimizers] == list(OPTIMIZERS)
    # standard (batch 4) trained on 12 samples before its last step: every strategy is cut there
    adam = optimizers[OPTIMIZERS.index("adam")]
    assert len(adam.lines) == 3 and max(line.get_xdata().max() for line in adam.lines) <= 12
    assert len({ax.get_xlim() for ax in optimizers}) == 1  # one shared axis
    cgd = optimizers[OPTIMIZERS.index("cgd")]
    assert len(cgd.lines) == 2  # its accumulation cell diverged: no line, not a wrong one


def test_memory_figure_shows_the_tensor_peak_where_runs_recorded_it(tmp_path):
    for strategy, tensors in (("standard", 40 * 2**20), ("accumulation", 10 * 2**20)):
        write_run(tmp_path, strategy=strategy, peak=800 * 2**20, tensor_peak=tensors)
    fig = plots.memory_figure(tables.runs_table(tmp_path), "vit")
    peak = fig.axes[0]
    assert "live tensors" in peak.get_title()
    assert sorted(bar.get_height() for bar in peak.patches) == pytest.approx([10, 40])  # MiB, not the 800 of RSS


def test_memory_figure_legend_clears_the_axis_label_and_the_peak_names_what_it_measures(grid):
    fig = plots.memory_figure(grid["runs"], "vit")
    fig.canvas.draw()
    peak, parts = fig.axes[:2]
    legend = parts.get_legend().get_window_extent()
    assert not legend.overlaps(parts.xaxis.label.get_window_extent())
    assert peak.get_ylabel() != "peak memory (MiB)" and peak.get_ylabel().startswith("peak memory (MiB, ")
