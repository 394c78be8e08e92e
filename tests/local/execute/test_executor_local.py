"""The campaign executor on the local transport (tier 1: seconds, no SSH, no lab): a real
campaign of `none` cells on this machine through bench.execute.campaign.executor.Executor, the
deployed runner and agent, a real SQLite store; and the run state machine refusing an illegal
move that the executor tries (after a second writer moved the run), the executor going on.

Needs root (the runner drops caches) and a C toolchain (the agent is built on deploy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli.schedule import build_plan
from bench.execute.campaign.executor import Event, Executor
from bench.execute.campaign.record import Settings, create
from bench.store.campaigns import journal_rows, run_rows, transition
from bench.store.db import open_store
from bench.store.states import TRANSITIONS
from tests.support.local_host import local_hosts_dir, local_settings, none_matrix
from tests.support.runner import assert_private

pytestmark = [pytest.mark.root, pytest.mark.native]

MATRIX = none_matrix("local-exec")


@pytest.fixture
def local_campaign(tmp_path):
    hosts = local_hosts_dir(tmp_path)
    (tmp_path / "matrix.toml").write_text(MATRIX)
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(tmp_path / "matrix.toml"), ["local"], hosts, 5, "lx")
    s = local_settings(tmp_path, hosts, db)
    store = open_store(db)
    create(store, plan, exp, m, ["local"], s, str(tmp_path / "matrix.toml"))
    try:
        yield store, s, [r.run_id for r in plan.runs]
    finally:
        store.close()


def _moves(store, cid: str) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for j in journal_rows(store, cid, kinds=("state",)):
        out.setdefault(j.run_ref, []).append((j.get("from"), j.get("to")))
    return out


def test_a_campaign_on_the_local_transport_goes_through_legal_moves_only(local_campaign):
    store, s, rids = local_campaign
    events: list[Event] = []
    res = Executor(store, "lx", s, on_event=events.append).run()
    assert res.state == "done", [e.line() for e in events][-20:]
    assert sorted(r.run_id for r in res.runs) == sorted(rids) and len(rids) == 4
    assert {r.state for r in res.runs} == {"validated"}, res.runs
    for ref, moves in _moves(store, "lx").items():
        assert moves[0][0] == "planned" and moves[-1][1] == "validated", moves
        for old, new in moves:
            assert new in TRANSITIONS[old], (old, new)
        # each run entered running once and was collected, ingested (by the store) and judged
        assert [m[1] for m in moves].count("running") == 1, moves
    assert [e.kind for e in events].count("state") >= 4 * 5
    _assert_private_files(s, rids)


def _assert_private_files(s: Settings, rids: list[str]) -> None:
    """What the run left is private to the user that ran it: the data dir bench made, its
    plans, traces and collected bundles, the database; the runner's bundles on the host."""
    def mode(p: Path) -> int:
        return p.stat().st_mode & 0o7777
    data = Path(s.data_dir)
    assert {mode(d) for d in (data, data / "plans", data / "traces", data / "bundles",
                              data / "bundles" / "local")} == {0o700}
    assert {mode(f) for d in ("plans", "traces") for f in (data / d).iterdir()} == {0o600}
    db = Path(s.db_url.removeprefix("sqlite:///"))
    assert mode(db) == 0o600
    work = db.parent / "work"
    for rid in rids:
        assert_private(data / "bundles" / "local" / rid)
        assert_private(work / "runs" / rid)
    assert mode(work / "collect") == 0o700


