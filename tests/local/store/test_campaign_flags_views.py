"""Migration 0005 on real databases (SQLite files and PostgreSQL, built by the real migrations,
holding runs ingested from bundles captured from the real runner): the views that join on the
text run id (docs/results.md), demo and hidden campaigns left out of results unless asked, and
`bench campaigns hide|unhide|rm`."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa
from alembic import command

from bench.cli import main
from bench.store import queries
from bench.store.campaigns import (campaign_list, campaign_row, create_campaign, demo_capacities,
                                   latest_campaign, set_flags)
from bench.store.controller_lock import acquire_lock, owner_info, release_lock
from bench.store.db import _alembic_config, make_engine, open_store, upgrade
from bench.store.ingest import ingest_bundle

CHILD = ("iterations", "counter_deltas", "timeline", "verdicts", "raw_files",
         "agent_summaries")
VIEW_OF = {"iterations": "v_iterations", "counter_deltas": "v_counters",
           "timeline": "v_timeline", "verdicts": "v_verdicts"}


def _fill(store, bundles, layout):
    """layout: {campaign: [(run_id, cell), ...]}, each campaign created, each run ingested."""
    pos = 0
    for cid, runs in layout.items():
        if campaign_row(store, cid) is None:
            create_campaign(store, cid, matrix="demo" if cid.startswith("demo-") else "reclaim")
        for run_id, cell in runs:
            ingest_bundle(store, bundles(run_id, cell, campaign=cid, position=pos, seed=pos))
            pos += 1


def _scalar(store, sql, **kw):
    with store.engine.connect() as conn:
        return conn.execute(sa.text(sql), kw).scalar()


def test_views_carry_the_text_run_id(store, bundles):
    _fill(store, bundles, {"c1": [("c1-r000", "64Mi-cgroup-mglru"),
                                  ("c1-r001", "64Mi-balloon-classic")]})
    for table, view in VIEW_OF.items():
        ref = _scalar(store, "SELECT id FROM runs WHERE run_id = :r", r="c1-r001")
        n = _scalar(store, f"SELECT count(*) FROM {table} WHERE run_id = :i", i=ref)
        assert n > 0, table
        assert _scalar(store, f"SELECT count(*) FROM {view} WHERE run_id = :r",
                       r="c1-r001") == n, view
        assert _scalar(store, f"SELECT count(DISTINCT cell) FROM {view} WHERE run_id = :r",
                       r="c1-r001") == 1
    # the trap the views exist for: the child's run_id is the integer key, not the text id:
    # SQLite silently finds nothing, PostgreSQL refuses to compare integer with text
    trap = ("SELECT count(*) FROM iterations JOIN runs USING (run_id) "
            "WHERE runs.run_id = 'c1-r001'")
    if store.engine.dialect.name == "sqlite":
        assert _scalar(store, trap) == 0
    else:
        with pytest.raises(sa.exc.ProgrammingError, match="integer and character varying"):
            _scalar(store, trap)
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT run_id, campaign, cell, host, retained, demo, "
                                    "hidden, device_bytes FROM v_runs ORDER BY run_id")).all()
    stored = {r["run_id"]: r for r in queries.load_runs(store)}
    assert [r.run_id for r in rows] == ["c1-r000", "c1-r001"]
    for r in rows:
        s = stored[r.run_id]
        assert (r.campaign, r.cell, r.host, bool(r.retained), r.device_bytes) == \
            (s["campaign_id"], s["cell"], s["host"], bool(s["retained"]), s["device_bytes"])
        assert not r.demo and not r.hidden
    # per-iteration sums in the view match the runs' stored device totals' source: the
    # iterations of one run, grouped by the text id
    with store.engine.connect() as conn:
        per_run = dict(conn.execute(sa.text(
            "SELECT run_id, count(*) FROM v_iterations GROUP BY run_id")).all())
    assert set(per_run) == {"c1-r000", "c1-r001"} and all(v > 0 for v in per_run.values())


def test_views_answer_plain_sqlite3(tmp_path, bundles):
    """What docs/results.md shows a sqlite3 user, on a file made by the real migrations."""
    path = tmp_path / "bench.db"
    st = open_store(f"sqlite:///{path}")
    try:
        _fill(st, bundles, {"c1": [("c1-r000", "64Mi-cgroup-mglru")]})
    finally:
        st.close()
    con = sqlite3.connect(path)
    try:
        n, med = con.execute("SELECT count(*), avg(wall_ns) / 1e9 FROM v_iterations "
                             "WHERE run_id = 'c1-r000' AND pass_no = 1").fetchone()
        assert n > 0 and med > 0
        keys = {k for (k,) in con.execute(
            "SELECT DISTINCT \"key\" FROM v_counters WHERE run_id = 'c1-r000'")}
        assert keys
        phases = [p for (p,) in con.execute(
            "SELECT phase FROM v_timeline WHERE run_id = 'c1-r000' ORDER BY seq")]
        assert phases
    finally:
        con.close()


def test_demo_campaigns_stay_out_of_results_unless_asked(store, bundles):
    _fill(store, bundles, {"c1": [("c1-r000", "64Mi-cgroup-classic")],
                           "demo-s0-20261201T000000": [("demo-r000", "64Mi-cgroup-classic")]})
    set_flags(store, "demo-s0-20261201T000000", demo=True)

    def runs(**kw):
        return sorted(r["run_id"] for r in queries.load_runs(store, **kw))
    assert runs() == ["c1-r000"]
    assert runs(include_demo=True) == ["c1-r000", "demo-r000"]
    assert runs(campaign="demo-s0-20261201T000000") == ["demo-r000"]
    real, both = (queries.matrix(store, "reclaim", include_demo=d) for d in (False, True))
    assert [r["classic"]["n_retained"] for r in real["rows"]] == [1]
    assert [r["classic"]["n_retained"] for r in both["rows"]] == [2]
    assert {r["run_id"] for r in queries.list_runs(store)} == {"c1-r000"}
    assert {r["run_id"] for r in queries.list_runs(store, include_demo=True)} == \
        {"c1-r000", "demo-r000"}
    [row] = [c for c in campaign_list(store) if c.id.startswith("demo-")]
    assert row.demo and not row.hidden
    assert demo_capacities(store, "cgroup") == [64 << 20]
    assert demo_capacities(store) == []
    # with v_runs, SQL users can filter the same way
    assert _scalar(store, "SELECT count(*) FROM v_runs WHERE demo = :t", t=True) == 1


def test_results_cli_include_demo(store, bundles, db_url, capsys):
    _fill(store, bundles, {"demo-s0-20261201T000000": [("demo-r000", "64Mi-cgroup-classic")]})
    set_flags(store, "demo-s0-20261201T000000", demo=True)
    import json
    assert main(["results", "--matrix", "reclaim", "--db", db_url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == []
    assert main(["results", "--matrix", "reclaim", "--db", db_url, "--json",
                 "--include-demo"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]
    assert main(["results", "--matrix", "reclaim", "--db", db_url, "--json", "--campaign",
                 "demo-s0-20261201T000000"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]


def test_hide_and_unhide(store, bundles, db_url, capsys):
    _fill(store, bundles, {"c1": [("c1-r000", "64Mi-cgroup-classic")],
                           "c2": [("c2-r000", "64Mi-cgroup-classic")]})
    assert main(["campaigns", "hide", "c2", "--db", db_url]) == 0
    assert "c2: hidden" in capsys.readouterr().err
    assert [c.id for c in campaign_list(store)] == ["c1"]
    assert {c.id for c in campaign_list(store, include_hidden=True)} == {"c1", "c2"}
    assert latest_campaign(store) == "c1"
    assert [r["run_id"] for r in queries.load_runs(store)] == ["c1-r000"]
    assert [r["run_id"] for r in queries.load_runs(store, campaign="c2")] == ["c2-r000"]
    import json
    assert main(["campaigns", "--db", db_url, "--json"]) == 0
    assert [c["id"] for c in json.loads(capsys.readouterr().out)] == ["c1"]
    assert main(["campaigns", "--all", "--db", db_url, "--json"]) == 0
    listed = {c["id"]: c for c in json.loads(capsys.readouterr().out)}
    assert listed["c2"]["hidden"] is True and listed["c1"]["hidden"] is False
    assert main(["campaigns", "--db", db_url, "unhide", "c2"]) == 0
    assert {c.id for c in campaign_list(store)} == {"c1", "c2"}
    assert main(["campaigns", "hide", "nope", "--db", db_url]) != 0


def _counts(store, campaign):
    out = {}
    ref = f"(SELECT id FROM runs WHERE campaign_id = '{campaign}')"
    for t in CHILD:
        out[t] = _scalar(store, f"SELECT count(*) FROM {t} WHERE run_id IN {ref}")
    out["runs"] = _scalar(store, f"SELECT count(*) FROM runs WHERE campaign_id = '{campaign}'")
    out["journal"] = _scalar(store, f"SELECT count(*) FROM journal WHERE campaign_id = "
                                    f"'{campaign}' OR run_ref IN {ref}")
    out["campaigns"] = _scalar(store, f"SELECT count(*) FROM campaigns WHERE id = '{campaign}'")
    return out


def test_rm_removes_the_campaign_with_its_rows_and_nothing_else(store, bundles, db_url, capsys):
    _fill(store, bundles, {"c1": [("c1-r000", "64Mi-cgroup-classic"),
                                  ("c1-r001", "64Mi-balloon-mglru")],
                           "c2": [("c2-r000", "64Mi-cgroup-classic")]})
    before1, before2 = _counts(store, "c1"), _counts(store, "c2")
    assert all(v > 0 for v in before1.values()), before1
    assert main(["campaigns", "rm", "c1", "--yes", "--db", db_url]) == 0
    assert "c1: removed with 2 runs" in capsys.readouterr().err
    assert all(v == 0 for v in _counts(store, "c1").values())
    assert _counts(store, "c2") == before2
    assert [r["run_id"] for r in queries.load_runs(store)] == ["c2-r000"]
    assert main(["campaigns", "rm", "c1", "--yes", "--db", db_url]) == 2     # gone: bad input


def test_rm_asks_and_refuses_a_live_controller(store, bundles, db_url, capsys, monkeypatch):
    _fill(store, bundles, {"c1": [("c1-r000", "64Mi-cgroup-classic")]})
    # no terminal to ask and no --yes: refused, nothing removed
    assert main(["campaigns", "rm", "c1", "--db", db_url]) == 2
    assert "--yes" in capsys.readouterr().err
    # a live controller (this process, heartbeat now) holds the campaign
    me = owner_info("a controller")
    assert acquire_lock(store, "c1", me) is None
    monkeypatch.setattr("bench.store.controller_lock.os.getpid", lambda: me["pid"] + 1)
    assert main(["campaigns", "rm", "c1", "--yes", "--db", db_url]) == 1
    err = capsys.readouterr().err
    assert "controller lock is live" in err and str(me["pid"]) in err
    assert _counts(store, "c1")["runs"] == 1
    release_lock(store, "c1", me)
    assert main(["campaigns", "rm", "c1", "--yes", "--db", db_url]) == 0
    assert _counts(store, "c1")["campaigns"] == 0


def test_upgrade_marks_the_demo_campaigns_already_stored(db_url):
    engine = make_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), "0004")
    md = sa.MetaData()
    md.reflect(engine)
    import datetime
    t0 = datetime.datetime(2026, 11, 30, tzinfo=datetime.timezone.utc)
    with engine.begin() as conn:
        conn.execute(md.tables["campaigns"].insert(), [
            {"id": "demo-s0-20261130T101010", "matrix": "demo", "state": "done", "created": t0},
            {"id": "demo-like", "matrix": "reclaim", "state": "done", "created": t0},
            {"id": "c1", "matrix": "demo", "state": "done", "created": t0}])
    upgrade(engine)
    with engine.connect() as conn:
        flags = dict(conn.execute(sa.text("SELECT id, demo FROM campaigns")).all())
    assert {k: bool(v) for k, v in flags.items()} == {
        "demo-s0-20261130T101010": True, "demo-like": False, "c1": False}
    with engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "0004")
    insp = sa.inspect(engine)
    assert "demo" not in {c["name"] for c in insp.get_columns("campaigns")}
    assert not set(insp.get_view_names()) & {"v_runs", "v_iterations"}
    engine.dispose()


@pytest.mark.parametrize("view", ["v_runs", "v_iterations", "v_counters", "v_timeline",
                                  "v_verdicts"])
def test_views_exist_after_open(store, view):
    assert view in sa.inspect(store.engine).get_view_names()


def _doc_sqlite3_queries() -> list[str]:
    """The SQL of every `sqlite3 ...` command in docs/results.md's sqlite3 block."""
    import re
    import shlex
    from pathlib import Path
    text = (Path(__file__).resolve().parents[3] / "docs" / "results.md").read_text()
    block = re.search(r"### sqlite3\n\n```sh\n(.*?)```", text, re.S).group(1)
    lines = [x for x in block.replace("\\\n", " ").splitlines() if not x.startswith("#")]
    cmds = [c for c in "\n".join(lines).split("\n\n") if c.strip()]
    assert all(c.strip().startswith("sqlite3") for c in cmds), cmds
    return [shlex.split(c)[-1] for c in cmds]


def test_the_documented_queries_run(tmp_path, bundles):
    """docs/results.md's sqlite3 examples, on a file made by the real migrations: each runs
    and finds the run it names (the documented run id replaced by one stored here)."""
    path = tmp_path / "bench.db"
    st = open_store(f"sqlite:///{path}")
    try:
        _fill(st, bundles, {"c1": [("c1-gh200-a-004", "64Mi-cgroup-mglru")]})
    finally:
        st.close()
    queries_ = _doc_sqlite3_queries()
    assert len(queries_) == 3
    con = sqlite3.connect(path)
    try:
        for q in queries_:
            assert con.execute(q).fetchall(), q
    finally:
        con.close()
