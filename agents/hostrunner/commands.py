"""The runner's command line: start (validate, detach, re-attach), status, wait, stop, and the
pool writer; plus settling a run whose runner died.

Detaching: `start` validates the spec, then under start.lock takes the run lock and creates the
bundle (0700: private to the runner's user, bundle.py) holding spec.json and status `accepted`
at once (staged in <work_dir>/starting and renamed into place: a start that fails, on a full
disk say, leaves nothing behind and the same run id can start later),
double-forks (setsid in between; umask 077; stdio of the daemon goes to runner.log in the
bundle, stdin /dev/null, SIGHUP ignored) and returns at once. The daemon inherits the
run-lock descriptor, so the run is locked from before the fork until the daemon exits.
Where systemd is PID 1 the daemon is a transient service instead (`systemd-run --unit
bench-run-<id>`, hostrunner.systemd): it runs `runner.py daemon RUN_ID`, takes the run lock
itself and echoes its phases to the journal; `start` keeps start.lock until the daemon holds
the run lock (nobody can take the run for an orphan in between), and the daemon runs only a
run still `accepted`. A
second `start` of the same run id never runs it again: if the lock is held it reports the
live runner, else it reports the final status; a run whose runner died without finishing is
marked failed (with a manifest) by whoever notices it first."""

from __future__ import annotations

import argparse
import errno
import json
import os
import fcntl
import shutil
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from . import poolfmt
from .bundle import accepted_status, bundle_dir, load_status, status_path, write_manifest
from .cleanup import clean_record, new_report
from .errors import SpecError
from .files import (PRIVATE_FILE, clear_staging, create_dir_atomic, now_iso, read_or_none,
                    read_text, write_json)
from .locks import lock_path, start_lock, try_lock
from .waitlock import wait_unlocked
from .progress_file import read_progress
from .spec import valid_run_id, validate_spec
from .systemd import DETACH_FORK, DETACH_UNIT, detect, runner_argv, runner_unit

DESCRIPTION = ("bench host-side cell runner: one measurement cell on this host "
               "(Algorithm 1 of docs/design.md).")
TERMINAL = ("done", "failed")
UNIT_START_S = 60.0         # a runner unit has this long to take its run lock
NO_UNIT_ENV = "BENCH_RUNNER_NO_UNIT"   # set (non-empty): double-fork even under systemd
RUNNER_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                         "runner.py")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
WAIT_SLICE_S = 60.0     # a blocked wait looks again at least this often
STAGING = "starting"        # under work_dir: runs being created (create_dir_atomic)


def out(obj: dict[str, Any], rc: int = EXIT_OK) -> int:
    print(json.dumps(obj), flush=True)
    return rc


# ----------------------------------------------------------------------------- orphans

def settle_orphan(work_dir: str, run_id: str) -> dict[str, Any]:
    """If nobody holds the run's lock but its status is not final, the runner died: mark the
    run failed and write its manifest so it can be ingested. Returns the status."""
    start_fd = start_lock(work_dir)  # start() may be between mkdir and taking the run lock
    try:
        return _settle(work_dir, run_id, bundle_dir(work_dir, run_id))
    finally:
        os.close(start_fd)


def _settle(work_dir: str, run_id: str, bundle: str) -> dict[str, Any]:
    os.makedirs(os.path.dirname(lock_path(work_dir, run_id)), exist_ok=True)
    fd = try_lock(lock_path(work_dir, run_id))
    if fd is None:
        st = load_status(work_dir, run_id)
        st["live"] = True
        st["progress"] = read_progress(work_dir, run_id)
        return st
    try:
        st = load_status(work_dir, run_id)
        if st.get("phase") not in TERMINAL:
            _fail_orphan(work_dir, run_id, bundle, st)
        elif not os.path.exists(os.path.join(bundle, "manifest.json")):
            write_manifest(bundle, run_id)
    finally:
        os.close(fd)
    st["live"] = False
    return st


def _fail_orphan(work_dir: str, run_id: str, bundle: str, st: dict[str, Any],
                 why: str | None = None) -> None:
    """What the dead runner left running would keep writing into the bundle: stop the
    agent/balloon/engine it recorded (verified processes), remove its cgroup, seal it. `why`
    replaces the reason for a run that never got a runner."""
    rep = new_report()
    clean_record(os.path.join(work_dir, "active", f"{run_id}.json"), rep)
    reason = why or (
        f"runner (pid {st.get('pid')}) died in phase {st.get('phase')} without "
        f"finishing; orphan cleanup: killed {len(rep['killed'])} process(es), "
        f"removed {len(rep['cgroups_removed'])} cgroup(s)"
        + (f", problems: {'; '.join(rep['problems'])}" if rep["problems"] else ""))
    t = now_iso()
    st.update(phase="failed", ok=False, reason=reason, updated=t)
    st["history"].append({"phase": "failed", "t": t, "mono_ns": time.monotonic_ns(),
                          "reason": reason})
    write_json(os.path.join(bundle, "status.json"), st)
    write_manifest(bundle, run_id)


