"""One controller per host: a lock taken on the host itself.

Choice: flock(1) on `<work_dir>/bench.lock`, held by a remote process for as long as the lock
is held. The holder is `flock --nonblock FILE sh -c '<write owner>; echo LOCKED; cat'`, started
on a channel whose stdin stays open; releasing closes stdin, `cat` ends, the process exits and
the kernel drops the lock. If the controller dies or its connection drops, sshd closes the
session, the holder gets EOF and the lock goes with it: there are no stale locks to detect and
no clocks to compare. The owner (controller host, pid, time, purpose) is written into the lock
file so a refused second controller can say who holds it. Works the same over LocalTransport
(a local subprocess). The host-side cell runner detaches from SSH and uses its own run lock.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from bench.errors import HostError
from bench.hosts.inventory import Host
from bench.hosts.transport import Process, Transport

LOCK_NAME = "bench.lock"
CONFLICT_RC = 75
HOLDER = ('printf "%s\\n" "$1" > "$2" && echo LOCKED && exec cat > /dev/null')


class HostLocked(HostError):
    """Another controller holds the host lock."""


def default_owner(purpose: str = "") -> str:
    t = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"{socket.gethostname()} pid {os.getpid()} since {t}"
            + (f" ({purpose})" if purpose else ""))


class HostLock:
    """`with HostLock(transport, host): ...` holds the host's lock; a second holder gets
    HostLocked naming the owner."""

    def __init__(self, transport: Transport, host: Host, purpose: str = "",
                 owner: str | None = None):
        self.transport = transport
        self.host = host
        self.path = f"{host.work_dir}/{LOCK_NAME}"
        self.owner = owner or default_owner(purpose)
        self._proc: Process | None = None

    def acquire(self) -> None:
        if self._proc is not None:
            return
        self.transport.run(["mkdir", "-p", self.host.work_dir], timeout=30)
        argv = ["flock", "--nonblock", "--conflict-exit-code", str(CONFLICT_RC), self.path,
                "sh", "-c", HOLDER, "bench-lock", self.owner, self.path]
        proc = self.transport.spawn(argv)
        line = proc.readline(timeout=30)
        if line.strip() == "LOCKED":
            self._proc = proc
            return
        rc = proc.exit_status(10)
        rest = proc.read_rest()
        proc.close()
        if rc == CONFLICT_RC:
            holder = self.transport.run(["cat", self.path], timeout=30, check=False).stdout.strip()
            raise HostLocked(self.host.name, f"locked by another controller: {holder or 'unknown'}",
                             f"wait for it to finish (the lock is {self.path} on the host; it "
                             "goes away when its holder exits or disconnects)")
        raise HostError(self.host.name, f"could not take the host lock {self.path} "
                        f"(exit {rc}): {(line + rest).strip()[:300]}")

    def release(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            proc.close()

    @property
    def held(self) -> bool:
        return self._proc is not None

    def __enter__(self) -> "HostLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def wait_released(lock: HostLock, timeout: float = 5.0) -> bool:
    """Poll until the host lock can be taken (then release it at once); True when it could."""
    deadline = time.monotonic() + timeout
    while True:
        probe = HostLock(lock.transport, lock.host, owner="bench probe")
        try:
            probe.acquire()
            probe.release()
            return True
        except HostLocked:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


# runs in progress: what a reboot or an MGLRU toggle would kill ------------------------------

class RunInProgress(HostError):
    """The host's runner has a live run: a reboot (or an MGLRU toggle) would kill it."""


# every run lock under <work_dir>/locks that a live runner holds (flock(1) cannot take it):
# one line per run id. A run that is only accepted (waiting for the runner's host.lock) holds
# its run lock too, so it counts.
_LIVE_RUNS = ('for f in "$1"/locks/*.lock; do [ -f "$f" ] || continue; '
              'flock --nonblock --conflict-exit-code 75 "$f" true; '
              'if [ $? -eq 75 ]; then b=${f##*/}; echo "${b%.lock}"; fi; done')
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_LIVE = 16


@dataclass(frozen=True)
class LiveRun:
    run_id: str
    phase: str              # from the run's status.json ("?" when unreadable)
    pid: int | None         # the runner's pid

    def describe(self) -> str:
        return (f"run {self.run_id} (phase {self.phase}"
                + (f", runner pid {self.pid})" if self.pid else ")"))


def _status_of(transport: Transport, host: Host, run_id: str) -> LiveRun:
    r = transport.run(["head", "-c", "65536", f"{host.work_dir}/runs/{run_id}/status.json"],
                      timeout=30, check=False)
    try:
        st = json.loads(r.stdout) if r.rc == 0 else {}
    except ValueError:
        st = {}
    st = st if isinstance(st, dict) else {}
    phase = st.get("phase")
    pid = st.get("pid")
    return LiveRun(run_id, phase if isinstance(phase, str) and _RUN_ID.fullmatch(phase) else "?",
                   pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
                   else None)


def live_runs(transport: Transport, host: Host) -> list[LiveRun]:
    """The runs whose runner is alive on the host (their run lock is held), with their phase."""
    r = transport.run(["sh", "-c", _LIVE_RUNS, "bench-live-runs", host.work_dir], timeout=60,
                      check=False)
    if r.rc != 0:
        raise HostError(host.name, f"could not list the runs in progress (exit {r.rc}): "
                        f"{r.stderr.strip()[-300:]}")
    ids = [ln for ln in r.stdout.split("\n") if _RUN_ID.fullmatch(ln)][:MAX_LIVE]
    return [_status_of(transport, host, rid) for rid in ids]


def _refusal(host: Host, runs: list[LiveRun], what: str) -> RunInProgress:
    more = f" (and {len(runs) - 1} more)" if len(runs) > 1 else ""
    return RunInProgress(host.name, f"{runs[0].describe()} in progress{more}: refusing to "
                         f"{what}", f"wait for it to end (`bench runs` / `runner.py status "
                         f"{runs[0].run_id}` on the host), or pass --force to {what} anyway "
                         "and kill it")


def take_for(transport: Transport, host: Host, what: str, *, force: bool = False,
             say: Callable[[str], None] | None = None, wait_s: float = 0.0,
             kills: bool = True) -> HostLock:
    """The host lock, taken for `what` (a reboot, a restore, an MGLRU toggle) once no run is in
    progress: a controller setting up a run holds the lock (HostLocked), a runner running one
    holds its run lock (RunInProgress, naming the run). Both are waited for up to wait_s. With
    force a live run does not refuse: `say` is told which run `what` will kill (or, when not
    `kills`, spoil). The caller releases the lock (release_quietly: a reboot drops the holder's
    connection)."""
    deadline = time.monotonic() + wait_s
    while True:
        lock = HostLock(transport, host, purpose=f"bench hosts {what}")
        try:
            lock.acquire()
            runs = live_runs(transport, host)
            if runs and not force:
                raise _refusal(host, runs, what)
        except (HostLocked, RunInProgress):
            release_quietly(lock)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
            continue
        except BaseException:
            release_quietly(lock)
            raise
        for run in runs:
            if say is not None:
                say(f"{host.name}: --force: {run.describe()} is in progress; {what} "
                    + ("kills it" if kills else "spoils its measurement"))
        return lock


def release_quietly(lock: HostLock) -> None:
    """Release a lock whose connection may be gone already (the host rebooted under it)."""
    try:
        lock.release()
    except Exception:  # noqa: BLE001 - a dead holder's channel may fail to close; it is gone
        pass
