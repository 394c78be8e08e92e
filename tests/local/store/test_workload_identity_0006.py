"""Migration 0006 (the stored workload identity, runs.workload_id, and the covering index
ix_runs_results) on a database made by 0005 with real rows, its downgrade, ingest writing the
identity, and the results views' output against the path they replaced: the joined query
that read every run's identity from its spec (old_load_runs below), on the same database."""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa
from alembic import command

from bench.judge import identity
from bench.matrix.cells import parse_cell
from bench.store import campaigns, queries, spec_parts
from bench.store.db import _alembic_config, current_revision, make_engine, open_store, upgrade
from bench.store.ingest import ingest_bundle
from bench.store.models import Campaign, Cell, Host, Run, Workload
from bench.store.spec_parts import attach_identity

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
CELLS = ["64G-balloon-mglru", "64G-balloon-classic", "128G-balloon-mglru",
         "128G-balloon-classic", "64G-cgroup-mglru", "128G-cgroup-mglru", "64G-memboot-mglru",
         "64G-cgroup-mglru-pinned", "64G-cgroup-mglru-hybrid", "128G-none-mglru",
         "64G-balloon-mglru-oracle-advice", "e2e-prose-admit"]
CAMPAIGNS = [("c1", False, False), ("c2", False, False), ("hid", True, False),
             ("demo-s1-x", False, True)]


def _spec(rng: random.Random, i: int, cell: str) -> dict | None:
    """Specs that differ in what identity compares (trace, threads, pool) and in what it only
    shows (the trace's file name: one digest, two names), engine specs, and none."""
    if i % 97 == 5:
        return None
    if cell.startswith("e2e"):
        return {"cell": cell, "workload": {"prompt": "prose", "n_tokens": 64},
                "engine": {"config_sha256": rng.choice("ab") * 64, "prompt": "prose"}}
    return {"cell": cell, "run_id": f"r{i:04d}",
            "workload": {"trace": rng.choice(["prose.jsonl", "renamed.jsonl"]),
                         "trace_sha256": rng.choice("bbe") * 64, "batch": 1},
            "plan_sha256": "c" * 64, "pool_bytes": rng.choice([1 << 30, 1 << 31]),
            "agent": {"threads": rng.choice([8, 8, 4]), "passes": 2}}


def _old_database(url: str, n: int = 400) -> sa.Engine:
    """A database at 0005 (the real migrations) holding runs as bench wrote them then."""
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0005")
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables
    rng = random.Random(6)
    with engine.begin() as conn:
        conn.execute(t["hosts"].insert(), [{"id": 1, "name": "gh200-a"},
                                           {"id": 2, "name": "gh200-b"}])
        conn.execute(t["campaigns"].insert(), [
            {"id": c, "state": "done", "created": T0, "hidden": h, "demo": d}
            for c, h, d in CAMPAIGNS])
        conn.execute(t["cells"].insert(), [
            {"id": i, "name": c.name, "capacity_bytes": c.capacity_bytes,
             "mechanism": c.mechanism, "reclaim": c.reclaim, "mode": c.mode, "hints": c.hints,
             "delivery": c.delivery} for i, c in enumerate(map(parse_cell, CELLS), 1)])
        conn.execute(t["fingerprints"].insert(), [
            {"id": 1, "host_id": 1, "digest": "f1" * 8, "data": {"kernel": "6.8.0"}},
            {"id": 2, "host_id": 1, "digest": "f2" * 8, "data": {"kernel": "6.1.0"}},
            {"id": 3, "host_id": 2, "digest": "f3" * 8, "data": {"kernel": "6.8.0"}}])
        conn.execute(t["runs"].insert(), [_run_row(rng, i) for i in range(1, n + 1)])
    return engine


def _run_row(rng: random.Random, i: int) -> dict:
    cell = rng.randrange(len(CELLS))
    host = rng.choice([1, 2])
    ingested = i % 31 != 0

    def metric(lo, hi):
        return None if rng.random() < .05 else rng.uniform(lo, hi)
    return {"id": i, "run_id": f"r{i:04d}", "host_id": host, "cell_id": cell + 1,
            "campaign_id": rng.choice([c for c, *_ in CAMPAIGNS] + [None]),
            "fingerprint_id": rng.choice([None, 3] if host == 2 else [1, 2]),
            "position": i, "repetition": rng.randrange(4),
            "state": "ingested" if ingested else "planned",
            "spec": _spec(rng, i, CELLS[cell]),
            "bundle_digest": f"{i:064x}" if ingested else None,
            "retained": rng.choice([True, True, True, False, None]),
            "iterations": 10, "iteration_median_s": metric(0.5, 3),
            "iteration_min_s": 0.4, "iteration_max_s": 3.5, "device_bytes": 10 ** 10,
            "device_bytes_per_iteration": metric(1e9, 4e10),
            "nominal_miss_bytes_per_iteration": metric(1e9, 2e10),
            "served_fraction": metric(0, 1), "scan_steal": metric(1, 7),
            "cgroup_scan_steal": metric(1, 3), "locked_fraction": metric(0, 1),
            "mglru_loop_entry": rng.choice([True, False, None]), "mglru_end": True}


