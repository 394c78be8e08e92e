"""Tier 4 acceptance of a campaign on the GH200 twins, through the CLI and unattended: `bench
schedule` of a small reclaim-shaped matrix on twin-a and twin-b, MGLRU set at boot, per guest
one run in the default boot (MGLRU on) and one GRUB memboot cell (a `grub-reboot` one-shot
entry with mem= and bench.lru_gen=off: MGLRU off, applied at boot by the deployed unit), then
both guests restored to GRUB's default entry. Injected while it runs:
- twin-a's qemu is frozen (SIGSTOP, its PID from the twin lab's state) in the middle of its
  first run: SSH stops answering, the recovery ladder power-cycles it through the inventory's
  `ipmitool ... chassis power cycle` (its simulated BMC) and proves the new boot;
- `bench hosts reboot twin-b` is attempted while twin-b's first run is in progress (held so
  for the attempt): refused, naming the run, which goes on and is kept.
The interrupted run ends failed with the ladder's steps in its reason, the campaign finishes on
both guests. The module is named to run last in the tier (it power-cycles the session's
shared lab); the finalizer continues a qemu it stopped (lab PIDs only) and wipes the pools it
made. Timings (each GRUB reboot, the power cycle, each run, the campaign) are printed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.support.campaign_db import journal_of as _journal
from tests.support.campaign_db import progress_of as _progress
from tests.support.campaign_db import rows_of as _rows

pytestmark = [pytest.mark.twin, pytest.mark.root, pytest.mark.slow]

HOSTS = ["twin-a", "twin-b"]
PATIENCE_S = 90         # the stall limit too: the refused reboot holds a run that long at most
CID = "reclaim-twin"
MEM = "1108M"            # 0.45 x 1536Mi = 724M, plus the 384M memboot overhead

MATRIX = """
name = "reclaim-twin"
description = "reclaim on the twins: a default-boot cell and a GRUB memboot cell"
reference = "issue 13, done when"
repetitions = 1
memboot_overhead = "384M"
mglru_at_boot = true

[workload]
trace = "tiny"
batch = 1
passes = 3            # long enough to be caught while the controller waits for it

[order]
randomize = false
interleave_reps = true

[hosts]
tags = "any"
placement = "each"

[estimate]
run_seconds = 40
reboot_seconds = 90

[protocol]
cgroup_headroom = "16Mi"

[cells]
capacities = ["0.5mem"]
mechanisms = ["cgroup"]
reclaims = ["mglru"]

