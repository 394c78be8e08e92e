"""A campaign's claim on a host (bench.hosts.lock.HostClaim) with real flock holders on the
local transport: while claimed, `bench hosts reboot|restore|mglru` (take_for) and any other
controller (a `bench run` set-up) are refused with one line naming the campaign and its
controller (host, pid), even with no run in progress; --force names the campaign it disturbs;
the campaign's own boot step borrows the claim and re-takes it after the boot; a holder that
died (as with a reboot) is seen dead by the liveness rule (same boot_id, holder pid alive, the
lock file still ours) and re-taken; a released claim lets the others in. No root needed."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from bench.hosts.inventory import Host
from bench.hosts.lock import (_ALIVE, Borrowed, HostClaim, HostLock, HostLocked, live_runs,
                              take_for)
from bench.hosts.transport import LocalTransport

ME = f"controller {socket.gethostname()}, pid {os.getpid()}, since "


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(name="local", address="localhost", transport="local",
                work_dir=str(tmp_path / "work"))


@pytest.fixture
def claim(host):
    c = HostClaim(host, lambda h: LocalTransport(h.name), "cg-7")
    c.take()
    try:
        yield c
    finally:
        c.release()


def gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.02)
    return False


def test_a_claimed_host_refuses_reboot_and_other_controllers_naming_the_campaign(host, claim):
    t = LocalTransport()
    assert claim.held and claim.alive(t) and live_runs(t, host) == []    # between runs
    for what in ("reboot", "restore", "toggle MGLRU on"):
        with pytest.raises(HostLocked) as exc:
            take_for(t, host, what)
        msg = exc.value.message
        assert re.fullmatch(rf"local: owned by campaign cg-7 \({re.escape(ME)}"
                            rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ\): refusing to {what}", msg), msg
        assert "bench watch cg-7" in (exc.value.hint or "") and "--force" in exc.value.hint
        assert exc.value.holder is not None and exc.value.holder.pid == os.getpid()
    # a `bench run` set-up (another controller's host lock) is refused naming it too
    with pytest.raises(HostLocked) as other:
        HostLock(t, host, purpose="bench run r1").acquire()
    assert other.value.message.startswith(f"local: locked by another controller: campaign "
                                          f"cg-7 ({ME}")
    assert claim.alive(t)                   # the refusals took nothing from the claim


def test_force_names_the_campaign_it_disturbs_and_goes_ahead_without_the_lock(host, claim):
    t = LocalTransport()
    said: list[str] = []
    lock = take_for(t, host, "reboot", force=True, say=said.append)
    assert not lock.held                    # the campaign still holds the host lock
    assert len(said) == 1 and said[0].startswith(
        f"local: --force: the host is owned by campaign cg-7 ({ME}"), said
    assert said[0].endswith("; reboot disturbs it between its runs (its next run on local "
                            "meets the new boot)"), said
    lock.release()
    assert claim.alive(t)


def test_the_campaigns_own_boot_step_borrows_the_claim_and_retakes_it(host, claim):
    t = LocalTransport()
    first = claim._lock
    assert first is not None and claim.takes == 1
    lent = take_for(t, host, "reboot for r1 (campaign cg-7)", claim=claim)
    assert isinstance(lent, Borrowed) and lent.after_boot and claim.takes == 1
    lent.release()                          # after the boot: the claim is taken again
    assert claim.takes == 2 and claim.held and claim._lock is not first
    assert first.holder_pid is not None and gone(first.holder_pid)
    assert claim.alive(t)
    claim.ensure(t)                         # alive: nothing re-taken
    assert claim.takes == 2
    Borrowed(claim).release()               # a set-up step's loan gives nothing back
    assert claim.takes == 2 and claim.alive(t)
    with pytest.raises(HostLocked):         # still refused to others
        take_for(t, host, "reboot")


def test_a_dead_holder_is_seen_dead_and_retaken_unless_another_controller_got_in(host, claim):
    t = LocalTransport()
    lock = claim._lock
    assert lock is not None and lock.holder_pid and lock.boot_id
    # the liveness rule itself, with the holder alive: only the same boot_id passes
    argv = ["sh", "-c", _ALIVE, "probe", lock.boot_id, str(lock.holder_pid), lock.path,
            lock.owner]
    assert t.run(argv, check=False).stdout.strip() == "ALIVE"
    other_boot = "0" * 8 + lock.boot_id[8:]
    assert t.run([*argv[:4], other_boot, *argv[5:]], check=False).stdout.strip() == ""
    # the holder dies (as in a reboot or a dropped connection): seen dead, taken again
    os.kill(lock.holder_pid, signal.SIGKILL)
    assert gone(lock.holder_pid)
    time.sleep(0.2)
    assert not claim.alive(t)
    claim.ensure(t)
    assert claim.takes == 2 and claim.alive(t)
    # dead again, and meanwhile another controller took the host: refused naming it
    new = claim._lock
    assert new is not None and new.holder_pid
    os.kill(new.holder_pid, signal.SIGKILL)
    assert gone(new.holder_pid)
    time.sleep(0.2)
    intruder = HostLock(t, host, purpose="bench hosts reboot")
    intruder.acquire()
    try:
        t0 = time.monotonic()
        with pytest.raises(HostLocked) as exc:
            claim.ensure(t, wait_s=1.5)
        assert time.monotonic() - t0 >= 1.5
        assert f"locked by another controller: bench hosts reboot ({ME}" in exc.value.message
        assert not claim.held
    finally:
        intruder.release()
    claim.ensure(t)
    assert claim.held and claim.alive(t)


def test_a_released_claim_lets_the_others_in(host, claim):
    t = LocalTransport()
    claim.release()
    assert not claim.held and not claim.alive(t)
    lock = take_for(t, host, "reboot")
    try:
        assert lock.held
        with pytest.raises(HostLocked) as exc:      # and the campaign is refused in turn
            claim.take()
        assert "bench hosts reboot" in exc.value.message
    finally:
        lock.release()


def test_a_hostile_lock_file_is_shown_as_one_bounded_line(host):
    t = LocalTransport()
    evil = "[bold red]x\x1b[2J\nsecond line " + "A" * 5000
    holder = HostLock(t, host, owner=evil)
    holder.acquire()
    try:
        with pytest.raises(HostLocked) as exc:
            take_for(t, host, "reboot")
        msg = exc.value.message
        assert "\n" not in msg and "\x1b" not in msg and len(msg) < 400, msg
        assert msg.startswith("local: locked by another controller: [bold red]x?[2J")
        assert msg.endswith("...: refusing to reboot"), msg
        assert exc.value.holder is None
    finally:
        holder.release()


def test_the_start_command_checks_the_claim_before_it_writes_or_starts_anything(host, claim):
    """A steady run's start checks the campaign's claim in the same command (one round trip
    less than a separate check): held, the spec is written and the command runs; gone (the
    lock file is another's, or the holder died), the start exits CLAIM_LOST having written
    and started nothing, and start_run says so (ClaimLost)."""
    from bench.execute.hostrun import CLAIM_LOST, CLAIMED_START_SCRIPT, ClaimLost, start_run
    t = LocalTransport()
    args = claim.alive_args()
    assert args is not None and args[0] and args[1].isdigit()
    specs = Path(host.work_dir) / "specs"
    started = Path(host.work_dir) / "started"

    def start(name: str):
        return t.run(["sh", "-c", CLAIMED_START_SCRIPT, "bench-start", *args, str(specs),
                      str(specs / f"{name}.json"), '{"run_id": "%s"}' % name,
                      "touch", str(started)], check=False)
    r = start("r1")
    assert r.rc == 0 and started.exists() and (specs / "r1.json").read_text() == \
        '{"run_id": "r1"}'
    started.unlink()
    lock = claim._lock
    assert lock is not None
    Path(lock.path).write_text("someone else\n")        # the lock file no longer ours
    r = start("r2")
    assert r.rc == CLAIM_LOST and "host claim is lost" in r.stderr
    assert not started.exists() and not (specs / "r2.json").exists()
    with pytest.raises(ClaimLost):
        start_run(t, host, {"run_id": "r3"}, claim.alive_args())
    assert not (specs / "r3.json").exists()
    os.kill(lock.holder_pid, signal.SIGKILL)            # the holder gone: not held from here
    assert gone(lock.holder_pid)
    time.sleep(0.2)
    assert claim.alive_args() is None
