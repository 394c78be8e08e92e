"""The host-side cell runner against the real kernel: detached runs on a direct-I/O loop device,
the memory wall through the host's cgroup backend, the balloon, re-attach, bad specs."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import nativelib as nl
from tests.support.bundlegen import ensure_campaigns
from tests.support.runner import (PYTHON, RUNNER, assert_private, contract, make_spec,
                                  measured_device_bytes, read_json, runner, start, timeline,
                                  verify_manifest, wait, wait_phase, write_spec)

# a warm pass may read a stray metadata block (journal superblock, an inode): not experts
WARM_SLACK = 256 << 10
BUNDLE_FILES = {"spec.json", "status.json", "host.json", "drop.json", "mglru.json",
                "capacity.json", "agent.jsonl", "agent.stderr", "timeline.csv", "kmsg.txt",
                "runner.json", "runner.log", "manifest.json"}


def _load_runner():
    spec = importlib.util.spec_from_file_location("bench_runner_agent", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_cgroups() -> set[str]:
    out = set()
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"):
        if os.path.isdir(root):
            out |= {f"{root}/{n}" for n in os.listdir(root) if n.startswith("bench-")}
    return out


def gone(pid: int) -> bool:
    """Exited: no /proc entry, or a zombie its (new) parent has not reaped yet."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def memory_cgroup_backend() -> str:
    return _load_runner().cgroup_backend()[0]


def check_common(bundle: Path, st: dict, passes=2):
    assert st["phase"] == "done" and st["ok"] is True, st
    phases = [h["phase"] for h in st["history"]]
    assert phases == ["accepted", "locked", "cleaned", "caches_dropped", "mglru_set",
                      "capacity_applied", "warmup", "measuring", "collecting", "done"]
    assert BUNDLE_FILES <= {p.name for p in bundle.iterdir()}
    m = verify_manifest(bundle)
    assert_private(bundle)      # kmsg.txt included: as restricted as dmesg may be
    for d in ("pre", "post", "pass0-start", "pass0-end", "pass1-start", "pass1-end"):
        assert f"snapshots/{d}/proc_diskstats" in m["files"], d
    drop = read_json(bundle / "drop.json")
    assert drop["cached_after_bytes"] < drop["cached_before_bytes"] or drop["cached_after_bytes"] < 512 << 20
    summary = [json.loads(l) for l in (bundle / "agent.jsonl").read_text().splitlines()][-1]
    assert summary["summary"] and summary["ok"] and summary["passes_done"] == passes
    host = read_json(bundle / "host.json")
    assert host["cgroup_backend"] in ("v1", "v2") and host["pool_device"]["name"]
    tl = timeline(bundle)
    assert {r["phase"] for r in tl} == {"warmup", "measuring"}
    b = contract(bundle)            # the runner's real output validates against the contract
    assert b.completed and len(b.records) == passes * summary["iterations"]
    return summary


# --------------------------------------------------------------------------- pure / no kernel

def test_bad_specs_refused_before_touching_anything(agent, tmp_path):
    from tests.support.runner import make_plan_file

    from bench.plan.pool import PoolSpec, make_pool
    pool = tmp_path / "pool"
    make_pool(pool, PoolSpec(8, 64, 4096))
    plan = make_plan_file(tmp_path / "p.bpln", tokens=4)
    wd = tmp_path / "wd"
    before = bench_cgroups()
    mem_total = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    over = ((mem_total >> 30) + 1) << 30
    cases = [
        ({"run_id": "a/b"}, "run_id"),
        ({"run_id": ".."}, "run_id"),
        ({"cell": "1g-swap-classic", "mechanism": "swap"}, "unknown mechanism 'swap'"),
        ({"mechanism": "balloon"}, "does not match cell"),
        ({"cell": f"{over >> 30}Gi-none-classic", "capacity_bytes": over},
         "above this host's MemTotal"),
        ({"plan": str(tmp_path / "missing.bpln")}, "does not exist"),
        ({"plan_sha256": "0" * 64}, "plan_sha256"),
        ({"cell": "1g-none-classic-pinned", "mode": "pinned"}, "arena_bytes"),
    ]
    for change, why in cases:
        spec = make_spec("ok-id", "1g-none-classic", pool=pool, plan=plan, agent=agent)
        spec.update(change)
        rc, res = start(spec, wd)
        assert rc == 2 and res["ok"] is False, (change, res)
        assert res["reason"].startswith("bad spec") and why in res["reason"], (change, res)
        assert not wd.exists(), "a refused spec must not create anything"
    assert bench_cgroups() == before


# --------------------------------------------------------------------------- real runs

