"""bench.lab.vm_image.stop_process on real processes: the lab's power cycle stops a qemu that a
test (or a hang) froze with SIGSTOP, from a process that is not its parent, and starts a new qemu
on the same forwarded port at once. A CI run's power-cycled guest never came back because the
old qemu was still exiting, port held, when the new one started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.lab.vm_image import is_our_process, stop_process

# holds a listening TCP port, as qemu's hostfwd does, and handles SIGTERM as qemu does (a
# handler, so a frozen holder leaves it pending until continued; a default-action SIGTERM would
# kill even a stopped process)
HOLDER = ("import signal, socket, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
          "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
          "print(s.getsockname()[1], flush=True)\n"
          "time.sleep(3600)\n")


def _orphan(marker: str) -> tuple[int, int]:
    """Start the port holder as a grandchild whose parent has exited (not our child, as a
    qemu started by `bench lab up` is not the child of a later `power-cycle`): (pid, port)."""
    sh = (f"{sys.executable} -c {_q(HOLDER)} {marker} > {marker}.port 2>/dev/null & echo $!")
    pid = int(subprocess.run(["sh", "-c", sh], capture_output=True, text=True,
                             check=True).stdout)
    port_file = Path(f"{marker}.port")
    t = time.monotonic() + 30
    while not port_file.read_text().strip():
        assert time.monotonic() < t, "the port holder did not start"
        time.sleep(0.05)
    return pid, int(port_file.read_text())


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


@pytest.fixture
def frozen(tmp_path):
    marker = str(tmp_path / "holder-marker")
    pid, port = _orphan(marker)
    exe = Path(sys.executable).name
    assert is_our_process(pid, exe, marker)
    os.kill(pid, signal.SIGSTOP)
    yield pid, port, exe, marker
    if is_our_process(pid, exe, marker):
        os.kill(pid, signal.SIGKILL)


def test_a_frozen_process_is_stopped_promptly_and_its_port_is_free_on_return(frozen):
    pid, port, exe, marker = frozen
    t0 = time.monotonic()
    stop_process(pid, exe, marker, wait=10.0)
    took = time.monotonic() - t0
    # continued after the SIGTERM, it exits on it: no 10 s wait for the SIGKILL
    assert took < 5.0, f"stop_process took {took:.1f}s on a frozen process"
    assert _exited(pid), Path(f"/proc/{pid}/status").read_text()
    with socket.socket() as s:      # what the new qemu's hostfwd does next
        s.bind(("127.0.0.1", port))


def test_a_process_that_ignores_sigterm_is_killed_and_waited_for(tmp_path):
    marker = str(tmp_path / "stubborn-marker")
    prog = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "time.sleep(3600)\n")
    sh = f"{sys.executable} -c {_q(prog)} {marker} >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", sh], capture_output=True, text=True,
                             check=True).stdout)
    exe = Path(sys.executable).name
    t = time.monotonic() + 30
    while not is_our_process(pid, exe, marker):
        assert time.monotonic() < t
        time.sleep(0.05)
    time.sleep(0.3)                 # past the interpreter start: SIGTERM is ignored by now
    try:
        t0 = time.monotonic()
        stop_process(pid, exe, marker, wait=1.0)
        assert time.monotonic() - t0 >= 1.0
        assert _exited(pid)
    finally:
        if is_our_process(pid, exe, marker):
            os.kill(pid, signal.SIGKILL)


def test_a_pid_that_is_not_ours_is_left_alone():
    # our own pid with a marker it does not hold: never signalled
    stop_process(os.getpid(), Path(sys.executable).name, "/nonexistent/marker", wait=0.1)
