"""`bench db upgrade|current`: the results database's schema (alembic revisions,
bench.store.db)."""

from __future__ import annotations

import typer

from bench.cli.options import DbOpt, JsonOpt
from bench.results import views

db_app = typer.Typer(no_args_is_help=True, help="The results database schema.")


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None) -> None:
    """Bring the database to the newest schema (creates it if new)."""
    from bench.store.db import make_engine, upgrade
    engine = make_engine(db)
    before, head = upgrade(engine)
    views.say(f"{engine.url.render_as_string()}: {before or 'empty'} -> {head}")


@db_app.command("current")
def db_current(db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Show the database's schema revision and the head this bench knows."""
    from bench.store.db import check, head_revision, make_engine
    engine = make_engine(db, create=False)
    cur, head = check(engine), head_revision()
    if json_out:
        views.emit_json({"url": engine.url.render_as_string(), "current": cur, "head": head})
    else:
        print(f"{cur or 'empty'} (head {head}){'' if cur == head else ' - run bench db upgrade'}")


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
