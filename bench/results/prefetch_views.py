"""`bench results --matrix prefetch` (paper §7, Fig. 6): next to the median iteration time of
each condition (bench.store.queries.matrix), the rows of bench.judge.prefetch_conditions (speed-up
against no prefetch, per-pair changes, recall, delivery counters of the measured pass).
`prefetch_results` reads the store, `delivery_table` renders."""

from __future__ import annotations

from bench.judge import identity
from bench.judge.prefetch_conditions import COUNTED_ALL, COUNTERS, conditions
from bench.matrix.cells import parse_cell
from bench.results.views import LiteralTable, capacity_text, num
from bench.store.db import Store
from bench.store.prefetch_rows import prefetch_details
from bench.store.queries import matrix, scope


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
