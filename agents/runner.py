#!/usr/bin/env python3
"""bench host-side cell runner: one measurement cell on this host (Algorithm 1 of DESIGN.md).

Python 3 standard library only, one file: `bench hosts deploy` copies it next to the agent
and runs it with the host's python3. Writes the run bundle of docs/bundle.md.

    python3 runner.py start  --spec SPEC.json --work-dir DIR   -> {"run_id","pid","bundle",...}
    python3 runner.py status RUN_ID --work-dir DIR             -> status.json (+ "live")
    python3 runner.py wait   RUN_ID --work-dir DIR [--timeout S]
    python3 runner.py stop   RUN_ID --work-dir DIR             -> SIGTERM to the runner

Exit codes: 0 ok (started, re-attached, done), 1 run failed / runner error, 2 bad spec or
usage, 3 wait timed out. `--work-dir` defaults to $BENCH_WORK_DIR, else /var/lib/bench.

Files under work_dir: runs/<run_id>/ (the bundle), host.lock (flock, held for a whole run),
host.lock.owner (who holds it), start.lock (short critical section of start/re-attach),
locks/<run_id>.lock (flock held by the live runner of that run: "is it alive" = "is it
locked"), active/<run_id>.json (PIDs and cgroups a run created; removed after its teardown;
a later run's cleanup acts only on what these records name).

Detaching: `start` validates the spec, then under start.lock creates the bundle, writes
spec.json and status `accepted`, takes the run lock, double-forks (setsid in between; stdio of
the daemon goes to runner.log in the bundle, stdin /dev/null, SIGHUP ignored) and returns at
once. The daemon inherits the run-lock descriptor, so the run is locked from before the fork
until the daemon exits. A second `start` of the same run id never runs it again: if the lock
is held it reports the live runner, else it reports the final status; a run whose runner died
without finishing is marked failed (with a manifest) by whoever notices it first.

Kernel log: /dev/kmsg is opened non-blocking at `pre` and positioned at its end (SEEK_END);
at `post` every record since is read from that descriptor (EPIPE = records overwritten in the
ring, counted as lost). Without /dev/kmsg: `dmesg --raw`, lines after the last line seen at
`pre`. The method is recorded in runner.json.

Engine runs (docs/engine.md): a spec with an `engine` section names an end-to-end engine cell
(e2e-{prompt}-{admit|nocache}); after the same lock, cleanup, drop_caches and `pre` snapshot
the runner records the MGLRU state (it leaves it as it is), applies no capacity, and runs the
engine's argv (no shell; cwd, env additions, timeout; its own session, so a timeout stops its
whole process group) instead of the agent, sampling the timeline meanwhile. stdout and stderr
go to engine.stdout / engine.stderr, engine.json records the wall time on the monotonic clock
(exit seen through a pidfd where the kernel has one), exit code or signal, timeout and the
executable's sha256. Whether the output counts is the retention rules' business.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import hashlib
import json
import os
import platform
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone

RUNNER_VERSION = "0.1.0"
BALLOON_STALL_S = 60        # a balloon whose RSS has not grown for this long has failed
RUNNER_FILE = os.path.abspath(__file__)
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
MECHANISMS = ("cgroup", "balloon", "memboot", "none")
RECLAIMS = ("mglru", "classic")
MODES = ("pagecache", "pinned", "hybrid", "nocache", "random")
DELIVERIES = ("advice", "block")
NOCACHE = ("direct", "dontneed", "dontcache")
PHASES = ("accepted", "locked", "cleaned", "caches_dropped", "mglru_set", "capacity_applied",
          "warmup", "measuring", "collecting", "done")
TERMINAL = ("done", "failed")
DEFAULT_HEADROOM = 6 << 30
LRU_GEN = "/sys/kernel/mm/lru_gen/enabled"
SYS_FILES = ["/proc/diskstats", "/proc/vmstat", "/proc/meminfo", "/proc/pressure/memory",
             "/proc/pressure/io", "/proc/pressure/cpu"]
CG_FILES = {"v2": ["memory.current", "memory.peak", "memory.events", "memory.stat",
                   "memory.max", "memory.swap.max"],
            "v1": ["memory.usage_in_bytes", "memory.max_usage_in_bytes",
                   "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.failcnt",
                   "memory.oom_control", "memory.stat"]}
CG_CURRENT = {"v2": "memory.current", "v1": "memory.usage_in_bytes"}
_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class SpecError(Exception):
    """The spec is unusable: refused before anything on the host is touched."""


class RunFailed(Exception):
    """A step of the run failed; the message is the one-line reason."""


# ----------------------------------------------------------------------------- small helpers

def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_or_none(path: str) -> str | None:
    try:
        return read_text(path)
    except OSError:
        return None


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str, obj) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def meminfo() -> dict[str, int]:
    out = {}
    for line in read_text("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[key.strip()] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def proc_status(pid: int) -> dict[str, str] | None:
    text = read_or_none(f"/proc/{pid}/status")
    if text is None:
        return None
    return {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in text.splitlines())}


def status_bytes(st: dict | None, key: str) -> int | None:
    if not st or key not in st:
        return None
    parts = st[key].split()
    return int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)


def proc_starttime(pid: int) -> int | None:
    text = read_or_none(f"/proc/{pid}/stat")
    if text is None:
        return None
    return int(text[text.rindex(")") + 2:].split()[19])


def snap_name(path: str) -> str:
    """The agent's naming: '/' -> '_', the leading '_' dropped (/proc/diskstats -> proc_diskstats)."""
    name = path.replace("/", "_")
    return name[1:] if name.startswith("_") else name


def parse_size(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)\s*", str(text).lower())
    return int(m.group(1)) * _MULT[m.group(2)] if m else None


def format_size(n: int) -> str:
    for suffix in ("t", "g", "m", "k"):
        if n and n % _MULT[suffix] == 0:
            return f"{n // _MULT[suffix]}{suffix}"
    return str(n)


