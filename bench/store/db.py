"""Open the results database: resolve its URL, bring it to the migrations' head or refuse it.

Where: `--db`, else $BENCH_DB, else a SQLite file $XDG_DATA_HOME/bench/bench.db
(~/.local/share/bench/bench.db). Either is a URL (`sqlite:////abs/x.db`,
`postgresql+psycopg://user@host/db`; `postgresql://` and `postgres://` mean psycopg) or, without
`://`, the path of a SQLite file (`/tmp/x.db`, `./x.db`, `~/x.db`). SQLite runs with WAL and
foreign keys on; PostgreSQL (the `postgres` extra: `pip install 'bench[postgres]'`) runs the
same code.

Writers and readers: a command that stores results (open_store(write=True): campaigns, runs,
ingest, `bench db upgrade`) creates the database when it is new and upgrades it to head; a
command that only reads (write=False: runs, results, compare, export, campaigns, watch, ...)
never creates nor migrates one: a missing SQLite file, an empty database or one at an older
revision is a StoreError naming the fix (`bench db upgrade`), and the file is left as it was
(absent stays absent). Both refuse what is not a bench database (a foreign schema, a file that
is not SQLite at all, a revision newer than this bench's migrations) with one line.

Several bench processes may open one database at once (a campaign, `bench watch`, a second
controller, `bench ingest`): reading the schema revision and upgrading it happen under one
lock, so the migrations run once and nobody sees a half-migrated schema. SQLite: an flock on
`<database>.lock` beside the file (its DDL is not transactional under pysqlite), held from
the revision check to the end of the upgrade; PostgreSQL: pg_advisory_xact_lock on a fixed
key, taken in the same transaction and connection that alembic migrates with (its DDL is
transactional: the others then see the whole new schema or none of it). At head the lock is
held for the revision check alone (3 ms on SQLite on a 2-core test machine; a fresh
database's migrations: 20 ms).

A SQLite path is checked before anything touches it (bench.store.dbfile): a regular file
with SQLite's header, or absent in a directory that exists (the default one is made, 0700);
a device, a FIFO, a file that is not SQLite is refused in one line and left as it was. A
SQLite database is private to the user that runs bench (bench.paths): the file is created
0600 before SQLite first opens it (SQLite gives its -wal and -shm files the database's mode),
and a looser database, -wal, -shm or lock file (made by an earlier bench) is tightened to
0600 once the schema check has found it bench's, without a word. What the file system does
to a SQLite database later (full, read-only, I/O errors) is a StoreError naming it, with
the fix, on every statement (dbfile.sqlite_failure).
"""

from __future__ import annotations

import errno
import fcntl
import importlib.util
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sqlalchemy import (CursorResult, Result, create_engine, event, inspect, literal_column, select,
                        text)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from bench.errors import InputError, StoreError
from bench.paths import PRIVATE_FILE, bench_home, tighten
from bench.store.dbfile import (check_sqlite_file, create_sqlite_file, failure,
                                sqlite_failure)

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker
# sqlalchemy.orm and the dialects' insert are imported where they are used: a results
# command, which reads through Core alone, needs neither

# the schema lock's key: pg_advisory_xact_lock of b"benchmig" as a big-endian bigint
PG_SCHEMA_LOCK_KEY = int.from_bytes(b"benchmig", "big")
SQLITE_BUSY_S = 60.0            # how long a SQLite connection waits for a busy database


T = TypeVar("T")


def referenced(s: Session, model: type[T], key: Any) -> T:
    """The row of `model` that a foreign key names (so it exists; a StoreError if it does not)."""
    obj = s.get(model, key)
    if obj is None:
        raise StoreError(f"the database is inconsistent: no {model.__name__} {key!r}")
    return obj


