"""A campaign whose controller is interrupted, through the real `bench` command line in a child
process on the local transport (the deployed runner and agent, a real SQLite store): SIGINT and
SIGTERM sent to the child's pid mid-run print `interrupted: campaign ID; bench resume ID goes
on`, exit 128 + the signal and record the campaign `interrupted`; a bare `bench resume` takes
the newest unfinished campaign (not a newer finished one), says which, and loses no run that
was in flight; `bench watch` tells a SIGKILLed controller from a live one; the controller lock
is held by a process (pid and start time), so an unrelated live process with the holder's pid
does not block `bench resume`.

Needs root (the runner drops caches) and a C toolchain (the agent is built on deploy)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.controller_lock import boot_id, lock_holder, start_ticks
from bench.store.db import open_store
from bench.store.models import JournalEntry
from tests.support.local_host import local_hosts_dir, none_matrix

pytestmark = [pytest.mark.root, pytest.mark.native]


@pytest.fixture
def lab(tmp_path):
    hosts = local_hosts_dir(tmp_path)
    (tmp_path / "matrix.toml").write_text(none_matrix("local-int"))
    return {"tmp": tmp_path, "hosts": hosts, "db": f"sqlite:///{tmp_path / 'bench.db'}"}


def _ctrl_c_reaches_it() -> None:
    """The child's SIGINT as a terminal's foreground job has it: a test run started as a
    background job (nohup, `cmd &` without job control) hands its children SIGINT ignored,
    which bench keeps ignored (bench.cli.interrupt), so Ctrl-C could not be tested there."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(lab) -> dict:
    return dict(os.environ, COLUMNS="200", BENCH_DATA_DIR=str(lab["tmp"] / "data"))


def _schedule(lab, cid: str, group: bool = False, matrix: str = "matrix.toml"
              ) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "schedule", "--matrix", str(lab["tmp"] / matrix),
         "--hosts", "local", "--hosts-dir", str(lab["hosts"]), "--data-dir",
         str(lab["tmp"] / "data"), "--db", lab["db"], "--seed", "5", "--campaign", cid],
        cwd=lab["tmp"], env=_env(lab), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=group, preexec_fn=_ctrl_c_reaches_it)


def _bench(lab, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *argv, "--db", lab["db"]],
                          cwd=lab["tmp"], env=_env(lab), capture_output=True, text=True,
                          timeout=timeout)


