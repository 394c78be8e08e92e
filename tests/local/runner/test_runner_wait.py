"""`runner.py wait` blocks on the run lock the live runner holds, instead of polling: it answers
when the holder lets go (having written its final status), and at --timeout (exit 3) while it
holds on. The holder here is a real process holding the real lock file (what the detached
runner does), the runner a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from agents.hostrunner.bundle import accepted_status, bundle_dir, status_path
from agents.hostrunner.locks import lock_path
from tests.support.runner import PYTHON, RUNNER

HOLDER = """
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[3]))
st = json.load(open(sys.argv[2]))
st.update(phase="done", ok=True, reason=None)
st["history"].append({"phase": "done", "t": st["updated"], "mono_ns": time.monotonic_ns()})
tmp = sys.argv[2] + ".tmp"
with open(tmp, "w") as f:
    json.dump(st, f)
os.rename(tmp, sys.argv[2])
print(time.time(), flush=True)       # the moment it lets go (exit closes the lock)
"""


def _live_run(work_dir: str, rid: str, hold_s: float) -> subprocess.Popen:
    os.makedirs(bundle_dir(work_dir, rid), mode=0o700)
    os.makedirs(os.path.dirname(lock_path(work_dir, rid)), exist_ok=True)
    with open(status_path(work_dir, rid), "w") as f:
        json.dump(dict(accepted_status(rid), phase="measuring", pid=os.getpid()), f)
    p = subprocess.Popen([sys.executable, "-c", HOLDER, lock_path(work_dir, rid),
                          status_path(work_dir, rid), str(hold_s)], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _wait(work_dir: str, rid: str, timeout: float) -> tuple[int, dict, float]:
    r = subprocess.run([PYTHON, str(RUNNER), "wait", rid, "--work-dir", work_dir,
                        "--timeout", str(timeout)], capture_output=True, text=True,
                       timeout=timeout + 60)
    return r.returncode, json.loads(r.stdout.strip().splitlines()[-1]), time.time()


def test_wait_answers_when_the_runner_lets_go_of_the_run_lock(tmp_path):
    work_dir = str(tmp_path)
    holder = _live_run(work_dir, "w-1", 1.5)
    rc, st, t_end = _wait(work_dir, "w-1", 60)
    released = float(holder.stdout.readline())
    holder.wait(10)
    assert (rc, st["phase"], st["ok"], st["live"]) == (0, "done", True, False)
    # a blocked wait, not a 60 s timeout nor a slow poll: it ended right after the release
    assert released <= t_end < released + 5, (released, t_end)


def test_wait_times_out_while_the_run_lock_is_held(tmp_path):
    work_dir = str(tmp_path)
    holder = _live_run(work_dir, "w-2", 30)
    try:
        t0 = time.time()
        rc, st, t_end = _wait(work_dir, "w-2", 1)
        assert (rc, st["phase"], st["live"], st.get("timed_out")) == (3, "measuring", True,
                                                                      True)
        assert 1 <= t_end - t0 < 20
    finally:
        holder.kill()
        holder.wait(10)