def parse_cell(name: str) -> dict:
    """Cell name -> fields; same grammar as bench/cells.py (kept in step by a test)."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_-]{1,96}", name):
        raise SpecError(f"bad cell name {name!r}")
    parts = name.split("-")
    if len(parts) < 3 or not re.fullmatch(r"[0-9]+[kmgt]?", parts[0]):
        raise SpecError(f"bad cell name {name!r}: want {{C}}-{{mechanism}}-{{reclaim}}[-mode][-hints-delivery]")
    cap, mech, reclaim, rest = parse_size(parts[0]), parts[1], parts[2], parts[3:]
    if not cap:
        raise SpecError(f"cell {name!r}: capacity must be positive")
    if mech not in MECHANISMS:
        raise SpecError(f"cell {name!r}: unknown mechanism {mech!r} (valid: {', '.join(MECHANISMS)})")
    if reclaim not in RECLAIMS:
        raise SpecError(f"cell {name!r}: unknown reclaim {reclaim!r} (valid: {', '.join(RECLAIMS)})")
    mode = "pagecache"
    if rest and rest[0] in MODES[1:]:
        mode, rest = rest[0], rest[1:]
    hints = delivery = None
    if rest:
        if len(rest) != 2 or rest[1] not in DELIVERIES or not re.fullmatch(r"[a-z0-9_]{1,32}", rest[0]):
            raise SpecError(f"cell {name!r}: bad mode/prefetch part {'-'.join(rest)!r}")
        hints, delivery = rest
    canon = "-".join([format_size(cap), mech, reclaim] + ([mode] if mode != "pagecache" else [])
                     + ([hints, delivery] if hints else []))
    if canon != name:
        raise SpecError(f"cell {name!r} is not in canonical form (write {canon})")
    return {"capacity_bytes": cap, "mechanism": mech, "reclaim": reclaim, "mode": mode,
            "prefetch": hints or "none", "delivery": delivery}


# ----------------------------------------------------------------------------- spec

def resolve(work_dir: str, path) -> str:
    if not isinstance(path, str) or not path:
        raise SpecError(f"path {path!r} is not a non-empty string")
    if "\0" in path or ".." in path.split("/"):
        raise SpecError(f"path {path!r} must not contain '..'")
    return os.path.normpath(path if path.startswith("/") else os.path.join(work_dir, path))


def _int(spec, key, lo=None, hi=None, default=None, required=False):
    v = spec.get(key, default)
    if v is None and not required:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or (lo is not None and v < lo) \
            or (hi is not None and v > hi):
        raise SpecError(f"spec {key} = {v!r} is not an integer in [{lo}, {hi}]")
    return v


def validate_spec(spec, work_dir: str) -> dict:
    """Check the spec against itself and the host (read-only). Returns the resolved
    settings the run uses. Raises SpecError with one clear line."""
    if not isinstance(spec, dict):
        raise SpecError("spec is not a JSON object")
    if spec.get("format") != 1:
        raise SpecError(f"spec format {spec.get('format')!r} is not 1")
    rid = spec.get("run_id")
    if not isinstance(rid, str) or not RUN_ID.fullmatch(rid) or rid in (".", ".."):
        raise SpecError(f"run_id {rid!r} must be 1-64 of A-Z a-z 0-9 . _ - (and not . or ..)")
    if "engine" in spec:
        return validate_engine_spec(spec, work_dir, rid)
    cell = parse_cell(spec.get("cell"))
    for key in ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch", "delivery"):
        if spec.get(key) != cell[key]:
            raise SpecError(f"spec {key} = {spec.get(key)!r} does not match cell "
                            f"{spec['cell']!r} (which says {cell[key]!r})")
    mem_total = meminfo()["MemTotal"]
    if cell["capacity_bytes"] > mem_total:
        raise SpecError(f"capacity {cell['capacity_bytes']} bytes is above this host's MemTotal "
                        f"{mem_total} bytes")
    r = {"run_id": rid, "cell": spec["cell"], **cell}
    r["pool"] = resolve(work_dir, spec.get("pool"))
    try:
        pj = json.loads(read_text(os.path.join(r["pool"], "pool.json")))
        r["pool_geometry"] = [int(pj["layers"]), int(pj["experts_per_layer"]), int(pj["expert_bytes"])]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecError(f"pool {r['pool']}: no usable pool.json ({e})") from None
    r["plan"] = resolve(work_dir, spec.get("plan"))
    if not os.path.isfile(r["plan"]):
        raise SpecError(f"plan {r['plan']} does not exist")
    if spec.get("plan_sha256") and sha256_file(r["plan"]) != spec["plan_sha256"]:
        raise SpecError(f"plan {r['plan']} does not match plan_sha256")
    r["hints"] = None
    if cell["prefetch"] != "none":
        r["hints"] = resolve(work_dir, spec.get("hints"))
        if not os.path.isfile(r["hints"]):
            raise SpecError(f"hint plan {r['hints']} does not exist")
        if spec.get("hints_sha256") and sha256_file(r["hints"]) != spec["hints_sha256"]:
            raise SpecError(f"hint plan {r['hints']} does not match hints_sha256")
    elif spec.get("hints") is not None:
        raise SpecError("spec has hints but the cell has no prefetch")
    agent = spec.get("agent")
    if not isinstance(agent, dict):
        raise SpecError("spec agent is not an object")
    r["agent"] = resolve(work_dir, agent.get("path"))
    if not os.access(r["agent"], os.X_OK):
        raise SpecError(f"agent {r['agent']} is not an executable file")
    try:
        ver = json.loads(subprocess.run([r["agent"], "version"], capture_output=True, text=True,
                                        timeout=30).stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise SpecError(f"agent {r['agent']} version failed: {e}") from None
    r["agent_version"] = ver
    if agent.get("source_sha256") and ver.get("source_sha256") != agent["source_sha256"]:
        raise SpecError(f"agent source_sha256 {ver.get('source_sha256')} is not the spec's "
                        f"{agent['source_sha256']}")
    r["threads"] = _int(agent, "threads", 1, 4096, default=8)
    r["passes"] = _int(agent, "passes", 1, 1000, default=2)
    r["arena_bytes"] = _int(agent, "arena_bytes", 0, default=0)
    if cell["mode"] in ("pinned", "hybrid") and not r["arena_bytes"]:
        raise SpecError(f"mode {cell['mode']} needs agent.arena_bytes > 0")
    if cell["mode"] not in ("pinned", "hybrid") and r["arena_bytes"]:
        raise SpecError(f"agent.arena_bytes is set but mode {cell['mode']} has no arena")
    r["nocache"] = agent.get("nocache")
    if (cell["mode"] == "nocache") != (r["nocache"] is not None) or \
            (r["nocache"] is not None and r["nocache"] not in NOCACHE):
        raise SpecError(f"agent.nocache {r['nocache']!r}: mode nocache needs one of "
                        f"{', '.join(NOCACHE)}, other modes null")
    r["freq"] = resolve(work_dir, agent["freq"]) if agent.get("freq") else None
    if r["freq"] and not os.path.isfile(r["freq"]):
        raise SpecError(f"frequency file {r['freq']} does not exist")
    r["headroom"] = _int(spec, "cgroup_headroom_bytes", 0, default=DEFAULT_HEADROOM)
    r["interval_ms"] = _int(spec, "timeline_interval_ms", 10, 60000, default=100)
    r["lock_timeout_s"] = _int(spec, "host_lock_timeout_s", 0, default=600)
    r["agent_timeout_s"] = _int(spec, "agent_timeout_s", 1)
    r["balloon_max_bytes"] = _int(spec, "balloon_max_bytes", 0)
    eb = spec.get("expect_boot") or {}
    if not isinstance(eb, dict):
        raise SpecError("spec expect_boot is not an object")
    r["expect_boot"] = eb
    if cell["mechanism"] == "memboot":
        if not eb.get("mem") or parse_size(eb["mem"]) is None:
            raise SpecError("a memboot cell needs expect_boot.mem (e.g. \"93G\")")
    if eb.get("lru_gen") not in (None, "on", "off"):
        raise SpecError(f"expect_boot.lru_gen {eb.get('lru_gen')!r} is not on, off or null")
    if not isinstance(spec.get("mglru_runtime_toggle", False), bool):
        raise SpecError("spec mglru_runtime_toggle is not a boolean")
    r["toggle"] = spec.get("mglru_runtime_toggle", False)
    return r


ENGINE_CELL = re.compile(r"e2e-([a-z0-9_]{1,32})-(admit|nocache)")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_engine_cell(name) -> dict:
    """Engine cell name -> fields; same grammar as bench/cells.py (kept in step by a test)."""
    m = ENGINE_CELL.fullmatch(name) if isinstance(name, str) else None
    if not m:
        raise SpecError(f"bad engine cell name {name!r}: want e2e-{{prompt}}-{{admit|nocache}}")
    return {"capacity_bytes": 0, "mechanism": "none", "reclaim": "host",
            "mode": "pagecache" if m.group(2) == "admit" else "nocache", "prefetch": "none",
            "delivery": None, "prompt": m.group(1), "policy": m.group(2)}


def validate_engine_spec(spec: dict, work_dir: str, rid: str) -> dict:
    """The engine section of a spec (docs/engine.md), checked read-only like validate_spec."""
    cell = parse_engine_cell(spec.get("cell"))
    for key in ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch", "delivery"):
        if spec.get(key) != cell[key]:
            raise SpecError(f"spec {key} = {spec.get(key)!r} does not match cell "
                            f"{spec['cell']!r} (which says {cell[key]!r})")
    e = spec.get("engine")
    if not isinstance(e, dict):
        raise SpecError("spec engine is not an object")
    for key in ("prompt", "policy"):
        if e.get(key) != cell[key]:
            raise SpecError(f"engine.{key} = {e.get(key)!r} does not match cell {spec['cell']!r}")
    argv = e.get("argv")
    if not isinstance(argv, list) or not argv or not all(
            isinstance(a, str) and "\0" not in a for a in argv) or not argv[0]:
        raise SpecError("engine.argv must be a non-empty list of strings (no shell is used)")
    env = e.get("env") or {}
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and ENV_NAME.fullmatch(k) and isinstance(v, str) and "\0" not in v
            for k, v in env.items()):
        raise SpecError("engine.env must map variable names to strings")
    cwd = e.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")
                            or not os.path.isdir(cwd)):
        raise SpecError(f"engine.cwd {cwd!r} is not an existing absolute directory")
    exe = argv[0]
    if "/" not in exe:
        exe = shutil.which(exe, path={**os.environ, **env}.get("PATH")) or exe
    elif not exe.startswith("/"):
        exe = os.path.join(cwd or work_dir, exe)
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise SpecError(f"engine {argv[0]!r} is not an executable file on this host "
                        "(configure engine.command in the matrix)")
    timeout = _int(e, "timeout_s", 1, required=True)
    pf = e.get("prompt_file")
    if pf is not None:
        if not isinstance(pf, str) or not pf:
            raise SpecError(f"engine.prompt_file {pf!r} is not a path")
        if not os.path.isfile(pf if pf.startswith("/") else os.path.join(cwd or work_dir, pf)):
            raise SpecError(f"engine.prompt_file {pf} does not exist on this host")
    for key in ("backend", "tokens_regex", "load_regex"):
        if not isinstance(e.get(key), str) or not e[key]:
            raise SpecError(f"engine.{key} must be a non-empty string")
    pool = spec.get("pool")
    pool = resolve(work_dir, pool) if pool else None
    device_of = pool if pool and os.path.isdir(pool) else (cwd or os.path.dirname(exe))
    eb = spec.get("expect_boot") or {}
    if not isinstance(eb, dict):
        raise SpecError("spec expect_boot is not an object")
    return {"run_id": rid, "cell": spec["cell"], **cell,
            "engine": {"argv": list(argv), "env": dict(env), "cwd": cwd, "exe": exe,
                       "timeout_s": timeout, "device_of": device_of},
            "pool": device_of, "agent_version": {}, "expect_boot": eb,
            "interval_ms": _int(spec, "timeline_interval_ms", 10, 60000, default=100),
            "lock_timeout_s": _int(spec, "host_lock_timeout_s", 0, default=600),
            "headroom": 0, "balloon_max_bytes": None, "agent_timeout_s": None,
            "toggle": False, "passes": 0}


# ----------------------------------------------------------------------------- host probes

def mounts() -> list[tuple[str, str, str]]:
    out = []
    for line in read_text("/proc/self/mounts").splitlines():
        f = line.split()
        if len(f) >= 4:
            out.append((f[1].replace("\\040", " "), f[2], f[3]))
    return out


def cgroup_backend() -> tuple[str, str | None]:
    """('v2', mountpoint) when a cgroup2 mount offers the memory controller, else ('v1', mount
    of the v1 memory hierarchy), else ('none', None). Probed, never assumed."""
    ms = mounts()
    for mp, fstype, _ in ms:
        if fstype == "cgroup2" and "memory" in (read_or_none(f"{mp}/cgroup.controllers") or "").split():
            return "v2", mp
    for mp, fstype, opts in ms:
        if fstype == "cgroup" and "memory" in opts.split(","):
            return "v1", mp
    return "none", None


def block_device(path: str) -> dict:
    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sysdir = f"/sys/dev/block/{majmin}"
    if not os.path.exists(sysdir):
        return {"name": None, "major:minor": majmin, "leaves": [],
                "note": "not a block device (tmpfs, overlay, btrfs subvolume?)"}
    name = os.path.basename(os.path.realpath(sysdir))

    def leaves(n, seen):
        slaves = f"/sys/class/block/{n}/slaves"
        subs = sorted(os.listdir(slaves)) if os.path.isdir(slaves) else []
        if not subs:
            return [n]
        out = []
        for s in subs:
            if s not in seen:
                seen.add(s)
                out += leaves(s, seen)
        return out
    dev = {"name": name, "major:minor": majmin, "leaves": leaves(name, set())}
    backing = read_or_none(f"/sys/class/block/{name}/loop/backing_file")
    if backing:
        dev["loop_backing_file"] = backing.strip()
    return dev


def lru_gen_mask() -> str | None:
    text = read_or_none(LRU_GEN)
    return text.strip() if text is not None else None


# ----------------------------------------------------------------------------- locks / records

def lock_path(work_dir, run_id):
    return os.path.join(work_dir, "locks", f"{run_id}.lock")


def progress_path(work_dir, run_id):
    """The agent's --progress file (native/progress.h): outside the bundle, read by status."""
    return os.path.join(work_dir, "progress", f"{run_id}.bin")


