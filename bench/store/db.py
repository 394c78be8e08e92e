"""Open the results database: resolve its URL, bring it to the migrations' head or refuse it.

URL: `--db URL`, else $BENCH_DB, else a SQLite file $XDG_DATA_HOME/bench/bench.db
(~/.local/share/bench/bench.db). SQLite runs with WAL and foreign keys on; PostgreSQL URLs
(postgresql+psycopg://...) run the same code. Every database bench opens is upgraded to head,
or refused when it is not a bench database or is newer than this bench's migrations.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import CursorResult, Result, create_engine, event, inspect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from bench.errors import BenchError, InputError


class StoreError(BenchError):
    """The results database cannot be opened or used."""


T = TypeVar("T")


def referenced(s: Session, model: type[T], key: Any) -> T:
    """The row of `model` that a foreign key names (so it exists; a StoreError if it does not)."""
    obj = s.get(model, key)
    if obj is None:
        raise StoreError(f"the database is inconsistent: no {model.__name__} {key!r}")
    return obj


def rowcount(result: Result) -> int:
    """The rows an UPDATE or DELETE run by Session.execute matched."""
    # Session.execute is typed as returning a Result; for an UPDATE or DELETE without RETURNING
    # it returns a CursorResult, the Result that has rowcount
    return cast(CursorResult, result).rowcount


def default_url() -> str:
    if os.environ.get("BENCH_DB"):
        return os.environ["BENCH_DB"]
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return f"sqlite:///{Path(base) / 'bench' / 'bench.db'}"


def migrations_dir() -> Path:
    """bench.migrations when installed as a package, else migrations/ of the checkout."""
    try:
        spec = importlib.util.find_spec("bench.migrations")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


def _alembic_config(connection=None):
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    """The newest migration (None only for a migrations directory without any)."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def make_engine(url: str | None = None) -> Engine:
    url = url or default_url()
    try:
        u = make_url(url)
    except ArgumentError:
        raise InputError(f"database URL {url!r} is not a URL",
                         hint="e.g. sqlite:////path/bench.db or "
                              "postgresql+psycopg://user@host/db") from None
    if u.drivername.startswith("sqlite") and u.database and u.database != ":memory:":
        Path(u.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine(u, future=True)
    except (NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"no driver for {u.drivername}: {exc}",
                         hint="install psycopg[binary] for postgresql+psycopg:// URLs") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def upgrade(engine: Engine) -> tuple[str | None, str | None]:
    """Bring the database to head; returns (revision before, head). Refuses foreign schemas."""
    before = check(engine)
    head = head_revision()
    if before != head:
        with engine.begin() as conn:
            command.upgrade(_alembic_config(conn), "head")
    return before, head


def check(engine: Engine) -> str | None:
    """The database's revision; StoreError when it is not ours or newer than this bench."""
    try:
        rev = current_revision(engine)
        tables = set(inspect(engine).get_table_names())
    except OperationalError as exc:
        raise StoreError(f"cannot open the database {engine.url.render_as_string()}: "
                         f"{exc.orig}") from None
    if rev is None and tables - {"alembic_version"}:
        raise StoreError(f"{engine.url.render_as_string()} holds tables but no bench schema "
                         f"version ({', '.join(sorted(tables)[:5])}...)",
                         hint="point --db or BENCH_DB at a bench database or a new file")
    if rev is not None:
        script = ScriptDirectory.from_config(_alembic_config())
        try:
            script.get_revision(rev)
        except Exception:  # noqa: BLE001 - alembic raises several types for an unknown revision
            raise StoreError(f"database is at schema revision {rev}, unknown to this bench "
                             f"(head {script.get_current_head()}): written by a newer bench?",
                             hint="upgrade bench, or use another database") from None
    return rev


@dataclass
class Store:
    engine: Engine
    sessions: sessionmaker

    def session(self) -> Session:
        return self.sessions()

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None, *, upgrade_schema: bool = True) -> Store:
    """Open (and by default upgrade) the database; refuse it when it cannot be brought to head."""
    engine = make_engine(url)
    if upgrade_schema:
        upgrade(engine)
    elif check(engine) != head_revision():
        raise StoreError(f"database {engine.url.render_as_string()} is not at the schema head",
                         hint="run `bench db upgrade`")
    return Store(engine, sessionmaker(engine, expire_on_commit=False))


def _revision(message: str) -> None:
    """Developer helper: autogenerate a new revision against a scratch SQLite at head."""

    with tempfile.TemporaryDirectory() as d:
        engine = make_engine(f"sqlite:///{d}/scratch.db")
        upgrade(engine)
        with engine.begin() as conn:
            command.revision(_alembic_config(conn), message=message, autogenerate=True)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "revision":
    _revision(sys.argv[2])