# ----------------------------------------------------------------------------- start

def cmd_start(a: argparse.Namespace) -> int:
    work_dir = os.path.abspath(a.work_dir)
    try:
        raw = read_text(a.spec)
        spec = json.loads(raw)
    except (OSError, ValueError) as e:
        return out({"ok": False, "reason": f"cannot read spec {a.spec}: {e}"}, EXIT_USAGE)
    rid = spec.get("run_id") if isinstance(spec, dict) else None
    # re-attach first: an existing run is reported, never validated or run again
    if isinstance(rid, str) and valid_run_id(rid) and os.path.exists(status_path(work_dir, rid)):
        return reattach(work_dir, rid, spec)
    try:
        cfg = validate_spec(spec, work_dir)
    except SpecError as e:
        return out({"ok": False, "run_id": rid, "reason": f"bad spec: {e}"}, EXIT_USAGE)
    rid = cfg["run_id"]
    bundle = bundle_dir(work_dir, rid)
    try:
        for d in ("runs", "locks", "active"):
            os.makedirs(os.path.join(work_dir, d), exist_ok=True)
        start_fd = start_lock(work_dir)
    except OSError as e:
        return _cannot_start(rid, bundle, e)
    run_fd: int | None = None
    try:
        run_fd = None if os.path.exists(status_path(work_dir, rid)) else \
            try_lock(lock_path(work_dir, rid))
        if run_fd is None:          # another start made it first: report that run
            os.close(start_fd)
            return reattach(work_dir, rid, spec)
        if os.path.isdir(bundle):   # an older runner's failed start: never ran (no status)
            shutil.rmtree(bundle)
        # the bundle appears whole (spec.json byte for byte what was sent, status accepted)
        # or not at all: a full disk leaves nothing, and the same run id starts later
        clear_staging(os.path.join(work_dir, STAGING))
        create_dir_atomic(bundle, os.path.join(work_dir, STAGING), {
            "spec.json": raw, "status.json": json.dumps(accepted_status(rid), indent=1) + "\n"})
    except OSError as e:
        if run_fd is not None:      # the run lock file goes too: nothing is left behind
            _unlink_quietly(lock_path(work_dir, rid))
            os.close(run_fd)
        os.close(start_fd)
        return _cannot_start(rid, bundle, e)
    if detect()["systemd"] and not os.environ.get(NO_UNIT_ENV):
        return start_unit(work_dir, bundle, rid, run_fd, start_fd)
    pid = detach(work_dir, bundle, spec, cfg, run_fd, start_fd)
    os.close(start_fd)
    return out({"ok": True, "state": "started", "run_id": rid, "pid": pid, "bundle": bundle,
                "detached_as": DETACH_FORK})


def start_unit(work_dir: str, bundle: str, rid: str, run_fd: int, start_fd: int) -> int:
    """The daemon as a transient service; holds start.lock until it has the run lock (its pid
    in status.json). A unit that cannot start leaves the run failed, with the reason."""
    unit = runner_unit(rid)
    argv = runner_argv(rid, sys.executable, RUNNER_PY, work_dir, dict(os.environ))
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=UNIT_START_S, close_fds=True)
        why = None if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as e:
        why = str(e)
    os.close(run_fd)                # the daemon's to take now
    try:
        st = _await_daemon(work_dir, rid) if why is None else None
        lock = try_lock(lock_path(work_dir, rid)) if st is None else None
        if st is None and lock is None:         # it took the lock just now: it runs
            st = load_status(work_dir, rid)
        elif lock is not None:                 # st is None: nobody took it
            try:
                st = load_status(work_dir, rid)
                why = why or f"the unit did not take its run lock in {UNIT_START_S:.0f} s"
                if st.get("phase") == "accepted":
                    _fail_orphan(work_dir, rid, bundle, st, f"cannot start {unit}: {why}")
            finally:
                os.close(lock)
            return out({"ok": False, "run_id": rid, "unit": unit, "bundle": bundle,
                        "reason": f"cannot start {unit}: {why}"}, EXIT_FAILED)
    finally:
        os.close(start_fd)
    return out({"ok": True, "state": "started", "run_id": rid, "pid": (st or {}).get("pid"),
                "bundle": bundle, "detached_as": DETACH_UNIT, "unit": unit})


def _await_daemon(work_dir: str, rid: str) -> dict[str, Any] | None:
    end = time.monotonic() + UNIT_START_S
    while time.monotonic() < end:
        st = load_status(work_dir, rid)
        if st.get("pid") or st.get("phase") != "accepted":
            return st
        time.sleep(0.05)
    return None


