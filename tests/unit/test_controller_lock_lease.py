"""Who holds a campaign's controller lock, as data: on this machine (this boot) the holder's
process decides, its pid and start time (whatever its heartbeat says), from another machine or
another boot the lease, against the database's time."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

from bench.store.controller_lock import (boot_id, lock_is_stale, lock_wait_hint, owner_info,
                                         start_ticks)

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


# the holder is a process (pid, start time) of one boot: a reused pid holds nothing ----------

def _sleeper(argv0: str | None = None, where=None) -> subprocess.Popen:
    """An unrelated live process started here (ended by the test that started it)."""
    exe = "sleep"
    if argv0 is not None:           # a command name with spaces and ")" in it
        exe = str(where / argv0)
        shutil.copy(shutil.which("sleep"), exe)
    return subprocess.Popen([exe, "300"])


def test_a_live_pid_holds_the_lock_only_as_the_process_that_took_it():
    p = _sleeper()
    try:
        ticks = start_ticks(p.pid)
        assert isinstance(ticks, int) and ticks > 0
        it = {"pid": p.pid, "host": HERE, "boot_id": boot_id(), "start_ticks": ticks,
              "heartbeat": 0.0}
        assert not lock_is_stale(it, 60.0, db_time=1e10)
        # the same pid, another process (a pid wrap after the holder died): free at once
        assert lock_is_stale(dict(it, start_ticks=ticks + 1), 60.0, db_time=0.0)
        # a row from before start times were kept: the pid decides, as it did
        legacy = {k: v for k, v in it.items() if k not in ("boot_id", "start_ticks")}
        assert not lock_is_stale(legacy, 60.0, db_time=1e10)
    finally:
        p.kill()
        p.wait()


def test_a_holder_from_another_boot_is_judged_by_its_lease_not_its_pid():
    """The host name is ours, the boot id is not: this machine before a reboot (or another
    machine of the same name), so the live pid here says nothing; the lease decides."""
    assert boot_id() is not None
    other_boot = {"pid": os.getpid(), "host": HERE, "boot_id": "0" * 8 + "-not-this-boot",
                  "start_ticks": start_ticks(os.getpid()), "heartbeat": 1000.0}
    assert not lock_is_stale(other_boot, 60.0, db_time=1059.0)
    assert lock_is_stale(other_boot, 60.0, db_time=1061.0)
    hint = lock_wait_hint(other_boot, 60.0)
    assert "another boot of this machine" in hint and "60s after its last heartbeat" in hint


def test_the_start_time_is_field_22_whatever_the_command_name_holds(tmp_path):
    name = "a) b (c) d"
    p = _sleeper(name, tmp_path)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:      # exec replaces the forked python's name
            with open(f"/proc/{p.pid}/stat") as f:
                stat = f.read()
            if f"({name})" in stat:
                break
            time.sleep(0.01)
        fields = stat.split(f"({name})", 1)[1].split()    # fields 3.. after the name
        assert start_ticks(p.pid) == int(fields[19])
    finally:
        p.kill()
        p.wait()
    assert start_ticks(p.pid) is None or start_ticks(p.pid) != int(fields[19])


def test_this_process_owns_its_row_and_not_one_with_another_start_time():
    me = owner_info()
    assert me["boot_id"] == boot_id() and me["start_ticks"] == start_ticks(os.getpid())
    assert not lock_is_stale(me, 60.0, db_time=1e10)
    assert lock_is_stale(dict(me, start_ticks=me["start_ticks"] - 1), 60.0, db_time=0.0)
