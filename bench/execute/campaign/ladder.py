"""The recovery ladder: what a campaign does with a host that stops answering mid-run.

A run is stuck on its host when the host stayed unreachable longer than its patience (the
session's reconnect timeout, by default the inventory's reboot.up_timeout), when the runner's
status stopped advancing for as long (the agent or the runner hung: `Wedged`), or when the run
outlived the campaign's run timeout. The stall clock runs only on hosts the ladder may reboot
or power-cycle, and never shorter than STALL_FLOOR_S. The ladder then climbs, one rung at a time:

1. look: does SSH answer, and does the runner still hold the run live? (`diagnose`) A run
   that ended meanwhile is not stuck: the ordinary paths take it again. A host that answers
   SSH but whose runner does not answer `status` within its timeout is wedged too. A climb
   for no run (the host lost at its worker's start) looks at SSH only.
2. `ssh-reboot` (SSH answers, the run is wedged): a proven reboot into the default command
   line over SSH (bench.hosts.reboot.restore_host, the inventory's method; it power-cycles
   itself when the host does not come back).
3. `power-cycle` (SSH does not answer, or the reboot failed): the inventory's
   `[reboot] power_cycle` argv run on the controller (a BMC: `ipmitool ... chassis power
   cycle`; the x86 vm lab's own qemu restart), time- and output-bounded, then the new boot
   proven by the same gate as every reboot (boot_id changed, /proc/cmdline without mem= or
   bench.lru_gen=, MemTotal back to full, bench.hosts.bootplan.evaluate_gate, and the MGLRU
   mask of the host's default boot when one was seen). Whatever the command's exit status
   (a real BMC often reports an error although the cycle happened), the new boot is waited
   for up to the host's up_timeout; the step's detail keeps each command's exit status and
   the tail of its stderr. The command is run once more (`power_next`) when the host did not
   go down (it kept answering with its old boot_id for POWER_GRACE_S) or when the command
   failed and no new boot came by the deadline; never a third time.
4. `quarantine`: nothing worked, or the inventory allows neither rung (reboot.allowed false,
   no method, no power_cycle): as before the ladder existed.

Each rung is a `Step` (what, when, how long, what happened), reported as it happens (the
campaign journals it) and kept for the interrupted run's reason. The decisions (`permits`,
`diagnose`, `next_rung`, `power_next`, `verdict`, `StallWatch`) are pure and tested by data;
`Ladder` does the I/O.
Nothing here knows a lab: a host's power cycle is its inventory's argv alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from bench.errors import BenchError, CommandTimeout, HostError
from bench.execute.hostrun import HostSession, runner_status
from bench.hosts.bootplan import Check, Observation, evaluate_gate
from bench.hosts.inventory import Host
from bench.hosts.reboot import observe, read_boot_id, restore_host
from bench.hosts.transport import quote_argv

RUNGS = ("look", "ssh-reboot", "power-cycle", "quarantine")
UNREACHABLE, WEDGED, NOT_STUCK = "unreachable", "wedged", "not-stuck"
REBOOT_METHODS = ("kexec", "grub-reboot", "command")
OUTPUT_TAIL = 2000          # bytes of a power-cycle command's stdout (and stderr) kept
DETAIL_MAX = 600            # characters of one step's detail
SUMMARY_MAX = 2000          # characters of the steps in a run's or a quarantine's reason
POWER_CYCLE_TIMEOUT_S = 120.0
POWER_GRACE_S = 30.0        # answering with the old boot this long after the command: not down
OLD, DOWN = "old", "down"   # what a look after a power command saw (a new boot ends the wait)
WAIT, RETRY, GIVE_UP = "wait", "retry", "give-up"
RECOVERED, GO_ON, QUARANTINE = "recovered", "go-on", "quarantine"
STALL_FLOOR_S = 60.0        # a run's status may stand still this long, whatever the patience


class Wedged(HostError):
    """The host answers but the run's status stopped advancing for longer than the host's
    patience (the agent or the runner hung)."""


# pure ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    at: str             # UTC ISO time the rung started
    rung: str           # one of RUNGS
    outcome: str        # "ok" | "failed" | "skipped" | a symptom (rung "look")
    detail: str
    seconds: float

    def line(self) -> str:
        return f"{self.at[11:19]} {self.rung}: {self.outcome} ({self.detail}, {self.seconds:.0f}s)"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Permits:
    reboot: bool        # an SSH reboot by the inventory's method
    power_cycle: bool   # the inventory's power_cycle argv


def permits(host: Host) -> Permits:
    """What the inventory allows the ladder: nothing for a host bench may not reboot or that
    is the controller's own machine; a power cycle only where an argv is configured."""
    r = host.reboot
    ok = r.allowed and host.transport != "local"
    return Permits(reboot=ok and r.method in REBOOT_METHODS,
                   power_cycle=ok and bool(r.power_cycle))


