"""One run of one cell on one or more hosts, end to end, over any Transport.

Per host (`run_hosts` does every host in parallel, one dead host stopping nothing):

1. preflight, read-only (`preflight`): probe the host, build and check its spec
   (bench.matrix.runspec); an InputError/SafetyError on any host stops the command before any host
   is written to; then (`execute`) take the controller's host lock (bench.hosts.lock) for the
   set-up steps 2-5;
2. deploy the agent when it is not current (bench.hosts.deploy);
3. put the plan (and hint plan) to `<work_dir>/plans/<sha256>.bin`, skipped when a file of
   that name already hashes to it;
4. make sure the pool exists with the plan's geometry (`ensure_pool`, below);
5. put spec.json to `<work_dir>/specs/<run_id>.json` and `runner.py start` it; release the lock
   (the runner holds its own host lock and run lock from here on);
6. wait with re-attach (`wait_run`): `runner.py wait RUN_ID --timeout CHUNK` in bounded chunks;
   a dropped connection, a killed sshd or a timed-out command closes the transport and is
   retried (fresh connection, `runner.py status` then `wait` again) until the host has been
   unreachable for `reconnect_timeout_s` (default: the inventory's reboot.up_timeout); then
   the host is reported `quarantined` with the reason. The run itself continues host-side:
   the runner is detached from SSH, and `bench hosts collect HOST RUN_ID` picks it up later;
7. collect: tar the bundle dir on the host, get it, unpack it into
   `<data_dir>/bundles/<host>/<run_id>/` (member names checked; unpacked in a temp dir and
   renamed into place), verify its manifest (bench.judge.bundle.verify);
8. optionally ingest it into the store (bench.store.ingest).

Results are dicts carrying errors as data: {host, run_id, ok, stage (the last one entered),
quarantined, quarantine_reason, error, status (the runner's final status.json), bundle,
figures, ingest, reconnects, events (lost / reattached, with times), timings (seconds since
the end of the preflight at which each stage ended), preflight_s, seconds}.

Pool choice: a small Python-stdlib writer (`POOL_SCRIPT`) sent as `python3 -c` rather than a
new agent subcommand. Hosts already need python3 for the runner, the agent's source hash and
build stay untouched, and the writer is I/O bound either way (8 MiB chunks of getrandom bytes,
well above a GB/s, so a 1.45 TB pool is device-limited, not writer-limited). It follows
docs/formats.md (exact 32-byte header, then pseudo-random bytes that are really written), is
resumable (a file with the right size and header is kept; each file is written to a temp name
and renamed), marks pool.json complete only at the end, and refuses a directory holding a
different pool or anything that is not a pool.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from bench.errors import (BenchError, CommandFailed, CommandTimeout, HostError, InputError,
                          SafetyError, Unreachable)
from bench.matrix.runspec import PlanInfo, RunOptions, build_spec, check_run_id

RUNNER = "agents/runner.py"


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_data_dir() -> Path:
    env = os.environ.get("BENCH_DATA_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "bench"


def _error(exc: BaseException) -> dict:
    d = {"type": type(exc).__name__, "message": getattr(exc, "message", str(exc)),
         "hint": getattr(exc, "hint", None)}
    if isinstance(exc, CommandFailed):
        d["output"] = (exc.stderr or "")[-2000:]
    return d


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if isinstance(v, dict):
            return v
    return None


# plans ------------------------------------------------------------------------------------------

def plan_from_trace_file(trace: Path, k: int | None = None, data_dir: Path | None = None
                         ) -> tuple[PlanInfo, Path]:
    """Parse a trace, write its plan into <data_dir>/plans/<sha256>.bin; (PlanInfo, path)."""
    from bench.plan.planfile import encode, plan_from_trace
    from bench.trace.parse import parse_trace
    trace = Path(trace)
    if not trace.is_file():
        raise InputError(f"{trace}: no such trace file")
    raw = trace.read_bytes()
    plan = plan_from_trace(parse_trace(trace, k=k),
                           meta={"trace": trace.name,
                                 "trace_sha256": hashlib.sha256(raw).hexdigest()})
    data = encode(plan)
    sha = hashlib.sha256(data).hexdigest()
    d = Path(data_dir or default_data_dir()) / "plans"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{sha}.bin"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    info = PlanInfo(sha256=sha, layers=plan.layers, experts_per_layer=plan.experts_per_layer,
                    expert_bytes=plan.expert_bytes, iterations=len(plan.iterations),
                    trace=trace.name, trace_sha256=hashlib.sha256(raw).hexdigest())
    return info, path


def remote_sha256(t, path: str) -> str | None:
    r = t.run(["sha256sum", path], timeout=300, check=False)
    return r.stdout.split()[0] if r.rc == 0 and r.stdout.strip() else None


def ensure_file(t, local: Path, remote: str, sha: str) -> str:
    """Put local to remote unless remote already hashes to sha: 'present' | 'sent'."""
    if remote_sha256(t, remote) == sha:
        return "present"
    t.run(["mkdir", "-p", os.path.dirname(remote)], timeout=30)
    tmp = f"{remote}.tmp"
    t.put(Path(local), tmp)
    if remote_sha256(t, tmp) != sha:
        t.run(["rm", "-f", tmp], timeout=30, check=False)
        raise HostError(t.host, f"{remote}: the copy does not hash to {sha} (transfer damaged)")
    t.run(["mv", "-f", tmp, remote], timeout=30)
    return "sent"


# pool ---------------------------------------------------------------------------------------

POOL_SCRIPT = r'''
import json, os, struct, sys, time
d, L, E, S, seed, tmpl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
H = struct.Struct("<8sIIQQ"); MAGIC = b"BXPERT\0\0"; CHUNK = 8 << 20
want = {"layers": L, "experts_per_layer": E, "expert_bytes": S, "path": tmpl, "seed": seed, "format": 1}
man = os.path.join(d, "pool.json")
def out(o, rc=0):
    print(json.dumps(o)); sys.exit(rc)
def manifest(complete):
    tmp = man + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(dict(want, complete=complete), sort_keys=True) + "\n")
    os.replace(tmp, man)
t0 = time.monotonic()
if os.path.exists(man):
    try:
        old = json.load(open(man))
        have = {"layers": int(old["layers"]), "experts_per_layer": int(old["experts_per_layer"]),
                "expert_bytes": int(old["expert_bytes"]), "path": old.get("path", "L{layer:03d}/E{expert:04d}.bin"),
                "seed": int(old.get("seed", 0)), "format": int(old.get("format", 1))}
    except (OSError, ValueError, KeyError, TypeError) as e:
        out({"ok": False, "reason": "%s: unreadable pool manifest (%s); refusing to touch it" % (man, e)}, 3)
    if have != want:
        out({"ok": False, "reason": "%s holds a different pool (%dx%dx%d B, seed %d, path %s); refusing to overwrite it"
             % (d, have["layers"], have["experts_per_layer"], have["expert_bytes"], have["seed"], have["path"]), "have": have}, 3)
    if old.get("complete") is True:
        out({"ok": True, "status": "present", "written": 0, "kept": L * E, "bytes": L * E * S, "seconds": 0.0})
elif os.path.isdir(d) and os.listdir(d):
    out({"ok": False, "reason": "%s is not empty and holds no pool.json; refusing to write into it" % d}, 3)
os.makedirs(d, exist_ok=True)
manifest(False)
written = kept = 0
for layer in range(L):
    for expert in range(E):
        p = os.path.join(d, tmpl.format(layer=layer, expert=expert))
        head = H.pack(MAGIC, layer, expert, S, seed)
        try:
            if os.path.getsize(p) == S:
                with open(p, "rb") as f:
                    if f.read(H.size) == head:
                        kept += 1
                        continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = p + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            left = S - H.size
            while left > 0:
                n = min(left, CHUNK)
                f.write(os.urandom(n))
                left -= n
        os.replace(tmp, p)
        written += 1
os.sync()
manifest(True)
os.sync()
out({"ok": True, "status": "made" if not kept else "resumed", "written": written, "kept": kept,
     "bytes": L * E * S, "seconds": round(time.monotonic() - t0, 3)})
'''

POOL_TEMPLATE = "L{layer:03d}/E{expert:04d}.bin"


def ensure_pool(t, host, geometry: tuple[int, int, int], seed: int = 0,
                timeout: float | None = None) -> dict:
    """Make (or resume, or find) the pool of `geometry` = (layers, experts, expert_bytes) in
    host.pool_dir. Raises HostError when the directory holds a different pool."""
    layers, experts, size = geometry
    if timeout is None:
        timeout = 120 + layers * experts * size / 50e6   # >= 50 MB/s
    r = t.run(["python3", "-c", POOL_SCRIPT, host.pool_dir, str(layers), str(experts), str(size),
               str(seed), POOL_TEMPLATE], timeout=timeout, check=False)
    res = _last_json(r.stdout)
    if res is None:
        raise CommandFailed(host.name, ["python3", "-c", "<pool writer>", host.pool_dir], r.rc,
                            r.stderr or r.stdout)
    if not res.get("ok"):
        raise HostError(host.name, f"pool: {res.get('reason')}",
                        "point paths.pool_dir at another directory, or remove that pool "
                        "on the host if it is no longer needed")
    return res


# runner -------------------------------------------------------------------------------------

def runner_argv(host, *args: str) -> list[str]:
    return ["python3", f"{host.work_dir}/{RUNNER}", *args, "--work-dir", host.work_dir]


def start_run(t, host, spec: dict) -> dict:
    """Put spec.json and start the runner (which detaches). Returns its JSON answer."""
    rid = spec["run_id"]
    remote = f"{host.work_dir}/specs/{rid}.json"
    t.run(["mkdir", "-p", f"{host.work_dir}/specs"], timeout=30)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        fh.write(json.dumps(spec, indent=1, sort_keys=True))
        local = fh.name
    try:
        t.put(Path(local), remote)
    finally:
        os.unlink(local)
    r = t.run(runner_argv(host, "start", "--spec", remote), timeout=120, check=False)
    res = _last_json(r.stdout)
    if res is None:
        raise CommandFailed(host.name, ["runner.py", "start"], r.rc, r.stderr or r.stdout)
    if r.rc == 2:
        raise HostError(host.name, f"the runner refused the spec: {res.get('reason')}",
                        "the host disagrees with what the controller probed; re-probe it")
    if not res.get("ok"):
        raise HostError(host.name, f"runner start: {res.get('reason') or res}",
                        "a run with this id exists with a different spec: choose a new --run-id")
    return res


class Quarantined(HostError):
    """The host did not come back within its timeout."""


def wait_run(host, run_id: str, connect: Callable[[], object], *, transport=None,
             timeout_s: float = 6 * 3600.0, reconnect_timeout_s: float | None = None,
             chunk_s: float = 20.0, retry_s: float = 1.0, log: list | None = None,
             on_status: Callable[[dict], None] | None = None) -> dict:
    """Wait for a run to end, re-attaching across dropped connections. Returns
    {status, reconnects}; raises Quarantined when the host stayed unreachable longer than
    reconnect_timeout_s, CommandTimeout when the run outlived timeout_s. `on_status` gets the
    runner's status (phase, live progress) after every chunk that did not end the run."""
    if reconnect_timeout_s is None:
        reconnect_timeout_s = host.reboot.up_timeout
    log = log if log is not None else []
    t = transport
    t0 = time.monotonic()
    last_contact = t0
    reconnects = 0
    fresh = False
    last_error = None
    while True:
        now = time.monotonic()
        if now - t0 > timeout_s:
            raise CommandTimeout(host.name, f"run {run_id} did not end within {timeout_s:.0f}s",
                                 f"it may still be running host-side: `bench hosts collect "
                                 f"{host.name} {run_id}` later")
        try:
            if t is None:
                t = connect()
                reconnects += 1
                fresh = True
            if fresh:
                r = t.run(runner_argv(host, "status", run_id), timeout=60, check=False)
                if r.rc < 0:
                    raise Unreachable(host.name, "the connection dropped during `runner.py status`")
                st = _last_json(r.stdout) or {}
                log.append({"t": now_iso(), "event": "reattached", "phase": st.get("phase")})
                fresh = False
            chunk = max(1.0, min(chunk_s, timeout_s - (time.monotonic() - t0)))
            r = t.run(runner_argv(host, "wait", run_id, "--timeout", f"{chunk:.0f}"),
                      timeout=chunk + 60, check=False)
            if r.rc < 0:
                # the channel closed without an exit status: the session (or sshd) died
                raise Unreachable(host.name, "the connection dropped during `runner.py wait`")
            last_contact = time.monotonic()
            st = _last_json(r.stdout)
            if r.rc in (0, 1) and st is not None and st.get("phase") in ("done", "failed"):
                return {"status": st, "reconnects": reconnects, "transport": t}
            if r.rc == 3:
                if on_status is not None and st is not None:
                    on_status(st)
                continue
            raise HostError(host.name, f"runner.py wait {run_id} exited {r.rc}: "
                            f"{(st or {}).get('reason') or r.stderr.strip()[-300:]}")
        except (Unreachable, CommandTimeout) as exc:
            last_error = exc
            log.append({"t": now_iso(), "event": "lost", "error": getattr(exc, "message", str(exc))})
            if t is not None:
                try:
                    t.close()
                except Exception:  # noqa: BLE001
                    pass
            t = None
            if time.monotonic() - last_contact > reconnect_timeout_s:
                raise Quarantined(
                    host.name, f"unreachable for {time.monotonic() - last_contact:.0f}s "
                    f"(> {reconnect_timeout_s:.0f}s) while waiting for run {run_id}; last error: "
                    f"{getattr(last_error, 'message', last_error)}",
                    f"when the host is back: `bench hosts collect {host.name} {run_id}`") from None
            time.sleep(retry_s)


