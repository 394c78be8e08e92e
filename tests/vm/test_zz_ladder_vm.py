"""Tier 3 acceptance of the recovery ladder (bench.execute.campaign.ladder) on the qemu guests.

One campaign of three small runs per guest (`bench schedule` through the CLI, the host
patience kept small with --reconnect-timeout), two injected failures on each guest's first run:
- lab-a's guest is frozen mid-run (SIGSTOP of its qemu, the PID from the lab state): SSH stops
  answering, the ladder power-cycles it through the inventory's `[reboot] power_cycle` argv
  (the lab's qemu restart) and proves the new boot with the reboot gate;
- lab-b's agent is stopped inside the guest (SIGSTOP over SSH of the agent PID the runner
  recorded): SSH answers but the run stops advancing, the ladder reboots it over SSH (kexec,
  the inventory's method) and proves it.
Both interrupted runs end `failed` with the ladder's steps in their reason, the campaign
finishes on both guests and the runs after the interruption are retained. The finalizer
continues any qemu this test stopped (lab PIDs only); the lab fixture takes the lab down."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.support.campaign_db import journal_of as _journal
from tests.support.campaign_db import progress_of as _progress
from tests.support.campaign_db import rows_of as _rows

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.slow]

HOSTS = ["lab-a", "lab-b"]
PATIENCE_S = 45

MATRIX = """
name = "ladder"
description = "three small runs per host for the recovery ladder"
reference = "bench's own check"
repetitions = 1

[workload]
trace = "tiny"
batch = 1
passes = 8            # runs long enough to be caught while the controller waits for them

[order]
randomize = false
interleave_reps = true

[hosts]
tags = "any"
placement = "each"

[estimate]
run_seconds = 40
reboot_seconds = 90

[cells]
capacities = ["0.25mem", "0.5mem"]
mechanisms = ["cgroup"]
reclaims = ["classic"]

