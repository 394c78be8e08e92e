"""Plausibility rules (issue 22, item 1): a retained number must be physically possible and
agree with the run's other counters. Registered into bench.judge.retention.RULES on import
(retention imports this module last, so these rules follow the older ones in every table).

Four rules, each about one kind of impossibility:
- numbers_possible: every time and size finite, positive and within a stated limit;
- totals_agree: the agent's per-pass totals (summary) are the sums of its per-iteration records;
- walls_within_spans: no wall time is longer than the monotonic span the runner saw it in
  (status.json history, timeline.csv), with a stated slack;
- throughput_possible: bytes over wall time within what the host can move (its measured device
  bandwidth when `bench hosts bandwidth` measured one, else a stated ceiling; page-cache bytes
  within a memory-bandwidth ceiling).

Every limit is a named constant below, with the reason for its value.
"""

from __future__ import annotations

import math
import re

from bench.judge.bundle import Bundle
from bench.judge.counters import device_bytes
from bench.judge.measured import devices, engine_facts, measured_records, snap
from bench.judge.rulebook import rule

NS = 1_000_000_000
DAY_NS = 86_400 * NS
# an iteration (one token's expert reads) that takes a day is no measurement: the slowest real
# ones (qemu TCG guests, a cold HDD) take seconds
MAX_ITERATION_NS = DAY_NS
PAGE = 65536       # the largest base page (arm64 64K kernels): a cached part rounds up to it
# a pass or an engine run: a week (agent_timeout_s and the engine's timeout_s stop real ones
# far sooner)
MAX_PASS_NS = 7 * DAY_NS
# bytes one iteration reads: 1 PB (decimal), a thousand times the largest MoE pool in the paper
MAX_ITERATION_BYTES = 10 ** 15
# between a pass's iterations the agent does only bookkeeping: a pass's wall exceeds the sum of
# its iterations' walls by at most this (1 s, plus 5% for a guest descheduled in between)
PASS_GAP_NS = NS
PASS_GAP_FRACTION = 0.05
# the runner notices a phase change at its next timeline sample and writes status.json after
# it: a wall may exceed the span it is compared with by 2 timeline intervals, plus 5 s, plus 5%
# of the span (slow guests)
SPAN_SLACK_NS = 5 * NS
SPAN_SLACK_INTERVALS = 2
SPAN_SLACK_FRACTION = 0.05
DEFAULT_INTERVAL_MS = 1000
# memory bandwidth ceiling for bytes the page cache (or the agent's arena) delivers, and for a
# device whose reads a page cache may serve: 10 TB/s, above any machine's DRAM bandwidth today
# (2 sockets x 12 channels of DDR5-6400 give 1.2 TB/s; the HBM3 of an MI300A, 5.3 TB/s; a
# GH200's LPDDR5X, 0.5 TB/s)
MEMORY_CEILING_BPS = 10e12
# a block device with no measured bandwidth: 250 GB/s, above sixteen PCIe 5.0 x4 NVMe drives
# (about 14 GB/s each) striped together
DEVICE_CEILING_BPS = 250e9
# a measured device bandwidth is a single `bench hosts bandwidth` run (its own thread count,
# one cold pass): a run may read faster with more threads or readahead, up to this factor
DEVICE_MARGIN = 4.0
# devices whose reads another page cache may serve (a loop device's backing file, a virtual
# disk's image file on the hypervisor, with qemu's default cache=writeback): their "device"
# bandwidth can reach memory speed, so the memory ceiling bounds them
CACHE_BACKED = re.compile(r"^(loop|vd|xvd|nbd|zram|ram|pmem)")


def _finite_positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _s(ns: float) -> str:
    return f"{ns / NS:.3f} s"


def _rate(bps: float) -> str:
    return f"{bps / 1e12:.3g} TB/s" if bps >= 1e12 else f"{bps / 1e9:.3g} GB/s"