def get_or_create(s: Session, model: type[T], defaults: dict | None = None, **key: Any) -> T:
    """The row of `model` whose unique key columns are `key`, inserted with `defaults` when
    missing; safe when another process inserts the same key at the same moment. The insert is
    INSERT ... ON CONFLICT DO NOTHING and the row is read back either way: the loser of a race
    waits for the winner's transaction (a PostgreSQL unique index, SQLite's write lock) and
    then reads its row. Not a SAVEPOINT around a plain INSERT: under pysqlite a savepoint that
    opens the transaction commits it when released, which would make the insert outlive a
    rollback of the rest."""
    row = s.scalar(select(model).filter_by(**key))
    if row is not None:
        return row
    insert_if_absent(s, model, **key, **(defaults or {}))
    row = s.scalar(select(model).filter_by(**key))
    if row is None:          # the insert collided on another unique column
        raise StoreError(f"cannot add {model.__name__} {key}: another row holds one of its "
                         "unique values")
    return row


def insert_if_absent(s: Session, model: type, **values: Any) -> bool:
    """INSERT one row ... ON CONFLICT DO NOTHING; True when this statement wrote it (else a
    row with one of its unique values exists: another writer's, committed). Told by
    RETURNING on PostgreSQL (its rowcount reads -1 through SQLAlchemy), by the row count on
    SQLite (RETURNING needs SQLite 3.35)."""
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert
        stmt = pg_insert(model).values(**values).on_conflict_do_nothing()
        return s.execute(stmt.returning(literal_column("1"))).first() is not None
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert
        lite = sqlite_insert(model).values(**values).on_conflict_do_nothing()
        return rowcount(s.execute(lite)) == 1
    raise StoreError(f"bench stores results in SQLite or PostgreSQL, not {dialect}")


def rowcount(result: Result) -> int:
    """The rows an UPDATE or DELETE run by Session.execute matched."""
    # Session.execute is typed as returning a Result; for an UPDATE or DELETE without RETURNING
    # it returns a CursorResult, the Result that has rowcount
    return cast(CursorResult, result).rowcount


def default_url() -> str:
    if os.environ.get("BENCH_DB"):
        return os.environ["BENCH_DB"]
    return f"sqlite:///{bench_home() / 'bench.db'}"


def resolve_url(db: str | None = None) -> str:
    """The URL of `db` (--db's text: a URL, or a SQLite file's path), default_url() for None.
    A path becomes sqlite:/// and its absolute path (`~` expanded)."""
    text = db or default_url()
    if "://" in text:
        return text
    if not text.strip():
        raise InputError("--db is empty", hint="give a path (./bench.db) or a URL")
    return f"sqlite:///{Path(text).expanduser().absolute()}"


# backends bench runs on, and the driver a bare scheme means
_BACKENDS = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg",
             "postgres": "postgresql+psycopg"}
URL_EXAMPLES = "a path (./bench.db), sqlite:////abs/bench.db or postgresql+psycopg://user@host/db"


def _own_sqlite(engine: Engine) -> None:
    """A SQLite database found to be bench's: it and its companions tightened to 0600."""
    path = sqlite_path(engine)
    if path is not None:
        for suffix in ("", "-wal", "-shm", "-journal", ".lock"):
            tighten(path.with_name(path.name + suffix), PRIVATE_FILE)


def migrations_dir() -> Path:
    """bench.migrations when installed as a package, else migrations/ of the checkout."""
    try:
        spec = importlib.util.find_spec("bench.migrations")
    except ModuleNotFoundError:
        spec = None
    if spec is not None and spec.origin:
        return Path(spec.origin).parent
    return Path(__file__).resolve().parents[2] / "migrations"


# alembic is imported where it is used: a reader of a database at head never needs it (see
# require_head), and it costs a results command a tenth of its time at 100,000 runs

def _alembic_config(connection=None):
    from alembic.config import Config
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    """The newest migration (None only for a migrations directory without any)."""
    from alembic.script import ScriptDirectory
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


