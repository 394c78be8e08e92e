"""A first user's database and tables: `--db` takes a path or a URL, read commands never
create nor migrate a database (and say how to fix it), a file that is not a database is one
line, tables print whole to a pipe and never cut an id or a number in a narrow terminal,
`bench export --table` carries the text run id in every table, and completion offers the
cells and campaigns the database holds. Real SQLite files made by the real migrations, the
real CLI (in-process, and as a subprocess writing into a pipe)."""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from alembic import command
from rich.console import Console

from bench.cli import main
from bench.results import views
from bench.store.db import _alembic_config, head_revision, open_store
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns
from tests.support.paths import REPO

# ids as long as the schema allows (64): a whole id never fits an 80-column table cell
LONG = ["demo-20261201T120000-reclaim-s123456-r0001-a-long-tail-of-words",
        "demo-20261201T120000-reclaim-s123456-r0002-a-long-tail-of-words"]
CAMPAIGN = "demo-reclaim-s123456-20261201T120000-with-a-long-name"


@pytest.fixture
def long_db(tmp_path, bundles):
    path = tmp_path / "long.db"
    st = open_store(str(path))                  # a path, not a URL
    ensure_campaigns(st, CAMPAIGN)
    for i, rid in enumerate(LONG):
        ingest_bundle(st, bundles(rid, "64Mi-balloon-mglru", campaign=CAMPAIGN, position=i,
                                  repetition=i, speed=1.0 + i / 7, seed=i),
                      nominal_miss_bytes=2.0e7)
    st.close()
    return path


def _cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _bench(*argv, cwd=None, env=None):
    """bench as a user runs it, stdout a pipe (`bench ... | cat`)."""
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    e.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "bench", *map(str, argv)], cwd=cwd or REPO,
                          env=e, capture_output=True, text=True, timeout=120)


# output ------------------------------------------------------------------------------------

def test_runs_into_a_pipe_print_whole_ids_and_numbers(long_db):
    p = _bench("runs", "--db", long_db)
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout
    rows = json.loads(_bench("runs", "--db", long_db, "--json").stdout)
    for r in rows:
        line = next(x for x in p.stdout.splitlines() if r["run_id"] in x)   # grep ID
        assert CAMPAIGN in line and views.num(r["iteration_median_s"]) in line
        assert views.num(r["device_gb_per_iteration"], ".4f") in line
    assert {r["run_id"] for r in rows} == set(LONG)


def test_runs_in_a_narrow_terminal_never_cut_ids_or_numbers(long_db, capsys, monkeypatch):
    term = Console(file=io.StringIO(), force_terminal=True, width=60, color_system=None)
    monkeypatch.setattr(views, "console", term)
    rc, _, err = _cli(capsys, "runs", "--db", long_db)
    out = term.file.getvalue()
    assert rc == 0, err
    body = [x for x in out.splitlines() if "│" in x]        # data rows (headers may abbreviate)
    assert len(body) >= len(LONG) and not any("…" in x for x in body)
    rc, js, _ = _cli(capsys, "runs", "--db", long_db, "--json")
    for r in json.loads(js):
        line = next(x for x in out.splitlines() if r["run_id"] in x)
        assert views.num(r["iteration_median_s"]) in line
        assert views.num(r["device_gb_per_iteration"], ".4f") in line
    # a text column still wraps at spaces: the table is no wider than its words need
    assert max(len(x) for x in out.splitlines()) < 60 + 2 * len(LONG[0]) + len(CAMPAIGN)


# databases -----------------------------------------------------------------------------------

READERS = [("runs",), ("results", "--matrix", "reclaim"),
           ("results", "--cell", "64Mi-cgroup-mglru"),
           ("compare", "64Mi-cgroup-mglru", "64Mi-balloon-mglru"),
           ("sizing", "--target-seconds", "1"), ("export",), ("export", "--table", "timeline"),
           ("campaigns",), ("watch", "--once"), ("plot", "capacity", "-o", "x.png"),
           ("db", "current"), ("retention", "recheck")]


