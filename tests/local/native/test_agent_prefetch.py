"""The one-worker, one-slot prefetcher: counters add up, and oracle advice puts later demand
reads in the page cache ahead of time (measured with the RWF_NOWAIT probe: a demand read the
probe fully served did not wait for the device)."""

import os
import subprocess
from dataclasses import replace

import pytest

from bench.plan.planfile import oracle_hints, write_plan
from bench.trace.parse import Pass
from tests.support import nativelib as nl
from tests.support.native_plans import (EXPERT_BYTES, EXPERTS, LAYERS, distinct_plan, make_plan,
                                        mixed_plan)

pytestmark = [pytest.mark.native, pytest.mark.root]


def run_prefetch(pool, plan, hints, kind, tmp_path, *extra, passes=2, threads=2, **kw):
    pf, hf = tmp_path / "plan.bpln", tmp_path / "hints.bpln"
    write_plan(pf, plan)
    write_plan(hf, hints)
    r = nl.run_agent(["replay", "--pool", pool, "--plan", pf, "--threads", threads,
                      "--passes", passes, "--prefetch", kind, "--hints", hf,
                      "--snapshot-dir", tmp_path / "snap", "--snapshot-file", "/proc/diskstats",
                      *extra], **kw)
    assert r.rc == 0, r.stderr
    return r


@pytest.mark.parametrize("kind", ["advice", "block"])
def test_counters_add_up(agent, loopfs, pool, tmp_path, kind):
    plan = mixed_plan(seed=7)
    hints = oracle_hints(plan)
    nl.drop_caches()
    r = run_prefetch(pool, plan, hints, kind, tmp_path)
    h = r.summary["hints"]
    # every hint placed is accounted once: replaced, issued, or dropped at a pass end
    assert h["submitted"] == h["overwritten"] + h["completed"] + h["left"]
    assert h["submitted"] == 2 * hints.reads
    assert h["completed"] > 0
    assert r.summary["prefetch"] == kind
    # the demand path's own counts are unchanged by prefetching
    assert r.summary["pass_bytes"] == [plan.logical_bytes] * 2


def test_block_prefetch_reads_on_its_own(agent, loopfs, pool, tmp_path):
    """Blocking prefetch reads into its own buffer: device bytes of the cold pass are the
    union of demand and completed prefetches, never more than each expert once."""
    plan = distinct_plan()
    nl.drop_caches()
    r = run_prefetch(pool, plan, oracle_hints(plan), "block", tmp_path, passes=1)
    assert r.summary["ok"], r.summary
    dev = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    assert dev == pytest.approx(plan.logical_bytes, rel=0.01)


# test_oracle_advice_leaves_demand_reads_cached: each router pass first reads CLOCKS experts
# nobody hinted, then HINTED experts the previous pass's advice named, through a device
# throttled to THROTTLE_BPS, with the agent at SCHED_FIFO priority FIFO_PRIO.
HINTED, CLOCKS = 2, 3
THROTTLE_BPS = 64 << 20
FIFO_PRIO = 10
# --probe-cached makes the agent read one page of expert (0, 0) with RWF_NOWAIT before pass 0;
# that starts the kernel's initial readahead window on it, 4 pages for a 1-page read
# (get_init_ra_size), which the first read of pass 0 then finds up to date (most runs here
# show exactly 16384 bytes there, the rest 0)
PROBE_RA = 4 * nl.os.sysconf("SC_PAGE_SIZE")


def clocked_plan():
    """Router passes of CLOCKS + HINTED distinct experts, every layer in turn, each expert read
    once (the first 30 of each layer's 32 here), read in that order: clocks first; hints that
    are the oracle's (the next pass's experts) cut to that pass's last HINTED."""
    k = HINTED + CLOCKS
    order = [(layer, tuple(range(e0, e0 + k)))
             for e0 in range(0, EXPERTS - k + 1, k) for layer in range(LAYERS)]
    plan = make_plan([order[i:i + LAYERS] for i in range(0, len(order), LAYERS)])
    oracle = oracle_hints(plan)
    hints = replace(oracle, iterations=tuple(
        replace(it, passes=tuple(Pass(p.layer, p.experts[len(p.experts) - HINTED:])
                                 for p in it.passes))
        for it in oracle.iterations))
    return plan, hints


def vmstat_delta(snap, key, p=0):
    def value(side):
        text = (snap / f"pass{p}-{side}" / "proc_vmstat").read_text()
        return int(next(l.split()[1] for l in text.splitlines() if l.split()[0] == key))
    return value("end") - value("start")


def _fifo():
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIO))