def old_load_runs(store, *, cell=None, host=None, campaign=None, ingested_only=True,
                  with_identity=False, include_demo=False, mechanisms=None,
                  columns=None, cell_ids=None) -> list[dict]:
    """The read results used before 0006 (commit 3cd8aca): runs joined with cells, hosts and
    campaigns, every run's workload identity computed from its spec's parts, every column of
    RUN_COLS whatever the view needs (`columns` is not read, but for `id`, which a matrix's
    parts read since 0008: then the run's id too; `cell_ids` keeps the runs of those cells)."""
    extra = ("id",) if columns and "id" in columns else ()
    cols = [getattr(Run, c) for c in queries.RUN_COLS + extra] + [Cell.name, Host.name] + \
           [getattr(Cell, c) for c in queries.CELL_COLS]
    names = queries.RUN_COLS + extra + ("cell", "host") + queries.CELL_COLS
    if with_identity:
        cols += [Run.id, sa.null(), Run.fingerprint_id]
        names += ("_pk", "workload_id", "fingerprint_id")
    q = sa.select(*cols).join(Cell, Run.cell_id == Cell.id).join(Host, Run.host_id == Host.id)
    if cell:
        q = q.where(Cell.name == parse_cell(cell).name)
    if host:
        q = q.where(Host.name == host)
    if mechanisms is not None:
        q = q.where(Cell.mechanism.in_(mechanisms))
    if campaign:
        q = q.where(Run.campaign_id == campaign)
    else:
        q = q.outerjoin(Campaign, Run.campaign_id == Campaign.id).where(
            Run.campaign_id.is_(None)
            | ((Campaign.hidden.is_(False)) & (Campaign.demo.is_(False) | include_demo)))
    if ingested_only:
        q = q.where(Run.bundle_digest.is_not(None))
    if cell_ids is not None:
        q = q.where(Run.cell_id.in_(cell_ids))
    with store.session() as s:
        rows = [dict(zip(names, row)) for row in s.connection().execute(q.order_by(Run.id))]
        if with_identity:
            attach_identity(s, rows, store.engine.dialect.name)   # all NULL: from the spec
    return rows


def _views(store) -> str:
    """Every results view that reads runs, over filters that change what is read."""
    out: dict = {}
    for kw in ({}, {"host": "gh200-b"}, {"campaign": "c1"}, {"campaign": "hid"},
               {"include_demo": True}):
        k = json.dumps(kw)
        for m in queries.MATRICES:
            out[f"matrix {m} {k}"] = queries.matrix(store, m, **kw)
        for c in ("64G-balloon-mglru", "128G-cgroup-mglru", "64G-balloon-mglru-oracle-advice"):
            for pool in (False, True):
                out[f"cell {c} {pool} {k}"] = queries.cell_results(store, c, pool=pool,
                                                                   verbose=True, **kw)
        out[f"compare {k}"] = queries.compare(store, "64G-balloon-mglru",
                                              "64G-balloon-classic", **kw)
        out[f"compare pooled {k}"] = queries.compare(store, "64G-cgroup-mglru",
                                                     "64G-memboot-mglru", pool=True, **kw)
        out[f"sizing {k}"] = queries.sizing(store, 1.5, **kw)
        out[f"runs {k}"] = queries.list_runs(store, **kw)
        out[f"export {k}"] = queries.export_rows(store, **kw)
    w = out["cell 64G-balloon-mglru False {}"][0]["workload"]["digest"]
    out["workload"] = queries.matrix(store, "reclaim", workload=w[:6])
    return json.dumps(out, sort_keys=False, default=str)


def _stored_identity(engine) -> dict[str, tuple]:
    with engine.connect() as conn:
        return {rid: (spec, data) for rid, spec, data in conn.execute(
            sa.select(Run.run_id, Run.spec, Workload.data)
            .outerjoin(Workload, Workload.id == Run.workload_id))}