def _when_a_run_runs(db: str, cid: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Wait until a run of the campaign is `running` on its host (the controller mid-run)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, ("the controller ended first", proc.communicate())
        try:
            store = open_store(db, write=False)
            try:
                if any(r.state == "running" for r in run_rows(store, cid)):
                    return
            finally:
                store.close()
        except Exception:  # noqa: BLE001 - the database or the campaign is not there yet
            pass
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no run of {cid} reached running in {timeout}s")


def _signal_mid_run(lab, cid: str, sig: int,
                    group: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    """`bench schedule` of campaign `cid` in a child, `sig` sent to its pid while a run is
    running (group: to its whole process group, as Ctrl-C in a terminal does, the local
    runner included); (what it did, seconds from the signal to its exit)."""
    proc = _schedule(lab, cid, group)
    _when_a_run_runs(lab["db"], cid, proc)
    t = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), \
        time.monotonic() - t


def _read(db: str, fn):
    store = open_store(db, write=False)
    try:
        return fn(store)
    finally:
        store.close()


def _watch(lab, cid: str) -> dict:
    ran = _bench(lab, "watch", cid, "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


@pytest.mark.parametrize("sig,group", [(signal.SIGINT, False), (signal.SIGTERM, False),
                                       (signal.SIGINT, True)],
                         ids=["SIGINT", "SIGTERM", "ctrl-c-to-the-group"])
def test_a_signal_records_the_campaign_interrupted_and_says_how_to_go_on(lab, sig, group):
    ran, took = _signal_mid_run(lab, "sig", sig, group)
    assert ran.returncode == 128 + sig, (ran.returncode, ran.stderr[-2000:])
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    last = ran.stderr.strip().splitlines()[-1]
    assert last == f"interrupted: campaign sig; bench resume sig --db {lab['db']} goes on", last
    assert took < 10, took
    c = _read(lab["db"], lambda s: campaign_row(s, "sig"))
    assert c is not None and c.state == "interrupted"
    said = _read(lab["db"], lambda s: [j.message for j in journal_rows(s, "sig",
                                                                        kinds=("campaign",))])
    assert said[-1].startswith(f"sig: running -> interrupted: {sig.name} to controller pid "), \
        said
    assert _read(lab["db"], lambda s: lock_holder(s, "sig")) is None     # released
    w = _watch(lab, "sig")
    assert (w["state"], w["controller"], w["controller_gone"], w["resume"]) == \
        ("interrupted", None, None, "bench resume sig")
    runs = _read(lab["db"], lambda s: run_rows(s, "sig"))
    assert any(r.state not in ("validated", "rejected") for r in runs), runs
    ran = _bench(lab, "resume", "sig", timeout=180)     # goes on as the line says
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert {r.state for r in _read(lab["db"], lambda s: run_rows(s, "sig"))} == {"validated"}


def test_a_bare_resume_takes_the_newest_unfinished_campaign_and_loses_no_run(lab):
    ran, _ = _signal_mid_run(lab, "older", signal.SIGINT)
    assert ran.returncode == 130, ran.stderr[-2000:]
    in_flight = [r.run_id for r in _read(lab["db"], lambda s: run_rows(s, "older"))
                 if r.state == "running"]
    assert in_flight
    newer = _schedule(lab, "newer")                 # a newer campaign, run to its end
    out, err = newer.communicate(timeout=180)
    assert newer.returncode == 0, err[-2000:]
    newer_journal = len(_read(lab["db"], lambda s: journal_rows(s, "newer")))

    ran = _bench(lab, "resume", timeout=180)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ("resuming campaign older (interrupted): the newest unfinished campaign"
            in ran.stderr.splitlines()), ran.stderr[-2000:]
    assert "campaign older: done" in ran.stderr
    runs = _read(lab["db"], lambda s: run_rows(s, "older"))
    assert {r.state for r in runs} == {"validated"}, runs      # the run in flight included
    assert len(_read(lab["db"], lambda s: journal_rows(s, "newer"))) == newer_journal

    ran = _bench(lab, "resume")                     # nothing unfinished is left
    assert ran.returncode == 1, (ran.returncode, ran.stderr)
    lines = ran.stderr.strip().splitlines()
    assert lines == ["error: no unfinished campaign to resume: every campaign is done",
                     "fix: `bench campaigns` lists them; `bench resume ID` resumes one by id"], \
        lines


def _hold_lock_as(db: str, cid: str, **holder) -> None:
    """Write `holder` into the campaign's controller lock row, as a controller would have."""
    store = open_store(db)
    try:
        with store.session() as s, s.begin():
            row = s.query(JournalEntry).filter_by(campaign_id=cid, kind="lock").one()
            row.data = dict(row.data or {}, **holder)
    finally:
        store.close()


def test_watch_tells_a_dead_controller_and_a_reused_pid_holds_no_campaign(lab):
    # 16 runs, not 4: the controller must outlive the two commands run while it is live (a
    # loaded machine starts each in seconds, and 4 one-second runs had ended by then)
    (lab["tmp"] / "long.toml").write_text(
        none_matrix("local-int").replace("repetitions = 2", "repetitions = 8"))
    proc = _schedule(lab, "killed", matrix="long.toml")
    _when_a_run_runs(lab["db"], "killed", proc)
    w = _watch(lab, "killed")                       # live: its controller, nothing to resume
    assert (w["controller"]["pid"], w["controller_gone"], w["resume"]) == (proc.pid, None, None)
    ran = _bench(lab, "resume")                     # the only unfinished one is driven
    assert ran.returncode == 1 and "driven by live controllers: killed (pid " \
        f"{proc.pid} on {socket.gethostname()})" in ran.stderr, ran.stderr
    proc.kill()                                     # SIGKILL: nothing recorded, lock kept
    proc.communicate()
    w = _watch(lab, "killed")
    assert w["state"] == "running" and w["controller"] is None, w
    assert w["controller_gone"]["pid"] == proc.pid and w["resume"] == "bench resume killed"
    shown = _bench(lab, "watch", "killed", "--once").stderr + \
        _bench(lab, "watch", "killed", "--once").stdout
    assert f"controller gone (pid {proc.pid} on {socket.gethostname()} no longer runs)" \
        in shown and "`bench resume killed` goes on" in shown, shown

    sleeper = subprocess.Popen(["sleep", "300"])     # an unrelated live process
    try:
        me = dict(pid=sleeper.pid, host=socket.gethostname(), boot_id=boot_id())
        _hold_lock_as(lab["db"], "killed", **me, start_ticks=start_ticks(sleeper.pid))
        ran = _bench(lab, "resume", "killed")       # that very process holds it: refused
        assert ran.returncode == 1 and f"driven by pid {sleeper.pid}" in ran.stderr, \
            ran.stderr
        # the holder's pid, but another process (another start time): not a holder
        _hold_lock_as(lab["db"], "killed", **me, start_ticks=start_ticks(sleeper.pid) + 1)
        assert _watch(lab, "killed")["controller_gone"]["pid"] == sleeper.pid
        ran = _bench(lab, "resume", "killed", timeout=180)
        assert ran.returncode == 0, ran.stderr[-2000:]
        assert f"took over from stale pid {sleeper.pid}" in " ".join(
            j.message for j in _read(lab["db"], lambda s: journal_rows(
                s, "killed", kinds=("controller",))))
        assert {r.state for r in _read(lab["db"], lambda s: run_rows(s, "killed"))} == \
            {"validated"}
        assert sleeper.poll() is None               # untouched
    finally:
        sleeper.kill()
        sleeper.wait()


def test_ctrl_c_in_bench_demo_is_an_interrupted_campaign_that_resumes(tmp_path):
    local_hosts_dir(tmp_path)                       # the capabilities the demo needs
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    env = dict(os.environ, COLUMNS="200")
    proc = subprocess.Popen([sys.executable, "-m", "bench", "demo", "--no-trace", "--out",
                             str(tmp_path / "demo"), "--db", db], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_reaches_it)
    cid = None
    end = time.monotonic() + 180
    while cid is None and time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        try:
            cid = _read(db, lambda s: next((c for c in _demo_ids(s)), None))
        except Exception:  # noqa: BLE001 - not created yet
            time.sleep(0.1)
    assert cid is not None
    _when_a_run_runs(db, cid, proc, timeout=180)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == \
        f"interrupted: campaign {cid}; bench resume {cid} --db {db} goes on", err[-2000:]
    assert _read(db, lambda s: campaign_row(s, cid)).state == "interrupted"
    ran = subprocess.run([sys.executable, "-m", "bench", "resume", "--db", db], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert f"resuming campaign {cid} (interrupted)" in ran.stderr
    runs = _read(db, lambda s: run_rows(s, cid))
    assert runs and all(r.state in ("validated", "rejected") for r in runs), runs


def _demo_ids(store) -> list[str]:
    from bench.store.campaigns import campaign_list
    return [c.id for c in campaign_list(store) if c.demo]
