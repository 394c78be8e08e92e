"""Who holds a campaign's controller lock, as data: on this machine the holder's pid decides
(whatever its heartbeat says), from another machine the lease, against the database's time."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from bench.store.controller_lock import lock_is_stale

HERE = socket.gethostname()


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_on_this_machine_the_pid_decides_not_the_heartbeat():
    alive = {"pid": os.getpid(), "host": HERE, "heartbeat": 0.0}
    assert not lock_is_stale(alive, 60.0, db_time=1e10)        # an "ancient" heartbeat
    dead = {"pid": dead_pid(), "host": HERE, "heartbeat": 1e10}
    assert lock_is_stale(dead, 60.0, db_time=1e10)             # a fresh one


def test_from_another_machine_the_lease_by_the_database_clock_decides():
    other = {"pid": os.getpid(), "host": HERE + "-elsewhere", "heartbeat": 1000.0}
    assert not lock_is_stale(other, 60.0, db_time=1059.0)
    assert lock_is_stale(other, 60.0, db_time=1061.0)
    for bad in (None, "x", [1]):
        assert lock_is_stale(dict(other, heartbeat=bad), 60.0, db_time=1000.0)


def test_no_holder_or_a_released_lock_is_free():
    assert lock_is_stale(None, 60.0, db_time=0.0)
    assert lock_is_stale({"pid": None, "host": HERE}, 60.0, db_time=0.0)
