"""How every command stops when told to: Ctrl-C (SIGINT) and SIGTERM (what `timeout`, SLURM and `kill`
send) end in one line on stderr and exit 130 or 143, the shell's codes, wherever they land.

SIGTERM is raised as a KeyboardInterrupt, so every `finally`, context manager and atexit handler
(scratch folders, kernels, the cluster) runs exactly as for Ctrl-C. Imports nothing heavy.
"""

import contextlib
import os
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
    """Inside, SIGTERM interrupts this process as Ctrl-C does, and Ctrl-C raises its interrupt again
    (main thread only; elsewhere a no-op); the handlers before are restored after (a command called
    in-process, as the tests do, leaves none)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _RECEIVED.clear()
    before = {signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt)}
    if signal.getsignal(signal.SIGINT) is _stop_now:  # from the start's one-line exit to Ctrl-C's interrupt
        before[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


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



def stop_quietly_from_the_start() -> None:
    """For `python -m gum_utils...`, from its first import until `run_command` takes over (seconds
    of torch and transformers imports): Ctrl-C or SIGTERM ends the process at once in one line, with
    the signal's own exit status (130, 143). Not raised: an interrupt raised inside a C extension's
    import comes out as that library's ImportError."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # a background job's ignored Ctrl-C stays ignored
            signal.signal(signum, _stop_now)


def _stop_now(signum, frame):
    argv = getattr(sys, "orig_argv", [])
    module = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else "gum_utils"
    print(f"python -m {module}: stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
