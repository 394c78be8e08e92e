"""`bench results` computes every view from the database on each call (no stored views since
migration 0010), on real databases built by the migrations, SQLite and PostgreSQL: a matrix
summarized per (group, cell) before grouping is the matrix of every run grouped; what the
command prints is that computation, and after a write the next call prints the new one."""

from __future__ import annotations

import io
import json
import sys

import pytest
import sqlalchemy as sa

from bench.cli import main
from bench.judge import identity, stats
from bench.results import store_views
from bench.store import queries
from bench.store.db import open_store
from tests.local.store.test_workload_identity_0006 import _old_database

FILTERS = ({}, {"host": "gh200-b"}, {"campaign": "c1"}, {"include_demo": True})


@pytest.fixture
def filled(db_url):
    _old_database(db_url).dispose()
    store = open_store(db_url)
    yield db_url, store
    store.close()


def _every_run_grouped(store, *, host=None, campaign=None, workload=None, include_demo=False):
    """matrix_groups as it was before summaries came first: every run grouped, then each
    group's runs of each cell summarized."""
    runs = [r for r in queries.scope(store, host=host, campaign=campaign, workload=workload,
                                     include_demo=include_demo)
            if not queries.cell_of(r["cell"]).is_engine]
    groups = identity.label_groups(identity.group_runs(runs, with_cell=False))
    cells = {}
    for g in groups:
        for r in g["runs"]:
            cells.setdefault((g["id"], r["cell"]), []).append(r)
    return groups, {k: (queries.cell_of(k[1]), queries.flagged(stats.summarize(rs)))
                    for k, rs in cells.items()}


def _same_as_every_run_grouped(store, monkeypatch) -> None:
    w = queries.cell_results(store, "64G-balloon-mglru")[0]["workload"]["digest"]
    for kw in FILTERS + ({"workload": w[:6]},):
        got = {m: queries.matrix(store, m, **kw) for m in queries.MATRICES}
        with monkeypatch.context() as m:
            m.setattr(queries, "matrix_groups", _every_run_grouped)
            want = {k: queries.matrix(store, k, **kw) for k in queries.MATRICES}
        assert json.dumps(got, default=str) == json.dumps(want, default=str), kw
        assert any(len(v["groups"]) > 1 for v in got.values()), kw     # groups to tell apart


def test_a_matrix_is_that_of_every_run_grouped(filled, monkeypatch):
    """Also where runs of one digest have two stored identities (shown trace names differ)
    and where runs have none (written by hand: identity from the spec)."""
    _, store = filled
    _same_as_every_run_grouped(store, monkeypatch)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE runs SET workload_id = NULL WHERE id % 3 = 0"))
    _same_as_every_run_grouped(store, monkeypatch)


def _printed(argv: list[str]) -> str:
    was, sys.stdout = sys.stdout, io.StringIO()
    try:
        assert main(argv) == 0, argv
        return sys.stdout.getvalue()
    finally:
        sys.stdout = was


def _shown(show, *args) -> str:
    was, sys.stdout = sys.stdout, io.StringIO()
    try:
        show(*args)
        return sys.stdout.getvalue()
    finally:
        sys.stdout = was


def _expected(store) -> dict[str, str]:
    """What each command line below must print, computed here from the database."""
    m = queries.matrix(store, "reclaim", host="gh200-b")
    c = queries.cell_results(store, "64G-balloon-mglru", verbose=True)
    return {"matrix json": json.dumps(m, indent=2, default=str) + "\n",
            "matrix": _shown(store_views.show_matrix, m),
            "cell json": json.dumps(c, indent=2, default=str) + "\n",
            "cell": _shown(store_views.show_cell, c, True)}


def test_the_command_prints_the_database_as_it_is_now(filled):
    url, store = filled
    lines = {"matrix json": ["results", "--matrix", "reclaim", "--host", "gh200-b", "--json"],
             "matrix": ["results", "--matrix", "reclaim", "--host", "gh200-b"],
             "cell json": ["results", "--cell", "64g-Balloon-mglru", "-v", "--json"],
             "cell": ["results", "--cell", "64G-balloon-mglru", "--verbose"]}
    before = _expected(store)
    assert {k: _printed([*argv, "--db", url]) for k, argv in lines.items()} == before
    with store.engine.begin() as conn:        # a write of the runs both views read
        conn.execute(sa.text("UPDATE runs SET iteration_median_s = iteration_median_s * 2 "
                             "WHERE host_id = 2"))
    after = _expected(store)
    assert all(after[k] != before[k] for k in lines)
    assert {k: _printed([*argv, "--db", url]) for k, argv in lines.items()} == after
