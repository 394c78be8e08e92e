"""One supervise loop for the run's child (the agent, or an engine): start it, sample
timeline.csv every interval until it exits, stop it on a stop request or at its timeout.

A Child says what differs between the two: argv, env, cwd, output files, the memory scope it
enters between fork and exec, whether it leads its own session (then stopping it stops its
whole process group), its timeout, and hooks for what to record when it started and what each
timeline row shows. The loop's order, per interval: sample a row; if the child exited, stop
looking; if a stop was requested or the timeout passed, stop it; else wait up to one interval
for it to exit (through a pidfd where the kernel has one, else by polling). So the last row is
taken after the exit is seen, and an exit ends the wait at once."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import IO, Callable

from .errors import RunFailed
from .files import meminfo

TIMELINE_HEADER = "mono_ns,phase,memory_current,cached,mem_available\n"
STOPPED = "stopped by request (SIGTERM to the runner)"
STOP_GRACE_S = 10.0


def stop_child(p: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM our child, SIGKILL after timeout; reaped through Popen so its status is kept."""
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def stop_group(p: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM a child that leads its own session and its whole process group, SIGKILL after
    timeout; reaped through Popen so its status is kept."""
    if p.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, None)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stop(p: subprocess.Popen[bytes], group: bool) -> None:
    """Stop the supervised child: its process group when it leads one, else just it."""
    (stop_group if group else stop_child)(p, STOP_GRACE_S)


def _no_row() -> tuple[str, str]:
    return "measuring", ""


@dataclass
class Child:
    """What to run and how; the hooks run in the runner, between samples."""
    argv: list[str]
    what: str                        # "the agent", "the engine X": for the start error
    stdout: str                      # paths; the same path twice shares one file
    stderr: str
    append: bool = False             # open the output files for appending
    env: dict[str, str] | None = None
    cwd: str | None = None
    scope_procs: str | None = None   # a cgroup.procs the child writes itself into before exec
    umask: int | None = None         # the child's umask (default: the runner's, 077)
    new_session: bool = False        # its own session: stopped as a process group
    timeout_s: int | None = None
    timeout_reason: str = ""
    # (proc or the error, CLOCK_MONOTONIC ns just before the start): record the pid, the phase
    on_start: Callable[[subprocess.Popen[bytes], int], None] = lambda p, t: None
    on_start_error: Callable[[BaseException, int], None] = lambda e, t: None
    # each interval: (timeline phase, memory_current) of the next row
    row: Callable[[], tuple[str, str]] = _no_row


@dataclass
class Outcome:
    returncode: int
    ended_ns: int                    # CLOCK_MONOTONIC once the exit (or the stop) was seen
    samples: int
    exit_seen_by: str                # "pidfd" or "poll"
    why: str | None = None           # stopped or timed out: the run's failure reason
    stopped: bool = False
    timed_out: bool = False


def _launch(c: Child) -> subprocess.Popen[bytes]:
    mode = "ab" if c.append else "wb"
    procs, umask = c.scope_procs, c.umask

    def enter_scope() -> None:      # runs in the child between fork and exec
        if umask is not None:
            os.umask(umask)
        if procs:
            with open(procs, "w") as f:
                f.write(f"{os.getpid()}\n")
    with open(c.stdout, mode) as out:
        err = out if c.stderr == c.stdout else open(c.stderr, mode)
        try:
            return subprocess.Popen(c.argv, cwd=c.cwd, env=c.env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, close_fds=True,
                                    start_new_session=c.new_session,
                                    preexec_fn=enter_scope if procs or umask is not None
                                    else None)
        finally:
            if err is not out:
                err.close()


def _sample(tl: IO[str], row: Callable[[], tuple[str, str]]) -> bool:
    phase, cur = row()
    try:
        mi = meminfo()
        tl.write(f"{time.monotonic_ns()},{phase},{cur},{mi['Cached']},{mi['MemAvailable']}\n")
        return True
    except OSError:
        return False


def _exit_waiter(p: subprocess.Popen[bytes]) -> tuple[int | None, str]:
    try:
        return os.pidfd_open(p.pid), "pidfd"
    except (AttributeError, OSError):       # Python < 3.9, or a kernel without pidfds
        return None, "poll"


def _wait_exit(p: subprocess.Popen[bytes], pidfd: int | None, interval: float) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [], interval)
        return
    try:
        p.wait(interval)
    except subprocess.TimeoutExpired:
        pass


def supervise(c: Child, timeline: str, interval: float,
              stop_requested: Callable[[], bool]) -> Outcome:
    """Run c to its end (or stop it), writing timeline.csv meanwhile. Raises RunFailed only
    when it cannot be started; a stop or a timeout is returned in Outcome.why."""
    with open(timeline, "w") as tl:
        tl.write(TIMELINE_HEADER)
        launched = time.monotonic_ns()
        try:
            p = _launch(c)
        except (OSError, subprocess.SubprocessError) as e:
            c.on_start_error(e, launched)
            raise RunFailed(f"cannot start {c.what}: {e}") from None
        c.on_start(p, launched)
        pidfd, seen_by = _exit_waiter(p)
        deadline = time.monotonic() + c.timeout_s if c.timeout_s else None
        o = Outcome(returncode=0, ended_ns=0, samples=0, exit_seen_by=seen_by)
        try:
            while True:
                if _sample(tl, c.row):
                    o.samples += 1
                if p.poll() is not None:
                    break
                if stop_requested():
                    o.why, o.stopped = STOPPED, True
                elif deadline is not None and time.monotonic() > deadline:
                    o.why, o.timed_out = c.timeout_reason, True
                if o.why:
                    stop(p, c.new_session)
                    break
                _wait_exit(p, pidfd, interval)
        finally:
            if pidfd is not None:
                os.close(pidfd)
    o.ended_ns = time.monotonic_ns()
    assert p.returncode is not None
    o.returncode = p.returncode
    return o
