"""The campaign executor on the netns lab: `bench schedule` in a subprocess, SIGKILLed at
seeded random points and resumed each time; in the end every planned run is in the store exactly
once with a terminal state and no run id ran twice on a host. Needs root."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.fleet import offline_campaign

from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.db import open_store

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "tests" / "fixtures" / "matrices" / "lab-campaign.toml"
NAMES = ["lab-netns-1", "lab-netns-2"]


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def has_plan(db: str, cid: str) -> bool:
    store = open_store(db)
    try:
        return campaign_row(store, cid) is not None and bool(
            journal_rows(store, cid, kinds=("plan",)))
    finally:
        store.close()


def journal_count(db: str, cid: str) -> int:
    try:
        store = open_store(db)
    except Exception:  # noqa: BLE001 - no database yet
        return 0
    try:
        return len(journal_rows(store, cid)) if campaign_row(store, cid) else 0
    except Exception:  # noqa: BLE001 - being created by the controller
        return 0
    finally:
        store.close()


def test_kill9_at_random_points_then_resume_loses_and_repeats_nothing(clean_pools, lab,
                                                                    lab_inventory, tmp_path,
                                                                    capsys):
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    env = dict(os.environ, BENCH_DATA_DIR=str(tmp_path / "data"), BENCH_DB=db,
               PYTHONPATH=str(REPO))
    cid = "labkill-s11"
    schedule = bench("schedule", "--matrix", str(MATRIX), "--hosts", ",".join(NAMES),
                     "--hosts-dir", str(lab.hosts_dir), "--seed", "11", "--campaign", cid,
                     "--threads", "1")
    resume = bench("resume", cid, "--hosts-dir", str(lab.hosts_dir))
    rng = random.Random(20261129)
    log = open(tmp_path / "controller.log", "w")
    kills = 0
    t0 = time.monotonic()
    for i in range(10):
        cmd = resume if has_plan(db, cid) else schedule
        before = journal_count(db, cid)
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        # a random point of the campaign's progress (not of the wall clock, which a loaded
        # machine stretches): after 1-10 more journal entries, plus up to a second
        target, deadline = before + rng.randint(1, 10), time.monotonic() + 120
        while p.poll() is None and journal_count(db, cid) < target \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.0))
        if p.poll() is not None:
            assert p.returncode == 0, (tmp_path / "controller.log").read_text()[-3000:]
            break
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
    # finally let it finish
    cmd = resume if has_plan(db, cid) else schedule
    r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                       timeout=240)
    log.close()
    text = (tmp_path / "controller.log").read_text()
    assert r.returncode == 0, text[-4000:]
    assert kills >= 3, f"only {kills} kills landed"

    store = open_store(db)
    try:
        rows = run_rows(store, cid)
        plan = journal_rows(store, cid, kinds=("plan",))[0].data
        js = journal_rows(store, cid)
        assert campaign_row(store, cid).state == "done"
    finally:
        store.close()
    # every planned run exactly once, terminal
    assert sorted(r.run_id for r in rows) == sorted(plan["order"])
    assert len(rows) == 8
    assert {r.state for r in rows} <= {"validated", "rejected"}, rows
    # no run id executed twice: one bundle dir per run id, on its own host only, with exactly
    # one `measuring` in its status history
    seen = {}
    for name in NAMES:
        runs_dir = Path(lab.host(name).dir) / "work" / "runs"
        for d in runs_dir.iterdir() if runs_dir.is_dir() else ():
            if d.name.startswith(cid):
                assert d.name not in seen, f"{d.name} on {seen.get(d.name)} and {name}"
                seen[d.name] = name
                st = json.loads((d / "status.json").read_text())
                phases = [h["phase"] for h in st["history"]]
                assert phases.count("measuring") == 1, (d.name, phases)
                assert st["phase"] == "done", (d.name, st)
    assert sorted(seen) == sorted(plan["order"])
    assert all(seen[r.run_id] == r.host for r in rows)
    # the journal shows the story: controllers taking over stale locks, one start per run
    starts = {}
    for j in js:
        d = j.data or {}
        if j.kind == "state" and d.get("to") == "running":
            starts[j.run_ref] = starts.get(j.run_ref, 0) + 1
    # runs a killed controller left `running` and a later one re-attached to and collected
    reattached, open_runs = set(), set()
    for j in js:
        d = j.data or {}
        if j.kind == "controller":
            reattached |= open_runs
        elif j.kind == "state" and d.get("to") == "running":
            open_runs.add(j.run_ref)
        elif j.kind == "state" and d.get("to") == "collected":
            open_runs.discard(j.run_ref)
    assert reattached, "no kill landed while a run was going on host-side"
    controllers = sum(1 for j in js if j.kind == "controller")
    assert controllers >= 3     # kills before the lock was taken leave no entry
    assert len(starts) == 8
    print(f"{kills} kills, {controllers} controllers, {len(rows)} runs, {time.monotonic() - t0:.1f}s, "
          f"running transitions per run {sorted(starts.values())}, re-attached {len(reattached)}")
    # the probe sees each host as its runs recorded it: the fingerprint of the probed facts is
    # the campaign's reference (kernel, cmdline, agent, controller, page-cache settings)
    from bench.cli import main
    capsys.readouterr()
    assert main(["hosts", "probe", *NAMES, "--hosts-dir", str(lab.hosts_dir),
                 "--campaign", cid, "--db", db, "--json"]) == 0
    probed = {r["host"]: r["campaign"] for r in json.loads(capsys.readouterr().out)}
    assert {h: (c["matches"], c["differences"]) for h, c in probed.items()} == {
        h: (True, []) for h in NAMES}, probed


def test_watch_and_campaigns_read_the_database_only(tmp_path, capsys):
    """`bench campaigns` / `bench watch --once` on a database with no campaign host reachable:
    they never touch a host."""
    from bench.cli import main
    db = offline_campaign(tmp_path, MATRIX, "w-s3")
    assert main(["campaigns", "--db", db, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["id"] == "w-s3" and rows[0]["states"] == {"planned": 8}
    assert main(["watch", "w-s3", "--db", db, "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["total"] == 8 and p["finished"] == 0 and len(p["hosts"]) == 2
    assert p["controller"] is None and all(h["phase"] == "waiting" for h in p["hosts"])
    assert p["eta_s"] == pytest.approx(4 * 5)


def test_live_view_shows_pass_and_iteration_as_the_host_reported_them(tmp_path):
    """The executor stores the runner's live progress in one row per run (updated in place);
    the snapshot and the rich view show pass and iteration; the plain lines skip it."""
    from rich.console import Console

    from bench.execute.campaign.watch import progress
    from bench.results import campaign_views
    from bench.store.campaigns import journal_rows, run_rows, set_live, transition
    db = offline_campaign(tmp_path, MATRIX, "l-s3")
    store = open_store(db)
    try:
        rid = run_rows(store, "l-s3")[0].run_id
        for st in ("boot_verified", "deployed", "running"):
            transition(store, rid, st)
        before = len(journal_rows(store, "l-s3"))
        for it in (5, 17):
            set_live(store, rid, {"phase": "measuring", "pass": 1, "passes": 2,
                                  "iteration": it, "iterations": 40})
        assert len(journal_rows(store, "l-s3")) == before + 1       # updated in place
        p = progress(store, "l-s3")
        h = next(h for h in p["hosts"] if h["run_id"] == rid)
        assert (h["phase"], h["pass"], h["iteration"], h["iterations"]) == ("measuring", 1, 17, 40)
        con = Console(record=True, width=160)
        con.print(campaign_views.campaign_renderable(p))
        row = next(line for line in con.export_text().splitlines() if rid in line)
        assert "measuring" in row and "2/2" in row and "17/40" in row, row
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):       # no terminal: plain journal lines
            campaign_views.campaign_live(lambda: p, lambda: True, interval=0,
                                journal=lambda after: journal_rows(store, "l-s3", after))
        kinds = [line.split()[2] for line in out.getvalue().splitlines()]
        assert "state" in kinds and "live" not in kinds, kinds
    finally:
        store.close()
