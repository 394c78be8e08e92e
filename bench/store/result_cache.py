"""Results views' outputs kept in the database, served while nothing they read has changed.

Migration 0007 keeps a counter, results_generation.n, that the database's own triggers move on
every insert, update or delete of a table results read (runs, verdicts, cells, hosts,
campaigns, workloads, fingerprints, engine_runs), whatever code writes. `cached(store, view,
args, compute)` reads the counter, then looks up the entry of (view, args, this controller's
source version) stored at that generation: found, its JSON is the answer; else compute()
runs, and its output is stored under the generation read *before* it ran. Reading the counter
first makes an entry never older than its generation (a change committed meanwhile moves the
counter past it, so the next reader recomputes). The output is exactly the computation's: the
entry is its JSON, and a view whose output JSON does not give back (a tuple, a non-string
key) is stored as nothing (tests/local/store/test_results_cache.py compares every view, filter
and database kind with the computation).

Storing is best effort and never fails a reader: a read-only database or role, a writer
holding SQLite's lock longer than PUT_WAIT_MS, or a concurrent reader storing the same entry
leaves the answer uncached. At most MAX_ENTRIES entries of MAX_BYTES each are kept; older
generations are deleted whenever one is stored.

Since migration 0008 an entry outlives writes that do not touch what it reads: the triggers
also keep, per cell id, the generation of the last change to a run of that cell
(results_dirty; 0 stands for every cell). An entry stored at generation g whose view names the
cells it reads (`depends`) is served at a later generation when no cell it reads, and no 0,
has a row above g; it is then moved to the current generation, so the next reader finds it at
once. A view that can bring its stored output up to date from the changed cells alone does so
through `parts()` (bench.store.result_cache_parts: a matrix recomputes the summaries of the
cells a write touched, not of 100,000 runs).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError

from bench.store import result_serve
from bench.store.db import Store

log = logging.getLogger(__name__)

FORMAT = result_serve.FORMAT      # of the key and the stored JSON
ENABLED = True                    # False: every call computes (tests of the computation)
MAX_ENTRIES = 64
MAX_BYTES = 64 << 20
PUT_WAIT_MS = 250                 # how long storing waits for SQLite's write lock
# the ids of the cells a view reads (None: every cell), asked only when some cell changed
Depends = Callable[[Store], "set[int] | None"]


def cache_key(view: str, args: dict) -> str:
    return result_serve.cache_key(view, args)


def generation(store: Store) -> int | None:
    """The current generation (None: the counter's row is missing, so nothing is cached)."""
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT n FROM results_generation WHERE id = 1")).scalar()


class _Dict(dict):
    json_text: str


class _List(list):
    json_text: str


def json_text(out: Any) -> str | None:
    """The JSON text of a view's output that cached() returned (what `json.dumps(out,
    indent=2)` gives, kept from storing or read from the store), else None. It is the
    output's text as returned: whoever changes the output writes its JSON anew."""
    return out.json_text if isinstance(out, (_Dict, _List)) else None


def _with_text(out: Any, blob: str) -> Any:
    kept: _Dict | _List = _Dict(out) if isinstance(out, dict) else _List(out)
    kept.json_text = blob
    return kept


def cached(store: Store, view: str, args: dict, compute: Callable[[], Any],
           depends: Depends | None = None) -> Any:
    """compute()'s output, or the stored copy of it valid at the current generation (module
    doc); either way with its JSON text (json_text) when it is stored or storable."""
    if not ENABLED:
        return compute()
    key = cache_key(view, args)
    gen, data = _get(store, key, depends)
    if data is not None:
        return _with_text(json.loads(data), data)
    out = compute()
    blob = _round_trip(out)
    if blob is None:
        return out
    if gen is not None and len(blob) <= MAX_BYTES:
        put(store, key, gen, blob)
    return _with_text(out, blob)


def lookup(store: Store, view: str, args: dict, depends: Depends | None = None) -> Any | None:
    """The stored output of `view` with `args` (all of the view's arguments but the store, as
    cached_view keys them) at the current generation, with its json_text; None when there is
    none. Lets a caller skip importing the view's module when the answer is stored."""
    if not ENABLED:
        return None
    _, data = _get(store, cache_key(view, args), depends)
    return None if data is None else _with_text(json.loads(data), data)


def _get(store: Store, key: str, depends: Depends | None = None
         ) -> tuple[int | None, str | None]:
    """(the current generation, the entry of `key` valid at it or None). An entry of an older
    generation is valid when `depends` names the cells it reads (None: every cell) and no
    change since touched one of them (results_dirty); it is then moved to the current one."""
    with store.engine.connect() as conn:
        gen = conn.execute(text("SELECT n FROM results_generation WHERE id = 1")).scalar()
        row = None if gen is None else conn.execute(
            text("SELECT generation FROM results_cache WHERE key = :k"), {"k": key}).first()
        if gen is None or row is None or row[0] > gen or (row[0] != gen and depends is None):
            return gen, None
        dirty = set() if row[0] == gen else changed_cells(conn, row[0])
    if dirty is None or 0 in dirty:
        return gen, None
    if dirty:
        need = depends(store) if depends is not None else None
        if need is None or dirty & need:
            return gen, None
    with store.engine.connect() as conn:
        data = conn.execute(text("SELECT data FROM results_cache WHERE key = :k "
                                 "AND generation = :g"), {"k": key, "g": row[0]}).scalar()
    if data is not None and row[0] != gen:
        _move(store, key, row[0], gen)
    return gen, data


def changed_cells(conn: Any, since: int) -> set[int] | None:
    """Ids of the cells changed after generation `since` (0: every cell); None when the
    database keeps no such record (before migration 0008)."""
    try:
        return {int(c) for c, in conn.execute(
            text("SELECT cell_id FROM results_dirty WHERE generation > :g"), {"g": since})}
    except DBAPIError:
        conn.rollback()
        return None


def _move(store: Store, key: str, old: int, gen: int) -> None:
    """Mark a still valid entry as of generation `gen` (best effort, as put())."""
    _write(store, lambda conn: conn.execute(
        text("UPDATE results_cache SET generation = :g WHERE key = :k AND generation = :o"),
        {"g": gen, "k": key, "o": old}))


def _round_trip(out: Any) -> str | None:
    """The JSON text of `out` (indented as bench prints JSON) when it is an object or an array
    and loading it gives `out` back exactly, else None. Equal is exact here: JSON keeps int,
    float, bool and None apart, and a tuple or a non-string key would come back unequal (a
    NaN, unequal to itself, leaves the output uncached). Told by result_cache_json.exact,
    which walks `out` once, rather than by loading the text back (a quarter of a second for
    a matrix at 100,000 runs)."""
    if not isinstance(out, (dict, list)):
        return None
    from bench.store.result_cache_json import dumps, exact    # dumps: json.dumps(indent=2)
    try:
        return dumps(out) if exact(out) else None
    except (TypeError, ValueError, RecursionError):
        return None


def put(store: Store, key: str, gen: int, blob: str) -> bool:
    """Store one entry, in place of the key's older one; when MAX_ENTRIES are kept, the
    entries of the oldest generations go first. False when it could not be stored."""
    def write(conn: Any) -> None:
        conn.execute(text("DELETE FROM results_cache WHERE key = :k"), {"k": key})
        n = conn.execute(text("SELECT count(*) FROM results_cache")).scalar() or 0
        if n >= MAX_ENTRIES:
            keep = conn.execute(text("SELECT generation FROM results_cache ORDER BY generation "
                                     "DESC LIMIT 1 OFFSET :o"), {"o": MAX_ENTRIES - 2}).scalar()
            conn.execute(text("DELETE FROM results_cache WHERE generation <= :g"), {"g": keep})
        conn.execute(text("INSERT INTO results_cache (key, generation, data) "
                          "VALUES (:k, :g, :d)"), {"k": key, "g": gen, "d": blob})
    return _write(store, write)


def _write(store: Store, write: Callable[[Any], Any]) -> bool:
    """Run write(conn) in one transaction, waiting at most PUT_WAIT_MS for SQLite's lock;
    False (logged at debug) when the database refused it."""
    sqlite = store.engine.dialect.name == "sqlite"
    try:
        with store.engine.connect() as conn:
            raw = conn.connection.dbapi_connection if sqlite else None
            if raw is not None:
                raw.execute(f"PRAGMA busy_timeout = {PUT_WAIT_MS}")
            try:
                with conn.begin():
                    write(conn)
            finally:
                if raw is not None:
                    from bench.store.db import SQLITE_BUSY_S
                    raw.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_S * 1000)}")
        return True
    except (DBAPIError, IntegrityError) as exc:
        log.debug("results cache: not stored (%s)", str(exc).splitlines()[0])
        return False


def cached_view(name: str, depends: Callable[..., "set[int] | None"] | None = None
                ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A view f(store, ...) served through cached(): keyed by `name` and f's arguments (all
    but the store, defaults filled in); f itself stays as the wrapper's __wrapped__.
    depends(store, **key) names the ids of the cells f reads (None: every cell)."""
    import functools
    import inspect

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def view(store: Store, *args: Any, **kw: Any) -> Any:
            bound = sig.bind(store, *args, **kw)
            bound.apply_defaults()
            key = {k: v for k, v in bound.arguments.items() if k != "store"}
            dep = None if depends is None else (lambda st: depends(st, **key))
            return cached(store, name, key, lambda: fn(store, *args, **kw), dep)
        return view
    return wrap
