"""What a cached results view reads, by cell, and a matrix kept as parts that a write updates
cell by cell (bench.store.result_cache, migration 0008).

A matrix (bench.store.queries.matrix) is built from one summary per (result group, cell):
its parts, [host, workload, fingerprint, fingerprint data, cell, first run's id, summary],
each over the runs of one group in one cell. The parts of one set of filters are kept as one
entry (compact JSON) shared by every matrix kind. At a later generation only the cells that
changed since (results_dirty) have their runs read and summarized again; the others' parts
are kept as stored. A change to every cell (0), a workload prefix (matched against every run
in scope) or a database without results_dirty reads every run, as before. Assembling the
groups from parts gives what grouping the runs gives: groups in identity.group_runs order,
each group's workload, fingerprint and fingerprint data those of its first run, its cells in
the order of their first run (tests/local/store/test_results_incremental.py compares the
incremental path with a full computation after writes, a changed verdict among them)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from bench.store import result_cache
from bench.store.db import Store

FILTERS = ("host", "campaign", "workload", "include_demo")


def cell_depends(store: Store, *, cell: str, workload: str | None = None,
                 **_: Any) -> set[int] | None:
    """Ids of the cells bench.store.queries.cell_results reads for `cell`: the cell's own,
    and for a balloon cell every balloon, cgroup and memboot cell (its cross-check); None
    (every cell) with a workload prefix or a name that does not parse."""
    from bench.errors import BenchError
    from bench.matrix.cells import parse_cell
    if workload is not None:
        return None
    try:
        c = parse_cell(cell)
    except (BenchError, ValueError):
        return None
    with store.engine.connect() as conn:
        rows = conn.execute(text("SELECT id, name, mechanism FROM cells")).all()
    cross = ("balloon", "cgroup", "memboot") if c.mechanism == "balloon" else ()
    return {i for i, name, mech in rows if name == c.name or mech in cross}


def every_cell(store: Store, **_: Any) -> None:
    """A view that reads every cell (a matrix): valid while no cell changed."""
    return None


def matrix_groups(store: Store, *, host=None, campaign=None, workload=None,
                  include_demo: bool = False) -> tuple[list[dict], dict]:
    """(groups, cells) as queries.matrix uses them: the labelled result groups (each with a
    `runs` list whose first entry carries the group's fingerprint data) and {(group id, cell
    name): (Cell, summary)} in the order grouping every run gives."""
    from bench.judge import identity
    from bench.store.queries import cell_of
    where = dict(host=host, campaign=campaign, workload=workload, include_demo=include_demo)
    parts = _parts(store, where)
    pseudo = [{"cell": p[4], "host": p[0], "workload": p[1], "fingerprint": p[2],
               "fingerprint_data": p[3], "summary": p[6]}
              for p in sorted(parts, key=lambda p: p[5])]
    groups = identity.label_groups(identity.group_runs(pseudo, with_cell=False))
    cells = {(g["id"], r["cell"]): (cell_of(r["cell"]), r["summary"])
             for g in groups for r in g["runs"]}
    return groups, cells


def compute_parts(store: Store, where: dict, cell_ids: set[int] | None = None) -> list[list]:
    """The parts of the runs in scope (of `cell_ids` alone when given), engine cells left out."""
    from bench.judge import stats
    from bench.store.queries import SUMMARY_COLS, cell_of, scope
    runs = scope(store, **where, columns=SUMMARY_COLS + ("id",),
                 cell_ids=None if cell_ids is None else tuple(sorted(cell_ids)))
    found: dict[tuple, list] = {}
    for r in runs:
        if cell_of(r["cell"]).is_engine:
            continue
        k = (r["host"], r["workload"]["digest"], r["fingerprint"]["digest"], r["cell"])
        p = found.get(k)
        if p is None:
            p = found[k] = [r["host"], r["workload"], r["fingerprint"], r["fingerprint_data"],
                            r["cell"], r["id"], []]
        p[6].append(r)
    for p in found.values():
        p[6] = stats.summarize(p[6])
    return list(found.values())


def _parts(store: Store, where: dict) -> list[list]:
    """The parts at the current generation: stored, brought up to date, or computed. Stored
    as a JSON array of one compact part a line: the lines of the parts a write left as they
    were are stored again as read, not encoded anew."""
    if where["workload"] is not None or not result_cache.ENABLED:
        return compute_parts(store, where)
    key = result_cache.cache_key("matrix_parts", where)
    gen, stored_gen, data, dirty = _stored(store, key)
    if data is not None and stored_gen == gen:
        return json.loads(data)
    if data is not None and dirty is not None and 0 not in dirty:
        old, lines = json.loads(data), data.split("\n")[1:-1]
        if len(lines) != len(old):
            lines = [""] * len(old)
        kept, texts = _kept(store, old, lines, dirty)
        fresh = compute_parts(store, where, dirty)
    else:
        kept, texts, fresh = [], [], compute_parts(store, where)
    if not _round_trips(fresh):
        return kept + fresh
    parts = kept + fresh
    if gen is not None:
        texts += [json.dumps(p, separators=(",", ":")) for p in fresh]
        blob = "[\n" + ",\n".join(t.removesuffix(",") or json.dumps(p, separators=(",", ":"))
                                   for t, p in zip(texts, parts)) + "\n]"
        if len(blob) <= result_cache.MAX_BYTES:
            result_cache.put(store, key, gen, blob)
    return parts


def _kept(store: Store, old: list[list], lines: list[str], dirty: set[int]
          ) -> tuple[list[list], list[str]]:
    """The `old` parts of cells that are not `dirty`, and their stored lines."""
    with store.engine.connect() as conn:
        names = {n for i, n in conn.execute(text("SELECT id, name FROM cells")) if i in dirty}
    keep = [i for i, p in enumerate(old) if p[4] not in names]
    return [old[i] for i in keep], [lines[i] for i in keep]


def _stored(store: Store, key: str) -> tuple[int | None, int | None, str | None,
                                             set[int] | None]:
    """(current generation, stored entry's generation, its data, cells changed since)."""
    with store.engine.connect() as conn:
        gen = conn.execute(text("SELECT n FROM results_generation WHERE id = 1")).scalar()
        row = conn.execute(text("SELECT generation, data FROM results_cache WHERE key = :k"),
                           {"k": key}).first()
        if gen is None or row is None or row[0] > gen:
            return gen, None, None, None
        dirty = set() if row[0] == gen else result_cache.changed_cells(conn, row[0])
    return gen, row[0], row[1], dirty


def _round_trips(parts: list[list]) -> bool:
    """Whether loading the JSON of `parts` gives them back exactly (result_cache._round_trip:
    then parts read back from the store are the ones computed)."""
    from bench.store.result_cache_json import exact
    try:
        return exact(parts)
    except RecursionError:
        return False