# numbers_possible -------------------------------------------------------------------------------

def _agent_numbers(b: Bundle) -> str | None:
    """The first impossible wall time or byte count of an agent run, or None."""
    eb = b.summary.get("expert_bytes")
    if eb is not None and eb <= 0:
        return f"the summary's expert_bytes {eb} is not positive"
    for r in b.records:
        where = f"pass {r['pass']} iteration {r['iter']}"
        if r["wall_ns"] <= 0:
            return f"{where}: wall_ns {r['wall_ns']} is not positive"
        if r["wall_ns"] > MAX_ITERATION_NS:
            return f"{where}: wall {_s(r['wall_ns'])} is longer than a day"
        if r["reads"] <= 0 or r["bytes"] <= 0:
            return f"{where}: {r['reads']} reads of {r['bytes']} bytes (an iteration reads)"
        if r["bytes"] > MAX_ITERATION_BYTES:
            return f"{where}: {r['bytes']} bytes is more than 1 PB in one iteration"
        if eb and r["bytes"] != r["reads"] * eb:
            return f"{where}: {r['bytes']} bytes is not {r['reads']} reads x {eb}"
    for p, w in enumerate(b.summary.get("pass_wall_ns") or []):
        if w <= 0:
            return f"the summary's pass {p} wall {w} ns is not positive"
        if w > MAX_PASS_NS:
            return f"the summary's pass {p} wall {_s(w)} is longer than a week"
    if b.completed:
        dev = device_bytes(snap(b, b.loop_entry), snap(b, b.measured_end), devices(b))
        if dev is not None and dev < 0:
            return f"device bytes over the measured pass are negative ({dev}): a counter " \
                   "went backwards or the device changed"
    return None


def _page_cache_impossible(pc: dict | None, device: int | None) -> str | None:
    """Why an engine's page-cache split cannot be (None when it can, or when there is none)."""
    if pc is None:
        return None
    for part in ("experts", "rest"):
        if pc[part] > pc[f"model_{part}"]:
            return (f"the engine says {pc[part]} bytes of the model's {part} are cached, more "
                    f"than the model's {pc[f'model_{part}']}")
    if device is not None and pc["experts"] + pc["rest"] > device + 2 * PAGE:
        return (f"the engine says {pc['experts'] + pc['rest']} bytes of its model are cached "
                f"after the run, more than the {device} bytes read from the device in it")
    return None


@rule("numbers_possible", 3)
def numbers_possible(b, ctx):
    """Wall times and byte counts a run can have: every iteration's wall_ns positive and at most
    a day, its reads and bytes positive, its bytes at most 1 PB (and bytes = reads x
    expert_bytes when the summary gives the expert size, which must be positive), the
    summary's per-pass walls positive and at most a week, the device bytes of the measured
    interval not negative; an engine run's wall time finite, positive and at most a week, its
    cold load finite and not negative, its device bytes not negative, and the page-cache
    split it printed (engine_gates.PAGE_CACHE), if any, possible: each part at most the
    model's, and together at most the device bytes (the caches were dropped before the run, so
    what is cached was read in it) plus a page per part. The contract already refuses what is
    not a number (NaN, Infinity, out of range). v2 adds the upper limits (v1 took any positive
    wall, so 2^63-1 ns, 292 years, was retained) and the positive expert size; v3 the
    page-cache split."""
    if b.is_engine:
        f = engine_facts(b) or {}
        wall = f.get("wall_s")
        if wall is not None and not _finite_positive(wall):
            return False, f"engine wall time {wall} s is not finite and positive"
        if wall is not None and wall * NS > MAX_PASS_NS:
            return False, f"engine wall time {wall:.3f} s is longer than a week"
        load = f.get("load_s")
        if load is not None and not (math.isfinite(load) and load >= 0):
            return False, f"engine cold load {load} s is not finite and non-negative"
        if f.get("device_bytes") is not None and f["device_bytes"] < 0:
            return False, f"device bytes over the run are negative ({f['device_bytes']})"
        why = _page_cache_impossible(f.get("page_cache"), f.get("device_bytes"))
        if why:
            return False, why
        return True, "engine times finite, positive and under a week; device bytes not negative"
    why = _agent_numbers(b)
    if why:
        return False, why
    return True, (f"{len(b.records)} iterations with walls in (0, 1 day] and byte counts in "
                  "(0, 1 PB]")


