"""Reboot safety on the netns lab (real sshd, the real runner and agent): a reboot, a restore or
an MGLRU toggle of a host with a run in progress is refused with one line naming the run, and
the run goes on untouched; `--force` names the run it kills, the host really reboots (the lab's
own restart of that host's namespace, `method = "command"` as in test_campaign_memboot_lab) and
the run ends failed as a runner that died. Before the refusal existed, `bench hosts restore`
during `bench run` was proven and killed the run (issue 13).

A campaign owns its host from its worker's start to its end (bench.hosts.lock.HostClaim):
between two of its runs (the runner ended, nothing in progress, where the run guard alone let a
reboot through) `bench hosts reboot|restore|mglru`, `bench run` and a second campaign are
refused naming the campaign and its controller; `--force` names the campaign it disturbs and
really reboots the host; the campaign re-takes its claim in the new boot and finishes; after
its end the reboot works. Needs root."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.execute.campaign.onerun import run_hosts
from bench.hosts.inventory import RebootSpec, load_inventory, render_host_toml
from bench.hosts.procfs import mglru_on, parse_lru_gen
from bench.matrix.runspec import RunOptions
from bench.plan.prepared import plan_from_trace_file
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_pools")]
X = "lab-netns-1"
LRU = Path("/sys/kernel/mm/lru_gen/enabled")


def rebootable(lab, dest: Path) -> Path:
    inv = load_inventory(lab.hosts_dir)
    dest.mkdir()
    pid = os.getpid()
    command = ("setsid", "-f", "nsenter", f"--net=/proc/{pid}/ns/net",
               f"--mount=/proc/{pid}/ns/mnt", "--", sys.executable, "-m", "bench.lab.netns",
               "reboot", X, "--state-dir", str(lab.state_dir), "--cmdline={cmdline}",
               "--delay", "0.3")
    x = dataclasses.replace(inv[X], reboot=RebootSpec(allowed=True, method="command",
                                                      command=command, down_timeout=10,
                                                      up_timeout=20))
    (dest / f"{X}.toml").write_text(render_host_toml(x))
    return dest


def boot_id(lab) -> str:
    return (Path(lab.host(X).dir) / "boot_id").read_text().strip()


def reboot_log(lab) -> str:
    p = Path(lab.host(X).dir) / "reboot.log"
    return p.read_text() if p.exists() else ""


def phase_of(status: Path) -> dict:
    try:
        return json.loads(status.read_text())
    except (OSError, ValueError):
        return {}


def wait_live(status: Path, th: threading.Thread, timeout: float = 90.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert th.is_alive(), "bench run ended before the run was under way"
        st = phase_of(status)
        if st.get("phase") in ("warmup", "measuring"):
            return st
        time.sleep(0.1)
    raise AssertionError(f"{status}: never reached warmup/measuring")


def test_a_run_in_progress_refuses_reboot_restore_mglru_and_force_names_it(
        lab_host_up, lab_inventory, tmp_path, capsys):
    lab = lab_host_up
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=400, expert_bytes=1 << 20,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
    plan, plan_path = plan_from_trace_file(trace, data_dir=tmp_path / "data")
    hosts_dir = rebootable(lab, tmp_path / "hosts")
    boot_before, log_before = boot_id(lab), reboot_log(lab)
    results: list = []
    th = threading.Thread(target=lambda: results.extend(r.as_dict() for r in run_hosts(
        [lab_inventory[X]], "1g-none-classic", plan, plan_path, "rbs1",
        options=RunOptions(threads=1, passes=400, timeline_interval_ms=200),
        data_dir=tmp_path / "data", db_url=f"sqlite:///{tmp_path / 'bench.db'}",
        reconnect_timeout_s=30.0, chunk_s=3.0)))
    th.start()
    status = Path(lab.host(X).dir) / "work" / "runs" / "rbs1" / "status.json"
    try:
        live = wait_live(status, th)
        capsys.readouterr()
        # MGLRU: ask the state the (shared) kernel already has, so nothing changes either way
        state = "on" if LRU.exists() and mglru_on(parse_lru_gen(LRU.read_text())) else "off"
        for argv, what in ((["hosts", "restore", X], "restore"),
                           (["hosts", "reboot", X, "--mem", "2G"], "reboot"),
                           (["hosts", "mglru", X, state], f"toggle MGLRU {state}")):
            rc = main([*argv, "--hosts-dir", str(hosts_dir)])
            err = capsys.readouterr().err.strip()
            assert rc == 1, err
            assert err.startswith(f"error: {X}: run rbs1 (phase "), err
            assert f"in progress: refusing to {what}" in err and "--force" in err, err
            # the refusal touched nothing: same boot, the runner alive in its run
            assert boot_id(lab) == boot_before
            st = phase_of(status)
            assert st.get("pid") == live["pid"] and st.get("phase") not in ("done", "failed")
            assert Path(f"/proc/{live['pid']}").exists()
        assert reboot_log(lab) == log_before       # no reboot was even triggered
        # --force: the run is named, the host reboots and the run dies with it
        rc = main(["hosts", "restore", X, "--force", "--hosts-dir", str(hosts_dir)])
        err = capsys.readouterr().err
        assert f"{X}: --force: run rbs1 (phase " in err and "restore kills it" in err, err
        assert rc == 0, err
        assert boot_id(lab) != boot_before
    finally:
        th.join(timeout=180)
    assert not th.is_alive()
    (r,) = results
    st = phase_of(status)
    assert not r["ok"] and st.get("phase") == "failed", json.dumps(r, default=str)[:2000]
    assert "died" in (st.get("reason") or ""), st.get("reason")


GUARD_MATRIX = """
name = "lab-guard"
description = "a memboot cell on a lab host busy with another controller's run"
repetitions = 1
memboot_overhead = "1G"

