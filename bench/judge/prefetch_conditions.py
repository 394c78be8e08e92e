"""The statistics of `bench results --matrix prefetch` (paper §7, Fig. 6), per result group and
condition over retained runs: n, the change in median iteration time against no prefetch
(cond / none - 1, the paper's "5.0% improvement" is -5.0% here) and the median of per-pair
changes (a pair: one campaign, one repetition, one host) with its n and range, the hint plan's
source and recall on the trace replayed (its provenance record; one value, or the range when
the runs differ), and the agent's delivery counters of the measured pass (median submitted,
overwritten, completed, left per run).

Counters of the measured pass: warm-up and measured pass run in one agent process (docs/design.md,
the run protocol), so the agent's summary `hints` totals both passes; agents that record each
pass's own counters (`pass_hints_*` in the summary) let the view take the last pass, the
measured one (`measured_hints`). Bundles of older agents carry only the total: their counters
are shown as they are, over all passes (warm-up + measured, about twice the measured pass's
hints), and the row's `counted_over` says so ("all passes"; "mixed" where a condition holds
runs of both kinds).

`conditions(groups, details)` takes runs as bench.store.queries.scope rows grouped by
bench.judge.identity and details as bench.store.prefetch_rows.prefetch_details. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from bench.judge import stats
from bench.matrix.cells import parse_cell

COUNTERS = ("submitted", "overwritten", "completed", "left")
COUNTED_MEASURED, COUNTED_ALL = "measured pass", "all passes"


def _med(values: Sequence) -> float | None:
    return stats.median_or_none(v for v in values if isinstance(v, (int, float)))


def _key(cell) -> tuple:
    return (cell.capacity_bytes, cell.mechanism, cell.reclaim, cell.mode)


def _pair_changes(none: list[dict], cond: list[dict]) -> list[float]:
    """cond / none - 1 of each pair of runs of one campaign and repetition."""
    base = {(r.get("campaign_id"), r.get("repetition")): r["iteration_median_s"] for r in none
            if r.get("campaign_id") and r.get("iteration_median_s")}
    pairs = [(r["iteration_median_s"], base[k]) for r in cond
             if (k := (r.get("campaign_id"), r.get("repetition"))) in base
             and r.get("iteration_median_s") is not None]
    return [ratio - 1 for ratio in stats.pair_ratios(pairs)]


def measured_hints(detail: dict | None) -> tuple[dict, str | None]:
    """One run's delivery counters of its measured pass and what they count:
    ({submitted, overwritten, completed, left}, COUNTED_MEASURED) from the summary's per-pass
    lists when each holds one non-negative integer per pass done and every pass was done (the
    last is the measured pass); else the stored whole-run totals with COUNTED_ALL (an older
    agent), or ({}, None) when nothing was recorded."""
    detail = detail or {}
    per = detail.get("per_pass") or {}
    done = per.get("passes_done")
    lists: list[list] = [v for c in COUNTERS
                         if isinstance(v := per.get(f"pass_hints_{c}"), list)]
    if (isinstance(done, int) and _count(done) and done >= 1 and done == per.get("passes")
            and len(lists) == len(COUNTERS)
            and all(len(v) == done and all(_count(x) for x in v) for v in lists)):
        return {c: v[-1] for c, v in zip(COUNTERS, lists)}, COUNTED_MEASURED
    totals = detail.get("hints") or {}
    if not any(_count(totals.get(c)) for c in COUNTERS):
        return {}, None
    return {c: totals.get(c) for c in COUNTERS}, COUNTED_ALL


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _counted_over(scopes: list[str | None]) -> str | None:
    kinds = {s for s in scopes if s is not None}
    return None if not kinds else kinds.pop() if len(kinds) == 1 else "mixed"


def _condition(name: str, rs: list[dict], none: list[dict], details: dict) -> dict:
    t, t0 = _med([r["iteration_median_s"] for r in rs]), \
        _med([r["iteration_median_s"] for r in none])
    provs = [details.get(r["run_id"], {}).get("provenance") or {} for r in rs]
    recalls = sorted({p["recall"] for p in provs if isinstance(p.get("recall"), (int, float))})
    pairs = _pair_changes(none, rs) if name != "none" else []
    counted = [measured_hints(details.get(r["run_id"])) for r in rs]
    hints = [h for h, _ in counted]
    return {"prefetch": name, "n": len(rs), "median_s": t,
            "vs_none": None if name == "none" or t is None or not t0 else t / t0 - 1,
            "pair_median": _med(pairs), "pairs": len(pairs),
            "pair_range": list(span) if (span := stats.span(pairs)) else None,
            "source": sorted({str(p.get("source")) for p in provs if p.get("source")}),
            "recall": recalls[0] if len(recalls) == 1 else
            ([recalls[0], recalls[-1]] if recalls else None),
            **{c: _med([h.get(c) for h in hints]) for c in COUNTERS},
            "counted_over": _counted_over([k for _, k in counted])}


def conditions(groups: list[dict], details: dict) -> list[dict]:
    """Rows (group, capacity, mechanism, reclaim, mode, condition) over retained runs."""
    rows = []
    for g in groups:
        by: dict[tuple, dict[str, list[dict]]] = {}
        for r in g["runs"]:
            if not r.get("retained"):
                continue
            c = parse_cell(r["cell"])
            by.setdefault(_key(c), {}).setdefault(c.prefetch, []).append(r)
        for key, conds in sorted(by.items(), key=lambda kv: -kv[0][0]):
            if set(conds) == {"none"}:
                continue
            none = conds.get("none", [])
            for name in sorted(conds, key=lambda k: (k != "none", k)):
                rows.append({"group": g["id"], "capacity_bytes": key[0], "mechanism": key[1],
                             "reclaim": key[2], "mode": key[3],
                             **_condition(name, conds[name], none, details)})
    return rows
