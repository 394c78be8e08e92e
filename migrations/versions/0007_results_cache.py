"""results cache keyed by a generation counter that the database itself keeps

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 19:40:00

- results_generation: one row (id 1) whose `n` grows whenever a row that a results view reads
  is inserted, updated or deleted (runs, verdicts, cells, hosts, campaigns, workloads,
  fingerprints, engine_runs), by triggers created here: every writer (ingest, recheck,
  `bench campaigns hide`, a migration's backfill, a hand-written UPDATE in psql) moves it,
  whatever code path it takes.
- results_cache: a view's output (JSON text) under the sha256 of (view, its arguments, the
  controller's source version) and the generation it was computed at
  (bench.store.result_cache). A reader serves an entry only at the current generation.

SQLite: row triggers (SQLite has no other kind) that add one to `n` in the writer's own
transaction (SQLite writers are serialised already). PostgreSQL: deferred constraint triggers
that run at COMMIT, once per transaction (a transaction-local setting remembers it), so a
writer holds the counter row's lock only while committing: concurrent writers never wait on
it in mid-transaction, and cannot deadlock through it; a TRUNCATE moves it too.

Downgrade drops the triggers, the function and both tables.
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

WATCHED = ("runs", "verdicts", "cells", "hosts", "campaigns", "workloads", "fingerprints",
           "engine_runs")
OPS = ("insert", "update", "delete")
PG_FUNCTION = """
CREATE FUNCTION bench_results_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF current_setting('bench.results_changed', true) IS DISTINCT FROM
     txid_current()::text THEN
    UPDATE results_generation SET n = n + 1 WHERE id = 1;
    PERFORM set_config('bench.results_changed', txid_current()::text, true);
  END IF;
  RETURN NULL;
END
$fn$"""


def upgrade() -> None:
    op.create_table(
        'results_generation',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('n', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_results_generation')))
    op.create_table(
        'results_cache',
        sa.Column('key', sa.String(length=64), nullable=False),
        sa.Column('generation', sa.BigInteger(), nullable=False),
        sa.Column('data', sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint('key', name=op.f('pk_results_cache')))
    op.execute("INSERT INTO results_generation (id, n) VALUES (1, 0)")
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(PG_FUNCTION)
        for t in WATCHED:
            conn.exec_driver_sql(
                f"CREATE CONSTRAINT TRIGGER results_gen_{t} AFTER INSERT OR UPDATE OR DELETE "
                f"ON {t} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                "EXECUTE FUNCTION bench_results_changed()")
            conn.exec_driver_sql(
                f"CREATE TRIGGER results_gen_{t}_truncate AFTER TRUNCATE ON {t} "
                "FOR EACH STATEMENT EXECUTE FUNCTION bench_results_changed()")
    else:
        for t in WATCHED:
            for o in OPS:
                conn.exec_driver_sql(
                    f"CREATE TRIGGER results_gen_{t}_{o} AFTER {o.upper()} ON {t} BEGIN "
                    "UPDATE results_generation SET n = n + 1 WHERE id = 1; END")


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        for t in WATCHED:
            conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t} ON {t}")
            conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_truncate ON {t}")
        conn.exec_driver_sql("DROP FUNCTION bench_results_changed()")
    else:
        for t in WATCHED:
            for o in OPS:
                conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_{o}")
    op.drop_table('results_cache')
    op.drop_table('results_generation')
