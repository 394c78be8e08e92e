"""Migration 0007's results cache (bench.store.result_cache) on real databases built by the
migrations, SQLite and PostgreSQL: a served entry is exactly the view's computation (every
matrix and cell view, every filter, on one database), every write to a table results read
moves the generation (by the database's triggers, whatever code writes: ingest, recheck,
campaign flags, plain SQL), a moved generation is recomputed, and a reader that cannot store
still answers."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from alembic import command

from bench.store import campaigns, queries, result_cache
from bench.store.db import _alembic_config, open_store, upgrade
from bench.store.ingest import ingest_bundle, recheck
from tests.local.store.test_workload_identity_0006 import _old_database

FILTERS = ({}, {"host": "gh200-b"}, {"campaign": "c1"}, {"campaign": "hid"},
           {"include_demo": True})
CELLS = ("64G-balloon-mglru", "128G-cgroup-mglru", "64G-balloon-mglru-oracle-advice",
         "e2e-prose-admit")


def _calls(store) -> list[tuple[str, object, tuple, dict]]:
    """(label, view, args, kwargs) of every cached view over filters that change what is
    read, a workload prefix among them."""
    out = []
    for kw in FILTERS:
        for m in queries.MATRICES + (queries.ENGINE_MATRIX,):
            out.append((f"matrix {m} {kw}", queries.matrix, (m,), kw))
        for c in CELLS:
            for extra in ({}, {"pool": True}, {"verbose": True}):
                out.append((f"cell {c} {extra} {kw}", queries.cell_results, (c,), kw | extra))
    w = queries.cell_results.__wrapped__(store, "64G-balloon-mglru")[0]["workload"]["digest"]
    out.append(("matrix workload", queries.matrix, ("reclaim",), {"workload": w[:6]}))
    out.append(("cell workload", queries.cell_results, ("64G-cgroup-mglru",),
                {"workload": w[:6], "host": "gh200-a"}))
    return out


def _fresh(store, view, args, kw):
    """The view's own computation (no cache: nor a matrix's stored parts), or its error's
    message."""
    was, result_cache.ENABLED = result_cache.ENABLED, False
    try:
        return repr(view.__wrapped__(store, *args, **kw))
    except Exception as exc:  # noqa: BLE001 - an InputError is an answer too
        return f"{type(exc).__name__}: {exc}"
    finally:
        result_cache.ENABLED = was


def _served(store, view, args, kw):
    try:
        return repr(view(store, *args, **kw))
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"


def _generation(store) -> int:
    gen = result_cache.generation(store)
    assert gen is not None
    return gen


def _entries(store, views_only: bool = True) -> int:
    """Stored views (a matrix's parts, bench.store.result_cache_parts, left out unless not
    views_only)."""
    parts = [result_cache.cache_key("matrix_parts", {"host": None, "campaign": None,
                                                     "workload": None, "include_demo": False}
                                    | f) for f in FILTERS]
    with store.engine.connect() as conn:
        keys = [k for k, in conn.execute(sa.text("SELECT key FROM results_cache"))]
    return sum(not views_only or k not in parts for k in keys)


@pytest.fixture
def filled(db_url):
    _old_database(db_url)
    store = open_store(db_url)
    yield store
    store.close()


def test_served_entries_are_the_computation(filled, monkeypatch):
    store = filled
    calls = _calls(store)
    fresh = {label: _fresh(store, v, a, kw) for label, v, a, kw in calls}
    answers = sum(not f.startswith("InputError") for f in fresh.values())
    assert answers > 40
    monkeypatch.setattr(result_cache, "MAX_ENTRIES", 1000)
    first = {label: _served(store, v, a, kw) for label, v, a, kw in calls}
    assert first == fresh                             # computed and stored
    assert _entries(store) == answers                 # every answer's JSON gives it back
    # served from the database: the runs are not read again
    with monkeypatch.context() as m:
        def no_reads(*a, **k):
            raise AssertionError("read runs on a cache hit")
        m.setattr(queries, "load_runs", no_reads)
        m.setattr(queries, "verdicts", no_reads)
        again = {label: _served(store, v, a, kw) for label, v, a, kw in calls
                 if not fresh[label].startswith("InputError")}
    assert again == {k: v for k, v in fresh.items() if k in again}


def test_entries_are_bounded(filled, monkeypatch):
    monkeypatch.setattr(result_cache, "MAX_ENTRIES", 5)
    seen = []
    for _label, v, a, kw in _calls(filled)[:30]:
        _served(filled, v, a, kw)
        seen.append(_entries(filled, views_only=False))
    assert max(seen) == 5 and min(seen[5:]) >= 1


def _write_paths(store):
    """Writes through bench's own code and plain SQL, each a change results must show."""
    def hide():
        campaigns.set_flags(store, "c1", hidden=True)

    def retain_flip():
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE runs SET retained = NOT retained "
                                 "WHERE id % 7 = 0 AND retained IS NOT NULL"))

    def delete_verdicts():
        with store.engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM verdicts WHERE id % 2 = 0"))

    def rename_host():
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE hosts SET name = 'gh200-z' WHERE id = 1"))

    def fingerprint():
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE fingerprints SET digest = 'f9f9f9f9f9f9f9f9' "
                                 "WHERE id = 1"))
    return [("recheck", lambda: recheck(store)), ("campaign flags", hide),
            ("runs", retain_flip), ("verdicts", delete_verdicts), ("hosts", rename_host),
            ("fingerprints", fingerprint)]


