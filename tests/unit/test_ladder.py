"""The recovery ladder's decisions, by data: what the inventory permits, what a look at the host
means, which rung comes next after which steps, when a run counts as wedged, and the reason
line; plus the power-cycle runner on real processes (exit status, timeout, bounded output)."""

import sys
import time

import pytest

from bench.execute.campaign.ladder import (NOT_STUCK, UNREACHABLE, WEDGED, Permits, StallWatch,
                                           Step, diagnose, fingerprint, next_rung, permits,
                                           clip_middle, run_power_cycle, summary)
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
    rc, out = run_power_cycle([sys.executable, "-c", "print('Chassis Power Control: Cycle')"])
    assert rc == 0 and "Chassis Power Control: Cycle" in out
    rc, out = run_power_cycle([sys.executable, "-c",
                               "import sys; sys.stderr.write('no BMC'); sys.exit(3)"])
    assert rc == 3 and "no BMC" in out
    rc, out = run_power_cycle(["/nonexistent/ipmitool", "chassis"])
    assert rc == 127 and "ipmitool" in out


def test_power_cycle_runner_bounds_time_and_output():
    t0 = time.monotonic()
    rc, _ = run_power_cycle([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1.0)
    assert rc is None and time.monotonic() - t0 < 10
    rc, out = run_power_cycle([sys.executable, "-c",
                               "import sys; sys.stdout.write('x' * 5_000_000 + 'END')"],
                              tail=100)
    assert rc == 0 and len(out) == 100 and out.endswith("END")


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
