"""Reboot safety on the netns lab (real sshd, the real runner and agent): a reboot, a restore or
an MGLRU toggle of a host with a run in progress is refused with one line naming the run, and
the run goes on untouched; `--force` names the run it kills, the host really reboots (the lab's
own restart of that host's namespace, `method = "command"` as in test_campaign_memboot_lab) and
the run ends failed as a runner that died. Before the refusal existed, `bench hosts restore`
during `bench run` was proven and killed the run (issue 13). Needs root."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.cli import main
from bench.execute.single import run_hosts
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
    its boot step waits for the run up to host_lock_wait_s, then the attempt fails naming the
    run; the other run completes untouched and X never reboots."""
    from bench.cli.campaign import build_plan
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
        assert row.state == "failed", msgs[-6:]
        assert any(f"{X}: run rbc1 (phase " in x and "in progress: refusing to reboot for "
                   in x for x in msgs), msgs[-6:]
        assert boot_id(lab) == boot_before and reboot_log(lab) == log_before
        assert phase_of(status).get("phase") not in ("failed",)
    finally:
        th.join(timeout=600)
    assert not th.is_alive()
    (r,) = results
    assert r["ok"], json.dumps(r, default=str)[:2000]
