"""`bench results --matrix prefetch` (paper §7, Fig. 6): next to the median iteration time of
each condition (bench.store.queries.matrix), per result group and condition over retained
runs: n, the change in median iteration time against no prefetch (cond / none - 1, the paper's
"5.0% improvement" is -5.0% here) and the median of per-pair changes (a pair: one campaign,
one repetition, one host) with its n and range, the hint plan's source and recall on the
trace replayed (its provenance record; one value, or the range when the runs differ), and the
agent's delivery counters (median submitted, overwritten, completed, left per run).

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


def _condition(name: str, rs: list[dict], none: list[dict], details: dict) -> dict:
    t, t0 = _med([r["iteration_median_s"] for r in rs]), \
        _med([r["iteration_median_s"] for r in none])
    provs = [details.get(r["run_id"], {}).get("provenance") or {} for r in rs]
    recalls = sorted({p["recall"] for p in provs if isinstance(p.get("recall"), (int, float))})
    pairs = _pairs(none, rs) if name != "none" else []
    hints = [details.get(r["run_id"], {}).get("hints") or {} for r in rs]
    return {"prefetch": name, "n": len(rs), "median_s": t,
            "vs_none": None if name == "none" or t is None or not t0 else t / t0 - 1,
            "pair_median": _med(pairs), "pairs": len(pairs),
            "pair_range": [min(pairs), max(pairs)] if pairs else None,
            "source": sorted({str(p.get("source")) for p in provs if p.get("source")}),
            "recall": recalls[0] if len(recalls) == 1 else
            ([recalls[0], recalls[-1]] if recalls else None),
            **{c: _med([h.get(c) for h in hints]) for c in COUNTERS}}


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


def delivery_table(m: dict) -> LiteralTable:
    t = LiteralTable(title="prefetch: speed-up, recall and delivery (retained runs)")
    for col in ("group", "C", "condition", "n", "median s", "vs none", "per pair (n, range)",
                "hints", "recall", "submitted", "overwritten", "completed", "left"):
        t.add_column(col, justify="left" if col in ("group", "condition", "hints")
                     else "right")
    for r in m.get("conditions", []):
        rng = r["pair_range"]
        pair = "-" if not r["pairs"] else (
            f"{_pct(r['pair_median'])} (n={r['pairs']}, {_pct(rng[0])}..{_pct(rng[1])})")
        t.add_row(r["group"], capacity_text(r["capacity_bytes"]), r["prefetch"], str(r["n"]),
                  num(r["median_s"]), _pct(r["vs_none"]), pair,
                  ", ".join(r["source"]) or "-", _recall(r),
                  *(num(r[c], ".0f") for c in COUNTERS))
    return t
