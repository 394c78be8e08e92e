"""The simulated BMC's power-off (bench.lab.twin_bmc, the program ipmi_sim runs for `chassis
power off|cycle`) on a stand-in qemu, no guest booted: a real process whose argv[0] is
qemu-system-aarch64 and whose command line names the guest's overlay, as the PID checks want.
ipmi_sim answers the IPMI request only when the program returns, and ipmitool gives up after
about 13 s: a guest frozen whole (its qemu SIGSTOPped, the twin campaign's injected hang) must be
off well inside that, or the ladder's power cycle reads as failed although it happened.
(Runs wherever bench is installed.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bench.lab import twin_bmc


@pytest.fixture
def fake_qemu(tmp_path):
    overlay = tmp_path / "root.qcow2"
    overlay.write_text("")
    p = subprocess.Popen([twin_bmc.QEMU, "-c", "import time; time.sleep(600)", str(overlay)],
                         executable=sys.executable)
    g = {"pidfile": str(tmp_path / "qemu.pid"), "overlay": str(overlay)}
    (tmp_path / "qemu.pid").write_text(f"{p.pid}\n")
    (tmp_path / twin_bmc.GUEST_FILE).write_text(json.dumps(g))
    deadline = time.monotonic() + 30
    while twin_bmc.qemu_pid(g) != p.pid and time.monotonic() < deadline:   # exec'd yet?
        time.sleep(0.05)
    yield g, p
    if p.poll() is None:
        p.kill()
        p.wait()


def _power(gdir) -> tuple[int, str, float]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "bench.lab.twin_bmc", str(gdir), "set", "power",
                        "0"], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, time.monotonic() - t0


def test_power_off_of_a_frozen_guest_answers_within_ipmitools_window(fake_qemu, tmp_path):
    g, p = fake_qemu
    assert twin_bmc.qemu_pid(g) == p.pid
    p.send_signal(signal.SIGSTOP)
    rc, out, secs = _power(tmp_path)
    assert rc == 0, out
    assert p.wait(5) == -signal.SIGTERM        # it ended on SIGTERM, not the SIGKILL fallback
    assert secs < 5.0, f"power off took {secs:.1f}s"
    assert twin_bmc.qemu_pid(g) is None


def test_power_off_of_a_running_guest(fake_qemu, tmp_path):
    g, p = fake_qemu
    rc, out, secs = _power(tmp_path)
    assert rc == 0 and p.wait(5) == -signal.SIGTERM and secs < 5.0, (rc, out, secs)


def test_power_on_answers_before_qemu_is_up(tmp_path):
    """`set power 1` starts qemu and returns at once; the pid file appears when qemu has
    daemonized (here a stand-in that takes 8 s to, and then runs on)."""
    exe = tmp_path / twin_bmc.QEMU
    exe.symlink_to(sys.executable)
    overlay, pidfile = tmp_path / "root.qcow2", tmp_path / "qemu.pid"
    overlay.write_text("")
    slow = ("import os, sys, time; time.sleep(8); "
            "open(sys.argv[1], 'w').write(f'{os.getpid()}\\n'); time.sleep(600)")
    g = {"pidfile": str(pidfile), "overlay": str(overlay), "qemu_log": str(tmp_path / "q.log"),
         "qemu_argv": [str(exe), "-c", slow, str(pidfile), str(overlay)]}
    (tmp_path / twin_bmc.GUEST_FILE).write_text(json.dumps(g))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "bench.lab.twin_bmc", str(tmp_path), "set", "power",
                        "1"], capture_output=True, text=True, timeout=60)
    secs = time.monotonic() - t0
    try:
        assert r.returncode == 0 and secs < 5.0, (r.returncode, r.stdout, secs)
        assert twin_bmc.qemu_pid(g) is None and twin_bmc.starting_pid(g) is not None
        again = subprocess.run([sys.executable, "-m", "bench.lab.twin_bmc", str(tmp_path), "set",
                                "power", "1"], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0    # a second power-on while it starts starts no second one
        deadline = time.monotonic() + 30
        while twin_bmc.qemu_pid(g) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        pid = twin_bmc.qemu_pid(g)
        assert pid == twin_bmc.starting_pid(g), "not the qemu the first power-on started"
        assert _power(tmp_path)[0] == 0 and twin_bmc.qemu_pid(g) is None
    finally:
        for p in (twin_bmc.qemu_pid(g), twin_bmc.starting_pid(g)):
            if p:
                os.kill(p, signal.SIGKILL)
