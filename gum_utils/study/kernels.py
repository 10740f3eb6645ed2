"""The Jupyter kernel a cell's notebook runs in: its environment, and one warm kernel per worker.

Imports neither torch nor Dask (the book takes the kernel environment from here).
"""

import atexit
import functools
import os
import threading

from .scratch import KERNEL_PREFIX, owned_scratch, release_scratch, remove_stale_scratch

# papermill's default is 60 s; on a loaded 2-core CI machine a kernel's first start once took longer.
KERNEL_START_TIMEOUT_S = 300
KERNEL_ENV = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
# Dask's nanny sets MALLOC_TRIM_THRESHOLD_ for its workers (so freed memory goes back to the system).
# A kernel that inherits it loses glibc's adaptive mmap threshold: every tensor above 128 KiB is then a
# fresh mmap, zeroed page by page, and a tiny Llama trained 1.9x slower (a third of its CPU in page faults).
NOT_INHERITED = ("MALLOC_TRIM_THRESHOLD_",)


# Kernels talk over socket files in a folder of their own (ZeroMQ's ipc transport), not TCP ports:
# jupyter_client picks a kernel's ports in one process and the kernel binds them in another, so two
# kernels started at once by two processes can be given the same port. One that lost its IOPub port
# stays alive and never answers (the book's build once waited 300 s on it in CI).
TRANSPORT = "ipc"


def socket_options(folder) -> dict:
    """A KernelManager's transport options for a kernel whose sockets are files in `folder`
    (a short path: a socket file's name may not exceed about 100 bytes)."""
    return {"transport": TRANSPORT, "ip": os.path.join(str(folder), "kernel")}


def kernel_environment() -> dict:
    """The worker's environment for its kernel, less what only suits the worker itself."""
    return {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}


class WarmKernel:
    """One Jupyter kernel per worker process, reused from cell to cell with its namespace reset.

    Importing torch and transformers takes ~5 s of CPU, several times a tiny cell's training;
    a warm kernel pays it once per worker. Every run seeds itself, so results do not depend on
    what ran before (a test checks a reused kernel against a fresh one). A kernel that died
    is replaced. The kernel lives in a directory of its own (its cwd and start-up log),
    removed when it is shut down.

    What a cell costs around its notebook is kept small: one client talks to the kernel for
    every cell (a new one waits 0.2 s for the kernel's output to go quiet), the kernel keeps no
    input history (an SQLite write per cell and per reset), and what the warm-up imported is
    frozen out of the garbage collector after each reset, so a collection walks only what the last
    cell made (0.2-0.3 s of torch's objects otherwise).
    """

    WARM_UP = "import gum_utils.core.run, gum_utils.study.notebook, matplotlib.pyplot; import gc; gc.freeze(); del gc"
    # IPython's reset collects before it clears the namespace: the collection after it frees the last
    # run's model (its reference cycles too) before the next run measures its memory; what survives both
    # is the kernel's own (modules a run imported) and is frozen with the rest.
    RESET = "get_ipython().run_line_magic('reset', '-f'); import gc; gc.collect(); gc.freeze(); del gc"
    KERNEL_OPTIONS = ["--HistoryManager.enabled=False"]

    def __init__(self, name: str = "gum-warm-kernel", warm_up: str | None = None):
        self.name = name  # papermill's engine name for notebooks run on this kernel (warm_engine)
        self.warm_up = warm_up or self.WARM_UP
        self._forget()

    def _forget(self) -> None:
        self._owner = os.getpid()
        self._manager = None
        self._client = None
        self._home = None
        self._log = None

    def kernel(self):
        if self._owner != os.getpid():  # a forked child's copy: its parent's kernel is not its own to use or stop
            self._forget()
        if self._manager is None or not self._manager.is_alive():
            from jupyter_client import KernelManager

            self.shutdown()
            remove_stale_scratch()  # what killed workers on this machine left
            self._home = owned_scratch(KERNEL_PREFIX)
            # The kernel's own start-up chatter goes to a log, not over the progress bar.
            self._log = open(self._home / "kernel.log", "a")
            # Its connection file too lives in its folder, so removing the folder removes it.
            self._manager = KernelManager(kernel_name="python3", connection_file=str(self._home / "kernel.json"),
                                          **socket_options(self._home))
            self._manager.start_kernel(cwd=str(self._home), env=kernel_environment(), stdout=self._log,
                                       stderr=self._log, extra_arguments=self.KERNEL_OPTIONS)
            self._client = self._manager.client()
            self._client.start_channels()
            self._client.wait_for_ready(timeout=KERNEL_START_TIMEOUT_S)
            self.run(self.warm_up)
        return self._manager

    def client(self):
        """The kernel's one client, started and ready (messages of earlier cells are told apart by their ids)."""
        self.kernel()
        return self._client

    def reset(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self.run(self.RESET)

    def run(self, code: str) -> None:
        """Run `code` in the kernel, its output dropped (an exception in it is not raised here)."""
        self.client()
        self._client.execute_interactive(code, timeout=120, output_hook=lambda message: None)

    def shutdown(self) -> None:
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        if self._manager is not None and self._manager.is_alive():
            self._manager.shutdown_kernel(now=True)
        self._manager = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._home is not None:
            release_scratch(self._home)
            self._home = None


WARM = WarmKernel()  # this worker process's kernel for the grid's cells


@functools.cache
def warm_engine(warm: WarmKernel = WARM) -> str:
    """papermill's engine name for executing on the warm kernel `warm` through its one client
    (papermill's own engine starts a client per notebook and leaves it open)."""
    from jupyter_core.utils import run_sync
    from nbclient.util import run_hook
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger

    class WarmKernelClient(PapermillNotebookClient):
        async def async_start_new_kernel_client(self):
            self.kc = warm.client()
            self.kc.allow_stdin = False
            await run_hook(self.on_notebook_start, notebook=self.nb)
            return self.kc

        start_new_kernel_client = run_sync(async_start_new_kernel_client)  # papermill calls this one

    class WarmKernelEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, start_timeout=60,
                                     execution_timeout=None, **papermills_own):
            return WarmKernelClient(nb_man, km=warm.kernel(), kernel_name=kernel_name, log=logger,
                                    log_output=log_output, startup_timeout=start_timeout,
                                    timeout=execution_timeout).execute()

    papermill_engines.register(warm.name, WarmKernelEngine)
    return warm.name


ONE_CELL_AT_A_TIME = threading.Lock()  # a worker started with more threads still shares one kernel
atexit.register(WARM.shutdown)  # a worker that exits without closing (a killed one's kernel sees its parent go)