def cmd_daemon(a: argparse.Namespace) -> int:
    """`runner.py daemon RUN_ID`: the runner unit's main process. Takes the run lock (start
    releases it to us), runs the run if it is still `accepted`."""
    work_dir = os.path.abspath(a.work_dir)
    bundle = bundle_dir(work_dir, a.run_id)
    fd = os.open(lock_path(work_dir, a.run_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    st = load_status(work_dir, a.run_id)
    if st.get("phase") != "accepted":
        return out({"ok": False, "run_id": a.run_id,
                    "reason": f"run is {st.get('phase')}, not accepted: not run"}, EXIT_FAILED)
    spec = json.loads(read_text(os.path.join(bundle, "spec.json")))
    try:
        cfg = validate_spec(spec, work_dir)
    except SpecError as e:
        _fail_orphan(work_dir, a.run_id, bundle, st, f"bad spec: {e}")
        return out({"ok": False, "run_id": a.run_id, "reason": f"bad spec: {e}"}, EXIT_USAGE)
    daemon(work_dir, bundle, spec, cfg, fd, None, echo=os.dup(1))
    return EXIT_OK


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _cannot_start(rid: str, bundle: str, e: OSError) -> int:
    """A start that could not create its run (a full disk, most often): nothing was left
    behind, so the same run id can start once the cause is gone."""
    code = errno.errorcode.get(e.errno or 0, "")
    full = e.errno in (errno.ENOSPC, errno.EDQUOT)
    return out({"ok": False, "run_id": rid, "errno": code, "disk_full": full,
                "reason": f"cannot create the run {bundle}: {e.filename or '?'}: "
                f"{e.strerror or e}"
                + ("" if full else f" ({code})"),
                "hint": ("free space on the host's file system holding the work dir (df -h), "
                         "then start the same run again: nothing of it was left behind")
                if full else "nothing of the run was left behind; fix the cause and start "
                "it again"}, EXIT_FAILED)


def detach(work_dir: str, bundle: str, spec: dict[str, Any], cfg: dict[str, Any],
           run_fd: int, start_fd: int) -> int:
    """Double-fork the daemon (setsid in between); returns its pid, reported through a pipe.
    The run lock's descriptor goes with the daemon and is closed here."""
    rpipe, wpipe = os.pipe()
    pid = os.fork()
    if pid == 0:  # first child
        try:
            os.close(rpipe)
            os.close(start_fd)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            daemon(work_dir, bundle, spec, cfg, run_fd, wpipe)
        finally:
            os._exit(1)
    os.close(wpipe)
    os.close(run_fd)
    os.waitpid(pid, 0)
    data = b""
    while True:
        chunk = os.read(rpipe, 64)
        if not chunk:
            break
        data += chunk
    os.close(rpipe)
    return int(data or 0)


def daemon(work_dir: str, bundle: str, spec: dict[str, Any], cfg: dict[str, Any],
           run_fd: int, wpipe: int | None, echo: int | None = None) -> None:
    """The detached runner: stdio to runner.log, SIGTERM/SIGINT = stop request; runs the
    steps and exits, releasing the run lock. wpipe: where the forking start reads our pid;
    echo: a descriptor (the unit's journal) that gets the phase lines too."""
    os.chdir("/")
    os.umask(0o077)         # what the runner, the agent and the balloon create: private
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(os.path.join(bundle, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                  PRIVATE_FILE)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    from .run import Run     # here: status and wait (a call per run) need none of it
    run = Run(work_dir, bundle, spec, cfg)
    run.runner["detached_as"] = DETACH_FORK if echo is None else DETACH_UNIT
    if echo is not None:
        run.runner["unit"] = runner_unit(run.run_id)
        run.echo = os.fdopen(echo, "w", buffering=1)

    def on_term(signum: int, frame: FrameType | None) -> None:
        run.stop_requested = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    if wpipe is not None:
        os.write(wpipe, str(os.getpid()).encode())
        os.close(wpipe)
    run.status.update(pid=os.getpid(), updated=now_iso())
    write_json(os.path.join(bundle, "status.json"), run.status)
    try:
        run.execute()
    finally:
        os.close(run_fd)
        os._exit(0)


def reattach(work_dir: str, rid: str, spec: Any) -> int:
    st = settle_orphan(work_dir, rid)
    stored = read_or_none(os.path.join(bundle_dir(work_dir, rid), "spec.json"))
    same = stored is not None and json.loads(stored) == spec
    res = {"ok": same, "state": "running" if st["live"] else "ended", "run_id": rid,
           "pid": st.get("pid"), "bundle": bundle_dir(work_dir, rid), "status": st,
           "spec_matches": same}
    if not same:
        res["reason"] = "a run with this id exists with a different spec; nothing started"
    return out(res, EXIT_OK if same else EXIT_FAILED)


# ----------------------------------------------------------------------------- the others

def _no_such_run(a: argparse.Namespace) -> bool:
    return not os.path.exists(status_path(os.path.abspath(a.work_dir), a.run_id))


def cmd_status(a: argparse.Namespace) -> int:
    if _no_such_run(a):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, EXIT_FAILED)
    return out(settle_orphan(os.path.abspath(a.work_dir), a.run_id))


def cmd_wait(a: argparse.Namespace) -> int:
    """Block until the run is final (or --timeout): not a poll, a blocking flock on the run
    lock, which the live runner holds until it exits (after writing its final status), so
    the answer comes as soon as the run ends; the status is then read (and an orphan
    settled) as `status` does."""
    if _no_such_run(a):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, EXIT_FAILED)
    work_dir = os.path.abspath(a.work_dir)
    end = time.monotonic() + a.timeout if a.timeout else None
    while True:
        st = settle_orphan(work_dir, a.run_id)
        if not st["live"] and st.get("phase") in TERMINAL:
            return out(st, EXIT_OK if st.get("ok") else EXIT_FAILED)
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            st["timed_out"] = True
            return out(st, EXIT_TIMEOUT)
        if st["live"]:
            wait_unlocked(lock_path(work_dir, a.run_id), WAIT_SLICE_S if left is None
                          else min(left, WAIT_SLICE_S))
        else:       # not live, not final: a start between its mkdir and its run lock
            time.sleep(0.05)


def cmd_stop(a: argparse.Namespace) -> int:
    if _no_such_run(a):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, EXIT_FAILED)
    st = settle_orphan(os.path.abspath(a.work_dir), a.run_id)
    pid = st.get("pid")
    if st["live"] and pid and "runner" in (read_or_none(f"/proc/{pid}/cmdline") or ""):
        os.kill(pid, signal.SIGTERM)
        st["stop_sent"] = True
    return out(st)