def read_progress(work_dir, run_id):
    """{pass, passes, iteration, iterations} from the agent's live progress file, or None.
    The agent updates it with plain stores under a sequence word (odd while writing): retry
    until two reads of the sequence agree."""
    try:
        with open(progress_path(work_dir, run_id), "rb", buffering=0) as f:   # no stale buffer
            for _ in range(100):
                f.seek(0)
                raw = f.read(24)
                if len(raw) < 24:
                    return None
                magic, seq, pas, passes, done, iters = struct.unpack("=6I", raw)
                if magic != 0x31475042:
                    return None
                f.seek(4)
                if seq % 2 == 0 and struct.unpack("=I", f.read(4))[0] == seq:
                    return {"pass": pas, "passes": passes, "iteration": done,
                            "iterations": iters}
    except OSError:
        return None
    return None


def try_lock(path: str) -> int | None:
    """An fd holding an exclusive flock on path, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise


def run_is_live(work_dir, run_id) -> bool:
    if not os.path.exists(lock_path(work_dir, run_id)):
        return False
    fd = try_lock(lock_path(work_dir, run_id))
    if fd is None:
        return True
    os.close(fd)
    return False


class Active:
    """<work_dir>/active/<run_id>.json: what this run created, for a later run's cleanup."""

    def __init__(self, work_dir, run_id):
        self.path = os.path.join(work_dir, "active", f"{run_id}.json")
        self.data = {"run_id": run_id, "runner_pid": os.getpid(), "pids": [], "cgroups": []}

    def save(self):
        write_json(self.path, self.data)

    def add_pid(self, role, pid):
        self.data["pids"].append({"role": role, "pid": pid, "starttime": proc_starttime(pid)})
        self.save()

    def add_cgroup(self, path):
        self.data["cgroups"].append(path)
        self.save()

    def remove(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def is_our_agent(pid: int, starttime) -> bool:
    if starttime is None or proc_starttime(pid) != starttime:
        return False
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return os.path.basename(exe.removesuffix(" (deleted)")) == "bench-agent"


def is_our_engine(p: dict) -> bool:
    """A recorded engine process: the same start time, and the same executable or (a script
    run by its interpreter) a command line ending in the recorded argv."""
    if p.get("role") != "engine" or not p.get("exe") or p.get("starttime") is None \
            or proc_starttime(p["pid"]) != p["starttime"]:
        return False
    try:
        exe = os.readlink(f"/proc/{p['pid']}/exe").removesuffix(" (deleted)")
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


def stop_child(p: subprocess.Popen, timeout: float) -> None:
    """SIGTERM our child, SIGKILL after timeout; reaped through Popen so its status is kept."""
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def stop_group(p: subprocess.Popen, timeout: float) -> None:
    """SIGTERM a child that leads its own session and its whole process group, SIGKILL after
    timeout; reaped through Popen so its status is kept."""
    if p.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, None)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def cgroup_tasks(path: str, wait: float = 0.0) -> list[int]:
    """Live tasks of a cgroup (zombies not yet reaped by their new parent are not counted);
    with wait, keep looking that long for them to go."""
    end = time.monotonic() + wait
    while True:
        text = read_or_none(os.path.join(path, "cgroup.procs")) or ""
        live = [int(x) for x in text.split()
                if not (proc_status(int(x)) or {"State": "Z"}).get("State", "").startswith("Z")]
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


