"""drop the results cache: results views are computed from the database on every call

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 08:10:00

bench no longer stores results views (issue 21: one code path, no view can be stale), so what
0007-0009 added goes:
- the tables results_cache, results_generation and results_dirty;
- their triggers on runs, verdicts, cells, hosts, campaigns, workloads, fingerprints and
  engine_runs (SQLite: results_gen_<table>_<op>; PostgreSQL: results_gen_<table>[_<op>],
  results_gen_<table>_truncate and results_touch_<table>[_<op>]), found by name in the
  catalogue, so a database whichever of 0007-0009 left it loses them all;
- PostgreSQL's trigger functions bench_results_changed and bench_results_touch.
The data results read (runs.workload_id and ix_runs_results, 0006) stays.

Downgrade runs 0007's, 0008's and 0009's upgrades again (read from their files, in order):
the tables come back empty at generation 0, with 0009's triggers, as a fresh 0009 database.
"""
import importlib.util
from pathlib import Path

from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

TABLES = ("results_dirty", "results_cache", "results_generation")
FUNCTIONS = ("bench_results_touch", "bench_results_changed")
# by name prefix (not LIKE: the driver reads a % in the text as a parameter's place)
_OURS = "(substr({n}, 1, 12) = 'results_gen_' OR substr({n}, 1, 14) = 'results_touch_')"
PG_TRIGGERS = ("SELECT t.tgname, c.relname FROM pg_trigger t JOIN pg_class c "
               "ON c.oid = t.tgrelid WHERE NOT t.tgisinternal AND " + _OURS.format(n="t.tgname"))
SQLITE_TRIGGERS = ("SELECT name FROM sqlite_master WHERE type = 'trigger' AND "
                   + _OURS.format(n="name"))


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        for name, table in conn.exec_driver_sql(PG_TRIGGERS).all():
            conn.exec_driver_sql(f'DROP TRIGGER "{name}" ON "{table}"')
        for f in FUNCTIONS:
            conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {f}()")
    else:
        for name, in conn.exec_driver_sql(SQLITE_TRIGGERS).all():
            conn.exec_driver_sql(f'DROP TRIGGER "{name}"')
    for t in TABLES:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {t}")


def downgrade() -> None:
    here = Path(__file__).resolve().parent
    for rev in ("0007_results_cache", "0008_results_dirty", "0009_results_quiet_states"):
        spec = importlib.util.spec_from_file_location(f"_bench_migration_{rev}",
                                                      here / f"{rev}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.upgrade()
