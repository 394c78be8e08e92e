"""Snapshot directories -> flat counters -> deltas between two snapshots. Pure, on
bench.hosts.procfs.

A snapshot is {file name: text} as the agent and runner write it. `counters()` flattens it into
{(source, key): int}: the pool device's diskstats fields, vmstat reclaim/swap/OOM counters, PSI
totals (microseconds), every meminfo field (bytes), cgroup memory files (v1 or v2; names as
written or with a path prefix, matched by suffix) and VmLck of the agent and the balloon.
"""

from __future__ import annotations

from bench.hosts.procfs import (SECTOR_BYTES, parse_cgroup_value, parse_diskstats, parse_flat_keyed,
                                parse_meminfo, parse_psi, parse_status, parse_vmstat, status_bytes)

VMSTAT_PREFIXES = ("pgscan", "pgsteal", "pswp", "oom_kill", "workingset", "pgmajfault", "pgpg",
                   "allocstall", "pgrefill", "pgactivate", "pgdeactivate", "pgrotated",
                   "kswapd", "pageoutrun", "drop_pagecache", "compact_stall")
DISK_FIELDS = ("reads", "sectors_read", "ms_reading", "writes", "sectors_written")
CGROUP_SINGLE = ("memory.current", "memory.peak", "memory.max", "memory.swap.max",
                 "memory.usage_in_bytes", "memory.max_usage_in_bytes", "memory.limit_in_bytes",
                 "memory.memsw.limit_in_bytes", "memory.failcnt")
CGROUP_KEYED = ("memory.stat", "memory.events", "memory.oom_control")


def find(snapshot: dict[str, str], name: str) -> str | None:
    """The text of `name` in a snapshot, matching a path-prefixed copy too; None if absent."""
    if name in snapshot:
        return snapshot[name]
    for key, text in snapshot.items():
        if key.endswith("_" + name) or key.endswith("/" + name):
            return text
    return None


def counters(snapshot: dict[str, str], devices: list[str]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    if (text := snapshot.get("proc_diskstats")) is not None:
        stats = parse_diskstats(text)
        for dev in devices:
            if dev in stats:
                for f in DISK_FIELDS:
                    out[("diskstats", f"{dev}.{f}")] = getattr(stats[dev], f)
    if (text := snapshot.get("proc_vmstat")) is not None:
        for k, v in parse_vmstat(text).items():
            if k.startswith(VMSTAT_PREFIXES):
                out[("vmstat", k)] = v
    for res in ("memory", "io", "cpu"):
        if (text := snapshot.get(f"proc_pressure_{res}")) is not None:
            for kind, vals in parse_psi(text).items():
                out[("psi", f"{res}.{kind}.total")] = int(vals.get("total", 0))
    if (text := snapshot.get("proc_meminfo")) is not None:
        for k, v in parse_meminfo(text).items():
            out[("meminfo", k)] = v
    for name in CGROUP_SINGLE:
        text = find(snapshot, name)
        if text is not None:
            value = parse_cgroup_value(text)
            if value is not None:
                out[("cgroup", name)] = value
    for name in CGROUP_KEYED:
        text = find(snapshot, name)
        if text is not None:
            for k, v in parse_flat_keyed(text).items():
                out[("cgroup", f"{name}.{k}")] = v
    for fname, label in (("proc_self_status", "agent"), ("balloon_status", "balloon")):
        if (text := snapshot.get(fname)) is not None:
            lck = status_bytes(parse_status(text), "VmLck")
            if lck is not None:
                out[("status", f"{label}.VmLck")] = lck
    return out


def deltas(start: dict[tuple[str, str], int], end: dict[tuple[str, str], int]) -> list[dict]:
    """Rows {source, key, start, end, delta} for keys present in both snapshots."""
    return [{"source": s, "key": k, "start": start[(s, k)], "end": end[(s, k)],
             "delta": end[(s, k)] - start[(s, k)]}
            for (s, k) in sorted(start.keys() & end.keys())]


def device_bytes(start: dict, end: dict, devices: list[str]) -> int | None:
    """Block-layer bytes read from the first of `devices` present in both snapshots."""
    for dev in devices:
        key = ("diskstats", f"{dev}.sectors_read")
        if key in start and key in end:
            return (end[key] - start[key]) * SECTOR_BYTES
    return None
