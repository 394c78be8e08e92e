"""demo and hidden campaigns; SQL views keyed by the text run id

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 13:00:00

- campaigns.demo: the campaign was made by `bench demo`. Results (`bench results`, `runs`,
  `compare`, `sizing`, `plot`, `export`) leave demo campaigns out unless asked
  (`--include-demo`, or `--campaign ID` naming one). Campaigns already stored that `bench demo`
  made (matrix `demo`, id `demo-s<seed>-<time>`) are marked on upgrade.
- campaigns.hidden: `bench campaigns hide ID`: kept, but out of listings and results unless
  asked (`--all`, `--campaign ID`).
- Views for people who read the database with sqlite3, pandas or datasette (docs/results.md).
  The child tables (iterations, counter_deltas, timeline, verdicts) key on runs.id, the integer
  primary key, under the column name `run_id`; the views carry the text run id (runs.run_id)
  with the campaign, cell, host and retained flag, so `WHERE run_id = 'c1-r0003'` works on
  every one of them: v_runs, v_iterations, v_counters, v_timeline, v_verdicts.

The views are plain SQL both SQLite and PostgreSQL take (reserved column names quoted). A later
revision that recreates a table a view reads (SQLite batch mode copies and renames the table)
must drop the views first and create them again after.
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

_RUN_KEYS = """r.run_id AS run_id, r.campaign_id AS campaign, c.name AS cell, h.name AS host,
       r.retained AS retained"""
_RUN_JOIN = """JOIN runs r ON r.id = x.run_id
JOIN cells c ON c.id = r.cell_id
JOIN hosts h ON h.id = r.host_id"""

VIEWS = {
    "v_runs": """
SELECT r.run_id AS run_id, r.id AS run_ref, r.campaign_id AS campaign, c.name AS cell,
       h.name AS host, r.retained AS retained, r.state AS state, r.position AS position,
       r.repetition AS repetition, c.capacity_bytes AS capacity_bytes,
       c.mechanism AS mechanism, c.reclaim AS reclaim, c.mode AS mode, c.hints AS hints,
       c.delivery AS delivery, r.runner_ok AS runner_ok, r.runner_reason AS runner_reason,
       r.ingested_at AS ingested_at, r.bundle_digest AS bundle_digest,
       r.iterations AS iterations, r.iteration_median_s AS iteration_median_s,
       r.iteration_min_s AS iteration_min_s, r.iteration_max_s AS iteration_max_s,
       r.device_bytes AS device_bytes,
       r.device_bytes_per_iteration AS device_bytes_per_iteration,
       r.logical_bytes_per_iteration AS logical_bytes_per_iteration,
       r.nominal_miss_bytes_per_iteration AS nominal_miss_bytes_per_iteration,
       r.served_fraction AS served_fraction, r.scan_steal AS scan_steal,
       r.cgroup_scan_steal AS cgroup_scan_steal, r.locked_fraction AS locked_fraction,
       r.mem_total_bytes AS mem_total_bytes, r.mglru_loop_entry AS mglru_loop_entry,
       r.mglru_end AS mglru_end, cp.matrix AS matrix, cp.demo AS demo, cp.hidden AS hidden
FROM runs r
JOIN cells c ON c.id = r.cell_id
JOIN hosts h ON h.id = r.host_id
LEFT JOIN campaigns cp ON cp.id = r.campaign_id""",
    "v_iterations": f"""
SELECT {_RUN_KEYS}, x.pass_no AS pass_no, x.iter_no AS iter_no, x.wall_ns AS wall_ns,
       x.bytes AS bytes, x.reads AS reads, x.arena_hits AS arena_hits
FROM iterations x
{_RUN_JOIN}""",
    "v_counters": f"""
SELECT {_RUN_KEYS}, x."interval" AS "interval", x.source AS source, x."key" AS "key",
       x."start" AS "start", x."end" AS "end", x.delta AS delta
FROM counter_deltas x
{_RUN_JOIN}""",
    "v_timeline": f"""
SELECT {_RUN_KEYS}, x.seq AS seq, x.mono_ns AS mono_ns, x.phase AS phase,
       x.memory_current AS memory_current, x.cached AS cached,
       x.mem_available AS mem_available
FROM timeline x
{_RUN_JOIN}""",
    "v_verdicts": f"""
SELECT {_RUN_KEYS}, x.rule AS rule, x.version AS version, x.passed AS passed,
       x.reason AS reason, x."current" AS "current", x.evaluated_at AS evaluated_at
FROM verdicts x
{_RUN_JOIN}""",
}


def create_views() -> None:
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body.strip()}")


def drop_views() -> None:
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW IF EXISTS {name}")


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN, never SQLite's batch copy: that drops and recreates
    # `campaigns`, which runs and the journal reference
    op.add_column('campaigns', sa.Column('demo', sa.Boolean(), server_default=sa.false(),
                                         nullable=False))
    op.add_column('campaigns', sa.Column('hidden', sa.Boolean(), server_default=sa.false(),
                                         nullable=False))
    campaigns = sa.table("campaigns", sa.column("id", sa.String), sa.column("matrix", sa.String),
                         sa.column("demo", sa.Boolean))
    op.get_bind().execute(campaigns.update()
                          .where(campaigns.c.matrix == "demo")
                          .where(campaigns.c.id.like("demo-s%"))
                          .values(demo=True))
    create_views()


def downgrade() -> None:
    drop_views()
    for col in ('hidden', 'demo'):
        if op.get_bind().dialect.name == "sqlite":      # SQLite >= 3.35 drops a column
            op.execute(f"ALTER TABLE campaigns DROP COLUMN {col}")
        else:
            op.drop_column('campaigns', col)
