"""Read commands and demo runs (issue 23): after `bench demo`, `bench runs`, `results`,
`compare`, `export`, `sizing`, `plot` and `placement` printed empty tables or "no retained
runs" and exited 0 (or 2 with no fix), saying nothing of the demo runs they left out. Now each
says on stderr how many it left out and how to see them, and --include-demo shows them on
every one. Driven through the real CLI on real databases (SQLite and PostgreSQL, made by the
migrations) holding bundles ingested into a campaign flagged demo; and, as root, on the
database a real `bench demo` wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.cli import main
from bench.store import queries
from bench.store.campaigns import campaign_list, create_campaign, set_flags
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle

REPO = Path(__file__).resolve().parents[3]
DEMO = "demo-s0-20261201T000000"
CELLS = ("64Mi-cgroup-classic", "64Mi-cgroup-mglru")     # a reclaim pair, compared
DEMO_CELLS = CELLS + ("256Mi-none-mglru",)                  # and a capacity point
NOTE = "runs of `bench demo` campaigns left out; --include-demo shows them"


def _demo_db(store, bundles, *, real: bool = False) -> None:
    """A demo campaign of three runs (DEMO_CELLS); with `real`, also campaign c1's run."""
    create_campaign(store, DEMO, matrix="demo")
    set_flags(store, DEMO, demo=True)
    for pos, cell in enumerate(DEMO_CELLS):
        ingest_bundle(store, bundles(f"demo-r00{pos}", cell, campaign=DEMO, position=pos,
                                     seed=pos))
    if real:
        ingest_bundle(store, bundles("c1-r000", CELLS[0], campaign="c1", position=9, seed=9))


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    got = capsys.readouterr()
    return rc, got.out, got.err


def _reads(pair: tuple[str, str] = CELLS) -> dict[str, tuple[list[str], Callable[[str], int]]]:
    """Each read command -> (argv, how many runs, curves or rows its stdout shows); compare
    compares the cells of `pair`."""
    return {
        "runs": (["runs", "--json"], lambda out: len(json.loads(out))),
        "results --matrix": (["results", "--matrix", "reclaim", "--json"],
                             lambda out: len(json.loads(out)["rows"])),
        "compare": (["compare", *pair, "--json"],
                    lambda out: json.loads(out)["n_a"] + json.loads(out)["n_b"]),
        "export": (["export"], lambda out: len(out.splitlines()) - 1),
        "export iterations": (["export", "--table", "iterations", "--format", "json"],
                              lambda out: len({r["run_id"] for r in json.loads(out)})),
        "sizing": (["sizing", "--target-seconds", "1", "--reclaim", "classic", "--json"],
                   lambda out: len(json.loads(out)["curves"])),
        "placement": (["placement", "--bandwidths", "paper-gh200", "--target-seconds", "2",
                       "--json"], lambda out: len(json.loads(out)["sizing"]["curves"])
                      if json.loads(out).get("sizing") else 0),
    }


def test_every_read_command_says_what_it_left_out_and_include_demo_shows_it(
        store, bundles, db_url, capsys, tmp_path):
    _demo_db(store, bundles)
    hidden = len(queries.load_runs(store, include_demo=True))
    assert hidden == len(DEMO_CELLS) and queries.load_runs(store) == []
    for name, (argv, shown) in _reads().items():
        rc, out, err = cli(capsys, *argv, "--db", db_url)
        assert rc == 0, (name, err)
        # compare counts the runs of the two cells it compares, the others every one
        left_out = len(CELLS) if name == "compare" else hidden
        assert f"note: {left_out} {NOTE}" in err, (name, err)
        assert shown(out) == 0, (name, out)
        rc, out, err = cli(capsys, *argv, "--db", db_url, "--include-demo")
        assert rc == 0, (name, err)
        assert "bench demo" not in err, (name, err)
        assert shown(out) > 0, (name, out)
        # naming the demo campaign reads it whole, with nothing left out to speak of
        rc, out, err = cli(capsys, *argv, "--db", db_url, "--campaign", DEMO)
        assert rc == 0 and "bench demo" not in err and shown(out) > 0, (name, err)


