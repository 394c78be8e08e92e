"""The recovery ladder's decisions, by data: what the inventory permits, what a look at the host
means, which rung comes next after which steps, when a run counts as wedged, and the reason
line; plus the power-cycle runner on real processes (exit status, timeout, bounded output)."""

import sys
import time

import pytest

from bench.execute.campaign.ladder import (DOWN, GIVE_UP, GO_ON, NOT_STUCK, OLD, QUARANTINE,
                                           RECOVERED, RETRY, UNREACHABLE, WAIT, WEDGED,
                                           Permits, StallWatch, Step, clip_middle, command_said,
                                           diagnose, fingerprint, next_rung, permits,
                                           power_next, run_power_cycle, summary, verdict)
from bench.hosts.inventory import Host, RebootSpec

PC = ("ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "chassis", "power", "cycle")


def _host(transport="ssh", **reboot):
    return Host(name="h", address="127.0.0.1", transport=transport, reboot=RebootSpec(**reboot))


@pytest.mark.parametrize("transport,reboot,want", [
    ("ssh", {}, (False, False)),                                          # the default: nothing
    ("ssh", {"allowed": False, "method": "kexec", "power_cycle": PC}, (False, False)),
    ("ssh", {"allowed": True, "method": "kexec"}, (True, False)),
    ("ssh", {"allowed": True, "method": "grub-reboot", "grub_entry": "x",
             "power_cycle": PC}, (True, True)),
    ("ssh", {"allowed": True, "method": "command", "command": ("reboot",)}, (True, False)),
    ("ssh", {"allowed": True, "method": "none", "power_cycle": PC}, (False, True)),
    ("ssh", {"allowed": True, "method": "kexec", "power_cycle": ()}, (True, False)),
    ("local", {"allowed": True, "method": "kexec", "power_cycle": PC}, (False, False)),
])
def test_permits_follow_the_inventory(transport, reboot, want):
    p = permits(_host(transport, **reboot))
    assert (p.reboot, p.power_cycle) == want


@pytest.mark.parametrize("ssh,status,want", [
    (False, None, UNREACHABLE),
    (False, {"live": True, "phase": "measuring"}, UNREACHABLE),
    (True, {"live": True, "phase": "measuring"}, WEDGED),
    (True, {"live": True, "phase": "warmup"}, WEDGED),
    (True, {"live": False, "phase": "done"}, NOT_STUCK),
    (True, {"live": False, "phase": "failed"}, NOT_STUCK),
    (True, {"live": True, "phase": "done"}, NOT_STUCK),       # ending: its wait returns
    (True, None, NOT_STUCK),                                   # the host does not know it
])
def test_diagnose(ssh, status, want):
    assert diagnose(ssh, status) == want


LIVE = {"live": True, "phase": "measuring"}


@pytest.mark.parametrize("ssh,status,hung,live_is_stuck,want", [
    (True, None, True, True, WEDGED),          # SSH answers, `runner.py status` hangs
    (True, None, True, False, WEDGED),         # ... even outside a wait: the host is wedged
    (False, None, True, True, UNREACHABLE),    # no SSH at all: hung means nothing more
    (True, LIVE, False, False, NOT_STUCK),     # outside a wait a live run that answers runs
    (True, LIVE, False, True, WEDGED),         # after a wait that saw it stop advancing
    (True, None, False, False, NOT_STUCK),     # a climb for no run: SSH answers, go on
])
def test_diagnose_a_hung_status_and_a_live_run_outside_the_wait(ssh, status, hung,
                                                                live_is_stuck, want):
    assert diagnose(ssh, status, hung, live_is_stuck) == want


def _s(rung, outcome):
    return Step("2026-12-01T03:00:00+00:00", rung, outcome, "d", 1.0)


ALL, REBOOT, POWER, NONE = (Permits(True, True), Permits(True, False), Permits(False, True),
                            Permits(False, False))
LOOK_W, LOOK_U = _s("look", WEDGED), _s("look", UNREACHABLE)


@pytest.mark.parametrize("p,symptom,steps,want", [
    # wedged: SSH first, then the BMC, then quarantine
    (ALL, WEDGED, [LOOK_W], "ssh-reboot"),
    (ALL, WEDGED, [LOOK_W, _s("ssh-reboot", "failed")], "power-cycle"),
    (ALL, WEDGED, [LOOK_W, _s("ssh-reboot", "failed"), _s("power-cycle", "failed")],
     "quarantine"),
    (ALL, WEDGED, [LOOK_W, _s("ssh-reboot", "ok")], None),
    (REBOOT, WEDGED, [LOOK_W, _s("ssh-reboot", "failed")], "quarantine"),
    (POWER, WEDGED, [LOOK_W], "power-cycle"),
    # unreachable: an SSH reboot cannot help
    (ALL, UNREACHABLE, [LOOK_U], "power-cycle"),
    (ALL, UNREACHABLE, [LOOK_U, _s("power-cycle", "ok")], None),
    (ALL, UNREACHABLE, [LOOK_U, _s("power-cycle", "failed")], "quarantine"),
    (REBOOT, UNREACHABLE, [LOOK_U], "quarantine"),
    # an inventory that allows nothing: straight to quarantine, as before the ladder
    (NONE, WEDGED, [LOOK_W], "quarantine"),
    (NONE, UNREACHABLE, [LOOK_U], "quarantine"),
    (NONE, UNREACHABLE, [LOOK_U, _s("quarantine", "failed")], None),
    # not stuck: no rung at all
    (ALL, NOT_STUCK, [_s("look", NOT_STUCK)], None),
])
def test_next_rung(p, symptom, steps, want):
    assert next_rung(p, symptom, steps) == want


def test_the_ladder_always_ends():
    """Whatever every rung answers, the climb reaches None in at most 4 steps."""
    for p in (ALL, REBOOT, POWER, NONE):
        for symptom in (WEDGED, UNREACHABLE, NOT_STUCK):
            for outcomes in ("ff", "fo", "of", "oo"):
                steps = [_s("look", symptom)]
                k = 0
                while (r := next_rung(p, symptom, steps)) is not None:
                    steps.append(_s(r, "failed" if r == "quarantine" else
                                    ("ok" if outcomes[min(k, 1)] == "o" else "failed")))
                    k += 1
                    assert len(steps) <= 4, (p, symptom, steps)
                rungs = [s.rung for s in steps[1:]]
                assert len(set(rungs)) == len(rungs)


def test_stall_watch_counts_from_the_last_change():
    w = StallWatch(30.0)
    a = {"phase": "measuring", "progress": {"pass": 1, "iteration": 5}, "updated": "t1"}
    b = {"phase": "measuring", "progress": {"pass": 1, "iteration": 6}, "updated": "t1"}
    seq = [(0, a, False), (20, a, False), (31, a, True), (32, b, False), (50, b, False),
           (62.5, b, True), (63, dict(b, phase="collecting"), False)]
    for now, st, wedged in seq:
        assert w.wedged(st, now) is wedged, (now, st)
    # a new status write alone is progress; keys it does not read are not
    assert fingerprint(a) != fingerprint(dict(a, updated="t2"))
    assert fingerprint(a) == fingerprint(dict(a, live=True, pid=7))


def test_summary_is_one_bounded_line():
    steps = [_s("look", UNREACHABLE), _s("power-cycle", "ok")]
    line = summary(steps)
    assert "\n" not in line and "look: unreachable" in line and "power-cycle: ok" in line
    assert len(summary(steps * 200, limit=500)) == 500


def test_power_cycle_runner_exit_status_and_output():
    rc, out, err = run_power_cycle([sys.executable, "-c",
                                    "print('Chassis Power Control: Cycle')"])
    assert rc == 0 and "Chassis Power Control: Cycle" in out and err == ""
    rc, out, err = run_power_cycle([sys.executable, "-c", "import sys; print('tried'); "
                                    "sys.stderr.write('no BMC'); sys.exit(3)"])
    assert rc == 3 and err == "no BMC" and out.strip() == "tried"
    rc, out, err = run_power_cycle(["/nonexistent/ipmitool", "chassis"])
    assert rc == 127 and "ipmitool" in err and out == ""


def test_power_cycle_runner_bounds_time_and_output():
    t0 = time.monotonic()
    rc, _, _ = run_power_cycle([sys.executable, "-c", "import time; time.sleep(30)"],
                               timeout=1.0)
    assert rc is None and time.monotonic() - t0 < 10
    rc, out, err = run_power_cycle([sys.executable, "-c",
                                    "import sys; sys.stdout.write('x' * 5_000_000 + 'END'); "
                                    "sys.stderr.write('y' * 3_000_000 + 'ERR')"], tail=100)
    assert rc == 0 and len(out) == 100 and out.endswith("END")
    assert len(err) == 100 and err.endswith("ERR")


@pytest.mark.parametrize("mask,default,want", [
    (0x0007, 0x0007, True), (0x0000, 0x0007, False), (None, 0x0007, False),
    (0x0007, None, None), (0x0000, 0x0000, True),
])
def test_mglru_default_check(mask, default, want):
    from bench.execute.campaign.ladder import mglru_default
    from bench.hosts.bootplan import Observation
    after = Observation("b", "root=/dev/vda", 1 << 30, mask)
    c = mglru_default(after, default)
    assert (None if c is None else c.ok) is want
    assert mglru_default(None, default) is None


def test_a_long_power_cycle_command_keeps_its_program_and_its_verb():
    argv = "ipmitool -I lanplus -C 3 -H 127.0.0.1 -p 60138 -U bench -f " + "/x" * 60 + \
        "/bmc.pass chassis power cycle"
    c = clip_middle(argv, 120)
    assert len(c) == 120 and c.startswith("ipmitool -I lanplus") and \
        c.endswith("chassis power cycle") and "..." in c
    assert clip_middle("ipmitool chassis power cycle", 120) == "ipmitool chassis power cycle"


# the power-cycle rung: a failed command is not final, one retry at most ------------------------

@pytest.mark.parametrize("first_ok,retried,polls,since,expired,want", [
    # a new boot ends the wait before power_next is asked; until then:
    (True, False, [DOWN], 5, False, WAIT),              # went down: wait for it to come up
    (False, False, [DOWN, DOWN], 8, False, WAIT),       # the BMC said no, but the host went
    (False, False, [DOWN] * 9, 20, True, RETRY),        # ... never came back: the error was true
    (True, False, [DOWN] * 9, 20, True, GIVE_UP),       # cycled, failed to boot: not again
    (True, False, [OLD], 2, False, WAIT),               # still up 2 s after: give it the grace
    (True, False, [OLD] * 4, 10, False, RETRY),         # did not go down (BMC ignored it)
    (False, False, [OLD] * 4, 10, False, RETRY),        # did not go down (chassis refused)
    (True, False, [OLD, DOWN, OLD], 12, False, WAIT),   # it went down once: no early retry
    (True, True, [OLD] * 4, 10, False, WAIT),           # the retry did not take either: wait...
    (True, True, [OLD] * 9, 20, True, GIVE_UP),         # ... to the deadline, then no more
    (False, True, [DOWN] * 9, 20, True, GIVE_UP),
    (True, False, [], 0, False, WAIT),
])
def test_power_next(first_ok, retried, polls, since, expired, want):
    assert power_next(first_ok, retried, polls, since, 10.0, expired) == want


def test_the_power_rung_runs_its_command_twice_at_most():
    """Whatever the host shows and the commands exit with, the loop the rung runs (each
    command, then looks every 2 s until power_next stops waiting) ends with at most two
    commands and never waits past two up_timeouts."""
    up, grace = 20.0, 6.0
    for first_ok in (True, False):
        for pattern in ([OLD], [DOWN], [OLD, DOWN], [DOWN, OLD, OLD], [OLD, OLD, OLD, DOWN]):
            commands, retried, total = 1, False, 0.0
            while True:
                polls: list[str] = []
                since, d = 0.0, WAIT
                while d == WAIT:
                    since += 2.0
                    polls.append(pattern[min(len(polls), len(pattern) - 1)])
                    d = power_next(first_ok, retried, polls, since, grace, since >= up)
                total += since
                if d == GIVE_UP:
                    break
                assert d == RETRY and not retried
                retried, commands = True, commands + 1
            assert commands <= 2 and total <= 2 * up + 2, (first_ok, pattern)


@pytest.mark.parametrize("symptom,ok,want", [
    (UNREACHABLE, True, RECOVERED), (WEDGED, True, RECOVERED),
    (UNREACHABLE, False, QUARANTINE), (WEDGED, False, QUARANTINE),
    (NOT_STUCK, False, GO_ON), (NOT_STUCK, True, GO_ON),
])
def test_verdict_of_a_climb(symptom, ok, want):
    assert verdict(symptom, ok) == want


def test_command_said_keeps_the_exit_status_and_the_end_of_stderr():
    err = "Get Session Challenge command failed\n" + "x" * 400 + \
        "\nError: Unable to establish IPMI v2 / RMCP+ session\n"
    said = command_said(1, err, "")
    assert said.startswith("exit 1, stderr: ...") and len(said) <= len("exit 1, stderr: ") + 160
    assert said.endswith("Unable to establish IPMI v2 / RMCP+ session") and "\n" not in said
    assert command_said(0, "", "Chassis Power Control: Cycle") == "exit 0"
    assert command_said(3, "", "refused") == "exit 3, stdout: refused"
    assert command_said(None, "", "") == "ran past its timeout"


# the rung itself, on this machine's real boot_id (the local transport) ------------------------

BMC = ("import pathlib, sys\n"
       "p = pathlib.Path(sys.argv[1])\n"
       "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
       "print('Set Chassis Power Control to Cycle failed')\n"
       "sys.stderr.write('Error: Unable to establish IPMI v2 / RMCP+ session\\n')\n"
       "sys.exit(1)\n")


def _local_ladder(tmp_path, before_boot_id=None, up_timeout=3.0):
    """A Ladder for this machine over the local transport, whose power_cycle argv is a BMC
    stand-in that counts its calls in a file and always fails as ipmitool does."""
    import dataclasses

    from bench.execute.campaign.ladder import Ladder
    from bench.execute.hostrun import HostSession
    from bench.hosts.reboot import observe
    from bench.hosts.transport import LocalTransport
    calls = tmp_path / "calls"
    host = Host(name="here", address="127.0.0.1", transport="local",
                reboot=RebootSpec(allowed=True, method="none", up_timeout=up_timeout,
                                  power_cycle=(sys.executable, "-c", BMC, str(calls))))
    before = observe(LocalTransport("here"))
    if before_boot_id is not None:
        before = dataclasses.replace(before, boot_id=before_boot_id)
    session = HostSession(host, lambda h: LocalTransport(h.name))
    return Ladder(host, session, None, before, poll_s=0.2), calls, before


def test_a_failed_power_command_on_a_host_that_did_not_go_down_is_retried_once(tmp_path):
    """This machine keeps its boot_id: the host 'did not go down'. The command failed; the rung
    still waits (up_timeout 3 s, grace 1 s), runs the command once more after the grace, waits
    the whole up_timeout again and fails with both exit statuses and stderrs in its detail."""
    lad, calls, _ = _local_ladder(tmp_path)
    t0 = time.monotonic()
    ok, detail = lad.power_cycle()
    secs = time.monotonic() - t0
    assert not ok and calls.read_text() == "xx", detail
    assert 4.0 <= secs < 15, secs        # 1 s grace, then 3 s after the retry
    assert detail.count("exit 1, stderr: Error: Unable to establish IPMI v2 / RMCP+ session") \
        == 2, detail
    assert " again: exit 1" in detail and "still on its old boot after" in detail, detail
    assert detail.endswith("(up_timeout 3s)"), detail


def test_a_failed_power_command_after_which_a_new_boot_shows_is_proven(tmp_path):
    """The BMC reports an error although the cycle happened: the new boot_id (this machine's,
    against an earlier one) is found, proven by the gate, and the detail keeps the exit status
    and stderr; no retry."""
    lad, calls, before = _local_ladder(tmp_path, before_boot_id="0" * 8 + "-0000-0000-0000-" +
                                       "0" * 12)
    ok, detail = lad.power_cycle()
    assert ok and calls.read_text() == "x", detail
    assert "exit 1, stderr: Error: Unable to establish IPMI v2 / RMCP+ session" in detail
    assert "new boot_id after" in detail and "ok boot_id changed" in detail, detail
    assert " again:" not in detail and lad.after is not None
    assert lad.after.boot_id != before.boot_id


def test_a_climb_for_no_run_on_a_host_that_answers_goes_on(tmp_path):
    lad, calls, _ = _local_ladder(tmp_path)
    res = lad.climb(wedge_ok=False)
    assert res.symptom == NOT_STUCK and verdict(res.symptom, res.ok) == GO_ON
    assert [s.rung for s in res.steps] == ["look"] and "no run to look at" in res.steps[0].detail
    assert not calls.exists()


def _obs(boot_id, cmdline, memtotal=8 << 30, lru=0x0007, thp=(("enabled", "madvise"),)):
    from bench.hosts.bootplan import Observation
    return Observation(boot_id, cmdline, memtotal, lru, arch="x86_64", thp=thp)


@pytest.mark.parametrize("before,after,full,lru,want_ok,want_names", [
    # against the last boot seen: the whole gate
    (_obs("a", "root=/dev/vda"), _obs("b", "root=/dev/vda"), 8 << 30, 0x0007, True,
     ["boot_id changed", "cmdline mem=", "cmdline bench.lru_gen=", "MemTotal full",
      "THP as before", "MGLRU as in the default boot"]),
    (_obs("a", "root=/dev/vda"), _obs("a", "root=/dev/vda"), None, None, False,
     ["boot_id changed", "cmdline mem=", "cmdline bench.lru_gen=", "THP as before"]),
    (_obs("a", "mem=2G root=/dev/vda", 2 << 30), _obs("b", "root=/dev/vda", 8 << 30), None,
     None, True, ["boot_id changed", "cmdline mem=", "cmdline bench.lru_gen=",
                  "MemTotal grew", "THP as before"]),
    # no earlier boot (down from the worker's start): what needs no reference
    (None, _obs("b", "root=/dev/vda"), None, None, True,
     ["cmdline mem=", "cmdline bench.lru_gen="]),
    (None, _obs("b", "mem=2G root=/dev/vda"), None, None, False,
     ["cmdline mem=", "cmdline bench.lru_gen="]),
    (None, _obs("b", "root=/dev/vda bench.lru_gen=off"), None, None, False,
     ["cmdline mem=", "cmdline bench.lru_gen="]),
    (None, _obs("b", "root=/dev/vda", 4 << 30), 8 << 30, None, False,
     ["cmdline mem=", "cmdline bench.lru_gen=", "MemTotal full"]),
])
def test_recovery_checks(before, after, full, lru, want_ok, want_names):
    from bench.execute.campaign.ladder import recovery_checks
    checks = recovery_checks(before, after, full, lru)
    assert [c.name for c in checks] == want_names
    assert all(c.ok for c in checks) is want_ok, [(c.name, c.ok, c.detail) for c in checks]
