"""bench.cli.interrupt: inside signals_raise the first SIGINT or SIGTERM to this process is an
Interrupted exception carrying the shell's exit code, and a second one does what it did before
(Ctrl-C twice forces the exit); a signal that was ignored stays ignored; the previous handlers
come back on leaving."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from bench.cli.interrupt import Interrupted, signals_raise


def _deliver(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.2)             # the handler runs between bytecodes of this (main) thread


@pytest.fixture(autouse=True)
def _as_a_foreground_job():
    """Python's own handlers, as a terminal's foreground job has them: a test run started as a
    background job inherits SIGINT ignored (which signals_raise keeps ignored, tested below)."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for s, handler in old.items():
        signal.signal(s, handler)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_the_first_signal_raises_with_its_exit_code_and_a_second_does_what_it_did(sig, code):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with signals_raise():
        with pytest.raises(Interrupted) as caught:
            _deliver(sig)
        assert (caught.value.exit_code, caught.value.name) == (code, signal.Signals(sig).name)
        assert {s: signal.getsignal(s) for s in before} == before
        with pytest.raises(KeyboardInterrupt):  # Python's own Ctrl-C: the forced exit
            _deliver(signal.SIGINT)
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_signal_ignored_before_stays_ignored():
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)     # a background job's SIGINT
    try:
        with signals_raise():
            _deliver(signal.SIGINT)
            with pytest.raises(Interrupted):
                _deliver(signal.SIGTERM)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)


def test_outside_the_main_thread_it_sets_nothing():
    seen = {}

    def other():
        with signals_raise():
            seen["handler"] = signal.getsignal(signal.SIGTERM)
    before = signal.getsignal(signal.SIGTERM)
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen["handler"] is before