[[cells.extra]]
capacity = "0.45mem"
mechanism = "memboot"
reclaim = "classic"
"""


def _running(db, cid, host):
    try:
        return next((r for r in _rows(db, cid) if r.host == host and r.state == "running"),
                    None)
    except Exception:  # noqa: BLE001 - the campaign may not be created yet, or the db busy
        return None


def _waiting(host_entry, connect, rid, deadline) -> bool:
    """True once the controller waits for `rid` on the guest (its `runner.py wait`)."""
    t = connect(host_entry)
    try:
        while time.monotonic() < deadline:
            if t.run(["pgrep", "-f", f"runner.py wait {rid}"], timeout=60, check=False).rc == 0:
                return True
            time.sleep(0.5)
    finally:
        t.close()
    return False


def _first_running(db, host, deadline):
    r = None
    while r is None and time.monotonic() < deadline:
        r = _running(db, CID, host)
        time.sleep(0.5)
    return r


def _freeze(db, twin_hosts, connect, stopped, log, deadline):
    """twin-a: SIGSTOP its qemu (the PID the twin lab's state names, checked against its
    command line) once the controller waits for its first run."""
    from bench.lab import twin as lab_twin
    from bench.lab import twin_bmc
    r = _first_running(db, "twin-a", deadline)
    if r is None or not _waiting(twin_hosts["twin-a"], connect, r.run_id, deadline):
        return
    time.sleep(2)                   # into the run
    pid = twin_bmc.qemu_pid(lab_twin._load_state()["guests"]["twin-a"])
    assert pid, "twin-a's qemu is not running"
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    log.append(("frozen", "twin-a", r.run_id, pid, time.time()))


# on the guest: send a signal (argv[2]: STOP or CONT) to the runner of a run and every child
# it recorded (the agent), from its active record (argv[1]); exit 1 while the record is not there
SIGNAL_RUN = ("import json, os, signal, sys\n"
              "d = json.load(open(sys.argv[1]))\n"
              "pids = [d['runner_pid']] + [x['pid'] for x in d['pids']]\n"
              "for p in pids:\n"
              "    os.kill(p, getattr(signal, 'SIG' + sys.argv[2]))\n"
              "print(' '.join(map(str, pids)))\n")


def _refuse(db, twin_hosts, connect, hosts_dir, log, deadline):
    """twin-b: `bench hosts reboot twin-b` (a real CLI process) while its first run is in
    progress. The run is held in progress for the attempt (its runner and agent stopped inside
    the guest, continued right after: well inside the stall limit, PATIENCE_S): the CLI takes
    tens of seconds on a loaded machine, longer than a tiny run, and a run that ended before
    the check is rightly not refused (the reboot would then go ahead under the campaign)."""
    h = twin_hosts["twin-b"]
    r = _first_running(db, "twin-b", deadline)
    if r is None:
        return
    active = f"{h.work_dir}/active/{r.run_id}.json"
    t = connect(h)
    try:
        held = None
        while held is None and time.monotonic() < deadline:
            res = t.run(["python3", "-c", SIGNAL_RUN, active, "STOP"], timeout=60, check=False)
            if res.rc == 0 and res.stdout.strip():
                held = res.stdout.split()
            else:
                time.sleep(0.3)
        if held is None:
            return
        try:
            p = subprocess.run([sys.executable, "-m", "bench", "hosts", "reboot", "twin-b",
                                "--mem", MEM, "--hosts-dir", str(hosts_dir)],
                               capture_output=True, text=True, timeout=300)
        finally:
            t.run(["kill", "-CONT", *held], timeout=60, check=False)
    finally:
        t.close()
    log.append(("reboot-attempt", "twin-b", r.run_id, p.returncode, p.stdout + p.stderr))


@pytest.fixture(scope="module")
def campaign(twin, twin_hosts, connect, tmp_path_factory):
    from bench.cli import main
    from bench.lab import twin as lab_twin
    from bench.lab import twin_bmc
    d = tmp_path_factory.mktemp("campaign-twin")
    (d / "reclaim-twin.toml").write_text(MATRIX)
    db = f"sqlite:///{d / 'bench.db'}"
    stopped: list[int] = []
    log: list[tuple] = []
    deadline = time.monotonic() + 900
    _wipe_pools(twin_hosts, connect)
    injectors = [threading.Thread(target=_freeze, args=(db, twin_hosts, connect, stopped, log,
                                                        deadline), daemon=True),
                 threading.Thread(target=_refuse, args=(db, twin_hosts, connect,
                                                        twin["hosts_dir"], log, deadline),
                                  daemon=True)]
    for t in injectors:
        t.start()
    t0 = time.monotonic()
    try:
        rc = main(["schedule", "--matrix", str(d / "reclaim-twin.toml"), "--hosts",
                   ",".join(HOSTS), "--hosts-dir", str(twin["hosts_dir"]), "--seed", "13",
                   "--campaign", CID, "--db", db, "--data-dir", str(d / "data"),
                   "--threads", "2", "--retries", "1", "--reconnect-timeout", str(PATIENCE_S)])
        secs = round(time.monotonic() - t0, 1)
        for t in injectors:
            t.join(60)
    finally:
        for pid in stopped:         # never leave a lab qemu stopped
            g = lab_twin._load_state()["guests"]["twin-a"]
            if twin_bmc.qemu_pid(g) == pid:
                os.kill(pid, signal.SIGCONT)
    print(f"twin campaign: {secs}s, exit {rc}, injected: {log}")
    yield {"rc": rc, "db": db, "cid": CID, "seconds": secs, "log": log}
    _wipe_pools(twin_hosts, connect)


def _wipe_pools(twin_hosts, connect):
    """The campaign's pool geometry is its own: start and end without a pool."""
    for n in HOSTS:
        h = twin_hosts[n]
        t = connect(h)
        try:
            t.run(["rm", "-rf", "--one-file-system", h.pool_dir], timeout=120, check=False)
        finally:
            t.close()


def _injected(c, what):
    return next((e for e in c["log"] if e[0] == what), None)


def _run_seconds(c) -> dict[str, float]:
    """Each run's time from `running` to `collected`, from the journal."""
    from datetime import datetime
    by_ref = {r.ref: r.run_id for r in _rows(c["db"], c["cid"])}
    start: dict[str, float] = {}
    out = {}
    for j in _journal(c, ("state",)):
        rid = by_ref.get(j.run_ref)
        if j.get("to") == "running":
            start[rid] = datetime.fromisoformat(j.t).timestamp()
        elif j.get("to") in ("collected", "failed") and rid in start:
            out[rid] = round(datetime.fromisoformat(j.t).timestamp() - start.pop(rid), 1)
    return out