@pytest.mark.root
def test_none_run_survives_its_caller_and_never_runs_twice(agent, loopfs, pool, plans, work_dir):
    """A `none` run started from a shell session that is then hung up and killed completes;
    starting it again reports the finished run and runs nothing."""
    spec = make_spec("none-1", "1g-none-classic", pool=pool, plan=plans["short"], agent=agent)
    sp = write_spec(spec, work_dir)
    caller = subprocess.Popen(
        ["bash", "-c", f"'{PYTHON}' '{RUNNER}' start --spec '{sp}' --work-dir "
                       f"'{work_dir}'; sleep 120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    res = json.loads(caller.stdout.readline())
    assert res["ok"] and res["state"] == "started" and res["pid"] > 0
    os.killpg(caller.pid, signal.SIGHUP)
    os.killpg(caller.pid, signal.SIGKILL)
    # the daemon kept none of the caller's stdio: the pipes close once the caller is gone
    caller.communicate(timeout=10)
    sp.unlink()
    assert Path(f"/proc/{res['pid']}").exists() or \
        read_json(Path(res["bundle"]) / "status.json")["phase"] in ("done", "failed")
    st = wait("none-1", work_dir)
    bundle = Path(res["bundle"])
    check_common(bundle, st)
    assert st["pid"] == res["pid"]
    # pool (256 MiB) far below memory: the measured pass is served from the cache
    warm = measured_device_bytes(bundle, loopfs.dev)
    nl.skip_if_evicted_from_outside(bundle / "snapshots", 1, warm, WARM_SLACK)
    assert warm <= WARM_SLACK, (warm, [(bundle / "snapshots" / d / "proc_diskstats").read_text()
                                       for d in ("pass1-start", "pass1-end")])
    assert read_json(bundle / "capacity.json")["mechanism"] == "none"
    assert read_json(bundle / "runner.json")["kmsg"]["method"] in ("/dev/kmsg", "dmesg-diff")

    manifest = (bundle / "manifest.json").read_bytes()
    rc, again = start(spec, work_dir)
    assert rc == 0 and again["state"] == "ended" and again["pid"] == res["pid"]
    assert again["status"]["phase"] == "done"
    assert (bundle / "manifest.json").read_bytes() == manifest
    rc, st2 = runner("status", "none-1", "--work-dir", work_dir)
    assert rc == 0 and st2["history"] == st["history"] and st2["live"] is False
    _another_spec_under_the_same_id_is_refused_for_good(spec, work_dir, bundle, manifest)


def _another_spec_under_the_same_id_is_refused_for_good(spec, work_dir, bundle, manifest):
    """The run id exists with another spec (a campaign re-created under an old id): the
    runner's answer, read by the controller, is a final refusal naming the run's directory,
    never a re-attach (a twin campaign used to collect the old run and fail its ingest)."""
    import dataclasses

    from bench.execute.campaign.record import deterministic
    from bench.execute.hostrun import SpecRefused, start_refusal
    from bench.hosts.inventory import load_inventory
    host = dataclasses.replace(load_inventory(Path(RUNNER).parents[1] / "hosts")["local"],
                               work_dir=str(work_dir))
    assert start_refusal(host, "none-1", *start(spec, work_dir)) is None     # the same run
    rc, ans = start(dict(spec, agent=dict(spec["agent"], threads=spec["agent"]["threads"] + 1)),
                    work_dir)
    err = start_refusal(host, "none-1", rc, ans)
    assert isinstance(err, SpecRefused) and deterministic(err), (rc, ans)
    assert f"{work_dir}/runs/none-1" in err.message and "--campaign" in err.hint
    assert (bundle / "manifest.json").read_bytes() == manifest


@pytest.mark.root
def test_cgroup_wall(agent, loopfs, pool, plans, work_dir):
    backend = memory_cgroup_backend()
    if backend == "none":
        pytest.skip("no memory cgroup controller (neither cgroup2 nor v1 memory)")
    # a decimal capacity, as the paper writes them: 67 x 10^6 bytes is not a whole number of
    # pages, so the kernel keeps the limit rounded to a page and the runner accepts that
    cap, page = 67 * 10 ** 6, os.sysconf("SC_PAGE_SIZE")
    spec = make_spec("cg-1", "67M-cgroup-classic", pool=pool, plan=plans["short"], agent=agent)
    rc, res = start(spec, work_dir)
    assert rc == 0 and res["state"] == "started", res
    bundle = Path(res["bundle"])
    # a second start while it runs attaches to the same runner
    rc, again = start(spec, work_dir)
    assert rc == 0 and again["state"] == "running" and again["pid"] == res["pid"], again
    st = wait_phase(bundle, ("warmup", "measuring"))
    agent_pid = st.get("children", {}).get("agent")
    try:                      # seen from outside while it runs: the agent is in the wall
        cg_seen = Path(f"/proc/{agent_pid}/cgroup").read_text()
        assert "bench-cg-1" in cg_seen, cg_seen
    except FileNotFoundError:
        pass                  # already finished: runner.json's own check below
    st = wait("cg-1", work_dir)
    check_common(bundle, st)
    c = read_json(bundle / "capacity.json")
    assert c["backend"] == backend and c["limit_bytes"] == cap
    assert cap - page < c["limit_read_back"] < cap + page and cap % page
    assert c["path"].endswith("/bench-cg-1") and not os.path.exists(c["path"]), "cgroup removed"
    assert read_json(bundle / "runner.json")["agent"]["in_cgroup"] is True
    # the wall is reached and holds
    cur = [int(r["memory_current"]) for r in timeline(bundle) if r["memory_current"]]
    assert max(cur) >= 0.9 * cap and max(cur) <= cap
    peak_name = "memory.max_usage_in_bytes" if backend == "v1" else "memory.peak"
    peak = [p for p in (bundle / "snapshots" / "post").iterdir() if p.name.endswith(peak_name)]
    assert peak and 0.9 * cap <= int(peak[0].read_text()) <= cap
    # 67 MB cannot hold the ~230 MiB the plan touches: the measured pass reads the device
    assert measured_device_bytes(bundle, loopfs.dev) > 32 << 20
    assert not (work_dir / "active" / "cg-1.json").exists()
    assert_retained(bundle, work_dir)


def assert_retained(bundle: Path, work_dir: Path) -> None:
    """A real run's bundle goes through the store's ingest and every retention rule passes."""
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    store = open_store(f"sqlite:///{work_dir}/results.db")
    ensure_campaigns(store, "test")
    res = ingest_bundle(store, bundle)
    assert res["status"] == "ingested" and res["retained"] is True, res
    assert ingest_bundle(store, bundle)["status"] == "unchanged"
    # the plausibility rules judged it (and passed): their reasons show the real margins
    from bench.store.queries import list_runs
    (run,) = [r for r in list_runs(store) if r["run_id"] == bundle.name]
    shown = {v["rule"]: v["reason"] for v in run["verdicts"]}
    for rule in ("numbers_possible", "totals_agree", "walls_within_spans",
                 "throughput_possible"):
        assert rule in shown, shown
        print(f"{bundle.name} {rule}: {shown[rule]}")


def _balloon_spec(run_id, pool, plan, agent, target=512 << 20):
    avail = int([l for l in Path("/proc/meminfo").read_text().splitlines()
                 if l.startswith("MemAvailable:")][0].split()[1]) * 1024
    cap = (avail - target) // 10 ** 6 * 10 ** 6           # a whole decimal MB: 14873M
    from bench.units import format_size
    return make_spec(run_id, f"{format_size(cap)}-balloon-classic", pool=pool,
                     plan=plan, agent=agent, balloon_max_bytes=1 << 30)


@pytest.mark.root
def test_balloon_run(agent, loopfs, pool, plans, work_dir):
    spec = _balloon_spec("bal-1", pool, plans["short"], agent)
    rc, res = start(spec, work_dir)
    assert rc == 0, res
    st = wait("bal-1", work_dir)
    bundle = Path(res["bundle"])
    check_common(bundle, st)
    c = read_json(bundle / "capacity.json")
    assert 256 << 20 <= c["requested_bytes"] <= 1 << 30
    assert c["vmlck_verified"] and c["vmlck_bytes"] >= c["requested_bytes"]
    assert c["ready"]["ready"] is True
    b = read_json(bundle / "balloon.json")
    assert b["pid"] == c["pid"] and b["alive_at_loop_entry"] is True and b["alive_at_end"] is True
    assert b["exit_code"] == 0 and b["signal"] is None        # released by the teardown
    assert b["vmlck_at_loop_entry_bytes"] >= c["requested_bytes"]
    assert '"released":true' in (bundle / "balloon.jsonl").read_text().replace(" ", "")
    assert (bundle / "snapshots" / "post" / "balloon_status").exists()
    assert not Path(f"/proc/{c['pid']}").exists()
    assert_retained(bundle, work_dir)


@pytest.mark.root
def test_balloon_killed_during_measured_pass(agent, loopfs, pool, plans, work_dir):
    spec = _balloon_spec("bal-kill", pool, plans["long"], agent)
    rc, res = start(spec, work_dir)
    assert rc == 0, res
    bundle = Path(res["bundle"])
    st = wait_phase(bundle, ("measuring",))
    assert st["phase"] == "measuring", st
    # the live view's pass and iteration come from the agent's progress file via `status`
    rc, live = runner("status", "bal-kill", "--work-dir", work_dir)
    prog = live["progress"]
    assert live["live"] and prog["passes"] == 2 and prog["iterations"] > 100, live
    assert prog["pass"] == 1 and 0 <= prog["iteration"] <= prog["iterations"], prog
    bpid = read_json(bundle / "capacity.json")["pid"]
    os.kill(bpid, signal.SIGKILL)
    st = wait("bal-kill", work_dir)
    assert st["phase"] == "done", st      # the run executed; retention rejects it
    done = _load_runner().read_progress(str(work_dir), "bal-kill")
    assert done == {"pass": 1, "passes": 2, "iteration": prog["iterations"],
                    "iterations": prog["iterations"]}, done
    assert not (bundle / "progress.bin").exists()          # not part of the bundle
    b = read_json(bundle / "balloon.json")
    assert b["alive_at_end"] is False and b["signal"] == signal.SIGKILL
    assert b["exited_before_teardown"] is True
    verify_manifest(bundle)
    contract(bundle)
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    store = open_store(f"sqlite:///{work_dir}/results.db")
    ensure_campaigns(store, "test")
    res = ingest_bundle(store, bundle)
    assert res["retained"] is False and "alive_throughout" in res["failed"], res


@pytest.mark.root
def test_host_lock_and_stop(agent, loopfs, pool, plans, work_dir):
    """A second runner waits for the host lock and fails with a reason at its timeout; `stop`
    ends a running run as failed, torn down, with a manifest."""
    work_dir.mkdir(exist_ok=True)
    fd = os.open(work_dir / "host.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        spec = make_spec("locked-1", "1g-none-classic", pool=pool, plan=plans["short"],
                         agent=agent, host_lock_timeout_s=1)
        rc, res = start(spec, work_dir)
        assert rc == 0
        st = wait("locked-1", work_dir)
        assert st["phase"] == "failed" and "host lock" in st["reason"], st
        verify_manifest(Path(res["bundle"]))
        assert not contract(Path(res["bundle"])).completed     # a failed run's partial bundle
    finally:
        os.close(fd)
    if memory_cgroup_backend() == "none":
        return
    spec = make_spec("stop-1", "64Mi-cgroup-classic", pool=pool, plan=plans["long"], agent=agent)
    rc, res = start(spec, work_dir)
    bundle = Path(res["bundle"])
    wait_phase(bundle, ("warmup",))
    time.sleep(0.3)
    rc, st = runner("stop", "stop-1", "--work-dir", work_dir)
    assert st.get("stop_sent") is True, st
    st = wait("stop-1", work_dir)
    assert st["phase"] == "failed" and "stopped by request" in st["reason"], st
    verify_manifest(bundle)
    assert not contract(bundle).completed
    assert not os.path.exists(read_json(bundle / "capacity.json")["path"])
    assert not (work_dir / "active" / "stop-1.json").exists()
    assert gone(st["children"]["agent"])


@pytest.mark.root
def test_runner_killed_is_settled_as_failed(agent, loopfs, pool, plans, work_dir):
    """The runner itself dies (SIGKILL) mid-run: the next `status` finds the run lock free,
    stops the agent it recorded, removes its cgroup and seals the bundle as failed."""
    if memory_cgroup_backend() == "none":
        pytest.skip("no memory cgroup controller (neither cgroup2 nor v1 memory)")
    spec = make_spec("dead-1", "64Mi-cgroup-classic", pool=pool, plan=plans["long"], agent=agent)
    rc, res = start(spec, work_dir)
    bundle = Path(res["bundle"])
    st = wait_phase(bundle, ("warmup",))
    agent_pid = st["children"]["agent"]
    cg = read_json(bundle / "capacity.json")["path"]
    os.kill(res["pid"], signal.SIGKILL)
    end = time.monotonic() + 10
    while Path(f"/proc/{res['pid']}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    rc, st = runner("status", "dead-1", "--work-dir", work_dir)
    assert st["phase"] == "failed" and st["live"] is False and "died" in st["reason"], st
    assert "killed 1 process" in st["reason"] and "removed 1 cgroup" in st["reason"], st
    assert gone(agent_pid)
    assert not os.path.exists(cg)
    verify_manifest(bundle)
    assert not contract(bundle).completed       # a killed runner's bundle validates too
    rc, again = start(spec, work_dir)
    assert again["state"] == "ended" and again["status"]["phase"] == "failed"
