"""The lean way of a results view (bench.cli.served: bench.store.result_serve, else
bench.store.result_answer) on real databases built by the migrations, SQLite and PostgreSQL:
for every matrix and cell view under every filter it prints exactly what the typer app
prints for the same command line having computed it itself, before and after a write (the
stored entry is then not served, and the view is brought up to date); it answers nothing
for a database not at head, nor with the cache off; command lines that are not plain (help,
global options, --opt=value, repeated or unknown options, a bad or unstored matrix kind, both
or neither of --cell and --matrix) are left to the app."""

from __future__ import annotations

import io
import sys

import pytest
import sqlalchemy as sa

from bench.cli import _show, served, served_view
from bench.cli.app import main as app_main
from bench.store import result_cache
from bench.store.db import open_store
from bench.store.result_serve import stored_text
from tests.local.store.test_workload_identity_0006 import _old_database

FILTERS = ([], ["--host", "gh200-b"], ["--campaign", "c1"], ["--include-demo"],
           ["--workload", "0"], ["--workload", "zz"])
MATRICES = ("capacity", "reclaim", "equal-memory", "admission", "end-to-end")
CELLS = ("64G-balloon-mglru", "128g-cgroup-mglru", "64G-balloon-mglru-oracle-advice")


def _lines(url: str) -> list[list[str]]:
    out = []
    for f in FILTERS:
        out += [["results", "--matrix", m, *f, "--db", url, "--json"] for m in MATRICES]
        out += [["results", "--matrix", m, *f, "--db", url] for m in MATRICES]   # tables
        for c in CELLS:
            for extra in ([], ["--pool"], ["-v"], ["--verbose", "--pool"]):
                out.append(["results", "--json", "--cell", c, *extra, *f, "--db", url])
                out.append(["results", "--cell", c, *extra, *f, "--db", url])
    return out


def _lean(argv: list[str]) -> str | None:
    """What the lean way prints for `argv` (bench.cli.main before the app), or None."""
    text = served(argv)
    if text is None:
        return None
    if "--json" in argv:
        return text + "\n"
    was, sys.stdout = sys.stdout, io.StringIO()
    try:
        _show(argv, text)
        return sys.stdout.getvalue()
    finally:
        sys.stdout = was


def _app(argv: list[str]) -> tuple[int, str]:
    """The typer app's exit code and stdout for `argv` (it stores what it computes)."""
    was, sys.stdout = sys.stdout, io.StringIO()
    try:
        rc = app_main(argv)
        return rc, sys.stdout.getvalue()
    finally:
        sys.stdout = was


@pytest.fixture
def filled(db_url):
    _old_database(db_url).dispose()
    store = open_store(db_url)
    yield db_url, store
    store.close()


def _clear(store) -> None:
    with store.engine.begin() as conn:         # no view stored (the generation stays)
        conn.execute(sa.text("DELETE FROM results_cache"))


def test_served_text_is_the_apps(filled):
    """Computed by the lean way (bench.store.result_answer) or served by it from the store,
    a view's text is what the app prints having computed it itself."""
    url, store = filled
    lines = _lines(url)
    answered = 0
    for argv in lines:
        _clear(store)
        rc, out = _app(argv)
        _clear(store)
        text = _lean(argv)
        if rc != 0:                       # an error (no runs, a bad prefix): the app says it
            assert text is None and stored_text(*served_view(argv)) is None, argv
            continue
        assert text is not None and text == out, argv                    # computed
        assert stored_text(*served_view(argv)) is not None, argv         # stored
        assert _lean(argv) == out and _app(argv) == (0, out), argv
        answered += 1
    assert answered > len(lines) // 2
    before = {i: _lean(argv) for i, argv in enumerate(lines)}
    with store.engine.begin() as conn:                 # a write: the generation moves
        conn.execute(sa.text(
            "UPDATE runs SET retained = NOT retained WHERE id IN (SELECT min(runs.id) FROM "
            "runs JOIN cells ON cells.id = runs.cell_id WHERE cells.name IN "
            "('64G-balloon-mglru', '128G-cgroup-mglru') AND runs.campaign_id = 'c1' "
            "GROUP BY cells.name)"))
    changed = 0
    after, fresh = {}, set()
    for i, argv in enumerate(lines):
        if before[i] is None:
            continue
        key = repr(served_view(argv))          # a table's line and a JSON one share a view
        if key not in fresh:
            assert stored_text(*served_view(argv)) is None, argv    # not of this generation
        fresh.add(key)
        after[i] = _lean(argv)             # brought up to date (a matrix: from its parts)
        assert after[i] is not None and _lean(argv) == after[i], argv
        assert stored_text(*served_view(argv)) is not None, argv
    _clear(store)
    for i, text in after.items():
        rc, out = _app(lines[i])           # computed from every run
        assert rc == 0 and text == out, lines[i]
        changed += text != before[i]
    assert changed > 0


