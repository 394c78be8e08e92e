"""Quarantine during real campaigns on the netns lab, and what `bench resume` makes of it.

1. A host whose sshd dies for good mid-campaign (every process of its netns killed, the runner
   in flight included) is quarantined after the reconnect timeout: its not-started runs of
   placement-`one` cells are handed over to the other host and run there exactly once, its
   placement-`each` runs become `pending` naming the quarantine, the run in flight stays
   `pending` with its spec. Once the host is back, `bench resume` re-attaches to that run by
   run id (never starts it again) and finishes the rest: every run once, one bundle per run id.
2. A host unreachable when `bench resume` starts (or lost again right after answering) is
   waited for up to the reconnect timeout and then quarantined, as during a wait: a run that
   must be re-attached stays `pending` with its spec, no attempt is burnt, and a later resume
   collects it. Here only the host's listening sshd dies, so the detached runner finishes the
   run while the host cannot be reached.

Needs root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.support.fleet import host_bundles, host_status, wait_for

from bench.cli.schedule import build_plan
from bench.execute.campaign.executor import Executor
from bench.execute.campaign.record import Settings, create
from bench.execute.campaign.watch import progress
from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.db import open_store

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
MATRICES = REPO / "tests" / "fixtures" / "matrices"
X, Y = "lab-netns-1", "lab-netns-2"
NAMES = [X, Y]
TERMINAL = ("validated", "rejected")
RECONNECT_S = 3.0


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def env_for(tmp_path: Path, db: str) -> dict:
    return dict(os.environ, BENCH_DATA_DIR=str(tmp_path / "data"), BENCH_DB=db,
                PYTHONPATH=str(REPO))

def controller_bundles(data_dir: Path, cid: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    root = data_dir / "bundles"
    for hd in root.iterdir() if root.is_dir() else ():
        for b in hd.iterdir():
            if b.name.startswith(cid):
                out.setdefault(b.name, []).append(hd.name)
    return out


def last_message(js: list[dict], ref: int) -> str:
    return [j.message for j in js if j.kind == "state" and j.run_ref == ref][-1]


def entered(js: list[dict], ref: int, state: str) -> int:
    return sum(1 for j in js if j.kind == "state" and j.run_ref == ref
               and (j.data or {}).get("to") == state)

def make_campaign(lab, tmp_path: Path, matrix: Path, cid: str, seed: int):
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(matrix), NAMES, lab.hosts_dir, seed, cid)
    s = Settings(threads=1, passes=int(m.workload.get("passes") or 2),
                 data_dir=tmp_path / "data", db_url=db, hosts_dir=lab.hosts_dir,
                 reconnect_timeout_s=RECONNECT_S, chunk_s=5.0, retry_pause_s=0.5)
    store = open_store(db)
    create(store, plan, exp, m, NAMES, s, str(matrix))
    return store, s, plan


class Background:
    """An Executor run in a thread of this process (the test watches the store meanwhile)."""

    def __init__(self, store, cid, settings, **kw):
        self.lines: list[str] = []
        self.ex = Executor(store, cid, settings,
                           on_event=lambda e: self.lines.append(
                               f"{time.monotonic():.1f} {e.line()}"), **kw)
        self.out: dict = {}
        self.th = threading.Thread(target=self._go, daemon=True)
        self.th.start()

    def _go(self):
        try:
            self.out["result"] = self.ex.run()
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.out["error"] = exc

    def join(self, timeout: float):
        self.th.join(timeout)
        assert not self.th.is_alive(), "executor still running:\n" + "\n".join(self.lines[-40:])
        if "error" in self.out:
            raise self.out["error"]
        return self.out["result"]


def test_host_lost_mid_campaign_hands_over_parks_and_resumes_exactly_once(
        clean_pools, lab_host_up, lab, tmp_path):
    lab = lab_host_up
    cid = "lab-handover-s5"
    t0 = time.monotonic()
    store, s, plan = make_campaign(lab, tmp_path, MATRICES / "lab-handover.toml", cid, seed=5)
    rec = journal_rows(store, cid, kinds=("plan",))[0].data
    mine = [r for r in plan.runs if r.host == X]
    placements = [rec["runs"][r.run_id]["placement"] for r in mine]
    # the seed gives X both kinds after its first two runs (checked, not assumed)
    assert "one" in placements[2:] and "each" in placements[2:], placements

    bg = Background(store, cid, s)

    def in_flight():
        rows = {r.run_id: r for r in run_rows(store, cid)}
        done = [r for r in rows.values() if r.host == X and r.state in TERMINAL]
        for r in rows.values():
            if r.host == X and r.state == "running" and done:
                st = host_status(lab, X, r.run_id)
                if st and st.get("phase") not in ("done", "failed"):
                    return r.run_id
        return None
    flying = wait_for(in_flight, 120, "a finished run and a run executing on X")
    before = {r.run_id: r for r in run_rows(store, cid)}
    lab.kill_sshd(X)                          # for good: sshd, sessions, the runner
    t_kill = time.monotonic()
    res = bg.join(180)
    t_first = time.monotonic() - t0
    assert res.state == "incomplete", res
    assert X in res.quarantined and "unreachable" in res.quarantined[X], res

    rows = {r.run_id: r for r in run_rows(store, cid)}
    js = journal_rows(store, cid)
    log = "\n".join(bg.lines[-60:])
    # quarantine: journal and the views' progress (read from the store only)
    q = [j for j in js if j.kind == "quarantine"]
    assert [j.data["host"] for j in q] == [X], log
    assert f"(> {RECONNECT_S:.0f}s, " in q[0].data["reason"], q     # the reconnect timeout
    p = progress(store, cid)
    ph = {h["host"]: h for h in p["hosts"]}
    assert ph[X]["phase"] == "quarantined" and ph[X]["quarantined"] == q[0].data["reason"]
    assert X in p["quarantined"]
    # the run in flight: pending, its spec kept (same run id), nothing handed over
    fr = rows[flying]
    assert fr.state == "pending" and fr.host == X, fr
    assert fr.spec and fr.spec["run_id"] == flying
    assert "quarantined" in last_message(js, fr.ref)
    # X's runs not started at the kill
    not_started = [rid for rid, r in before.items() if r.host == X and r.state == "planned"]
    handed = {j.run_ref: j for j in js if j.kind == "handover"}
    moved = [rid for rid in not_started if rec["runs"][rid]["placement"] == "one"]
    parked = [rid for rid in not_started if rec["runs"][rid]["placement"] == "each"]
    assert moved and parked, (not_started, log)
    for rid in moved:
        r = rows[rid]
        assert r.ref in handed and handed[r.ref].data["from"] == X
        assert handed[r.ref].data["to"] == Y
        assert r.host == Y and r.state in TERMINAL, r
        assert entered(js, r.ref, "running") == 1
    for rid in parked:
        r = rows[rid]
        assert r.host == X and r.state == "pending" and not r.spec, r
        msg = last_message(js, r.ref)
        assert "quarantined" in msg and "placement each" in msg, msg
    assert not any(rows[rid].ref in handed for rid in parked + [flying])
    # nothing failed: a lost host is a quarantine, not infrastructure failures
    assert not any(entered(js, r.ref, "failed") for r in rows.values()), log
    # Y finished everything it had, its own and the handed-over runs
    assert all(r.state in TERMINAL for r in rows.values() if r.host == Y)
    hb = host_bundles(lab, cid)
    for rid in moved:
        assert hb[rid] == [Y], (rid, hb.get(rid))
    for rid in parked:
        assert rid not in hb
    store.close()

    # X comes back; `bench resume` (its own process) finishes the campaign
    lab.start_sshd(X)
    db = s.db_url
    t1 = time.monotonic()
    r = subprocess.run(bench("resume", cid, "--hosts-dir", str(lab.hosts_dir)),
                       capture_output=True, text=True, env=env_for(tmp_path, db),
                       cwd=tmp_path, timeout=240)
    t_resume = time.monotonic() - t1
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    store = open_store(db)
    try:
        rows = {x.run_id: x for x in run_rows(store, cid)}
        js = journal_rows(store, cid)
        assert campaign_row(store, cid).state == "done"
    finally:
        store.close()
    assert sorted(rows) == sorted(rec["order"]) and len(rows) == 12
    others = {rid: x for rid, x in rows.items() if rid != flying}
    assert all(x.state in TERMINAL for x in rows.values()), "\n".join(
        j.message for x in rows.values() if x.state not in TERMINAL
        for j in js if j.run_ref == x.ref)
    for rid in parked:
        assert rows[rid].host == X       # placement each: run on X after all
    # the run in flight was re-attached by run id (never started again): the runner's own
    # account of it is the one execution it had, which died with the host
    fr = rows[flying]
    assert fr.host == X
    msgs = [j.message for j in js if j.run_ref == fr.ref
            and (j.data or {}).get("to") == "running"]
    assert len(msgs) == 2 and msgs[0].endswith("starting the runner"), msgs
    assert msgs[1].endswith("re-attached after pending"), msgs
    st = host_status(lab, X, flying)
    assert [h["phase"] for h in st["history"]].count("accepted") == 1, st
    if st["phase"] == "failed":
        # the usual case: killed mid-run, the runner's partial bundle (settled by whoever
        # looked first) is collected once and rejected with the runner's reason, never retried
        assert "died" in st["reason"], st
        assert fr.state == "rejected", fr
        assert "runner_completed" in last_message(js, fr.ref), last_message(js, fr.ref)
    else:                                   # it had finished just before the kill
        assert fr.state in TERMINAL, fr
    assert entered(js, fr.ref, "failed") == 0
    # every run id executed once, on the host its row names, and collected once
    hb = host_bundles(lab, cid)
    assert sorted(hb) == sorted(rec["order"])
    for rid, hosts in hb.items():
        assert hosts == [rows[rid].host], (rid, hosts)
        hist = [h["phase"] for h in host_status(lab, hosts[0], rid)["history"]]
        assert hist.count("accepted") == 1 and hist.count("measuring") <= 1, (rid, hist)
        if rid != flying:
            assert hist.count("measuring") == 1, (rid, hist)
    cb = controller_bundles(tmp_path / "data", cid)
    assert sorted(cb) == sorted(rec["order"])
    assert all(cb[rid] == [rows[rid].host] for rid in cb), cb
    starts = {rid: entered(js, x.ref, "running") for rid, x in others.items()}
    assert all(n == 1 for n in starts.values()), starts
    assert not any(entered(js, x.ref, "failed") for x in others.values())
    print(f"\nhand-over: killed X {t_kill - t0:.1f}s in, first session {t_first:.1f}s, "
          f"resume {t_resume:.1f}s; moved {len(moved)}, parked {len(parked)}, "
          f"in flight {flying} -> {fr.state}")


def test_resume_waits_for_an_unreachable_host_then_quarantines_and_later_reattaches(
        clean_pools, lab_host_up, lab, tmp_path):
    lab = lab_host_up
    cid = "labresume-s11"
    matrix = MATRICES / "lab-campaign.toml"
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    env = env_for(tmp_path, db)
    t0 = time.monotonic()
    # a controller SIGKILLed while X executes a run
    p = subprocess.Popen(bench("schedule", "--matrix", str(matrix), "--hosts", ",".join(NAMES),
                               "--hosts-dir", str(lab.hosts_dir), "--seed", "11",
                               "--campaign", cid, "--threads", "1",
                               "--reconnect-timeout", str(RECONNECT_S)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                         cwd=tmp_path)
    try:
        def in_flight():
            try:
                store = open_store(db)
            except Exception:  # noqa: BLE001 - not created yet
                return None
            try:
                for r in run_rows(store, cid):
                    if r.host == X and r.state == "running":
                        st = host_status(lab, X, r.run_id)
                        if st and st.get("phase") not in ("accepted", "done", "failed"):
                            return r.run_id
            finally:
                store.close()
            return None
        flying = wait_for(in_flight, 120, "a run executing on X", interval=0.2)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # X's sshd dies; the machine (and the detached runner) goes on
    lab.kill_sshd(X, everything=False)
    assert host_status(lab, X, flying)["phase"] not in ("done", "failed")

    # 1. resume with X unreachable from the start: waited for, then quarantined
    t1 = time.monotonic()
    r = subprocess.run(bench("resume", cid, "--hosts-dir", str(lab.hosts_dir)),
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    t_down = time.monotonic() - t1
    assert r.returncode == 1, (r.stdout + r.stderr)[-3000:]
    store = open_store(db)
    try:
        rows = {x.run_id: x for x in run_rows(store, cid)}
        js = journal_rows(store, cid)
        assert campaign_row(store, cid).state == "incomplete"
        pr = progress(store, cid)
    finally:
        store.close()
    q = [j for j in js if j.kind == "quarantine"]
    assert [j.data["host"] for j in q] == [X]
    assert "at the start of its worker" in q[0].data["reason"], q
    assert any(j.kind == "warning" and "unreachable at the start" in j.message
               for j in js)
    assert t_down >= RECONNECT_S
    fr = rows[flying]
    assert fr.state == "pending" and fr.spec["run_id"] == flying, fr
    assert "re-attaches" in last_message(js, fr.ref)
    assert not any(entered(js, x.ref, "failed") for x in rows.values())
    assert all(x.state == "pending" for x in rows.values() if x.host == X
               and x.state not in TERMINAL)
    assert all(x.state in TERMINAL for x in rows.values() if x.host == Y)
    assert {h["host"]: h["phase"] for h in pr["hosts"]}[X] == "quarantined"
    # meanwhile the runner finished the run on X, unseen
    wait_for(lambda: (host_status(lab, X, flying) or {}).get("phase") == "done", 60,
             "the detached runner to finish")

    # 2. X answers the worker's first look, then is gone when the run is re-attached: the
    # re-attachment waits, then quarantines; the run keeps its spec and its attempts
    lab.start_sshd(X)
    from bench.hosts.ssh import transport_for as real
    gone = {X: False}

    class LosesXAtReattach:
        """X's transport: at the first `runner.py status` (the re-attachment, on the
        connection the worker's first look opened) X goes away for good: its sshd and every
        session are killed before the command is sent."""

        def __init__(self, t):
            self.t = t

        def run(self, argv, **kw):
            if "status" in argv and not gone[X]:
                gone[X] = True
                lab.kill_sshd(X, everything=True)
            return self.t.run(argv, **kw)

        def __getattr__(self, name):
            return getattr(self.t, name)

    def flaky(h):
        t = real(h)
        return LosesXAtReattach(t) if h.name == X else t
    store = open_store(db)
    try:
        s = Settings(threads=1, data_dir=tmp_path / "data", db_url=db,
                     hosts_dir=lab.hosts_dir, reconnect_timeout_s=RECONNECT_S,
                     retry_pause_s=0.5)
        t2 = time.monotonic()
        res = Executor(store, cid, s, transport_for=flaky).run()
        t_lost = time.monotonic() - t2
        rows = {x.run_id: x for x in run_rows(store, cid)}
        js2 = journal_rows(store, cid)
    finally:
        store.close()
    assert gone[X] and res.state == "incomplete" and X in res.quarantined, res
    assert "while re-attaching to " + flying in res.quarantined[X]
    assert t_lost >= RECONNECT_S
    fr = rows[flying]
    assert fr.state == "pending" and fr.spec["run_id"] == flying, fr
    assert "host quarantined while running" in last_message(js2, fr.ref)
    assert not any(entered(js2, x.ref, "failed") for x in rows.values()), \
        [j.message for j in js2[len(js):]]

    # 3. X back for good: everything finishes once; the run is collected, not run again
    lab.start_sshd(X)
    t3 = time.monotonic()
    r = subprocess.run(bench("resume", cid, "--hosts-dir", str(lab.hosts_dir)),
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    t_up = time.monotonic() - t3
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    store = open_store(db)
    try:
        rows = {x.run_id: x for x in run_rows(store, cid)}
        js = journal_rows(store, cid)
        plan = journal_rows(store, cid, kinds=("plan",))[0].data
        assert campaign_row(store, cid).state == "done"
    finally:
        store.close()
    assert sorted(rows) == sorted(plan["order"])
    assert all(x.state in TERMINAL for x in rows.values()), rows
    assert rows[flying].state == "validated", rows[flying]
    assert entered(js, rows[flying].ref, "running") == 2    # started once, re-attached
    hb = host_bundles(lab, cid)
    assert sorted(hb) == sorted(plan["order"])
    for rid, hosts in hb.items():
        assert hosts == [rows[rid].host]
        hist = [h["phase"] for h in host_status(lab, hosts[0], rid)["history"]]
        assert hist.count("accepted") == 1 and hist.count("measuring") == 1, (rid, hist)
    assert not any(entered(js, x.ref, "failed") for x in rows.values())
    print(f"\nresume: controller killed at {t1 - t0:.1f}s; down-from-start resume "
          f"{t_down:.1f}s, lost-at-re-attach resume {t_lost:.1f}s, final resume {t_up:.1f}s")
