"""How every command stops when told to: Ctrl-C (SIGINT) and SIGTERM (what `timeout`, SLURM and `kill`
send) end in one line on stderr and exit 130 or 143, the shell's codes, wherever they land.

SIGTERM is raised as a KeyboardInterrupt, so every `finally`, context manager and atexit handler
(scratch folders, kernels, the cluster) runs exactly as for Ctrl-C. Imports nothing heavy.
"""

import contextlib
import signal
import sys
import threading

_RECEIVED: list[int] = []  # the signals this process was stopped by (SIGTERM is recorded; SIGINT is the default)


def _interrupt(signum, frame):
    _RECEIVED.append(signum)
    signal.signal(signum, signal.SIG_DFL)  # a second SIGTERM while cleaning up ends the process at once
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt():
    """Inside, SIGTERM interrupts this process as Ctrl-C does (main thread only; elsewhere a no-op);
    the handler before is restored after (a command called in-process, as the tests do, leaves none)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _RECEIVED.clear()
    before = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def stop_signal() -> signal.Signals:
    """The signal that stopped this process: SIGTERM if one came, else SIGINT (Ctrl-C)."""
    return signal.Signals(_RECEIVED[-1]) if _RECEIVED else signal.SIGINT


def exit_code() -> int:
    """128 + the signal's number: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + stop_signal()


def stopped_line(prog: str) -> str:
    return f"{prog}: stopped by {stop_signal().name}"


def run_command(prog: str, main, *args) -> int:
    """`main(*args)`'s exit code, or, stopped by Ctrl-C or SIGTERM, one line and 130 or 143."""
    try:
        with sigterm_as_interrupt():
            return main(*args)
    except KeyboardInterrupt:
        print(stopped_line(prog), file=sys.stderr, flush=True)
        return exit_code()