# collect ------------------------------------------------------------------------------------

def bundle_path(data_dir: Path, host: str, run_id: str) -> Path:
    return Path(data_dir) / "bundles" / host / run_id


def _safe_extract(tar: tarfile.TarFile, dest: Path, run_id: str) -> None:
    for m in tar.getmembers():
        parts = Path(m.name).parts
        if not parts or parts[0] != run_id or m.name.startswith("/") or ".." in parts:
            raise HostError("collect", f"unexpected member {m.name!r} in the bundle archive")
        if not (m.isfile() or m.isdir()):
            raise HostError("collect", f"bundle archive member {m.name!r} is not a file")
    tar.extractall(dest, filter="data")


def collect(t, host, run_id: str, data_dir: Path) -> dict:
    """Copy <work_dir>/runs/<run_id>/ to <data_dir>/bundles/<host>/<run_id>/ and verify its
    manifest. An already collected bundle that verifies is kept ('present')."""
    from bench.judge.bundle import BundleError, read_dir, verify
    check_run_id(run_id)
    dest = bundle_path(data_dir, host.name, run_id)
    if dest.is_dir():
        try:
            m = verify(read_dir(dest), str(dest))
            return {"bundle": str(dest), "status": "present", "files": len(m["files"])}
        except BundleError:
            shutil.rmtree(dest)
    src = f"{host.work_dir}/runs/{run_id}"
    r = t.run(["test", "-f", f"{src}/manifest.json"], timeout=30, check=False)
    if r.rc != 0:
        raise HostError(host.name, f"{src}/manifest.json does not exist: the run has not "
                        "finished writing its bundle (or no such run)",
                        f"check `runner.py status {run_id}` on the host; collect again later")
    remote_tar = f"{host.work_dir}/collect/{run_id}.tar.gz"
    t.run(["mkdir", "-p", f"{host.work_dir}/collect"], timeout=30)
    t.run(["tar", "-czf", remote_tar, "-C", f"{host.work_dir}/runs", run_id], timeout=600)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{run_id}-", dir=dest.parent))
    try:
        local_tar = tmpdir / "bundle.tar.gz"
        t.get(remote_tar, local_tar)
        with tarfile.open(local_tar, "r:gz") as tar:
            _safe_extract(tar, tmpdir, run_id)
        m = verify(read_dir(tmpdir / run_id), f"{host.name}:{src}")
        (tmpdir / run_id).rename(dest)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        t.run(["rm", "-f", remote_tar], timeout=30, check=False)
    return {"bundle": str(dest), "status": "collected", "files": len(m["files"])}


