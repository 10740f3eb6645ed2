"""What the four architecture notebooks share: reading their parameters, running, showing a run.

A notebook is a report of one run; everything it does beyond its parameters cell and its
architecture's own look is here, once.
"""

import dataclasses
import datetime
import tempfile
import types
from pathlib import Path

from ..archs import architecture
from ..choices import check_choice
from ..core.config import RunConfig
from .profiles import profile as get_profile

INTERACTIVE_RESULTS = Path(__file__).resolve().parents[2] / "results" / "interactive"
# Names a notebook accepts besides RunConfig's fields. None means "the profile's value".
NOTEBOOK_ONLY = ("profile", "result_path", "cell_key")
# What IPython and papermill put in a namespace that is not a parameter.
_NOT_PARAMETERS = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def _config_fields() -> tuple:
    return tuple(f.name for f in dataclasses.fields(RunConfig) if f.name != "arch")


def parameter_names() -> tuple:
    return NOTEBOOK_ONLY + _config_fields()


def _user_names(namespace: dict) -> dict:
    return {name: value for name, value in namespace.items()
            if not name.startswith("_") and name not in _NOT_PARAMETERS
            and not isinstance(value, (types.ModuleType, types.FunctionType, type))}


def read_parameters(arch: str, namespace: dict):
    """Validate a notebook's parameters (papermill only warns on unknown names) into a RunConfig.

    Returns (config, result_path, cell_key). Parameters left None take the profile's value
    for this cell of the grid.
    """
    given = _user_names(namespace)
    valid = parameter_names()
    for name in given:
        check_choice("notebook parameter", name, valid)
    prof = get_profile(given.get("profile"))
    values = prof.run_parameters(arch, given.get("optimizer") or "adam", given.get("strategy") or "standard",
                                 given.get("seed") or 0)
    values.update({k: v for k, v in given.items() if k in _config_fields() and v is not None})
    config = RunConfig.from_dict(values)
    result_path = given.get("result_path") or interactive_result_path(config)
    return config, Path(result_path), given.get("cell_key")


def interactive_result_path(config) -> Path:
    """Under the checkout's results/interactive/ wherever the notebook runs from; seed and time in
    the name, so a second run of the same cell does not overwrite the first."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return INTERACTIVE_RESULTS / f"{config.arch}-{config.optimizer}-{config.strategy}-s{config.seed}-{stamp}.json"


def _quiet_progress_bars() -> None:
    """transformers imports tqdm.auto, which in a kernel without ipywidgets warns on every run (its
    bars fall back to text, which is all a run's notebook needs)."""
    import warnings

    from tqdm import TqdmWarning

    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)


class RunFailed(RuntimeError):
    """An interactive run ended in `error`: the notebook stops here, with the whole message."""


class ResultNotWritable(OSError):
    """The run's result could not be written where it goes: said before training, not after it."""


def check_writable(result_path: Path) -> None:
    """Write and remove a scratch file beside the result, so training is not lost to a folder that refuses it."""
    folder = Path(result_path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".writable-"):
            pass
    except OSError as error:
        raise ResultNotWritable(f"{folder}: the run's result cannot be written there ({error.strerror or error}); "
                                "nothing was trained: pass result_path= a file in a writable folder") from None


def run(config, result_path: Path, cell_key: str | None = None):
    """Train, write the result file, and return (result, trained model) for the notebook's look.

    Run by hand (no cell key), a run that ends in `error` then fails the notebook, so papermill
    or Jupyter shows the failure; under the grid the result records it and the grid goes on.
    """
    check_writable(result_path)
    _quiet_progress_bars()
    from ..core.run import train_model  # torch loads here, when a notebook trains
    from ..planner.record import references

    result, model = train_model(config)
    result.summary.update(references(config))  # the planner's prediction beside what the run measured
    result.cell_key = cell_key
    result.to_json(result_path)
    if cell_key is None and result.status == "error":
        raise RunFailed(f"the run failed (its result: {result_path}): {result.error}")
    return result, model


