"""The memory capacity of a cell (capacity.json): a memory cgroup wall (on hosts where systemd
is PID 1 with cgroup v2, a transient scope systemd makes, hostrunner.systemd; elsewhere made
directly in cgroupfs, v2 or v1, probed; capacity.json's `wall` says which), a balloon (the
agent's `balloon` subcommand locking memory away), or a check that the host booted with the
expected mem=. Each fills the `cap` record it is given and raises RunFailed with the reason
when the capacity cannot be applied."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Any, Callable

from .cleanup import Active
from .errors import RunFailed
from .files import (exit_fields, meminfo, proc_status, read_or_none, read_text, status_bytes,
                    write_file)
from .probes import cgroup_backend
from .spec import parse_kernel_size
from .systemd import (PATH_SCOPE, SHOW_PROPS, SLICE, cgroup_line_in, choose_wall, detect,
                      parse_show, scope_path, show_argv, show_limit, stop_argv, wall_argv,
                      wall_unit)

BALLOON_STALL_S = 60        # a balloon whose RSS has not grown for this long has failed
SCOPE_START_S = 30.0        # systemd-run has this long to make the wall scope
SYSTEMCTL_S = 60.0          # one systemctl call


# ----------------------------------------------------------------------------- the wall

def create_wall(cap: dict[str, Any], run_id: str, headroom: int, active: Active,
                bundle: str) -> tuple[dict[str, str], subprocess.Popen[bytes] | None]:
    """The cgroup wall by the path this host takes (hostrunner.systemd.choose_wall): a
    systemd scope held by a keeper process (returned), or a cgroup made in cgroupfs (keeper
    None). Returns ({"backend", "path", "mount"[, "unit"]}, keeper)."""
    backend, mp = cgroup_backend()
    sd = detect()
    wall, why = choose_wall(bool(sd["systemd"]), backend)
    cap.update(wall=wall, wall_reason=why, systemd_detect=sd)
    if wall == PATH_SCOPE and mp is not None:
        return create_scope(cap, run_id, headroom, active, bundle, mp)
    cg = create_cgroup(cap, run_id, headroom, active)
    return dict(cg, mount=os.path.dirname(cg["path"])), None


def _run_systemctl(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=SYSTEMCTL_S, close_fds=True)
    except (OSError, subprocess.SubprocessError) as e:
        raise RunFailed(f"{argv[0]} {argv[1]}: {e}") from None


def create_scope(cap: dict[str, Any], run_id: str, headroom: int, active: Active,
                 bundle: str, mount: str) -> tuple[dict[str, str], subprocess.Popen[bytes]]:
    """`systemd-run --scope` around a keeper (hostrunner.systemd.wall_argv), recorded in the
    active record first; waits until systemd shows the scope active, then checks the keeper
    sits in its cgroup."""
    limit = cap["capacity_bytes"] + headroom
    unit = wall_unit(run_id)
    argv = wall_argv(run_id, limit)
    cap.update(backend="v2", headroom_bytes=headroom, limit_bytes=limit, unit=unit,
               slice=SLICE, wall_argv=argv)
    active.add_unit(unit)
    errf = os.path.join(bundle, "wall.log")
    with open(errf, "ab") as err:
        try:
            keeper = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                      close_fds=True)
        except OSError as e:
            raise RunFailed(f"cannot run systemd-run for the wall scope: {e}") from None
    cap["keeper_pid"] = keeper.pid
    try:
        return _check_scope(cap, unit, keeper, errf, mount, active)
    except RunFailed:
        _run_systemctl(stop_argv(unit))
        if keeper.poll() is None:
            keeper.kill()
        keeper.wait()
        raise


def _check_scope(cap: dict[str, Any], unit: str, keeper: subprocess.Popen[bytes], errf: str,
                 mount: str, active: Active) -> tuple[dict[str, str], subprocess.Popen[bytes]]:
    limit = cap["limit_bytes"]
    show = _await_scope(unit, keeper, errf)
    path = scope_path(show, mount)
    cap["systemd"] = {k: show.get(k) for k in SHOW_PROPS}
    if path is None:
        raise RunFailed(f"{unit}: systemd shows no cgroup for it "
                        f"(ControlGroup={show.get('ControlGroup')!r})")
    cap["path"] = path
    active.add_cgroup(path)
    rel = "/" + os.path.relpath(path, mount)
    if not cgroup_line_in((read_or_none(f"/proc/{keeper.pid}/cgroup") or "").splitlines(), rel):
        raise RunFailed(f"{unit}: its keeper (pid {keeper.pid}) is not in {path}")
    if show_limit(show.get("MemoryMax")) != limit:
        raise RunFailed(f"{unit}: systemd shows MemoryMax={show.get('MemoryMax')}, not the "
                        f"{limit} asked")
    return {"backend": "v2", "path": path, "mount": mount, "unit": unit}, keeper


def _await_scope(unit: str, keeper: subprocess.Popen[bytes], errf: str) -> dict[str, str]:
    """systemctl show of the scope once it is active with a cgroup; RunFailed when systemd-run
    ends first (its own words from wall.log) or SCOPE_START_S passes."""
    end = time.monotonic() + SCOPE_START_S
    show: dict[str, str] = {}
    while True:
        r = _run_systemctl(show_argv(unit))
        show = parse_show(r.stdout)
        if r.returncode == 0 and show.get("ActiveState") == "active" \
                and show.get("ControlGroup"):
            return show
        if keeper.poll() is not None:
            said = (read_or_none(errf) or "").strip().splitlines()[-1:]
            raise RunFailed(f"systemd-run could not make {unit} (exit {keeper.returncode}): "
                            f"{said[0] if said else 'no message'}")
        if time.monotonic() > end:
            raise RunFailed(f"{unit} not active after {SCOPE_START_S:.0f} s "
                            f"(ActiveState={show.get('ActiveState')!r})")
        time.sleep(0.05)


def stop_scope(cg: dict[str, str], keeper: subprocess.Popen[bytes],
               timeout: float = 30.0) -> list[str]:
    """`systemctl stop` the wall scope (its keeper and anything left in it), reap the keeper,
    and wait for systemd to remove the cgroup. Returns teardown notes (empty = clean)."""
    notes: list[str] = []
    r = _run_systemctl(stop_argv(cg["unit"]))
    try:
        keeper.wait(timeout)
    except subprocess.TimeoutExpired:
        notes.append(f"{cg['unit']}: keeper {keeper.pid} still there after systemctl stop: "
                     "killed")
        keeper.kill()
        keeper.wait()
    end = time.monotonic() + timeout
    while os.path.isdir(cg["path"]):
        if time.monotonic() > end:
            notes.append(f"{cg['unit']}: cgroup {cg['path']} still there after systemctl stop "
                         f"(rc {r.returncode}: {r.stderr.strip()[-200:]})")
            break
        time.sleep(0.1)
    return notes


# ----------------------------------------------------------------------------- cgroup

def create_cgroup(cap: dict[str, Any], run_id: str, headroom: int,
                  active: Active) -> dict[str, str]:
    """mkdir <mount>/bench-<run_id> (recorded in the active record first); returns
    {"backend", "path"}. On cgroup v2 the parent's subtree_control gets +memory if needed."""
    backend, mp = cgroup_backend()
    limit = cap["capacity_bytes"] + headroom
    cap.update(backend=backend, headroom_bytes=headroom, limit_bytes=limit)
    if backend == "none" or mp is None:
        raise RunFailed("no memory cgroup controller on this host "
                        "(neither cgroup2 nor v1 memory)")
    path = os.path.join(mp, f"bench-{run_id}")
    cap["path"] = path
    if backend == "v2":
        sub = os.path.join(mp, "cgroup.subtree_control")
        if "memory" not in read_text(sub).split():
            write_file(sub, "+memory\n")
            cap["enabled_memory_in_parent"] = True
    active.add_cgroup(path)
    os.mkdir(path)
    return {"backend": backend, "path": path}