def test_the_store_refuses_the_executors_illegal_move_and_the_campaign_goes_on(local_campaign):
    """A second writer (another controller, a `bench ingest` by hand) judges the first run while
    it executes; the executor's own move running -> collected is then illegal from
    `validated`: the store refuses it, nothing is written, the executor journals why, leaves the
    run as the store has it and finishes the other runs."""
    store, s, rids = local_campaign
    first = []

    def second_writer(ev: Event) -> None:
        if ev.kind == "state" and ev.message.endswith("-> running (starting the runner)") \
                and not first:
            first.append(ev.run_id)
            transition(store, ev.run_id, "ingested", "judged elsewhere")
            transition(store, ev.run_id, "validated", "judged elsewhere")

    res = Executor(store, "lx", s, on_event=second_writer).run()
    rid = first[0]
    rows = {r.run_id: r for r in run_rows(store, "lx")}
    assert rows[rid].state == "validated"
    warnings = [j.message for j in journal_rows(store, "lx", kinds=("warning",))]
    assert any(f"run {rid}: validated -> collected is not a legal transition" in w
               for w in warnings), warnings
    moves = next(m for ref, m in _moves(store, "lx").items() if ref == rows[rid].ref)
    assert ("validated", "collected") not in moves and moves[-1] == ("ingested", "validated")
    assert res.state == "done" and all(r.state == "validated" for r in rows.values())
    assert Path(s.data_dir, "bundles", "local", rid).is_dir()     # collected, never stored


def test_a_worker_whose_error_handling_fails_stops_the_campaign_instead_of_hanging(
        local_campaign, monkeypatch):
    """When recording a failure itself fails (a database that stays locked), the worker thread
    dies; the others must not wait for it forever: the campaign stops with one clear error and
    `bench resume` can carry on."""
    import threading

    from bench.errors import BenchError
    from bench.execute.campaign import worker as worker_mod
    store, s, rids = local_campaign

    def broken_run(self, rid):
        raise BenchError("injected: the host said no")

    class StoreGone(Executor):
        def fail(self, rid, exc):
            raise RuntimeError("database is locked")

    monkeypatch.setattr(worker_mod.Worker, "do_run", broken_run)
    out: list = []
    t = threading.Thread(target=lambda: out.append(_catch(StoreGone(store, "lx", s).run)),
                         daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the campaign hung on a dead worker"
    assert isinstance(out[0], BenchError), out
    assert "a host worker failed" in out[0].message and "database is locked" in out[0].message
    assert "bench resume lx" in (out[0].hint or "")


def _catch(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc


def _beat_with(local_campaign, monkeypatch, answers, run_for):
    """Executor._beat against a heartbeat that answers from `answers` (an exception is raised,
    as a database that stays locked or a session PostgreSQL ended); events and the stop flag."""
    import dataclasses
    import threading
    import time

    from bench.execute.campaign import executor as ex_mod
    from bench.store.controller_lock import owner_info
    store, s, _ = local_campaign
    s = dataclasses.replace(s, heartbeat_s=0.05, lock_stale_s=1.0)
    events: list[Event] = []
    ex = Executor(store, "lx", s, on_event=events.append)
    it = iter(answers)

    def heartbeat(*_a):
        a = next(it, True)
        if isinstance(a, Exception):
            raise a
        return a
    monkeypatch.setattr(ex_mod, "heartbeat", heartbeat)
    stop = threading.Event()
    t0 = time.monotonic()
    th = threading.Thread(target=ex._beat, args=(owner_info(), stop), daemon=True)
    th.start()
    th.join(run_for)
    stop.set()
    th.join(5)
    return ex, events, time.monotonic() - t0


def test_a_controller_that_cannot_renew_its_lease_stops_once_the_lease_ran_out(
        local_campaign, monkeypatch):
    """Past the lease another controller may take the campaign over: a controller whose
    heartbeats keep failing must stop as if it had lost the lock, not run on without it."""
    from bench.store.db import StoreError
    ex, events, secs = _beat_with(local_campaign, monkeypatch,
                                  [StoreError("database is locked")] * 1000, run_for=10)
    assert ex._stop.is_set() and 1.0 <= secs < 5, secs
    assert any("controller lock not renewed for 1s (database is locked)" in e.message
               for e in events), [e.message for e in events]


def test_a_heartbeat_that_fails_briefly_does_not_stop_the_campaign(local_campaign, monkeypatch):
    from bench.store.db import StoreError
    ex, events, _ = _beat_with(local_campaign, monkeypatch,
                               [StoreError("database is locked")] * 5, run_for=1.5)
    assert not ex._stop.is_set() and not events
