"""flocks under work_dir: the host lock (one run at a time on this host), the run lock (held
by the live runner of a run: "is it alive" = "is it locked") and the start lock (the short
critical section of start, re-attach and orphan settling)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from typing import Callable

from .errors import RunFailed
from .files import now_iso, read_or_none, write_file


def lock_path(work_dir: str, run_id: str) -> str:
    return os.path.join(work_dir, "locks", f"{run_id}.lock")


def _open(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


def try_lock(path: str) -> int | None:
    """An fd holding an exclusive flock on path, or None when another holds it."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise


def run_is_live(work_dir: str, run_id: str) -> bool:
    if not os.path.exists(lock_path(work_dir, run_id)):
        return False
    fd = try_lock(lock_path(work_dir, run_id))
    if fd is None:
        return True
    os.close(fd)
    return False


def start_lock(work_dir: str) -> int:
    """<work_dir>/start.lock, taken (blocking); the caller closes the fd to release it."""
    fd = _open(os.path.join(work_dir, "start.lock"))
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def host_lock(work_dir: str, run_id: str, timeout_s: int,
              check_stop: Callable[[], None]) -> tuple[int, float]:
    """Take <work_dir>/host.lock, polling until timeout_s (check_stop raises to give up early);
    then name the holder in host.lock.owner. Returns (fd, seconds waited); the fd holds the
    lock until the process exits."""
    fd = _open(os.path.join(work_dir, "host.lock"))
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 >= timeout_s:
                owner = read_or_none(os.path.join(work_dir, "host.lock.owner")) or "?"
                raise RunFailed(f"host lock still held after {timeout_s} s "
                                f"by {owner.strip()}") from None
            check_stop()
            time.sleep(0.2)
    waited = round(time.monotonic() - t0, 3)
    write_file(os.path.join(work_dir, "host.lock.owner"),
               json.dumps({"run_id": run_id, "pid": os.getpid(), "t": now_iso()}) + "\n")
    return fd, waited
