"""The one supervise loop (agents/hostrunner/supervise.py) the agent and engine steps share:
unit tests on ordinary processes (no root), then the agent's timeout path through the whole
runner (root), which no other test takes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from bench.agents.hostrunner import supervise as sv
from bench.agents.hostrunner.errors import RunFailed
from tests.support.runner import make_spec, read_json, start, timeline, verify_manifest, wait

PY = sys.executable


def child(tmp_path: Path, code: str, **kw) -> sv.Child:
    kw.setdefault("stdout", str(tmp_path / "out"))
    kw.setdefault("stderr", str(tmp_path / "err"))
    return sv.Child(argv=[PY, "-c", code], what="the test child", **kw)


def rows(tmp_path: Path) -> list[list[str]]:
    lines = (tmp_path / "timeline.csv").read_text().splitlines()
    assert lines[0] == sv.TIMELINE_HEADER.strip()
    return [ln.split(",") for ln in lines[1:]]


def run(tmp_path, c, stop=lambda: False, interval=0.02):
    return sv.supervise(c, str(tmp_path / "timeline.csv"), interval, stop)


def alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


# --------------------------------------------------------------------------- unit: the loop

def test_exit_is_seen_at_once_and_the_last_row_follows_it(tmp_path):
    started = []
    c = child(tmp_path, "import time, sys; time.sleep(0.3); print('out'); "
                        "print('err', file=sys.stderr); sys.exit(3)",
              on_start=lambda p, t: started.append((p.pid, t, time.monotonic_ns())))
    t0 = time.monotonic()
    o = run(tmp_path, c, interval=5.0)          # a long interval: the exit ends the wait
    assert time.monotonic() - t0 < 3
    assert o.returncode == 3 and o.why is None and not o.stopped and not o.timed_out
    assert o.exit_seen_by in ("pidfd", "poll")
    (pid, launched, seen), = started
    assert launched <= seen <= o.ended_ns
    r = rows(tmp_path)
    assert len(r) == o.samples == 2                 # one at the start, one after the exit
    assert [x[1] for x in r] == ["measuring", "measuring"] and r[0][2] == ""
    assert int(r[-1][0]) <= o.ended_ns
    assert (tmp_path / "out").read_text() == "out\n"
    assert (tmp_path / "err").read_text() == "err\n"


def test_rows_come_from_the_hook_and_append_mode_shares_one_file(tmp_path):
    log = tmp_path / "log"
    log.write_text("before\n")
    n = [0]

    def row():
        n[0] += 1
        return ("warmup" if n[0] < 3 else "measuring"), str(n[0])
    c = child(tmp_path, "import sys, time; print('a'); print('b', file=sys.stderr); "
                        "sys.stdout.flush(); time.sleep(0.3)",
              stdout=str(log), stderr=str(log), append=True, row=row)
    o = run(tmp_path, c)
    r = rows(tmp_path)
    assert o.returncode == 0 and len(r) == o.samples >= 4
    assert [x[1] for x in r[:3]] == ["warmup", "warmup", "measuring"]
    assert [x[2] for x in r] == [str(i) for i in range(1, len(r) + 1)]
    assert sorted(log.read_text().splitlines()) == ["a", "b", "before"]


def test_timeout_stops_the_child_only(tmp_path):
    """Not its own session (the agent): SIGTERM to the child; its own children stay."""
    pidfile = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(30)")
    o = run(tmp_path, child(tmp_path, code, timeout_s=1, timeout_reason="too slow"))
    assert o.why == "too slow" and o.timed_out and not o.stopped
    assert o.returncode == -15
    grandchild = int(pidfile.read_text())
    try:
        assert alive(grandchild)
    finally:
        os.kill(grandchild, 9)


def test_timeout_stops_a_session_leaders_whole_group(tmp_path):
    """Its own session (an engine): the whole process group goes."""
    pidfile = tmp_path / "grandchild"
    code = ("import os, subprocess, sys, time; assert os.getsid(0) == os.getpid(); "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(30)")
    t0 = time.monotonic()
    o = run(tmp_path, child(tmp_path, code, new_session=True, timeout_s=1,
                            timeout_reason="engine too slow"))
    assert o.why == "engine too slow" and o.timed_out and o.returncode == -15
    assert time.monotonic() - t0 < 10
    grandchild = int(pidfile.read_text())
    end = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < end:
        time.sleep(0.05)
    assert not alive(grandchild)


def test_a_stop_request_stops_it(tmp_path):
    calls = [0]

    def stop():
        calls[0] += 1
        return calls[0] >= 3
    o = run(tmp_path, child(tmp_path, "import time; time.sleep(30)"), stop=stop)
    assert o.why == sv.STOPPED and o.stopped and not o.timed_out and o.returncode == -15
    assert o.samples == 3


def test_a_child_ignoring_sigterm_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(sv, "STOP_GRACE_S", 0.5)
    code = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(30)")
    out = tmp_path / "out"
    o = run(tmp_path, child(tmp_path, code, timeout_s=1, timeout_reason="t",
                            stdout=str(out)))
    assert out.read_text() == "ready\n" and o.returncode == -9


def test_without_pidfds_it_polls(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    o = run(tmp_path, child(tmp_path, "import time; time.sleep(0.2)"))
    assert o.exit_seen_by == "poll" and o.returncode == 0 and o.samples >= 2


def test_the_scope_is_entered_between_fork_and_exec(tmp_path):
    """scope_procs gets the child's own pid before it runs (a cgroup.procs in real runs)."""
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    pids = []
    c = child(tmp_path, "import os; print(os.getpid())", scope_procs=str(procs),
              on_start=lambda p, t: pids.append(p.pid))
    assert run(tmp_path, c).returncode == 0
    assert procs.read_text() == f"{pids[0]}\n" == (tmp_path / "out").read_text()