# totals_agree -----------------------------------------------------------------------------------

def _per_pass(b: Bundle) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for r in b.records:
        t = out.setdefault(r["pass"], {"bytes": 0, "reads": 0, "wall_ns": 0})
        for k in t:
            t[k] += r[k]
    return out


@rule("totals_agree", 1, kinds=("agent",))
def totals_agree(b, ctx):
    """The agent's summary and its records tell one story: for every pass done, pass_bytes and
    pass_reads equal the sums of that pass's records' bytes and reads (the agent adds them up
    from the same counters), and pass_wall_ns (the pass's clock, around its iterations) is at
    least the sum of its iterations' walls and exceeds it by at most 1 s + 5% (the bookkeeping
    between iterations). A completed run's summary must carry the three lists."""
    sm = b.summary
    if not b.completed or not sm:
        return True, "the run did not complete: runner_completed judges it"
    lists = {k: sm.get(k) for k in ("pass_bytes", "pass_reads", "pass_wall_ns")}
    missing = [k for k, v in lists.items() if v is None]
    if missing:
        return False, (f"the agent summary has no {', '.join(missing)}: its totals cannot be "
                       "checked against its records")
    sums = _per_pass(b)
    for p in range(sm.get("passes_done") or 0):
        got = sums.get(p, {"bytes": 0, "reads": 0, "wall_ns": 0})
        for key, rec in (("pass_bytes", "bytes"), ("pass_reads", "reads")):
            said = lists[key][p] if p < len(lists[key]) else None
            if said != got[rec]:
                return False, (f"pass {p}: the summary's {key} is {said}, its records sum to "
                               f"{got[rec]}")
        wall = lists["pass_wall_ns"][p] if p < len(lists["pass_wall_ns"]) else None
        if wall is None or wall < got["wall_ns"]:
            return False, (f"pass {p}: the summary's pass wall {wall} ns is shorter than its "
                           f"iterations' walls, {got['wall_ns']} ns together")
        gap = PASS_GAP_NS + PASS_GAP_FRACTION * wall
        if wall - got["wall_ns"] > gap:
            return False, (f"pass {p}: the summary's pass wall {_s(wall)} exceeds its "
                           f"iterations' walls ({_s(got['wall_ns'])} together) by more than "
                           f"1 s + 5% ({_s(gap)})")
    return True, (f"{sm.get('passes_done')} passes: bytes, reads and walls of the summary agree "
                  "with the records")


# walls_within_spans -----------------------------------------------------------------------------

def _history(b: Bundle) -> dict[str, int]:
    """The monotonic time of each phase in status.json's history (the first entry of each)."""
    out: dict[str, int] = {}
    for h in b.status.get("history") or []:
        if isinstance(h.get("mono_ns"), int):
            out.setdefault(h.get("phase"), h["mono_ns"])
    return out


def _slack(b: Bundle, span: int) -> float:
    interval = b.spec.get("timeline_interval_ms") or DEFAULT_INTERVAL_MS
    return SPAN_SLACK_NS + SPAN_SLACK_INTERVALS * interval * 1e6 + SPAN_SLACK_FRACTION * span


def _within(what: str, wall: int, span_name: str, span: int, b: Bundle) -> str | None:
    slack = _slack(b, span)
    if wall > span + slack:
        return (f"{what} took {_s(wall)}, longer than {span_name} ({_s(span)}) plus the slack "
                f"of 5 s + 2 timeline intervals + 5% ({_s(slack)})")
    return None


