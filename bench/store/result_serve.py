"""A stored results view served with the standard library alone: no SQLAlchemy, alembic, typer
or rich, which were most of a served `bench results ... --json` at 100,000 runs (Python's
start and those imports: 0.3-0.4 s of a 0.5 s goal).

`stored_text(db, view, args)` answers the JSON text that bench.store.result_cache.lookup would
give for the same database and arguments, or None whenever it is not sure to: then the caller
takes the ordinary way (open_store, lookup, compute), which also says every error. It answers
only an entry stored at the database's current generation (one statement reads both, one
snapshot), of a database it reaches as open_store would reach it for a reader: a SQLite file
(`--db` path or sqlite:/// URL, or the default) that exists, or a PostgreSQL URL of plain
parts (user, password, host, port, database; host and port in the query) that psycopg is
given as SQLAlchemy's psycopg dialect gives them (tests/unit/test_result_serve.py compares
the two). The schema is checked as require_head checks it: under bench's schema lock (the
flock of `<file>.lock`, PostgreSQL's advisory lock), alembic_version must hold the head
alone. An older entry that later writes left valid, a URL of other parts, any error: None.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

FORMAT = 1                        # of the key and the stored JSON (result_cache.FORMAT)
PG_SCHEMA_LOCK_KEY = int.from_bytes(b"benchmig", "big")     # bench.store.db's schema lock
SQLITE_BUSY_S = 60.0                                          # bench.store.db's busy wait
_PLAIN = re.compile(r"[A-Za-z0-9._-]*\Z")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._/-]*\Z")
_READ = ("SELECT c.data FROM results_cache c, results_generation g "
         "WHERE g.id = 1 AND c.key = {p} AND c.generation = g.n")


def cache_key(view: str, args: dict) -> str:
    """The key of (view, args) under this controller's source version."""
    from bench.version import controller_version
    raw = json.dumps([FORMAT, controller_version(), view, args], sort_keys=True, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()


def stored_text(db: str | None, view: str, args: dict) -> str | None:
    """The stored JSON text of `view` with `args` at the current generation (module doc)."""
    text = db or os.environ.get("BENCH_DB") or ""
    if not text:
        from bench.paths import bench_home
        text = f"sqlite:///{bench_home() / 'bench.db'}"
    try:
        path = sqlite_path(text)
        if path is not None:
            return _from_sqlite(path, cache_key(view, args))
        kw = pg_connect_args(text)
        if kw is not None:
            return _from_pg(kw, cache_key(view, args))
    except Exception:  # noqa: BLE001 - any doubt: the ordinary way answers (and says why)
        return None
    return None


def sqlite_path(text: str) -> Path | None:
    """The file that resolve_url and make_engine make of `text` (a path, or a sqlite:/// URL,
    of characters a URL does not read otherwise), else None."""
    if any(c in text for c in "%?#@") or not text.strip():
        return None
    if "://" not in text:
        return Path(text).expanduser().absolute()
    rest = text[len("sqlite:///"):]
    if not text.startswith("sqlite:///") or not rest or rest.startswith(("file:", "~")) \
            or rest == ":memory:":
        return None
    return Path(rest)


def pg_connect_args(text: str) -> dict[str, Any] | None:
    """psycopg.connect's keywords for a PostgreSQL URL of plain parts, as SQLAlchemy's
    psycopg dialect makes them; None for anything else."""
    scheme, sep, _ = text.partition("://")
    if scheme not in ("postgresql+psycopg", "postgresql", "postgres") or not sep:
        return None
    u = urlsplit("x" + text[len(scheme):])
    if u.fragment or not u.path.startswith("/") or not _PLAIN.match(u.path[1:]):
        return None
    who, at, where = u.netloc.rpartition("@")
    user, colon, password = who.partition(":")
    host, _, port = where.partition(":")
    if not all(_PLAIN.match(x) for x in (user, password, host, port)) or "[" in where:
        return None
    kw: dict[str, Any] = {}
    for name, value in (("host", host), ("dbname", u.path[1:]), ("user", user),
                        ("password", password if colon else "")):
        if value:
            kw[name] = value
    if port:
        kw["port"] = int(port)
    query = parse_qsl(u.query, keep_blank_values=True, strict_parsing=False)
    names = [k for k, _ in query]
    if len(set(names)) != len(names) or not set(names) <= {"host", "port"}:
        return None
    for k, v in query:
        if not _PLAIN_PATH.match(unquote(v)) or not v:
            return None
        kw[k] = unquote(v)
    return kw or None


_REVISION_LINE = re.compile(r"^(down_revision|revision) = ['\"](\w+)['\"]$|^down_revision = None$",
                            re.M)


def head() -> str | None:
    """The migrations' head as bench.store.db.quick_head reads it off the files' `revision`
    and `down_revision` lines; None when they do not say it plainly (a test holds the two to
    each other and to alembic's)."""
    revs, downs = set(), set()
    for f in sorted((_migrations_dir() / "versions").glob("*.py")):
        found = {m.group(1): m.group(2) for m in _REVISION_LINE.finditer(f.read_text())
                 if m.group(1)}
        if "revision" in found:
            revs.add(found["revision"])
            downs.add(found.get("down_revision"))
    heads = revs - downs
    return heads.pop() if len(heads) == 1 else None


def _migrations_dir() -> Path:
    spec = importlib.util.find_spec("bench.migrations")
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


def _from_sqlite(path: Path, key: str) -> str | None:
    import sqlite3
    from bench.paths import PRIVATE_FILE, tighten
    if not path.is_file():
        return None
    for suffix in ("", "-wal", "-shm", "-journal", ".lock"):   # as a reader's open does
        tighten(path.with_name(path.name + suffix), PRIVATE_FILE)
    at_head = head()
    if at_head is None:
        return None
    conn = sqlite3.connect(path, timeout=SQLITE_BUSY_S)
    try:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            at = [r for r, in conn.execute("SELECT version_num FROM alembic_version")]
        finally:
            os.close(fd)
        if at != [at_head]:
            return None
        row = conn.execute(_READ.format(p="?"), (key,)).fetchone()
    finally:
        conn.close()
    return None if row is None else row[0]


def _from_pg(kw: dict[str, Any], key: str) -> str | None:
    at_head = head()
    if at_head is None:
        return None
    import psycopg
    with psycopg.connect(**kw) as conn:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_SCHEMA_LOCK_KEY,))
            at = [r for r, in conn.execute("SELECT version_num FROM alembic_version")]
        if at != [at_head]:
            return None
        row = conn.execute(_READ.format(p="%s"), (key,)).fetchone()
    return None if row is None else row[0]
