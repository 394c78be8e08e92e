"""What one run measured, derived from its bundle: counter deltas per interval and the per-run
metrics the statistics use. Pure.

Intervals: `measured` = loop_entry (pass{p-1}-start) -> pass{p-1}-end, the measured pass with
no preload inside; `run` = pre -> post, bracketing the whole run.

Per-run metrics (definitions the results rely on):
- iteration time: the true median of the measured pass's per-iteration wall times;
- device bytes: pool-device sectors read over the measured interval x 512, per iteration;
- logical bytes: bytes the agent delivered in the measured pass (arena hits included);
- served fraction: (logical - min(device, logical)) / logical, in [0, 1] by construction
  (`served_fraction`: demand served without device reads; amplification serves 0);
- kswapd scan/steal: pgscan_kswapd / pgsteal_kswapd deltas (measured); the cgroup's own
  ratio from memory.stat pgscan / pgsteal (v2) for cells with a cgroup;
- locked fraction: meminfo Mlocked at loop entry / MemTotal (the host's memory shape, the
  regime's measure); retention's locked_fraction_sums rejects a run whose Mlocked is not the
  host's own locked memory at `pre` plus the balloon's and the agent's VmLck, so a retained
  balloon's fraction is its VmLck (plus that baseline) over MemTotal;
- MGLRU: main bit of lru_gen/enabled at loop entry and at post (None when the file is absent).

Engine runs (docs/engine.md) have no replay passes: `engine_facts` holds what they measured
(bench.judge.engine_gates.facts: wall, cold load and steady-decode seconds, backend line,
tokens, output hash, pair) plus the pool device's bytes read over the whole run (pre -> post); their
`engine_metrics` fill the per-run metric columns that apply (MemTotal, MGLRU at pre and post).
"""

from __future__ import annotations

import hashlib
import json
import re

from bench.hosts.procfs import cmdline_param, mglru_on, parse_cmdline, parse_lru_gen
from bench.judge import engine_gates
from bench.judge.bundle import Bundle
from bench.judge.counters import counters, deltas, device_bytes
from bench.judge.stats import median

# what bench's own boots change (bench.hosts.reboot.DROPPED_PARAMS) or the boot loader adds
_VOLATILE_CMDLINE = re.compile(r"^(mem|bench\.lru_gen|lru_gen\.enabled|panic|BOOT_IMAGE|initrd)=")


def devices(b: Bundle) -> list[str]:
    dev = b.host.get("pool_device") or {}
    names = [dev["name"]] if dev.get("name") else []
    return names + [d for d in dev.get("leaves") or [] if d not in names]


def pool_device(b: Bundle) -> str | None:
    """The pool device's name as host.json gives it (what `bench hosts bandwidth` stores)."""
    names = devices(b)
    return names[0] if names else None


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


# the fingerprint -------------------------------------------------------------------------------

FINGERPRINT_DEFINITION = 2      # 1: kernel from a key the runner never wrote, no settings
IDENTITY_FIELDS = ("kernel", "arch", "cmdline", "agent_sha256", "controller_version")
GiB = 1 << 30


def fingerprint(b: Bundle) -> dict:
    """What must not change inside a campaign on one host (docs/design.md, identity), from what the
    runner wrote: `fingerprint_of(host.json, spec.json)`."""
    return fingerprint_of(b.host, b.spec)


def fingerprint_of(host: dict, spec: dict) -> dict:
    """The fingerprint of a bundle's host.json and spec.json (or of probed facts laid out as
    host.json: bench.hosts.facts.as_host_json), with its digest:

    - kernel: host.json kernel_release (`uname -r` on the host);
    - arch: host.json arch;
    - cmdline: host.json cmdline as a sorted set of arguments, less mem=, the lru_gen boot
      toggles and panic= (the campaign's own reboots set them) and what the boot loader adds
      (BOOT_IMAGE=, initrd=); a reboot may reorder the rest;
    - boot_mem: the mem= of that boot (None without one): neither compared nor part of the
      digest, it says whether the mem=-dependent settings are comparable (`fingerprint_diff`);
    - agent_sha256: host.json agent_source_sha256 (what the agent on the host answered),
      spec.json agent.source_sha256 for a host.json without the key;
    - controller_version: spec.json controller_version (bench.version);
    - settings: host.json settings flattened by `settings_fingerprint`; None where the bundle
      predates them (absent settings are part of the identity: they differ from recorded ones).

    The digest covers every field but boot_mem. The settings the kernel derives from the
    memory it booted with (`mem_dependent`) are in it, so a mem= boot has another digest than
    the full one (a cell always runs on one of them), while `fingerprint_diff`, which the
    campaign rule uses, skips those fields across boots of different mem=.
    """
    args = parse_cmdline(host.get("cmdline") or "")
    agent = (host["agent_source_sha256"] if "agent_source_sha256" in host
             else (spec.get("agent") or {}).get("source_sha256"))
    fp = {"definition": FINGERPRINT_DEFINITION, "kernel": host.get("kernel_release"),
          "arch": host.get("arch"),
          "cmdline": " ".join(sorted(a for a in args if not _VOLATILE_CMDLINE.match(a))),
          "boot_mem": cmdline_param(args, "mem"), "agent_sha256": agent,
          "controller_version": spec.get("controller_version"),
          "settings": settings_fingerprint(host.get("settings"))}
    identity = {k: v for k, v in fp.items() if k != "boot_mem"}
    fp["digest"] = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return fp


