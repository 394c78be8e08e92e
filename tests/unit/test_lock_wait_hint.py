"""The hint a refused campaign start gives says what lock_is_stale really decides: on this
machine the holder's pid, from another machine the lease by the database clock."""

from __future__ import annotations

import socket

from bench.store.controller_lock import lock_is_stale, lock_wait_hint


def test_a_holder_on_this_machine_is_waited_for_by_its_pid():
    holder = {"pid": 1, "host": socket.gethostname(), "heartbeat": 0.0}
    hint = lock_wait_hint(holder, 60)
    assert "when pid 1 exits" in hint and "heartbeat" not in hint
    # pid 1 lives: however old its heartbeat, the lock is not stale, as the hint says
    assert not lock_is_stale(holder, 60, 10**9)


def test_a_holder_elsewhere_is_waited_for_by_its_lease():
    holder = {"pid": 4242, "host": socket.gethostname() + "-other", "heartbeat": 100.0}
    hint = lock_wait_hint(holder, 60)
    assert "60s after its last heartbeat by the database clock" in hint
    assert socket.gethostname() + "-other" in hint
    assert not lock_is_stale(holder, 60, 150.0) and lock_is_stale(holder, 60, 161.0)
