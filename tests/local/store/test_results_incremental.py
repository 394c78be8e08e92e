"""Migration 0008's per-cell invalidation (bench.store.result_cache, result_cache_parts) on
real databases built by the migrations, SQLite and PostgreSQL: after each of several writes
(a bundle ingested, a verdict that turns a retained run into a rejected one, a run moved to
another cell, a run deleted, a campaign hidden) every cached view is exactly a full
computation with the cache off, a matrix is brought up to date by reading the changed cells
alone, and a cell view that no write touched is served without being computed."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bench.store import queries, result_cache, result_cache_parts
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle
from tests.local.store.test_workload_identity_0006 import _old_database
from tests.support.bundlegen import ensure_campaigns

FILTERS = ({}, {"host": "gh200-b"}, {"campaign": "c1"}, {"include_demo": True})
CELLS = ("64G-balloon-mglru", "128G-cgroup-mglru", "64G-balloon-mglru-oracle-advice")


def _views() -> list[tuple[str, object, tuple, dict]]:
    out = []
    for kw in FILTERS:
        for m in queries.MATRICES:
            out.append((f"matrix {m} {kw}", queries.matrix, (m,), kw))
        for c in CELLS:
            for extra in ({}, {"verbose": True}):
                out.append((f"cell {c} {extra} {kw}", queries.cell_results, (c,), kw | extra))
    return out


def _answer(view, args, kw) -> str:
    try:
        return repr(view(*args, **kw))
    except Exception as exc:  # noqa: BLE001 - an InputError is an answer too
        return f"{type(exc).__name__}: {exc}"


def _full(store, view, args, kw, monkeypatch) -> str:
    """The view computed from every run, nothing stored read nor written."""
    with monkeypatch.context() as m:
        m.setattr(result_cache, "ENABLED", False)
        return _answer(view.__wrapped__, (store, *args), kw)


def _cell_id(store, name: str) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.text("SELECT id FROM cells WHERE name = :n"),
                            {"n": name}).scalar_one()


def _a_run_of(store, cell: str, retained: bool) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT runs.id FROM runs JOIN cells ON cells.id = runs.cell_id "
            "WHERE cells.name = :c AND runs.retained = :r AND runs.bundle_digest IS NOT NULL "
            "AND (runs.campaign_id IS NULL OR runs.campaign_id IN ('c1', 'c2')) "
            "ORDER BY runs.id LIMIT 1"), {"c": cell, "r": retained}).scalar_one()


def _writes(store, bundles):
    """(name, write, the cells it touches) in the order they run."""
    def ingest(run_id):
        def write():
            ensure_campaigns(store, "c1")
            r = ingest_bundle(store, bundles(run_id, cell="128G-cgroup-mglru"))
            assert r["status"] == "ingested"
        return write

    def reject():             # a verdict changes and the run it judges is no longer retained
        rid = _a_run_of(store, "64G-balloon-mglru", True)
        with store.engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO verdicts (run_id, rule, version, passed, reason, "
                                 "current, evaluated_at) VALUES (:r, 'scan_steal', 99, :f, 'test', "
                                 ":t, CURRENT_TIMESTAMP)"),
                         {"r": rid, "f": False, "t": True})
            conn.execute(sa.text("UPDATE runs SET retained = :f WHERE id = :r"),
                         {"r": rid, "f": False})

    def move():
        rid = _a_run_of(store, "128G-balloon-mglru", True)
        to = _cell_id(store, "64G-balloon-classic")
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET cell_id = :c WHERE id = :r"),
                         {"c": to, "r": rid})

    def delete():
        rid = _a_run_of(store, "128G-cgroup-mglru", False)
        with store.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM verdicts WHERE run_id = :r"), {"r": rid})
            conn.execute(sa.text("DELETE FROM runs WHERE id = :r"), {"r": rid})

    def hide():
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE campaigns SET hidden = :t WHERE id = 'c2'"), {"t": True})

    # the first bundle brings a new workload (every cell is read again), the second one not
    return [("ingest new workload", ingest("c1-gh200-b-901"), "any"),
            ("ingest", ingest("c1-gh200-b-902"), {"128G-cgroup-mglru"}),
            ("reject", reject, {"64G-balloon-mglru"}),
            ("move", move, {"128G-balloon-mglru", "64G-balloon-classic"}),
            ("delete", delete, {"128G-cgroup-mglru"}),
            ("hide", hide, None)]


@pytest.fixture
def filled(db_url):
    engine = _old_database(db_url)
    if engine.dialect.name == "postgresql":   # rows were inserted with their ids
        with engine.begin() as conn:
            for t in ("hosts", "cells", "fingerprints", "runs"):
                conn.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{t}', 'id'), "
                                     f"(SELECT max(id) FROM {t}))"))
    engine.dispose()
    store = open_store(db_url)
    yield store
    store.close()


def test_incremental_path_is_a_full_recompute_after_writes(filled, bundles, monkeypatch):
    store = filled
    monkeypatch.setattr(result_cache, "MAX_ENTRIES", 1000)
    views = _views()
    reads: list = []
    real = result_cache_parts.compute_parts

    def counted(st, where, cell_ids=None):
        if result_cache.ENABLED:                  # not _full's own computation
            reads.append(cell_ids)
        return real(st, where, cell_ids)
    monkeypatch.setattr(result_cache_parts, "compute_parts", counted)
    computed: list = []                           # the cells whose view reads its runs
    real_scope = queries.scope

    def scope_counted(st, **kw):
        if result_cache.ENABLED and kw.get("cell"):
            computed.append(kw["cell"])
        return real_scope(st, **kw)
    monkeypatch.setattr(queries, "scope", scope_counted)
    for label, v, a, kw in views:                 # stored at the first generation
        assert _answer(v, (store, *a), kw) == _full(store, v, a, kw, monkeypatch), label
    changed_answers = 0
    for name, write, touched in _writes(store, bundles):
        before = {label: _answer(v, (store, *a), kw) for label, v, a, kw in views}
        gen = result_cache.generation(store)
        reads.clear()
        computed.clear()
        write()
        assert result_cache.generation(store) > gen, name
        after = {label: _answer(v, (store, *a), kw) for label, v, a, kw in views}
        for label, v, a, kw in views:
            assert after[label] == _full(store, v, a, kw, monkeypatch), (name, label)
        changed_answers += sum(after[k] != before[k] for k in after)
        if touched == "any":
            continue
        if touched is None:                       # every cell: read whole again
            assert None in reads, name
            continue
        ids = {_cell_id(store, c) for c in touched}
        # a matrix reads the cells the write touched, not every run
        assert reads and all(r is not None and set(r) == ids for r in reads), (name, reads)
        balloon = {c for c in CELLS if "balloon" in c}
        cross = any("balloon" in c or "cgroup" in c for c in touched)
        for c in CELLS:
            hit = c in touched or (c in balloon and cross)
            assert (c in computed) == hit, (name, c, computed)
    assert changed_answers > 10                   # the writes changed what views show


def test_a_write_to_no_cell_keeps_every_entry(filled, monkeypatch):
    """A campaign's note is no part of a result: every stored view is served as stored."""
    store = filled
    for _label, v, a, kw in _views():
        _answer(v, (store, *a), kw)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE campaigns SET note = 'x' WHERE id = 'c1'"))

    def no_reads(*a, **k):
        raise AssertionError("read runs for a write that touched no cell")
    monkeypatch.setattr(queries, "load_runs", no_reads)
    for label, v, a, kw in _views():
        assert not _answer(v, (store, *a), kw).startswith("AssertionError"), label