@pytest.mark.parametrize("argv", READERS, ids=" ".join)
def test_a_reader_never_creates_a_database(argv, tmp_path, capsys):
    db = tmp_path / "none.db"
    rc, out, err = _cli(capsys, *argv, "--db", db)
    assert rc != 0 and out == ""
    assert f"no database at {db}" in err and "bench db upgrade" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []         # nothing created at all


def test_runs_none_db_as_a_user_types_it(tmp_path):
    p = _bench("runs", "--db", tmp_path / "none.db")
    assert p.returncode == 1 and "no database at" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "none.db").exists()


def test_a_mistyped_url_creates_nothing(tmp_path, capsys):
    rc, _, err = _cli(capsys, "runs", "--db", f"sqlite:///{tmp_path}/typo.db")
    assert rc == 1 and "no database at" in err and not list(tmp_path.iterdir())
    rc, _, err = _cli(capsys, "runs", "--db", f"sqlit:///{tmp_path}/x.db")
    assert rc == 2 and "not 'sqlit'" in err and not list(tmp_path.iterdir())
    rc, _, err = _cli(capsys, "runs", "--db", "http://[::1")
    assert rc == 2 and "Traceback" not in err


def test_paths_relative_and_absolute_and_urls_name_one_database(long_db, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    want = set(LONG)
    for spelling in (str(long_db), "./long.db", "long.db", f"sqlite:///{long_db}"):
        rc, out, err = _cli(capsys, "runs", "--db", spelling, "--json")
        assert rc == 0, (spelling, err)
        assert {r["run_id"] for r in json.loads(out)} == want
    monkeypatch.setenv("BENCH_DB", "./long.db")                 # BENCH_DB takes a path too
    rc, out, _ = _cli(capsys, "runs", "--json")
    assert rc == 0 and {r["run_id"] for r in json.loads(out)} == want


def test_writers_create_and_migrate_at_a_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(capsys, "db", "upgrade", "--db", "./new.db")
    assert rc == 0 and f"empty -> {head_revision()}" in err
    rc, out, _ = _cli(capsys, "db", "current", "--db", "new.db", "--json")
    assert rc == 0 and json.loads(out)["current"] == head_revision()
    rc, out, _ = _cli(capsys, "runs", "--db", "new.db", "--json")
    assert rc == 0 and json.loads(out) == []


@pytest.mark.parametrize("content", [b"hello, I am a text file\n", os.urandom(8192),
                                     b"SQLite format 3\x00" + os.urandom(4000)],
                         ids=["text", "random", "bad-header"])
@pytest.mark.parametrize("argv", [("runs",), ("db", "current"), ("db", "upgrade"),
                                  ("ingest", ".")], ids=" ".join)
def test_a_file_that_is_not_a_database_is_one_line(tmp_path, capsys, content, argv):
    f = tmp_path / "x.db"
    f.write_bytes(content)
    rc, _, err = _cli(capsys, *argv, "--db", f)
    assert rc != 0 and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2, err      # the error and its fix
    assert str(f) in err
    assert f.read_bytes() == content                    # left as it was


def test_an_empty_file_or_a_directory(tmp_path, capsys):
    (tmp_path / "empty.db").touch()
    rc, _, err = _cli(capsys, "runs", "--db", tmp_path / "empty.db")
    assert rc == 1 and "empty database" in err and "bench db upgrade" in err
    assert (tmp_path / "empty.db").stat().st_size == 0
    rc, _, err = _cli(capsys, "runs", "--db", tmp_path)
    assert rc == 1 and "not a database file" in err


def test_an_older_schema_asks_for_bench_db_upgrade(tmp_path, capsys):
    path = tmp_path / "old.db"
    st = open_store(str(path))
    with st.engine.begin() as conn:
        command.downgrade(_alembic_config(conn), "-1")
    st.close()
    old = sqlite3.connect(path).execute("SELECT version_num FROM alembic_version").fetchone()[0]
    assert old != head_revision()
    for argv in (("runs",), ("results", "--matrix", "reclaim"), ("export",)):
        rc, _, err = _cli(capsys, *argv, "--db", path)
        assert rc == 1 and f"at schema revision {old}" in err and "bench db upgrade" in err
    rc, out, _ = _cli(capsys, "db", "current", "--db", path)
    assert rc == 0 and out.startswith(f"{old} (head {head_revision()})")
    # nothing migrated it behind the user's back; the writer does
    assert sqlite3.connect(path).execute("SELECT version_num FROM alembic_version") \
        .fetchone()[0] == old
    assert _cli(capsys, "db", "upgrade", "--db", path)[0] == 0
    assert _cli(capsys, "runs", "--db", path)[0] == 0


# export ---------------------------------------------------------------------------------------

def _sql_rows(path, table: str, cols: str) -> list[tuple]:
    """The child table joined on the integer key by hand: what the export must carry."""
    con = sqlite3.connect(path)
    return [tuple(str(v) if v is not None else "" for v in row) for row in con.execute(
        f"SELECT r.run_id, {cols} FROM {table} t JOIN runs r ON r.id = t.run_id")]


@pytest.mark.parametrize("table, sql_table, cols", [
    ("iterations", "iterations", "t.pass_no, t.iter_no, t.wall_ns, t.bytes, t.reads"),
    ("counters", "counter_deltas", "t.interval, t.source, t.key, t.delta"),
    ("timeline", "timeline", "t.seq, t.mono_ns, t.phase")])
def test_export_tables_carry_the_text_run_id(long_db, capsys, table, sql_table, cols):
    rc, out, err = _cli(capsys, "export", "--table", table, "--db", long_db)
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    names = [c.split(".")[1] for c in cols.split(", ")]
    got = sorted(tuple([r["run_id"], *(r[n] for n in names)]) for r in rows)
    want = sorted(_sql_rows(long_db, sql_table, cols))
    assert got == want and len(want) > 0
    assert {r["run_id"] for r in rows} == set(LONG)
    rc, js, _ = _cli(capsys, "export", "--table", table, "--format", "json", "--db", long_db)
    data = json.loads(js)
    assert rc == 0 and len(data) == len(rows) and {d["run_id"] for d in data} == set(LONG)
    # filters apply to child tables too
    rc, out, _ = _cli(capsys, "export", "--table", table, "--host", "nosuch", "--db", long_db)
    assert rc == 0 and out.strip().splitlines() == [",".join(["run_id", *names_all(table)])]


def names_all(table: str) -> list[str]:
    from bench.store.export import CHILD
    return list(CHILD[table][1])


def test_export_runs_and_bad_choices(long_db, capsys):
    rc, out, _ = _cli(capsys, "export", "--db", long_db, "--format", "json")
    assert rc == 0 and sorted(r["run_id"] for r in json.loads(out)) == LONG
    rc, _, err = _cli(capsys, "export", "--table", "verdicts", "--db", long_db)
    assert rc == 2 and "verdicts" in err
    rc, _, err = _cli(capsys, "export", "--format", "xml", "--db", long_db)
    assert rc == 2 and "xml" in err


# completion from the database --------------------------------------------------------------

def _complete(words: str, env: dict) -> list[str]:
    p = _bench(env={"_BENCH_COMPLETE": "complete_bash", "COMP_WORDS": words,
                    "COMP_CWORD": str(len(words.split(" ")) - 1), **env})
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def test_completion_offers_cells_and_campaigns_of_the_database(long_db, tmp_path):
    env = {"BENCH_DB": str(long_db)}
    assert _complete("bench results --cell 64", env) == ["64Mi-balloon-mglru"]
    assert _complete("bench runs --campaign demo-", env) == [CAMPAIGN]
    assert _complete("bench compare 64Mi-balloon-mglru 64", env) == ["64Mi-balloon-mglru"]
    # no database: nothing offered, and nothing created
    none = tmp_path / "none.db"
    assert _complete("bench results --cell ", {"BENCH_DB": str(none)}) == []
    assert not none.exists()
