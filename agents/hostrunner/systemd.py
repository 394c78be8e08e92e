"""The runner on hosts where systemd is PID 1: which path a run takes there, the argv of the
transient units it asks systemd for, and the parsers of what systemd answers.

systemd owns the cgroup tree of the hosts it runs (its "single writer" rule): a process that
writes `+memory` into the root's cgroup.subtree_control or makes /sys/fs/cgroup/bench-<id> by
hand works behind its back. On such hosts the runner asks systemd instead:

* the capacity wall is a transient scope `bench-wall-<run_id>.scope` in `bench.slice`, made by
  `systemd-run --scope -p MemoryMax=<C + headroom> -p MemorySwapMax=0 -p Delegate=yes` around a
  keeper process (`sleep infinity`) that holds it open for the whole run; the scope is
  delegated, so the runner may move the agent into it (between fork and exec, as on the
  cgroupfs path) and read its files, and the warm-up and the measured pass share that one scope
  because the agent is one process. The scope outlives the agent until the runner's `post`
  snapshot, then `systemctl stop` ends it and systemd removes its cgroup.
* the detached runner itself is a transient service `bench-run-<run_id>.service`
  (`systemd-run --unit ... --collect`), so `systemctl status` and the journal show it.

Hosts without systemd as PID 1 (the lab guests, containers) and systemd hosts whose memory
controller is still on cgroup v1 (hybrid: MemoryMax= does not apply there) keep the cgroupfs
path. Every command is an argv list: nothing here goes through a shell."""

from __future__ import annotations

import os
import re
from typing import Any

from .files import read_or_none

RUN_SYSTEMD = "/run/systemd/system"       # exists only when systemd booted the host (sd_booted)
SLICE = "bench.slice"
PATH_SCOPE = "systemd-scope"              # capacity.json "wall", host.json "capacity_path"
PATH_CGROUPFS = "cgroupfs"
DETACH_UNIT = "systemd-unit"              # runner.json "detached_as"
DETACH_FORK = "double-fork"
KEEPER_ARGV = ["sleep", "infinity"]       # coreutils: holds the scope open until stopped
SHOW_PROPS = ("Id", "ActiveState", "SubState", "ControlGroup", "MemoryMax", "MemorySwapMax",
              "Delegate", "Slice", "MainPID")
_UNIT_SAFE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_ENV_NAME = re.compile(r"^BENCH_[A-Z0-9_]{1,64}$")


def detect(run_dir: str = RUN_SYSTEMD, comm_path: str = "/proc/1/comm") -> dict[str, Any]:
    """Whether systemd is PID 1: /run/systemd/system (what sd_booted() checks) or PID 1's comm
    being `systemd`. Both are recorded; either one counts."""
    comm = (read_or_none(comm_path) or "").strip()
    run = os.path.isdir(run_dir)
    return {"pid1_comm": comm, "run_systemd_system": run,
            "systemd": run or comm == "systemd"}


def choose_wall(systemd: bool, backend: str) -> tuple[str, str]:
    """(path, why): the systemd scope where systemd runs and the memory controller is on
    cgroup v2, else cgroupfs by hand."""
    if not systemd:
        return PATH_CGROUPFS, "systemd is not PID 1: the cgroup is made in cgroupfs"
    if backend != "v2":
        return PATH_CGROUPFS, (f"systemd with the memory controller on cgroup {backend} "
                               "(hybrid): MemoryMax= does not apply, the cgroup is made in "
                               "cgroupfs")
    return PATH_SCOPE, "systemd is PID 1 with cgroup v2: the wall is a transient scope"


def _unit_part(run_id: str) -> str:
    """A run id as a unit-name part (run ids are [A-Za-z0-9._-], checked by spec.py); refused
    when it is not, so no argv ever carries a name systemd would escape or reject."""
    if not _UNIT_SAFE.fullmatch(run_id) or run_id.startswith("-"):
        raise ValueError(f"run id {run_id!r} cannot be part of a unit name")
    return run_id


def wall_unit(run_id: str) -> str:
    return f"bench-wall-{_unit_part(run_id)}.scope"


def runner_unit(run_id: str) -> str:
    return f"bench-run-{_unit_part(run_id)}.service"


def wall_argv(run_id: str, limit_bytes: int, keeper: list[str] | None = None) -> list[str]:
    """systemd-run making the wall scope around the keeper: MemoryMax = limit (bytes, exact),
    no swap, delegated to the runner, garbage-collected whatever its end."""
    if limit_bytes <= 0:
        raise ValueError(f"scope limit {limit_bytes} must be positive")
    return ["systemd-run", "--scope", "--quiet", "--collect", f"--unit={wall_unit(run_id)}",
            f"--slice={SLICE}", f"--description=bench capacity wall of run {run_id}",
            "-p", f"MemoryMax={int(limit_bytes)}", "-p", "MemorySwapMax=0",
            "-p", "Delegate=yes", "--", *(keeper or KEEPER_ARGV)]


def runner_argv(run_id: str, python: str, runner_py: str, work_dir: str,
                env: dict[str, str] | None = None) -> list[str]:
    """systemd-run starting the detached runner (`runner.py daemon RUN_ID`) as a transient
    service: its own cgroup, `systemctl status`, the journal. BENCH_* variables of the caller's
    environment are passed on (--setenv), nothing else of it."""
    argv = ["systemd-run", "--quiet", "--collect", f"--unit={runner_unit(run_id)}",
            f"--description=bench runner of run {run_id}", "-p", "Type=exec",
            "-p", "KillMode=mixed", "-p", "TimeoutStopSec=90"]
    env = env or {}
    for k in sorted(env):
        if _ENV_NAME.fullmatch(k) and "\n" not in env[k]:
            argv.append(f"--setenv={k}={env[k]}")
    return argv + ["--", python, runner_py, "daemon", run_id, "--work-dir", work_dir]


def show_argv(unit: str, props: tuple[str, ...] = SHOW_PROPS) -> list[str]:
    return ["systemctl", "show", "--property=" + ",".join(props), "--", unit]


def stop_argv(unit: str) -> list[str]:
    return ["systemctl", "stop", "--", unit]


def parse_show(text: str, limit: int = 64 * 1024) -> dict[str, str]:
    """`systemctl show` output (KEY=VALUE lines) -> dict; the first value of a key wins, lines
    without '=' are ignored, the text is bounded."""
    out: dict[str, str] = {}
    for line in text[:limit].splitlines():
        key, eq, value = line.partition("=")
        if eq and key and key not in out:
            out[key] = value
    return out


def show_limit(value: str | None) -> int | None:
    """A MemoryMax/MemorySwapMax value of `systemctl show`: bytes, or None for `infinity`,
    empty or unreadable."""
    try:
        return int((value or "").strip())
    except ValueError:
        return None


def scope_path(show: dict[str, str], mount: str) -> str | None:
    """The scope's cgroup directory: the cgroup2 mount plus its ControlGroup (absolute, no
    `..`); None while systemd has not made it."""
    cg = show.get("ControlGroup", "")
    if not cg.startswith("/") or ".." in cg.split("/") or cg == "/":
        return None
    return os.path.join(mount, cg.lstrip("/"))


def cgroup_line_in(lines: list[str], rel: str) -> bool:
    """Whether /proc/PID/cgroup lines put the process in `rel` (a path below the mount, with a
    leading slash): the v2 line `0::REL`, or a v1 line of the memory hierarchy."""
    for ln in lines:
        parts = ln.split(":", 2)
        if len(parts) == 3 and parts[2] == rel and (
                parts[0] == "0" and parts[1] == "" or "memory" in parts[1].split(",")):
            return True
    return False
