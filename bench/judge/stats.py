"""Statistics over runs (docs/design.md "Statistics"). Pure; inputs are plain numbers and dicts.

A cell's iteration time is the true median of its retained runs' per-run medians (even counts
average the middle two: statistics.median, the one median of bench, re-exported here); min and
max are over the same per-run values; spread = (max - min) / median. Device GB per iteration,
served and locked fractions are medians over retained runs. Amplification = median device
bytes per iteration / nominal miss bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import median as median     # re-exported: bench's one median

GB = 1e9
SCAN_STEAL_LIMIT = 2.0
AMPLIFICATION_LIMIT = 1.05   # above nominal, with 5% for counting noise
# The paper's repeated runs stay within 4% of their median (§4, Table 2); a cell whose runs
# spread wider than this, or that has fewer retained runs than this n, is flagged to the reader.
SPREAD_LIMIT = 0.10
N_LIMIT = 3


def median_or_none(xs: Iterable[float | None]) -> float | None:
    """The median of xs without its Nones; None when nothing is left."""
    v = [x for x in xs if x is not None]
    return median(v) if v else None


def span(xs: Sequence[float]) -> tuple[float, float] | None:
    """(min, max) of xs; None for no values."""
    return (min(xs), max(xs)) if xs else None


def largest_magnitude(xs: Iterable[float]) -> float | None:
    """max |x| over xs; None for no values."""
    return max((abs(x) for x in xs), default=None)


def spread(xs: Sequence[float]) -> float | None:
    """(max - min) / median; None for no values or a zero median."""
    if not xs:
        return None
    m = median(xs)
    return None if m == 0 else (max(xs) - min(xs)) / m


def ratio_of_medians(a: Sequence[float], b: Sequence[float]) -> float | None:
    if not a or not b:
        return None
    mb = median(b)
    return None if mb == 0 else median(a) / mb


def pair_ratios(pairs: Sequence[tuple[float, float]]) -> list[float]:
    """a/b of each paired run (pairs with b == 0 are skipped)."""
    return [a / b for a, b in pairs if b]


def median_pair_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Median of a/b over paired runs (pairs with b == 0 are skipped)."""
    ratios = pair_ratios(pairs)
    return median(ratios) if ratios else None


def comparison(ra: Sequence[dict], rb: Sequence[dict], pairs: Sequence[tuple[dict, dict]],
               metrics: Sequence[tuple[str, str]], diff: Sequence[str]) -> dict:
    """Two groups of runs side by side (`bench compare`): per metric (label, run key) the
    ratio of the groups' medians and, over paired runs, the median, min and max of the per-pair
    ratios and the number of pairs; n of each group; and, when the groups differ only in their
    mechanism, the mechanism agreement |time ratio - 1|."""
    out: dict = {"n_a": len(ra), "n_b": len(rb)}
    for label, key in metrics:
        xa = [r[key] for r in ra if r[key] is not None]
        xb = [r[key] for r in rb if r[key] is not None]
        pr = pair_ratios([(x[key], y[key]) for x, y in pairs
                          if x[key] is not None and y[key] is not None])
        lo_hi = span(pr)
        out[f"{label}_ratio_of_medians"] = ratio_of_medians(xa, xb)
        out[f"{label}_median_pair_ratio"] = median(pr) if pr else None
        out[f"{label}_pair_ratio_min"] = lo_hi[0] if lo_hi else None
        out[f"{label}_pair_ratio_max"] = lo_hi[1] if lo_hi else None
        out[f"{label}_pairs"] = len(pr)
    r = out.get("time_ratio_of_medians")
    out["mechanism_agreement"] = abs(r - 1) if list(diff) == ["mechanism"] and r else None
    return out


def summarize(runs: Sequence[dict], nominal_miss_bytes: float | None = None) -> dict:
    """One cell's statistics; runs carry `retained` and the per-run metrics of runfacts."""
    kept = [r for r in runs if r.get("retained")]
    times = [r["iteration_median_s"] for r in kept if r.get("iteration_median_s") is not None]
    dev = median_or_none(r.get("device_bytes_per_iteration") for r in kept)
    nominal = nominal_miss_bytes
    if nominal is None:
        nominal = median_or_none(r.get("nominal_miss_bytes_per_iteration") for r in kept)
    return {
        "n_retained": len(kept),
        "n_rejected": sum(1 for r in runs if r.get("retained") is False),
        "n_pending": sum(1 for r in runs if r.get("retained") is None),
        "median_s": median(times) if times else None,
        "min_s": min(times) if times else None,
        "max_s": max(times) if times else None,
        "spread": spread(times),
        "iteration_s_runs": times,
        "device_gb_per_iteration": None if dev is None else dev / GB,
        "device_gb_runs": [r["device_bytes_per_iteration"] / GB for r in kept
                           if r.get("device_bytes_per_iteration") is not None],
        "nominal_miss_gb_per_iteration": None if nominal is None else nominal / GB,
        "amplification": None if dev is None or not nominal else dev / nominal,
        "scan_steal": median_or_none(r.get("scan_steal") for r in kept),
        "cgroup_scan_steal": median_or_none(r.get("cgroup_scan_steal") for r in kept),
        "served_fraction": median_or_none(r.get("served_fraction") for r in kept),
        "locked_fraction": median_or_none(r.get("locked_fraction") for r in kept),
        **_throughput(kept),
        "mglru": _mglru(kept),
    }


