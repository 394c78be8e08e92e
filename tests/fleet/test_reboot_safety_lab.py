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
