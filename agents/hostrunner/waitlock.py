"""Waiting for a run's end without polling: the live runner holds the run's flock until it
exits (after its final status is written), so a blocking flock on the same file returns the
moment the run ends. Bounded with an interval timer (SIGALRM), so only for the main thread of
a one-shot command such as `runner.py wait`."""

from __future__ import annotations

import fcntl
import os
import signal
import time
from types import FrameType


class _Expired(Exception):
    pass


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Expired


def wait_unlocked(path: str, timeout_s: float) -> bool:
    """Block until nobody holds the flock on path, at most timeout_s; True when it was free
    (the lock is let go again at once: this only waits, it never holds a run)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        time.sleep(min(0.05, max(timeout_s, 0.0)))
        return False
    old = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.001))
            fcntl.flock(fd, fcntl.LOCK_SH)
            free = True
        except _Expired:
            free = False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Expired:        # the timer fired between the flock and disarming it
        free = True
    finally:
        signal.signal(signal.SIGALRM, old)
        os.close(fd)
    return free
