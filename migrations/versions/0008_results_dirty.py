"""results cache invalidated per cell: which cells each committed change touched

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 23:20:00

- results_dirty: one row per cell id (0: every cell) with the generation (results_generation.n)
  of the last committed change that touched a run of that cell. A results view stored at
  generation g is still exact when no cell it reads has a row above g
  (bench.store.result_cache): a new run of one cell leaves every other cell's views, and the
  other cells' part of a matrix, as they were stored.
- What marks what: a row of runs marks its cell (old and new, on an update that moves it); a row
  of verdicts or engine_runs marks its run's cell; any change to cells, hosts, workloads or
  fingerprints (but a new host, cell or fingerprint: runs' foreign keys keep any run from
  naming it before it exists, and that run marks its cell), and a campaign that is or becomes
  hidden or demo (or whose id changes), marks 0. Every write still moves results_generation as
  0007 made it.

SQLite: 0007's row triggers are replaced by ones that move the counter and then upsert the
cells' rows at the new `n`, in the writer's own transaction. PostgreSQL: a row trigger
(bench_results_touch) collects the cells in a transaction-local setting; 0007's commit-time
trigger function (bench_results_changed) now also writes them at the generation it takes, so
rows of results_dirty are locked only while committing, in cell order, after the counter row
(which serialises committing writers: no deadlock through them). A TRUNCATE marks 0.

Downgrade restores 0007's triggers and function and drops results_dirty.
"""
from alembic import op
import sqlalchemy as sa

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

WATCHED = ("runs", "verdicts", "cells", "hosts", "campaigns", "workloads", "fingerprints",
           "engine_runs")
OPS = ("insert", "update", "delete")
BUMP = "UPDATE results_generation SET n = n + 1 WHERE id = 1;"


def _mark(cell: str, when: str = "") -> str:
    """SQLite: upsert `cell`'s row at the counter's value (after BUMP)."""
    cond = f" AND ({when})" if when else ""
    return ("INSERT INTO results_dirty (cell_id, generation) "
            f"SELECT coalesce({cell}, 0), n FROM results_generation WHERE id = 1{cond} "
            "ON CONFLICT (cell_id) DO UPDATE SET generation = excluded.generation;")


def _sqlite_body(table: str, o: str) -> str:
    rows = {"insert": ("NEW",), "delete": ("OLD",), "update": ("OLD", "NEW")}[o]
    if table == "runs":
        marks = [_mark(f"{r}.cell_id") for r in rows]
    elif table in ("verdicts", "engine_runs"):
        marks = [_mark(f"(SELECT cell_id FROM runs WHERE id = {r}.run_id)") for r in rows]
    elif table == "campaigns":
        when = {"insert": "NEW.hidden OR NEW.demo", "delete": "OLD.hidden OR OLD.demo",
                "update": "NEW.id IS NOT OLD.id OR NEW.hidden IS NOT OLD.hidden "
                          "OR NEW.demo IS NOT OLD.demo"}[o]
        marks = [_mark("0", when)]
    elif o == "insert" and table != "workloads":
        marks = []                  # a new row no run refers to yet (runs' foreign keys)
    else:
        marks = [_mark("0")]
    return " ".join([BUMP, *marks])


