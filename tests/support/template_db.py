"""Databases at the migrations' head without migrating each one (1.0-1.4 s a database): the
migrations run once per test process into a template, and each test gets a copy of it. SQLite:
the template file copied (bench closes it checkpointed, so the file is the whole database);
PostgreSQL: CREATE DATABASE ... TEMPLATE. Tests that are about the migrations start from an
empty database instead and run them for real (tests/local/store/test_migrations.py, the 00NN
tests)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

_sqlite_template: list[Path] = []       # this process's template file, built on first use


def _build_sqlite_template() -> Path:
    from bench.store.db import open_store
    where = Path(tempfile.mkdtemp(prefix="bench-template-"))
    atexit.register(shutil.rmtree, where, True)
    path = where / "head.db"
    open_store(f"sqlite:///{path}").close()
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size:
        raise AssertionError(f"{wal} still holds pages after close: a copy of {path} alone "
                             "would miss them")
    return path


def sqlite_at_head(path: Path) -> str:
    """A SQLite database at head at `path` (a copy of the template, private as bench makes
    its files); its URL."""
    if not _sqlite_template:
        _sqlite_template.append(_build_sqlite_template())
    shutil.copyfile(_sqlite_template[0], path)
    os.chmod(path, 0o600)
    return f"sqlite:///{path}"


def pg_admin(srv: dict, sql: str) -> None:
    """Run one statement on the server's maintenance database (autocommit: CREATE DATABASE
    cannot run in a transaction)."""
    import psycopg
    with psycopg.connect(host=srv["sock"], port=srv["port"], user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(sql)


def pg_database_url(srv: dict, name: str) -> str:
    return f"postgresql+psycopg://postgres@/{name}?host={srv['sock']}&port={srv['port']}"


def pg_template(srv: dict) -> str:
    """Create a database, migrate it to head and close every connection to it (CREATE DATABASE
    ... TEMPLATE refuses a template anyone is connected to); its name."""
    from bench.store.db import open_store
    name = f"bench_template_{os.getpid()}"
    pg_admin(srv, f"CREATE DATABASE {name}")
    open_store(pg_database_url(srv, name)).close()
    return name
