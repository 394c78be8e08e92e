"""How result views read stored runs: their filters as conditions on runs' own columns, the
rows through the DBAPI cursor, and each run's identity (bench.judge.identity): the workload from
its stored identity (runs.workload_id, bench.store.workloads) or, for a run without one, from
the parts of its spec that identity.workload_of reads, extracted in SQL as one JSON array text
and parsed once per distinct text; fingerprints are read once per id.

The tables are named here as SQLAlchemy Core tables of the columns these reads name (RUNS,
CELLS, ...), not through bench.store.models: a results command then never imports the ORM
and its mapped classes (a tenth of a second of every `bench results`). The names are the
schema's (bench.store.models, which the migrations test holds to the migrations); a wrong
one fails every results test at once."""

from __future__ import annotations

import json
from operator import itemgetter
from typing import Any

from sqlalchemy import JSON, Boolean, Select, Text, cast, column, func, or_, select, table
from sqlalchemy.engine import Connection

from bench.judge import identity
from bench.judge.columns import METRIC_COLUMNS
from bench.matrix.cells import parse_cell
from bench.store.db import Store

_BOOLEAN = ("retained", "runner_ok", "mglru_loop_entry", "mglru_end", "hidden", "demo",
            "passed", "current")


def _table(name: str, *names: str, json: tuple[str, ...] = ()):
    return table(name, *[column(c, Boolean) if c in _BOOLEAN else column(c) for c in names],
                 *[column(c, JSON) for c in json])


RUNS = _table("runs", "id", "run_id", "campaign_id", "host_id", "cell_id", "workload_id",
              "fingerprint_id", "position", "repetition", "state", "retained", "bundle_digest",
              "nominal_miss_bytes_per_iteration", *METRIC_COLUMNS, json=("spec",))
CELL_COLS = ("capacity_bytes", "mechanism", "reclaim", "mode", "hints", "delivery")
CELLS = _table("cells", "id", "name", *CELL_COLS)
HOSTS = _table("hosts", "id", "name")
CAMPAIGNS = _table("campaigns", "id", "hidden", "demo")
WORKLOADS = _table("workloads", "id", json=("data",))
FINGERPRINTS = _table("fingerprints", "id", "digest", json=("data",))
VERDICTS = _table("verdicts", "id", "run_id", "rule", "version", "passed", "reason", "current")

SPEC_PARTS = ("workload", "agent", "engine", "plan_sha256", "pool_bytes")


def spec_parts(dialect: str):
    """A column holding SPEC_PARTS of runs.spec as a JSON array text, or the whole spec where
    the dialect has no JSON functions this knows."""
    if dialect == "sqlite":
        return func.json_extract(RUNS.c.spec, *[f"$.{p}" for p in SPEC_PARTS])
    if dialect == "postgresql":
        return cast(func.json_build_array(*[RUNS.c.spec.op("->")(p) for p in SPEC_PARTS]), Text)
    return RUNS.c.spec


def attach_identity(s, rows: list[dict], dialect: str) -> None:
    """Replace each row's `_pk`, `workload_id` and `fingerprint_id` by `workload`,
    `fingerprint` and `fingerprint_data`. The workload is the stored identity
    (bench.store.workloads); a run without one has it computed from its spec's parts."""
    wids = {r["workload_id"] for r in rows} - {None}
    stored = {wid: data for wid, data in s.execute(
        select(WORKLOADS.c.id, WORKLOADS.c.data).where(WORKLOADS.c.id.in_(wids)))} if wids else {}
    legacy = _legacy_parts(s, [r["_pk"] for r in rows if r["workload_id"] not in stored],
                           dialect)
    ids = {r["fingerprint_id"] for r in rows} - {None}
    fps = {fid: (digest, data) for fid, digest, data in s.execute(
        select(FINGERPRINTS.c.id, FINGERPRINTS.c.digest, FINGERPRINTS.c.data)
        .where(FINGERPRINTS.c.id.in_(ids)))} if ids else {}
    views = {fid: identity.fingerprint_view(digest, data) for fid, (digest, data) in fps.items()}
    none_view = identity.fingerprint_view(None, None)
    workloads: dict[Any, dict] = {}
    for r in rows:
        pk, wid, fid = r.pop("_pk"), r.pop("workload_id"), r.pop("fingerprint_id")
        w = stored.get(wid)
        if w is None:
            spec = legacy[pk]
            key = spec if isinstance(spec, str) else json.dumps(spec, sort_keys=True)
            w = workloads.get(key)
            if w is None:
                w = workloads[key] = identity.workload_of(_spec_of(spec))
        r["workload"] = w
        r["fingerprint"] = views.get(fid, none_view)
        r["fingerprint_data"] = fps.get(fid, (None, None))[1]


LEGACY_BATCH = 5000


def _legacy_parts(s, pks: list[int], dialect: str) -> dict[int, Any]:
    """{runs.id: its spec's SPEC_PARTS (spec_parts)} of runs read without a stored identity."""
    out: dict[int, Any] = {}
    for i in range(0, len(pks), LEGACY_BATCH):
        out.update({pk: parts for pk, parts in s.execute(
            select(RUNS.c.id, spec_parts(dialect)).where(RUNS.c.id.in_(pks[i:i + LEGACY_BATCH])))})
    return out


