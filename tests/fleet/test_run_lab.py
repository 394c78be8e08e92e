"""`bench run` on the netns lab: real sshd, real SSH transport, the real host-side runner and
agent, a real SQLite store built by the migrations; faults are real (sshd killed mid-run, a
host that never comes back). Lab hosts share this kernel and see no cgroup mount, so the cells
are `none` cells (and `classic`: this CI kernel may lack MGLRU). Needs root."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import SafetyError
from bench.execute.campaign.onerun import run_hosts
from bench.judge.bundle import read_dir, verify
from bench.lab import netns as lab_netns
from bench.matrix.runspec import RunOptions
from bench.plan.prepared import plan_from_trace_file
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_pools")]
NAMES = ["lab-netns-1", "lab-netns-2"]
EXPERT_BYTES = 1 << 20          # pool: 4 layers x 32 experts x 1 MiB = 128 MiB per host
CELL = "1g-none-classic"        # any case: bench stores it as 1G-none-classic (10^9 bytes)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("run-lab")
    trace = d / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=400, expert_bytes=EXPERT_BYTES,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
    data = d / "data"
    plan, plan_path = plan_from_trace_file(trace, data_dir=data)
    return {"trace": trace, "data": data, "db": f"sqlite:///{d / 'bench.db'}", "plan": plan,
            "plan_path": plan_path}


def files_under(lab, name: str) -> set[str]:
    root = Path(lab.host(name).dir)
    return {str(p.relative_to(root)) for sub in ("work", "pool") for p in (root / sub).rglob("*")}


def test_bad_input_touches_no_host(lab, lab_inventory, work, capsys):
    hosts = [lab_inventory[n] for n in NAMES]
    before = {n: files_under(lab, n) for n in NAMES}
    # capacity above MemTotal (known from the read-only probe: lab hosts have no memory.total)
    with pytest.raises(SafetyError) as e:
        run_hosts(hosts, "64G-none-classic", work["plan"], work["plan_path"], "bad1",
                  data_dir=work["data"], db_url=work["db"])
    assert "above the host's memory" in e.value.message and e.value.hint
    # a cell name with shell metacharacters: exit 2, one clear line
    rc = main(["run", "1g-none-classic;touch /tmp/bench-pwned", "--host", ",".join(NAMES),
               "--trace", str(work["trace"]), "--hosts-dir", str(lab.hosts_dir),
               "--data-dir", str(work["data"]), "--db", work["db"]])
    err = capsys.readouterr().err
    assert rc == 2 and "bad cell name" in err and "fix:" in err
    assert not Path("/tmp/bench-pwned").exists()
    # mem= below the host's floor (the inventory states one)
    floored = [replace(h, mem_total=16 * 10 ** 9, mem_floor=4 * 10 ** 9) for h in hosts]
    with pytest.raises(SafetyError) as e:
        run_hosts(floored, "2G-memboot-classic", work["plan"], work["plan_path"], "bad2",
                  options=RunOptions(mem="2000000000"), data_dir=work["data"],
                  db_url=work["db"])
    assert "below the host's floor" in e.value.message and "mem=4G" in e.value.hint
    assert {n: files_under(lab, n) for n in NAMES} == before
    # nor the store: refused before its campaign is written (the first test of the module)
    assert not Path(work["db"].removeprefix("sqlite:///")).exists()


def test_bench_run_two_hosts_in_parallel_collect_ingest_bandwidth(lab, lab_inventory, work,
                                                                 capsys):
    from bench.store.bandwidth import bandwidth_of
    from bench.store.db import open_store
    from bench.store.queries import list_runs
    t0 = time.monotonic()
    rc = main(["run", CELL, "--host", ",".join(NAMES), "--trace", str(work["trace"]),
               "--threads", "2", "--run-id", "par1", "--db", work["db"],
               "--data-dir", str(work["data"]), "--hosts-dir", str(lab.hosts_dir), "--json"])
    seconds = time.monotonic() - t0
    out = capsys.readouterr().out
    assert rc == 0, out
    results = json.loads(out)
    timing = (f"bench run on 2 lab hosts: {seconds:.1f} s "
              f"({', '.join(r['host'] + ' ' + json.dumps(r['timings']) for r in results)})")
    for r, name in zip(results, NAMES):
        assert r["host"] == name and r["ok"] and not r["quarantined"], r
        assert r["run_id"] == f"par1-{name}"
        bundle = Path(r["bundle"])
        assert bundle == work["data"] / "bundles" / name / r["run_id"]
        assert verify(read_dir(bundle))["complete"] is True
        assert r["figures"]["iteration_median_s"] > 0
        assert r["figures"]["iterations"] == work["plan"].iterations
        assert r["ingest"]["status"] == "ingested"
        assert r["ingest"]["retained"] is True, r["ingest"]      # plausible, among the rest
        spec = json.loads((bundle / "spec.json").read_text())
        assert spec["host"] == name and spec["plan"] == work["plan"].remote_path
        assert spec["cell"] == "1G-none-classic" and spec["capacity_bytes"] == 10 ** 9
        assert spec["agent"]["source_sha256"]
        assert r["pool"]["ok"] and r["deploy"] in ("deployed", "current")
    store = open_store(work["db"])
    try:
        assert {x["run_id"] for x in list_runs(store)} >= {"par1-lab-netns-1", "par1-lab-netns-2"}
    finally:
        store.close()
    # a campaign of its own, told apart by its matrix name, done
    assert main(["campaigns", "--db", work["db"], "--json"]) == 0
    camp = {c["id"]: c for c in json.loads(capsys.readouterr().out)}["par1"]
    assert camp["matrix"] == "bench run" and camp["state"] == "done", camp
    assert sum(camp["states"].values()) == 2 and all(r["campaign"] == "par1" for r in results)
    assert main(["hosts", "collect", NAMES[0], "par1-lab-netns-1", "--json",
                 "--hosts-dir", str(lab.hosts_dir), "--data-dir", str(work["data"])]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["collected"] and c["status"]["phase"] == "done"
    # bandwidth of host 1's pool device, stored under host 1 and its boot only
    assert main(["hosts", "bandwidth", NAMES[0], "--threads", "2", "--db", work["db"],
                 "--hosts-dir", str(lab.hosts_dir), "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["bytes_per_pass"] == 4 * 32 * EXPERT_BYTES
    assert m["cold"]["seconds"] > 0 and m["warm"]["seconds"] > 0
    # the host's current boot (the lab's file: a reboot by another test, e.g. a forced
    # restore, gave it a new boot_id that this session's lab object has not seen)
    assert m["boot_id"] == (Path(lab.host(NAMES[0]).dir) / "boot_id").read_text().strip()
    store = open_store(work["db"])
    try:
        rows = bandwidth_of(store, NAMES[0], m["boot_id"])
        assert len(rows) == 1 and rows[0]["boot_id"] == m["boot_id"]
        assert rows[0]["fingerprint"] == m["fingerprint"]["digest"]
        assert bandwidth_of(store, NAMES[1]) == []
    finally:
        store.close()
    if m["device"] is not None and m["cold"]["device_bytes"] is not None:
        # caches were dropped: the cold pass reads the pool from its device (shared machine:
        # other jobs add reads, never remove them)
        assert m["cold"]["device_bytes"] >= 0.9 * m["bytes_per_pass"]
    # the measured bandwidth becomes host 1's device bound (throughput_possible): its runs,
    # judged again under it, stay retained
    assert main(["retention", "recheck", "--db", work["db"], "--json"]) == 0
    changes = json.loads(capsys.readouterr().out)
    assert not [c for c in changes if not c["new"]["passed"]], changes
    print(f"pool device {m['device']}: cold {m['cold']['device_gb_per_s']} GB/s")
    print(timing)


def kill_only_sshd(lab, name: str) -> list[int]:
    """Kill the host's sshd (listener and sessions) but not the detached runner: a crashed
    sshd / dropped network, the run goes on host-side."""
    h = lab.host(name)
    killed = []
    for pid in lab_netns._netns_pids(h.netns):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "sshd":
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    if h.sshd_pid:
        deadline = time.monotonic() + 5
        while lab_netns._alive(h.sshd_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        lab_netns._reap(h.sshd_pid)
    return killed


def wait_phase(status: Path, phases, timeout=60.0, thread=None, results=None) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if thread is not None and not thread.is_alive():
            raise AssertionError(f"run_hosts ended early: {json.dumps(results, default=str)[:3000]}")
        try:
            ph = json.loads(status.read_text())["phase"]
            if ph in phases or ph in ("done", "failed"):
                return ph
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{status}: phase {phases} not reached in {timeout} s")


def test_sshd_killed_mid_run_reattaches_and_a_dead_host_is_quarantined(lab_host_up,
                                                                      lab_inventory, work):
    lab = lab_host_up
    hosts = [lab_inventory[n] for n in NAMES]
    results: list = []
    th = threading.Thread(target=lambda: results.extend(r.as_dict() for r in run_hosts(
        hosts, CELL, work["plan"], work["plan_path"], "fault1",
        options=RunOptions(threads=1, passes=6, timeline_interval_ms=200),
        data_dir=work["data"], db_url=work["db"], reconnect_timeout_s=8.0, chunk_s=4.0)))
    th.start()
    status = {n: Path(lab.host(n).dir) / "work" / "runs" / f"fault1-{n}" / "status.json"
              for n in NAMES}
    phases = {n: wait_phase(status[n], ("warmup", "measuring"), thread=th, results=results)
              for n in NAMES}
    assert phases == {n: phases[n] for n in NAMES} and all(
        p in ("warmup", "measuring") for p in phases.values()), phases
    assert kill_only_sshd(lab, NAMES[0])       # host 1: sshd dies, the runner does not
    assert kill_only_sshd(lab, NAMES[1])       # host 2: sshd dies and never comes back
    live_phase = json.loads(status[NAMES[0]].read_text())["phase"]
    time.sleep(3.0)
    lab.start_sshd(NAMES[0])
    t_back = time.monotonic()
    th.join(timeout=90)
    assert not th.is_alive()
    r1, r2 = results
    # host 1: the run went on host-side, the controller re-attached and collected it
    assert r1["ok"] and not r1["quarantined"], json.dumps(r1, default=str)[:3000]
    assert r1["reconnects"] >= 1 and any(e["event"] == "reattached" for e in r1["events"])
    assert verify(read_dir(Path(r1["bundle"])))["complete"] is True
    assert r1["ingest"]["status"] == "ingested"
    st = json.loads((Path(r1["bundle"]) / "status.json").read_text())
    assert st["ok"] and [h["phase"] for h in st["history"]].count("measuring") == 1
    assert live_phase in ("warmup", "measuring", "collecting")  # the run was going on
    # host 2: reported quarantined within its (test) timeout, with the reason
    assert r2["quarantined"] and not r2["ok"], r2
    assert "unreachable" in r2["quarantine_reason"] and "bench hosts collect" in r2["error"]["hint"]
    assert r2["bundle"] is None
    assert time.monotonic() - t_back < 60
    # its run is kept `pending` with its spec in the campaign: `bench resume fault1` re-attaches
    from bench.store.campaigns import run_rows
    from bench.store.db import open_store
    store = open_store(work["db"])
    try:
        rows = {r.run_id: r for r in run_rows(store, "fault1")}
    finally:
        store.close()
    assert rows[r2["run_id"]].state == "pending" and rows[r2["run_id"]].spec, rows
    assert "bench resume fault1" in r2["error"]["hint"]