def test_each_write_moves_the_generation_and_is_shown(filled):
    store = filled
    probe = [(label, v, a, kw) for label, v, a, kw in _calls(store)
             if label.startswith(("matrix reclaim", "matrix capacity", "cell 64G-balloon-mglru"))
             or "verbose" in label]
    for name, write in _write_paths(store):
        for _label, v, a, kw in probe:
            _served(store, v, a, kw)                  # stored at this generation
        before = _generation(store)
        write()
        assert _generation(store) > before, name
        for label, v, a, kw in probe:
            assert _served(store, v, a, kw) == _fresh(store, v, a, kw), (name, label)


def test_ingest_moves_the_generation(store, bundles):
    ingest_bundle(store, bundles("c1-gh200-a-001"))
    before_view = queries.cell_results(store, "64Mi-cgroup-mglru")
    gen = _generation(store)
    ingest_bundle(store, bundles("c1-gh200-a-002"))
    assert _generation(store) > gen
    after = queries.cell_results(store, "64Mi-cgroup-mglru")
    assert after[0]["n_retained"] + after[0]["n_rejected"] == 2
    assert repr(after) == repr(queries.cell_results.__wrapped__(store, "64Mi-cgroup-mglru"))
    assert repr(after) != repr(before_view)


@pytest.mark.parametrize("table", ["runs", "verdicts", "cells", "hosts", "campaigns",
                                   "workloads", "fingerprints", "engine_runs"])
def test_every_watched_table_has_its_triggers(filled, table):
    """A plain UPDATE of each table results read moves the counter (the triggers of 0007),
    even one that changes nothing (the counter is conservative), but for campaigns: only a
    change of what results read of one (its id, hidden and demo flags; 0009) moves it. The
    filled database's runs are all ingested."""
    store = filled
    gen = _generation(store)
    if table == "campaigns":
        with store.engine.begin() as conn:
            conn.execute(sa.text("UPDATE campaigns SET id = id, state = state"))
        assert _generation(store) == gen
    with store.engine.begin() as conn:
        col = sa.inspect(conn).get_pk_constraint(table)["constrained_columns"][0]
        conn.execute(sa.text(f"UPDATE {table} SET {col} = {col}" if table != "campaigns" else
                             "UPDATE campaigns SET hidden = NOT hidden"))
        conn.execute(sa.text(f"DELETE FROM {table} WHERE 1 = 0"))
        if table == "campaigns":
            conn.execute(sa.text("UPDATE campaigns SET hidden = NOT hidden"))
    # an UPDATE of no row moves nothing; tables with rows move
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()
    assert (_generation(store) > gen) == bool(rows), table


def test_a_runs_states_before_its_bundle_move_nothing_and_its_ingest_does(store, bundles):
    """A campaign's run passes five states before its bundle is stored, and its campaign's
    row is locked by its controller: results read neither (ingested runs alone), so none
    moves the generation (0009); storing the bundle, and any later change of the ingested
    run, does, and marks its cell."""
    bundle = bundles("r1")
    spec = json.loads((bundle / "spec.json").read_text())    # ingest holds the run to it
    for i, rid in enumerate(("r0", "r1")):
        campaigns.add_run(store, "c1", rid, host="fixture-a", cell="64Mi-cgroup-mglru",
                          position=i)
    # the first run of a workload stores its identity: a new workload moves the generation
    # (a view's --workload prefix may now name two), as 0008 made it
    gen = _generation(store)
    for state in ("booting", "boot_verified", "deployed", "running"):
        campaigns.transition(store, "r0", state, spec=spec if state == "running" else None)
    assert _generation(store) > gen
    gen = _generation(store)
    for state in ("booting", "boot_verified", "deployed", "running", "collected"):
        campaigns.transition(store, "r1", state, spec=spec if state == "running" else None)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE campaigns SET state = state WHERE id = 'c1'"))
    assert _generation(store) == gen
    assert ingest_bundle(store, bundle)["status"] == "ingested"
    after = _generation(store)
    assert after > gen
    with store.engine.connect() as conn:
        dirty = dict(conn.execute(sa.text("SELECT cell_id, generation FROM results_dirty")).all())
        cell = conn.execute(sa.text("SELECT cell_id FROM runs WHERE run_id = 'r1'")).scalar()
    assert dirty[cell] == after
    campaigns.transition(store, "r1", "validated")
    assert _generation(store) > after
    # 0009's downgrade gives back 0008's triggers (every write to runs moves it), and again
    with store.engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0008")
    gen = _generation(store)
    campaigns.add_run(store, "c1", "r2", host="fixture-a", cell="64Mi-cgroup-mglru",
                      position=2)
    assert _generation(store) > gen
    upgrade(store.engine)
    gen = _generation(store)
    campaigns.transition(store, "r2", "booting")
    assert _generation(store) == gen