[workload]
trace = "tiny"
batch = 1
passes = 2

[estimate]
run_seconds = 5
reboot_seconds = 1

[cells]
capacities = ["1G"]
mechanisms = ["memboot"]
reclaims = ["classic"]
"""


def test_a_campaign_does_not_reboot_a_host_under_another_run(lab_host_up, lab_inventory,
                                                             tmp_path):
    """A campaign whose run needs a reboot of X while a `bench run` is in progress there:
    a one-run campaign holding X. It waits for X up to host_lock_wait_s, then quarantines
    X naming the run's campaign and leaving its own run pending, so it never disturbs that
    run; the other run completes untouched and X never reboots."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.store.campaigns import journal_rows, run_rows
    from bench.store.db import open_store
    lab = lab_host_up
    inv = load_inventory(lab.hosts_dir)
    hosts_dir = tmp_path / "hosts"
    rebootable(lab, hosts_dir)
    x = load_inventory(hosts_dir)[X]
    mem_total = next(int(ln.split()[1]) * 1024 for ln in
                     Path("/proc/meminfo").read_text().splitlines()
                     if ln.startswith("MemTotal:"))
    (hosts_dir / f"{X}.toml").write_text(render_host_toml(dataclasses.replace(
        x, mem_total=mem_total, mem_floor=1 << 30)))
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=400, expert_bytes=1 << 20,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
    plan, plan_path = plan_from_trace_file(trace, data_dir=tmp_path / "data")
    boot_before, log_before = boot_id(lab), reboot_log(lab)
    results: list = []
    th = threading.Thread(target=lambda: results.extend(r.as_dict() for r in run_hosts(
        [inv[X]], "1g-none-classic", plan, plan_path, "rbc1",
        options=RunOptions(threads=1, passes=15, timeline_interval_ms=200),
        data_dir=tmp_path / "data", db_url=f"sqlite:///{tmp_path / 'run.db'}",
        reconnect_timeout_s=30.0, chunk_s=3.0)))
    th.start()
    status = Path(lab.host(X).dir) / "work" / "runs" / "rbc1" / "status.json"
    try:
        wait_live(status, th)
        (tmp_path / "m.toml").write_text(GUARD_MATRIX)
        db = f"sqlite:///{tmp_path / 'bench.db'}"
        cplan, exp, m = build_plan(str(tmp_path / "m.toml"), [X], hosts_dir, 3, "cg")
        s = Settings(threads=1, passes=2, retries=0, data_dir=tmp_path / "cdata", db_url=db,
                     hosts_dir=hosts_dir, reconnect_timeout_s=5.0, chunk_s=2.0,
                     retry_pause_s=0.1, host_lock_wait_s=2.0)
        store = open_store(db)
        try:
            create(store, cplan, exp, m, [X], s, str(tmp_path / "m.toml"))
            Executor(store, "cg", s).run()
            (row,) = run_rows(store, "cg")
            msgs = [j.message for j in journal_rows(store, "cg")]
        finally:
            store.close()
        assert row.state == "pending", msgs[-6:]
        assert any(f"not claimed for campaign cg: {X}: locked by another controller: campaign "
                   "rbc1 (controller " in x for x in msgs), msgs[-6:]
        assert boot_id(lab) == boot_before and reboot_log(lab) == log_before
        assert phase_of(status).get("phase") not in ("failed",)
    finally:
        th.join(timeout=600)
    assert not th.is_alive()
    (r,) = results
    assert r["ok"], json.dumps(r, default=str)[:2000]