_REVISION_LINE = re.compile(r"^(down_revision|revision) = ['\"](\w+)['\"]$|^down_revision = None$",
                            re.M)


@lru_cache(maxsize=1)
def quick_head() -> str | None:
    """head_revision() read off the migration files' `revision = ...` and `down_revision = ...`
    lines (a few small files, no alembic): the one revision no other one revises; None when
    the files do not say it plainly (then callers ask alembic). A test holds it to alembic's."""
    revs, downs = set(), set()
    for f in sorted((migrations_dir() / "versions").glob("*.py")):
        found: dict[str, str] = {m.group(1): m.group(2)
                                 for m in _REVISION_LINE.finditer(f.read_text()) if m.group(1)}
        if "revision" not in found:
            continue
        revs.add(found["revision"])
        downs.add(found.get("down_revision"))
    heads = revs - downs
    return heads.pop() if len(heads) == 1 else None


def sqlite_path(engine: Engine) -> Path | None:
    """The file of a SQLite database (None for other databases and in-memory ones)."""
    db = engine.url.database
    if engine.dialect.name != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).expanduser()


def _lock_fd(path: Path) -> tuple[int | None, bool]:
    """An open descriptor of the lock file (made 0600) and whether this call made it; None
    where it can be neither made nor opened (a read-only directory: then nobody can migrate
    the database there). Never through a symlink."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
    except FileExistsError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise failure(exc, path, "lock") from None
    for mode in (flags, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK):
        try:
            return os.open(path, mode), False
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise failure(exc, path, "lock") from None
    return None, False


@contextmanager
def schema_lock(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that holds bench's schema lock (see the module doc):
    whoever holds it may read the revision and upgrade; the others wait. A lock file this
    call made beside a database it then refuses (not bench's, newer) is removed again."""
    path = sqlite_path(engine)
    lock = path.with_name(path.name + ".lock") if path is not None else None
    fd, made = _lock_fd(lock) if lock is not None else (None, False)
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"),
                             {"k": PG_SCHEMA_LOCK_KEY})
            yield conn
    except StoreError:
        if made and lock is not None:
            lock.unlink(missing_ok=True)
        raise
    finally:
        if fd is not None:
            os.close(fd)            # releases the flock


def _parse_url(url: str):
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):         # ValueError: a port that is not a number
        raise InputError(f"database {url!r} is neither a path nor a URL",
                         hint=f"give {URL_EXAMPLES}") from None
    backend, _, driver = u.drivername.partition("+")
    if backend not in _BACKENDS:
        raise InputError(f"database URL {u.render_as_string()!r}: bench stores results in "
                         f"SQLite or PostgreSQL, not {backend!r}", hint=f"give {URL_EXAMPLES}")
    if not driver and backend != "sqlite":
        u = u.set(drivername=_BACKENDS[backend])
    return u


def _sqlite_file(u) -> Path | None:
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:" \
            or u.database.startswith("file:"):
        return None
    return Path(u.database).expanduser()


def check_database(url: str | None = None, *, write: bool = True) -> None:
    """make_engine's checks of a SQLite path (dbfile.check_sqlite_file), creating nothing: a
    command that works before it opens the store (a demo's trace, a schedule's probes) calls
    this first, so that a --db it would refuse is refused before that work. A server's URL
    passes (its errors come when it is opened)."""
    path = _sqlite_file(_parse_url(resolve_url(url)))
    if path is not None:
        check_sqlite_file(path, write=write)