def _throughput(runs: Sequence[dict]) -> dict:
    """Logical GB read per second of each run (its bytes per iteration over its median
    iteration time): the admission experiment's figure; median, min and max over runs."""
    rates = [r["logical_bytes_per_iteration"] / r["iteration_median_s"] / GB for r in runs
             if r.get("logical_bytes_per_iteration") and r.get("iteration_median_s")]
    return {"gb_per_s": median(rates) if rates else None,
            "gb_per_s_min": min(rates) if rates else None,
            "gb_per_s_max": max(rates) if rates else None}


def _mglru(runs: Sequence[dict]) -> str | None:
    states = {(r.get("mglru_loop_entry"), r.get("mglru_end")) for r in runs}
    if not states:
        return None
    if len(states) > 1:
        return "mixed"
    entry, end = states.pop()
    if entry is None and end is None:
        return "absent"
    return "on" if entry and end else "off" if not entry and not end else "changed"


def a_over_c(points: Sequence[tuple[int, float | None]]
             ) -> dict[int, tuple[float, float | None]]:
    """Inverse-capacity reference anchored at the largest capacity: {C: (reference GB, dev)}
    with dev = measured / reference - 1 (None when the reference is 0); points without a
    measurement (None) are left out."""
    pts = [(c, g) for c, g in points if g is not None]
    if not pts:
        return {}
    anchor_c, anchor_g = max(pts)
    out: dict[int, tuple[float, float | None]] = {}
    for c, g in pts:
        ref = anchor_g * anchor_c / c
        out[c] = (ref, g / ref - 1 if ref else None)
    return out


def interpolate_capacity(curve: Sequence[tuple[int, float]], target_s: float) -> dict:
    """The smallest capacity whose iteration time reaches target_s, linear between measured
    points of (capacity bytes, median s). `status`: interpolated, measured, below_range (every
    measured point is already fast enough: the smallest measured capacity suffices) or
    unreachable (even the largest is slower)."""
    pts = sorted((c, t) for c, t in curve if t is not None)
    if not pts:
        return {"status": "no_data", "capacity_bytes": None}
    if pts[0][1] <= target_s:
        return {"status": "below_range", "capacity_bytes": pts[0][0]}
    for (c0, t0), (c1, t1) in zip(pts, pts[1:]):
        if t1 <= target_s < t0 or t1 == target_s:
            if t0 == t1:
                return {"status": "measured", "capacity_bytes": c1}
            frac = (t0 - target_s) / (t0 - t1)
            return {"status": "interpolated" if t1 != target_s else "measured",
                    "capacity_bytes": round(c0 + frac * (c1 - c0)), "between": [c0, c1]}
    return {"status": "unreachable", "capacity_bytes": None, "largest": pts[-1][0]}


def reliability_flags(n: int, spread_value: float | None) -> list[str]:
    """Why a cell's statistic should be read with care: too few retained runs, or runs that
    spread wider than SPREAD_LIMIT. Empty when neither holds. One short phrase each."""
    out = []
    if n < N_LIMIT:
        out.append(f"n={n} < {N_LIMIT}" + (": no spread" if n == 1 else ""))
    if spread_value is not None and spread_value > SPREAD_LIMIT:
        out.append(f"spread {100 * spread_value:.0f}% > {100 * SPREAD_LIMIT:.0f}%")
    return out


def indicators(summary: dict) -> list[str]:
    """The paper's operator indicators for one cell, as warning lines."""
    out = []
    amp = summary.get("amplification")
    if amp is not None and amp > AMPLIFICATION_LIMIT:
        out.append(f"device bytes above nominal misses: amplification {amp:.2f}x")
    for key, what in (("scan_steal", "kswapd scan/steal"), ("cgroup_scan_steal",
                                                            "cgroup scan/steal")):
        v = summary.get(key)
        if v is not None and v > SCAN_STEAL_LIMIT:
            out.append(f"{what} {v:.2f} above {SCAN_STEAL_LIMIT:g}")
    return out