def figures(bundle_dir: Path) -> dict:
    """The key figures of a collected bundle."""
    from bench.judge.bundle import load, read_dir
    from bench.judge.measured import devices, metrics
    b = load(read_dir(bundle_dir), str(bundle_dir))
    m = metrics(b)
    dev = m["device_bytes_per_iteration"]
    return {"iterations": m["iterations"], "iteration_median_s": m["iteration_median_s"],
            "device_gb_per_iteration": None if dev is None else dev / 1e9,
            "logical_gb_per_iteration": None if m["logical_bytes_per_iteration"] is None
            else m["logical_bytes_per_iteration"] / 1e9,
            "device": (devices(b) or [None])[0], "runner_ok": b.status.get("ok"),
            "runner_reason": b.status.get("reason")}


_INGEST_LOCK = threading.Lock()


def ingest(db_url: str | None, bundle_dir: Path, plan_path: Path | None) -> dict:
    """Ingest one bundle (serialised across this process's host threads: one SQLite writer)."""
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    with _INGEST_LOCK:
        store = open_store(db_url)
        try:
            return ingest_bundle(store, bundle_dir, plan=plan_path)
        finally:
            store.close()


# one host, many hosts -------------------------------------------------------------------------

def preflight(host, cell, plan: PlanInfo, run_id: str, options: RunOptions, t) -> dict:
    """Read-only: probe the host and build its spec (InputError/SafetyError when the cell
    does not fit it). Returns {facts, spec}."""
    from bench.hosts.deploy import REPO, source_hash
    from bench.hosts.facts import probe
    pr = probe(t, host)
    if pr.error:
        raise pr.exception or HostError(host.name, pr.error["message"])
    facts = pr.facts
    if not facts.get("python3"):
        raise HostError(host.name, "python3 with its standard library is not installed (the "
                        "runner needs json, hashlib, fcntl, subprocess)",
                        "install python3 (>= 3.8; Debian's python3-minimal is not enough)")
    opts = replace(options, source_sha256=source_hash(REPO / "native"), created=now_iso())
    return {"facts": facts,
            "spec": build_spec(cell, host, plan, run_id=run_id, facts=facts, options=opts)}


