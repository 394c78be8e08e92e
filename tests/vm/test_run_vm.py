"""Tier 3: `bench run` (bench.execute.campaign.onerun.run_hosts, the library behind the command) on a qemu guest
with a real kernel 6.1: a full cgroup v2 memory controller, MGLRU toggled at run time, an
mlocked balloon, device bytes from the guest's own /proc/diskstats of its pool disk vdb.

lab-a only, three runs in sequence (deploy, i.e. the agent build inside the guest, happens in
the first): a cgroup cell whose wall is well below the pool, a balloon cell, and a balloon
cell whose balloon is SIGKILLed during the measured pass. Bounded to about four minutes on a
2-core machine with TCG guests; the deploy and per-run times are printed."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from bench.execute.campaign.onerun import run_hosts
from bench.hosts.procfs import parse_flat_keyed, parse_status
from bench.judge.bundle import load, read_dir, verify
from bench.judge.counters import find
from bench.judge.measured import delta, devices, metrics, snap
from bench.matrix.runspec import RunOptions, build_spec
from bench.plan.prepared import plan_from_trace_file
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.slow]

MIB = 1 << 20
HOST = "lab-a"
LAYERS, EXPERTS, EXPERT_BYTES = 2, 32, MIB          # pool: 64 MiB on vdb
POOL_BYTES = LAYERS * EXPERTS * EXPERT_BYTES
CGROUP_CELL = "16Mi-cgroup-mglru"                   # memory.max = 16 MiB (headroom 0) << pool
BALLOON_CELL = "768Mi-balloon-classic"              # balloon ~ MemAvailable - 768 MiB (~550 MiB)
OPTIONS = RunOptions(threads=2, passes=2, cgroup_headroom_bytes=0, balloon_max_bytes=1 << 30,
                     timeline_interval_ms=100)
TIMINGS: dict[str, dict] = {}


def _trace(d: Path, name: str, tokens: int) -> Path:
    p = d / name
    p.write_text("\n".join(generate(preset("tiny", layers=LAYERS, tokens=tokens,
                                           expert_bytes=EXPERT_BYTES, spec_accept=0.0,
                                           fallback=0.0))) + "\n")
    return p


@pytest.fixture(scope="module")
def work(tmp_path_factory, lab, lab_hosts):
    d = tmp_path_factory.mktemp("run-vm")
    data = d / "data"
    short, short_path = plan_from_trace_file(_trace(d, "short.jsonl", 60), data_dir=data)
    # the kill run: a longer measured pass, so the balloon dies inside it
    long_, long_path = plan_from_trace_file(_trace(d, "long.jsonl", 150), data_dir=data)
    assert short.geometry == long_.geometry == (LAYERS, EXPERTS, EXPERT_BYTES)
    yield {"data": data, "db": f"sqlite:///{d / 'bench.db'}", "plans": {
        "short": (short, short_path), "long": (long_, long_path)},
        "host": lab_hosts[HOST], "tag": time.strftime("%H%M%S")}
    if TIMINGS:
        print(f"bench run on the vm lab: {json.dumps(TIMINGS)}")


def _set_mglru(connect, host, on: bool) -> None:
    """Start from the opposite of what the cell asks, so the runner must toggle at run time."""
    from bench.hosts.reboot import set_mglru_runtime
    t = connect(host)
    try:
        set_mglru_runtime(t, on)
    finally:
        t.close()


def _run(work, cell: str, name: str, plan: str = "short", **kw) -> dict:
    info, path = work["plans"][plan]
    t0 = time.monotonic()
    [res] = [r.as_dict() for r in run_hosts(
        [work["host"]], cell, info, path, f"vm-{name}-{work['tag']}", options=OPTIONS,
        data_dir=work["data"], db_url=work["db"], reconnect_timeout_s=120.0, chunk_s=15.0, **kw)]
    tm = res["timings"]
    stages = list(tm)
    TIMINGS[name] = {"seconds": round(time.monotonic() - t0, 1),
                     "preflight_s": res.get("preflight_s"),
                     **{s: round(tm[s] - (tm[stages[i - 1]] if i else 0.0), 1)
                        for i, s in enumerate(stages)}}
    print(f"{name}: {TIMINGS[name]}")
    assert res["ok"] and not res["quarantined"], json.dumps(res, default=str)[:4000]
    assert res["ingest"]["status"] == "ingested"
    bundle = Path(res["bundle"])
    verify(read_dir(bundle))                    # complete: manifest, sizes, sha256
    res["b"] = load(read_dir(bundle), str(bundle))
    return res


def _verdicts(db_url: str, run_id: str) -> dict:
    from sqlalchemy import select

    from bench.store.db import open_store
    from bench.store.models import Run, Verdict
    store = open_store(db_url)
    try:
        with store.session() as s:
            run = s.scalar(select(Run).where(Run.run_id == run_id))
            vs = {v.rule: (v.passed, v.reason) for v in s.scalars(
                select(Verdict).where(Verdict.run_id == run.id, Verdict.current.is_(True)))}
            return {"retained": run.retained, "verdicts": vs}
    finally:
        store.close()


def _mglru_checks(b, want_on: bool):
    m = b.mglru
    assert m["requested"] == ("on" if want_on else "off")
    assert m["method"] == "runtime", m                      # toggled by the runner, this boot
    for mask in (m["after_set"], m["post"]):
        assert bool(int(mask, 16) & 1) is want_on, m
    assert metrics(b)["mglru_loop_entry"] is want_on and metrics(b)["mglru_end"] is want_on


@pytest.fixture(scope="module")
def cgroup_run(work, connect):
    _set_mglru(connect, work["host"], False)
    return _run(work, CGROUP_CELL, "cgroup")


@pytest.fixture(scope="module")
def balloon_run(work, connect, cgroup_run):
    _set_mglru(connect, work["host"], True)
    return _run(work, BALLOON_CELL, "balloon")


def test_cgroup_run_hits_a_real_v2_wall_and_reads_vdb(cgroup_run, work):
    b, res = cgroup_run["b"], cgroup_run
    assert res["deploy"] in ("deployed", "current") and res["pool"]["ok"]
    assert b.host["kernel_release"].startswith("6.1") and b.host["cgroup_backend"] == "v2"
    assert b.host["pool_device"]["name"] == "vdb" and devices(b)[0] == "vdb"
    cap = b.capacity
    assert cap["backend"] == "v2" and cap["headroom_bytes"] == 0
    assert cap["limit_bytes"] == 16 * MIB == cap["limit_read_back"]       # memory.max read back
    assert int(find(b.snapshots[b.loop_entry], "memory.max")) == 16 * MIB
    assert cap["swap_limit_read_back"] in (0, None)
    assert b.spec["capacity_bytes"] < POOL_BYTES
    m = metrics(b)
    assert m["iterations"] == work["plans"]["short"][0].iterations
    assert m["device_bytes"] > 0 and res["figures"]["device"] == "vdb"      # misses hit vdb
    # the wall bites: the cgroup filled up to its limit and reclaimed while measuring
    peak = max(r["memory_current"] for r in b.timeline if r["phase"] == "measuring")
    assert peak >= 0.9 * 16 * MIB, peak
    assert delta(b, "measured", "cgroup", "memory.stat.pgsteal") > 0
    _mglru_checks(b, True)
    v = _verdicts(work["db"], res["run_id"])
    for rule in ("alive_throughout", "mglru_as_requested", "no_oom", "timeline_reaches_wall",
                 "measured_pass_complete", "caches_dropped", "boot_matches"):
        assert v["verdicts"][rule][0], (rule, v)
    print(f"cgroup run: device {m['device_bytes'] / MIB:.0f} MiB over {m['iterations']} "
          f"iterations, logical {m['logical_bytes_per_iteration'] * m['iterations'] / MIB:.0f} "
          f"MiB, median {m['iteration_median_s'] * 1e3:.1f} ms; verdicts {v}")


def test_balloon_run_locked_and_alive_throughout(balloon_run, work):
    b, res = balloon_run["b"], balloon_run
    cap, bal = b.capacity, b.balloon
    assert cap["ready"]["ready"] and cap["vmlck_verified"] is True
    req = cap["requested_bytes"]
    assert 0 < req <= 1 << 30 and req == cap["mem_available_before"] - 768 * MIB
    assert cap["vmlck_bytes"] >= req
    assert bal["alive_at_loop_entry"] is True and bal["alive_at_end"] is True
    assert bal["alive_at_loop_entry_runner"] is True and "balloon_died_mono_ns" not in bal
    assert bal["vmlck_at_loop_entry_bytes"] >= req and bal["vmlck_end_bytes"] >= req
    assert bal["signal"] == 15 or bal["exit_code"] == 0                  # ended by teardown
    # the agent's own loop-entry snapshot shows the balloon holding its lock
    st = parse_status(b.snapshots[b.loop_entry]["proc_%d_status" % bal["pid"]])
    assert st["Name"] == "bench-agent" and int(st["VmLck"].split()[0]) * 1024 >= req
    _mglru_checks(b, False)
    v = _verdicts(work["db"], res["run_id"])
    for rule in ("alive_throughout", "vmlck_held", "mglru_as_requested", "no_oom",
                 "measured_pass_complete"):
        assert v["verdicts"][rule][0], (rule, v)
    print(f"balloon run: {req / MIB:.0f} MiB locked; verdicts {v}")


KILLER = r'''
import json, os, signal, sys, time
st_path, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        st = json.load(open(st_path))
    except (OSError, ValueError):
        time.sleep(0.02); continue
    if st.get("phase") in ("done", "failed", "collecting"):
        print(json.dumps({"killed": None, "phase": st.get("phase")})); sys.exit(1)
    pid = (st.get("children") or {}).get("balloon")
    if st.get("phase") == "measuring" and pid:
        # the agent took its loop-entry snapshot as the measured pass began; the runner noticed
        # pass0-end up to an interval later: leave the agent well into the pass first
        time.sleep(0.5)
        cmd = open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
        assert os.path.basename(cmd[0]) == b"bench-agent" and cmd[1] == b"balloon", cmd
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
        st2 = json.load(open(st_path))
        print(json.dumps({"killed": pid, "phase": st["phase"], "phase_after": st2.get("phase")}))
        sys.exit(0)
    time.sleep(0.02)
print(json.dumps({"killed": None, "phase": "timeout"})); sys.exit(1)
'''


def test_balloon_killed_in_measured_pass_is_rejected(balloon_run, work, connect):
    """SIGKILL the balloon (PID from status.json children) once the measured pass has begun:
    the run completes, its bundle records the death, retention rejects it (alive_throughout)."""
    host = work["host"]
    rid = f"vm-kill-{work['tag']}"
    status = f"{host.work_dir}/runs/{rid}/status.json"
    out: dict = {}
    t = connect(host)

    def killer():
        r = t.run(["python3", "-c", KILLER, status, "600"], timeout=660, check=False)
        out.update(json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else
                   {"error": r.stderr})

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    try:
        res = _run(work, BALLOON_CELL, "kill", plan="long")
    finally:
        th.join(timeout=60)
        t.close()
    assert out.get("killed") and out["phase"] == "measuring", out
    b = res["b"]
    bal = b.balloon
    assert bal["pid"] == out["killed"] == b.capacity["pid"]
    assert bal["alive_at_loop_entry"] is True                 # it died after loop entry
    assert bal["alive_at_end"] is False and bal["signal"] == 9, bal
    assert bal.get("exited_before_teardown") is True and "balloon_died_mono_ns" in bal
    assert b.status["phase"] == "done" and b.status["ok"] is True   # the run itself completed
    assert metrics(b)["iterations"] == work["plans"]["long"][0].iterations
    v = _verdicts(work["db"], rid)
    assert v["retained"] is False
    assert v["verdicts"]["alive_throughout"][0] is False, v
    assert "alive at loop entry True, at end False" in v["verdicts"]["alive_throughout"][1]
    assert v["verdicts"]["vmlck_held"][0] is False                  # no VmLck at the end
    failed = sorted(r for r, (ok, _) in v["verdicts"].items() if not ok)
    print(f"killed balloon {out['killed']} in phase {out['phase']}; rejected by {failed}")


def test_warmup_and_measured_pass_share_one_scope(cgroup_run, work):
    """One agent process ran both passes inside the run's cgroup, and nothing in the spec can
    split them: the runner starts one agent (`--passes P`) in one cgroup."""
    b = cgroup_run["b"]
    runner = json.loads(b.files["runner.json"])
    agent = runner["agent"]
    cg = b.capacity["path"]
    assert agent["in_cgroup"] is True and agent["exit_code"] == 0
    assert f"0::/{Path(cg).name}" in agent["cgroup"]
    argv = agent["argv"]
    assert argv[1] == "replay" and argv[argv.index("--passes") + 1] == "2"
    # the same process (its own /proc/self/status) at every pass boundary of both passes
    pids = {ph: parse_status(b.snapshots[ph]["proc_self_status"])["Pid"]
            for ph in ("pass0-start", "pass0-end", "pass1-start", "pass1-end")}
    assert set(pids.values()) == {str(agent["pid"])}, pids
    # the cgroup was charged during each pass: the agent, its only task, read into it
    for p in (0, 1):
        s0, s1 = (parse_flat_keyed(find(b.snapshots[f"pass{p}-{e}"], "memory.stat"))
                  for e in ("start", "end"))
        assert s1["pgsteal"] > s0["pgsteal"] or s1["file"] > s0["file"], (p, s0, s1)
    assert snap(b, "pass0-start")[("cgroup", "memory.max")] == 16 * MIB
    # the spec format: one capacity, one mechanism, one scope; no per-pass field anywhere
    spec = b.spec
    per_pass = [k for k in _keys(spec) if any(w in k.lower() for w in
                                              ("warm", "measur", "pass_", "scope", "cgroup_path"))]
    assert per_pass == [], per_pass
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    assert not [f for f in fields if any(w in f for w in ("warm", "measur", "scope"))]
    assert set(spec) == set(build_spec(spec["cell"], work["host"], _plan_of(b),
                                       run_id=spec["run_id"], options=OPTIONS))


def _keys(d: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        out.append(prefix + k)
        if isinstance(v, dict):
            out += _keys(v, prefix + k + ".")
    return out


def _plan_of(b):
    from bench.plan.planinfo import PlanInfo
    return PlanInfo(sha256=b.spec["plan_sha256"], layers=LAYERS, experts_per_layer=EXPERTS,
                    expert_bytes=EXPERT_BYTES, iterations=1, trace="t")
