"""The host-run layer: what `bench run` and campaigns both do with the host-side runner
(agents/runner.py), written once.

- `HostSession`: one host's transport (made on first use, made again after a drop) and the
  patience with an unreachable host: `call(what, fn)` runs fn(transport) and, while the host
  does not answer (Unreachable, CommandTimeout), retries it on a fresh connection until the
  host has been unreachable longer than its reconnect timeout (default: the inventory's
  reboot.up_timeout, since a host may be rebooting); then `Quarantined`, the one quarantine
  error. Each loss is recorded in `events` ({t, event: lost, error}).
- `runner_status`: the one `runner.py status` call (None: the host has no such run).
- `start_run`: put spec.json and start the runner, which detaches from SSH.
- `wait_run`: `runner.py wait RUN_ID --timeout CHUNK` in bounded chunks through the session
  (each on a held channel, `held_wait`), so
  a dropped connection, a killed sshd or a timed-out command is waited out and the run
  re-attached by id ({event: reattached, phase}); the run itself continues host-side.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from bench.errors import BenchError, CommandFailed, CommandTimeout, HostError, Unreachable
from bench.hosts.inventory import Host
from bench.hosts.lock import ALIVE_SCRIPT
from bench.hosts.transport import Transport

RUNNER = "agents/runner.py"
T = TypeVar("T")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def last_json(text: str) -> dict | None:
    """The last line of text that is a JSON object (the runner prints one per command)."""
    for line in reversed(text.strip().splitlines()):
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if isinstance(v, dict):
            return v
    return None


class Quarantined(HostError):
    """The host stayed unreachable longer than its reconnect timeout (or failed a proven
    reboot): its worker stops and its runs wait for `bench resume`. `ladder`: the steps of the
    recovery ladder a campaign climbed before giving up (bench.execute.campaign.ladder, as
    dicts), empty when it climbed none."""

    def __init__(self, host: str, message: str, hint: str | None = None, *,
                 ladder: list[dict] | None = None):
        super().__init__(host, message, hint)
        self.ladder = list(ladder or [])


class SpecRefused(HostError):
    """The host runner refused the run's spec (`runner.py start` exit 2, bad spec or usage): a
    deterministic input error, which a retry would meet again."""


class HostSession:
    """One host's connection for a run or a campaign worker (see the module doc). Used by one
    thread at a time."""

    def __init__(self, host: Host, transport_for: Callable[[Host], Transport], *,
                 reconnect_timeout_s: float | None = None, retry_s: float = 1.0,
                 events: list | None = None, transport: Transport | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.host = host
        self.transport_for = transport_for
        self.limit = float(host.reboot.up_timeout if reconnect_timeout_s is None
                           else reconnect_timeout_s)
        self.retry_s = retry_s
        self.events = events if events is not None else []
        self.reconnects = 0
        self.fresh = False          # connected anew after a loss, not re-attached yet
        self._t = transport
        self._lost = False
        self._clock, self._sleep = clock, sleep

    @property
    def transport(self) -> Transport:
        if self._t is None:
            self._t = self.transport_for(self.host)
            if self._lost:
                self.reconnects += 1
                self.fresh, self._lost = True, False
        return self._t

    def drop(self) -> None:
        """Close the connection (quietly: it may be dead); the next use connects afresh."""
        t, self._t = self._t, None
        if t is not None:
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing a dead connection may fail; nothing to do
                pass

    close = drop

    def take_fresh(self) -> bool:
        """True once after a reconnection (the caller re-attaches then)."""
        fresh, self.fresh = self.fresh, False
        return fresh

    def call(self, what: str, fn: Callable[[Transport], T], *, hint: str | None = None,
             on_lost: Callable[[BenchError], None] | None = None) -> T:
        """fn(transport) with patience (module doc). `what` ends the quarantine reason
        ("... while waiting for run X"); `on_lost` hears the first loss of this call."""
        since = self._clock()
        tries = 0
        while True:
            tries += 1
            try:
                return fn(self.transport)
            except (Unreachable, CommandTimeout) as exc:
                self.events.append({"t": now_iso(), "event": "lost", "error": exc.message})
                self.drop()
                self._lost = True
                waited = self._clock() - since
                if waited > self.limit:
                    raise Quarantined(
                        self.host.name, f"unreachable for {waited:.0f}s (> {self.limit:.0f}s, "
                        f"{tries} tries) {what}; last error: {exc.message}",
                        hint or "`bench resume` when the host is back") from None
                if tries == 1 and on_lost is not None:
                    on_lost(exc)
                self._sleep(min(self.retry_s, max(0.2, self.limit / 10)))


def runner_argv(host: Host, *args: str) -> list[str]:
    """The runner's command line. `-S`: the runner is standard library only, and a host's
    site-packages (.pth files) cost every call (start, each wait, status) tens of ms."""
    return ["python3", "-S", f"{host.work_dir}/{RUNNER}", *args, "--work-dir", host.work_dir]


def runner_status(t: Transport, host: Host, run_id: str) -> dict | None:
    """`runner.py status RUN_ID`: its status.json (with live progress), or None when the host
    has no such run. A channel that closed without an exit status is Unreachable."""
    r = t.run(runner_argv(host, "status", run_id), timeout=60, check=False)
    if r.rc < 0:
        raise Unreachable(host.name, "the connection dropped during `runner.py status`")
    st = last_json(r.stdout) or {}
    if r.rc != 0 and st.get("reason") == "no such run":
        return None
    if not st:
        raise HostError(host.name, f"runner.py status {run_id}: exit {r.rc}: "
                        f"{r.stderr.strip()[-300:]}")
    return st


# exit SPEC_WRITE_FAILED (nothing else exits so: the runner's codes are 0-3) when the spec
# cannot be written, a full disk above all, leaving no partial spec behind
SPEC_WRITE_FAILED = 75
START_SCRIPT = ('mkdir -p "$1" && printf "%s" "$3" > "$2" || { rm -f "$2"; '
                'echo "bench-start: cannot write $2" >&2; exit 75; }; shift 3 && exec "$@"')
MAX_INLINE_SPEC = 64 << 10      # one argument of the start command (Linux: 128 KiB at most)
# the campaign's claim on the host checked in the same command, before anything is written
# (its first four arguments: bench.hosts.lock.HostClaim.alive_args); CLAIM_LOST when it is not
CLAIM_LOST = 76
_CHECK = ALIVE_SCRIPT.removesuffix(" && echo ALIVE")
assert _CHECK != ALIVE_SCRIPT
CLAIMED_START_SCRIPT = (f'{{ {_CHECK}; }} || {{ echo "bench-start: the campaign\'s host claim '
                        f'is lost" >&2; exit {CLAIM_LOST}; }}; shift 4; {START_SCRIPT}')


class ClaimLost(HostError):
    """The start command found the campaign's claim on the host gone: nothing started."""


