"""What one run measured, derived from its bundle: counter deltas per interval and the per-run
metrics the statistics use. Pure.

Intervals: `measured` = loop_entry (pass{p-1}-start) -> pass{p-1}-end, the measured pass with
no preload inside; `run` = pre -> post, bracketing the whole run.

Per-run metrics (definitions the results rely on):
- iteration time: the true median of the measured pass's per-iteration wall times;
- device bytes: pool-device sectors read over the measured interval x 512, per iteration;
- logical bytes: bytes the agent delivered in the measured pass (arena hits included);
- served fraction: 1 - device / logical, clamped to [0, 1] (demand served without device reads);
- kswapd scan/steal: pgscan_kswapd / pgsteal_kswapd deltas (measured); the cgroup's own
  ratio from memory.stat pgscan / pgsteal (v2) for cells with a cgroup;
- locked fraction: meminfo Mlocked at loop entry / MemTotal;
- MGLRU: main bit of lru_gen/enabled at loop entry and at post (None when the file is absent).

Engine runs (docs/engine.md) have no replay passes: `engine_facts` holds what they measured
(bench.judge.engine.facts: wall, cold load and steady-decode seconds, backend line, tokens, output
hash, pair) plus the pool device's bytes read over the whole run (pre -> post); their
`engine_metrics` fill the per-run metric columns that apply (MemTotal, MGLRU at pre and post).
"""

from __future__ import annotations

import hashlib
import json
import re

from bench.hosts.procfs import cmdline_param, mglru_on, parse_cmdline, parse_lru_gen
from bench.judge import engine
from bench.judge.bundle import Bundle
from bench.judge.counters import counters, deltas, device_bytes
from bench.judge.stats import median

# what bench's own boots change (bench.hosts.reboot.DROPPED_PARAMS) or the boot loader adds
_VOLATILE_CMDLINE = re.compile(r"^(mem|bench\.lru_gen|lru_gen\.enabled|panic|BOOT_IMAGE|initrd)=")


def devices(b: Bundle) -> list[str]:
    dev = b.host.get("pool_device") or {}
    names = [dev["name"]] if dev.get("name") else []
    return names + [d for d in dev.get("leaves") or [] if d not in names]


def snap(b: Bundle, phase: str) -> dict[tuple[str, str], int]:
    """Flat counters of one snapshot phase (parsed once per bundle)."""
    cache = b.__dict__.setdefault("_counters", {})
    if phase not in cache:
        cache[phase] = counters(b.snapshots.get(phase, {}), devices(b))
    return cache[phase]


def interval(b: Bundle, name: str) -> list[dict]:
    start, end = _bounds(b, name)
    return deltas(snap(b, start), snap(b, end))


def _bounds(b: Bundle, name: str) -> tuple[str, str]:
    return (b.loop_entry, b.measured_end) if name == "measured" else ("pre", "post")


def delta(b: Bundle, name: str, source: str, key: str) -> int | None:
    start, end = (snap(b, p) for p in _bounds(b, name))
    if (source, key) in start and (source, key) in end:
        return end[(source, key)] - start[(source, key)]
    return None


def measured_records(b: Bundle) -> list[dict]:
    p = b.passes - 1
    return sorted((r for r in b.records if r["pass"] == p), key=lambda r: r["iter"])


def mglru_state(b: Bundle, phase: str) -> bool | None:
    text = b.snapshots.get(phase, {}).get("sys_kernel_mm_lru_gen_enabled")
    return None if text is None else mglru_on(parse_lru_gen(text))


def fingerprint(b: Bundle) -> dict:
    """What must not change inside a campaign on one host. mem=, the lru_gen boot toggle and
    panic= are the campaign's own business (its reboots set them) and are left out; the rest of
    the command line is compared as a set of arguments, since a reboot may reorder them."""
    return fingerprint_of(b.host, b.spec)


