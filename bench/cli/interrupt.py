"""Ctrl-C (SIGINT) and SIGTERM while this process drives a campaign: the signal becomes an
`Interrupted` exception in the main thread (the one thread Python runs signal handlers in),
which bench.cli.schedule.run_live turns into the campaign recorded `interrupted`, its
controller lock released and one line saying how to go on, then the shell's exit code for the
signal (128 + its number: 130, 143).

The executor's threads are not waited for: a run may take minutes, and one interrupted
anywhere is where a killed controller leaves it, which `bench resume` already recovers (every
state is written before its action; a collected bundle stays on disk until it is ingested).

A signal ignored when bench started stays ignored (a background job of a shell without job
control ignores SIGINT: Ctrl-C in that terminal is not meant for it). The first signal puts the
previous handlers back, so a second one does what it did before (Ctrl-C twice forces the exit
should the record wait on a busy database)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal asked this process to stop (a BaseException, as KeyboardInterrupt is, so that
    no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextmanager
def signals_raise() -> Iterator[None]:
    """Inside: the first SIGINT or SIGTERM raises Interrupted in the main thread and puts the
    previous handlers back (as leaving does). Outside the main thread it does nothing
    (handlers can be set there only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[signal.Signals, Any] = {}

    def restore() -> None:
        for sig, old in previous.items():
            # None: a handler not set from Python (an embedding program's); the default then
            signal.signal(sig, signal.SIG_DFL if old is None else old)

    def handler(signum: int, _frame) -> None:
        restore()
        raise Interrupted(signum)
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        restore()
