"""Data of the paper's simulation figures, from parsed traces (no host): what `bench sim --view`
prints and a plot draws.

* `fig1_curves`: Fig. 1, hit rate against budget per policy over several domains' traces: per
  (policy, budget) the mean, min and max across traces (line: mean; band: min-max) and n.
* `fig5_off_domain`: Fig. 5, a static table trained on one domain's whole trace ("prose")
  scored on every trace's fair window, next to table-free LRU on the same window; the training
  trace's own row uses its warm window (the same-domain fair-window figure).
* `regimes`: §3, global pool against equal-split per-layer budgets on one trace: both hit
  rates, their gap in percentage points, and whether the two regimes order the policies alike.

Pure: numpy only, via `bench.sim.simulate`.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.errors import InputError
from bench.sim.simulate import DEFAULT_WINDOW, simulate
from bench.trace.parse import Trace


def fig1_curves(traces: Sequence[Trace], policies: Sequence[str], budgets: Sequence[int],
                regime: str = "per-layer", window: float = DEFAULT_WINDOW) -> list[dict]:
    """One row per (policy, budget): n, mean, min, max hit rate across `traces`, and each
    trace's rate."""
    if not traces:
        raise InputError("fig1 needs at least one trace (one per domain)")
    per: dict[tuple[str, int], list[tuple[str, float]]] = {}
    for t in traces:
        for r in simulate(t, policies, regime, budgets, window):
            per.setdefault((r["policy"], r["budget"]), []).append((t.source, r["hit_rate"]))
    rows = []
    for (policy, budget), vals in per.items():
        rates = [v for _, v in vals]
        rows.append({"policy": policy, "budget": budget, "regime": regime, "window": window,
                     "n": len(rates), "mean": sum(rates) / len(rates), "min": min(rates),
                     "max": max(rates),
                     "per_trace": [{"trace": s, "hit_rate": v} for s, v in vals]})
    return rows


def fig5_off_domain(train: Trace, others: Sequence[Trace], budget: int,
                    window: float = DEFAULT_WINDOW) -> list[dict]:
    """Rows: the training trace (own domain: static from its warm window) then each other trace
    (static trained on the whole training trace), with LRU on the same scored window."""
    if not others:
        raise InputError("fig5 needs the training trace and at least one other domain's trace")
    rows = []
    for t, trained in [(train, None), *[(o, train) for o in others]]:
        got = {r["policy"]: r for r in simulate(t, ("lru", "static"), "per-layer", (budget,),
                                                window, train=trained)}
        rows.append({"trace": t.source, "domain": "own" if trained is None else "off",
                     "budget": budget, "train": got["static"]["train"],
                     "lru": got["lru"]["hit_rate"], "static": got["static"]["hit_rate"],
                     "accesses": got["lru"]["accesses"]})
    return rows


def regimes(trace: Trace, policies: Sequence[str], budgets: Sequence[int],
            window: float = DEFAULT_WINDOW) -> list[dict]:
    """One row per (policy, budget): per-layer and global hit rates and the gap (pp), plus
    `same_order`: whether both regimes rank the policies alike at that budget."""
    per = {(r["policy"], r["budget"]): r["hit_rate"]
           for r in simulate(trace, policies, "per-layer", budgets, window)}
    glo = {(r["policy"], r["budget"]): r["hit_rate"]
           for r in simulate(trace, policies, "global", budgets, window)}

    def ranking(rates: dict, b: int) -> list[str]:
        return sorted(dict.fromkeys(policies), key=lambda p: -rates[(p, b)])

    rows = []
    for p in dict.fromkeys(policies):
        for b in budgets:
            rows.append({"trace": trace.source, "policy": p, "budget": b,
                         "per_layer": per[(p, b)], "global": glo[(p, b)],
                         "gap_pp": 100 * (glo[(p, b)] - per[(p, b)]),
                         "same_order": ranking(per, b) == ranking(glo, b)})
    return rows