def start_run(t: Transport, host: Host, spec: dict, claim: list[str] | None = None) -> dict:
    """Put spec.json and start the runner (which detaches), in one round trip: the spec goes
    as an argument of the command into <work_dir>/specs/<run_id>.json (an unusually large
    one by SFTP first), then `runner.py start` reads it there. Returns its JSON answer.
    `claim` (HostClaim.alive_args): the same command first checks the campaign still holds
    the host (ClaimLost, nothing written or started, when not)."""
    rid = spec["run_id"]
    remote = f"{host.work_dir}/specs/{rid}.json"
    text = json.dumps(spec, indent=1, sort_keys=True)
    if len(text.encode()) > MAX_INLINE_SPEC:
        if claim is not None and t.run(["sh", "-c", ALIVE_SCRIPT, "bench-claim", *claim],
                                       timeout=30, check=False).stdout.strip() != "ALIVE":
            raise ClaimLost(host.name, "the campaign's claim on the host is gone; nothing "
                            "started")
        t.run(["mkdir", "-p", f"{host.work_dir}/specs"], timeout=30)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            fh.write(text)
        try:
            t.put(Path(fh.name), remote)
        finally:
            os.unlink(fh.name)
        argv = runner_argv(host, "start", "--spec", remote)
    else:
        argv = ["sh", "-c", START_SCRIPT if claim is None else CLAIMED_START_SCRIPT,
                "bench-start", *(claim or ()), f"{host.work_dir}/specs", remote, text,
                *runner_argv(host, "start", "--spec", remote)]
    r = t.run(argv, timeout=120, check=False)
    res = last_json(r.stdout)
    if res is None and claim is not None and r.rc == CLAIM_LOST:
        raise ClaimLost(host.name, "the campaign's claim on the host is gone; nothing started")
    if res is None and r.rc == SPEC_WRITE_FAILED:
        raise HostError(host.name, f"cannot write the run's spec {remote} "
                        f"({(r.stderr or '').strip()[-200:]}): is its disk full?",
                        f"check free space on the host (df -h {host.work_dir})")
    if res is None:
        raise CommandFailed(host.name, ["runner.py", "start"], r.rc, r.stderr or r.stdout)
    refusal = start_refusal(host, rid, r.rc, res)
    if refusal is not None:
        raise refusal
    return res


