"""One controller per host: a lock taken on the host itself.

Choice: flock(1) on `<work_dir>/bench.lock`, held by a remote process for as long as the lock
is held. The holder is `flock --nonblock FILE sh -c '<write owner>; echo LOCKED; cat'`, started
on a channel whose stdin stays open; releasing closes stdin, `cat` ends, the process exits and
the kernel drops the lock. If the controller dies or its connection drops, sshd closes the
session, the holder gets EOF and the lock goes with it: there are no stale locks to detect and
no clocks to compare. The owner (controller host, pid, time, purpose, campaign: one JSON line,
`Owner`) is written into the lock file so a refused second controller can say who holds it.
Works the same over LocalTransport (a local subprocess). The host-side cell runner detaches
from SSH and uses its own run lock.

A campaign owns each of its hosts for as long as its worker uses it (`HostClaim`): the host
lock, held from the worker's start to its end by a holder on a connection of the claim's own,
re-taken when that holder is gone (a reboot or power cycle ends it with the old boot), released
when the worker ends or the host is quarantined. While claimed, `bench hosts reboot|restore|
mglru`, `bench run` and every other controller are refused naming the campaign and its
controller; the campaign's own steps borrow the claim (`take_for(..., claim=)`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from bench.errors import BenchError, HostError, Unreachable
from bench.hosts.inventory import Host
from bench.hosts.transport import Process, Transport

LOCK_NAME = "bench.lock"
CONFLICT_RC = 75
ANSWER_S = 30.0             # how long the holder may take to say LOCKED (a loaded host)
# the holder: owner into the lock file, then `LOCKED <its pid> <boot_id>` (the pid stays the
# holder's through exec), then it waits for stdin to close
HOLDER = ('printf "%s\\n" "$1" > "$2" && b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); '
          'echo "LOCKED $$ $b" && exec cat > /dev/null')
OWNER_MAX = 2048            # bytes of the lock file read back (a host's file is untrusted)
_BOOT_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
_PRINTABLE = re.compile(r"[^\x20-\x7e]")


def shown(text: str, limit: int = 200) -> str:
    """Text from a host as one printable line of at most `limit` characters."""
    one = _PRINTABLE.sub("?", text.strip())
    return one if len(one) <= limit else one[:limit - 3] + "..."


@dataclass(frozen=True)
class Owner:
    """Who holds a host lock, as its holder wrote it into the lock file."""
    controller: str             # the controller machine's host name
    pid: int | None             # the controller's pid there
    since: str
    purpose: str = ""
    campaign: str | None = None

    def describe(self) -> str:
        who = (f"controller {shown(self.controller, 80)}"
               + (f", pid {self.pid}" if self.pid else "") + f", since {shown(self.since, 40)}")
        if self.campaign:
            return f"campaign {shown(self.campaign, 80)} ({who})"
        return f"{shown(self.purpose, 120) or 'a controller'} ({who})"


def parse_owner(text: str) -> Owner | None:
    """The owner a lock file holds (one JSON object, bounded); None when it is not one."""
    try:
        d = json.loads(text[:OWNER_MAX])
    except ValueError:
        return None
    if not isinstance(d, dict):
        return None

    def s(key: str) -> str:
        v = d.get(key)
        return v if isinstance(v, str) else ""
    pid = d.get("pid")
    return Owner(s("controller") or "?", pid if isinstance(pid, int)
                 and not isinstance(pid, bool) and pid > 0 else None,
                 s("since") or "?", s("purpose"), s("campaign") or None)


def describe_holder(text: str) -> str:
    owner = parse_owner(text)
    return owner.describe() if owner else (shown(text) or "unknown")


class HostLocked(HostError):
    """Another controller holds the host lock; `holder` is who (None: unreadable)."""

    def __init__(self, host: str, message: str, hint: str | None = None, *,
                 holder: Owner | None = None):
        super().__init__(host, message, hint)
        self.holder = holder


def default_owner(purpose: str = "", campaign: str | None = None) -> str:
    t = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    d: dict = {"controller": socket.gethostname(), "pid": os.getpid(), "since": t,
               "purpose": purpose}
    if campaign:
        d["campaign"] = campaign
    return json.dumps(d, sort_keys=True)


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
        self.holder_pid: int | None = None      # the holder's pid on the host
        self.boot_id = ""                       # the host's boot it was taken in

    def acquire(self) -> None:
        if self._proc is not None:
            return
        self.transport.run(["mkdir", "-p", self.host.work_dir], timeout=30)
        argv = ["flock", "--nonblock", "--conflict-exit-code", str(CONFLICT_RC), self.path,
                "sh", "-c", HOLDER, "bench-lock", self.owner, self.path]
        proc = self.transport.spawn(argv)
        line = proc.readline(timeout=ANSWER_S)
        words = line.split()
        if words[:1] == ["LOCKED"]:
            self._proc = proc
            self.holder_pid = int(words[1]) if len(words) > 1 and words[1].isdigit() else None
            self.boot_id = words[2] if len(words) > 2 and _BOOT_ID.fullmatch(words[2]) else ""
            return
        rc = proc.exit_status(10)
        if rc is None:      # neither LOCKED nor an exit: a host too busy (or stalled) to answer
            proc.close()    # its stdin closed: a holder that locks later lets go at once
            raise Unreachable(self.host.name, f"the host lock's holder ({self.path}) did not "
                              f"answer within {ANSWER_S + 10:.0f} s",
                              "the host is overloaded or stalled; bench resume retries it")
        rest = proc.read_rest()
        proc.close()
        if rc == CONFLICT_RC:
            raise self._conflict()
        raise HostError(self.host.name, f"could not take the host lock {self.path} "
                        f"(exit {rc}): {shown(line + rest, 300)}")

    def _conflict(self) -> HostLocked:
        text = self.transport.run(["head", "-c", str(OWNER_MAX), self.path], timeout=30,
                                  check=False).stdout
        owner = parse_owner(text)
        wait = (f"wait for campaign {shown(owner.campaign, 80)} to finish with the host (`bench "
                f"watch {shown(owner.campaign, 80)}`)" if owner and owner.campaign
                else "wait for it to finish")
        return HostLocked(self.host.name, f"locked by another controller: "
                          f"{describe_holder(text)}",
                          f"{wait}; the lock is {self.path} on the host and goes away when its "
                          "holder exits or disconnects", holder=owner)

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
        probe = HostLock(lock.transport, lock.host, purpose="bench probe")
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
    campaign: str | None = None     # from its spec.json, for a campaign's run

    def describe(self) -> str:
        return (f"run {self.run_id} (phase {self.phase}"
                + (f", runner pid {self.pid})" if self.pid else ")"))


def _json_of(transport: Transport, path: str, limit: int) -> dict:
    r = transport.run(["head", "-c", str(limit), path], timeout=30, check=False)
    try:
        d = json.loads(r.stdout) if r.rc == 0 else {}
    except ValueError:
        d = {}
    return d if isinstance(d, dict) else {}


def _status_of(transport: Transport, host: Host, run_id: str) -> LiveRun:
    st = _json_of(transport, f"{host.work_dir}/runs/{run_id}/status.json", 65536)
    spec = _json_of(transport, f"{host.work_dir}/runs/{run_id}/spec.json", 1 << 20)
    phase, pid, campaign = st.get("phase"), st.get("pid"), spec.get("campaign")
    return LiveRun(run_id, phase if isinstance(phase, str) and _RUN_ID.fullmatch(phase) else "?",
                   pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0
                   else None, campaign if isinstance(campaign, str) and campaign else None)


def live_runs(transport: Transport, host: Host) -> list[LiveRun]:
    """The runs whose runner is alive on the host (their run lock is held), with their phase."""
    r = transport.run(["sh", "-c", _LIVE_RUNS, "bench-live-runs", host.work_dir], timeout=60,
                      check=False)
    if r.rc != 0:
        raise HostError(host.name, f"could not list the runs in progress (exit {r.rc}): "
                        f"{shown(r.stderr[-300:], 300)}")
    ids = [ln for ln in r.stdout.split("\n") if _RUN_ID.fullmatch(ln)][:MAX_LIVE]
    return [_status_of(transport, host, rid) for rid in ids]


def _refusal(host: Host, runs: list[LiveRun], what: str) -> RunInProgress:
    more = f" (and {len(runs) - 1} more)" if len(runs) > 1 else ""
    return RunInProgress(host.name, f"{runs[0].describe()} in progress{more}: refusing to "
                         f"{what}", f"wait for it to end (`bench runs` / `runner.py status "
                         f"{runs[0].run_id}` on the host), or pass --force to {what} anyway "
                         "and kill it")


def _held_refusal(host: Host, exc: HostLocked, what: str,
                  runs: list[LiveRun] | None = None) -> HostLocked:
    """Another controller holds the host: refused naming it (a campaign: the campaign and its
    controller), and the run in progress there first when there is one (what --force kills)."""
    o = exc.holder
    if o is not None and o.campaign:
        c = shown(o.campaign, 80)
        if runs:
            return HostLocked(host.name, f"{runs[0].describe()} in progress: refusing to "
                              f"{what}; the host is owned by {o.describe()}",
                              f"wait for campaign {c} to finish with {host.name} (`bench "
                              f"watch {c}`), or pass --force to {what} anyway and kill the "
                              "run", holder=o)
        return HostLocked(host.name, f"owned by {o.describe()}: refusing to {what}",
                          f"wait for campaign {c} to finish with {host.name} (`bench watch "
                          f"{c}`), or pass --force to {what} anyway (it disturbs campaign {c}'s "
                          f"run or next run on {host.name})", holder=o)
    return HostLocked(host.name, f"{exc.message.split(': ', 1)[-1]}: refusing to {what}",
                      f"wait for it to finish, or pass --force to {what} anyway", holder=o)


def _say_forced(host: Host, exc: HostLocked, what: str, runs: list[LiveRun],
                say: Callable[[str], None] | None) -> None:
    """--force past another controller's hold: who it disturbs, one line."""
    if say is None:
        return
    o = exc.holder
    if o is not None and o.campaign:
        mine = [r for r in runs if r.campaign == o.campaign]
        where = (f"its {mine[0].describe()}" if mine else
                 f"it between its runs (its next run on {host.name} meets the new boot)")
        say(f"{host.name}: --force: the host is owned by {o.describe()}; {what} disturbs "
            f"{where}")
    else:
        say(f"{host.name}: --force: {exc.message.split(': ', 1)[-1]}; {what} goes ahead "
            "without the host lock")


