"""--force past a campaign's claim with the campaign's run live (the real runner on the local
transport): the one line names the campaign, its controller and its run, and the run line says
the reboot kills it; without --force the claim refuses first, naming the run in progress and
the campaign that owns the host, and the run goes on untouched."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from bench.hosts.inventory import Host
from bench.hosts.lock import HostClaim, HostLocked, live_runs, take_for
from bench.hosts.transport import LocalTransport
from tests.support.runner import make_spec, start, wait, wait_phase


@pytest.mark.root
def test_force_names_the_campaigns_live_run_it_kills(agent, loopfs, pool, plans, work_dir):
    t = LocalTransport()
    host = Host(name="local", address="localhost", transport="local", work_dir=str(work_dir))
    claim = HostClaim(host, lambda h: LocalTransport(h.name), "test")   # make_spec's campaign
    claim.take()
    try:
        spec = make_spec("claim-1", "1g-none-classic", pool=pool, plan=plans["long"],
                         agent=agent)
        spec["agent"]["passes"] = 6
        rc, res = start(spec, work_dir)
        assert rc == 0 and res["ok"], res
        wait_phase(Path(res["bundle"]), ("warmup", "measuring"))
        (live,) = live_runs(t, host)
        assert live.campaign == "test" and live.pid == res["pid"]
        with pytest.raises(HostLocked) as exc:
            take_for(t, host, "reboot")
        # the run first (what a reboot would kill), then who owns the host
        assert re.match(rf"local: run claim-1 \(phase (warmup|measuring), runner pid "
                        rf"{res['pid']}\) in progress: refusing to reboot; the host is owned by "
                        rf"campaign test \(controller {re.escape(socket.gethostname())}, pid "
                        rf"{os.getpid()}, since ", exc.value.message), exc.value.message
        said: list[str] = []
        lock = take_for(t, host, "reboot", force=True, say=said.append)
        lock.release()
        assert len(said) == 2, said
        assert said[0].startswith("local: --force: the host is owned by campaign test ("), said
        assert re.search(r"; reboot disturbs its run claim-1 \(phase (warmup|measuring), "
                         rf"runner pid {res['pid']}\)$", said[0]), said
        assert said[1].startswith("local: --force: run claim-1 (phase ") and said[1].endswith(
            "is in progress; reboot kills it"), said
        assert claim.alive(t)
    finally:
        claim.release()
    st = wait("claim-1", work_dir)          # nothing was rebooted: the run completes
    assert st["phase"] == "done" and st["ok"], st