def _timeline_span(b: Bundle, phase: str | None) -> int | None:
    t = [r["mono_ns"] for r in b.timeline if phase is None or r["phase"] == phase]
    return max(t) - min(t) if len(t) >= 2 else None


def _agent_spans(b: Bundle) -> str | None:
    """The first wall of an agent run longer than a span it happened in, or None."""
    hist = _history(b)
    start = hist.get("warmup", hist.get("measuring"))
    need = {"measuring": hist.get("measuring"), "collecting": hist.get("collecting"),
            "warmup or measuring": start}
    gone = [k for k, v in need.items() if v is None]
    if gone or start is None:
        return f"status.json's history has no monotonic time for {', '.join(gone)}"
    run_span = max(hist.values()) - min(hist.values())
    agent_span = hist["collecting"] - start
    measuring = hist["collecting"] - hist["measuring"]
    walls = b.summary.get("pass_wall_ns") or []
    sums = _per_pass(b)
    for p, w in enumerate(walls):
        why = _within(f"pass {p}", w, "the run's span in status.json", run_span, b)
        if why:
            return why
    total = sum(walls) or sum(t["wall_ns"] for t in sums.values())
    measured = sum(r["wall_ns"] for r in measured_records(b))
    checks = [("all passes together", total, "the agent's span in status.json (warmup to "
               "collecting)", agent_span),
              ("the measured pass's iterations", measured, "the measuring phase in "
               "status.json (measuring to collecting)", measuring)]
    tl_all, tl_meas = _timeline_span(b, None), _timeline_span(b, "measuring")
    if tl_all is not None:
        checks.append(("all passes together", total, "the timeline's span", tl_all))
    if tl_meas is not None:
        checks.append(("the measured pass's iterations", measured,
                       "the timeline's measuring samples", tl_meas))
    for what, wall, name, span in checks:
        why = _within(what, wall, name, span, b)
        if why:
            return why
    return None


def _agent_summary_line(b: Bundle) -> str:
    hist = _history(b)
    measured = sum(r["wall_ns"] for r in measured_records(b))
    span = hist["collecting"] - hist["measuring"]
    return (f"every pass within the run's span; the measured pass's {_s(measured)} within the "
            f"measuring phase's {_s(span)} (slack {_s(_slack(b, span))}) and the timeline's")


@rule("walls_within_spans", 1)
def walls_within_spans(b, ctx):
    """No wall time is longer than the monotonic span the runner saw it in (the agent's clock,
    the runner's status.json history and timeline.csv are all the host's CLOCK_MONOTONIC),
    give or take a slack of 5 s + 2 timeline intervals + 5% of the span: each pass's wall
    within the run's span (first to last history entry); all passes' walls together within the
    agent's span (warmup to collecting) and the timeline's; the measured pass's iterations
    within the measuring phase (measuring to collecting) and the timeline's measuring samples.
    An engine run's wall within the run's span."""
    if not b.completed:
        return True, "the run did not complete: runner_completed judges it"
    if b.is_engine:
        hist = _history(b)
        wall_s = (engine_facts(b) or {}).get("wall_s")
        if len(hist) < 2 or wall_s is None:
            return False, "no engine wall or no monotonic status.json history to compare it with"
        span = max(hist.values()) - min(hist.values())
        why = _within("the engine", int(wall_s * NS), "the run's span in status.json", span, b)
        return (False, why) if why else (True, f"engine wall {wall_s:.3f} s within the run's "
                                               f"span of {_s(span)}")
    why = _agent_spans(b)
    if why:
        return False, why
    return True, _agent_summary_line(b)


# throughput_possible ----------------------------------------------------------------------------