def limit_cgroup(cap: dict[str, Any], cg: dict[str, str]) -> None:
    """Write the limit (capacity + headroom) and no swap (a systemd scope has them from
    systemd: only read back there); read both back into cap."""
    path, limit = cg["path"], cap["limit_bytes"]
    try:
        if cg["backend"] == "v2":
            _limit_v2(cap, path, limit, write="unit" not in cg)
        else:
            _limit_v1(cap, path, limit)
    except OSError as e:
        raise RunFailed(f"cgroup {path}: cannot set the limit: {e.strerror}") from None
    cap["swap_total_bytes"] = meminfo().get("SwapTotal")
    # the kernel keeps the limit in pages: it reads back rounded to a page (down on current
    # kernels, up on old v1 ones), and a decimal capacity is rarely a whole number of pages
    page = os.sysconf("SC_PAGE_SIZE")
    if not (limit - page < cap["limit_read_back"] < limit + page):
        raise RunFailed(f"cgroup limit read back {cap['limit_read_back']} is not the "
                        f"{limit} written")


def _limit_v2(cap: dict[str, Any], path: str, limit: int, write: bool = True) -> None:
    if write:
        write_file(os.path.join(path, "memory.max"), f"{limit}\n")
    cap["limit_read_back"] = int(read_text(os.path.join(path, "memory.max")).replace(
        "max", "-1"))
    swap = os.path.join(path, "memory.swap.max")
    if os.path.exists(swap):
        if write:
            write_file(swap, "0\n")
        cap["swap_limit_read_back"] = int(read_text(swap).replace("max", "-1"))
    else:
        cap["swap_limit_read_back"] = None
        cap["swap_note"] = "memory.swap.max absent (swap accounting off): swap not limited"


