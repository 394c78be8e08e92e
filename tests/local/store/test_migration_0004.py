"""Migration 0004 on a database made by the previous schema: a database brought to 0003 by the
real migrations, filled the way bench wrote it then (lower-case names, K/M/G/T binary), then
upgraded to head (what `bench db upgrade` and every open do). Stored names keep meaning what
was measured (64g-... was 64 GiB -> 64Gi-...), capacities are untouched, names stay unique."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import command

from bench.matrix.cells import parse_cell
from bench.store.db import _alembic_config, current_revision, make_engine, open_store, upgrade

GiB, MiB = 1 << 30, 1 << 20
T0 = datetime(2026, 11, 30, tzinfo=timezone.utc)
# id, name (as bench <= 0003 wrote it), capacity_bytes, mechanism, reclaim, mode, hints, delivery
OLD_CELLS = [
    (1, "64g-balloon-mglru", 64 * GiB, "balloon", "mglru", "pagecache", None, None),
    (2, "768m-cgroup-classic-pilot-advice", 768 * MiB, "cgroup", "classic", "pagecache",
     "pilot", "advice"),
    (3, "e2e-prose-admit", 0, "none", "host", "pagecache", None, None),
    (4, "93g-memboot-mglru", 93 * GiB, "memboot", "mglru", "pagecache", None, None),
    (5, "64Gi-balloon-mglru", 64 * GiB, "balloon", "mglru", "pagecache", None, None),
    (6, "1g-none-classic", GiB, "none", "classic", "pagecache", None, None),
    (7, "1024m-none-classic", GiB, "none", "classic", "pagecache", None, None),
    (8, "256g-cgroup-mglru-pinned", 256 * GiB, "cgroup", "mglru", "pinned", None, None),
]
# run id, cell id, spec
OLD_RUNS = [
    ("c1-gh200-a-001", 1, {"cell": "64g-balloon-mglru", "capacity_bytes": 64 * GiB,
                           "expect_boot": {"mem": None}}),
    ("c1-gh200-a-002", 7, None),
    ("c1-gh200-a-003", 3, {"cell": "e2e-prose-admit", "capacity_bytes": 0}),
    ("c1-gh200-a-004", 4, {"cell": "93g-memboot-mglru", "capacity_bytes": 93 * GiB,
                           "expect_boot": {"mem": "102G", "lru_gen": "on"}}),
    ("c1-gh200-a-005", 8, {"cell": "256g-cgroup-mglru-pinned", "capacity_bytes": 256 * GiB}),
]
MEMBOOT = {"mem": "102G", "mem_bytes": 102 * GiB, "lru_gen": "on",
           "label": "mem=102G bench.lru_gen=on"}
DEFAULT = {"mem": None, "mem_bytes": None, "lru_gen": None, "label": "default"}
PLAN = {"campaign": "c1", "seed": 7, "matrix": "reclaim", "protocol": {"cgroup_headroom": 6 * GiB},
        "runs": {
            "c1-gh200-a-001": {"host": "gh200-a", "cell": "64g-balloon-mglru", "point": "64G",
                               "rep": 0, "boot": DEFAULT, "candidates": [
                                   {"host": "gh200-a", "cell": "64g-balloon-mglru",
                                    "boot": DEFAULT},
                                   {"host": "gh200-b", "cell": "64g-balloon-mglru",
                                    "boot": DEFAULT}]},
            "c1-gh200-a-004": {"host": "gh200-a", "cell": "93g-memboot-mglru", "point": "93G",
                               "rep": 0, "boot": MEMBOOT, "candidates": [
                                   {"host": "gh200-a", "cell": "93g-memboot-mglru",
                                    "boot": MEMBOOT}]},
            "c1-gh200-a-003": {"host": "gh200-a", "cell": "e2e-prose-admit", "rep": 0,
                               "boot": DEFAULT, "candidates": []}},
        "order": ["c1-gh200-a-001", "c1-gh200-a-004", "c1-gh200-a-003"]}


def _old_database(url: str) -> sa.Engine:
    """A database at 0003 (the real migrations) holding rows as bench wrote them then."""
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0003")
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables
    with engine.begin() as conn:
        conn.execute(t["hosts"].insert(), [{"id": 1, "name": "gh200-a"}])
        conn.execute(t["campaigns"].insert(), [{"id": "c1", "state": "running", "created": T0}])
        conn.execute(t["cells"].insert(), [dict(zip(
            ("id", "name", "capacity_bytes", "mechanism", "reclaim", "mode", "hints",
             "delivery"), c)) for c in OLD_CELLS])
        conn.execute(t["runs"].insert(), [
            {"id": i, "run_id": rid, "campaign_id": "c1", "host_id": 1, "cell_id": cell,
             "state": "ingested" if spec else "planned", "spec": spec,
             "bundle_digest": "d" * 64 if spec else None, "position": i, "repetition": 0}
            for i, (rid, cell, spec) in enumerate(OLD_RUNS, 1)])
        conn.execute(t["journal"].insert(), [
            {"t": T0, "campaign_id": "c1", "kind": "plan", "message": "plan: 3 runs",
             "data": PLAN},
            {"t": T0, "campaign_id": "c1", "kind": "reassign",
             "message": "c1-gh200-a-002: gh200-b -> gh200-a as 768m-cgroup-classic-pilot-advice",
             "data": {"from": "gh200-b", "to": "gh200-a",
                      "cell": "768m-cgroup-classic-pilot-advice"}},
            {"t": T0, "campaign_id": "c1", "kind": "warning", "message": "as it was",
             "data": {"cell": "64g-balloon-mglru"}}])
    return engine


def _read(engine: sa.Engine) -> tuple[dict, dict, list]:
    md = sa.MetaData()
    md.reflect(engine)
    t = md.tables
    with engine.connect() as conn:
        cells = {r.id: r for r in conn.execute(sa.select(t["cells"]))}
        runs = {r.run_id: r for r in conn.execute(sa.select(t["runs"]))}
        journal = list(conn.execute(sa.select(t["journal"]).order_by(t["journal"].c.id)))
    return cells, runs, journal


def test_0004_renames_cells_keeping_what_was_measured(db_url):
    engine = _old_database(db_url)
    assert upgrade(engine) == ("0003", current_revision(engine))
    cells, runs, journal = _read(engine)
    names = {c.name: c.capacity_bytes for c in cells.values()}
    assert names == {"64Gi-balloon-mglru": 64 * GiB,
                     "768Mi-cgroup-classic-pilot-advice": 768 * MiB,
                     "e2e-prose-admit": 0, "93Gi-memboot-mglru": 93 * GiB,
                     "1Gi-none-classic": GiB, "256Gi-cgroup-mglru-pinned": 256 * GiB}
    # what bench reads a stored name as is what the row measured
    for c in cells.values():
        cell = parse_cell(c.name)
        assert (cell.name, cell.capacity_bytes, cell.mechanism, cell.reclaim, cell.mode) == (
            c.name, c.capacity_bytes, c.mechanism, c.reclaim, c.mode)
    # collisions merged into one row (the one already named so, else the lowest id),
    # its runs repointed
    assert set(cells) == {2, 3, 4, 5, 6, 8}
    assert runs["c1-gh200-a-001"].cell_id == 5 and runs["c1-gh200-a-002"].cell_id == 6
    # stored specs name their run's cell; nothing else in them changes
    assert runs["c1-gh200-a-001"].spec == {"cell": "64Gi-balloon-mglru",
                                           "capacity_bytes": 64 * GiB,
                                           "expect_boot": {"mem": None}}
    assert runs["c1-gh200-a-004"].spec["cell"] == "93Gi-memboot-mglru"
    assert runs["c1-gh200-a-004"].spec["expect_boot"]["mem"] == "102G"   # kernel text
    assert runs["c1-gh200-a-003"].spec["cell"] == "e2e-prose-admit"
    assert runs["c1-gh200-a-002"].spec is None
    # the campaign record plans the same capacities on resume
    plan, reassign, warning = (j.data for j in journal)
    r1, r4 = plan["runs"]["c1-gh200-a-001"], plan["runs"]["c1-gh200-a-004"]
    assert r1["cell"] == "64Gi-balloon-mglru"
    assert [c["cell"] for c in r1["candidates"]] == ["64Gi-balloon-mglru"] * 2
    assert r4["cell"] == "93Gi-memboot-mglru" and r1["boot"] == DEFAULT
    assert r4["boot"] == {"mem": "102Gi", "mem_bytes": 102 * GiB, "lru_gen": "on",
                          "label": "mem=102Gi bench.lru_gen=on"}
    assert r4["candidates"][0]["boot"] == r4["boot"]
    assert plan["runs"]["c1-gh200-a-003"]["cell"] == "e2e-prose-admit"
    assert {k: v for k, v in plan.items() if k != "runs"} == {
        k: v for k, v in PLAN.items() if k != "runs"}
    assert reassign["cell"] == "768Mi-cgroup-classic-pilot-advice"
    assert warning == {"cell": "64g-balloon-mglru"}               # history stays as written
    assert journal[1].message.endswith("as 768m-cgroup-classic-pilot-advice")


def test_0004_results_find_the_renamed_cells_in_any_case(db_url):
    from bench.store import queries
    _old_database(db_url)
    store = open_store(db_url)            # every open brings the database to head
    try:
        for spelling in ("64Gi-balloon-mglru", "64gi-BALLOON-mglru"):
            assert [r["run_id"] for r in queries.load_runs(store, cell=spelling)] == [
                "c1-gh200-a-001"]
        assert queries.load_runs(store, cell="64G-balloon-mglru") == []   # 64 x 10^9: not run
    finally:
        store.close()


def test_0004_downgrade_writes_the_old_spellings_back(db_url):
    engine = _old_database(db_url)
    upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0003")
    cells, runs, journal = _read(engine)
    assert {c.name for c in cells.values()} == {
        "64g-balloon-mglru", "768m-cgroup-classic-pilot-advice", "e2e-prose-admit",
        "93g-memboot-mglru", "1g-none-classic", "256g-cgroup-mglru-pinned"}
    assert runs["c1-gh200-a-001"].spec["cell"] == "64g-balloon-mglru"
    assert journal[0].data["runs"]["c1-gh200-a-004"]["boot"] == MEMBOOT
    assert journal[0].data["runs"]["c1-gh200-a-001"]["candidates"][1]["cell"] == \
        "64g-balloon-mglru"