def clean_record(path: str, report: dict, recorded: set | None = None) -> bool:
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
                ok = False
                report["problems"].append(f"pid {p['pid']} ({p['role']}) did not exit")
    for cg in rec.get("cgroups", []):
        if recorded is not None:
            recorded.add(os.path.normpath(cg))
        if not os.path.isdir(cg):
            continue
        left = cgroup_tasks(cg, wait=5.0)
        if left:
            ok = False
            report["problems"].append(f"cgroup {cg} still has tasks {left} not started by bench")
            continue
        why = remove_cgroup(cg)
        if why:
            ok = False
            report["problems"].append(why)
        else:
            report["cgroups_removed"].append(cg)
    if ok:
        os.unlink(path)
    return ok


def new_report() -> dict:
    return {"records": [], "killed": [], "cgroups_removed": [], "problems": [], "foreign_cgroups": []}


def cleanup_leftovers(work_dir: str, own_run: str) -> dict:
    """Stop what earlier runs of this tool left behind. Only processes recorded in an active
    record, still the same process (start time) and a bench-agent, are killed; only cgroups
    recorded there are removed. Unrecorded bench-* cgroups are reported, not touched."""
    report = new_report()
    adir = os.path.join(work_dir, "active")
    recorded = set()
    for fn in sorted(os.listdir(adir)):
        if fn.endswith(".json") and fn != f"{own_run}.json":
            clean_record(os.path.join(adir, fn), report, recorded)
    backend, mp = cgroup_backend()
    if mp:
        for n in sorted(os.listdir(mp)):
            p = os.path.join(mp, n)
            if n.startswith("bench-") and os.path.isdir(p) and p not in recorded:
                report["foreign_cgroups"].append(p)
    return report


# ----------------------------------------------------------------------------- kernel log

class KernelLog:
    def __init__(self):
        self.info = {"method": None}
        self.fd = None
        self.last = None
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self.fd, 0, os.SEEK_END)
            self.info["method"] = "/dev/kmsg"
        except OSError as e:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            self.info["kmsg_error"] = str(e)
            r = subprocess.run(["dmesg", "--raw"], capture_output=True, text=True)
            if r.returncode == 0:
                self.info["method"] = "dmesg-diff"
                lines = r.stdout.splitlines()
                self.last = lines[-1] if lines else ""
            else:
                self.info["method"] = "unavailable"
                self.info["dmesg_error"] = r.stderr.strip()

    def collect(self) -> list[str]:
        out = []
        if self.fd is not None:
            lost = 0
            while True:
                try:
                    rec = os.read(self.fd, 8192)
                except BlockingIOError:
                    break
                except OSError as e:
                    if e.errno == errno.EPIPE:
                        lost += 1
                        continue
                    self.info["read_error"] = str(e)
                    break
                if not rec:
                    break
                out.append(rec.decode("utf-8", "replace").rstrip("\n"))
            os.close(self.fd)
            self.fd = None
            self.info.update(records=len(out), overruns=lost)
        elif self.info["method"] == "dmesg-diff":
            r = subprocess.run(["dmesg", "--raw"], capture_output=True, text=True)
            lines = r.stdout.splitlines()
            idx = max((i for i, l in enumerate(lines) if l == self.last), default=-1)
            out = lines[idx + 1:]
            self.info.update(records=len(out), found_mark=idx >= 0)
        return out


# ----------------------------------------------------------------------------- the run

