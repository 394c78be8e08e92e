"""results generation moved only by changes a results view can see

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 06:05:00

Every results view reads ingested runs alone (bench.store.queries: bundle_digest IS NOT NULL),
and of a campaign only its id and its hidden and demo flags. Yet 0007's triggers moved the
generation on every write to runs and campaigns: each state a campaign's run passes through
before its bundle is stored (planned, booting, deployed, running, collected: five writes per
run) and the controller lock's row lock of its campaign. So a stored view was recomputed after
writes that could not change it: during a campaign, a `bench results` between two ingests
computed its view again. (On PostgreSQL each such commit also took the counter's row lock; it
was not what slowed a 64-host campaign's writes: tests/perf/campaign_scale.py counts as many
writes over 10 ms with this migration as without, and the server's active backends sampled
then waited on the controller's threads, not on locks.)

Now the triggers on runs fire only for a row that is or was ingested (bundle_digest set before
or after the change), and those on campaigns only when 0008 marks (a campaign that is or
becomes hidden or demo, or whose id changes). Everything else is as 0008 left it: the other
tables' triggers, what marks which cell, TRUNCATE.

SQLite: the runs and campaigns row triggers are made again with a WHEN clause. PostgreSQL: the
row trigger (bench_results_touch) and the commit-time constraint trigger
(bench_results_changed) of runs and campaigns are made again, one per operation, each with
its WHEN clause; the functions are unchanged.

Downgrade restores 0008's triggers.
"""
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

OPS = ("insert", "update", "delete")
_INGESTED = {"insert": "NEW.bundle_digest IS NOT NULL",
             "delete": "OLD.bundle_digest IS NOT NULL",
             "update": "OLD.bundle_digest IS NOT NULL OR NEW.bundle_digest IS NOT NULL"}
_FLAGGED = {"insert": "NEW.hidden OR NEW.demo", "delete": "OLD.hidden OR OLD.demo",
            "update": "NEW.id IS DISTINCT FROM OLD.id OR NEW.hidden IS DISTINCT FROM OLD.hidden "
                      "OR NEW.demo IS DISTINCT FROM OLD.demo"}
WHEN = {"runs": _INGESTED, "campaigns": _FLAGGED}


def _sqlite_when(cond: str) -> str:
    return cond.replace("IS DISTINCT FROM", "IS NOT")


def _sqlite_body(table: str, o: str) -> str:
    # 0008's bodies, as 0008 wrote them (a migration never imports another's code)
    bump = "UPDATE results_generation SET n = n + 1 WHERE id = 1;"
    cond = "" if table == "runs" else f" AND ({_sqlite_when(_FLAGGED[o])})"
    rows = {"insert": ("NEW",), "delete": ("OLD",), "update": ("OLD", "NEW")}[o]
    cells = [f"{r}.cell_id" for r in rows] if table == "runs" else ["0"]
    marks = [("INSERT INTO results_dirty (cell_id, generation) "
              f"SELECT coalesce({c}, 0), n FROM results_generation WHERE id = 1{cond} "
              "ON CONFLICT (cell_id) DO UPDATE SET generation = excluded.generation;")
             for c in cells]
    return " ".join([bump, *marks])


def _sqlite(conn, quiet: bool) -> None:
    for t in WHEN:
        for o in OPS:
            when = f"WHEN {_sqlite_when(WHEN[t][o])} " if quiet else ""
            conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_{o}")
            conn.exec_driver_sql(f"CREATE TRIGGER results_gen_{t}_{o} AFTER {o.upper()} ON {t} "
                                 f"{when}BEGIN {_sqlite_body(t, o)} END")


def _pg_drop(conn, quiet: bool) -> None:
    for t in WHEN:
        if quiet:
            for o in OPS:
                conn.exec_driver_sql(f"DROP TRIGGER results_touch_{t}_{o} ON {t}")
                conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t}_{o} ON {t}")
        else:
            conn.exec_driver_sql(f"DROP TRIGGER results_touch_{t} ON {t}")
            conn.exec_driver_sql(f"DROP TRIGGER results_gen_{t} ON {t}")


def _pg_create(conn, quiet: bool) -> None:
    for t in WHEN:
        if not quiet:       # 0007's and 0008's
            conn.exec_driver_sql(
                f"CREATE CONSTRAINT TRIGGER results_gen_{t} AFTER INSERT OR UPDATE OR DELETE "
                f"ON {t} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
                "EXECUTE FUNCTION bench_results_changed()")
            conn.exec_driver_sql(
                f"CREATE TRIGGER results_touch_{t} AFTER INSERT OR UPDATE OR DELETE ON {t} "
                "FOR EACH ROW EXECUTE FUNCTION bench_results_touch()")
            continue
        for o in OPS:
            when = WHEN[t][o]
            conn.exec_driver_sql(
                f"CREATE CONSTRAINT TRIGGER results_gen_{t}_{o} AFTER {o.upper()} ON {t} "
                f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({when}) "
                "EXECUTE FUNCTION bench_results_changed()")
            conn.exec_driver_sql(
                f"CREATE TRIGGER results_touch_{t}_{o} AFTER {o.upper()} ON {t} "
                f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION bench_results_touch()")


def _apply(quiet: bool) -> None:
    """0009's triggers (quiet) or 0008's in their place."""
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        _pg_drop(conn, quiet=not quiet)
        _pg_create(conn, quiet=quiet)
    else:
        _sqlite(conn, quiet=quiet)


def upgrade() -> None:
    _apply(quiet=True)


def downgrade() -> None:
    _apply(quiet=False)