def start_refusal(host: Host, rid: str, rc: int, res: dict) -> HostError | None:
    """What `runner.py start`'s answer (exit code, JSON) refuses, as the error to raise; None
    when the run started or is the same run re-attached. A run id the host already holds with
    another spec (left by an earlier campaign or `bench run` under the same id) is refused for
    good, like a bad spec: a retry would meet it again, and re-attaching would collect a run
    the controller never asked for."""
    if rc == 2:
        return SpecRefused(host.name, f"the runner refused the spec: {res.get('reason')}",
                           "the host disagrees with what the controller probed; re-probe it")
    if res.get("spec_matches") is False:
        return SpecRefused(host.name, f"run id {rid} already exists on the host with another "
                           f"spec (an earlier campaign's or run's): nothing started; its files "
                           f"stay in {host.work_dir}/runs/{rid}",
                           "use a new campaign id (--campaign) or --run-id, or remove that "
                           "directory on the host once what it holds is saved")
    if not res.get("ok"):
        hint = res.get("hint") if isinstance(res.get("hint"), str) else None
        return HostError(host.name, f"runner start: {res.get('reason') or res}",
                         hint[:300] if hint else None)
    return None


def wait_run(session: HostSession, run_id: str, *, timeout_s: float = 6 * 3600.0,
             chunk_s: float = 20.0, on_status: Callable[[dict], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> dict:
    """Wait for a run to end (module doc); returns the runner's final status. Raises
    Quarantined (host gone longer than its reconnect timeout) or CommandTimeout (the run
    outlived timeout_s). `on_status` gets the live status after every chunk that did not end
    the run."""
    host = session.host
    t0 = clock()

    def chunk(t: Transport):
        if session.take_fresh():
            st = runner_status(t, host, run_id)
            session.events.append({"t": now_iso(), "event": "reattached",
                                   "phase": (st or {}).get("phase")})
        n = max(1.0, min(chunk_s, timeout_s - (clock() - t0)))
        return held_wait(t, host, run_id, n)

    while True:
        if clock() - t0 > timeout_s:
            raise CommandTimeout(host.name, f"run {run_id} did not end within {timeout_s:.0f}s",
                                 f"it may still be running host-side: `bench hosts collect "
                                 f"{host.name} {run_id}` later")
        r = session.call(f"while waiting for run {run_id}", chunk,
                         hint=f"when the host is back: `bench hosts collect {host.name} "
                              f"{run_id}`")
        rc, out = r
        st = last_json(out)
        if rc in (0, 1) and st is not None and st.get("phase") in ("done", "failed"):
            return st
        if rc == 3:
            if on_status is not None and st is not None:
                on_status(st)
            continue
        raise HostError(host.name, f"runner.py wait {run_id} exited {rc}: "
                        f"{(st or {}).get('reason') or out.strip()[-300:]}")


WAIT_SCRIPT = 'exec "$@" 2>&1'


def held_wait(t: Transport, host: Host, run_id: str, n: float) -> tuple[int, str]:
    """One `runner.py wait RUN_ID --timeout N` on a channel held open, read by blocking on
    the channel until the runner answers and exits (a command run to completion is watched by
    a loop that wakes 100 times a second, per host, for the whole wait). Returns (exit
    status, stdout and stderr); Unreachable when the channel ends without an exit status or
    the runner does not answer within N + 60 s."""
    argv = ["sh", "-c", WAIT_SCRIPT, "bench-wait", *runner_argv(host, "wait", run_id,
                                                                "--timeout", f"{n:.0f}")]
    proc = t.spawn(argv)
    lines: list[str] = []
    rc = None
    try:
        deadline = time.monotonic() + n + 60
        while (left := deadline - time.monotonic()) > 0:
            line = proc.readline(timeout=left)
            if not line:        # the end of its output (or the deadline)
                break
            lines.append(line)
            if sum(map(len, lines)) > MAX_WAIT_OUTPUT:
                lines = lines[-8:]
        rc = proc.exit_status(timeout=5.0)
    finally:
        try:
            proc.close()
        except Exception:  # noqa: BLE001 - closing a dead channel may fail; nothing to do
            pass
    if rc is None or rc < 0:
        raise Unreachable(host.name, "the connection dropped (or the runner did not answer) "
                          "during `runner.py wait`")
    return rc, "".join(lines)


MAX_WAIT_OUTPUT = 1 << 20       # what one wait may print that is kept (its last lines)
