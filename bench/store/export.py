"""Exports of the stored results for other tools (`bench export --table`), and the names shell
completion offers.

Tables: `runs` (one row per ingested run with its metrics, bench.store.queries.load_runs),
`iterations` (per replay pass and iteration: wall_ns, bytes, reads, arena_hits), `counters`
(counter deltas per interval, source and key: start, end, delta) and `timeline` (samples:
mono_ns, phase, memory_current, cached, mem_available). The child tables key on the integer
`runs.id` in the database; an export carries the text run id instead (column `run_id`, the id
`bench runs` shows), so rows join across exports and with `bench runs --json` on that id.
Rows are streamed (yield_per), never all in memory at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import or_, select

from bench.errors import InputError
from bench.store.db import Store
from bench.store.models import Campaign, Cell, CounterDelta, Host, Iteration, Run, TimelineSample

CHILD: dict[str, tuple[Any, tuple[str, ...]]] = {
    "iterations": (Iteration, ("pass_no", "iter_no", "wall_ns", "bytes", "reads", "arena_hits")),
    "counters": (CounterDelta, ("interval", "source", "key", "start", "end", "delta")),
    "timeline": (TimelineSample, ("seq", "mono_ns", "phase", "memory_current", "cached",
                                  "mem_available")),
}
TABLES = ("runs", *CHILD)


def export_table(store: Store, table: str, *, host: str | None = None,
                 campaign: str | None = None, include_demo: bool = False
                 ) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """(column names, rows) of one export table, runs in storage order (then the child
    table's key order); filtered by host name and campaign id. Every table leaves out the
    runs results leave out (bench.store.queries.load_runs): those of demo campaigns unless
    `include_demo`, of hidden ones always, unless `campaign` names the campaign."""
    if table == "runs":
        from bench.store.queries import CELL_COLS, RUN_COLS, export_rows
        runs = export_rows(store, host=host, campaign=campaign, include_demo=include_demo)
        return (list(runs[0]) if runs else [*RUN_COLS, "cell", "host", *CELL_COLS]), iter(runs)
    if table not in CHILD:
        raise InputError(f"unknown export table {table!r}", hint=", ".join(TABLES))
    model, cols = CHILD[table]
    names = ["run_id", *cols]
    q = (select(Run.run_id, *(getattr(model, c) for c in cols))
         .join(Run, model.run_id == Run.id))
    if host:
        q = q.join(Host, Run.host_id == Host.id).where(Host.name == host)
    if campaign:
        q = q.where(Run.campaign_id == campaign)
    else:
        out = [Campaign.hidden.is_(True)] + ([] if include_demo else [Campaign.demo.is_(True)])
        left_out = select(Campaign.id).where(or_(*out))
        q = q.where(Run.campaign_id.is_(None) | Run.campaign_id.not_in(left_out))
    pk = [c for c in model.__table__.primary_key if c.name != "run_id"]
    q = q.order_by(Run.id, *pk)

    def rows() -> Iterator[dict[str, Any]]:
        with store.session() as s:
            for row in s.execute(q.execution_options(yield_per=2000)):
                yield dict(zip(names, row))
    return names, rows()


def stored_names(store: Store, what: str) -> list[str]:
    """Sorted names for completion: `cells` (that have runs) or `campaigns` (ids)."""
    with store.session() as s:
        if what == "cells":
            q = select(Cell.name).where(Cell.id.in_(select(Run.cell_id))).distinct()
        elif what == "campaigns":
            q = select(Campaign.id)
        else:
            raise ValueError(what)
        return sorted(str(x) for x in s.scalars(q))