def test_a_reader_that_cannot_store_still_answers(filled, db_url, tmp_path):
    store = filled
    view = (queries.matrix, ("reclaim",), {})
    want = _fresh(store, *view)
    if db_url.startswith("sqlite"):
        # a writer holds SQLite's write lock: a reader (as `bench results` opens it) answers,
        # and gives up storing after PUT_WAIT_MS
        reader = open_store(db_url, write=False)
        blocker = sa.create_engine(db_url).connect()
        blocker.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            assert _served(reader, *view) == want
        finally:
            blocker.rollback()
            blocker.close()
            reader.close()
        assert _entries(store) == 0
    else:
        # a role that may only read
        with store.engine.begin() as conn:
            conn.exec_driver_sql("DROP ROLE IF EXISTS bench_reader")
            conn.exec_driver_sql("CREATE ROLE bench_reader LOGIN")
            conn.exec_driver_sql("GRANT SELECT ON ALL TABLES IN SCHEMA public TO bench_reader")
        reader = open_store(db_url.replace("postgres@", "bench_reader@"), write=False)
        try:
            assert _served(reader, *view) == want
            assert _served(reader, *view) == want
            assert _entries(store) == 0
        finally:
            reader.close()
            with store.engine.begin() as conn:
                conn.exec_driver_sql("REVOKE ALL ON ALL TABLES IN SCHEMA public "
                                     "FROM bench_reader")
                conn.exec_driver_sql("DROP ROLE bench_reader")
    assert _served(store, *view) == want               # a writer's reader stores it
    assert _entries(store) == 1


def test_entries_of_other_versions_or_generations_are_not_served(filled, monkeypatch):
    store = filled
    first = queries.matrix(store, "reclaim")
    key = result_cache.cache_key("matrix", {"kind": "reclaim", "host": None, "campaign": None,
                                            "workload": None, "include_demo": False})
    with store.engine.begin() as conn:       # forge the entry: what is served is what is kept
        conn.execute(sa.text("UPDATE results_cache SET data = :d WHERE key = :k"),
                     {"d": json.dumps({"forged": True}), "k": key})
    assert queries.matrix(store, "reclaim") == {"forged": True}
    monkeypatch.setattr("bench.version.controller_version", lambda: "0.0.0+src.other")
    assert repr(queries.matrix(store, "reclaim")) == repr(first)   # another controller
    monkeypatch.undo()
    with store.engine.begin() as conn:      # a change to the cells it reads (migration 0008)
        conn.execute(sa.text("UPDATE runs SET retained = retained"))
    assert repr(queries.matrix(store, "reclaim")) == repr(first)   # another generation


def test_0007_downgrade_and_upgrade_again(filled, db_url):
    engine = filled.engine
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0006")
    insp = sa.inspect(engine)
    assert not {"results_cache", "results_generation"} & set(insp.get_table_names())
    with engine.begin() as conn:            # no trigger left to write to a dropped table
        conn.execute(sa.text("UPDATE runs SET retained = retained"))
    upgrade(engine)
    assert result_cache.generation(filled) == 0
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET retained = retained"))
    assert result_cache.generation(filled) > 0


@pytest.mark.parametrize("argv", [("results", "--matrix", "reclaim", "--host", "gh200-b"),
                                  ("results", "--cell", "64G-balloon-mglru", "-v"),
                                  ("results", "--cell", "128G-cgroup-mglru", "--pool")])
def test_the_cli_serves_what_it_stored_without_the_views(filled, db_url, monkeypatch, capsys,
                                                         argv):
    """`bench results` asks the cache with the arguments the view is keyed by (the views are
    not called on a hit): with --json the text of the view's computation, and without it the
    same table as when it was computed."""
    from bench.cli import main
    from bench.results import views
    if argv[1] == "--matrix":
        views.emit_json(queries.matrix.__wrapped__(filled, "reclaim", host="gh200-b"))
    else:
        views.emit_json(queries.cell_results.__wrapped__(
            filled, argv[2], verbose="-v" in argv, pool="--pool" in argv))
    want_json = capsys.readouterr().out
    for extra in (("--json",), ()):
        assert main([*argv, *extra, "--db", db_url]) == 0
        first = capsys.readouterr().out
        if extra:
            assert first == want_json
        with monkeypatch.context() as m:
            def no_view(*a, **k):
                raise AssertionError("computed a stored view")
            m.setattr(queries, "matrix", no_view)
            m.setattr(queries, "cell_results", no_view)
            assert main([*argv, *extra, "--db", db_url]) == 0
        assert capsys.readouterr().out == first


def test_a_readers_quick_head_is_alembics():
    """require_head's reading of the migration files names alembic's head."""
    from bench.store import db
    assert db.quick_head() == db.head_revision() is not None
