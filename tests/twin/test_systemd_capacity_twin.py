"""Tier 4: a cgroup cell on twin-a (aarch64, 16 KiB pages, systemd as PID 1, cgroup v2) takes
the systemd path: the wall is the transient scope bench-wall-<id>.scope in bench.slice with
MemoryMax/MemorySwapMax=0 set by systemd, the runner runs as bench-run-<id>.service, and both
show in `systemctl status` while the run goes (watched from a second SSH connection); the
runner's phases reach the journal; after the run systemd has removed both and no bench-* cgroup
was made at the root by hand."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from bench.execute.campaign.onerun import run_hosts
from bench.judge.bundle import load, read_dir, verify
from bench.judge.measured import metrics
from bench.matrix.runspec import RunOptions
from bench.plan.prepared import plan_from_trace_file
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.twin, pytest.mark.root, pytest.mark.slow]

MIB = 1 << 20
HOST = "twin-a"
LAYERS, EXPERTS, EXPERT_BYTES = 2, 32, MIB          # pool: 64 MiB
CELL = "16Mi-cgroup-mglru"                          # MemoryMax = 16 MiB (headroom 0) << pool
OPTIONS = RunOptions(threads=2, passes=2, cgroup_headroom_bytes=0, timeline_interval_ms=100)


def _watch(connect, host, stop: threading.Event, seen: dict) -> None:
    """From a connection of its own: whenever status.json names a run, `systemctl status` of
    its runner unit and its wall scope; keeps the first answer of each that shows it active."""
    t = connect(host)
    try:
        while not stop.is_set():
            r = t.run(["sh", "-c", 'ls -t "$1"/runs | head -n 1', "bench-watch",
                       host.work_dir], check=False, timeout=30)
            rid = r.stdout.strip()
            for unit in (f"bench-run-{rid}.service", f"bench-wall-{rid}.scope"):
                if rid and unit not in seen:
                    s = t.run(["systemctl", "status", "--no-pager", "--lines=0", unit],
                              check=False, timeout=30)
                    if "Active: active" in s.stdout:
                        seen[unit] = s.stdout
            time.sleep(0.5)
    finally:
        t.close()


@pytest.fixture(scope="module")
def scope_run(tmp_path_factory, twin_hosts, connect):
    d = tmp_path_factory.mktemp("twin-scope")
    data = d / "data"
    trace = d / "t.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", layers=LAYERS, tokens=60,
                                               expert_bytes=EXPERT_BYTES, spec_accept=0.0,
                                               fallback=0.0))) + "\n")
    info, path = plan_from_trace_file(trace, data_dir=data)
    host = twin_hosts[HOST]
    stop, seen = threading.Event(), {}
    watcher = threading.Thread(target=_watch, args=(connect, host, stop, seen), daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        [res] = [r.as_dict() for r in run_hosts(
            [host], CELL, info, path, f"twin-scope-{time.strftime('%H%M%S')}",
            options=OPTIONS, data_dir=data, db_url=f"sqlite:///{d / 'bench.db'}",
            reconnect_timeout_s=300.0, chunk_s=15.0)]
    finally:
        stop.set()
        watcher.join(60)
    print(f"twin scope run: {time.monotonic() - t0:.1f} s, timings {res.get('timings')}")
    assert res["ok"] and not res["quarantined"], json.dumps(res, default=str)[:4000]
    bundle = Path(res["bundle"])
    verify(read_dir(bundle))
    res["b"] = load(read_dir(bundle), str(bundle))
    res["runner"] = json.loads((bundle / "runner.json").read_text())     # not in the model
    res["seen"] = seen
    res["host"] = host
    return res


def test_wall_is_a_systemd_scope(scope_run):
    b = scope_run["b"]
    rid = scope_run["run_id"]
    assert b.host["arch"] == "aarch64" and b.host["page_size"] == 16384
    assert b.host["systemd"] is True and b.host["capacity_path"] == "systemd-scope"
    cap = b.capacity
    assert cap["wall"] == "systemd-scope" and cap["unit"] == f"bench-wall-{rid}.scope"
    assert cap["path"] == f"/sys/fs/cgroup/bench.slice/bench-wall-{rid}.scope"
    assert cap["systemd"]["MemoryMax"] == str(16 * MIB)
    assert cap["systemd"]["MemorySwapMax"] == "0" and cap["systemd"]["Delegate"] == "yes"
    assert cap["limit_bytes"] == 16 * MIB == cap["limit_read_back"]     # memory.max read back
    assert cap["swap_limit_read_back"] in (0, None)
    agent = scope_run["runner"]["agent"]
    assert agent["in_cgroup"] is True, agent["cgroup"]
    assert f"0::/bench.slice/bench-wall-{rid}.scope" in agent["cgroup"]
    # warm-up and measurement in that one scope: the wall bit while measuring
    peak = max(r["memory_current"] for r in b.timeline if r["phase"] == "measuring")
    assert peak >= 0.9 * 16 * MIB, peak
    assert metrics(b)["device_bytes"] > 0


def test_runner_is_a_unit_and_both_showed_in_systemctl_status(scope_run):
    runner, rid, seen = scope_run["runner"], scope_run["run_id"], scope_run["seen"]
    assert runner["detached_as"] == "systemd-unit"
    assert runner["unit"] == f"bench-run-{rid}.service"
    runner_status = seen.get(f"bench-run-{rid}.service", "")
    wall_status = seen.get(f"bench-wall-{rid}.scope", "")
    assert "bench runner of run" in runner_status, seen
    assert "bench capacity wall of run" in wall_status, seen
    print(runner_status + wall_status)


def test_journal_has_the_phases_and_systemd_cleaned_up(scope_run, connect):
    rid, host = scope_run["run_id"], scope_run["host"]
    t = connect(host)
    try:
        j = t.run(["journalctl", "--no-pager", "-o", "cat", "-u", f"bench-run-{rid}.service"],
                  check=False, timeout=60).stdout
        for phase in ("capacity_applied", "warmup", "measuring", "done"):
            assert f"phase {phase}" in j, j[-3000:]
        gone = t.run(["test", "-e", f"/sys/fs/cgroup/bench.slice/bench-wall-{rid}.scope"],
                     check=False, timeout=30)
        assert gone.rc != 0
        st = t.run(["systemctl", "show", "--property=ActiveState", "--",
                    f"bench-wall-{rid}.scope"], check=False, timeout=30).stdout
        assert "ActiveState=active" not in st
        root = t.run(["sh", "-c", "ls -d /sys/fs/cgroup/bench-* 2>/dev/null; true"],
                     check=False, timeout=30).stdout
        assert root.strip() == "", root
    finally:
        t.close()