def _runs_quietly(transport: Transport, host: Host) -> list[LiveRun]:
    """The runs in progress, for a refusal's wording only: [] when they cannot be read."""
    try:
        return live_runs(transport, host)
    except BenchError:
        return []


def take_for(transport: Transport, host: Host, what: str, *, force: bool = False,
             say: Callable[[str], None] | None = None, wait_s: float = 0.0,
             kills: bool = True, claim: "HostClaim | None" = None) -> "HostLock | Borrowed":
    """The host lock, taken for `what` (a reboot, a restore, an MGLRU toggle) once no run is in
    progress: another controller holding the lock (a campaign owning the host, a controller
    setting up a run) refuses it with HostLocked naming the holder (a campaign and its
    controller), a runner running a run holds its run lock (RunInProgress, naming the run).
    Both are waited for up to wait_s. With force neither refuses: `say` is told whose work
    `what` disturbs and which run it kills (or, when not `kills`, spoils), and the step goes
    ahead without the lock when another holds it. With `claim` (a campaign's own boot step)
    the campaign's claim stands for the lock, made sure of first (re-taken if its holder died):
    the campaign never refuses itself; the step's release re-takes the claim after the boot.
    The caller releases the lock (release_quietly: a reboot drops the holder's connection)."""
    deadline = time.monotonic() + wait_s
    while True:
        held: HostLocked | None = None
        try:
            lock = _lock_for(transport, host, what, claim, deadline)
        except HostLocked as exc:
            if claim is not None:
                raise
            if not force:
                raise _held_refusal(host, exc, what, _runs_quietly(transport, host)) from None
            held, lock = exc, None          # forced past it: goes ahead without the lock
        try:
            runs = live_runs(transport, host)
        except BaseException:
            release_quietly(lock)
            raise
        if runs and not force:
            release_quietly(lock)
            if time.monotonic() > deadline:
                raise _refusal(host, runs, what)
            time.sleep(1.0)
            continue
        if held is not None:
            _say_forced(host, held, what, runs, say)
        for run in runs:
            if say is not None:
                say(f"{host.name}: --force: {run.describe()} is in progress; {what} "
                    + ("kills it" if kills else "spoils its measurement"))
        if lock is not None:
            return lock
        return Borrowed(claim, after_boot=True) if claim is not None else HostLock(transport, host)