REPO = Path(__file__).resolve().parents[2]
CAMPAIGN = REPO / "tests" / "fixtures" / "matrices" / "lab-campaign.toml"


def cli(hosts_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own (another controller than the campaign's)."""
    return subprocess.run([sys.executable, "-m", "bench", *args, "--hosts-dir", str(hosts_dir)],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def first_line(p: subprocess.CompletedProcess) -> str:
    return (p.stderr.strip().splitlines() or [""])[0]


def no_live_run(lab, host) -> list:
    """The live runs on the host, waited for up to 5 s to be none (a runner exiting)."""
    from bench.hosts.lock import live_runs
    from bench.hosts.ssh import transport_for
    t = transport_for(host)
    try:
        end = time.monotonic() + 5
        while (runs := live_runs(t, host)) and time.monotonic() < end:
            time.sleep(0.2)
        return runs
    finally:
        t.close()


def test_a_campaign_owns_its_host_between_runs_and_lets_go_at_its_end(
        clean_pools, lab_host_up, tmp_path):
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.store.campaigns import run_rows
    from bench.store.db import open_store
    lab = lab_host_up
    hosts_dir = rebootable(lab, tmp_path / "hosts")
    x = load_inventory(hosts_dir)[X]
    cid = "claim-s5"
    owner = (rf"campaign {cid} \(controller {re.escape(socket.gethostname())}, pid "
             rf"{os.getpid()}, since \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)")
    state = "on" if LRU.exists() and mglru_on(parse_lru_gen(LRU.read_text())) else "off"
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=400, expert_bytes=1 << 20,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
    plan, plan_path = plan_from_trace_file(trace, data_dir=tmp_path / "data")
    seen: list[dict] = []       # what each between-runs check met (asserted after the run)
    ex: list = []

    def between(ev) -> None:
        """At a run's `collected` (its runner ended, the next run not started), on the
        campaign's worker thread: the campaign holds X and nothing runs there."""
        if ev.kind != "state" or "-> collected" not in ev.message or len(seen) >= 3:
            return
        got: dict = {"live": [r.run_id for r in no_live_run(lab, x)], "boot": boot_id(lab),
                     "takes": ex[0].workers[X].claim.takes}
        try:
            if len(seen) in (0, 2):
                got["cli"] = [(p.returncode, first_line(p)) for p in (
                    cli(hosts_dir, "hosts", "reboot", X, "--mem", "2G"),
                    cli(hosts_dir, "hosts", "restore", X),
                    cli(hosts_dir, "hosts", "mglru", X, state))]
            if len(seen) == 0:
                got["run"] = run_hosts([x], "1g-none-classic", plan, plan_path, "clm1",
                                       options=RunOptions(threads=1, passes=2),
                                       data_dir=tmp_path / "data", do_ingest=False,
                                       db_url=f"sqlite:///{tmp_path / 'clm1.db'}",
                                       reconnect_timeout_s=5.0)[0].as_dict()
                got["other"] = second_campaign(tmp_path, hosts_dir)
            if len(seen) == 1:
                p = cli(hosts_dir, "hosts", "restore", X, "--force")
                got["force"] = (p.returncode, p.stderr, boot_id(lab))
        except Exception as exc:  # noqa: BLE001 - asserted below, not lost in the executor
            got["error"] = repr(exc)
        seen.append(got)

    db = f"sqlite:///{tmp_path / 'bench.db'}"
    cplan, exp, m = build_plan(str(CAMPAIGN), [X], hosts_dir, 5, cid)
    s = Settings(threads=1, data_dir=tmp_path / "cdata", db_url=db, hosts_dir=hosts_dir,
                 reconnect_timeout_s=20.0, chunk_s=2.0, retry_pause_s=0.5)
    store = open_store(db)
    boot0, log0 = boot_id(lab), reboot_log(lab)
    t0 = time.monotonic()
    try:
        create(store, cplan, exp, m, [X], s, str(CAMPAIGN))
        ex.append(Executor(store, cid, s, on_event=between))
        res = ex[0].run()
        rows = run_rows(store, cid)
    finally:
        store.close()
    secs = time.monotonic() - t0
    assert res.state == "done" and not res.quarantined, res.summary
    assert all(r.state in ("validated", "rejected") for r in rows), [(r.run_id, r.state)
                                                                   for r in rows]
    assert len(seen) == 3 and not any("error" in g for g in seen), seen
    first, forced, after = seen
    # 1. between two runs (nothing in progress): every other controller refused, named
    assert first["live"] == [] and first["takes"] == 1 and first["boot"] == boot0, first
    for (rc, line), what in zip(first["cli"], ("reboot", "restore", f"toggle MGLRU {state}")):
        assert rc == 1 and re.fullmatch(rf"error: {X}: owned by {owner}: refusing to {what}",
                                        line), line
    r = first["run"]
    # `bench run` (a one-run campaign): refused at once, its host quarantined naming the owner
    assert not r["ok"] and r["quarantined"] and r["stage"] == "pending", r
    assert re.search(rf"not claimed for campaign clm1: {X}: locked by another controller: "
                     rf"{owner}", r["error"]["message"]), r
    other = first["other"]
    assert other["state"] == "incomplete" and re.search(
        rf"not claimed for campaign claim-o: {X}: locked by another controller: {owner}",
        other["quarantined"].get(X, "")), other
    # 2. --force names the campaign it disturbs and the host really reboots between its runs
    rc, err, boot_forced = forced["force"]
    assert forced["live"] == [] and rc == 0, err
    assert re.search(rf"{X}: --force: the host is owned by {owner}; restore disturbs it between "
                     "its runs", err), err
    assert boot_forced != boot0 and reboot_log(lab) != log0
    # 3. the campaign took its host again in the new boot: still owned, still refused
    assert after["takes"] == 2 and after["boot"] == boot_forced, after
    for (rc, line), what in zip(after["cli"], ("reboot", "restore", f"toggle MGLRU {state}")):
        assert rc == 1 and re.fullmatch(rf"error: {X}: owned by {owner}: refusing to {what}",
                                        line), line
    assert ex[0].workers[X].claim.held is False
    # 4. the campaign ended: the host is free, the reboot works
    p = cli(hosts_dir, "hosts", "restore", X)
    assert p.returncode == 0 and "proven" in p.stdout + p.stderr, p.stdout + p.stderr
    assert boot_id(lab) != boot_forced
    p = cli(hosts_dir, "hosts", "mglru", X, state)
    # past the lock; a kernel built without MGLRU (this machine's may be) then refuses the toggle
    assert p.returncode == 0 or (LRU.exists() is False and first_line(p) == (
        f"error: {X}: kernel has no /sys/kernel/mm/lru_gen (built without MGLRU): cannot "
        "toggle it")), p.stderr
    print(f"\nclaim: campaign of {len(rows)} runs in {secs:.1f}s with 3 between-run checks")


def second_campaign(tmp_path: Path, hosts_dir: Path) -> dict:
    """Another campaign on X while the first one owns it: waits host_lock_wait_s, then
    quarantines X naming the owner."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.store.db import open_store
    db = f"sqlite:///{tmp_path / 'other.db'}"
    cplan, exp, m = build_plan(str(CAMPAIGN), [X], hosts_dir, 6, "claim-o")
    s = Settings(threads=1, data_dir=tmp_path / "odata", db_url=db, hosts_dir=hosts_dir,
                 reconnect_timeout_s=5.0, chunk_s=2.0, retry_pause_s=0.1, host_lock_wait_s=2.0)
    store = open_store(db)
    try:
        create(store, cplan, exp, m, [X], s, str(CAMPAIGN))
        res = Executor(store, "claim-o", s).run()
    finally:
        store.close()
    return {"state": res.state, "quarantined": res.quarantined}