def _limit_v1(cap: dict[str, Any], path: str, limit: int) -> None:
    write_file(os.path.join(path, "memory.limit_in_bytes"), f"{limit}\n")
    cap["limit_read_back"] = int(read_text(os.path.join(path, "memory.limit_in_bytes")))
    memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
    if os.path.exists(memsw):
        write_file(memsw, f"{limit}\n")
        cap["swap_limit_read_back"] = int(read_text(memsw)) - cap["limit_read_back"]
        cap["memsw_limit_read_back"] = int(read_text(memsw))
    else:
        cap["swap_limit_read_back"] = None
        cap["swap_note"] = ("memory.memsw.limit_in_bytes absent (swapaccount off): "
                            "swap not limited")


# ----------------------------------------------------------------------------- balloon

def launch_balloon(cap: dict[str, Any], agent: str, bundle: str, max_bytes: int | None,
                   active: Active) -> subprocess.Popen[bytes]:
    """Start `bench-agent balloon` for MemAvailable - capacity bytes (output to
    balloon.jsonl) and record it; wait_balloon_ready then waits for its ready line."""
    avail = meminfo()["MemAvailable"]
    nbytes = avail - cap["capacity_bytes"]
    cap.update(mem_available_before=avail, requested_bytes=nbytes)
    if nbytes <= 0:
        raise RunFailed(f"MemAvailable {avail} is already at or below the capacity "
                        f"{cap['capacity_bytes']}: no balloon can make room smaller")
    if max_bytes is not None and nbytes > max_bytes:
        raise RunFailed(f"balloon of {nbytes} bytes is above the spec's balloon_max_bytes "
                        f"{max_bytes}")
    ready = os.path.join(bundle, ".balloon-ready")
    with open(os.path.join(bundle, "balloon.jsonl"), "ab") as out:
        balloon = subprocess.Popen([agent, "balloon", "--bytes", str(nbytes),
                                    "--ready-file", ready], stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=out, close_fds=True)
    active.add_pid("balloon", balloon.pid)
    cap["pid"] = balloon.pid
    return balloon


