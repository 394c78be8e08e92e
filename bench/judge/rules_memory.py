"""Memory-arithmetic rules (issue 22, item 2): at loop entry what each capacity mechanism set up
sums (a balloon's sizing and MemAvailable against C, a cgroup's limit and usage, the locked
memory behind the locked fraction). `RULES` lists them as (name, version, kinds, check);
bench.judge.retention registers them after its own (this module never imports retention: the
two would import each other), so they follow the older ones in every table.

What other rules already judge, and these do not repeat: a balloon's VmLck against its request
(vmlck_held), a cgroup's usage reaching the wall (timeline_reaches_wall), a mem= boot's MemTotal
in the reboot gate's range (boot_matches).

Tolerances (docs/results.md, "Memory arithmetic"), from real runs of the host-side runner on the
24 GiB test host (2 CPUs, 6.18 kernel, shared with other jobs; tests/local/runner/
test_runner_host.py, nine balloon runs of 278-519 MiB at C = 16.6-22.8 GB, one 67M cgroup wall):
- balloon VmLck - requested_bytes: 0 to 3,840 bytes (round_up to a 4 KiB page) in all nine;
- Mlocked at loop entry - (Mlocked at pre + balloon VmLck + agent VmLck): -116 KiB to 0, also
  in two pinned runs (a 48 MiB arena in a cgroup, a 256 MiB arena beside a 553 MiB balloon, whose
  MemAvailable was C - 244 MiB: the arena is resident agent memory, VmRSS);
- MemAvailable at loop entry - C: +4 to +389 MiB (at most 2.3% of C): the shared host freed
  memory between the runner's sizing and loop entry; the warm pass's ~265 MiB of file pages took
  22 MiB off MemAvailable (the watermark discount below);
- the cgroup's memory.usage_in_bytes and max_usage_in_bytes at most the limit read back
  (66,998,272 bytes: 67,000,000 rounded down to a page) in every snapshot and timeline sample.
The vm lab's guests (1536 MiB, C = 110M) could not run here; the twin lab's real memboot bundles
(tests/fixtures/bundles/twin: 240-336 MiB MemTotal, 16 KiB pages) show the agent resident at
10-11 MiB and the warm pass taking 7-30 MiB off MemAvailable (half its new file pages at most),
which the lower bound allows for by name; the slack's 1% of MemTotal (15 MiB there) is for what
is left.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.hosts.procfs import parse_status, status_bytes
from bench.judge.bundle import Bundle
from bench.judge.counters import find
from bench.judge.measured import snap

MiB = 1 << 20
# Mlocked at loop entry = Mlocked before the run + what the run locked, within this fraction or
# LOCKED_SLACK_BYTES: /proc/meminfo folds per-CPU counter deltas lazily (up to 125 pages per CPU
# and zone: 562 MiB on a 72-CPU host of 64 KiB pages, under 1% of the paper's balloons)
LOCKED_SLACK_FRACTION = 0.01
LOCKED_SLACK_BYTES = 64 * MiB
# MemAvailable at loop entry against C: within this fraction of C or of MemTotal, whichever is
# larger, beyond what the kernel's own accounting moves. MemAvailable counts page cache less
# min(cache / 2, the zones' low watermarks), and the bundle does not record the watermarks: the
# warm pass's page cache may take up to half the file pages at loop entry off it, and the file
# pages the runner's sizing saw (half of those at pre) may have gone since, adding that much
# back. Below, it also lacks the agent's resident memory and the balloon's page tables. 5% of C
# is twice the most the shared test host drifted (2.3%) and under a tenth of the gap between the
# paper's neighbouring capacities (64G vs 93G).
AVAIL_SLACK_OF_C = 0.05
AVAIL_SLACK_OF_TOTAL = 0.01
# the largest page size Linux uses: a cgroup limit reads back rounded to a page
MAX_PAGE = 64 << 10

RULES: list[tuple[str, int, tuple[str, ...], Callable[[Bundle, dict], tuple[bool, str]]]] = []


def rule(name: str, version: int, kinds: tuple[str, ...]):
    """Declare a rule for bench.judge.retention to register (as its own `rule` does)."""
    def deco(fn):
        RULES.append((name, version, kinds, fn))
        return fn
    return deco


def _mb(n: int | None) -> str:
    return "absent" if n is None else f"{n / MiB:.0f} MiB"


def _status(b: Bundle, phase: str, who: str) -> dict[str, str]:
    """/proc/PID/status of the agent (proc_self_status, the agent's own snapshot) or the balloon
    at `phase`, parsed; {} when the snapshot lacks it."""
    s = b.snapshots.get(phase, {})
    if who == "agent":
        text = s.get("proc_self_status")
    else:
        pid = (b.balloon or {}).get("pid") or b.capacity.get("pid")
        text = s.get("balloon_status") or s.get(f"proc_{pid}_status")
    return parse_status(text) if text else {}


def _bytes_of(st: dict[str, str], key: str) -> int:
    return status_bytes(st, key) or 0


@rule("locked_fraction_sums", 1, kinds=("agent",))
def locked_fraction_sums(b, ctx):
    """The locked fraction the views show (meminfo Mlocked / MemTotal at loop entry,
    bench.judge.measured.metrics) is the run's own: Mlocked at loop entry equals Mlocked in the
    `pre` snapshot (the host's, before the run locked anything) plus the balloon's VmLck plus the
    agent's (its pinned arena) at loop entry, within LOCKED_SLACK_FRACTION or
    LOCKED_SLACK_BYTES, either way; and MemTotal at loop entry is the one in `pre` and
    host.json. A bundle whose balloon says it locks 22 GiB while Mlocked shows 14 MiB (the
    memory arithmetic does not sum) is rejected here."""
    le, pre = snap(b, b.loop_entry), snap(b, "pre")
    total, mlocked = le.get(("meminfo", "MemTotal")), le.get(("meminfo", "Mlocked"))
    before = pre.get(("meminfo", "Mlocked"))
    if not total or mlocked is None or before is None:
        return False, "meminfo MemTotal or Mlocked missing at pre or loop entry"
    for where, other in (("pre", pre.get(("meminfo", "MemTotal"))),
                         ("host.json", b.host.get("mem_total_bytes"))):
        if other != total:
            return False, (f"MemTotal {total} at loop entry but {other} in {where}: the "
                           "locked fraction's denominator moved")
    balloon = 0
    if b.spec.get("mechanism") == "balloon":
        got = status_bytes(_status(b, b.loop_entry, "balloon"), "VmLck")
        if got is None:
            return False, "the balloon's VmLck is absent at loop entry: Mlocked cannot be summed"
        balloon = got
    agent = _bytes_of(_status(b, b.loop_entry, "agent"), "VmLck")
    want = before + balloon + agent
    slack = max(LOCKED_SLACK_BYTES, int(LOCKED_SLACK_FRACTION * want))
    parts = (f"{_mb(before)} before the run + balloon {_mb(balloon)} + agent {_mb(agent)} "
             f"VmLck")
    if abs(mlocked - want) > slack:
        return False, (f"Mlocked {_mb(mlocked)} at loop entry, but {parts} (allowed "
                       f"+-{_mb(slack)}): the locked fraction {mlocked / total:.1%} is not the "
                       f"run's {want / total:.1%}")
    return True, f"Mlocked {_mb(mlocked)} = {parts}: {mlocked / total:.1%} locked"


@rule("capacity_sums", 1, kinds=("agent",))
def capacity_sums(b, ctx):
    """At loop entry the capacity mechanism's memory arithmetic holds. balloon: it was sized as
    the runner sizes it (requested_bytes = mem_available_before - C) and MemAvailable at loop
    entry is C: at most C + half the file pages at pre + slack, at least C less the agent's
    resident memory (VmRSS), the balloon's page tables (VmPTE), half the file pages at loop
    entry and the slack (the halves: the kernel's watermark discount on page cache, which
    moves with it); slack = AVAIL_SLACK_OF_C of C or AVAIL_SLACK_OF_TOTAL of MemTotal,
    whichever is larger. cgroup: limit_bytes = C + the headroom (the spec's), read back within
    a page (as the runner checks), the limit in force in every snapshot, and usage (every
    snapshot's usage and peak, every timeline sample) never above it; that usage reaches the
    wall is timeline_reaches_wall's. memboot: MemTotal in the gate's range is boot_matches'.
    none: nothing to sum."""
    mech = b.spec.get("mechanism")
    if mech == "balloon":
        return _balloon_sums(b)
    if mech == "cgroup":
        return _cgroup_sums(b)
    if mech == "memboot":
        return True, "memboot: MemTotal against mem= is boot_matches' check"
    return True, "no capacity mechanism: nothing to sum"


def _balloon_sums(b: Bundle) -> tuple[bool, str]:
    c, cap = int(b.spec.get("capacity_bytes") or 0), b.capacity
    before, asked = cap.get("mem_available_before"), cap.get("requested_bytes")
    if before is None or asked is None:
        return False, "capacity.json lacks mem_available_before or requested_bytes"
    if cap.get("capacity_bytes") not in (None, c):
        return False, f"capacity.json says C {cap.get('capacity_bytes')}, the spec {c}"
    if asked != before - c:
        return False, (f"the balloon asked {_mb(asked)}, but MemAvailable {_mb(before)} - C "
                       f"{_mb(c)} is {_mb(before - c)}")
    le = snap(b, b.loop_entry)
    avail, total = le.get(("meminfo", "MemAvailable")), le.get(("meminfo", "MemTotal"))
    if avail is None or not total:
        return False, "meminfo MemAvailable or MemTotal missing at loop entry"
    file, file_pre = _file_pages(le), _file_pages(snap(b, "pre"))
    rss = _bytes_of(_status(b, b.loop_entry, "agent"), "VmRSS")
    pte = _bytes_of(_status(b, b.loop_entry, "balloon"), "VmPTE")
    slack = max(int(AVAIL_SLACK_OF_C * c), int(AVAIL_SLACK_OF_TOTAL * total))
    lo, hi = c - rss - pte - file // 2 - slack, c + file_pre // 2 + slack
    if not lo <= avail <= hi:
        return False, (f"MemAvailable {_mb(avail)} at loop entry, C {_mb(c)}: outside "
                       f"[{_mb(max(lo, 0))}, {_mb(hi)}] (the agent's {_mb(rss)} resident, the "
                       f"balloon's {_mb(pte)} of page tables, half the {_mb(file)} of file "
                       f"pages, half the {_mb(file_pre)} before the run, +-{_mb(slack)})")
    return True, (f"MemAvailable {_mb(avail)} at loop entry, C {_mb(c)} (allowed "
                  f"{_mb(max(lo, 0))} to {_mb(hi)})")


def _file_pages(counters: dict) -> int:
    return (counters.get(("meminfo", "Active(file)"), 0)
            + counters.get(("meminfo", "Inactive(file)"), 0))


LIMIT_FILES = ("memory.max", "memory.limit_in_bytes")
USAGE_FILES = ("memory.current", "memory.usage_in_bytes", "memory.peak",
               "memory.max_usage_in_bytes")


def _cgroup_sums(b: Bundle) -> tuple[bool, str]:
    c, cap = int(b.spec.get("capacity_bytes") or 0), b.capacity
    head, want_head = cap.get("headroom_bytes"), b.spec.get("cgroup_headroom_bytes")
    if head is None or (want_head is not None and head != want_head):
        return False, (f"capacity.json headroom_bytes {head}, the spec asks "
                       f"{want_head if want_head is not None else 'the default'}")
    limit, back = cap.get("limit_bytes"), cap.get("limit_read_back")
    if limit != c + head:
        return False, f"limit_bytes {limit} is not C {c} + headroom {head}"
    if back is None or not limit - MAX_PAGE < back < limit + MAX_PAGE:
        return False, f"the limit read back ({back}) is not the {limit} written, to a page"
    phases = [p for p in b.snapshots if p != "pre"]
    for phase in phases:
        s = b.snapshots[phase]
        for name in LIMIT_FILES:
            text = find(s, name)
            if text is not None and (text.strip() == "max" or int(text) != back):
                return False, (f"{name} {text.strip()[:20]} at {phase}, the limit read back "
                               f"{back}")
        for name in USAGE_FILES:
            got = snap(b, phase).get(("cgroup", name))
            if got is not None and got > back:
                return False, f"{name} {got} at {phase} is above the limit {back}"
    over = next((r for r in b.timeline if (r["memory_current"] or 0) > back), None)
    if over is not None:
        return False, (f"memory.current {over['memory_current']} in the timeline "
                       f"({over['phase']}) is above the limit {back}")
    return True, f"limit C + headroom {_mb(c + head)}, read back {back}, never exceeded"