def test_oracle_advice_leaves_demand_reads_cached(agent, loopfs, pool, tmp_path):
    """Advice for the next router pass, issued when the current one starts, has that pass's
    hinted experts in the page cache before the demand path reads them, by construction.

    One replay pass, --threads 1, --probe-cached, over 24 router passes of 5 distinct experts
    (180 MB, each expert once, caches dropped): first 3 "clocks" nobody hinted, then 2 experts
    the previous pass's advice named (the oracle's hints cut to those 2). All of the agent's
    reads go through a blk-throttle group on the loop device at 64 MiB/s
    (nativelib.throttled_reads), which dispatches one group's reads in the order they were
    submitted; a clock read (1.5 MB) is >= 22 ms of throttle time. When pass j starts, the
    worker submits WILLNEED readahead for pass j+1's 2 experts (posix_fadvise only queues the
    bios) while the demand thread starts pass j's first clock, whose own bios it must then
    wait for before submitting the next. So pass j+1's readahead is queued ahead of pass j's
    second clock at the latest, and behind it the throttle must still pass pass j's clocks 2-3
    and pass j+1's clocks 1-3 before pass j+1 reads its hinted experts: >= 5 x 22 ms after the
    readahead's last bio left the throttle (traced: it completes within 3 ms of that). The
    agent runs SCHED_FIFO (its threads inherit it), so the worker gets a core within
    microseconds of its wake-up however many CPU hogs share the 2 cores. The previous version
    of this test (every expert hinted, no clocks) had no such gap: a cached pass takes no
    time, so the next pass's advice had none to land in, and the outcome was a race (33-41%
    cached idle, 3-10% loaded, 4.7% even under a 32 MiB/s throttle).

    So the cached bytes are the hinted experts of passes 1-23, 46 x 1.5 MB = 69 MB of 180 MB:
    more is impossible (pass 0 has no advice before it, clocks are never hinted: they are the
    control in the same run) but for the agent's own probe readahead (PROBE_RA). Less happens
    only when something evicts a prefetched page before the demand reads it; that page is
    then read from the device a second time, so the loop device's sectors count it. Traced on
    this machine (mm_filemap_delete_from_page_cache): kdamond.0, a DAMON paddr "pageout"
    scheme the VM runs (regions idle for 12 aggregation intervals, up to 128 MB/s), evicts a
    few of the run's pages, scattered; and another job's drop_caches (/proc/vmstat
    drop_pagecache, from the agent's pass-boundary snapshots) evicts whatever is cached: our
    file system's inodes are walked within a millisecond, when at most this pass's and the
    next pass's hinted experts (2 x HINTED) sit cached and unread. A missing page stops the
    RWF_NOWAIT probe there, so it costs at most its expert's cached bytes. Hence the lower
    bound: want - drops x 2 x HINTED experts - (pages read twice beyond what those drops
    explain) x 1 expert. Should other jobs drop the cache so often that this bound reaches 0
    (12 drops in the 2.7 s pass), nothing can be measured and the test skips saying so.
    Measured: 26 of 26 runs passed, 6 idle and 20 with 6 busy-loop processes and an O_DIRECT
    reader on the 2 cores while another session's suite ran: 20 exact (69 MB cached, nothing
    read twice), 1 lost 0.66 MB to DAMON (2 pages read twice, 3 MB allowed), 5 lost 6-18 MB to
    1-3 foreign drop_caches (4 experts per drop: the bound is reached, never passed). Advice
    that did nothing leaves ~0 cached and reads nothing twice: it fails.
    """
    plan, hints = clocked_plan()
    want_hints = (plan.passes - 1) * HINTED
    want = want_hints * EXPERT_BYTES
    page = nl.os.sysconf("SC_PAGE_SIZE")
    # readahead reads whole pages, up to the one holding EOF, of each expert once
    once = plan.reads * -(-EXPERT_BYTES // page) * page
    try:
        subprocess.run(["true"], preexec_fn=_fifo, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"cannot run the agent SCHED_FIFO (CAP_SYS_NICE, RT runtime): {exc}")
    try:
        with nl.throttled_reads(loopfs.dev, THROTTLE_BPS) as enter:
            nl.drop_caches()
            r = run_prefetch(pool, plan, hints, "advice", tmp_path, "--probe-cached",
                             "--snapshot-file", "/proc/vmstat", passes=1, threads=1,
                             preexec_fn=lambda: (enter(), _fifo()))
    except nl.NoThrottle as exc:
        pytest.skip(str(exc))
    got = sum(x["cached_bytes"] for x in r.records)
    dev = nl.snapshot_device_bytes(tmp_path / "snap", 0, loopfs.dev)
    drops = vmstat_delta(tmp_path / "snap", "drop_pagecache")
    # pages read twice; the probe's readahead may fall before pass0-start or not, so up to
    # PROBE_RA of "once" may be missing from the pass: counting it as read twice is the
    # conservative side
    twice = max(0, dev - (once - PROBE_RA)) // page
    per_drop = 2 * HINTED                                   # experts a drop_caches can take
    scattered = max(0, twice - drops * per_drop * -(-EXPERT_BYTES // page))
    allowed = (drops * per_drop + scattered) * EXPERT_BYTES
    wall = r.summary["pass_wall_ns"][0] / 1e9
    print(f"cached demand bytes {got} of {plan.logical_bytes} (construction: {want}); device "
          f"{dev}, pages read twice <= {twice}; drop_caches during the pass {drops}; loss "
          f"allowed {allowed}; pass {wall:.2f} s; hints {r.summary['hints']}")
    # the worker took every hint within its own pass (no slot was ever replaced or dropped)
    assert r.summary["hints"] == {"submitted": want_hints, "overwritten": 0,
                                  "completed": want_hints, "left": 0}
    # the throttle was in force: 180 MB at 64 MiB/s is about 2.7 s
    assert wall >= 0.9 * plan.logical_bytes / THROTTLE_BPS
    if want - allowed <= 0:
        pytest.skip(f"other jobs evicted the page cache during the {wall:.1f} s pass "
                    f"({drops} drop_caches, {scattered} more pages read twice): it did not "
                    f"hold still long enough to measure")
    assert want - allowed <= got <= want + PROBE_RA
    # prefetching moves device reads out of the demand path and adds none: re-reads are a
    # few pages proactive reclaim took, or what a foreign drop_caches evicted (at most the
    # next pass's and this pass's hinted experts each time)
    assert plan.logical_bytes * 0.99 <= dev <= \
        plan.logical_bytes * 1.01 + drops * per_drop * EXPERT_BYTES