def wait_balloon_ready(balloon: subprocess.Popen[bytes], cap: dict[str, Any], bundle: str,
                       check_stop: Callable[[], None]) -> None:
    """Wait for the ready line and check the balloon's VmLck covers what was asked.

    First touch runs at ~2 s/GiB on a quiet host, far slower where reclaim must first free
    the room or the CPU is emulated: wait while the balloon's RSS still grows, give up after
    BALLOON_STALL_S without progress (or at a generous overall bound)."""
    nbytes = cap["requested_bytes"]
    ready = os.path.join(bundle, ".balloon-ready")
    t0 = time.monotonic()
    limit = t0 + 120 + 120 * nbytes / (1 << 30)
    stall, last_rss = t0 + BALLOON_STALL_S, -1
    while True:
        text = read_or_none(ready)
        if text:
            line = json.loads(text)
            break
        if balloon.poll() is not None:
            text = read_or_none(ready) or read_or_none(os.path.join(bundle, "balloon.jsonl")) \
                or ""
            raise RunFailed(f"balloon exited ({balloon.returncode}) before ready: "
                            f"{text.strip().splitlines()[-1:] or ''}")
        now = time.monotonic()
        rss = status_bytes(proc_status(balloon.pid), "VmRSS") or 0
        if rss > last_rss:
            last_rss, stall = rss, now + BALLOON_STALL_S
        if now > stall or now > limit:
            raise RunFailed(f"balloon not ready after {now - t0:.0f} s: RSS {last_rss} of "
                            f"{nbytes} bytes" + (f", no progress for {BALLOON_STALL_S} s"
                                                 if now > stall else ""))
        check_stop()
        time.sleep(0.05)
    os.unlink(ready)
    cap["ready"] = line
    if not line.get("ready"):
        raise RunFailed(f"balloon failed: {line.get('reason')}")
    cap["vmlck_bytes"] = status_bytes(proc_status(balloon.pid), "VmLck")
    if cap["vmlck_bytes"] is None or cap["vmlck_bytes"] < nbytes:
        raise RunFailed(f"balloon VmLck {cap['vmlck_bytes']} is below the {nbytes} requested")
    cap["vmlck_verified"] = True


def release_balloon(balloon: subprocess.Popen[bytes], info: dict[str, Any],
                    requested_bytes: int) -> list[str]:
    """SIGTERM (the balloon releases its memory and says so), SIGKILL when it ignores that;
    its exit goes into info (balloon.json). Returns teardown notes."""
    notes = []
    if balloon.poll() is None:
        balloon.send_signal(signal.SIGTERM)
        try:
            balloon.wait(30 + 4 * requested_bytes / (1 << 30))
        except subprocess.TimeoutExpired:
            notes.append("balloon ignored SIGTERM: killed")
            balloon.kill()
            balloon.wait()
    else:
        info["exited_before_teardown"] = True
    info["exit_code"], info["signal"] = exit_fields(balloon.returncode)
    return notes


# ----------------------------------------------------------------------------- memboot

def check_memboot(cap: dict[str, Any], want: str) -> None:
    """The host booted with mem=<want> and MemTotal shows it took effect. Both values are
    kernel text (memparse: K/M/G/T binary; bench writes exact bytes), compared as bytes."""
    from_cmd = None
    for a in (read_or_none("/proc/cmdline") or "").split():
        if a.startswith("mem="):
            from_cmd = a[4:]
    mt = meminfo()["MemTotal"]
    cap.update(mem_total_bytes=mt, mem_in_cmdline=from_cmd, expected_mem=want)
    if from_cmd is None:
        raise RunFailed(f"memboot cell but no mem= on the kernel command line "
                        f"(expected mem={want})")
    want_bytes = parse_kernel_size(want)
    if parse_kernel_size(from_cmd) != want_bytes:
        raise RunFailed(f"booted with mem={from_cmd}, the cell expects mem={want}")
    if want_bytes is not None and mt > want_bytes:
        raise RunFailed(f"MemTotal {mt} is above mem={want}: the limit did not take effect")