def settings_fingerprint(settings: dict | None) -> dict | None:
    """host.json `settings` (hostrunner.settings) as flat, ordered fields: per block device
    `read_ahead_kb[dev]`, `max_sectors_kb[dev]`, `scheduler[dev]` (devices sorted),
    `thp.enabled`, `thp.defrag`, `vm.<sysctl>`, `numa.online`, `numa.node<N>_gib` (MemTotal
    of the node rounded to GiB: what a reboot's reservations move by a few MiB stays equal, a
    GPU memory node that comes or goes does not), `cpufreq.governors` (the distinct
    governors of the policies, comma-separated; None without cpufreq)."""
    if not isinstance(settings, dict):
        return None
    out: dict = {}
    for dev, q in sorted((settings.get("block") or {}).items()):
        for key in ("read_ahead_kb", "max_sectors_kb", "scheduler"):
            out[f"{key}[{dev}]"] = (q or {}).get(key)
    for group, keys in (("thp", ("enabled", "defrag")),
                        ("vm", ("swappiness", "min_free_kbytes", "watermark_scale_factor",
                                "dirty_ratio", "dirty_background_ratio", "dirty_bytes",
                                "dirty_background_bytes"))):
        for key in keys:
            out[f"{group}.{key}"] = (settings.get(group) or {}).get(key)
    numa = settings.get("numa") or {}
    out["numa.online"] = numa.get("online")
    nodes = numa.get("nodes") or {}
    for node in sorted(nodes, key=int):
        out[f"numa.node{node}_gib"] = None if nodes[node] is None else round(nodes[node] / GiB)
    govs = sorted((settings.get("cpufreq") or {}).get("governors") or {})
    out["cpufreq.governors"] = ",".join(govs) or None
    return out


def mem_dependent(field: str) -> bool:
    """Settings the kernel derives from the memory it booted with (so a mem= boot moves them):
    compared only between boots with the same mem=."""
    return field == "vm.min_free_kbytes" or (field.startswith("numa.node")
                                             and field.endswith("_gib"))


def _show(field: str, value) -> str:
    if value is None:
        return "absent"
    if field == "agent_sha256":
        return str(value)[:12]
    return str(value)


def fingerprint_diff(got: dict, want: dict) -> list[str]:
    """Where fingerprint `got` (a run, a probed host) differs from `want` (the reference), one
    `field got vs want` each, in the fingerprint's order: `kernel 6.8.0 vs 6.1.0`,
    `read_ahead_kb[nvme0n1] 4096 vs 128`, `cmdline +quiet -loglevel=4` (arguments only in
    got, only in want). mem=-dependent settings (`mem_dependent`) are skipped between boots of
    different mem=; absent settings differ from recorded ones."""
    out = []
    if got.get("definition") != want.get("definition"):
        out.append(f"definition {got.get('definition')} vs {want.get('definition') or 1}")
    for f in IDENTITY_FIELDS:
        a, b = got.get(f), want.get(f)
        if a == b:
            continue
        if f == "cmdline":
            mine, theirs = (a or "").split(), (b or "").split()
            moved = ([f"+{x}" for x in mine if x not in theirs]
                     + [f"-{x}" for x in theirs if x not in mine])
            out.append("cmdline " + (" ".join(moved) or f"{a!r} vs {b!r}"))
        else:
            out.append(f"{f} {_show(f, a)} vs {_show(f, b)}")
    gs, ws = got.get("settings"), want.get("settings")
    if gs is None or ws is None:
        if (gs is None) != (ws is None):
            out.append(f"settings {'absent' if gs is None else 'recorded'} vs "
                       f"{'absent' if ws is None else 'recorded'}")
        return out
    same_mem = got.get("boot_mem") == want.get("boot_mem")
    for f in list(gs) + [k for k in ws if k not in gs]:
        if (same_mem or not mem_dependent(f)) and gs.get(f) != ws.get(f):
            out.append(f"{f} {_show(f, gs.get(f))} vs {_show(f, ws.get(f))}")
    return out


def _ratio(a: int | None, b: int | None) -> float | None:
    return None if a is None or not b else a / b


def served_fraction(device: int | None, logical: int) -> float | None:
    """The share of the logical bytes that did not come from the device: (logical - read) /
    logical with read = min(device, logical), so 0 <= numerator <= denominator and the
    quotient lies in [0, 1] by construction (a correctly rounded a / b with 0 <= a <= b cannot
    leave it). Device bytes above the logical bytes (read amplification: readahead, a block
    larger than the read) count as every logical byte read from the device: served 0, the
    excess shown by device_bytes_per_iteration above logical_bytes_per_iteration. None when
    there is nothing to divide (no logical bytes) or no trustworthy device count (absent, or
    negative: a counter went backwards, which numbers_possible rejects)."""
    if device is None or device < 0 or logical <= 0:
        return None
    return (logical - min(device, logical)) / logical


def metrics(b: Bundle) -> dict:
    recs = measured_records(b)
    n = len(recs)
    walls = [r["wall_ns"] / 1e9 for r in recs]
    logical = sum(r["bytes"] for r in recs)
    dev = device_bytes(snap(b, b.loop_entry), snap(b, b.measured_end), devices(b))
    le = snap(b, b.loop_entry)
    mem_total = le.get(("meminfo", "MemTotal"))
    mlocked = le.get(("meminfo", "Mlocked"))
    served = served_fraction(dev, logical)
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
        f = engine_gates.facts(b.spec["engine"], b.text("engine.stdout"), b.text("engine.stderr"),
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
