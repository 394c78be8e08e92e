"""The campaign's controller lock against clock skew, with real controller processes
(tests/support/controller_proc.py) on SQLite and PostgreSQL: a second controller whose wall
clock runs 120 s ahead cannot take a live lock, neither on the holder's machine (the holder's
pid decides) nor from "another machine" (a UTS namespace with another host name: the lease, timed
by the database's clock, decides). The lease still expires when the holder stops heartbeating,
and the holder then learns it lost the lock. Before the lease used the database clock, the
skewed controller took the live lock at once (issue 13). Needs root for the UTS namespace."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.store.controller_lock import lock_holder

REPO = Path(__file__).resolve().parents[3]
SKEW = 120.0
STALE = 2.0


def controller(db_url: str, mode: str, *, skew: float = 0.0, other_host: str | None = None,
               stale: float = STALE) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.support.controller_proc", db_url, "c1", mode,
            str(stale), str(skew)]
    if other_host:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', other_host, *argv]
    return subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def first(p: subprocess.Popen, timeout: float = 60.0) -> dict:
    # bounded: a controller blocked on a lock fails the test instead of hanging the suite
    if not select.select([p.stdout], [], [], timeout)[0]:
        raise AssertionError(f"controller pid {p.pid} printed nothing for {timeout:.0f}s")
    line = p.stdout.readline()
    if not line:
        raise AssertionError(f"controller exited {p.wait()}: {p.stderr.read()[-2000:]}")
    return json.loads(line)


def attempt(db_url: str, **kw) -> dict:
    p = controller(db_url, "try", **kw)
    out = first(p)
    p.wait(30)
    return out


@pytest.fixture
def holder(store, db_url):
    """Controller A: holds the lock of campaign c1 and heartbeats; stopped by its PID."""
    a = controller(db_url, "hold")
    got = first(a)
    assert got["taken"], got
    assert first(a) == {"beat": True}
    try:
        yield a, got["me"]
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
        a.wait(10)


def needs_unshare() -> None:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a UTS namespace (another host name)")


@pytest.mark.root
def test_a_controller_whose_clock_runs_ahead_cannot_take_a_live_lock(store, db_url, holder):
    a, me = holder
    needs_unshare()
    # on the holder's machine: its pid is alive
    got = attempt(db_url, skew=SKEW)
    assert not got["taken"] and got["holder"]["pid"] == me["pid"], got
    # from another machine: the lease, timed by the database's clock, is fresh
    got = attempt(db_url, skew=SKEW, other_host="bench-ctl-b")
    assert not got["taken"] and got["holder"]["pid"] == me["pid"], got
    assert lock_holder(store, "c1")["pid"] == me["pid"]
    # the holder still holds it
    assert first(a) == {"beat": True}


def freeze(p: subprocess.Popen, how: str) -> float:
    """Have the holder stop itself ("stop": between heartbeats; "stop-in-beat": inside a
    heartbeat's transaction, holding the lock row); the monotonic time once it is stopped."""
    p.stdin.write(how + "\n")
    p.stdin.flush()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{p.pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "T":
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"the holder did not stop ({how})")


def take_over_after_freeze(store, db_url, a, me, how: str) -> float:
    """A second controller on another machine retries while the holder freezes itself: the
    seconds from the freeze to its takeover; the old holder then learns it lost the lock."""
    b = controller(db_url, "retry", skew=SKEW, other_host="bench-ctl-b")
    try:
        assert first(b)["refused"]["pid"] == me["pid"]       # the live lease refuses it
        t_stop = freeze(a, how)                  # a hung controller: no more heartbeats
        got = first(b)
        waited = time.monotonic() - t_stop
        assert got["taken"], got
        assert lock_holder(store, "c1")["host"] == "bench-ctl-b"
    finally:
        os.kill(a.pid, signal.SIGCONT)
    # the old holder's next heartbeat finds the lock gone and it stops
    while (line := first(a)) == {"beat": True}:
        pass
    assert line == {"beat": False} and a.wait(10) == 3
    assert b.wait(10) == 0
    return waited


@pytest.mark.root
def test_the_lease_expires_by_the_database_clock_when_the_holder_stops(store, db_url, holder):
    a, me = holder
    needs_unshare()
    waited = take_over_after_freeze(store, db_url, a, me, "stop")
    # taken once the lease ran out (STALE s after the last beat, at most 0.2 s before the
    # freeze), not 120 s early
    assert STALE - 0.5 <= waited <= STALE + 5.0, waited


@pytest.fixture
def pg_store(pg_url):
    """A fresh PostgreSQL database holding campaign c1 (PostgreSQL only: with SQLite every
    controller of a database runs on the machine that holds its file, and a writer frozen inside
    a transaction holds the file's write lock: nothing can end it but its own machine)."""
    from bench.store.db import open_store
    from tests.support.bundlegen import ensure_campaigns
    url = pg_url
    st = open_store(url)
    ensure_campaigns(st, "c1")
    yield st, url
    st.close()


@pytest.mark.root
def test_a_holder_frozen_inside_its_heartbeat_transaction_loses_the_lock(pg_store):
    """Before: the frozen holder kept its row lock and the takeover waited on it for good (a
    CI run hung here). PostgreSQL now ends a session that stalls inside a lock transaction."""
    from bench.store.controller_lock import LOCK_TXN_IDLE_S
    store, url = pg_store
    needs_unshare()
    a = controller(url, "hold")
    try:
        got = first(a)
        assert got["taken"], got
        waited = take_over_after_freeze(store, url, a, got["me"], "stop-in-beat")
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
        a.wait(10)
    # once the server ended the stalled session (and the lease ran out meanwhile)
    assert LOCK_TXN_IDLE_S - 0.5 <= waited <= LOCK_TXN_IDLE_S + 5.0, waited


@pytest.mark.root
def test_a_dead_holder_on_this_machine_is_replaced_at_once(store, db_url, holder):
    a, me = holder
    a.kill()
    a.wait(10)
    # with a lease of 10 minutes: only the dead pid can free it (a clock that runs behind
    # changes nothing either)
    got = attempt(db_url, skew=-SKEW, stale=600.0)
    assert got["taken"], got