def test_0006_upgrade_backfills_the_identity_ingest_computes(db_url):
    engine = _old_database(db_url)
    assert upgrade(engine) == ("0005", current_revision(engine))
    stored = _stored_identity(engine)
    assert len(stored) == 400
    for rid, (spec, data) in stored.items():     # a spec of None is stored as JSON null
        assert data == identity.workload_of(spec), rid
    with engine.connect() as conn:
        keys = conn.execute(sa.select(Workload.key, Workload.digest, Workload.data)).all()
    assert len({k for k, *_ in keys}) == len(keys) > 4     # one row per distinct identity
    assert all(d == data["digest"] for _, d, data in keys)
    # names shown differ, the digest compared does not: two rows, one digest
    assert len({d for _, d, _ in keys}) < len(keys)
    assert "ix_runs_results" in {i["name"] for i in sa.inspect(engine).get_indexes("runs")}


def test_results_are_those_of_the_spec_path(db_url, monkeypatch):
    _old_database(db_url)
    store = open_store(db_url)
    try:
        new = _views(store)
        with monkeypatch.context() as m:
            m.setattr(queries, "load_runs", old_load_runs)
            old = _views(store)
        assert new == old
        # runs without a stored identity (a row written by hand) are read from their spec
        with store.engine.begin() as conn:
            conn.execute(sa.update(Run).where(Run.id % 3 == 0).values(workload_id=None))
        assert _views(store) == old
    finally:
        store.close()


def test_0006_downgrade_and_upgrade_again(db_url):
    engine = _old_database(db_url)
    upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0005")
    insp = sa.inspect(engine)
    assert "workloads" not in insp.get_table_names()
    assert "workload_id" not in {c["name"] for c in insp.get_columns("runs")}
    assert "ix_runs_results" not in {i["name"] for i in insp.get_indexes("runs")}
    with engine.connect() as conn:       # 0005's views still read runs
        assert conn.execute(sa.text("SELECT count(*) FROM v_runs")).scalar() == 400
    upgrade(engine)
    assert all(data == identity.workload_of(spec)
               for spec, data in _stored_identity(engine).values())


def test_ingest_and_state_changes_keep_the_identity_with_the_spec(store, bundles):
    b = bundles("c1-gh200-a-001")
    ingest_bundle(store, b)
    spec = json.loads((b / "spec.json").read_text())
    got = _stored_identity(store.engine)["c1-gh200-a-001"]
    assert got == (spec, identity.workload_of(spec))
    campaigns.add_run(store, "c1", "c1-gh200-a-002", host="gh200-a", cell="64Mi-cgroup-mglru",
                      position=2, repetition=0)
    other = dict(spec, run_id="c1-gh200-a-002", agent=dict(spec["agent"], threads=3))
    campaigns.transition(store, "c1-gh200-a-002", "boot_verified", spec=other)
    got = _stored_identity(store.engine)["c1-gh200-a-002"]
    assert got == (other, identity.workload_of(other))
    assert got[1]["digest"] != identity.workload_of(spec)["digest"]
    campaigns.reassign(store, "c1-gh200-a-002", "gh200-b", "64Mi-cgroup-mglru", "test")
    assert _stored_identity(store.engine)["c1-gh200-a-002"] == (None, None)


@pytest.mark.parametrize("view", [("--matrix", "reclaim"), ("--cell", "64G-balloon-mglru")])
def test_sqlite_results_read_the_covering_index(tmp_path, monkeypatch, view):
    """The runs queries of a results view are served by ix_runs_results alone (SQLite's
    plan of every statement fetch_rows runs)."""
    url = f"sqlite:///{tmp_path}/x.db"
    _old_database(url, n=50)
    store = open_store(url)
    plans: list[str] = []
    fetch = queries.fetch_rows

    def explained(conn, q):
        compiled = q.compile(dialect=conn.dialect, compile_kwargs={"render_postcompile": True})
        params = tuple(compiled.params[k] for k in compiled.positiontup)
        plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).all()
        plans.append(" ".join(str(step[-1]) for step in plan))
        return fetch(conn, q)
    monkeypatch.setattr(queries, "fetch_rows", explained)
    monkeypatch.setattr(spec_parts, "fetch_rows", explained)   # a matrix's (runs_by_identity)
    try:
        out = queries.matrix(store, "reclaim") if view[0] == "--matrix" else \
            queries.cell_results(store, view[1])
        assert out
    finally:
        store.close()
    assert plans
    for plan in plans:
        assert "COVERING INDEX ix_runs_results" in plan, plan