def make_engine(url: str | None = None, *, create: bool = True) -> Engine:
    """An engine for `url` (resolve_url: a URL or a SQLite path; None: the default).
    create=False (readers): a SQLite file must already exist; nothing is created."""
    u = _parse_url(resolve_url(url))
    path = _sqlite_file(u)
    if path is not None and not check_sqlite_file(path, write=create):
        create_sqlite_file(path)
    sqlite = u.get_backend_name() == "sqlite"
    try:
        engine = create_engine(u, future=True,
                               **({"connect_args": {"timeout": SQLITE_BUSY_S}} if sqlite else {}))
    except (NoSuchModuleError, ImportError) as exc:
        hint = ("install the postgres extra: pip install 'bench[postgres]' (from a "
                "checkout: pip install '.[postgres]')"
                if u.get_backend_name() == "postgresql" else f"give {URL_EXAMPLES}")
        raise StoreError(f"no driver for {u.drivername}: {exc}", hint=hint) from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "handle_error", _sqlite_failure)
        event.listen(engine, "connect", _sqlite_pragmas if create else _sqlite_reader_pragmas)
        if create:
            event.listen(engine, "connect", _own_transactions)
            event.listen(engine, "begin", _begin_immediate)
            for ev in ("commit", "rollback"):
                event.listen(engine, ev, _end_writer)
            event.listen(engine.pool, "checkin", _checkin_writer)
    return engine


def _sqlite_failure(ctx) -> BaseException | None:
    """What the file system did to a SQLite database (full, read-only, I/O error...) as a
    StoreError naming it, for every statement of every command (dbfile.sqlite_failure)."""
    engine = ctx.engine
    if engine is None:
        return None
    return sqlite_failure(engine.url.render_as_string(), sqlite_path(engine),
                          ctx.original_exception)


def as_store_error(exc: BaseException) -> StoreError | None:
    """A database error that reached the CLI unhandled, as one StoreError line (its cause and
    the database's own words); None when `exc` is not a database error."""
    if not isinstance(exc, DBAPIError):
        return None
    first = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    return StoreError(f"the database failed: {first}",
                      hint="run the command again; if it fails the same way, run it with -vv "
                           "and report what it shows")


# A writer's SQLite transactions take the write lock when they begin (BEGIN IMMEDIATE), and a
# busy database is waited for up to SQLITE_BUSY_S: a transaction that reads and then writes
# (a state transition, an ingest) would otherwise fail at once with `database is locked`
# whenever another connection wrote in between (WAL cannot upgrade a stale read snapshot,
# and no busy handler is run for it): a campaign of 64 hosts lost runs to it.


def _own_transactions(dbapi_conn, _record) -> None:
    dbapi_conn.isolation_level = None       # pysqlite begins nothing itself: _begin_immediate


# Within one process, writers of one SQLite file queue on a lock of their own before BEGIN
# IMMEDIATE instead of in SQLite's busy handler, which polls with sleeps growing to 100 ms:
# a campaign's 64 host threads and its ingest thread polled each other for seconds per write
# (a writer that had just missed the lock slept on while it was free). A thread waits for it
# at most SQLITE_BUSY_S, then begins anyway (SQLite's own wait, as before). The lock is let go
# when the transaction ends (commit, rollback, or its connection returned to the pool).
_WRITERS: dict[str, threading.RLock] = {}
_WRITERS_GUARD = threading.Lock()
_HELD = "bench_writer_lock"


def _writer_lock(conn) -> threading.RLock:
    key = str(conn.engine.url.database)
    with _WRITERS_GUARD:
        return _WRITERS.setdefault(key, threading.RLock())


def _begin_immediate(conn) -> None:
    if _HELD not in conn.info:
        lock = _writer_lock(conn)
        if lock.acquire(timeout=SQLITE_BUSY_S):
            conn.info[_HELD] = lock
    try:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    except BaseException:
        _release(conn.info)
        raise


def _release(info: dict) -> None:
    lock = info.pop(_HELD, None)
    if lock is not None:
        try:
            lock.release()
        except RuntimeError:        # not this thread's (a connection collected elsewhere)
            pass


def _end_writer(conn) -> None:
    _release(conn.info)


