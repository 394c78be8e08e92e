"""`bench results --matrix prefetch` (paper §7, Fig. 6): next to the median iteration time of
each condition (bench.store.queries.matrix), per result group and condition over retained
runs: n, the change in median iteration time against no prefetch (cond / none - 1, the paper's
"5.0% improvement" is -5.0% here) and the median of per-pair changes (a pair: one campaign,
one repetition, one host) with its n and range, the hint plan's source and recall on the
trace replayed (its provenance record; one value, or the range when the runs differ), and the
agent's delivery counters of the measured pass (median submitted, overwritten, completed, left
per run).

Counters of the measured pass: warm-up and measured pass run in one agent process (docs/design.md,
the run protocol), so the agent's summary `hints` totals both passes; agents that record each
pass's own counters (`pass_hints_*` in the summary) let the view take the last pass, the
measured one (`measured_hints`). Bundles of older agents carry only the total: their counters
are shown as they are, over all passes (warm-up + measured, about twice the measured pass's
hints), and the row's `counted_over` says so ("all passes"; "mixed" where a condition holds
runs of both kinds).

`conditions(runs, details)` is pure (runs as bench.store.queries.scope rows, details as
bench.store.prefetch_rows.prefetch_details); `prefetch_results` reads the store,
`delivery_table` renders."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from bench.judge import identity
from bench.matrix.cells import parse_cell
from bench.results.views import LiteralTable, capacity_text, num
from bench.store.db import Store
from bench.store.prefetch_rows import prefetch_details
from bench.store.queries import matrix, scope

COUNTERS = ("submitted", "overwritten", "completed", "left")


def _med(values: Sequence) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    return median(vals) if vals else None


def _key(cell) -> tuple:
    return (cell.capacity_bytes, cell.mechanism, cell.reclaim, cell.mode)


def _pairs(none: list[dict], cond: list[dict]) -> list[float]:
    base = {(r.get("campaign_id"), r.get("repetition")): r["iteration_median_s"] for r in none
            if r.get("campaign_id") and r.get("iteration_median_s")}
    return [r["iteration_median_s"] / base[k] - 1 for r in cond
            if (k := (r.get("campaign_id"), r.get("repetition"))) in base
            and r.get("iteration_median_s") is not None]


COUNTED_MEASURED, COUNTED_ALL = "measured pass", "all passes"


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
    pairs = _pairs(none, rs) if name != "none" else []
    counted = [measured_hints(details.get(r["run_id"])) for r in rs]
    hints = [h for h, _ in counted]
    return {"prefetch": name, "n": len(rs), "median_s": t,
            "vs_none": None if name == "none" or t is None or not t0 else t / t0 - 1,
            "pair_median": _med(pairs), "pairs": len(pairs),
            "pair_range": [min(pairs), max(pairs)] if pairs else None,
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


def prefetch_results(store: Store, *, host=None, campaign=None, workload=None,
                     include_demo: bool = False) -> dict:
    """queries.matrix's prefetch table plus `conditions` (rows as `conditions` makes them)."""
    m = matrix(store, "prefetch", host=host, campaign=campaign, workload=workload,
               include_demo=include_demo)
    runs = [r for r in scope(store, host=host, campaign=campaign, workload=workload,
                             include_demo=include_demo) if not parse_cell(r["cell"]).is_engine]
    groups = identity.label_groups(identity.group_runs(runs, with_cell=False))
    details = prefetch_details(store, [r["run_id"] for r in runs if r.get("retained")])
    return m | {"conditions": conditions(groups, details)}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def _recall(r: dict) -> str:
    v = r["recall"]
    if v is None:
        return "-"
    return f"{v:.3f}" if not isinstance(v, list) else f"{v[0]:.3f}-{v[1]:.3f}"


def _over(r: dict) -> str:
    v = r.get("counted_over")
    return "-" if v is None else "warm-up + measured" if v == COUNTED_ALL else v


def delivery_table(m: dict) -> LiteralTable:
    t = LiteralTable(title="prefetch: speed-up, recall and delivery of the measured pass "
                           "(retained runs)")
    for col in ("group", "C", "condition", "n", "median s", "vs none", "per pair (n, range)",
                "hints", "recall", "submitted", "overwritten", "completed", "left",
                "counted over"):
        t.add_column(col, justify="left" if col in ("group", "condition", "hints",
                                                    "counted over") else "right")
    for r in m.get("conditions", []):
        rng = r["pair_range"]
        pair = "-" if not r["pairs"] else (
            f"{_pct(r['pair_median'])} (n={r['pairs']}, {_pct(rng[0])}..{_pct(rng[1])})")
        t.add_row(r["group"], capacity_text(r["capacity_bytes"]), r["prefetch"], str(r["n"]),
                  num(r["median_s"]), _pct(r["vs_none"]), pair,
                  ", ".join(r["source"]) or "-", _recall(r),
                  *(num(r[c], ".0f") for c in COUNTERS), _over(r))
    return t
