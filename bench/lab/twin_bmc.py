"""A twin guest's power, as its simulated BMC sees it: OpenIPMI's `ipmi_sim` serves IPMI over
LAN (lanplus) on a local UDP port and hands every chassis control to the program named in its
lan.conf (`chassis_control "PROG DEVICE"`, called as `PROG DEVICE get power` or `PROG DEVICE
set power 0|1` / `set reset 1` / `set boot X`): this module, with the guest's directory as the
device. Power is the guest's qemu process: on = our qemu (pid file, command line checked) runs;
off = it is terminated (continued if stopped, SIGTERM, then SIGKILL) like pulled power; reset =
off, then on. So
`ipmitool -I lanplus ... chassis power cycle` (ipmi_sim: power 0, then power 1) really
restarts the guest from its firmware, and `chassis power status` reports the process.

(qemu-system-aarch64 as Debian 12 builds it has no IPMI devices, `ipmi-bmc-extern` included, so
the BMC cannot talk to the guest over a chardev; power is what a BMC controls anyway.)

Kept to the standard library and bench.lab.vm_image: ipmi_sim runs it once per IPMI command.
`python3 -m bench.lab.twin_bmc GUEST_DIR get power | set power 0|1 | set reset 1`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.lab.vm_image import is_our_process, stop_process

QEMU = "qemu-system-aarch64"
GUEST_FILE = "guest.json"       # written by bench.lab.twin: qemu argv, pid file, marker
STARTING = ".starting"          # next to the pid file: the pid of a qemu not yet daemonized
OFF_WAIT_S = 5.0                # SIGTERM -> SIGKILL: well inside ipmitool's ~13 s window


def _guest(gdir: Path) -> dict:
    return json.loads((gdir / GUEST_FILE).read_text())


def qemu_pid(g: dict) -> int | None:
    """The guest's running qemu (from its pid file, checked against its command line)."""
    try:
        pid = int(Path(g["pidfile"]).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if is_our_process(pid, QEMU, g["overlay"]) else None


def starting_pid(g: dict) -> int | None:
    """A qemu the BMC started that has not daemonized yet (None when there is none)."""
    try:
        pid = int(Path(g["pidfile"] + STARTING).read_text())
    except (OSError, ValueError):
        return None
    return pid if is_our_process(pid, QEMU, g["overlay"]) else None


def power_on(g: dict) -> int | None:
    """Start the guest's qemu unless it runs (or is starting), without waiting for it: ipmi_sim
    answers the IPMI request only when this program returns, and qemu daemonizes only once its
    devices are up (seconds; on a loaded machine more than ipmitool's ~13 s, which then reports
    a power-on that happens as failed). A real BMC acknowledges and then acts, as this does;
    the pid file appears when qemu is up, and its log says why when it is not. Returns the
    running qemu's pid, or None while it starts."""
    pid = qemu_pid(g)
    if pid is not None:
        return pid
    if starting_pid(g) is not None:
        return None                 # a power-on before this one is still starting it
    Path(g["pidfile"]).unlink(missing_ok=True)
    with open(g["qemu_log"], "a") as out:
        p = subprocess.Popen(g["qemu_argv"], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True)
    Path(g["pidfile"] + STARTING).write_text(f"{p.pid}\n")
    return None


def power_off(g: dict) -> None:
    """Pulled power, within the IPMI request: ipmi_sim waits for this program before it
    answers, and ipmitool gives up after about 13 s (lanplus retries), reporting a cycle that
    did happen as failed. A guest frozen whole (its qemu SIGSTOPped: the tier's injected hang)
    never acts on SIGTERM, so it is continued first; SIGKILL after OFF_WAIT_S all the same."""
    pid = qemu_pid(g)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
        stop_process(pid, QEMU, g["overlay"], wait=OFF_WAIT_S)


def chassis(gdir: Path, op: str, args: list[str]) -> str:
    """One chassis control as ipmi_sim asks it; returns what to print (errors raise)."""
    g = _guest(gdir)
    if op == "get":
        out = []
        for parm in args:
            if parm == "power":
                out.append(f"power:{0 if qemu_pid(g) is None else 1}")
            elif parm == "boot":
                out.append("boot:default")
            else:
                raise ValueError(f"invalid parameter: {parm}")
        return "\n".join(out)
    if op != "set" or len(args) % 2:
        raise ValueError(f"unsupported operation: {op} {' '.join(args)}")
    for parm, val in zip(args[::2], args[1::2]):
        if parm == "power":
            if val == "1":
                power_on(g)
            else:
                power_off(g)
        elif parm == "reset" and val == "1":
            power_off(g)
            power_on(g)
        elif parm not in ("reset", "boot", "identify"):
            raise ValueError(f"invalid parameter: {parm}")
    return ""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python3 -m bench.lab.twin_bmc GUEST_DIR get|set PARM [VAL] ...")
        return 1
    try:
        out = chassis(Path(argv[0]), argv[1], argv[2:])
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as exc:
        print(str(exc))         # ipmi_sim logs the program's output on failure
        return 1
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