def _spec_of(parts: Any) -> dict | None:
    """The spec (or the SPEC_PARTS of it) that _spec_parts selected."""
    if isinstance(parts, str):
        parts = json.loads(parts)
    if isinstance(parts, list):
        return {k: v for k, v in zip(SPEC_PARTS, parts) if v is not None}
    return parts


def fetch_rows(conn: Connection, q: Select) -> list[Any]:
    """The rows of a Core select over plain columns, read through the DBAPI cursor of the
    connection: the values SQLAlchemy's result rows would hold (booleans as bool, which
    SQLite stores as 0/1; the other types these views read need no conversion on SQLite or
    psycopg) at about half the cost per row, which counts at 100,000 runs."""
    compiled = q.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
    params: Any = compiled.params
    if compiled.positiontup is not None:
        params = tuple(params[k] for k in compiled.positiontup)
    cur = conn.connection.cursor()
    try:
        cur.execute(str(compiled), params)
        rows: list[Any] = list(cur.fetchall())
    finally:
        cur.close()
    bools = [i for i, c in enumerate(q.selected_columns) if isinstance(c.type, Boolean)]
    if not bools or conn.dialect.name != "sqlite":
        return rows
    as_bool = {None: None, 0: False, 1: True}
    out = []
    for row in rows:
        v = list(row)
        for i in bools:
            x = v[i]
            v[i] = as_bool[x] if x in as_bool else bool(x)
        out.append(tuple(v))
    return out


def runs_filter(s, q, cells: dict, hosts: dict, *, cell, host, campaign, include_demo,
                mechanisms):
    """bench.store.queries.load_runs' filters as conditions on runs' own columns (`cells`:
    {id: (name, *CELL_COLS)}, `hosts`: {id: name})."""
    if cell:
        name = parse_cell(cell).name
        q = q.where(RUNS.c.cell_id.in_([i for i, c in cells.items() if c[0] == name]))
    if host:
        q = q.where(RUNS.c.host_id.in_([i for i, h in hosts.items() if h == host]))
    if mechanisms is not None:
        ix = 2                       # (name, capacity_bytes, mechanism, ...)
        q = q.where(RUNS.c.cell_id.in_([i for i, c in cells.items() if c[ix] in mechanisms]))
    if campaign:
        return q.where(RUNS.c.campaign_id == campaign)
    out = [CAMPAIGNS.c.hidden.is_(True)] + ([] if include_demo else [CAMPAIGNS.c.demo.is_(True)])
    left_out = list(s.execute(select(CAMPAIGNS.c.id).where(or_(*out))).scalars())
    if left_out:
        q = q.where(RUNS.c.campaign_id.is_(None) | RUNS.c.campaign_id.not_in(left_out))
    return q


def cells_hosts(conn) -> tuple[dict[int, list], dict[int, str]]:
    """({cell id: [name, *CELL_COLS]}, {host id: name}): small tables, read whole."""
    cells = {i: rest for i, *rest in conn.execute(
        select(CELLS.c.id, CELLS.c.name, *[CELLS.c[c] for c in CELL_COLS]))}
    return cells, {i: n for i, n in conn.execute(select(HOSTS.c.id, HOSTS.c.name))}


def runs_by_identity(store: Store, columns: tuple[str, ...], *, host=None, campaign=None,
                     include_demo: bool = False) -> list[tuple[dict, list[dict]]]:
    """[(first run's cell, host and identity, the runs' `columns`)] per (host, workload
    digest, fingerprint digest, cell) of the ingested runs in scope (runs_filter) but engine
    cells, in the order of their first runs, each part's runs in id order. The runs are read
    as tuples and split by their ids (cell, host, workload and fingerprint ids; a run without
    a stored workload identity alone): identity is attached to one row per split, not to
    every run (at 100,000 runs, a third of a matrix's time)."""
    run = RUNS.c
    n = len(columns)
    with store.engine.connect() as conn:
        cells, hosts = cells_hosts(conn)
        q = select(*[run[c] for c in columns], run.id, run.cell_id, run.host_id,
                   run.workload_id, run.fingerprint_id).where(run.bundle_digest.is_not(None))
        q = runs_filter(conn, q, cells, hosts, cell=None, host=host, campaign=campaign,
                        include_demo=include_demo, mechanisms=None)
        engine_cells = {i for i, c in cells.items() if parse_cell(c[0]).is_engine}
        splits: dict[tuple, list[tuple]] = {}
        for row in sorted(fetch_rows(conn, q), key=itemgetter(n)):
            if row[n + 1] in engine_cells:
                continue
            k = (*row[n + 1:], None if row[n + 3] is not None else row[n])
            rows = splits.get(k)
            if rows is None:
                rows = splits[k] = []
            rows.append(row)
        firsts = [{"cell": cells[c][0], "host": hosts[h], "_pk": rows[0][n],
                   "workload_id": w, "fingerprint_id": f}
                  for (c, h, w, f, _), rows in splits.items()]
        attach_identity(conn, firsts, store.engine.dialect.name)
    found: dict[tuple, tuple[dict, list[tuple]]] = {}
    for first, rows in zip(firsts, splits.values()):
        k = (first["host"], first["workload"]["digest"], first["fingerprint"]["digest"],
             first["cell"])
        if k in found:              # two stored identities of one digest (shown names differ)
            found[k][1].extend(rows)
            found[k][1].sort(key=itemgetter(n))
        else:
            found[k] = (first, list(rows))
    return [(first, [dict(zip(columns, row)) for row in rows])
            for first, rows in found.values()]
