"""The reboot guard (bench.hosts.lock.take_for) against the real runner on the local transport:
a live run (its runner holding its run lock) refuses a reboot with one line naming it, is
waited for up to wait_s, is named by --force as the run it kills; a controller setting up a
run (holding the host lock) refuses it too; once the run has ended the guard takes the lock.
The same function guards `bench hosts reboot|restore|mglru` and a campaign's boots."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.hosts.inventory import Host
from bench.hosts.lock import HostLock, HostLocked, RunInProgress, live_runs, take_for
from bench.hosts.transport import LocalTransport
from tests.support.runner import make_spec, start, wait, wait_phase


@pytest.mark.root
def test_a_live_run_refuses_the_guard_and_force_names_it(agent, loopfs, pool, plans, work_dir):
    t = LocalTransport()
    host = Host(name="local", address="localhost", transport="local", work_dir=str(work_dir))
    assert live_runs(t, host) == []
    lock = take_for(t, host, "reboot")          # nothing in progress: taken
    lock.release()
    spec = make_spec("guard-1", "1g-none-classic", pool=pool, plan=plans["long"], agent=agent)
    spec["agent"]["passes"] = 6        # long enough to act while it runs
    rc, res = start(spec, work_dir)
    assert rc == 0 and res["ok"], res
    wait_phase(Path(res["bundle"]), ("warmup", "measuring"))
    (live,) = live_runs(t, host)
    assert live.run_id == "guard-1" and live.pid == res["pid"]
    with pytest.raises(RunInProgress) as exc:
        take_for(t, host, "reboot")
    msg = exc.value.message
    assert msg.startswith("local: run guard-1 (phase ") and msg.endswith(
        f", runner pid {res['pid']}) in progress: refusing to reboot"), msg
    assert "\n" not in str(exc.value) and "--force" in (exc.value.hint or "")
    t0 = time.monotonic()
    with pytest.raises(RunInProgress):
        take_for(t, host, "restore", wait_s=2.0)
    assert 2.0 <= time.monotonic() - t0 < 10
    said: list[str] = []
    lock = take_for(t, host, "reboot", force=True, say=said.append)
    try:
        assert len(said) == 1 and said[0].startswith("local: --force: run guard-1 (phase "), said
        assert said[0].endswith(f", runner pid {res['pid']}) is in progress; reboot kills it")
        # while held, another controller is refused by the host lock, naming its holder
        with pytest.raises(HostLocked) as locked:
            HostLock(t, host, purpose="bench run r9").acquire()
        assert "bench hosts reboot" in locked.value.message
    finally:
        lock.release()
    st = wait("guard-1", work_dir)          # the guard touched nothing: the run completes
    assert st["phase"] == "done" and st["ok"], st
    assert live_runs(t, host) == []
    take_for(t, host, "reboot").release()
