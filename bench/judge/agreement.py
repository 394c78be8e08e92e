"""Mechanism agreement (paper §4) and the mem= point on the balloon curve (§5), from the reclaim
matrix's rows (bench.store.queries: per group, capacity and mechanism, each reclaim's summary).
Pure.

- agreement: at one capacity, in one group (host, workload, fingerprint) and one reclaim
  setting, every mechanism's median iteration time and device GB per iteration next to the
  cgroup wall's, as relative differences (balloon / cgroup - 1). The paper's balloon and wall
  agree within 5.1% at 448 GB; its deepest matched point (64 GB, MGLRU off) within 14.9%.
- interpolation: a memboot point's iteration time next to the balloon sweep of its group and
  reclaim, interpolated linearly in capacity at the memboot's effective capacity (the paper: a
  mem= boot at 339 GB within 0.5% of the balloon curve). A memboot outside the sweep's range is
  reported as such, never extrapolated."""

from __future__ import annotations

from collections.abc import Sequence

RECLAIMS = ("mglru", "classic")
REFERENCE = "cgroup"


def _rel(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b - 1


def agreement(rows: Sequence[dict]) -> list[dict]:
    """One entry per (group, capacity, reclaim, mechanism other than cgroup) where the cgroup
    wall was measured too."""
    by_point: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        for reclaim in RECLAIMS:
            s = r.get(reclaim)
            if s and s.get("n_retained"):
                by_point.setdefault((r["group"], r["capacity_bytes"], reclaim),
                                    {})[r["mechanism"]] = s
    out = []
    for (gid, cap, reclaim), mechs in sorted(by_point.items()):
        ref = mechs.get(REFERENCE)
        if ref is None:
            continue
        for mech, s in sorted(mechs.items()):
            if mech == REFERENCE:
                continue
            out.append({"group": gid, "capacity_bytes": cap, "reclaim": reclaim,
                        "mechanism": mech, "n": s["n_retained"], "n_cgroup": ref["n_retained"],
                        "median_s": s["median_s"], "cgroup_median_s": ref["median_s"],
                        "time_vs_cgroup": _rel(s["median_s"], ref["median_s"]),
                        "device_gb_per_iteration": s["device_gb_per_iteration"],
                        "cgroup_device_gb_per_iteration": ref["device_gb_per_iteration"],
                        "device_vs_cgroup": _rel(s["device_gb_per_iteration"],
                                                 ref["device_gb_per_iteration"])})
    return out


def _balloon_curve(rows: Sequence[dict], gid: str, reclaim: str) -> list[tuple[int, float]]:
    return sorted((r["capacity_bytes"], r[reclaim]["median_s"]) for r in rows
                  if r["group"] == gid and r["mechanism"] == "balloon" and r.get(reclaim)
                  and r[reclaim].get("median_s") is not None)


def interpolation(rows: Sequence[dict]) -> list[dict]:
    """One entry per measured memboot point: its time and the balloon curve's at its C."""
    out = []
    for r in rows:
        if r["mechanism"] != "memboot":
            continue
        for reclaim in RECLAIMS:
            s = r.get(reclaim)
            if not s or s.get("median_s") is None:
                continue
            curve = _balloon_curve(rows, r["group"], reclaim)
            c = r["capacity_bytes"]
            entry = {"group": r["group"], "capacity_bytes": c, "reclaim": reclaim,
                     "n": s["n_retained"], "memboot_s": s["median_s"], "balloon_s": None,
                     "between": None, "memboot_vs_balloon": None, "status": "no balloon sweep"}
            for (c0, t0), (c1, t1) in zip(curve, curve[1:]):
                if c0 <= c <= c1:
                    t = t0 + (t1 - t0) * (c - c0) / (c1 - c0) if c1 != c0 else t0
                    entry.update(balloon_s=t, between=[c0, c1], status="interpolated",
                                 memboot_vs_balloon=_rel(s["median_s"], t))
                    break
            else:
                if curve:
                    entry.update(status="outside the balloon sweep",
                                 between=[curve[0][0], curve[-1][0]])
            out.append(entry)
    return out