def test_a_child_that_cannot_start(tmp_path):
    errors = []
    c = sv.Child(argv=[str(tmp_path / "missing")], what="the engine missing",
                 stdout=str(tmp_path / "out"), stderr=str(tmp_path / "err"),
                 on_start_error=lambda e, t: errors.append((e, t)),
                 on_start=lambda p, t: pytest.fail("no start"))
    with pytest.raises(RunFailed, match=r"^cannot start the engine missing: .*No such file"):
        run(tmp_path, c)
    assert len(errors) == 1 and isinstance(errors[0][0], OSError)
    assert rows(tmp_path) == []                    # the timeline has its header, closed


# --------------------------------------------------------------------------- the agent's timeout

@pytest.mark.root
def test_agent_timeout(agent, loopfs, pool, plans, work_dir):
    """An agent past agent_timeout_s is stopped (SIGTERM), the run fails with that reason,
    its cgroup and active record go, and the bundle is complete."""
    from test_runner_host import memory_cgroup_backend
    cell = "64m-cgroup-classic" if memory_cgroup_backend() != "none" else "1g-none-classic"
    spec = make_spec("agent-timeout", cell, pool=pool, plan=plans["long"], agent=agent,
                     agent_timeout_s=1)
    rc, res = start(spec, work_dir)
    assert rc == 0, res
    st = wait("agent-timeout", work_dir)
    bundle = Path(res["bundle"])
    assert st["phase"] == "failed" and st["reason"] == \
        "agent still running after agent_timeout_s 1", st
    r = read_json(bundle / "runner.json")["agent"]
    assert r["exit_code"] is None and r["signal"] == 15
    assert 1e9 <= r["ended_mono_ns"] - r["started_mono_ns"] < 15e9
    tl = timeline(bundle)
    assert len(tl) == read_json(bundle / "runner.json")["timeline_samples"] >= 10
    assert int(tl[-1]["mono_ns"]) <= r["ended_mono_ns"]
    verify_manifest(bundle)
    assert not (work_dir / "active" / "agent-timeout.json").exists()
    cap = read_json(bundle / "capacity.json")
    if "path" in cap:
        assert not os.path.exists(cap["path"])
    assert not alive(r["pid"])