def diagnose(ssh_answers: bool, status: dict | None, status_hung: bool = False,
             live_is_stuck: bool = True) -> str:
    """UNREACHABLE (no SSH), WEDGED (SSH answers but the runner's `status` ran past its
    timeout, or the runner holds the run live and `live_is_stuck`: the look follows a wait
    that saw the run stop advancing) or NOT_STUCK (the run ended, the host does not know it,
    or it runs and answers: the ordinary paths decide)."""
    if not ssh_answers:
        return UNREACHABLE
    if status_hung:
        return WEDGED
    if live_is_stuck and status is not None and status.get("live") and \
            status.get("phase") not in ("done", "failed"):
        return WEDGED
    return NOT_STUCK


def next_rung(p: Permits, symptom: str, steps: Sequence[Step]) -> str | None:
    """The next rung after `steps` for a host with `symptom`; None when the ladder is done
    (a rung succeeded, the run is not stuck, or it reached quarantine)."""
    if symptom == NOT_STUCK or any(s.outcome == "ok" for s in steps if s.rung != "look"):
        return None
    if any(s.rung == "quarantine" for s in steps):
        return None
    tried = {s.rung for s in steps}
    if symptom == WEDGED and p.reboot and "ssh-reboot" not in tried:
        return "ssh-reboot"
    if p.power_cycle and "power-cycle" not in tried:
        return "power-cycle"
    return "quarantine"


def power_next(first_ok: bool, retried: bool, polls: Sequence[str], since_s: float,
               grace_s: float, expired: bool) -> str:
    """After a power command, until a new boot_id shows: WAIT, RETRY (the command once more)
    or GIVE_UP. `polls`: what each look since the last command saw (OLD: SSH answers with the
    old boot_id; DOWN: no answer); `since_s`: seconds since that command; `expired`: its wait
    (the host's up_timeout) is over; `first_ok`: the first command exited 0. Retried once at
    most: when the host did not go down (it answered with its old boot on every look for
    `grace_s`: the BMC ignored the command, or refused it in the chassis' present state),
    whatever the command said; or when the first command failed and nothing new came by the
    deadline (its error may have been true). A command that exited 0, after which the host
    went away and never came back, is not repeated: the host failed to boot."""
    if not retried:
        if polls and all(p == OLD for p in polls) and since_s >= grace_s:
            return RETRY
        if expired and not first_ok:
            return RETRY
    return GIVE_UP if expired else WAIT


def verdict(symptom: str, ok: bool) -> str:
    """What a caller does after a climb: RECOVERED (a rung rebooted or power-cycled the host
    and proved the new boot: what ran there is gone), GO_ON (not stuck: the host answers, the
    ordinary paths decide) or QUARANTINE (every rung failed, or none was allowed)."""
    if ok and symptom != NOT_STUCK:
        return RECOVERED
    return GO_ON if symptom == NOT_STUCK else QUARANTINE


def command_said(rc: int | None, err: str, out: str, n: int = 160) -> str:
    """One power command's outcome for a step's detail: its exit status and the tail of its
    stderr (of its stdout when it wrote nothing to stderr but failed), clipped."""
    said = "ran past its timeout" if rc is None else f"exit {rc}"
    err, out = " ".join(err.split()), " ".join(out.split())
    if err:
        said += f", stderr: {clip_tail(err, n)}"
    elif out and rc != 0:
        said += f", stdout: {clip_tail(out, n)}"
    return said


def fingerprint(st: dict) -> str:
    """What changes while a run advances: its phase, the agent's live progress (pass,
    iteration) and the runner's last status write."""
    return json.dumps([st.get("phase"), st.get("progress"), st.get("updated")], sort_keys=True,
                      default=str)