def device_bound(b: Bundle, ctx: dict) -> tuple[float, str]:
    """The highest device read rate this run's pool device can have, with where it comes from.
    ctx["device_bandwidth"]: the host's measured cold bandwidth of that device, bytes/s and
    its provenance (bench.store.bandwidth.device_bandwidth), or None."""
    names = devices(b)
    backed = [d for d in names if CACHE_BACKED.match(d)]
    if backed:
        return MEMORY_CEILING_BPS, (f"the memory ceiling {_rate(MEMORY_CEILING_BPS)}: "
                                    f"{backed[0]} may be served from another page cache")
    m = ctx.get("device_bandwidth")
    if m and _finite_positive(m.get("bytes_per_s")):
        return DEVICE_MARGIN * m["bytes_per_s"], (
            f"{DEVICE_MARGIN:g} x the {_rate(m['bytes_per_s'])} `bench hosts bandwidth` measured "
            f"on {m.get('device')} ({m.get('measured_at') or 'undated'})")
    return DEVICE_CEILING_BPS, (f"the generic device ceiling {_rate(DEVICE_CEILING_BPS)}: no "
                                f"bandwidth measured for {names[0] if names else 'the device'}"
                                " on this host")


@rule("throughput_possible", 1)
def throughput_possible(b, ctx):
    """Bytes over wall time within what the host can move. Page-cache (logical) bytes: each
    iteration's bytes over its wall, and the measured pass's, at most the memory ceiling of
    10 TB/s. Device bytes of the measured pass over its iterations' walls (an engine run's
    over the run's span in status.json) at most the device bound: 4 x the host's cold
    bandwidth of that device from `bench hosts bandwidth` when one was measured, else 250 GB/s;
    the memory ceiling for a loop device or a virtual disk (vd*, xvd*, nbd*), whose reads
    another page cache may serve. The reason names the bound used."""
    if not b.completed:
        return True, "the run did not complete: runner_completed judges it"
    bound, source = device_bound(b, ctx)
    if b.is_engine:
        dev = (engine_facts(b) or {}).get("device_bytes")
        hist = _history(b)
        span = max(hist.values()) - min(hist.values()) if len(hist) >= 2 else 0
        if dev is None:
            return True, "no device counters for the pool device: no device throughput to bound"
        if span <= 0:
            return False, f"{dev} device bytes in a run without a monotonic span"
        rate = dev / (span / NS)
        if rate > bound:
            return False, (f"{dev} device bytes in the run's {_s(span)}: {_rate(rate)}, above "
                           f"{source}")
        return True, f"device {_rate(rate)} over the run, within {source}"
    for r in b.records:
        if r["wall_ns"] <= 0:
            continue            # not a wall at all: numbers_possible's to reject
        rate = r["bytes"] / (r["wall_ns"] / NS)
        if rate > MEMORY_CEILING_BPS:
            return False, (f"pass {r['pass']} iteration {r['iter']}: {r['bytes']} bytes in "
                           f"{r['wall_ns']} ns is {_rate(rate)}, above the memory ceiling "
                           f"{_rate(MEMORY_CEILING_BPS)}")
    recs = measured_records(b)
    wall = sum(r["wall_ns"] for r in recs)
    if wall <= 0:
        return True, "the measured pass has no positive wall time: numbers_possible judges it"
    logical = sum(r["bytes"] for r in recs) / (wall / NS)
    if logical > MEMORY_CEILING_BPS:
        return False, (f"the measured pass delivered {_rate(logical)}, above the memory ceiling "
                       f"{_rate(MEMORY_CEILING_BPS)}")
    dev = device_bytes(snap(b, b.loop_entry), snap(b, b.measured_end), devices(b))
    if dev is None:
        return True, (f"page cache {_rate(logical)}; no device counters for the pool device: no "
                      "device throughput to bound")
    rate = dev / (wall / NS)
    if rate > bound:
        return False, (f"the measured pass read {dev} device bytes in {_s(wall)}: "
                       f"{_rate(rate)}, above {source}")
    return True, f"page cache {_rate(logical)}, device {_rate(rate)} within {source}"