class Run:
    def __init__(self, work_dir: str, bundle: str, spec: dict, cfg: dict):
        self.work_dir, self.bundle, self.spec, self.cfg = work_dir, bundle, spec, cfg
        self.run_id = cfg["run_id"]
        self.status = json.loads(read_text(os.path.join(bundle, "status.json")))
        self.stop_requested = False
        self.runner = {"runner_version": RUNNER_VERSION, "runner_sha256": sha256_file(RUNNER_FILE),
                       "pid": os.getpid(), "work_dir": work_dir}
        self.active = Active(work_dir, self.run_id)
        self.cg = None            # {"backend", "path"} once created
        self.balloon = None       # Popen
        self.balloon_info = None
        self.agent = None
        self.kmsg = None
        self.pre_taken = False
        self.collected = False

    # status ------------------------------------------------------------------------------
    def phase(self, name, **extra):
        self.status.update(phase=name, pid=os.getpid(), updated=now_iso(), **extra)
        entry = {"phase": name, "t": self.status["updated"], "mono_ns": time.monotonic_ns()}
        if extra.get("reason"):
            entry["reason"] = extra["reason"]
        self.status["history"].append(entry)
        write_json(os.path.join(self.bundle, "status.json"), self.status)
        print(f"{entry['t']} phase {name}" + (f": {extra['reason']}" if extra.get("reason") else ""),
              flush=True)

    def check_stop(self):
        if self.stop_requested:
            raise RunFailed("stopped by request (SIGTERM to the runner)")

    def path(self, *p):
        return os.path.join(self.bundle, *p)

    # snapshots ---------------------------------------------------------------------------
    def cg_files(self) -> list[str]:
        if not self.cg:
            return []
        return [os.path.join(self.cg["path"], f) for f in CG_FILES[self.cg["backend"]]
                if os.path.exists(os.path.join(self.cg["path"], f))]

    def snapshot(self, which: str):
        d = self.path("snapshots", which)
        os.makedirs(d, exist_ok=True)
        files = SYS_FILES + [LRU_GEN, "/proc/sys/kernel/random/boot_id", "/proc/cmdline"]
        files = [(f, snap_name(f)) for f in files if f != LRU_GEN or os.path.exists(LRU_GEN)]
        files += [(f, snap_name(f)) for f in self.cg_files()]
        if self.balloon is not None:
            files.append((f"/proc/{self.balloon.pid}/status", "balloon_status"))
        for src, name in files:
            try:
                with open(src, "rb") as f:
                    data = f.read()
                with open(os.path.join(d, name), "wb") as f:
                    f.write(data)
            except OSError as e:
                write_file(os.path.join(d, name + ".err"), f"{src}: {e.strerror}\n")

    # steps -------------------------------------------------------------------------------
    def step_lock(self):
        fd = os.open(os.path.join(self.work_dir, "host.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.host_lock_fd = fd
        t0 = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 >= self.cfg["lock_timeout_s"]:
                    owner = read_or_none(os.path.join(self.work_dir, "host.lock.owner")) or "?"
                    raise RunFailed(f"host lock still held after {self.cfg['lock_timeout_s']} s "
                                    f"by {owner.strip()}") from None
                self.check_stop()
                time.sleep(0.2)
        self.runner["host_lock_wait_s"] = round(time.monotonic() - t0, 3)
        write_file(os.path.join(self.work_dir, "host.lock.owner"),
                   json.dumps({"run_id": self.run_id, "pid": os.getpid(), "t": now_iso()}) + "\n")
        self.phase("locked")

    def step_clean_drop(self):
        self.active.save()
        self.runner["cleanup"] = rep = cleanup_leftovers(self.work_dir, self.run_id)
        if rep["problems"]:
            raise RunFailed("leftovers of an earlier run could not be removed: " + "; ".join(rep["problems"]))
        self.phase("cleaned")
        before = meminfo()["Cached"]
        t0 = time.monotonic_ns()
        os.sync()
        write_file("/proc/sys/vm/drop_caches", "3\n")
        after = meminfo()["Cached"]
        write_json(self.path("drop.json"), {"cached_before_bytes": before, "cached_after_bytes": after,
                                            "t": now_iso(), "sync_and_drop_ns": time.monotonic_ns() - t0})
        self.host_json()
        self.kmsg = KernelLog()
        self.snapshot("pre")
        self.pre_taken = True
        self.phase("caches_dropped")

    def host_json(self):
        mi = meminfo()
        backend, mp = cgroup_backend()
        comm1 = (read_or_none("/proc/1/comm") or "").strip()
        write_json(self.path("host.json"), {
            "hostname": socket.gethostname(), "kernel_release": platform.release(),
            "arch": platform.machine(), "page_size": os.sysconf("SC_PAGE_SIZE"),
            "cmdline": (read_or_none("/proc/cmdline") or "").strip(),
            "boot_id": (read_or_none("/proc/sys/kernel/random/boot_id") or "").strip(),
            "mem_total_bytes": mi["MemTotal"], "swap_total_bytes": mi.get("SwapTotal"),
            "mglru": lru_gen_mask(), "cgroup_backend": backend, "cgroup_mount": mp,
            "systemd_pid1": comm1 == "systemd", "pid1_comm": comm1,
            "python": platform.python_version(),
            "agent_version": self.cfg["agent_version"].get("version"),
            "agent_source_sha256": self.cfg["agent_version"].get("source_sha256"),
            "pool_device": block_device(self.cfg["pool"]),
            "expect_boot": self.cfg["expect_boot"],
        })

    def step_mglru(self):
        requested = "on" if self.cfg["reclaim"] == "mglru" else "off"
        rec = {"requested": requested, "method": None, "pre": lru_gen_mask(), "after_set": None, "post": None}
        self.mglru = rec
        write_json(self.path("mglru.json"), rec)
        if rec["pre"] is None:
            rec["method"] = "absent"
            write_json(self.path("mglru.json"), rec)
            if requested == "on":
                raise RunFailed(f"the cell asks mglru but this kernel has no MGLRU ({LRU_GEN} missing)")
        else:
            on = bool(int(rec["pre"], 16) & 1)
            if on == (requested == "on"):
                rec["method"] = "boot" if self.cfg["expect_boot"].get("lru_gen") == requested else "unchanged"
                rec["after_set"] = rec["pre"]
            elif not self.cfg["toggle"]:
                rec["method"] = "unchanged"
                write_json(self.path("mglru.json"), rec)
                raise RunFailed(f"MGLRU is {'on' if on else 'off'} ({rec['pre']}), the cell asks "
                                f"{requested} and mglru_runtime_toggle is false")
            else:
                write_file(LRU_GEN, "y\n" if requested == "on" else "n\n")
                rec["method"] = "runtime"
                rec["after_set"] = lru_gen_mask()
                write_json(self.path("mglru.json"), rec)
                if bool(int(rec["after_set"], 16) & 1) != (requested == "on"):
                    raise RunFailed(f"wrote MGLRU {requested} but read back {rec['after_set']}")
            write_json(self.path("mglru.json"), rec)
        self.phase("mglru_set")

    def step_capacity(self):
        mech, C = self.cfg["mechanism"], self.cfg["capacity_bytes"]
        cap = {"mechanism": mech, "capacity_bytes": C}
        self.capacity = cap
        try:
            if mech == "cgroup":
                self.make_cgroup(cap)
            elif mech == "balloon":
                self.start_balloon(cap)
            elif mech == "memboot":
                self.check_memboot(cap)
        finally:
            write_json(self.path("capacity.json"), cap)
        self.phase("capacity_applied")

    def make_cgroup(self, cap):
        backend, mp = cgroup_backend()
        limit = cap["capacity_bytes"] + self.cfg["headroom"]
        cap.update(backend=backend, headroom_bytes=self.cfg["headroom"], limit_bytes=limit)
        if backend == "none":
            raise RunFailed("no memory cgroup controller on this host (neither cgroup2 nor v1 memory)")
        path = os.path.join(mp, f"bench-{self.run_id}")
        cap["path"] = path
        if backend == "v2":
            sub = os.path.join(mp, "cgroup.subtree_control")
            if "memory" not in read_text(sub).split():
                write_file(sub, "+memory\n")
                cap["enabled_memory_in_parent"] = True
        self.active.add_cgroup(path)
        os.mkdir(path)
        self.cg = {"backend": backend, "path": path}
        try:
            if backend == "v2":
                write_file(os.path.join(path, "memory.max"), f"{limit}\n")
                cap["limit_read_back"] = int(read_text(os.path.join(path, "memory.max")))
                swap = os.path.join(path, "memory.swap.max")
                if os.path.exists(swap):
                    write_file(swap, "0\n")
                    cap["swap_limit_read_back"] = int(read_text(swap).replace("max", "-1"))
                else:
                    cap["swap_limit_read_back"] = None
                    cap["swap_note"] = "memory.swap.max absent (swap accounting off): swap not limited"
            else:
                write_file(os.path.join(path, "memory.limit_in_bytes"), f"{limit}\n")
                cap["limit_read_back"] = int(read_text(os.path.join(path, "memory.limit_in_bytes")))
                memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
                if os.path.exists(memsw):
                    write_file(memsw, f"{limit}\n")
                    cap["swap_limit_read_back"] = int(read_text(memsw)) - cap["limit_read_back"]
                    cap["memsw_limit_read_back"] = int(read_text(memsw))
                else:
                    cap["swap_limit_read_back"] = None
                    cap["swap_note"] = "memory.memsw.limit_in_bytes absent (swapaccount off): swap not limited"
        except OSError as e:
            raise RunFailed(f"cgroup {path}: cannot set the limit: {e.strerror}") from None
        cap["swap_total_bytes"] = meminfo().get("SwapTotal")
        page = os.sysconf("SC_PAGE_SIZE")
        if not (limit <= cap["limit_read_back"] < limit + page):
            raise RunFailed(f"cgroup limit read back {cap['limit_read_back']} is not the {limit} written")

    def start_balloon(self, cap):
        avail = meminfo()["MemAvailable"]
        nbytes = avail - cap["capacity_bytes"]
        cap.update(mem_available_before=avail, requested_bytes=nbytes)
        if nbytes <= 0:
            raise RunFailed(f"MemAvailable {avail} is already at or below the capacity "
                            f"{cap['capacity_bytes']}: no balloon can make room smaller")
        if self.cfg["balloon_max_bytes"] is not None and nbytes > self.cfg["balloon_max_bytes"]:
            raise RunFailed(f"balloon of {nbytes} bytes is above the spec's balloon_max_bytes "
                            f"{self.cfg['balloon_max_bytes']}")
        ready = self.path(".balloon-ready")
        out = open(self.path("balloon.jsonl"), "ab")
        self.balloon = subprocess.Popen([self.cfg["agent"], "balloon", "--bytes", str(nbytes),
                                         "--ready-file", ready], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=out, close_fds=True)
        out.close()
        self.active.add_pid("balloon", self.balloon.pid)
        cap["pid"] = self.balloon.pid
        self.status["children"] = {"agent": None, "balloon": self.balloon.pid}
        self.balloon_info = {"pid": self.balloon.pid, "alive_at_loop_entry": None,
                             "alive_at_end": None, "exit_code": None, "signal": None}
        # first touch runs at ~2 s/GiB on a quiet host, far slower where reclaim must first
        # free the room or the CPU is emulated: wait while the balloon's RSS still grows, give
        # up after STALL_S without progress (or at a generous overall bound)
        t0 = time.monotonic()
        limit = t0 + 120 + 120 * nbytes / (1 << 30)
        stall, last_rss = t0 + BALLOON_STALL_S, -1
        line = None
        while line is None:
            text = read_or_none(ready)
            if text:
                line = json.loads(text)
                break
            if self.balloon.poll() is not None:
                text = read_or_none(ready) or read_or_none(self.path("balloon.jsonl")) or ""
                raise RunFailed(f"balloon exited ({self.balloon.returncode}) before ready: "
                                f"{text.strip().splitlines()[-1:] or ''}")
            now = time.monotonic()
            rss = status_bytes(proc_status(self.balloon.pid), "VmRSS") or 0
            if rss > last_rss:
                last_rss, stall = rss, now + BALLOON_STALL_S
            if now > stall or now > limit:
                raise RunFailed(f"balloon not ready after {now - t0:.0f} s: RSS {last_rss} of "
                                f"{nbytes} bytes" + (f", no progress for {BALLOON_STALL_S} s"
                                                     if now > stall else ""))
            self.check_stop()
            time.sleep(0.05)
        os.unlink(ready)
        cap["ready"] = line
        if not line.get("ready"):
            raise RunFailed(f"balloon failed: {line.get('reason')}")
        cap["vmlck_bytes"] = status_bytes(proc_status(self.balloon.pid), "VmLck")
        if cap["vmlck_bytes"] is None or cap["vmlck_bytes"] < nbytes:
            raise RunFailed(f"balloon VmLck {cap['vmlck_bytes']} is below the {nbytes} requested")
        cap["vmlck_verified"] = True

    def check_memboot(self, cap):
        from_cmd = None
        for a in (read_or_none("/proc/cmdline") or "").split():
            if a.startswith("mem="):
                from_cmd = a[4:]
        mt = meminfo()["MemTotal"]
        want = self.cfg["expect_boot"]["mem"]
        cap.update(mem_total_bytes=mt, mem_in_cmdline=from_cmd, expected_mem=want)
        if from_cmd is None:
            raise RunFailed(f"memboot cell but no mem= on the kernel command line (expected mem={want})")
        if parse_size(from_cmd) != parse_size(want):
            raise RunFailed(f"booted with mem={from_cmd}, the cell expects mem={want}")
        if mt > parse_size(want):
            raise RunFailed(f"MemTotal {mt} is above mem={want}: the limit did not take effect")

    def agent_argv(self):
        c = self.cfg
        argv = [c["agent"], "replay", "--pool", c["pool"], "--plan", c["plan"],
                "--passes", str(c["passes"]), "--threads", str(c["threads"]), "--mode", c["mode"]]
        if c["arena_bytes"]:
            argv += ["--arena-bytes", str(c["arena_bytes"])]
        if c["freq"]:
            argv += ["--freq", c["freq"]]
        if c["nocache"]:
            argv += ["--nocache", c["nocache"]]
        if c["hints"]:
            argv += ["--prefetch", c["delivery"], "--hints", c["hints"]]
        files = list(SYS_FILES) + ["/proc/self/status"]
        if os.path.exists(LRU_GEN):
            files.append(LRU_GEN)
        files += self.cg_files()
        if self.balloon is not None:
            files.append(f"/proc/{self.balloon.pid}/status")
        argv += ["--snapshot-dir", self.path("snapshots")]
        for f in files:
            argv += ["--snapshot-file", f]
        prog = progress_path(self.work_dir, self.run_id)
        os.makedirs(os.path.dirname(prog), exist_ok=True)
        return argv + ["--out", self.path("agent.jsonl"), "--progress", prog]

    def step_agent(self):
        argv = self.agent_argv()
        cg = self.cg
        procs = os.path.join(cg["path"], "cgroup.procs") if cg else None

        def enter_scope():          # runs in the child between fork and exec
            if procs:
                with open(procs, "w") as f:
                    f.write(f"{os.getpid()}\n")
        info = {"argv": argv, "pid": None, "exit_code": None, "signal": None}
        self.runner["agent"] = info
        err = open(self.path("agent.stderr"), "ab")
        tl = open(self.path("timeline.csv"), "w")
        tl.write("mono_ns,phase,memory_current,cached,mem_available\n")
        cur_file = os.path.join(cg["path"], CG_CURRENT[cg["backend"]]) if cg else None
        P = self.cfg["passes"]
        mark = self.path("snapshots", f"pass{P - 2}-end") if P >= 2 else None
        loop_entry = self.path("snapshots", f"pass{P - 1}-start")
        try:
            self.agent = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                          close_fds=True, preexec_fn=enter_scope)
        except (OSError, subprocess.SubprocessError) as e:
            raise RunFailed(f"cannot start the agent{' in ' + cg['path'] if cg else ''}: {e}") from None
        finally:
            err.close()
        self.active.add_pid("agent", self.agent.pid)
        info["pid"] = self.agent.pid
        info["started_mono_ns"] = time.monotonic_ns()
        self.status["children"] = {"agent": self.agent.pid,
                                   "balloon": self.balloon.pid if self.balloon else None}
        self.phase("warmup" if mark else "measuring")
        info["cgroup"] = (read_or_none(f"/proc/{self.agent.pid}/cgroup") or "").splitlines()
        if cg:
            rel = "/" + os.path.relpath(cg["path"], os.path.dirname(cg["path"]))
            info["in_cgroup"] = any(l.endswith(":" + rel) and ("memory" in l.split(":")[1] or
                                                              l.startswith("0::"))
                                    for l in info["cgroup"])
        measuring = mark is None
        interval = self.cfg["interval_ms"] / 1000.0
        deadline = (time.monotonic() + self.cfg["agent_timeout_s"]) if self.cfg["agent_timeout_s"] else None
        samples = 0
        why = None
        while True:
            if not measuring and os.path.isdir(mark):
                measuring = True
                info["measuring_seen_mono_ns"] = time.monotonic_ns()
                self.phase("measuring")
                if self.balloon is not None:
                    self.balloon_info["alive_at_loop_entry_runner"] = self.balloon.poll() is None
            cur = (read_or_none(cur_file) or "").strip() if cur_file else ""
            try:
                mi = meminfo()
                tl.write(f"{time.monotonic_ns()},{'measuring' if measuring else 'warmup'},{cur},"
                         f"{mi['Cached']},{mi['MemAvailable']}\n")
                samples += 1
            except OSError:
                pass
            if self.balloon is not None and self.balloon.poll() is not None \
                    and "balloon_died_mono_ns" not in self.balloon_info:
                self.balloon_info["balloon_died_mono_ns"] = time.monotonic_ns()
            if self.agent.poll() is not None:
                break
            if self.stop_requested:
                why = "stopped by request (SIGTERM to the runner)"
            elif deadline and time.monotonic() > deadline:
                why = f"agent still running after agent_timeout_s {self.cfg['agent_timeout_s']}"
            if why:
                stop_child(self.agent, 10.0)
                break
            time.sleep(interval)
        tl.close()
        info["ended_mono_ns"] = time.monotonic_ns()
        rc = self.agent.returncode
        info["exit_code"], info["signal"] = (rc, None) if rc >= 0 else (None, -rc)
        self.runner["timeline_samples"] = samples
        if self.balloon is not None:
            self.balloon_loop_entry(loop_entry)
        if why:
            raise RunFailed(why)
        if rc != 0:
            summary = self.agent_summary()
            reason = (summary or {}).get("reason") or self.last_line(self.path("agent.stderr"))
            raise RunFailed(f"agent exited with {'signal ' + str(-rc) if rc < 0 else rc}: {reason}")

    def agent_summary(self):
        for line in reversed((read_or_none(self.path("agent.jsonl")) or "").splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("summary"):
                return obj
        return None

    @staticmethod
    def last_line(path):
        lines = (read_or_none(path) or "").strip().splitlines()
        return lines[-1] if lines else "(no output)"

    def balloon_loop_entry(self, loop_entry):
        """Alive at loop entry, exactly: the agent's own loop_entry snapshot of the balloon's
        /proc/PID/status (a .err file there = gone)."""
        name = snap_name(f"/proc/{self.balloon.pid}/status")
        f = os.path.join(loop_entry, name)
        if os.path.exists(f):
            st = {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in read_text(f).splitlines())}
            alive = st.get("Name") == "bench-agent" and not st.get("State", "").startswith("Z")
            self.balloon_info["alive_at_loop_entry"] = alive
            self.balloon_info["vmlck_at_loop_entry_bytes"] = status_bytes(st, "VmLck")
        elif os.path.exists(f + ".err"):
            self.balloon_info["alive_at_loop_entry"] = False

    def step_collect(self):
        self.phase("collecting")
        self.collect()

    def collect(self):
        if self.collected:
            return
        self.collected = True
        if self.balloon is not None and self.balloon_info is not None:
            alive = self.balloon.poll() is None
            self.balloon_info["alive_at_end"] = alive
            self.balloon_info["vmlck_end_bytes"] = status_bytes(proc_status(self.balloon.pid), "VmLck") if alive else None
        if getattr(self, "engine_info", None) is not None:
            write_json(self.path("engine.json"), self.engine_info)
        if self.pre_taken:
            self.snapshot("post")
        if hasattr(self, "mglru"):
            self.mglru["post"] = lru_gen_mask()
            write_json(self.path("mglru.json"), self.mglru)
        if self.kmsg is not None:
            write_file(self.path("kmsg.txt"), "".join(l + "\n" for l in self.kmsg.collect()))
            self.runner["kmsg"] = self.kmsg.info
            self.kmsg = None

    def teardown(self):
        notes = []
        if self.agent is not None:
            stop_child(self.agent, 10.0)
        if getattr(self, "engine", None) is not None:
            stop_group(self.engine, 10.0)
        if self.balloon is not None:
            if self.balloon.poll() is None:
                self.balloon.send_signal(signal.SIGTERM)
                try:
                    self.balloon.wait(30 + 4 * self.capacity.get("requested_bytes", 0) / (1 << 30))
                except subprocess.TimeoutExpired:
                    notes.append("balloon ignored SIGTERM: killed")
                    self.balloon.kill()
                    self.balloon.wait()
            else:
                self.balloon_info["exited_before_teardown"] = True
            rc = self.balloon.returncode
            self.balloon_info["exit_code"], self.balloon_info["signal"] = (rc, None) if rc >= 0 else (None, -rc)
            write_json(self.path("balloon.json"), self.balloon_info)
        if self.cg:
            why = remove_cgroup(self.cg["path"])
            if why:
                notes.append(why)
        self.runner["teardown"] = notes
        if not notes:
            self.active.remove()
        return notes

    # engine runs (docs/engine.md) -----------------------------------------------------------
    def step_engine_mglru(self):
        """Engine cells leave reclaim as the host runs it: record the MGLRU state only."""
        mask = lru_gen_mask()
        self.mglru = {"requested": None, "method": "unchanged" if mask else "absent",
                      "pre": mask, "after_set": mask, "post": None}
        write_json(self.path("mglru.json"), self.mglru)
        self.phase("mglru_set")

    def step_engine(self):
        """The engine instead of the agent: argv without a shell, cwd, env additions, a
        timeout; stdout/stderr into the bundle; wall time on the monotonic clock."""
        e = self.cfg["engine"]
        info = {"argv": e["argv"], "cwd": e["cwd"], "env": e["env"], "executable": e["exe"],
                "executable_sha256": sha256_file(e["exe"]), "timeout_s": e["timeout_s"],
                "device_of": e["device_of"], "pid": None, "exit_code": None, "signal": None,
                "timed_out": False, "stopped": False, "exit_seen_by": None,
                "start_mono_ns": None, "end_mono_ns": None, "wall_s": None}
        self.engine_info = self.runner["engine"] = info
        env = dict(os.environ)
        env.update(e["env"])
        out = open(self.path("engine.stdout"), "wb")
        err = open(self.path("engine.stderr"), "wb")
        tl = open(self.path("timeline.csv"), "w")
        tl.write("mono_ns,phase,memory_current,cached,mem_available\n")
        try:
            info["start_mono_ns"] = time.monotonic_ns()
            self.engine = subprocess.Popen(e["argv"], cwd=e["cwd"], env=env,
                                           stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                           close_fds=True, start_new_session=True)
        except (OSError, subprocess.SubprocessError) as exc:
            tl.close()
            info["start_error"] = str(exc)
            raise RunFailed(f"cannot start the engine {e['argv'][0]}: {exc}") from None
        finally:
            out.close()
            err.close()
        pid = self.engine.pid
        self.active.data["pids"].append({"role": "engine", "pid": pid, "exe": e["exe"],
                                         "argv": e["argv"], "starttime": proc_starttime(pid)})
        self.active.save()
        info["pid"] = pid
        self.status["children"] = {"engine": pid}
        self.phase("measuring")             # written with the engine's pid
        try:
            pidfd = os.pidfd_open(pid)
            info["exit_seen_by"] = "pidfd"
        except (AttributeError, OSError):
            pidfd, info["exit_seen_by"] = None, "poll"
        deadline = time.monotonic() + e["timeout_s"]
        interval = self.cfg["interval_ms"] / 1000.0
        why, samples = None, 0
        try:
            while True:
                try:
                    mi = meminfo()
                    tl.write(f"{time.monotonic_ns()},measuring,,{mi['Cached']},"
                             f"{mi['MemAvailable']}\n")
                    samples += 1
                except OSError:
                    pass
                if pidfd is not None:
                    select.select([pidfd], [], [], interval)
                    ended = self.engine.poll() is not None
                else:
                    try:
                        self.engine.wait(interval)
                    except subprocess.TimeoutExpired:
                        pass
                    ended = self.engine.returncode is not None
                if ended:
                    info["end_mono_ns"] = time.monotonic_ns()
                    break
                if self.stop_requested:
                    why, info["stopped"] = "stopped by request (SIGTERM to the runner)", True
                elif time.monotonic() > deadline:
                    why = f"engine still running after its timeout_s {e['timeout_s']}"
                    info["timed_out"] = True
                if why:
                    stop_group(self.engine, 10.0)
                    info["end_mono_ns"] = time.monotonic_ns()
                    break
        finally:
            tl.close()
            if pidfd is not None:
                os.close(pidfd)
        info["wall_s"] = (info["end_mono_ns"] - info["start_mono_ns"]) / 1e9
        rc = self.engine.returncode
        info["exit_code"], info["signal"] = (rc, None) if rc >= 0 else (None, -rc)
        self.runner["timeline_samples"] = samples
        if why:
            raise RunFailed(why)
        if rc != 0:
            raise RunFailed(f"engine exited with {'signal ' + str(-rc) if rc < 0 else rc}: "
                            f"{self.last_line(self.path('engine.stderr'))}")

    def execute(self):
        ok, reason = True, None
        try:
            self.step_lock()
            self.step_clean_drop()
            if self.cfg.get("engine"):
                self.step_engine_mglru()
                self.step_capacity()
                self.step_engine()
            else:
                self.step_mglru()
                self.step_capacity()
                self.step_agent()
            self.step_collect()
        except RunFailed as e:
            ok, reason = False, str(e)
        except Exception as e:  # noqa: BLE001 - an internal error still ends in a bundle
            traceback.print_exc()
            ok, reason = False, f"runner internal error: {type(e).__name__}: {e}"
        for what, fn in (("collect", self.collect), ("teardown", self.teardown)):
            try:
                notes = fn()
                if what == "teardown" and notes and ok:
                    ok, reason = False, "teardown: " + "; ".join(notes)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                if ok:
                    ok, reason = False, f"{what} failed: {type(e).__name__}: {e}"
        try:
            write_json(self.path("runner.json"), self.runner)
        except OSError:
            traceback.print_exc()
        if ok:
            self.phase("done", ok=True, reason=None)
        else:
            self.phase("failed", ok=False, reason=reason.replace("\n", " ")[:500])
        sys.stdout.flush()
        sys.stderr.flush()
        write_manifest(self.bundle, self.run_id)


def write_manifest(bundle: str, run_id: str) -> None:
    files = {}
    for root, dirs, names in os.walk(bundle):
        dirs.sort()
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, bundle)
            if rel == "manifest.json" or not os.path.isfile(p) or os.path.islink(p):
                continue
            files[rel] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    write_json(os.path.join(bundle, "manifest.json"), {"run_id": run_id, "complete": True, "files": files})