def _new_result(host, cell, run_id: str) -> dict:
    return {"host": host.name, "run_id": run_id, "cell": str(getattr(cell, "name", cell)),
            "ok": False, "stage": "preflight", "quarantined": False, "quarantine_reason": None,
            "error": None, "status": None, "bundle": None, "figures": None, "ingest": None,
            "reconnects": 0, "events": [], "timings": {}, "seconds": 0.0}


def execute(host, spec: dict, plan: PlanInfo, plan_path: Path, t, *, transport_for: Callable,
            res: dict, data_dir: Path | None = None, db_url: str | None = None,
            do_ingest: bool = True, timeout_s: float = 6 * 3600.0,
            reconnect_timeout_s: float | None = None, chunk_s: float = 20.0,
            on_started: Callable[[str, dict], None] | None = None) -> dict:
    """Deploy, plan, pool, start, wait (re-attach), collect, ingest; never raises."""
    from bench.hosts.deploy import deploy
    from bench.hosts.lock import HostLock
    data_dir = Path(data_dir or default_data_dir())
    run_id = spec["run_id"]
    t0 = time.monotonic()

    def mark(stage):
        res["timings"][res["stage"]] = round(time.monotonic() - t0, 3)
        res["stage"] = stage

    try:
        res["stage"] = "lock"
        with HostLock(t, host, purpose=f"bench run {run_id}"):
            mark("deploy")
            res["deploy"] = deploy(t, host)["status"]
            mark("plan")
            res["plan"] = ensure_file(t, plan_path, f"{host.work_dir}/{plan.remote_path}",
                                      plan.sha256)
            mark("pool")
            res["pool"] = ensure_pool(t, host, plan.geometry)
            mark("start")
            started = start_run(t, host, spec)
            res["runner"] = {k: started.get(k) for k in ("state", "pid", "bundle")}
        if on_started is not None:
            on_started(host.name, started)
        mark("wait")
        w = wait_run(host, run_id, lambda: transport_for(host), transport=t, timeout_s=timeout_s,
                     reconnect_timeout_s=reconnect_timeout_s, chunk_s=chunk_s,
                     log=res["events"])
        t = w["transport"]
        res["status"] = w["status"]
        res["reconnects"] = w["reconnects"]
        mark("collect")
        res["collect"] = collect(t, host, run_id, data_dir)
        res["bundle"] = res["collect"]["bundle"]
        res["figures"] = figures(Path(res["bundle"]))
        if do_ingest:
            mark("ingest")
            res["ingest"] = ingest(db_url, Path(res["bundle"]), plan_path)
        mark("done")
        res["ok"] = bool(res["status"].get("ok"))
        if not res["ok"]:
            res["error"] = {"type": "RunFailed", "message": f"{host.name}: run {run_id} failed "
                            f"host-side: {res['status'].get('reason')}", "hint":
                            f"see {res['bundle']}/runner.log"}
    except Quarantined as exc:
        res["quarantined"] = True
        res["quarantine_reason"] = exc.message
        res["error"] = _error(exc)
    except Exception as exc:  # noqa: BLE001 - one host's failure is data
        res["error"] = _error(exc)
    finally:
        if t is not None:
            try:
                t.close()
            except Exception:  # noqa: BLE001
                pass
        res["seconds"] = round(res.get("preflight_s", 0.0) + time.monotonic() - t0, 3)
    return res