class StallWatch:
    """Feeds of the runner's status; `stalled(st, now)` says how long it has not changed."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.last: str | None = None
        self.since = 0.0

    def stalled(self, st: dict, now: float) -> float:
        fp = fingerprint(st)
        if fp != self.last:
            self.last, self.since = fp, now
        return now - self.since

    def wedged(self, st: dict, now: float) -> bool:
        return self.stalled(st, now) > self.limit_s


def mglru_default(after: Observation | None, default: int | None) -> Check | None:
    """The MGLRU mask of a recovered boot against the host's default boot (None: no default
    boot seen, nothing to check)."""
    if after is None or default is None:
        return None
    seen = "absent" if after.lru_mask is None else f"{after.lru_mask:#06x}"
    return Check("MGLRU as in the default boot", after.lru_mask == default,
                 f"mask {seen}, default boot {default:#06x}")


def recovery_checks(before: Observation | None, after: Observation, full_memtotal: int | None,
                    default_lru: int | None) -> list[Check]:
    """The proof of a recovered boot: the reboot gate (bench.hosts.bootplan.evaluate_gate) for
    the default command line against the last boot seen, plus the default boot's MGLRU mask
    when one was seen. With no earlier boot (a host down from its worker's start) what needs
    no reference is still checked: no mem= and no bench.lru_gen= on the command line, MemTotal
    full when known; "boot_id changed" and "THP as before" cannot be and are left out."""
    ref = before if before is not None else Observation("", "", 0, None, arch=after.arch)
    gate = evaluate_gate(ref, after, None, None, arch=after.arch or None,
                         full_memtotal=full_memtotal)
    checks = [c for c in gate.checks if before is not None or c.name != "boot_id changed"]
    lru = mglru_default(after, default_lru)
    return checks + ([lru] if lru else [])


def summary(steps: Sequence[Step], limit: int = SUMMARY_MAX) -> str:
    """The steps as one line for a run's reason (bounded)."""
    text = "; ".join(s.line() for s in steps)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def clip(text: str, n: int = DETAIL_MAX) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def clip_tail(text: str, n: int) -> str:
    """The last n characters of text (a command's last words say why it failed)."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else "..." + text[len(text) - (n - 3):]


def clip_middle(text: str, n: int) -> str:
    """text within n characters, its middle elided: a command's verb is at its end (`ipmitool
    -I lanplus -H ... -f /long/path chassis power cycle`), its program at its start."""
    text = " ".join(str(text).split())
    if len(text) <= n:
        return text
    head = (n - 3) // 2
    return text[:head] + "..." + text[len(text) - (n - 3 - head):]


# I/O ----------------------------------------------------------------------------------------

def run_power_cycle(argv: Sequence[str], timeout: float = POWER_CYCLE_TIMEOUT_S,
                    tail: int = OUTPUT_TAIL) -> tuple[int | None, str, str]:
    """Run a power-cycle argv on the controller (no shell), in its own session: (exit status,
    the last `tail` bytes of its stdout, and of its stderr); exit None when it ran past
    `timeout` (its process group killed). Output goes to files, so a chatty or daemonizing
    command costs no memory and cannot hold a pipe open."""
    quote_argv(argv)        # the same validation as any argv bench runs
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            p = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True)
        except OSError as exc:
            return 127, "", f"{argv[0]}: {exc.strerror or exc}"
        try:
            rc: int | None = p.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
            rc = None
        return rc, _tail(out, tail), _tail(err, tail)


def _tail(fh, n: int) -> str:
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(0, size - n))
    return fh.read().decode("utf-8", "replace")


@dataclass
class LadderResult:
    symptom: str
    ok: bool
    steps: list[Step]
    after: Observation | None = None

    @property
    def summary(self) -> str:
        return summary(self.steps)


class Ladder:
    """One climb for one host's stuck run (module doc). `before` is the host's last proven
    boot (the gate's reference); `full_memtotal` its MemTotal without mem= when known;
    `default_lru` the MGLRU mask of its default boot when seen; `on_step` hears each Step as
    it ends."""

    def __init__(self, host: Host, session: HostSession, run_id: str | None,
                 before: Observation | None, full_memtotal: int | None = None,
                 on_step: Callable[[Step], None] | None = None, poll_s: float = 2.0,
                 default_lru: int | None = None):
        self.host, self.session, self.rid = host, session, run_id
        self.before, self.full, self.default_lru = before, full_memtotal, default_lru
        self.on_step = on_step or (lambda s: None)
        self.poll_s = poll_s
        self.steps: list[Step] = []
        self.after: Observation | None = None

    def _step(self, rung: str, t0: float, at: str, outcome: str, detail: str) -> None:
        s = Step(at, rung, outcome, clip(detail), round(time.monotonic() - t0, 1))
        self.steps.append(s)
        self.on_step(s)

    def climb(self, wedge_ok: bool = True) -> LadderResult:
        """wedge_ok False: a run the host holds live (and whose status answers) is not stuck
        (a step outside the wait lost the host, which is back: the ordinary paths decide)."""
        symptom = self.look(wedge_ok)
        p = permits(self.host)
        while (rung := next_rung(p, symptom, self.steps)) is not None:
            t0, at = time.monotonic(), _now()
            if rung == "quarantine":
                why = ("the inventory allows no reboot or power cycle" if not (p.reboot or
                       p.power_cycle) else "every rung failed")
                self._step(rung, t0, at, "failed", why)
                break
            try:
                ok, detail = (self.ssh_reboot() if rung == "ssh-reboot" else self.power_cycle())
            except BenchError as exc:
                ok, detail = False, exc.message
            finally:
                self.session.drop()
            self._step(rung, t0, at, "ok" if ok else "failed", detail)
        ok = symptom != NOT_STUCK and any(s.outcome == "ok" for s in self.steps
                                          if s.rung != "look")
        return LadderResult(symptom, ok, self.steps, self.after)

    def look(self, wedge_ok: bool = True) -> str:
        """One short look (no patience): SSH, then the runner's view of the run (if any)."""
        t0, at = time.monotonic(), _now()
        self.session.drop()
        answers, hung, st, why = False, False, None, ""
        try:
            t = self.session.transport
            read_boot_id(t, timeout=20)
            answers = True
            if self.rid is None:
                why = "no run to look at"
            else:
                st = runner_status(t, self.host, self.rid)
                why = "no such run on the host" if st is None else (
                    f"runner phase {st.get('phase')}, live {bool(st.get('live'))}, "
                    f"progress {st.get('progress')}")
        except CommandTimeout as exc:
            hung, why = answers, ("the runner's status hangs: " if answers else "") + exc.message
        except BenchError as exc:
            why = exc.message
        finally:
            self.session.drop()
        symptom = diagnose(answers, st, hung, live_is_stuck=wedge_ok)
        self._step("look", t0, at, symptom, ("SSH answers; " if answers else "SSH: ") + why)
        return symptom

    def ssh_reboot(self) -> tuple[bool, str]:
        res = restore_host(self.session.transport, self.host, None)
        lru = mglru_default(res.after, self.default_lru)
        ok = res.ok and (lru is None or lru.ok)
        self.after = res.after if ok else None
        return ok, (f"{res.method} into the default command line: {res.verdict} "
                    f"({res.reason})" + ("; power-cycled by the reboot" if res.power_cycled
                                         else "")
                    + (f"; boot_id {res.after.boot_id}" if res.after else "")
                    + (f"; {'ok' if lru.ok else 'FAIL'} {lru.name}: {lru.detail}" if lru else ""))

    def power_cycle(self) -> tuple[bool, str]:
        """The power command, then up to up_timeout for a new boot_id whatever it exited with;
        once more when `power_next` says so (module doc). The detail names the command once
        and each run's exit status and stderr."""
        argv = list(self.host.reboot.power_cycle or ())
        up = float(self.host.reboot.up_timeout)
        grace = min(POWER_GRACE_S, up / 3)
        said = f"`{clip_middle(quote_argv(argv), 100)}`"
        first_ok, retried = True, False
        while True:
            rc, out, err = run_power_cycle(argv)
            said += ("; again: " if retried else " ") + command_said(rc, err, out)
            first_ok = first_ok and (retried or rc == 0)
            new, decision, polls, waited = self._await_new_boot(up, grace, first_ok, retried)
            if new is not None:
                return self._prove(said + f"; new boot_id after {waited:.0f}s")
            seen = ("still on its old boot" if polls and all(p == OLD for p in polls)
                    else "no new boot_id")
            said += f"; {seen} after {waited:.0f}s"
            if decision != RETRY:
                return False, said + f" (up_timeout {up:.0f}s)"
            retried = True

    def _await_new_boot(self, up: float, grace: float, first_ok: bool,
                        retried: bool) -> tuple[str | None, str, list[str], float]:
        """Look for a new boot_id until `power_next` stops waiting: (the new boot_id or None,
        the decision, what the looks saw, seconds waited)."""
        old = self.before.boot_id if self.before else None
        t0 = time.monotonic()
        polls: list[str] = []
        while True:
            left = up - (time.monotonic() - t0)
            try:
                bid = read_boot_id(self.session.transport, timeout=max(1.0, min(15.0, left)))
                if bid and bid != old:
                    return bid, WAIT, polls, time.monotonic() - t0
                polls.append(OLD if bid else DOWN)
            except (BenchError, OSError):
                polls.append(DOWN)
                self.session.drop()
            since = time.monotonic() - t0
            decision = power_next(first_ok, retried, polls, since, grace, since >= up)
            if decision != WAIT:
                self.session.drop()
                return None, decision, polls, since
            time.sleep(min(self.poll_s, max(0.0, up - since)))

    def _prove(self, said: str) -> tuple[bool, str]:
        after = observe(self.session.transport)
        every = recovery_checks(self.before, after, self.full, self.default_lru)
        if self.before is None:
            said += "; no earlier boot seen (down from the worker's start): boot_id not compared"
        ok = all(c.ok for c in every)
        self.after = after if ok else None
        checks = ", ".join(f"{'ok' if c.ok else 'FAIL'} {c.name}" for c in every)
        return ok, f"{said}; boot_id {after.boot_id}; gate: {checks}" + (
            "" if ok else " (" + "; ".join(f"{c.name}: {c.detail}" for c in every
                                           if not c.ok) + ")")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