def test_a_read_that_finds_nothing_else_names_the_fix(store, bundles, db_url, capsys,
                                                      tmp_path):
    _demo_db(store, bundles)
    rc, out, err = cli(capsys, "results", "--cell", "64mib-cgroup-classic", "--db", db_url)
    # the cell is echoed in its canonical spelling, with the demo run it left out
    assert rc == 2 and out == ""
    assert ("no stored runs of cell 64Mi-cgroup-classic (1 run of `bench demo` campaigns "
            "left out)") in err and "fix: --include-demo shows them" in err
    rc, out, _ = cli(capsys, "results", "--cell", "64mib-cgroup-classic", "--db", db_url,
                     "--include-demo", "--json")
    assert rc == 0 and json.loads(out)[0]["cell"] == "64Mi-cgroup-classic"
    png = tmp_path / "reclaim.png"
    rc, _, err = cli(capsys, "plot", "reclaim", "-o", png, "--db", db_url)
    assert rc == 2 and not png.exists()
    assert "no retained runs for the reclaim plot (3 runs of `bench demo` campaigns left " \
           "out)" in err and "fix: --include-demo shows them" in err
    rc, _, err = cli(capsys, "plot", "reclaim", "-o", png, "--db", db_url, "--include-demo")
    assert rc == 0 and png.stat().st_size > 0, err


def test_only_the_demo_runs_in_scope_are_counted(store, bundles, db_url, capsys):
    """With a real campaign beside the demo one: the real run is shown, the note counts the
    demo runs of the cells and host asked about, and a hidden demo campaign is not counted
    (it was hidden on purpose)."""
    _demo_db(store, bundles, real=True)
    rc, out, err = cli(capsys, "runs", "--json", "--db", db_url)
    assert rc == 0 and [r["run_id"] for r in json.loads(out)] == ["c1-r000"]
    assert f"note: 3 {NOTE}" in err
    rc, out, err = cli(capsys, "runs", "--json", "--db", db_url, "--cell", CELLS[1])
    assert rc == 0 and json.loads(out) == [] and "note: 1 run of `bench demo`" in err
    [host] = {r["host"] for r in queries.load_runs(store, include_demo=True)}
    rc, _, err = cli(capsys, "runs", "--db", db_url, "--host", "no-such-host")
    assert rc == 0 and "bench demo" not in err
    rc, _, err = cli(capsys, "runs", "--db", db_url, "--host", host)
    assert rc == 0 and f"note: 3 {NOTE}" in err
    set_flags(store, DEMO, hidden=True)
    rc, _, err = cli(capsys, "runs", "--db", db_url)
    assert rc == 0 and "bench demo" not in err
    rc, out, _ = cli(capsys, "runs", "--json", "--db", db_url, "--include-demo")
    assert [r["run_id"] for r in json.loads(out)] == ["c1-r000"]


def test_quiet_keeps_the_note_off_and_stdout_clean(store, bundles, db_url, capsys):
    _demo_db(store, bundles)
    rc, out, err = cli(capsys, "-q", "export", "--db", db_url)
    assert rc == 0 and err == "" and "bench demo" not in out


@pytest.mark.root
@pytest.mark.native
@pytest.mark.slow
def test_after_a_real_demo_every_read_command_points_at_its_runs(tmp_path):
    """The issue's case as a user meets it: `bench demo` (its measured part, about 20 s), then
    each read command as a child process on the database it wrote."""
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    # nothing of the user's data directory is read or written
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_DATA_HOME=str(tmp_path / "xdg"),
               BENCH_DATA_DIR=str(tmp_path / "data"))

    def bench(*argv: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bench", *map(str, argv), "--db", db],
                              capture_output=True, text=True, cwd=tmp_path, env=env,
                              timeout=600)
    r = bench("demo", "--no-trace", "--out", tmp_path / "demo")
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    store = open_store(db)
    try:
        [camp] = campaign_list(store)
        hidden = len(queries.load_runs(store, include_demo=True))
    finally:
        store.close()
    assert camp.demo and hidden > 0
    pair = ("67M-cgroup-classic", "268M-none-classic")     # the demo's (tests/fleet)
    for name, (argv, shown) in _reads(pair).items():
        r = bench(*argv)
        left_out = 2 if name == "compare" else hidden
        assert r.returncode == 0 and f"note: {left_out} {NOTE}" in r.stderr, (name, r.stderr)
        assert shown(r.stdout) == 0, (name, r.stdout)
        r = bench(*argv, "--include-demo")
        assert r.returncode == 0 and "bench demo" not in r.stderr, (name, r.stderr)
        assert shown(r.stdout) > 0, (name, r.stdout)
    r = bench("plot", "reclaim", "-o", tmp_path / "reclaim.png")
    assert r.returncode == 2 and f"({hidden} runs of `bench demo` campaigns left out)" in \
        r.stderr and "fix: --include-demo shows them" in r.stderr
    r = bench("plot", "reclaim", "-o", tmp_path / "reclaim.png", "--include-demo")
    assert r.returncode == 0 and (tmp_path / "reclaim.png").stat().st_size > 0, r.stderr