def test_the_triggers_mark_the_cells_written(filled):
    store = filled
    gen = result_cache.generation(store)
    cid = _cell_id(store, "64G-balloon-classic")
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET repetition = repetition WHERE cell_id = :c"),
                     {"c": cid})
        conn.execute(sa.text("UPDATE campaigns SET state = state"))   # no cell
    with store.engine.connect() as conn:
        assert result_cache.changed_cells(conn, gen) == {cid}
    gen = result_cache.generation(store)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE hosts SET name = name"))
    with store.engine.connect() as conn:
        assert result_cache.changed_cells(conn, gen) == {0}


def _cross_keys(rows) -> set:
    return {(r["cell"], r["host"], r["workload"]["digest"], r["fingerprint"]["digest"],
             r["retained"], r["capacity_bytes"], r["mechanism"]) for r in rows}


def test_cross_check_reads_what_every_run_gives(filled):
    """A balloon cell's cross-check reads one row per distinct (cell, host, identity,
    retained) (queries.cross_check_scope): the same tuples as every balloon, cgroup and
    memboot run in scope gives, which is all that cross_check_warnings and key_of read;
    and before and after a run loses its workload identity (read from its spec then)."""
    store = filled
    for step in range(2):
        for kw in FILTERS:
            every = queries.scope(store, **kw, mechanisms=queries.CROSS_CHECK_MECHANISMS,
                                  columns=queries.SUMMARY_COLS)
            distinct = queries.cross_check_scope(store, **kw)
            assert every and _cross_keys(distinct) == _cross_keys(every), (step, kw)
            assert len(distinct) < len(every) or step, kw
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET workload_id = NULL WHERE id IN (SELECT min(id) "
                                 "FROM runs GROUP BY cell_id)"))
