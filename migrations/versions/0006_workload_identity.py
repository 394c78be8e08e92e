"""stored workload identity and a covering index for results

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 16:30:00

- workloads: one row per distinct workload identity (bench.judge.identity.workload_of of a
  run's spec: the compared fields, their short digest and the shown trace name), keyed by the
  sha256 of its JSON; runs.workload_id points at its run's row. Results read that integer
  instead of the spec's parts on every query (at 100,000 runs that parse was most of a view).
  No foreign key: SQLite drops a referencing column only by copying `runs`, which the 0005
  views forbid, and workloads rows are never deleted.
- Existing runs are backfilled here by bench.store.workloads.backfill, the code ingest uses
  (one definition of identity). Should that definition change, a later revision must
  recompute the column (`backfill(conn, only_missing=False)`).
- ix_runs_results: a partial index over ingested runs (bundle_digest IS NOT NULL) holding every
  column a results view reads (bench.store.models.RESULTS_INDEX_COLUMNS), so SQLite reads the
  index instead of table rows that carry each run's spec.json (bundle_digest too: SQLite
  counts an index covering only when it holds the WHERE clause's columns as well). The column
  list is frozen here.

Downgrade drops the index, the column and the table.
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

RESULTS_INDEX_COLUMNS = (
    "cell_id", "host_id", "workload_id", "fingerprint_id", "campaign_id", "retained", "id",
    "run_id", "position", "repetition", "state", "nominal_miss_bytes_per_iteration",
    "iterations", "iteration_median_s", "iteration_min_s", "iteration_max_s", "device_bytes",
    "device_bytes_per_iteration", "logical_bytes_per_iteration", "served_fraction",
    "scan_steal", "cgroup_scan_steal", "locked_fraction", "mem_total_bytes",
    "mglru_loop_entry", "mglru_end", "bundle_digest")
WHERE = "bundle_digest IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        'workloads',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(length=64), nullable=False),
        sa.Column('digest', sa.String(length=16), nullable=False),
        sa.Column('data', sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_workloads')),
        sa.UniqueConstraint('key', name=op.f('uq_workloads_key')))
    op.create_index(op.f('ix_workloads_digest'), 'workloads', ['digest'], unique=False)
    op.add_column('runs', sa.Column('workload_id', sa.Integer(), nullable=True))
    from bench.store.workloads import backfill
    backfill(op.get_bind())
    op.create_index('ix_runs_results', 'runs', list(RESULTS_INDEX_COLUMNS), unique=False,
                    sqlite_where=sa.text(WHERE), postgresql_where=sa.text(WHERE))


def downgrade() -> None:
    op.drop_index('ix_runs_results', table_name='runs')
    if op.get_bind().dialect.name == "sqlite":      # SQLite >= 3.35 drops a column
        op.execute("ALTER TABLE runs DROP COLUMN workload_id")
    else:
        op.drop_column('runs', 'workload_id')
    op.drop_index(op.f('ix_workloads_digest'), table_name='workloads')
    op.drop_table('workloads')
