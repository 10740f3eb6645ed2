"""The grid's options checked before the first cell runs, each failure one line: the cells' configs, the
output folder (writable, one grid at a time), the device, the scheduler's address. Imports no torch.
"""

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from ..archs import ARCHITECTURES
from ..core.config import MAX_SEED, RunConfig
from ..core.strategies import ALL_STRATEGIES
from ..optim import STUDY_OPTIMIZERS
from .profiles import Profile, cells
from .tasks import STAGES, cell_parameters


class GridOptionError(ValueError):
    """An option the grid cannot run with, found before any cell starts: one line, exit code 2."""


def check_options(args, prof: Profile, subset: dict) -> None:
    """Every option a cell would fail on, checked now: raises GridOptionError with one line."""
    for option, valid in (("stage", STAGES), ("arch", ARCHITECTURES), ("optimizer", STUDY_OPTIMIZERS),
                          ("strategy", ALL_STRATEGIES), ("seed", ("integers",))):
        if getattr(args, option) == []:  # argparse takes `--stage` alone as an empty list: not "all"
            raise GridOptionError(f"--{option} needs one or more values ({', '.join(valid)}); leave it out for all")
    bad_seeds = [seed for seed in args.seed or () if not 0 <= seed <= MAX_SEED]
    if bad_seeds:
        raise GridOptionError(f"--seed takes integers from 0 to {MAX_SEED}, got {', '.join(map(str, bad_seeds))}")
    if args.parallel and args.world_size == 1:
        raise GridOptionError(f"--parallel {args.parallel} spans several processes: give --world-size N (N > 1) too")
    check_cell_configs(prof, subset)
    check_writable(args.out)
    if prof.device == "cuda" and not (args.scheduler or args.slurm) and local_gpu_count() == 0:
        raise GridOptionError(f"the {prof.name} profile runs every cell on a GPU (device cuda) and torch sees none "
                              "on this machine: use --profile cpu (or smoke) here, or GPU workers elsewhere "
                              "(--scheduler tcp://HOST:PORT, or --slurm --gpus-per-job N)")
    if args.scheduler:
        check_scheduler(args.scheduler)


def check_cell_configs(prof: Profile, subset: dict) -> None:
    """Each selected cell's RunConfig, built as its notebook builds it: the config's rules (data and
    size, world size and micro-batches, ...) are checked in one place, and a cell that breaks one
    fails the grid here, before any cell runs. Sweep cells are one-process standard runs of the same."""
    for cell in cells(prof, **subset):
        try:
            RunConfig.from_dict(cell_parameters(prof, cell, None))
        except ValueError as error:
            raise GridOptionError(f"cell {cell.arch}/{cell.stem} of profile {prof.name!r} "
                                  f"({prof.size} size, {prof.data} data, world size {prof.world_size}) "
                                  f"would fail: {error}") from None


def local_gpu_count(timeout_s: float = 120.0) -> int:
    """The CUDA devices torch sees here, asked in a child process (this one imports no torch)."""
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                              capture_output=True, text=True, timeout=timeout_s)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


@contextlib.contextmanager
def output_lock(folder: Path):
    """One grid at a time on a profile's output folder: a second would run every cell the first runs.
    An flock, so a grid killed with -9 leaves no stale lock; the file names the holder's process."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".grid.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise GridOptionError(f"another grid ({holder}) is running on {folder}: let it finish (finished cells "
                                  "are skipped when you run again) or give another --out") from None
        lock.truncate(0)
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield


def check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".gum-write-check-"):
            pass
    except OSError as error:
        raise GridOptionError(f"--out {out} is not a writable folder: {error.strerror or error}") from None


def check_scheduler(address: str, timeout: float = 3.0) -> None:
    """A scheduler that answers within `timeout` seconds, before the client waits its 30 s."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if parts.scheme not in ("tcp", "tls") or not host or not port:
        raise GridOptionError(f"--scheduler {address!r} is not an address of the form tcp://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        raise GridOptionError(f"no Dask scheduler answers at {address} within {timeout:g} s "
                              f"({error.strerror or error}); start one with `dask scheduler`") from None
    found = _not_a_scheduler(f"{parts.scheme}://{parts.netloc}", timeout) if parts.scheme == "tcp" else None
    if found:
        raise GridOptionError(f"--scheduler {address} is not a Dask scheduler: {found}")


_NOT_DASK = "(a dashboard's port, 8787 by default, is not its scheduler's, 8786 by default)"


def _not_a_scheduler(address: str, timeout: float) -> str | None:
    """None where a Dask scheduler answers Dask's handshake and identity call within `timeout`; else
    what was found: a Dask worker, a server that never speaks Dask (HTTP), bytes that are not Dask's."""
    import asyncio

    from distributed.comm import connect

    async def identity():
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        reply = asyncio.run(asyncio.wait_for(identity(), timeout))
    except (asyncio.TimeoutError, TimeoutError):
        return f"something accepts connections there but gives no Dask handshake within {timeout:g} s {_NOT_DASK}"
    except Exception as error:  # noqa: BLE001 (what a non-Dask peer's bytes make of Dask's reader: said, not raised)
        said = " ".join(str(error).split())[:100]
        return f"what answers there does not speak Dask ({type(error).__name__}: {said}) {_NOT_DASK}"
    kind = reply.get("type") if isinstance(reply, dict) else None
    return None if kind == "Scheduler" else f"a Dask {kind or 'peer'} answers there, not a scheduler"

