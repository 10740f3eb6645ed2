"""The Jupyter kernel a cell's notebook runs in: its environment, and one warm kernel per worker.

Imports neither torch nor Dask (the book takes the kernel environment from here).
"""

import atexit
import os
import threading

from .scratch import KERNEL_PREFIX, owned_scratch, release_scratch, remove_stale_scratch

# papermill's default is 60 s; on a loaded 2-core CI machine a kernel's first start once took longer.
KERNEL_START_TIMEOUT_S = 300
KERNEL_ENV = {"TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}


class WarmKernel:
    """One Jupyter kernel per worker process, reused from cell to cell with its namespace reset.

    Importing torch and transformers takes ~5 s of CPU, several times a tiny cell's training;
    a warm kernel pays it once per worker. Every run seeds itself, so results do not depend on
    what ran before (a test checks a reused kernel against a fresh one). A kernel that died
    is replaced. The kernel lives in a directory of its own (its cwd and start-up log),
    removed when it is shut down.
    """

    WARM_UP = "import gum_utils.core.run, gum_utils.study.notebook, matplotlib.pyplot"

    def __init__(self):
        self._manager = None
        self._home = None
        self._log = None

    def kernel(self):
        if self._manager is None or not self._manager.is_alive():
            from jupyter_client import KernelManager

            self.shutdown()
            remove_stale_scratch()  # what killed workers on this machine left
            self._home = owned_scratch(KERNEL_PREFIX)
            # The kernel's own start-up chatter goes to a log, not over the progress bar.
            self._log = open(self._home / "kernel.log", "a")
            # Its connection file too lives in its folder, so removing the folder removes it.
            self._manager = KernelManager(kernel_name="python3", connection_file=str(self._home / "kernel.json"))
            self._manager.start_kernel(cwd=str(self._home), env=dict(os.environ), stdout=self._log,
                                       stderr=self._log)
            self._run(self.WARM_UP)
        return self._manager

    def reset(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._run("get_ipython().run_line_magic('reset', '-f')")

    def _run(self, code: str) -> None:
        client = self._manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=KERNEL_START_TIMEOUT_S)
            client.execute_interactive(code, timeout=120, output_hook=lambda message: None)
        finally:
            client.stop_channels()

    def shutdown(self) -> None:
        if self._manager is not None and self._manager.is_alive():
            self._manager.shutdown_kernel(now=True)
        self._manager = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._home is not None:
            release_scratch(self._home)
            self._home = None


WARM = WarmKernel()  # this worker process's kernel
ONE_CELL_AT_A_TIME = threading.Lock()  # a worker started with more threads still shares one kernel
atexit.register(WARM.shutdown)  # a worker that exits without closing (a killed one's kernel sees its parent go)
