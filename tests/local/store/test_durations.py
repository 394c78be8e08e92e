"""The durations estimates are measured from (bench.store.durations), on a real SQLite file
made by the migrations: a campaign created from a real plan, its runs moved through the real
state machine (bench.store.campaigns.transition) with real time passing, a reboot journaled as
the worker journals it. A run counts from its last entering boot_verified to its verdict; an
unfinished run and a failed reboot count for nothing; the next plan's estimates are these."""

from __future__ import annotations

import time

import pytest

from bench.cli.schedule import build_plan
from bench.execute.campaign.record import Settings, create
from bench.matrix.estimate import Estimates
from bench.store.campaigns import journal, run_rows, transition
from bench.store.db import open_store
from bench.store.durations import measured_durations


def _hosts(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "lab-a.toml").write_text(
        'name = "lab-a"\naddress = "127.0.0.1"\ntransport = "ssh"\n[tags]\nmachine = "A"\n'
        '[memory]\ntotal = "1536M"\nfloor = "512M"\n[reboot]\nallowed = true\nmethod = "kexec"\n')
    return hosts


def _finish(store, run_id: str, seconds: float) -> None:
    for s in ("boot_verified", "deployed", "running"):
        transition(store, run_id, s)
    time.sleep(seconds)
    transition(store, run_id, "collected")
    transition(store, run_id, "validated")


def test_durations_per_host_and_cell_feed_the_next_plan(tmp_path):
    hosts = _hosts(tmp_path)
    plan, exp, m = build_plan("reclaim", ["lab-a"], hosts, 3, "c1", scale="lab")
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        create(store, plan, exp, m, ["lab-a"], Settings(), "reclaim")
        rows = run_rows(store, "c1")
        a, b, c = rows[0], rows[1], rows[2]
        transition(store, a.run_id, "booting")        # a reboot before it: not its duration
        time.sleep(0.3)
        _finish(store, a.run_id, 0.2)
        _finish(store, b.run_id, 0.4)
        for s in ("boot_verified", "deployed", "running"):      # c never reaches a verdict
            transition(store, c.run_id, s)
        journal(store, "reboot", "lab-a: reboot into mem=1G: ok in 42.5s", campaign_id="c1",
                data={"host": "lab-a", "seconds": 42.5, "ok": True, "boot": {}})
        journal(store, "reboot", "lab-a: reboot failed", campaign_id="c1",
                data={"host": "lab-a", "seconds": 300.0, "ok": False, "boot": {}})
        assert len({a.cell, b.cell, c.cell}) == 3     # the plan's first three: three cells
        runs, reboots = measured_durations(store, ["lab-a", "lab-b"])
        assert set(runs) == {("lab-a", a.cell), ("lab-a", b.cell)}
        [da], [db] = runs[("lab-a", a.cell)], runs[("lab-a", b.cell)]
        assert 0.2 <= da < 0.3 + 0.2                  # not the 0.3 s spent booting
        assert 0.4 <= db < 0.6
        assert reboots == {"lab-a": [42.5]}
        assert measured_durations(store, ["lab-b"]) == ({}, {})
        assert measured_durations(store, ["lab-a"], exclude_campaign="c1") == ({}, {})
    finally:
        store.close()
    # the next plan of the same matrix: the measured cells' runs and the reboots are measured
    again, _exp, _m = build_plan("reclaim", ["lab-a"], hosts, 4, "c2", scale="lab",
                                 measured=Estimates(0, 0, runs, reboots))
    d = again.as_dict()
    est = {r["cell"]: (r["estimate_s"], r["estimate_source"]) for r in d["hosts"][0]["runs"]}
    assert est[a.cell][1] == "measured n=1" and est[a.cell][0] == pytest.approx(da)
    others = {cell for cell in est if ("lab-a", cell) not in runs}
    assert others and all(est[cell] == (m.run_seconds, "modelled") for cell in others)
    assert again.reboots == 2                         # mem= boots: the host's measured reboot
    assert (d["hosts"][0]["reboot_estimate"], d["hosts"][0]["reboot_estimate_s"]) == (
        "measured n=1", 42.5)
    cells = [r["cell"] for r in d["hosts"][0]["runs"]]
    k = sum(1 for cell in cells if cell in (a.cell, b.cell))
    assert d["estimates"]["runs"] == f"{k} measured (n=1), {len(cells) - k} modelled"
