"""The campaign-shaped matrices (`bench results --matrix`), each built from one summary per
(group, cell): pure functions over {(group id, cell name): (Cell, bench.judge.stats summary)},
so a matrix never pools two result groups. bench.store.queries.matrix reads the runs and
groups them; these only arrange the summaries as the paper's tables and figures do."""

from __future__ import annotations

from bench.judge import agreement, stats

def capacity(cells) -> dict:
    """Table 2: the balloon (and ample) sweep per group and capacity, largest first, with a/C
    per group and reclaim."""
    rows = []
    for (gid, name), (c, s) in cells.items():
        if c.mechanism in ("balloon", "none") and c.mode == "pagecache" and c.hints is None:
            rows.append({"group": gid, "cell": name, "capacity_bytes": c.capacity_bytes,
                         "mechanism": c.mechanism, "reclaim": c.reclaim, **s})
    rows.sort(key=lambda r: (_gnum(r["group"]), r["reclaim"], -r["capacity_bytes"]))
    for key in {(r["group"], r["reclaim"]) for r in rows}:
        sub = [r for r in rows if (r["group"], r["reclaim"]) == key]
        ref = stats.a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in sub])
        for r in sub:
            r["a_over_c_dev"] = ref.get(r["capacity_bytes"], (None, None))[1]
    return {"rows": rows}


def _gnum(gid: str) -> int:
    return int(gid[1:])


def reclaim(cells) -> dict:
    """Fig. 3: per group, capacity and mechanism, MGLRU on next to off."""
    pairs: dict[tuple, dict] = {}
    for (gid, name), (c, s) in cells.items():
        if c.mode != "pagecache" or c.hints is not None:
            continue
        row = pairs.setdefault((gid, c.capacity_bytes, c.mechanism),
                               {"group": gid, "capacity_bytes": c.capacity_bytes,
                                "mechanism": c.mechanism})
        row[c.reclaim] = s
        row[f"{c.reclaim}_cell"] = name
    rows = sorted(pairs.values(),
                  key=lambda r: (_gnum(r["group"]), r["capacity_bytes"], r["mechanism"]))
    for r in rows:
        m, k = r.get("mglru"), r.get("classic")
        a = m and m["device_gb_per_iteration"]
        b = k and k["device_gb_per_iteration"]
        r["mglru_over_classic"] = a / b if a and b else None
    return {"rows": rows, "agreement": agreement.agreement(rows),
            "interpolation": agreement.interpolation(rows)}


def equal_memory(cells) -> dict:
    """Fig. 4: per group, cgroup wall per capacity: pagecache / pinned / hybrid / random."""
    rows: dict[tuple, dict] = {}
    for (gid, _name), (c, s) in cells.items():
        if c.mechanism == "cgroup" and c.hints is None:
            rows.setdefault((gid, c.capacity_bytes), {"group": gid,
                                                      "capacity_bytes": c.capacity_bytes}
                            )[c.mode] = s
    return {"rows": sorted(rows.values(),
                           key=lambda r: (_gnum(r["group"]), -r["capacity_bytes"])),
            "modes": ["pagecache", "pinned", "hybrid", "random", "nocache"]}


PREFETCH_KEYS = ("group", "capacity_bytes", "mechanism", "reclaim")


def prefetch(cells) -> dict:
    """Fig. 6: per group, capacity and mechanism: none and each hint plan x delivery."""
    rows: dict[tuple, dict] = {}
    for (gid, _name), (c, s) in cells.items():
        if c.mode != "pagecache":
            continue
        rows.setdefault((gid, c.capacity_bytes, c.mechanism, c.reclaim),
                        {"group": gid, "capacity_bytes": c.capacity_bytes,
                         "mechanism": c.mechanism, "reclaim": c.reclaim})[c.prefetch] = s
    out = [r for r in rows.values() if len(r) > len(PREFETCH_KEYS) + 1]
    return {"rows": sorted(out, key=lambda r: (_gnum(r["group"]), -r["capacity_bytes"])),
            "prefetch": sorted({k for r in out for k in r if k not in PREFETCH_KEYS},
                               key=lambda k: (k != "none", k))}


def admission(cells) -> dict:
    """§9: per group and capacity, the same fixed set read admitted (pagecache) and bypassed
    (nocache), in GB/s, with admitted / bypassed."""
    rows: dict[tuple, dict] = {}
    for (gid, _name), (c, s) in cells.items():
        if c.mode in ("pagecache", "nocache") and c.hints is None:
            rows.setdefault((gid, c.capacity_bytes, c.mechanism, c.reclaim),
                            {"group": gid, "capacity_bytes": c.capacity_bytes,
                             "mechanism": c.mechanism, "reclaim": c.reclaim})[c.mode] = s
    out = [r for r in rows.values() if "nocache" in r]
    for r in out:
        a, b = (r.get("pagecache") or {}).get("gb_per_s"), r["nocache"].get("gb_per_s")
        r["admitted_over_bypassed"] = a / b if a and b else None
    return {"rows": sorted(out, key=lambda r: (_gnum(r["group"]), -r["capacity_bytes"]))}


SHAPES = {"capacity": capacity, "reclaim": reclaim, "equal-memory": equal_memory,
          "prefetch": prefetch, "admission": admission}
