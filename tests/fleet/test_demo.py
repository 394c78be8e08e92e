"""`bench demo`, the README's main job: the real demo as root on this machine with a temp --db,
--out and data dir (nothing of the user's data directory is touched), and the non-root path
(the trace pipeline, then a note on what the measured part needs, exit 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.agents.hostrunner import poolfmt
from bench.store import queries
from bench.store.campaigns import campaign_list, campaign_row, run_rows
from bench.store.db import open_store

REPO = Path(__file__).resolve().parents[2]
G = 10 ** 9


def _env(tmp_path: Path) -> dict:
    # a wide terminal so rich does not wrap the tables; data and SQLite away from the user's
    return dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="220",
                XDG_DATA_HOME=str(tmp_path / "xdg"), BENCH_DATA_DIR=str(tmp_path / "data-env"))


@pytest.mark.root
@pytest.mark.native
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, mlock, drop_caches)")
def test_demo_runs_the_campaign_on_the_local_host(tmp_path):
    out, db = tmp_path / "demo", f"sqlite:///{tmp_path / 'bench.db'}"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "bench", "demo", "--model", "tiny", "--out",
                        str(out), "--db", db], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(tmp_path), timeout=600)
    secs = time.monotonic() - t0
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-4000:]
    assert not (tmp_path / "xdg").exists() and not (tmp_path / "data-env").exists()

    store = open_store(db)
    try:
        [camp] = campaign_list(store)
        cid = camp.id
        assert campaign_row(store, cid).state == "done"
        rows = {x.cell: x for x in run_rows(store, cid)}
        measured = {x["cell"]: x for x in queries.load_runs(store, campaign=cid)}
    finally:
        store.close()
    # trace pipeline ran first, then the campaign; the results table and the cells are printed
    assert "part 1: the trace pipeline" in text and (out / "plan.bin").is_file()
    assert f"reclaim matrix, campaign {cid}" in text
    assert f"files in {out}" in text

    cells = {c for c in rows}
    cg = {c for c in cells if c.endswith("-cgroup-classic")}
    # 1/4 and 1/2 of the 256 MiB pool, in whole decimal MB (canonical names)
    assert cg == {"67M-cgroup-classic", "134M-cgroup-classic"}, cells
    assert "268M-none-classic" in cells
    for c in cg | {"268M-none-classic"}:
        assert rows[c].state == "validated" and rows[c].retained, rows[c]
        assert measured[c]["device_bytes"] is not None, measured[c]
        assert measured[c]["device_bytes_per_iteration"] is not None
    # the walls bite: the 67M wall reads from the device in the measured pass, `none` hardly
    assert measured["67M-cgroup-classic"]["device_bytes_per_iteration"] > \
        measured["268M-none-classic"]["device_bytes_per_iteration"]
    # pool, work dir and bundles live under --out
    # (the pool in its keyed directory <L>x<E>x<S>-s<seed>: one shape, one pool)
    (manifest,) = (out / "pool").glob("*/pool.json")
    assert poolfmt.parse_key(manifest.parent.name) is not None
    assert json.loads(manifest.read_text())["complete"] is True
    assert (out / "work" / "runs").is_dir()
    bundles = out / "data" / "bundles" / "local"

    balloons = [c for c in cells if "-balloon-" in c]
    if balloons:
        [b] = balloons
        from bench.matrix.cells import parse_cell
        assert parse_cell(b).capacity_bytes % G == 0, b     # a whole GB: a stable name
        assert rows[b].position == 1, rows[b]               # first, seconds after the read
        assert rows[b].state == "validated", rows[b]
        cap = json.loads((bundles / rows[b].run_id / "capacity.json").read_text())
        assert cap["vmlck_verified"] is True and cap["vmlck_bytes"] >= cap["requested_bytes"]
        assert cap["requested_bytes"] <= 2 * G
        assert "note:" in text and f"{b} is about as fast as `none`" in text
    else:   # MemAvailable moved below the demo's balloon: then it is listed with the reason
        assert "--max-lock" in text
    # a demo campaign: marked, and left out of results unless asked
    assert camp.demo
    store = open_store(db)
    try:
        assert queries.load_runs(store) == []
        assert len(queries.load_runs(store, include_demo=True)) == len(measured)
    finally:
        store.close()
    # the small-C balloons are skipped with the lock cap and the flag; memboot and MGLRU too
    for c in ("67M-balloon-classic", "134M-balloon-classic"):
        line = next(x for x in text.splitlines() if c in x)
        assert "skipped" in line and "--max-lock 2G" in line and "pass --max-lock" in line
    line = next(x for x in text.splitlines() if "67M-memboot-classic" in x)
    assert "skipped" in line and "reboot.allowed is false" in line
    if not Path("/sys/kernel/mm/lru_gen").exists():
        line = next(x for x in text.splitlines() if "67M-cgroup-mglru" in x)
        assert "skipped" in line and "no MGLRU" in line
    print(f"demo: {len(rows)} runs, {secs:.1f}s")


@pytest.mark.root
@pytest.mark.native
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, mlock, drop_caches)")
def test_a_rejected_demo_run_says_so_and_exits_1(tmp_path, monkeypatch, capsys):
    """The old failure, provoked: MemAvailable read 1.5 GB lower than it is at run time (as
    when another demo's balloon ended between the read and the run), so the balloon would lock
    more than --max-lock and the runner refuses it. The demo exits 1 and names the run."""
    import bench.execute.demo as demo
    from bench.cli import main
    real = demo.mem_available
    monkeypatch.setattr(demo, "mem_available", lambda: real() - 1_500_000_000)
    monkeypatch.setenv("COLUMNS", "220")
    out, db = tmp_path / "demo", f"sqlite:///{tmp_path / 'bench.db'}"
    rc = main(["demo", "--no-trace", "--out", str(out), "--db", db,
               "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert rc == 1, err[-3000:]
    assert "runs not validated" in err, err[-3000:]
    line = next(x for x in err.splitlines() if "-balloon-classic (" in x)
    # refused by the runner (above balloon_max_bytes) or, since campaigns check their hosts,
    # already by the controller's preflight before anything reaches the host
    assert any(w in line for w in ("balloon_max_bytes", "above", "would lock")), line


def test_demo_without_root_runs_the_trace_part_and_says_what_it_needs(tmp_path, monkeypatch,
                                                                      capsys):
    import bench.execute.demo
    from bench.cli import main
    monkeypatch.setattr(bench.execute.demo.os, "geteuid", lambda: 1000)
    db = f"sqlite:///{tmp_path / 'never.db'}"
    assert main(["demo", "--model", "tiny", "--out", str(tmp_path / "d"), "--db", db,
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["trace"]["plan"]["reads"] > 0
    assert "needs root" in res["campaign"]["skipped"]
    assert not (tmp_path / "never.db").exists() and not (tmp_path / "d" / "pool").exists()


def test_trace_only_needs_nothing(tmp_path, capsys):
    from bench.cli import main
    assert main(["demo", "--trace-only", "--model", "tiny", "--out", str(tmp_path / "d"),
                 "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["directory"] == str(tmp_path / "d") and (tmp_path / "d" / "plan.bin").is_file()