def test_campaign_finished_on_both_twins_with_one_interrupted_run(campaign):
    for e in campaign["log"]:
        print(e)
    p = _progress(campaign)
    diag = json.dumps({k: p[k] for k in ("state", "counts", "quarantined", "warnings")},
                      default=str)
    print(f"run seconds: {_run_seconds(campaign)}")
    assert _injected(campaign, "frozen"), campaign["log"]
    assert p["state"] == "done" and not p["quarantined"], diag
    # two runs per twin; the frozen one failed, the other three were judged
    assert p["total"] == 4 and p["counts"] == {"failed": 1, "validated": 3}, diag
    assert campaign["rc"] == 1          # a campaign with a failed run exits 1


def test_interrupted_run_failed_with_the_bmc_power_cycle_in_its_reason(campaign):
    rid = _injected(campaign, "frozen")[2]
    by_ref = {r.ref: r for r in _rows(campaign["db"], campaign["cid"])}
    fails = [j for j in _journal(campaign, ("state",)) if j.get("to") == "failed"
             and by_ref[j.run_ref].run_id == rid and j.get("interrupted")]   # not a retried one
    assert len(fails) == 1, [f.message for f in fails]
    f = fails[0]
    print(f"{rid}: {f.message}")
    assert by_ref[f.run_ref].state == "failed" and f.get("interrupted") and f.get("final")
    steps = f.get("ladder")
    assert [s["rung"] for s in steps] == ["look", "power-cycle"], steps
    assert steps[0]["outcome"] == "unreachable" and steps[1]["outcome"] == "ok", steps
    pc = steps[1]["detail"]
    assert pc.startswith("`ipmitool -I lanplus") and "chassis power cycle` exit 0" in pc, pc
    assert "ok boot_id changed" in pc and "FAIL" not in pc, pc
    assert "look: unreachable" in f.message and "power-cycle: ok" in f.message
    print(f"BMC power cycle to a proven boot: {steps[1]['seconds']}s")
    # the campaign went on with twin-a: its memboot run after the power cycle was judged
    later = [r for r in by_ref.values() if r.host == "twin-a" and r.run_id != rid]
    assert [r.state for r in later] == ["validated"], [(r.run_id, r.state) for r in later]


def test_reboot_during_a_run_was_refused_and_the_run_kept(campaign):
    e = _injected(campaign, "reboot-attempt")
    assert e, campaign["log"]
    _, host, rid, rc, out = e
    assert rc == 1, out
    assert f"run {rid} (phase" in out and "in progress: refusing to reboot" in out, out
    assert "Traceback" not in out
    state = {r.run_id: r.state for r in _rows(campaign["db"], campaign["cid"])}
    assert state[rid] == "validated", state


def test_grub_memboots_with_mglru_at_boot_were_proven_and_the_twins_restored(
        campaign, twin_hosts, connect):
    reboots = _journal(campaign, ("reboot",))
    for r in reboots:
        print(r.message)
    for host in HOSTS:
        mine = [r.data for r in reboots if r.get("host") == host]
        into = [r for r in mine if not r.get("restore")]
        # into the lru_gen=on default cell's boot (the current boot's mask is not taken as
        # known), then the GRUB memboot with MGLRU off at boot
        assert [(r["boot"].get("mem"), r["boot"].get("lru_gen")) for r in into
                if r["boot"].get("mem")] == [(MEM, "off")], mine
        assert all(r["ok"] for r in mine), mine
        assert [r for r in mine if r.get("restore")], f"{host} was not restored: {mine}"
        t = connect(twin_hosts[host])
        try:
            cmd = t.run(["cat", "/proc/cmdline"], timeout=60).stdout.split()
            lru = t.run(["cat", "/sys/kernel/mm/lru_gen/enabled"], timeout=60).stdout.strip()
        finally:
            t.close()
        assert not any(a.startswith(("mem=", "bench.lru_gen=")) for a in cmd), cmd
        assert int(lru, 16) != 0, lru         # the default boot's MGLRU again
    from bench.store import queries
    from bench.store.db import open_store
    store = open_store(campaign["db"])
    try:
        runs = queries.load_runs(store, campaign=campaign["cid"])
    finally:
        store.close()
    mem = int(MEM[:-1]) * 10 ** 6
    booted = [r for r in runs if r["mechanism"] == "memboot"]
    assert {r["host"] for r in booted} == set(HOSTS), runs
    for r in booted:        # the guest ran with mem= and with MGLRU off from boot
        assert r["mem_total_bytes"] is not None and mem * 0.75 < r["mem_total_bytes"] <= mem, r
        assert r["mglru_loop_entry"] is False and r["mglru_end"] is False, r