def look(model, config) -> None:
    """The architecture's own look at what the trained model learned (its notebook's last figure).

    The text models' look is a table (a DataFrame), the others' a figure; None where there is
    nothing to show."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    shown = architecture(config.arch).look(model, config)
    if isinstance(shown, plt.Figure):
        show_figure(shown)
    elif shown is not None:
        display(shown)


def show_figure(fig) -> None:
    """Display a figure as one PNG, drawn once at its own layout, and close it.

    Left open, the inline backend would draw it again with a tight bounding box (half of what a
    figure costs, about 0.3 s a grid cell), and a returned figure would show twice."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    display(Image(data=png.getvalue()))


# Named apart from the memory panel's exact tensor bytes: on a CPU this peak is the process's RSS.
PEAK_LABEL = "peak memory (MiB; process RSS, max allocated on a GPU)"


def summary_table(result):
    """One row per figure a reader asks first: status, losses, time, memory."""
    import pandas as pd

    s, m = result.summary, result.memory
    rows = {
        "status": result.status + (f" ({result.error})" if result.error else ""),
        "steps": s.get("steps_completed"),
        "final train loss": s.get("final_loss"),
        "validation loss": s.get("val_loss"),
        "validation accuracy": s.get("val_accuracy"),
        "mean step time (ms)": None if s.get("mean_step_time_s") is None else 1000 * s["mean_step_time_s"],
        "samples / s": s.get("samples_per_s"),
        "model state + activations (MiB)": None if not m else sum(m.values()) / 2**20,
        PEAK_LABEL: None if s.get("peak_memory_bytes") is None else s["peak_memory_bytes"] / 2**20,
    }
    return pd.DataFrame({"value": rows})


def show_run(result) -> None:
    """The four panels every run gets: loss, step time, memory breakdown, utilization."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.6))
    _loss_panel(axes[0], result)
    _step_time_panel(axes[1], result)
    _memory_panel(axes[2], result)
    _utilization_panel(axes[3], result)
    config = result.config
    fig.suptitle(f"{config['arch']} · {config['optimizer']} · {config['strategy']} · seed {config['seed']}"
                 f" · status {result.status}")
    # A fixed layout: tight_layout measured every tick label again (a third of the figure's time).
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.26, top=0.82, wspace=0.28)
    show_figure(fig)


def _loss_panel(ax, result):
    steps = [r["step"] for r in result.records]
    ax.plot(steps, [r["loss"] for r in result.records], label="train (window)")
    if result.evals:
        ax.plot([e["step"] for e in result.evals], [e["val_loss"] for e in result.evals], "o-", label="validation")
    ax.set(xlabel="optimizer step", ylabel="loss", title="loss")
    ax.legend()


def _step_time_panel(ax, result):
    ax.plot([r["step"] for r in result.records], [1000 * r["step_time_s"] for r in result.records])
    ax.set(xlabel="optimizer step", ylabel="ms", title="time per step")


def _memory_panel(ax, result):
    parts = result.memory or {}
    ax.bar(list(parts), [v / 2**20 for v in parts.values()], color="tab:purple")
    ax.set(ylabel="MiB", title="memory breakdown")
    ax.tick_params(axis="x", rotation=20)


def _utilization_panel(ax, result):
    timeline = result.utilization.get("timeline", [])
    gpu = [s["gpu_util_percent"] for s in timeline]
    key, label = ("gpu_util_percent", "GPU") if any(v is not None for v in gpu) else ("cpu_percent", "process CPU")
    ax.plot([s["t_s"] for s in timeline], [s[key] for s in timeline])
    ax.set(xlabel="seconds", ylabel="%", title=f"{label} utilization")


def config_table(result):
    """The configuration the run used, and where it ran."""
    import pandas as pd

    env = result.environment
    rows = dict(result.config)
    if rows.get("lr") is None and result.summary.get("lr") is not None:  # the rate used, not "None"
        rows["lr"] = f"{result.summary['lr']:g} (the default for {rows.get('arch')} and {rows.get('optimizer')})"
    rows.update({key: env.get(key) for key in ("device", "device_name", "torch", "transformers", "git_commit")})
    return pd.DataFrame({"value": {k: str(v) for k, v in rows.items()}})
