"""`bench retention recheck|rules`: the retention rules (bench.judge.retention) listed, and the
stored runs judged again under their current versions. Not `bench placement` (§8 placement
rules, bench.cli.placement), which was once called `bench rules`."""

from __future__ import annotations

import typer

from bench.cli.options import DbOpt, JsonOpt
from bench.results import store_views, views

ret_app = typer.Typer(no_args_is_help=True, help="Retention rules.")


@ret_app.command("recheck")
def retention_recheck(db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Re-evaluate stored runs under the current rule versions; report what changed."""
    from bench.store.db import open_store
    from bench.store.ingest import recheck
    changes = recheck(open_store(db, write=False))
    if json_out:
        views.emit_json(changes)
    else:
        views.print_table(store_views.recheck_table(changes))


@ret_app.command("rules")
def retention_rules(json_out: JsonOpt = False) -> None:
    """List the retention rules with their versions."""
    from bench.judge.retention import rule_table
    rows = rule_table()
    if json_out:
        views.emit_json(rows)
    else:
        for r in rows:
            print(f"{r['rule']} v{r['version']}: {r['doc']}")


def register(app: typer.Typer) -> None:
    app.add_typer(ret_app, name="retention")