def host_run_ids(run_id: str, names: list[str]) -> dict[str, str]:
    """The run id on each host: the id itself for one host, `<id>-<host>` for several (run ids
    are unique in the store)."""
    check_run_id(run_id)
    if not names:
        raise InputError("no host given", "pass --host HOST[,HOST...]")
    if len(set(names)) != len(names):
        raise InputError(f"host listed twice: {', '.join(names)}", "name each host once")
    ids = {n: run_id if len(names) == 1 else f"{run_id}-{n}" for n in names}
    for rid in ids.values():
        if len(rid) > 64:
            raise InputError(f"run id {rid!r} is longer than 64 characters",
                             "choose a shorter --run-id (the host name is appended when "
                             "several hosts run)")
        check_run_id(rid)
    return ids


def run_hosts(hosts, cell, plan: PlanInfo, plan_path: Path, run_id: str, *,
              options: RunOptions = RunOptions(), transport_for: Callable | None = None,
              **kw) -> list[dict]:
    """One cell on every host in parallel, results in the hosts' order.

    Bad input touches no host: the cell, the run id and the inventory limits are checked
    first (pure), then every host is probed (read-only) and its spec built; an InputError or
    SafetyError for any host (capacity above its MemTotal, an MGLRU cell on a kernel without
    it...) raises before anything is written anywhere. An unreachable host is an error in its
    result, the others go on."""
    from bench.matrix.cells import parse_cell
    from bench.hosts.facts import run_parallel
    if transport_for is None:
        from bench.hosts.ssh import transport_for
    cell = parse_cell(cell) if isinstance(cell, str) else cell
    hosts = list(hosts)
    ids = host_run_ids(run_id, [h.name for h in hosts])
    for h in hosts:
        build_spec(cell, h, plan, run_id=ids[h.name], facts=None, options=options)

    def pre(h):
        res = _new_result(h, cell, ids[h.name])
        t0 = time.monotonic()
        t = None
        try:
            t = transport_for(h)
            return res, preflight(h, cell, plan, ids[h.name], options, t), t
        except (InputError, SafetyError) as exc:
            if t is not None:
                t.close()
            return res, exc, None
        except Exception as exc:  # noqa: BLE001
            if t is not None:
                t.close()
            res["error"] = _error(exc)
            return res, None, None
        finally:
            res["preflight_s"] = round(time.monotonic() - t0, 3)

    pres = run_parallel(list(hosts), pre)
    bad = [p[1] for p in pres if isinstance(p[1], BenchError)]
    if bad:
        for _res, _pf, t in pres:
            if t is not None:
                t.close()
        raise bad[0]

    def one(i):
        res, pf, t = pres[i]
        if pf is None:
            res["seconds"] = res["preflight_s"]
            return res
        return execute(hosts[i], pf["spec"], plan, plan_path, t, transport_for=transport_for,
                       res=res, **kw)

    return run_parallel(list(range(len(hosts))), one)