def test_not_at_head_or_cache_off_answers_nothing(filled, monkeypatch):
    url, store = filled
    argv = ["results", "--matrix", "reclaim", "--db", url, "--json"]
    assert _app(argv)[0] == 0 and stored_text(*served_view(argv)) is not None
    monkeypatch.setattr(result_cache, "ENABLED", False)
    assert served(argv) is None
    monkeypatch.setattr(result_cache, "ENABLED", True)
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0007'"))
    assert stored_text(*served_view(argv)) is None and served(argv) is None
    rc, out = _app(argv)
    assert rc != 0 and out == ""           # the app says why (schema older than head)


@pytest.mark.parametrize("argv", [
    ["results", "--matrix=reclaim", "--json"],
    ["results", "--matrix", "reclaim", "--json", "--help"],
    ["-q", "results", "--matrix", "reclaim", "--json"],
    ["results", "--matrix", "reclaim", "--json", "--json"],
    ["results", "--matrix", "reclaim", "--host", "a", "--host", "b", "--json"],
    ["results", "--matrix", "prefetch", "--json"],
    ["results", "--matrix", "Reclaim", "--json"],
    ["results", "--matrix", "reclaim", "--pool", "--json"],
    ["results", "--matrix", "reclaim", "--cell", "64G-balloon-mglru", "--json"],
    ["results", "--json"],
    ["results", "--cell", "--json"],
    ["results", "--cell", "-x", "--json"],
    ["results", "--cell", "64G-balloon-mglru", "--json", "extra"],
    ["results", "--cell", "64G-balloon-mglru", "--json", "--"],
    ["results", "--cell", "64G-balloon-mglru", "--json", "--bogus"],
    ["runs", "--cell", "64G-balloon-mglru", "--json"],
    ["results"], [],
])
def test_lines_left_to_the_app(argv):
    assert served_view(argv) is None


def test_plain_lines_keyed_as_the_app_keys_them():
    assert served_view(["results", "--cell", "64g-Balloon-mglru", "-v", "--json", "--db",
                        "x.db"]) == ("x.db", "cell_results", {
                            "cell": "64g-Balloon-mglru", "host": None, "campaign": None,
                            "workload": None, "include_demo": False, "pool": False,
                            "verbose": True})
    assert served_view(["results", "--include-demo", "--matrix", "end-to-end", "--json",
                        "--campaign", "c1", "--host", ""]) == (None, "matrix", {
                            "kind": "end-to-end", "host": "", "campaign": "c1",
                            "workload": None, "include_demo": True})


def test_a_closed_pipe_ends_as_the_app_ends(filled):
    """A reader that stops early (`| head`): no traceback, the app's exit status."""
    import subprocess
    url, _ = filled
    outcomes = []
    for opt in (["--matrix", "reclaim"], ["--matrix=reclaim"]):      # lean, then the app's
        argv = [sys.executable, "-c", "import sys; from bench.cli import main; "
                "sys.exit(main())", "results", *opt, "--db", url, "--json"]
        assert subprocess.run(argv, capture_output=True).returncode == 0
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None and p.stdout.read(10)
        p.stdout.close()
        err = p.stderr.read() if p.stderr else b""
        outcomes.append((p.wait(), err))
    assert outcomes[0] == outcomes[1]
    assert b"Traceback" not in outcomes[0][1]
