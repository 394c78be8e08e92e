"""Replay against a real kernel: an ext4 pool on a direct-I/O loop device, whose
/proc/diskstats sectors are exactly the bytes that reached the device. Per-pass device bytes
come from the agent's own pass-boundary snapshots."""

from collections import Counter
from pathlib import Path

import pytest

from bench.plan.planfile import frequency_table
from tests.support import nativelib as nl
from tests.support.native_plans import EXPERT_BYTES, distinct_plan, mixed_plan

pytestmark = [pytest.mark.native, pytest.mark.root]

PAGE = nl.os.sysconf("SC_PAGE_SIZE")
# a cold read of one expert file reads it whole, rounded up to the page (the file's tail
# page): the plan's distinct bytes within 1%, as the issue asks
REL_TOL = 0.01
# the warm pass must not read the device; 64 KiB of slack covers a stray metadata block
# (e.g. the journal superblock read by jbd2, or an inode re-read after memory pressure),
# which is 0.03% of one pass here; data reads would be whole experts of 1.5 MB each
WARM_SLACK = 64 << 10


def replay(pool, plan, snap: Path, *extra, passes=2, threads=4):
    r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--threads", threads,
                      "--passes", passes, "--snapshot-dir", snap,
                      "--snapshot-file", "/proc/diskstats",
                      "--snapshot-file", "/proc/self/status",
                      "--snapshot-file", "/proc/meminfo",
                      "--snapshot-file", "/proc/vmstat",
                      "--snapshot-file", "/proc/pressure/memory", *extra])
    assert r.rc == 0, r.stderr
    assert r.summary["ok"] is True
    return r


def check_agent_bytes(r, plan, passes=2):
    for p in range(passes):
        recs = r.passes(p)
        assert [x["iter"] for x in recs] == list(range(len(plan.iterations)))
        assert [x["reads"] for x in recs] == [it.reads for it in plan.iterations]
        assert sum(x["bytes"] for x in recs) == plan.logical_bytes
        assert all(x["wall_ns"] > 0 for x in recs)
    assert r.summary["pass_bytes"] == [plan.logical_bytes] * passes


def test_cold_then_warm_pagecache(agent, loopfs, pool, plan_file, tmp_path):
    plan = mixed_plan()
    pf = plan_file(plan)
    nl.drop_caches()
    r = replay(pool, pf, tmp_path / "snap")
    check_agent_bytes(r, plan)
    distinct = len(plan.distinct_experts()) * EXPERT_BYTES
    assert r.summary["distinct_bytes"] == distinct
    cold = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    assert cold == pytest.approx(distinct, rel=REL_TOL)
    assert nl.warm_device_bytes(tmp_path / "snap", 1, loopfs.dev, WARM_SLACK) <= WARM_SLACK


def test_snapshots_layout(agent, loopfs, pool, plan_file, tmp_path):
    pf = plan_file(mixed_plan(n_iter=1))
    snap = tmp_path / "snap"
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--passes", 2,
                      "--snapshot-dir", snap, "--snapshot-file", "/proc/diskstats",
                      "--snapshot-file", "/proc/self/status",
                      "--snapshot-file", "/nonexistent/counter"])
    assert r.rc == 0, r.stderr  # an unreadable file is recorded, not fatal
    for p in range(2):
        for side in ("start", "end"):
            d = snap / f"pass{p}-{side}"
            names = sorted(x.name for x in d.iterdir())
            assert names == ["nonexistent_counter.err", "proc_diskstats", "proc_self_status"]
            assert "No such file" in (d / "nonexistent_counter.err").read_text()
            # /proc/self is the agent itself
            assert "bench-agent" in (d / "proc_self_status").read_text()


@pytest.mark.parametrize("mode", ["pinned", "hybrid"])
def test_pinned_arena(agent, loopfs, pool, plan_file, tmp_path, mode):
    plan = mixed_plan(seed=2)
    pf = plan_file(plan)
    # room for 10 experts and a bit: not a page multiple, to check the rounding
    arena = 10 * EXPERT_BYTES + 1000
    counts = frequency_table(plan)
    ranked = sorted(counts, key=lambda k: (-counts[k], k))
    in_arena = set(ranked[:10])
    nl.drop_caches()
    r = replay(pool, pf, tmp_path / "snap", "--mode", mode, "--arena-bytes", arena)
    s = r.summary
    check_agent_bytes(r, plan)
    assert s["mode"] == mode
    assert s["arena_bytes"] == -(-arena // PAGE) * PAGE
    assert s["vmlck_bytes"] == s["arena_bytes"]  # VmLck equals the arena
    assert s["vmlck_end_bytes"] == s["arena_bytes"]
    assert s["arena_experts"] == 10 and s["preload_bytes"] == 10 * EXPERT_BYTES
    assert s["preload_wall_ns"] > 0
    hits = sum(counts[k] for k in in_arena)
    for p in range(2):
        assert sum(x["arena_hits"] for x in r.passes(p)) == hits
    # the arena's experts never reach the device during a pass (preload is before pass0-start
    # and is dropped from the page cache); the cold pass reads exactly the uncovered misses
    misses = len(plan.distinct_experts() - in_arena) * EXPERT_BYTES
    cold = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    assert cold == pytest.approx(misses, rel=REL_TOL)
    # with ample memory the measured pass's misses are page-cache hits
    assert nl.warm_device_bytes(tmp_path / "snap", 1, loopfs.dev, WARM_SLACK) <= WARM_SLACK


def test_pinned_with_freq_file(agent, loopfs, pool, plan_file, tmp_path):
    plan = mixed_plan(seed=3)
    pf = plan_file(plan)
    # a table that ranks layer 3's experts 31 and 30 first, then ties broken by (layer, expert)
    freq = tmp_path / "freq.txt"
    freq.write_text("# layer expert count\n3 31 9\n3 30 9\n\n0 5 1  # tie\n0 4 1\n")
    r = replay(pool, pf, tmp_path / "snap", "--mode", "pinned",
               "--arena-bytes", 3 * EXPERT_BYTES, "--freq", freq, passes=1)
    chosen = {(3, 30), (3, 31), (0, 4)}
    reads = Counter((p.layer, e) for it in plan.iterations for p in it.passes for e in p.experts)
    assert r.summary["arena_experts"] == 3
    assert sum(x["arena_hits"] for x in r.passes(0)) == sum(reads[k] for k in chosen)


@pytest.mark.parametrize("how", ["direct", "dontneed", "dontcache"])
def test_nocache_reads_everything_every_pass(agent, loopfs, pool, plan_file, tmp_path, how):
    plan = mixed_plan(seed=4, n_iter=4)
    pf = plan_file(plan)
    nl.drop_caches()
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--threads", 4, "--passes", 2,
                      "--mode", "nocache", "--nocache", how, "--snapshot-dir", tmp_path / "s",
                      "--snapshot-file", "/proc/diskstats"])
    if r.rc == nl.EXIT_SKIP:
        # the agent's verdict, not ours: the kernel or ext4 lacks this mode (the reason names it)
        pytest.skip(f"the agent skipped --nocache {how}: {r.summary['reason']}")
    assert r.rc == 0, r.stderr
    check_agent_bytes(r, plan)
    for p in range(2):
        dev = nl.snapshot_device_bytes(tmp_path / "s", p, loopfs.dev)
        # every read goes to the device, a repeated expert included
        assert dev == pytest.approx(plan.logical_bytes, rel=REL_TOL), (p, dev)