def collect_run(host, run_id: str, *, transport_for: Callable | None = None,
                data_dir: Path | None = None) -> dict:
    """`bench hosts collect`: the runner's status, then the bundle if the run ended."""
    if transport_for is None:
        from bench.hosts.ssh import transport_for
    check_run_id(run_id)
    t = transport_for(host)
    try:
        r = t.run(runner_argv(host, "status", run_id), timeout=60, check=False)
        st = _last_json(r.stdout)
        if st is None or r.rc != 0 and st.get("reason") == "no such run":
            raise HostError(host.name, f"no run {run_id} in {host.work_dir}/runs",
                            "check the run id (`ls runs/` in the host's work_dir)")
        if st.get("phase") not in ("done", "failed"):
            return {"host": host.name, "run_id": run_id, "status": st, "bundle": None,
                    "collected": False, "figures": None}
        c = collect(t, host, run_id, Path(data_dir or default_data_dir()))
        return {"host": host.name, "run_id": run_id, "status": st, "bundle": c["bundle"],
                "collected": True, "figures": figures(Path(c["bundle"]))}
    finally:
        t.close()


# bandwidth ------------------------------------------------------------------------------------

def all_experts_plan(layers: int, experts: int, expert_bytes: int, max_bytes: int = 0):
    """A replay plan of one iteration reading every pool file once (layer by layer, each
    router pass one layer's experts); with max_bytes, only the first experts of each layer
    so that about max_bytes are read."""
    from bench.plan.planfile import REPLAY, Plan
    from bench.trace.parse import NORMAL, Iteration, Pass
    per_layer = experts
    if max_bytes:
        per_layer = max(1, min(experts, max_bytes // (expert_bytes * layers)))
    passes = tuple(Pass(layer, tuple(range(per_layer))) for layer in range(layers))
    it = Iteration(0, NORMAL, 1, passes)
    return Plan(REPLAY, layers, experts, expert_bytes, (it,),
                {"purpose": "bandwidth", "experts_per_layer_read": per_layer})


def host_fingerprint(facts: dict, agent_sha256: str | None) -> dict:
    """The fingerprint of bench.judge.measured.fingerprint, from probed facts instead of a bundle."""
    from types import SimpleNamespace

    from bench.judge.measured import fingerprint
    from bench.matrix.runspec import CONTROLLER_VERSION
    return fingerprint(SimpleNamespace(
        host={"kernel": facts.get("kernel"), "arch": facts.get("arch"),
              "cmdline": facts.get("cmdline") or ""},
        spec={"agent": {"source_sha256": agent_sha256}, "controller_version": CONTROLLER_VERSION}))


BW_SCRIPT = ('mkdir -p "$1" && sync && echo 3 > /proc/sys/vm/drop_caches && shift && exec "$@"')


def measure_bandwidth(host, *, transport_for: Callable | None = None, threads: int = 8,
                      max_bytes: int = 0, data_dir: Path | None = None) -> dict:
    """Cold and warm read bandwidth of the host's pool with the agent: drop_caches, then a
    2-pass replay of a plan reading every pool file once (pass 0 cold, pass 1 warm); device
    bytes are the pool device's sectors read between the agent's own pass snapshots. Holds
    the controller's host lock and the runner's host.lock (never during a run)."""
    from bench.judge.counters import counters, device_bytes
    from bench.hosts.deploy import deploy
    from bench.hosts.facts import probe
    from bench.hosts.lock import HostLock
    from bench.plan.planfile import encode
    if transport_for is None:
        from bench.hosts.ssh import transport_for
    if not 1 <= threads <= 1024:
        raise InputError(f"threads must be 1..1024, got {threads}")
    t = transport_for(host)
    try:
        with HostLock(t, host, purpose="bench hosts bandwidth"):
            pr = probe(t, host)
            if pr.error:
                raise pr.exception or HostError(host.name, pr.error["message"])
            facts = pr.facts
            dep = deploy(t, host)
            r = t.run(["cat", f"{host.pool_dir}/pool.json"], timeout=30, check=False)
            try:
                pj = json.loads(r.stdout)
                geo = (int(pj["layers"]), int(pj["experts_per_layer"]), int(pj["expert_bytes"]))
            except (ValueError, KeyError, TypeError):
                raise HostError(host.name, f"{host.pool_dir}/pool.json is missing or unreadable",
                                "make the pool first (a `bench run` makes it)") from None
            if pj.get("complete") is not True:
                raise HostError(host.name, f"the pool in {host.pool_dir} is incomplete",
                                "resume it (a `bench run` with the same geometry does)")
            plan = all_experts_plan(*geo, max_bytes=max_bytes)
            data = encode(plan)
            sha = hashlib.sha256(data).hexdigest()
            with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as fh:
                fh.write(data)
                local = Path(fh.name)
            try:
                remote_plan = f"{host.work_dir}/plans/{sha}.bin"
                ensure_file(t, local, remote_plan, sha)
            finally:
                local.unlink()
            out = f"{host.work_dir}/bandwidth/{int(time.time() * 1000)}"
            argv = ["flock", "--nonblock", "--conflict-exit-code", "75",
                    f"{host.work_dir}/host.lock", "sh", "-c", BW_SCRIPT, "bench-bw", out,
                    f"{host.work_dir}/native/bench-agent", "replay", "--pool", host.pool_dir,
                    "--plan", remote_plan, "--threads", str(threads), "--passes", "2",
                    "--snapshot-dir", f"{out}/snapshots", "--snapshot-file", "/proc/diskstats",
                    "--out", f"{out}/agent.jsonl"]
            per_pass = plan.logical_bytes
            try:
                r = t.run(argv, timeout=300 + 2 * per_pass / 20e6, check=False)
                if r.rc == 75:
                    raise HostError(host.name, "a run holds the host (runner host.lock)",
                                    "measure bandwidth when no run is going")
                if r.rc != 0:
                    raise CommandFailed(host.name, ["bench-agent", "replay", "(bandwidth)"],
                                        r.rc, r.stderr or r.stdout)
                texts = {}
                for name in ("pass0-start", "pass0-end", "pass1-start", "pass1-end"):
                    texts[name] = t.run(["cat", f"{out}/snapshots/{name}/proc_diskstats"],
                                        timeout=30).stdout
                agent_out = t.run(["cat", f"{out}/agent.jsonl"], timeout=30).stdout
            finally:
                t.run(["rm", "-rf", out], timeout=60, check=False)
    finally:
        t.close()
    recs = [json.loads(line) for line in agent_out.splitlines() if line.strip()]
    summary = next((x for x in recs if x.get("summary")), {})
    walls = summary.get("pass_wall_ns") or [
        sum(x["wall_ns"] for x in recs if x.get("pass") == p and "wall_ns" in x) for p in (0, 1)]
    dev = facts.get("pool_device") or {}
    devs = ([dev["name"]] if dev.get("name") else []) + \
        [d for d in dev.get("leaves") or [] if d != dev.get("name")]
    snaps = {k: counters({"proc_diskstats": v}, devs) for k, v in texts.items()}

    def one(p):
        secs = walls[p] / 1e9
        db = device_bytes(snaps[f"pass{p}-start"], snaps[f"pass{p}-end"], devs)
        return {"seconds": secs, "bytes": per_pass, "device_bytes": db,
                "gb_per_s": per_pass / secs / 1e9 if secs else None,
                "device_gb_per_s": db / secs / 1e9 if secs and db is not None else None}

    agent_sha = (dep.get("agent") or {}).get("source_sha256") or dep.get("source_sha256")
    return {"host": host.name, "boot_id": facts.get("boot_id"), "cmdline": facts.get("cmdline"),
            "mem_total_bytes": facts.get("mem_total_bytes"), "mglru": facts.get("mglru"),
            "fingerprint": host_fingerprint(facts, agent_sha),
            "device": devs[0] if devs else None, "devices": devs, "pool_dir": host.pool_dir,
            "geometry": list(geo), "threads": threads, "bytes_per_pass": per_pass,
            "experts_per_layer_read": plan.meta["experts_per_layer_read"],
            "cold": one(0), "warm": one(1), "agent_ok": summary.get("ok"),
            "measured_at": now_iso()}


__all__ = ["BenchError", "PlanInfo", "RunOptions", "collect", "collect_run", "ensure_pool",
           "figures", "measure_bandwidth", "plan_from_trace_file", "run_hosts", "wait_run"]
