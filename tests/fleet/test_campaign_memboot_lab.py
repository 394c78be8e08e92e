"""A proven reboot that fails inside a campaign quarantines its host (netns lab, real sshd).

A test inventory makes lab-netns-1 rebootable with `method = "command"`: the command enters
the controller's namespaces and runs `python -m bench.lab.netns reboot`, which kills every
process of that host's netns and starts its sshd again with the new command line and a new
boot_id (the lab bind-mounts its own boot_id and cmdline over /proc inside the host, so the
controller's safety check, which refuses the controller's own boot_id, lets it through; this
machine is never rebooted). The reboot really happens: the host goes away, comes back with
a new boot_id and `mem=` in /proc/cmdline. MemTotal cannot follow in a network namespace and
/proc/meminfo is not faked, so the gate fails honestly:

1. default boot -> memboot (mem=2G, written mem=2000000000): "MemTotal in range" fails; the
   host is quarantined with the gate's reason after its default-boot runs; the memboot run
   stays pending.
2. a second campaign finds the host still booted with mem=2G (a quarantined host is not
   restored): its first run needs the default boot, the gate's "MemTotal grew" fails before
   any run starts there; placement-one runs are handed over and run once on the other host,
   placement-each runs (and the memboot run) are pending naming the quarantine.

Needs root."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.fleet import host_bundles

from bench.cli.schedule import build_plan
from bench.execute.campaign.executor import Executor
from bench.execute.campaign.record import Settings, create
from bench.execute.campaign.watch import progress
from bench.hosts.inventory import RebootSpec, load_inventory, render_host_toml
from bench.hosts.reboot import local_boot_id
from bench.lab.netns import DEFAULT_CMDLINE
from bench.store.campaigns import journal_rows, run_rows
from bench.store.db import open_store

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "tests" / "fixtures" / "matrices" / "lab-memboot.toml"
X, Y = "lab-netns-1", "lab-netns-2"
NAMES = [X, Y]
TERMINAL = ("validated", "rejected")


def entered(js: list, ref: int, state: str) -> int:
    return sum(1 for j in js if j.kind == "state" and j.run_ref == ref
               and (j.data or {}).get("to") == state)


def last_message(js: list, ref: int) -> str:
    return [j.message for j in js if j.kind == "state" and j.run_ref == ref][-1]


def mem_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def rebootable_inventory(lab, dest: Path) -> Path:
    """A copy of the lab's inventory where X may be rebooted by the lab's own restart."""
    inv = load_inventory(lab.hosts_dir)
    dest.mkdir()
    pid = os.getpid()       # this process lives in the controller's (root) namespaces
    command = ("setsid", "-f", "nsenter", f"--net=/proc/{pid}/ns/net",
               f"--mount=/proc/{pid}/ns/mnt", "--", sys.executable, "-m", "bench.lab.netns",
               "reboot", X, "--state-dir", str(lab.state_dir), "--cmdline={cmdline}",
               "--delay", "0.3")
    x = dataclasses.replace(inv[X], mem_total=mem_total(), mem_floor=1 << 30,
                            reboot=RebootSpec(allowed=True, method="command", command=command,
                                              down_timeout=10, up_timeout=20))
    (dest / f"{X}.toml").write_text(render_host_toml(x))
    (dest / f"{Y}.toml").write_text(render_host_toml(inv[Y]))
    return dest


def run_campaign(lab, hosts_dir: Path, tmp_path: Path, cid: str, seed: int):
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(MATRIX), NAMES, hosts_dir, seed, cid)
    s = Settings(threads=1, passes=2, data_dir=tmp_path / "data", db_url=db,
                 hosts_dir=hosts_dir, reconnect_timeout_s=5.0, chunk_s=5.0, retry_pause_s=0.5)
    store = open_store(db)
    try:
        create(store, plan, exp, m, NAMES, s, str(MATRIX))
        lines: list[str] = []
        t0 = time.monotonic()
        res = Executor(store, cid, s, on_event=lambda e: lines.append(e.line())).run()
        secs = time.monotonic() - t0
        rec = journal_rows(store, cid, kinds=("plan",))[0].data
        rows = {r.run_id: r for r in run_rows(store, cid)}
        js = journal_rows(store, cid)
        prog = progress(store, cid)
    finally:
        store.close()
    return res, rec, rows, js, prog, secs, lines, exp


def test_failed_proven_reboot_quarantines_parks_and_hands_over(clean_pools, lab_host_up, lab,
                                                               tmp_path):
    lab = lab_host_up
    hosts_dir = rebootable_inventory(lab, tmp_path / "hosts")
    me = local_boot_id()
    boot0 = lab.host(X).boot_id
    assert me and boot0 != me        # the lab gives X its own boot_id: not this machine's
    try:
        # 1. default boot -> mem=2G: the gate's MemTotal check fails
        res, rec, rows, js, prog, secs_a, lines, exp = run_campaign(
            lab, hosts_dir, tmp_path, "labmem-a", seed=3)
        log = "\n".join(lines[-40:])
        assert not [sk for sk in exp.skipped if sk.host == X], exp.skipped
        assert any("memboot" in sk.point and sk.host == Y for sk in exp.skipped)
        memboot = [rid for rid, r in rec["runs"].items() if "memboot" in r["cell"]]
        assert len(memboot) == 1 and rec["runs"][memboot[0]]["host"] == X
        assert rec["runs"][memboot[0]]["boot"]["label"] == "mem=2G"
        assert res.state == "incomplete", log
        reason = res.quarantined[X]
        assert reason.startswith(f"{X}: proven reboot failed: MemTotal in range: "), reason
        gate = reason.split("proven reboot failed: ", 1)[1]
        # the kernel got the exact bytes (it would read mem=2G as 2 GiB); the reason says both
        assert f"{mem_total()} bytes" in reason and "for mem=2000000000 (2G)" in reason, reason
        assert list(res.quarantined) == [X]
        q = [j for j in js if j.kind == "quarantine"]
        assert [(j.data["host"], j.data["reason"]) for j in q] == [(X, reason)]
        reboots = [j for j in js if j.kind == "reboot"]
        assert len(reboots) == 1 and reboots[0].data["host"] == X, reboots
        assert reboots[0].data["ok"] is False and "quarantine" in reboots[0].message
        r = rows[memboot[0]]
        assert r.state == "pending" and r.host == X and not r.spec, r
        assert entered(js, r.ref, "booting") == 1
        assert last_message(js, r.ref).endswith(
            "reboot failed, host quarantined: " + gate), \
            last_message(js, r.ref)
        others = [x for rid, x in rows.items() if rid != memboot[0]]
        assert all(x.state in TERMINAL for x in others), log   # X's default group ran first
        assert not any(entered(js, x.ref, "failed") for x in rows.values())
        ph = {h["host"]: h for h in prog["hosts"]}
        assert ph[X]["phase"] == "quarantined" and ph[X]["quarantined"] == reason
        # the reboot really happened, to the lab host only
        lab.reload()
        hx = lab.host(X)
        assert hx.boot_id not in (boot0, me) and "mem=2000000000" in hx.cmdline.split(), hx
        assert local_boot_id() == me
        assert {h["name"]: h["sshd"] for h in lab.status()["hosts"]} == {X: True, Y: True}
        assert "mem=2000000000" in (Path(hx.dir) / "reboot.log").read_text()
        boot1 = hx.boot_id

        # 2. X still booted with mem=2G: back to the default boot fails before any run
        res, rec, rows, js, prog, secs_b, lines, _ = run_campaign(
            lab, hosts_dir, tmp_path, "labmem-b", seed=4)
        log = "\n".join(lines[-40:])
        assert res.state == "incomplete", log
        reason = res.quarantined[X]
        assert reason.startswith(f"{X}: proven reboot failed: MemTotal grew: "), reason
        gate = reason.split("proven reboot failed: ", 1)[1]
        xruns = [rid for rid in rec["order"] if rec["runs"][rid]["host"] == X]
        first = xruns[0]
        assert rec["runs"][first]["boot"]["label"] == "default", rec["runs"][first]
        moved = [rid for rid in xruns if rec["runs"][rid]["placement"] == "one"]
        parked = [rid for rid in xruns if rec["runs"][rid]["placement"] == "each"]
        assert moved and parked, (moved, parked)
        handed = {j.run_ref: j.data for j in js if j.kind == "handover"}
        for rid in moved:
            x = rows[rid]
            assert handed.get(x.ref, {}).get("to") == Y and handed[x.ref]["from"] == X
            assert x.host == Y and x.state in TERMINAL, x
            assert entered(js, x.ref, "running") == 1
        for rid in parked:
            x = rows[rid]
            assert x.host == X and x.state == "pending" and not x.spec, x
            msg = last_message(js, x.ref)
            assert "quarantined" in msg and gate in msg, msg
        assert all(x.state in TERMINAL for x in rows.values() if x.host == Y)
        assert not any(entered(js, x.ref, "failed") for x in rows.values())
        hb = host_bundles(lab, "labmem-b")
        assert sorted(hb) == sorted(rid for rid, x in rows.items() if x.host == Y)
        assert all(v == [Y] for v in hb.values()), hb
        reboots = [j for j in js if j.kind == "reboot"]
        assert [(j.data["host"], j.data["ok"]) for j in reboots] == [(X, False)]
        lab.reload()
        hx = lab.host(X)
        assert hx.boot_id not in (boot1, me) and "mem=2000000000" not in hx.cmdline.split(), hx
        print(f"\nmemboot: gate failed into mem=2G ({secs_a:.1f}s campaign), back to default "
              f"({secs_b:.1f}s campaign): moved {len(moved)}, parked {len(parked)}")
    finally:
        lab.reload()
        lab.reboot(X, DEFAULT_CMDLINE)       # the lab's own restart, as the other tests expect


def test_lab_reboot_command_refuses_to_run_inside_its_own_host(lab_host_up, lab):
    """Started inside the host's namespace (without the nsenter of the inventory's argv) it
    would kill itself halfway through; it refuses and changes nothing."""
    lab = lab_host_up
    h = lab.host(X)
    r = subprocess.run(["ip", "netns", "exec", h.netns, sys.executable, "-m", "bench.lab.netns",
                        "reboot", X, "--state-dir", str(lab.state_dir)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2 and "inside its own network namespace" in r.stderr, r
    lab.reload()
    assert lab.host(X).boot_id == h.boot_id
    assert {s["name"]: s["sshd"] for s in lab.status()["hosts"]}[X]