def cmd_pool(a: argparse.Namespace) -> int:
    from .poolwriter import write_keyed, write_pool
    if a.root is not None:
        res, rc = write_keyed(a.root, a.layers, a.experts, a.expert_bytes, a.seed, a.template)
    else:
        res, rc = write_pool(a.dir, a.layers, a.experts, a.expert_bytes, a.seed, a.template)
    return out(res, rc)


def cmd_pools(a: argparse.Namespace) -> int:
    from . import poolstore
    return out(poolstore.list_pools(a.root, os.path.abspath(a.work_dir)))


def cmd_pool_rm(a: argparse.Namespace) -> int:
    from . import poolstore
    res, rc = poolstore.remove_pool(a.root, a.key, os.path.abspath(a.work_dir))
    return out(res, rc)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="runner.py", description=DESCRIPTION)
    sub = p.add_subparsers(dest="cmd", required=True)
    wd = os.environ.get("BENCH_WORK_DIR", "/var/lib/bench")
    s = sub.add_parser("start")
    s.add_argument("--spec", required=True)
    s.add_argument("--work-dir", default=wd)
    for name in ("status", "wait", "stop", "daemon"):
        s = sub.add_parser(name)
        s.add_argument("run_id")
        s.add_argument("--work-dir", default=wd)
        if name == "wait":
            s.add_argument("--timeout", type=float, default=None)
    s = sub.add_parser("pool", help="make, resume or find an expert pool (docs/formats.md)")
    where = s.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", help="the pool directory itself")
    where.add_argument("--root", help="the host's pool_dir: the pool goes into its keyed "
                       "directory <root>/<L>x<E>x<S>-s<seed>")
    s.add_argument("--layers", type=int, required=True)
    s.add_argument("--experts", type=int, required=True)
    s.add_argument("--expert-bytes", type=int, required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--template", default=poolfmt.DEFAULT_PATH)
    s.add_argument("--work-dir", default=wd, help="accepted like the other commands; unused")
    s = sub.add_parser("pools", help="list the pools under the host's pool_dir")
    s.add_argument("--root", required=True)
    s.add_argument("--work-dir", default=wd)
    s = sub.add_parser("pool-rm", help="remove one pool (refused while a live run reads it)")
    s.add_argument("key")
    s.add_argument("--root", required=True)
    s.add_argument("--work-dir", default=wd)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if getattr(a, "run_id", None) is not None and not valid_run_id(a.run_id):
        return out({"ok": False, "reason": f"bad run id {a.run_id!r}"}, EXIT_USAGE)
    commands = {"start": cmd_start, "status": cmd_status, "wait": cmd_wait, "stop": cmd_stop,
                "daemon": cmd_daemon, "pool": cmd_pool, "pools": cmd_pools, "pool-rm": cmd_pool_rm}
    return commands[a.cmd](a)
