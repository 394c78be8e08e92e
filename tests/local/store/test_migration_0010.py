"""Migration 0010 drops the results cache that 0007-0009 added, on SQLite and PostgreSQL: a
database at 0009 whose triggers have been writing (a generation, dirty cells) and that holds
a stored view upgrades to head with no cache table, trigger or function left, and writes to
the tables the triggers watched then work; its downgrade gives 0009's cache back."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from bench.store.db import _alembic_config, current_revision, head_revision, upgrade
from tests.local.store.test_workload_identity_0006 import _old_database

TABLES = {"results_cache", "results_generation", "results_dirty"}


def _cache_objects(engine) -> tuple[set[str], set[str], set[str]]:
    """(cache tables, results_* triggers, bench_results_* functions) in the database."""
    tables = TABLES & set(sa.inspect(engine).get_table_names())
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            triggers = {n for n, in conn.execute(sa.text(
                "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))}
            functions = {n for n, in conn.execute(sa.text(
                "SELECT proname FROM pg_proc WHERE proname LIKE 'bench_results%'"))}
        else:
            triggers = {n for n, in conn.execute(sa.text(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'"))}
            functions = set()
    return tables, {t for t in triggers if t.startswith("results_")}, functions


def _at_0009_with_a_stored_view(url: str) -> sa.Engine:
    engine = _old_database(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0009")
    with engine.begin() as conn:           # ingested runs change: the triggers write
        conn.execute(sa.text("UPDATE runs SET retained = NOT retained WHERE id % 7 = 1"))
        conn.execute(sa.text("INSERT INTO results_cache (key, generation, data) "
                             "SELECT 'k', n, '{}' FROM results_generation"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT n FROM results_generation")).scalar() > 0
        assert conn.execute(sa.text("SELECT count(*) FROM results_dirty")).scalar() > 0
        assert conn.execute(sa.text("SELECT count(*) FROM results_cache")).scalar() == 1
    return engine


def test_0009_with_cached_rows_upgrades_to_head_without_the_cache(db_url):
    engine = _at_0009_with_a_stored_view(db_url)
    tables, triggers, functions = _cache_objects(engine)
    assert tables == TABLES and triggers
    assert functions == ({"bench_results_changed", "bench_results_touch"}
                         if engine.dialect.name == "postgresql" else set())
    assert upgrade(engine) == ("0009", head_revision())
    assert _cache_objects(engine) == (set(), set(), set())
    with engine.begin() as conn:            # every table a trigger watched takes writes
        for t in ("runs", "verdicts", "cells", "hosts", "campaigns", "workloads",
                  "fingerprints", "engine_runs"):
            conn.execute(sa.text(f"DELETE FROM {t} WHERE 1 = 0"))
        conn.execute(sa.text("UPDATE runs SET retained = NOT retained WHERE id % 7 = 1"))
        conn.execute(sa.text("UPDATE campaigns SET hidden = NOT hidden"))
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() == 400
    engine.dispose()


def test_0010_downgrade_gives_the_cache_back_and_upgrades_again(db_url):
    engine = _at_0009_with_a_stored_view(db_url)
    upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0009")
    assert current_revision(engine) == "0009"
    tables, triggers, _ = _cache_objects(engine)
    assert tables == TABLES and triggers
    with engine.begin() as conn:            # 0009's triggers move the generation again
        conn.execute(sa.text("UPDATE runs SET retained = NOT retained WHERE id % 7 = 1"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT n FROM results_generation")).scalar() > 0
    upgrade(engine)
    assert _cache_objects(engine) == (set(), set(), set())
    engine.dispose()