[[cells.extra]]
capacity = "0.5mem"
mechanism = "none"
reclaim = "classic"
"""


# on the guest: SIGSTOP the runner of a run and every child it recorded (the agent), from its
# active record (argv[1]); exit 1 while the record is not there yet
STOP_RUN = ("import json, os, signal, sys\n"
            "d = json.load(open(sys.argv[1]))\n"
            "pids = [d['runner_pid']] + [x['pid'] for x in d['pids']]\n"
            "for p in pids:\n"
            "    os.kill(p, signal.SIGSTOP)\n"
            "print(' '.join(map(str, pids)))\n")


def _running(db, cid, host):
    try:
        return next((r for r in _rows(db, cid) if r.host == host and r.state == "running"),
                    None)
    except Exception:  # noqa: BLE001 - the campaign may not be created yet, or the db busy
        return None


def _qemu_pid(name):
    from bench.lab import vm as lab_vm
    g = lab_vm._load_state()["guests"][name]
    return g["pid"] if lab_vm._is_our_qemu(g["pid"], g["overlay"]) else None


def _freeze(db, cid, host_entry, connect, stopped, log, deadline):
    """lab-a: SIGSTOP its qemu once the controller waits for one of its runs (its `runner.py
    wait` is on the guest), seen over one SSH connection opened first and kept open. Any run of
    lab-a will do: a run of a few seconds may end before the first look (seen in CI)."""
    t = connect(host_entry)
    try:
        while time.monotonic() < deadline:
            r = _running(db, cid, "lab-a")
            if r is not None and t.run(["pgrep", "-f", f"runner.py wait {r.run_id}"],
                                       timeout=60, check=False).rc == 0:
                break
            time.sleep(0.2)
        else:
            return
    finally:
        t.close()
    pid = _qemu_pid("lab-a")
    assert pid, "lab-a's qemu is not running"
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    log.append(("frozen", "lab-a", r.run_id, pid, time.time()))


def _wedge(db, cid, host_entry, connect, log, deadline):
    """lab-b: SIGSTOP the runner (and the agent once recorded) of one of its runs, inside the
    guest, over one SSH connection opened first and kept open; a run that ended before its
    active record was seen is passed over for the next (lab-b's runs take ~7 s on a quiet
    machine, and in one CI run all three ended before a wedge aimed only at the first)."""
    t = connect(host_entry)
    try:
        while time.monotonic() < deadline:
            r = _running(db, cid, "lab-b")
            if r is not None:
                active = f"{host_entry.work_dir}/active/{r.run_id}.json"
                res = t.run(["python3", "-c", STOP_RUN, active], timeout=60, check=False)
                if res.rc == 0 and res.stdout.strip():
                    log.append(("wedged", "lab-b", r.run_id, res.stdout.strip(), time.time()))
                    return
            time.sleep(0.2)
    finally:
        t.close()


@pytest.fixture(scope="module")
def campaign(lab, lab_hosts, connect, tmp_path_factory):
    from bench.cli import main
    d = tmp_path_factory.mktemp("ladder-vm")
    (d / "ladder.toml").write_text(MATRIX)
    db = f"sqlite:///{d / 'bench.db'}"
    cid = "ladder-vm"
    stopped: list[int] = []
    log: list[tuple] = []
    deadline = time.monotonic() + 900
    injectors = [threading.Thread(target=_freeze, args=(db, cid, lab_hosts["lab-a"], connect,
                                                        stopped, log, deadline), daemon=True),
                 threading.Thread(target=_wedge, args=(db, cid, lab_hosts["lab-b"], connect,
                                                       log, deadline), daemon=True)]
    for t in injectors:
        t.start()
    t0 = time.monotonic()
    try:
        rc = main(["schedule", "--matrix", str(d / "ladder.toml"), "--hosts", ",".join(HOSTS),
                   "--hosts-dir", str(lab["hosts_dir"]), "--seed", "5", "--campaign", cid,
                   "--db", db, "--data-dir", str(d / "data"), "--threads", "1",
                   "--retries", "1", "--reconnect-timeout", str(PATIENCE_S)])
    finally:
        for pid in stopped:         # never leave a lab qemu stopped
            try:
                if _qemu_pid("lab-a") == pid:
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    secs = round(time.monotonic() - t0, 1)
    print(f"ladder campaign: {secs}s, exit {rc}, injected: {log}")
    return {"rc": rc, "db": db, "cid": cid, "seconds": secs, "log": log}


def _interrupted(c, host):
    """The run the test interrupted on `host`: its failed entry (the ladder's steps)."""
    rid = next(e[2] for e in c["log"] if e[1] == host)
    by_ref = {r.ref: r for r in _rows(c["db"], c["cid"])}
    fails = [j for j in _journal(c, ("state",)) if j.get("to") == "failed"
             and by_ref[j.run_ref].run_id == rid]
    return rid, by_ref, fails


def test_both_failures_were_injected_and_the_campaign_finished(campaign):
    for e in campaign["log"]:
        print(e)
    assert {e[1] for e in campaign["log"]} == set(HOSTS), campaign["log"]
    p = _progress(campaign)
    diag = json.dumps({k: p[k] for k in ("state", "counts", "quarantined", "warnings")},
                      default=str)
    assert p["state"] == "done" and not p["quarantined"], diag
    # every run ended: the two interrupted ones failed, the other four validated
    assert p["total"] == 6 and p["counts"] == {"failed": 2, "validated": 4}, diag
    # each rung is in the journal as a warning line, which the views show as text
    ladder = [j.message for j in _journal(campaign, ("warning",))
              if "recovery ladder" in j.message]
    for m in ladder:
        print(m)
    assert any(m.startswith("lab-a: recovery ladder:") and "power-cycle: ok" in m
               for m in ladder), ladder
    assert any(m.startswith("lab-b: recovery ladder:") and "ssh-reboot: ok" in m
               for m in ladder), ladder
    assert any("recovery ladder" in w["message"] for w in p["warnings"]), diag


@pytest.mark.parametrize("host,symptom,rung", [("lab-a", "unreachable", "power-cycle"),
                                               ("lab-b", "wedged", "ssh-reboot")])
def test_interrupted_run_failed_with_the_ladder_steps_and_the_next_runs_retained(
        campaign, host, symptom, rung):
    rid, by_ref, fails = _interrupted(campaign, host)
    assert len(fails) == 1, [f.message for f in fails]
    f = fails[0]
    print(f"{rid}: {f.message}")
    assert by_ref[f.run_ref].state == "failed"
    assert f.get("interrupted") and f.get("final")
    steps = f.get("ladder")
    assert [s["rung"] for s in steps] == ["look", rung], steps
    assert steps[0]["outcome"] == symptom and steps[1]["outcome"] == "ok", steps
    assert f"look: {symptom}" in f.message and f"{rung}: ok" in f.message
    assert "boot_id changed" in steps[1]["detail"] or rung == "ssh-reboot"
    # the campaign went on with this host: every later run of it ended, and was retained
    later = [r for r in by_ref.values() if r.host == host and r.run_id != rid]
    assert len(later) == 2 and all(r.state == "validated" for r in later), \
        [(r.run_id, r.state) for r in later]


def test_recovered_guests_run_their_default_boot_again(campaign, lab_hosts, connect):
    for host in HOSTS:
        t = connect(lab_hosts[host])
        try:
            cmd = t.run(["cat", "/proc/cmdline"], timeout=60).stdout.split()
        finally:
            t.close()
        assert not any(a.startswith(("mem=", "bench.lru_gen=")) for a in cmd), cmd