def _lock_for(transport: Transport, host: Host, what: str, claim: "HostClaim | None",
              deadline: float) -> "HostLock | None":
    """The host lock for take_for (None: the claim, made sure of, stands for it)."""
    if claim is not None:
        claim.ensure(transport, max(0.0, deadline - time.monotonic()))
        return None
    while True:
        lock = HostLock(transport, host, purpose=f"bench hosts {what}")
        try:
            lock.acquire()
            return lock
        except HostLocked:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def release_quietly(lock: "HostLock | Borrowed | None") -> None:
    """Release a lock whose connection may be gone already (the host rebooted under it)."""
    if lock is None:
        return
    try:
        lock.release()
    except Exception:  # noqa: BLE001 - a dead holder's channel may fail to close; it is gone
        pass


# a campaign's claim on a host ----------------------------------------------------------------

# the claim's holder still holds the lock: the same boot, its pid alive, the lock file ours
# ($1 boot_id, $2 holder pid, $3 lock file, $4 owner line: HostClaim.alive_args)
ALIVE_SCRIPT = _ALIVE = ('[ "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" = "$1" ] && '
          '[ -d "/proc/$2" ] && [ "$(head -c 4096 "$3")" = "$4" ] && echo ALIVE')


class HostClaim:
    """A campaign's hold on one host for as long as its worker uses it: the host lock, held by
    a holder on a connection of the claim's own (dropping the worker's session keeps it),
    naming the campaign and its controller. The holder dies with the controller's connection
    (nothing stale to detect) and with the host's boot: `ensure` checks it is alive over the
    worker's connection (same boot_id, holder pid alive, the lock file still ours) and re-takes
    it when not. `release` when the worker ends or the host is quarantined. Used by one worker
    thread at a time."""

    def __init__(self, host: Host, transport_for: Callable[[Host], Transport], campaign: str):
        self.host = host
        self.campaign = campaign
        self._make = transport_for
        self._t: Transport | None = None
        self._lock: HostLock | None = None
        self._mu = threading.RLock()
        self.takes = 0                  # how many times it was taken (the first and re-takes)

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.held

    def take(self, wait_s: float = 0.0) -> None:
        """Take the host lock for the campaign, waiting up to wait_s for another holder
        (HostLocked naming it after that)."""
        deadline = time.monotonic() + wait_s
        with self._mu:
            while not self.held:
                if self._t is None:
                    self._t = self._make(self.host)
                lock = HostLock(self._t, self.host, owner=default_owner(
                    f"bench campaign {self.campaign}", campaign=self.campaign))
                try:
                    lock.acquire()
                except HostLocked:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
                    continue
                except BaseException:
                    self.release()          # a fresh connection next time
                    raise
                self._lock = lock
                self.takes += 1

    def alive(self, t: Transport) -> bool:
        """Whether the holder still holds the host lock, asked over t (the claim's own
        connection may be one to a boot that is gone)."""
        with self._mu:
            args = self.alive_args()
            if args is None:
                return False
            r = t.run(["sh", "-c", _ALIVE, "bench-claim", *args], timeout=30, check=False)
            return r.rc == 0 and r.stdout.strip() == "ALIVE"

    def alive_args(self) -> list[str] | None:
        """The arguments of ALIVE_SCRIPT (boot_id, holder pid, lock path, owner) for a claim
        that looks held from here (its holder's channel open), so that a caller can check it
        inside a command it runs anyway; None when it is not held."""
        with self._mu:
            lock = self._lock
            if lock is None or not lock.held or lock._proc is None \
                    or lock._proc.exit_status(0) is not None or lock.holder_pid is None:
                return None
            return [lock.boot_id, str(lock.holder_pid), lock.path, lock.owner]

    def ensure(self, t: Transport, wait_s: float = 0.0) -> None:
        """The claim held and alive: re-taken when its holder is gone (a reboot, a power cycle,
        a dropped connection), waiting up to wait_s for another holder."""
        with self._mu:
            if self.held and self.alive(t):
                return
            self.release()
            self.take(wait_s)

    def refresh(self, t: Transport) -> None:
        """ensure, once and quietly (after a boot it did not drive: the recovery ladder's);
        a failure is left to the next ensure."""
        try:
            self.ensure(t)
        except BenchError:
            pass

    def retake(self) -> None:
        """After a boot step: the holder went with the old boot; taken again at once, quietly
        (a host that did not come back, or another holder, is met by the next ensure)."""
        with self._mu:
            self.release()
            try:
                self.take()
            except BenchError:
                self.release()

    def release(self) -> None:
        with self._mu:
            lock, self._lock = self._lock, None
            t, self._t = self._t, None
            release_quietly(lock)
            if t is not None:
                try:
                    t.close()
                except Exception:  # noqa: BLE001 - a dead boot's connection may fail to close
                    pass


class Borrowed:
    """The host lock a campaign's claim holds, lent to one of its steps: releasing it gives
    nothing back; after a boot step (after_boot) it re-takes the claim, whose holder went with
    the old boot."""

    held = True

    def __init__(self, claim: HostClaim, after_boot: bool = False):
        self.claim = claim
        self.after_boot = after_boot

    def release(self) -> None:
        if self.after_boot:
            self.claim.retake()