def test_random_mode(agent, loopfs, pool, plan_file, tmp_path):
    plan = mixed_plan(seed=5)
    pf = plan_file(plan)
    nl.drop_caches()
    r = replay(pool, pf, tmp_path / "snap", "--mode", "random")
    check_agent_bytes(r, plan)
    cold = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    assert cold == pytest.approx(len(plan.distinct_experts()) * EXPERT_BYTES, rel=REL_TOL)
    assert nl.warm_device_bytes(tmp_path / "snap", 1, loopfs.dev, WARM_SLACK) <= WARM_SLACK


def test_probe_cached_counts_cache_hits(agent, loopfs, pool, plan_file, tmp_path):
    plan = distinct_plan()
    pf = plan_file(plan)
    nl.drop_caches()
    r = replay(pool, pf, tmp_path / "snap", "--probe-cached")
    n = plan.reads
    assert sum(x["cached"] for x in r.passes(0)) == 0  # all cold, all distinct
    uncached = n - sum(x["cached"] for x in r.passes(1))
    nl.skip_if_evicted_from_outside(tmp_path / "snap", 1, uncached * EXPERT_BYTES, 0)
    assert uncached == 0
    assert sum(x["cached_bytes"] for x in r.passes(1)) == plan.logical_bytes


def test_mlock_failure_is_fatal(agent, pool, plan_file, tmp_path):
    """Without CAP_IPC_LOCK and CAP_SYS_RESOURCE, an 8 MiB RLIMIT_MEMLOCK stops the arena."""
    if nl.shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    pf = plan_file(mixed_plan(n_iter=1))
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--mode", "pinned",
                      "--arena-bytes", "64M"], preexec_fn=_lock_limit_8m, timeout=60)
    r2 = nl.subprocess.run(["setpriv", "--bounding-set", "-ipc_lock,-sys_resource",
                            "--inh-caps", "-ipc_lock,-sys_resource", "--", str(nl.AGENT),
                            "replay", "--pool", str(pool), "--plan", str(pf), "--mode", "pinned",
                            "--arena-bytes", "64M"],
                           capture_output=True, text=True, preexec_fn=_lock_limit_8m)
    assert r.rc == 0, "with CAP_IPC_LOCK root locks past the rlimit"
    assert r2.returncode == nl.EXIT_FAIL  # a failure, never a skip
    assert "mlock of a 67108864-byte arena failed" in r2.stderr
    assert '"ok":false' in r2.stdout


def _lock_limit_8m():
    import resource
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (8 << 20, 8 << 20))


def test_arena_above_memavailable_is_refused(agent, pool, plan_file, tmp_path):
    pf = plan_file(mixed_plan(n_iter=1))
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--mode", "pinned",
                      "--arena-bytes", "64T"])
    assert r.rc == nl.EXIT_FAIL and "exceeds MemAvailable" in r.summary["reason"]


def test_per_read_descriptor_fallback_is_exact(agent, loopfs, pool, plan_file, tmp_path):
    """A hard RLIMIT_NOFILE too low for the pool (and no right to raise it) selects one open
    per read; the device and agent byte counts stay exact."""
    import resource

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    plan = mixed_plan(seed=8)
    pf = plan_file(plan)
    nl.drop_caches()
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--threads", 4,
                      "--snapshot-dir", tmp_path / "snap", "--snapshot-file", "/proc/diskstats",
                      "--snapshot-file", "/proc/vmstat", "--mode", "random"],
                     preexec_fn=low_limit)
    assert r.rc == 0, r.stderr
    assert r.summary["fd_strategy"] == "per-read"
    check_agent_bytes(r, plan)
    cold = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    assert cold == pytest.approx(len(plan.distinct_experts()) * EXPERT_BYTES, rel=REL_TOL)
    assert nl.warm_device_bytes(tmp_path / "snap", 1, loopfs.dev, WARM_SLACK) <= WARM_SLACK