# ----------------------------------------------------------------------------- commands

def out(obj, rc=0):
    print(json.dumps(obj), flush=True)
    return rc


def bundle_dir(work_dir, run_id):
    return os.path.join(work_dir, "runs", run_id)


def load_status(work_dir, run_id):
    return json.loads(read_text(os.path.join(bundle_dir(work_dir, run_id), "status.json")))


def settle_orphan(work_dir, run_id):
    """If nobody holds the run's lock but its status is not final, the runner died: mark the
    run failed and write its manifest so it can be ingested. Returns the status."""
    bundle = bundle_dir(work_dir, run_id)
    start_fd = os.open(os.path.join(work_dir, "start.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(start_fd, fcntl.LOCK_EX)   # start() may be between mkdir and taking the run lock
    try:
        return _settle(work_dir, run_id, bundle)
    finally:
        os.close(start_fd)


def _settle(work_dir, run_id, bundle):
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
            # what the dead runner left running would keep writing into the bundle: stop the
            # agent/balloon it recorded (verified bench-agent processes), remove its cgroup
            rep = new_report()
            clean_record(os.path.join(work_dir, "active", f"{run_id}.json"), rep)
            reason = (f"runner (pid {st.get('pid')}) died in phase {st.get('phase')} without "
                      f"finishing; orphan cleanup: killed {len(rep['killed'])} process(es), "
                      f"removed {len(rep['cgroups_removed'])} cgroup(s)"
                      + (f", problems: {'; '.join(rep['problems'])}" if rep["problems"] else ""))
            t = now_iso()
            st.update(phase="failed", ok=False, reason=reason, updated=t)
            st["history"].append({"phase": "failed", "t": t, "mono_ns": time.monotonic_ns(),
                                  "reason": reason})
            write_json(os.path.join(bundle, "status.json"), st)
            write_manifest(bundle, run_id)
        elif not os.path.exists(os.path.join(bundle, "manifest.json")):
            write_manifest(bundle, run_id)
    finally:
        os.close(fd)
    st["live"] = False
    return st


def cmd_start(a):
    work_dir = os.path.abspath(a.work_dir)
    try:
        raw = read_text(a.spec)
        spec = json.loads(raw)
    except (OSError, ValueError) as e:
        return out({"ok": False, "reason": f"cannot read spec {a.spec}: {e}"}, 2)
    rid = spec.get("run_id") if isinstance(spec, dict) else None
    # re-attach first: an existing run is reported, never validated or run again
    if isinstance(rid, str) and RUN_ID.fullmatch(rid) and rid not in (".", "..") \
            and os.path.isdir(bundle_dir(work_dir, rid)):
        return reattach(work_dir, rid, spec)
    try:
        cfg = validate_spec(spec, work_dir)
    except SpecError as e:
        return out({"ok": False, "run_id": rid, "reason": f"bad spec: {e}"}, 2)
    for d in ("runs", "locks", "active"):
        os.makedirs(os.path.join(work_dir, d), exist_ok=True)
    start_fd = os.open(os.path.join(work_dir, "start.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    fcntl.flock(start_fd, fcntl.LOCK_EX)
    bundle = bundle_dir(work_dir, rid)
    try:
        os.mkdir(bundle)
    except FileExistsError:
        os.close(start_fd)
        return reattach(work_dir, rid, spec)
    run_fd = try_lock(lock_path(work_dir, rid))
    write_atomic(os.path.join(bundle, "spec.json"), raw)   # byte for byte what was sent
    t = now_iso()
    write_json(os.path.join(bundle, "status.json"), {
        "run_id": rid, "phase": "accepted", "pid": None, "updated": t,
        "history": [{"phase": "accepted", "t": t, "mono_ns": time.monotonic_ns()}],
        "ok": None, "reason": None})
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
    while chunk := os.read(rpipe, 64):
        data += chunk
    os.close(rpipe)
    os.close(start_fd)
    return out({"ok": True, "state": "started", "run_id": rid, "pid": int(data or 0), "bundle": bundle})


def daemon(work_dir, bundle, spec, cfg, run_fd, wpipe):
    os.chdir("/")
    os.umask(0o022)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log = os.open(os.path.join(bundle, "runner.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    run = Run(work_dir, bundle, spec, cfg)

    def on_term(signum, frame):
        run.stop_requested = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    os.write(wpipe, str(os.getpid()).encode())
    os.close(wpipe)
    run.status.update(pid=os.getpid(), updated=now_iso())
    write_json(os.path.join(bundle, "status.json"), run.status)
    try:
        run.execute()
    finally:
        os.close(run_fd)
        os._exit(0)


def reattach(work_dir, rid, spec):
    st = settle_orphan(work_dir, rid)
    stored = read_or_none(os.path.join(bundle_dir(work_dir, rid), "spec.json"))
    same = stored is not None and json.loads(stored) == spec
    res = {"ok": same, "state": "running" if st["live"] else "ended", "run_id": rid,
           "pid": st.get("pid"), "bundle": bundle_dir(work_dir, rid), "status": st,
           "spec_matches": same}
    if not same:
        res["reason"] = "a run with this id exists with a different spec; nothing started"
    return out(res, 0 if same else 1)


def cmd_status(a):
    work_dir = os.path.abspath(a.work_dir)
    if not os.path.exists(os.path.join(bundle_dir(work_dir, a.run_id), "status.json")):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, 1)
    return out(settle_orphan(work_dir, a.run_id))


def cmd_wait(a):
    work_dir = os.path.abspath(a.work_dir)
    if not os.path.exists(os.path.join(bundle_dir(work_dir, a.run_id), "status.json")):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, 1)
    end = time.monotonic() + a.timeout if a.timeout else None
    while True:
        st = settle_orphan(work_dir, a.run_id)
        if not st["live"] and st.get("phase") in TERMINAL:
            return out(st, 0 if st.get("ok") else 1)
        if end is not None and time.monotonic() > end:
            st["timed_out"] = True
            return out(st, 3)
        time.sleep(0.25)


def cmd_stop(a):
    work_dir = os.path.abspath(a.work_dir)
    if not os.path.exists(os.path.join(bundle_dir(work_dir, a.run_id), "status.json")):
        return out({"ok": False, "run_id": a.run_id, "reason": "no such run"}, 1)
    st = settle_orphan(work_dir, a.run_id)
    pid = st.get("pid")
    if st["live"] and pid and "runner" in (read_or_none(f"/proc/{pid}/cmdline") or ""):
        os.kill(pid, signal.SIGTERM)
        st["stop_sent"] = True
    return out(st)


def main(argv=None):
    p = argparse.ArgumentParser(prog="runner.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    wd = os.environ.get("BENCH_WORK_DIR", "/var/lib/bench")
    s = sub.add_parser("start")
    s.add_argument("--spec", required=True)
    s.add_argument("--work-dir", default=wd)
    for name in ("status", "wait", "stop"):
        s = sub.add_parser(name)
        s.add_argument("run_id")
        s.add_argument("--work-dir", default=wd)
        if name == "wait":
            s.add_argument("--timeout", type=float, default=None)
    a = p.parse_args(argv)
    if getattr(a, "run_id", None) is not None and (not RUN_ID.fullmatch(a.run_id) or a.run_id in (".", "..")):
        return out({"ok": False, "reason": f"bad run id {a.run_id!r}"}, 2)
    return {"start": cmd_start, "status": cmd_status, "wait": cmd_wait, "stop": cmd_stop}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