def _checkin_writer(_dbapi_conn, record) -> None:
    if record is not None:
        _release(record.info)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    tables = {r[0] for r in cur.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not tables or "alembic_version" in tables:   # new or bench's: never another's file
        cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_reader_pragmas(dbapi_conn, _record) -> None:
    """A reader's connection: no journal_mode (a database bench made is WAL already, and
    setting it would write a header into an empty file)."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def upgrade(engine: Engine) -> tuple[str | None, str | None]:
    """Bring the database to head; returns (revision before, head). Refuses foreign schemas.
    Under the schema lock: of several processes upgrading one database, one migrates and the
    others find it at head."""
    head = head_revision()
    with _opening(engine), schema_lock(engine) as conn:
        before = _check(engine, conn)
        if before != head:
            from alembic import command
            command.upgrade(_alembic_config(conn), "head")
    return before, head


def check(engine: Engine) -> str | None:
    """The database's revision; StoreError when it is not ours or newer than this bench
    (read under the schema lock: never a half-migrated schema)."""
    with _opening(engine), schema_lock(engine) as conn:
        return _check(engine, conn)


@contextmanager
def _opening(engine: Engine) -> Iterator[None]:
    """DBAPI errors while opening (unreachable server, unreadable file, a file that is not
    SQLite: "file is not a database") as one StoreError line."""
    try:
        yield
    except DBAPIError as exc:
        first = (str(exc.orig).strip().splitlines() or ["?"])[0]
        hint = ("point --db at a bench database, or a new file for a new one"
                if "not a database" in first else None)
        raise StoreError(f"cannot open the database {engine.url.render_as_string()}: "
                         f"{first}", hint=hint) from None


def _check(engine: Engine, conn: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    rev = MigrationContext.configure(conn).get_current_revision()
    tables = set(inspect(conn).get_table_names())
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
    _own_sqlite(engine)         # bench's: now (never before) its files are made private
    return rev


@dataclass
class Store:
    engine: Engine
    sessions: sessionmaker | None = None     # made on first use: readers may not need one

    def session(self) -> Session:
        if self.sessions is None:
            from sqlalchemy.orm import sessionmaker
            self.sessions = sessionmaker(self.engine, expire_on_commit=False)
        return self.sessions()

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None, *, write: bool = True) -> Store:
    """Open the database. write=True (a command that stores): create it when new and upgrade
    it to head. write=False (a reader): it must exist at head; never created nor migrated
    (module doc). Refused, either way, when it is not a bench database."""
    engine = make_engine(url, create=write)
    try:
        if write:
            upgrade(engine)
        else:
            require_head(engine)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine)


def require_head(engine: Engine) -> str:
    """The revision of a database a reader may use: at head; else a StoreError with the fix.
    A database at head is told by its alembic_version row alone (under the schema lock, as
    check() reads it), without loading alembic; anything else takes check()'s whole way."""
    head = quick_head()
    if head is not None:
        with _opening(engine), schema_lock(engine) as conn:
            if engine.dialect.has_table(conn, "alembic_version") and conn.execute(
                    text("SELECT version_num FROM alembic_version")).scalars().all() == [head]:
                _own_sqlite(engine)
                return head
    where = engine.url.render_as_string()
    cur, head = check(engine), head_revision()
    if cur is None:
        raise StoreError(f"{where} holds no bench results yet (an empty database)",
                         hint="run a campaign, or `bench db upgrade` to give it the schema")
    if cur != head:
        raise StoreError(f"{where} is at schema revision {cur}, older than this bench's "
                         f"{head}", hint="run `bench db upgrade` (add --db as here)")
    return cur


def _revision(message: str) -> None:
    """Developer helper: autogenerate a new revision against a scratch SQLite at head."""

    with tempfile.TemporaryDirectory() as d:
        engine = make_engine(f"sqlite:///{d}/scratch.db")
        upgrade(engine)
        with engine.begin() as conn:
            from alembic import command
            command.revision(_alembic_config(conn), message=message, autogenerate=True)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "revision":
    _revision(sys.argv[2])
