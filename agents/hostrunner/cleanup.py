"""What a run leaves behind, and how a later run removes it: the active record
(<work_dir>/active/<run_id>.json: the PIDs and cgroups a run created, removed after its
teardown) and the cleanup that acts only on what such records name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any

from .files import (proc_starttime, proc_status, read_or_none, read_text, strip_deleted,
                    write_json)
from .probes import cgroup_backend
from .systemd import stop_argv


class Active:
    """<work_dir>/active/<run_id>.json: what this run created, for a later run's cleanup."""

    def __init__(self, work_dir: str, run_id: str) -> None:
        self.path = os.path.join(work_dir, "active", f"{run_id}.json")
        self.data: dict[str, Any] = {"run_id": run_id, "runner_pid": os.getpid(), "pids": [],
                                     "cgroups": []}

    def save(self) -> None:
        write_json(self.path, self.data)

    def add_pid(self, role: str, pid: int, **extra: Any) -> None:
        """Record a child; extra (an engine's exe and argv) lets cleanup recognise it."""
        self.data["pids"].append({"role": role, "pid": pid, **extra,
                                  "starttime": proc_starttime(pid)})
        self.save()

    def add_cgroup(self, path: str) -> None:
        self.data["cgroups"].append(path)
        self.save()

    def add_unit(self, unit: str) -> None:
        """A transient systemd unit (the wall scope): a later cleanup stops it."""
        self.data.setdefault("units", []).append(unit)
        self.save()

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def is_our_agent(pid: int, starttime: int | None) -> bool:
    if starttime is None or proc_starttime(pid) != starttime:
        return False
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.basename(strip_deleted(exe)) == "bench-agent"


def is_our_engine(p: dict[str, Any]) -> bool:
    """A recorded engine process: the same start time, and the same executable or (a script
    run by its interpreter) a command line ending in the recorded argv."""
    if p.get("role") != "engine" or not p.get("exe") or p.get("starttime") is None \
            or proc_starttime(p["pid"]) != p["starttime"]:
        return False
    try:
        exe = strip_deleted(os.readlink(f"/proc/{p['pid']}/exe"))
        with open(f"/proc/{p['pid']}/cmdline", "rb") as f:
            cmd = f.read().decode("utf-8", "replace").split("\0")[:-1]
    except OSError:
        return False
    argv = p.get("argv") or []
    script = bool(argv) and len(cmd) >= len(argv) and cmd[len(cmd) - len(argv) + 1:] == argv[1:] \
        and os.path.basename(cmd[len(cmd) - len(argv)]) == os.path.basename(argv[0])
    return os.path.realpath(p["exe"]) == exe or script


def kill_and_wait(pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after timeout; True when the process is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.waitpid(pid, os.WNOHANG)  # reap if it is our child
            except ChildProcessError:
                pass
            st = proc_status(pid)
            if st is None or st.get("State", "").startswith("Z"):
                return True
            time.sleep(0.05)
    return False


def _is_zombie(pid: int) -> bool:
    return (proc_status(pid) or {"State": "Z"}).get("State", "").startswith("Z")


def cgroup_tasks(path: str, wait: float = 0.0) -> list[int]:
    """Live tasks of a cgroup (zombies not yet reaped by their new parent are not counted);
    with wait, keep looking that long for them to go."""
    end = time.monotonic() + wait
    while True:
        text = read_or_none(os.path.join(path, "cgroup.procs")) or ""
        live = [int(x) for x in text.split() if not _is_zombie(int(x))]
        if not live or time.monotonic() >= end:
            return live
        time.sleep(0.1)


def remove_cgroup(path: str, timeout: float = 10.0) -> str | None:
    """rmdir once its tasks are gone; None on success, else why not."""
    end = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return None
        except FileNotFoundError:
            return None
        except OSError as e:
            if time.monotonic() > end:
                return f"rmdir {path}: {e.strerror}; tasks {cgroup_tasks(path)}"
            time.sleep(0.1)


def new_report() -> dict[str, list[Any]]:
    return {"records": [], "killed": [], "cgroups_removed": [], "problems": [],
            "foreign_cgroups": []}


def _stop_recorded(p: dict[str, Any], report: dict[str, list[Any]]) -> bool:
    """Stop one recorded process if it is still ours; False when it would not go."""
    engine = is_our_engine(p)
    if engine:
        try:
            os.killpg(p["pid"], signal.SIGTERM)     # the engine leads its own session
        except OSError:
            pass
    if engine or is_our_agent(p["pid"], p.get("starttime")):
        gone = kill_and_wait(p["pid"], 30.0)
        report["killed"].append({**p, "gone": gone})
        if not gone:
            report["problems"].append(f"pid {p['pid']} ({p['role']}) did not exit")
            return False
    return True


def _remove_recorded(cg: str, report: dict[str, list[Any]]) -> bool:
    """Remove one recorded cgroup once it has no tasks; False when it stays."""
    if not os.path.isdir(cg):
        return True
    left = cgroup_tasks(cg, wait=5.0)
    if left:
        report["problems"].append(f"cgroup {cg} still has tasks {left} not started by bench")
        return False
    why = remove_cgroup(cg)
    if why:
        report["problems"].append(why)
        return False
    report["cgroups_removed"].append(cg)
    return True


def _stop_unit(unit: str, report: dict[str, list[Any]]) -> None:
    """`systemctl stop` a recorded wall scope (whether it is gone is decided by its cgroup,
    recorded too: systemd removes it once the scope stops)."""
    try:
        r = subprocess.run(stop_argv(unit), stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=60, close_fds=True)
        report.setdefault("units_stopped", []).append({"unit": unit, "rc": r.returncode})
    except (OSError, subprocess.SubprocessError) as e:
        report["problems"].append(f"systemctl stop {unit}: {e}")


def clean_record(path: str, report: dict[str, list[Any]],
                 recorded: set[str] | None = None) -> bool:
    """Stop the processes and remove the cgroups one active record names; the record is
    deleted when nothing of it is left. True when clean."""
    try:
        rec = json.loads(read_text(path))
    except FileNotFoundError:
        return True
    except (OSError, ValueError) as e:
        report["problems"].append(f"{os.path.basename(path)}: unreadable ({e})")
        return False
    report["records"].append(rec.get("run_id"))
    ok = True
    for p in rec.get("pids", []):
        ok = _stop_recorded(p, report) and ok
    for unit in rec.get("units", []):
        _stop_unit(str(unit), report)
    for cg in rec.get("cgroups", []):
        if recorded is not None:
            recorded.add(os.path.normpath(cg))
        ok = _remove_recorded(cg, report) and ok
    if ok:
        os.unlink(path)
    return ok


def cleanup_leftovers(work_dir: str, own_run: str) -> dict[str, list[Any]]:
    """Stop what earlier runs of this tool left behind. Only processes recorded in an active
    record, still the same process (start time) and a bench-agent, are killed; only cgroups
    recorded there are removed. Unrecorded bench-* cgroups are reported, not touched."""
    report = new_report()
    adir = os.path.join(work_dir, "active")
    recorded: set[str] = set()
    for fn in sorted(os.listdir(adir)):
        if fn.endswith(".json") and fn != f"{own_run}.json":
            clean_record(os.path.join(adir, fn), report, recorded)
    _backend, mp = cgroup_backend()
    if mp:
        for n in sorted(os.listdir(mp)):
            p = os.path.join(mp, n)
            if n.startswith("bench-") and os.path.isdir(p) and p not in recorded:
                report["foreign_cgroups"].append(p)
    return report