def fingerprint_of(host: dict, spec: dict) -> dict:
    """`fingerprint` of a bundle's host.json and spec.json (or of probed facts laid out so)."""
    args = sorted(a for a in parse_cmdline(host.get("cmdline", ""))
                  if not _VOLATILE_CMDLINE.match(a))
    fp = {"kernel": host.get("kernel"), "arch": host.get("arch"), "cmdline": " ".join(args),
          "agent_sha256": spec.get("agent", {}).get("source_sha256"),
          "controller_version": spec.get("controller_version")}
    fp["digest"] = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    return fp


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def metrics(b: Bundle) -> dict:
    recs = measured_records(b)
    n = len(recs)
    walls = [r["wall_ns"] / 1e9 for r in recs]
    logical = sum(r["bytes"] for r in recs)
    dev = device_bytes(snap(b, b.loop_entry), snap(b, b.measured_end), devices(b))
    le = snap(b, b.loop_entry)
    mem_total = le.get(("meminfo", "MemTotal"))
    mlocked = le.get(("meminfo", "Mlocked"))
    served = None
    if dev is not None and logical:
        served = min(1.0, max(0.0, 1 - dev / logical))
    cg_scan = delta(b, "measured", "cgroup", "memory.stat.pgscan")
    return {
        "iterations": n,
        "iteration_median_s": median(walls) if walls else None,
        "iteration_min_s": min(walls) if walls else None,
        "iteration_max_s": max(walls) if walls else None,
        "measured_wall_s": sum(walls),
        "device_bytes": dev,
        "device_bytes_per_iteration": dev / n if dev is not None and n else None,
        "logical_bytes_per_iteration": logical / n if n else None,
        "served_fraction": served,
        "pgscan_kswapd": delta(b, "measured", "vmstat", "pgscan_kswapd"),
        "pgsteal_kswapd": delta(b, "measured", "vmstat", "pgsteal_kswapd"),
        "scan_steal": _ratio(delta(b, "measured", "vmstat", "pgscan_kswapd"),
                             delta(b, "measured", "vmstat", "pgsteal_kswapd")),
        "cgroup_scan_steal": _ratio(cg_scan, delta(b, "measured", "cgroup", "memory.stat.pgsteal")),
        "mem_total_bytes": mem_total,
        "locked_fraction": _ratio(mlocked, mem_total),
        "mglru_loop_entry": mglru_state(b, b.loop_entry),
        "mglru_end": mglru_state(b, "post"),
        "mem_param": cmdline_param(parse_cmdline(b.host.get("cmdline", "")), "mem"),
    }


def engine_facts(b: Bundle) -> dict | None:
    """What an engine run measured, or None for a replay run (cached on the bundle)."""
    if not b.is_engine:
        return None
    if "_engine_facts" not in b.__dict__:
        f = engine.facts(b.spec["engine"], b.text("engine.stdout"), b.text("engine.stderr"),
                         b.engine)
        f["device_bytes"] = device_bytes(snap(b, "pre"), snap(b, "post"), devices(b))
        b.__dict__["_engine_facts"] = f
    return b.__dict__["_engine_facts"]


def engine_metrics(b: Bundle) -> dict:
    """The per-run metric columns of an engine run: only what applies is set."""
    pre = snap(b, "pre")
    out = dict.fromkeys(("iterations", "iteration_median_s", "iteration_min_s",
                         "iteration_max_s", "measured_wall_s", "device_bytes",
                         "device_bytes_per_iteration", "logical_bytes_per_iteration",
                         "served_fraction", "pgscan_kswapd", "pgsteal_kswapd", "scan_steal",
                         "cgroup_scan_steal", "locked_fraction"))
    out.update(mem_total_bytes=pre.get(("meminfo", "MemTotal")),
               mglru_loop_entry=mglru_state(b, "pre"), mglru_end=mglru_state(b, "post"),
               mem_param=cmdline_param(parse_cmdline(b.host.get("cmdline", "")), "mem"))
    return out