PG_TOUCH = """
CREATE FUNCTION bench_results_touch() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  cells bigint[];
  cur text := coalesce(current_setting('bench.results_cells', true), '');
  c bigint;
BEGIN
  IF TG_TABLE_NAME = 'runs' THEN
    IF TG_OP <> 'INSERT' THEN cells := cells || OLD.cell_id::bigint; END IF;
    IF TG_OP <> 'DELETE' THEN cells := cells || NEW.cell_id::bigint; END IF;
  ELSIF TG_TABLE_NAME IN ('verdicts', 'engine_runs') THEN
    IF TG_OP <> 'INSERT' THEN
      cells := cells || (SELECT cell_id::bigint FROM runs WHERE id = OLD.run_id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
      cells := cells || (SELECT cell_id::bigint FROM runs WHERE id = NEW.run_id);
    END IF;
  ELSIF TG_TABLE_NAME = 'campaigns' THEN
    IF (TG_OP = 'INSERT' AND (NEW.hidden OR NEW.demo))
       OR (TG_OP = 'DELETE' AND (OLD.hidden OR OLD.demo))
       OR (TG_OP = 'UPDATE' AND (NEW.id IS DISTINCT FROM OLD.id
                                 OR NEW.hidden IS DISTINCT FROM OLD.hidden
                                 OR NEW.demo IS DISTINCT FROM OLD.demo)) THEN
      cells := ARRAY[0::bigint];
    END IF;
  ELSIF TG_OP <> 'INSERT' OR TG_TABLE_NAME = 'workloads' THEN
    cells := ARRAY[0::bigint];
  END IF;
  FOREACH c IN ARRAY coalesce(cells, '{}'::bigint[]) LOOP
    c := coalesce(c, 0);
    IF position(',' || c || ',' IN cur) = 0 THEN
      cur := (CASE WHEN cur = '' THEN ',' ELSE cur END) || c || ',';
    END IF;
  END LOOP;
  PERFORM set_config('bench.results_cells', cur, true);
  RETURN NULL;
END
$fn$"""

PG_CHANGED = """
CREATE OR REPLACE FUNCTION bench_results_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  g bigint;
  cur text;
BEGIN
  IF current_setting('bench.results_changed', true) IS DISTINCT FROM
     txid_current()::text THEN
    UPDATE results_generation SET n = n + 1 WHERE id = 1 RETURNING n INTO g;
    PERFORM set_config('bench.results_changed', txid_current()::text, true);
    cur := CASE WHEN TG_OP = 'TRUNCATE' THEN ',0,'
                ELSE coalesce(current_setting('bench.results_cells', true), '') END;
    IF g IS NOT NULL THEN
      INSERT INTO results_dirty (cell_id, generation)
        SELECT DISTINCT x::bigint, g FROM unnest(string_to_array(cur, ',')) AS x
        WHERE x <> '' ORDER BY 1
        ON CONFLICT (cell_id) DO UPDATE SET generation = excluded.generation;
    END IF;
  END IF;
  RETURN NULL;
END
$fn$"""


def upgrade() -> None:
    op.create_table(
        'results_dirty',
        sa.Column('cell_id', sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column('generation', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('cell_id', name=op.f('pk_results_dirty')))
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(PG_TOUCH)
        conn.exec_driver_sql(PG_CHANGED)
        for t in WATCHED:
            conn.exec_driver_sql(
                f"CREATE TRIGGER results_touch_{t} AFTER INSERT OR UPDATE OR DELETE ON {t} "
                "FOR EACH ROW EXECUTE FUNCTION bench_results_touch()")
        return
    for t in WATCHED:
        for o in OPS:
            conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_{o}")
            conn.exec_driver_sql(f"CREATE TRIGGER results_gen_{t}_{o} AFTER {o.upper()} ON {t} "
                                 f"BEGIN {_sqlite_body(t, o)} END")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        for t in WATCHED:
            conn.exec_driver_sql(f"DROP TRIGGER results_touch_{t} ON {t}")
        conn.exec_driver_sql("DROP FUNCTION bench_results_touch()")
        conn.exec_driver_sql(PG_CHANGED_0007)
    else:
        for t in WATCHED:
            for o in OPS:
                conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_{o}")
                conn.exec_driver_sql(f"CREATE TRIGGER results_gen_{t}_{o} AFTER {o.upper()} "
                                     f"ON {t} BEGIN {BUMP} END")
    op.drop_table('results_dirty')


PG_CHANGED_0007 = """
CREATE OR REPLACE FUNCTION bench_results_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('bench.results_changed', true) IS DISTINCT FROM
     txid_current()::text THEN
    UPDATE results_generation SET n = n + 1 WHERE id = 1;
    PERFORM set_config('bench.results_changed', txid_current()::text, true);
  END IF;
  RETURN NULL;
END
$fn$"""
