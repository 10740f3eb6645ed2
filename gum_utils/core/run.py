"""`train(config)`: the one call that runs a cell, in this process or over several.

A config with `world_size` > 1 in a plain process goes to `launch`, which runs
`torchrun --nproc_per_node=world_size -m gum_utils.core.run FOLDER` and waits. Each rank trains
(`trainer.train_in_process` inside a process group); rank 0 writes the RunResult and the model's
full state into FOLDER, and `launch` reads them back: the result, and a freshly built model holding
that state (for a notebook's look at what it learned). So a notebook or the grid needs nothing
beyond the parameters. A rank that fails writes its own result and exits, which ends the launch.
"""

import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..archs import architecture
from . import distributed
from .config import RunConfig
from .results import RunResult
from .trainer import train_in_process


def train(config: RunConfig) -> RunResult:
    """Train one cell of the grid and return what it measured; never raises for diverged/oom/error.
    The trained model is released before this returns, cycles included, so what a caller does next
    (gpu_check's reference measurement builds a model of its own) never holds a paper-size model twice."""
    result, model = train_model(config)
    del model
    gc.collect()  # the run's own references (its optimizer, its step's closures) form cycles
    return result


def train_model(config: RunConfig):
    """As `train`, and also return the trained model (None if it could not be built).

    A multi-process config in a plain process is launched with torchrun; the model returned
    then is a fresh one holding the full state rank 0 saved. Inside a rank, the model is
    that rank's wrapped (DDP) or sharded (FSDP2) one, and a failure raises RankFailed.
    """
    if config.world_size > 1 and not distributed.launched_as_rank():
        return launch(config)
    return train_in_process(config)

CONFIG, RESULT, STATE = "config.json", "result.json", "model.pt"
OUTPUT_TAIL = 4000  # characters of torchrun's output kept in an error result


def command(world_size: int, folder: Path) -> list[str]:
    # --standalone: a rendezvous on a free local port, so parallel grid workers never collide.
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
            "-m", "gum_utils.core.run", str(folder)]


def _environment(world_size: int) -> dict:
    """The ranks import this very gum_utils, wherever the caller found it, and share its CPU threads."""
    import torch

    package_root = str(Path(__file__).resolve().parents[2])
    paths = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    threads = max(1, torch.get_num_threads() // world_size)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": str(threads)}


def _check_devices(config) -> None:
    import torch

    if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()):
        count = torch.cuda.device_count()
        if config.world_size > count:
            raise ValueError(f"world_size={config.world_size} needs one GPU per process; torch sees {count}")


def launch(config):
    """Run `config` over `config.world_size` processes; return (RunResult, model or None) as train_model does."""
    _check_devices(config)
    with tempfile.TemporaryDirectory(prefix="gum-ranks-") as folder:
        folder = Path(folder)
        (folder / CONFIG).write_text(json.dumps(config.to_dict()))
        done = subprocess.run(command(config.world_size, folder), env=_environment(config.world_size),
                              capture_output=True, text=True)
        if (folder / RESULT).exists():
            return RunResult.from_json(folder / RESULT), _load_model(config, folder / STATE)
        return _failed_result(config, folder, done), None


def _load_model(config, path: Path):
    import torch

    model = architecture(config.arch).build_model(config.size, config.pretrained)  # a checkpoint's own shape
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return model


def _failed_result(config, folder: Path, done: subprocess.CompletedProcess) -> RunResult:
    """The first failed rank's own result, else an error result with the end of torchrun's output."""
    failed = sorted(folder.glob("failed-rank*.json"))
    if failed:
        return RunResult.from_json(failed[0])
    output = (done.stdout + done.stderr)[-OUTPUT_TAIL:]
    return RunResult(config=config.to_dict(), status="error",
                     error=f"torchrun exited with status {done.returncode} and no result:\n{output}",
                     summary={"world_size": config.world_size, "parallel": config.parallel})


def main(argv=None) -> int:
    """One rank: train the config in FOLDER; rank 0 saves the result and the full model state there."""
    folder = Path((argv or sys.argv[1:])[0])
    config = RunConfig.from_dict(json.loads((folder / CONFIG).read_text()))
    try:
        result, model = train_in_process(config)
    except distributed.RankFailed as failed:
        rank = os.environ.get("RANK", "0")
        failed.result.error = f"rank {rank}: {failed.result.error}"
        failed.result.to_json(folder / f"failed-rank{rank}.json")
        return 1
    state = distributed.full_state_dict(model)
    if distributed.rank() == 0:
        import torch

        torch.save(state, folder / STATE)
        result.to_json(folder / RESULT)  # last: its presence says the run finished
    return 0


if __name__ == "__main__":
    distributed.end_rank(main())
