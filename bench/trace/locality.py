"""Router locality (the paper's Table 1 and Facts 1-6), computed from parsed traces.

Units and definitions, fixed here so every number says what it counts:

* A *selection* is one expert chosen for one position at one layer. A record of width k is one
  position, a spec-accept record of width 2k two positions (its halves, in order). A fallback
  iteration's re-routed layers contribute their positions as issued. Positions of a layer,
  in issue order, form that layer's token sequence.
* Zipf slope alpha: per layer, sort expert selection counts descending and fit
  log(count) = c - alpha * log(rank) by least squares over the ranks whose count is at least
  `min_count` (5: the flat tail of ones and twos is sampling noise, not popularity); the
  trace's alpha is the median over layers (layers with fewer than 5 such ranks are skipped).
* Reuse W_n: the fraction of selections at positions t >= 1 whose expert was also selected at
  the same layer in one of the previous n positions (fewer at the start of the trace).
* Top-8 share: per layer, the selections of its 8 most selected experts over all its selections.
* Union coverage: distinct experts a layer selects; pool coverage: distinct (layer, expert)
  keys over layers x experts, also after each iteration (growth).
* Domain Jaccard: |A & B| / |A | B| where A, B are the traces' top sets: per layer the `top`
  most selected experts, as (layer, expert) keys over all layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np

from bench.trace.parse import Trace

WINDOWS = (1, 8, 64)


def _positions(trace: Trace) -> dict[int, list[tuple[int, ...]]]:
    by_layer: dict[int, list[tuple[int, ...]]] = {}
    for it in trace.iterations:
        for p in it.passes:
            by_layer.setdefault(p.layer, []).extend(p.positions or (p.experts,))
    return by_layer


def _counts(trace: Trace, positions: dict[int, list[tuple[int, ...]]]) -> np.ndarray:
    counts = np.zeros((trace.layer_count(), trace.expert_count()), np.int64)
    for layer, seq in positions.items():
        flat = np.fromiter((e for pos in seq for e in pos), np.int64)
        counts[layer] += np.bincount(flat, minlength=counts.shape[1])
    return counts


def zipf_slope(counts: np.ndarray, min_count: int = 5) -> float | None:
    """Least-squares slope of log count on log rank over ranks with count >= min_count."""
    c = np.sort(counts[counts >= min_count])[::-1].astype(np.float64)
    if c.shape[0] < 5:
        return None
    ranks = np.arange(1, c.shape[0] + 1, dtype=np.float64)
    slope, _ = np.polyfit(np.log(ranks), np.log(c), 1)
    return float(-slope)


def reuse(positions: dict[int, list[tuple[int, ...]]], windows: Sequence[int] = WINDOWS) -> dict:
    gaps: list[np.ndarray] = []
    for seq in positions.values():
        last: dict[int, int] = {}
        layer_gaps = []
        for t, pos in enumerate(seq):
            for e in pos:
                if t > 0:
                    layer_gaps.append(t - last[e] if e in last else -1)
                last[e] = t
        gaps.append(np.asarray(layer_gaps, np.int64))
    allg = np.concatenate(gaps) if gaps else np.zeros(0, np.int64)
    n = allg.shape[0]
    return {f"w{w}": (float(np.count_nonzero((allg > 0) & (allg <= w)) / n) if n else 0.0)
            for w in windows}


def top_share(counts: np.ndarray, top: int = 8) -> np.ndarray:
    totals = counts.sum(axis=1)
    heads = -np.sort(-counts, axis=1)[:, :top].sum(axis=1)
    return np.divide(heads, totals, out=np.zeros(len(totals)), where=totals > 0)


def top_set(counts: np.ndarray, top: int) -> set[tuple[int, int]]:
    """Per layer the `top` most selected experts (ties: lower expert id first)."""
    out: set[tuple[int, int]] = set()
    for layer, row in enumerate(counts):
        order = np.lexsort((np.arange(row.shape[0]), -row))
        out.update((layer, int(e)) for e in order[:top] if row[e] > 0)
    return out


def coverage_growth(trace: Trace) -> list[float]:
    total = trace.layer_count() * trace.expert_count()
    seen: set[tuple[int, int]] = set()
    growth = []
    for it in trace.iterations:
        for p in it.passes:
            seen.update((p.layer, e) for e in p.experts)
        growth.append(len(seen) / total if total else 0.0)
    return growth


def trace_stats(trace: Trace, top: int = 8) -> dict:
    positions = _positions(trace)
    counts = _counts(trace, positions)
    slopes = [zipf_slope(row) for row in counts]
    fitted = [s for s in slopes if s is not None]
    shares = top_share(counts, 8)
    union = (counts > 0).sum(axis=1)
    growth = coverage_growth(trace)
    routed = [layer for layer in range(counts.shape[0]) if counts[layer].sum() > 0]
    first, last = (routed[0], routed[-1]) if routed else (0, 0)
    return {
        "source": trace.source,
        "iterations": len(trace.iterations),
        "accepted_tokens": trace.accepted_tokens,
        "dry_run_iterations_excluded": len(trace.dry_run),
        "layers": counts.shape[0],
        "experts_per_layer": counts.shape[1],
        "selections": int(counts.sum()),
        "zipf_alpha": float(np.median(fitted)) if fitted else None,
        "zipf_alpha_range": [min(fitted), max(fitted)] if fitted else None,
        "zipf_alpha_per_layer": slopes,
        "zipf_fit": ("least squares of log count on log rank, ranks with count >= 5, median "
                     "over layers"),
        "reuse": reuse(positions),
        "top8_share": {
            "mean": float(shares[routed].mean()) if routed else 0.0,
            "first_layer": float(shares[first]), "last_layer": float(shares[last]),
            "min": float(shares[routed].min()) if routed else 0.0,
            "min_layer": int(routed[int(np.argmin(shares[routed]))]) if routed else None,
            "max": float(shares[routed].max()) if routed else 0.0,
            "max_layer": int(routed[int(np.argmax(shares[routed]))]) if routed else None,
            "per_layer": shares.tolist(),
        },
        "union_coverage": {"min": int(union[routed].min()) if routed else 0,
                           "max": int(union[routed].max()) if routed else 0,
                           "of": counts.shape[1], "per_layer": union.tolist()},
        "pool_coverage": growth[-1] if growth else 0.0,
        "pool_coverage_growth": growth,
        "top_set": top,
        "_top_set": top_set(counts, top),
    }


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a or b) else 1.0


def locality(traces: Sequence[Trace], top: int = 8) -> dict:
    """Per-trace stats plus the pairwise Jaccard of their top sets (Table 1)."""
    per = [trace_stats(t, top) for t in traces]
    pairs = [{"a": x["source"], "b": y["source"], "jaccard": jaccard(x["_top_set"], y["_top_set"])}
             for x, y in combinations(per, 2)]
    for s in per:
        del s["_top_set"]
    out: dict = {"traces": per, "jaccard": pairs}
    if pairs:
        vals = [p["jaccard"] for p in pairs]
        out["jaccard_range"] = [min(vals), max(vals)]
    return out
