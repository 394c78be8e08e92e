#!/usr/bin/env python3
"""Benchmark (not a timed test): one campaign over 2, 16 and 64 netns-lab hosts, on SQLite and
then on PostgreSQL, side by side.

Standalone, as root: `nice -n 19 .venv/bin/python tests/perf/campaign_scale.py [--hosts 2,16,64]
[--runs 2] [--backends sqlite,postgres] [--json]`. It brings up one netns lab of max(--hosts)
hosts (prefix/subnet from --prefix/--subnet, default $BENCH_FLEET_PREFIX/$BENCH_FLEET_SUBNET or
bsc/10.200.94) in a temporary directory, ships the agent to its first host with the real
deploy (one build) and copies the built agent to the others (untimed: a campaign's first run
on a fresh host otherwise builds the agent there), then for each backend and each size runs
one campaign of a `none`/`classic` cell, --runs repetitions on each of the first N hosts
(placement each; the `tiny` synth workload re-sized to a few MiB and a few hundred tokens, one
agent thread, so that 64 replays fit on a small box), with the real Executor, in this process.
A throwaway PostgreSQL server (initdb + pg_ctl as the postgres user, unix socket only, as
tests/local/store's fixture) serves the PostgreSQL rows; the lab, the server and the
temporary directory are always taken down.

Per campaign it prints:
- runs: clean verdicts / planned; campaign wall; controller CPU (this process, user + sys,
  every thread: workers, SSH transports, ingest, the live view sampler), CPU per run and
  cores (CPU / wall); peak RSS;
- overhead per run = run wall (journal: leaving `planned` to the verdict) - replay (the
  agent's timed passes), median and [min, max], over all runs and over the steady ones
  (each host's first run in a campaign also checks agent, plan and pool);
- database: write statements (INSERT/UPDATE/DELETE) and their total time, slow writes
  (write statements that took over --wait-ms: on these small rows, waits for the database's
  write lock (SQLite's busy handler, taken at a transaction's first write under WAL,
  PostgreSQL's row locks) and, on a busy machine, for a CPU: at 64 netns hosts on 2 cores,
  PostgreSQL's active backends sampled from pg_stat_activity mostly waited on the client
  (ClientRead: the controller's thread not yet scheduled), rarely on a lock) and lock errors
  (`database is locked` and the like). Counted with SQLAlchemy engine events on every engine
  this process makes (ingest opens its own);
- the live view's refresh cost: every second a sampler thread does what `bench campaign
  run`'s live view does (bench.execute.campaign.watch.progress, then
  bench.results.campaign_views.campaign_renderable rendered to an in-memory terminal):
  the read + fold and the render, median and max milliseconds, and its CPU share.

Goals (issue 15): overhead per run at 64 hosts within 1.5x of 2 hosts; controller under one
core.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pwd
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE.parent))

import campaign_overhead as co  # noqa: E402
from rich.console import Console  # noqa: E402
from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import Engine  # noqa: E402

from bench.cli.schedule import build_plan  # noqa: E402
from bench.execute.campaign.executor import Executor  # noqa: E402
from bench.execute.campaign.record import Settings, create  # noqa: E402
from bench.execute.campaign.watch import progress  # noqa: E402
from bench.hosts.deploy import deploy  # noqa: E402
from bench.hosts.inventory import load_inventory  # noqa: E402
from bench.hosts.ssh import transport_for  # noqa: E402
from bench.lab.netns import Lab, missing_capabilities  # noqa: E402
from bench.results.campaign_views import campaign_renderable  # noqa: E402
from bench.store.campaigns import campaign_row  # noqa: E402
from bench.store.db import open_store  # noqa: E402

WRITES = ("INSERT", "UPDATE", "DELETE")


class DbStats:
    """Write statements, their time, lock waits and lock errors, from engine events (every
    engine of this process)."""

    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.writes = 0
            self.write_s = 0.0
            self.waits = 0
            self.wait_total_s = 0.0
            self.wait_max_s = 0.0
            self.errors = 0

    def _add(self, dt: float) -> None:
        with self.lock:
            self.writes += 1
            self.write_s += dt
            if dt > self.wait_s:
                self.waits += 1
                self.wait_total_s += dt
                self.wait_max_s = max(self.wait_max_s, dt)

    def install(self) -> None:
        @event.listens_for(Engine, "before_cursor_execute")
        def before(conn, cursor, statement, params, context, executemany):
            conn.info.setdefault("bench_t0", []).append(time.perf_counter())

        @event.listens_for(Engine, "after_cursor_execute")
        def after(conn, cursor, statement, params, context, executemany):
            t0 = conn.info["bench_t0"].pop()
            if statement.lstrip()[:6].upper() in WRITES:
                self._add(time.perf_counter() - t0)

        @event.listens_for(Engine, "handle_error")
        def error(ctx):
            text = str(ctx.original_exception).lower()
            if "locked" in text or "busy" in text or "deadlock" in text:
                with self.lock:
                    self.errors += 1
            stack = ctx.connection.info.get("bench_t0") if ctx.connection is not None else None
            if stack:
                stack.pop()

        @event.listens_for(Engine, "engine_connect")
        def connected(conn):
            conn.info.setdefault("bench_t0", [])

    def as_dict(self) -> dict:
        with self.lock:
            return {"write_statements": self.writes, "write_s": round(self.write_s, 4),
                    "lock_waits": self.waits, "lock_wait_s": round(self.wait_total_s, 4),
                    "lock_wait_max_s": round(self.wait_max_s, 4),
                    "lock_errors": self.errors}


def view_sampler(store, cid: str, stop: threading.Event, out: list) -> None:
    """What the live view does each tick: read + fold the campaign, render it."""
    while not stop.wait(1.0):
        c0, t0 = time.thread_time(), time.perf_counter()
        try:
            p = progress(store, cid)
        except Exception:  # noqa: BLE001 - a busy database: next tick, as the view does
            continue
        t1 = time.perf_counter()
        con = Console(file=io.StringIO(), width=200, force_terminal=True,
                      color_system="truecolor")
        con.print(campaign_renderable(p))
        out.append({"read_s": t1 - t0, "render_s": time.perf_counter() - t1,
                    "cpu_s": time.thread_time() - c0})


# ---------------------------------------------------------------------------- PostgreSQL

class PgServer:
    def __init__(self, base: Path):
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        initdb = found[-1] if found else (shutil.which("initdb") and Path(shutil.which("initdb")))
        if not initdb:
            raise SystemExit("postgresql server binaries not installed")
        self.bindir = Path(initdb).parent
        self.base = base
        self.pid: int | None = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.n = 0

    def as_pg(self, *argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                       capture_output=True, text=True)

    def start(self) -> None:
        pw = pwd.getpwnam("postgres")
        self.base.mkdir()
        os.chown(self.base, pw.pw_uid, pw.pw_gid)
        data = self.base / "data"
        self.as_pg(str(self.bindir / "initdb"), "-D", str(data), "-A", "trust", "-U",
                   "postgres")
        self.as_pg(str(self.bindir / "pg_ctl"), "-D", str(data), "-l", str(self.base / "log"),
                   "-w", "-o", f"-k {self.base} -p {self.port} -c listen_addresses='' "
                   "-c max_connections=400", "start")
        self.pid = int((data / "postmaster.pid").read_text().split()[0])

    def database(self) -> str:
        import psycopg
        self.n += 1
        name = f"bench_scale_{self.n}"
        with psycopg.connect(host=str(self.base), port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql+psycopg://postgres@/{name}?host={self.base}&port={self.port}"

    def stop(self) -> None:
        if self.pid is None:
            return
        os.kill(self.pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self.pid = None


# ---------------------------------------------------------------------------- one campaign

def seed_agents(lab: Lab, names: list[str]) -> None:
    """Untimed: the real deploy on the first host (one build), its result copied to the
    others' work dirs (what deploy would build there; its check then finds it current)."""
    inv = load_inventory(lab.hosts_dir)
    first = inv[names[0]]
    t = transport_for(first)
    try:
        deploy(t, first)
    finally:
        t.close()
    src = Path(first.work_dir)
    for n in names[1:]:
        dst = Path(inv[n].work_dir)
        for d in ("native", "agents"):
            shutil.copytree(src / d, dst / d, symlinks=True, dirs_exist_ok=True)


CTL_STEPS = ("boot_verified->deployed", "deployed->running", "collected->verdict")
CTL_HOST = ("start: ssh + runner accepted", "runner end -> collected (wait sees it, collect)")


def controller_side(r: dict) -> float | None:
    """The part of a run's overhead that is the controller's: preflight, lock and deploy
    check, starting the runner (until it accepted), noticing the end and collecting, ingest.
    The rest is the runner's host-side protocol (lock, clean, sync + drop caches, capacity,
    snapshots), which in a netns lab runs on this machine's CPUs too."""
    hs = r.get("host_side") or {}
    if any(k not in hs for k in CTL_HOST):
        return None
    return sum(r["steps"].get(k, 0.0) for k in CTL_STEPS) + sum(hs[k] for k in CTL_HOST)


def box_cpu() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine since boot, from /proc/stat (busy: every
    state but idle and iowait): every process, the lab's hosts as well as this controller."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return (sum(f) - idle) / hz, sum(f) / hz


def med_range(xs: list[float]) -> dict:
    if not xs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def batches(db: str) -> dict | None:
    """The ingest batches of this campaign's store (bench.execute.collect.GroupWrite, where
    the code measured has it)."""
    try:
        from bench.execute.collect import ingest_group
    except ImportError:
        return None
    sizes = ingest_group(db).batches
    return {"n": len(sizes), "max": max(sizes, default=0),
            "mean": sum(sizes) / len(sizes) if sizes else 0}


def one_campaign(a, tmp: Path, lab: Lab, names: list[str], db: str, tag: str,
                 stats: DbStats) -> dict:
    wdir = tmp / tag
    wdir.mkdir()
    matrix = wdir / "scale.toml"
    matrix.write_text(co.matrix_toml(a).replace("campaign-overhead", "campaign-scale"))
    cid = f"scale-{tag}-" + time.strftime("%H%M%S", time.gmtime())
    plan, exp, m = build_plan(str(matrix), names, lab.hosts_dir, 1, cid)
    settings = Settings(threads=a.threads, passes=a.passes, retries=0, data_dir=wdir / "data",
                        db_url=db, hosts_dir=lab.hosts_dir)
    store = open_store(db)
    reader = open_store(db, write=False)     # as bench.cli.schedule.run_live reads
    samples: list[dict] = []
    try:
        create(store, plan, exp, m, names, settings, str(matrix))
        stats.reset()
        stop = threading.Event()
        sampler = threading.Thread(target=view_sampler, args=(reader, cid, stop, samples),
                                   daemon=True)
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        b0 = box_cpu()
        t0 = time.time()
        sampler.start()
        Executor(store, cid, settings).run()
        elapsed = time.time() - t0
        b1 = box_cpu()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        stop.set()
        sampler.join()
        dbs = stats.as_dict()
        res = co.analyse(store, cid, wdir / "data", t0)
        state = campaign_row(store, cid).state
    finally:
        reader.close()
        store.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    runs = res["runs"]
    steady = [r for r in runs if not r["first_on_host"]]
    view_cpu = sum(s["cpu_s"] for s in samples)
    ctl = [controller_side(r) for r in runs]
    box = b1[0] - b0[0]
    return {"box": {"busy_s": box, "cores_busy": box / elapsed, "cpus": os.cpu_count(),
                    "rest_s": box - cpu, "rest_per_run_s": (box - cpu) / max(1, len(plan.runs)),
                    "busy_share": box / max(1e-9, b1[1] - b0[1])},
            "ingest_batches": batches(db),
            "backend": db.split(":")[0], "hosts": len(names), "state": state,
            "planned": len(plan.runs), "clean": len(runs), "bad": res["bad"][:5],
            "campaign_s": elapsed, "cpu_s": cpu, "cpu_per_run_s": cpu / max(1, len(plan.runs)),
            "cores": cpu / elapsed, "maxrss_mb": r1.ru_maxrss / 1024,
            "overhead_s": med_range([r["overhead_s"] for r in runs]),
            "steady_overhead_s": med_range([r["overhead_s"] for r in steady]),
            "replay_s": med_range([r["replay_s"] for r in runs]),
            "controller_side_s": med_range([c for c in ctl if c is not None]),
            "steps": {k: statistics.median([r["steps"].get(k, 0.0) for r in runs]) if runs
                      else None for k in co.STEPS},
            "host_side_s": {k: statistics.median([r["host_side"][k] for r in runs
                                                  if k in (r.get("host_side") or {})])
                            for k in sorted({k for r in runs for k in (r.get("host_side")
                                                                       or {})})},
            "db": dbs, "load_end": os.getloadavg(),
            "view": {"ticks": len(samples),
                     "read_ms": med_range([1000 * s["read_s"] for s in samples]),
                     "render_ms": med_range([1000 * s["render_s"] for s in samples]),
                     "cpu_s": view_cpu, "cpu_share": view_cpu / elapsed}}


# ---------------------------------------------------------------------------- the report

def mr(d: dict, scale: float = 1.0, p: int = 2) -> str:
    if d["median"] is None:
        return "-"
    return (f"{d['median'] * scale:.{p}f} [{d['min'] * scale:.{p}f}-"
            f"{d['max'] * scale:.{p}f}]")


ROWS = [
    ("runs clean/planned", lambda r: f"{r['clean']}/{r['planned']} {r['state']}"),
    ("load average at end", lambda r: " ".join(f"{x:.1f}" for x in r.get("load_end", ()))),
    ("campaign wall s", lambda r: f"{r['campaign_s']:.1f}"),
    ("controller CPU s", lambda r: f"{r['cpu_s']:.1f}"),
    ("CPU per run s", lambda r: f"{r['cpu_per_run_s']:.3f}"),
    ("cores (CPU/wall)", lambda r: f"{r['cores']:.2f}"),
    ("peak RSS MB", lambda r: f"{r['maxrss_mb']:.0f}"),
    ("box cores busy (all procs)", lambda r: f"{r['box']['cores_busy']:.2f} of {r['box']['cpus']}"
                                             if r.get("box") else "-"),
    ("lab+rest CPU per run s", lambda r: f"{r['box']['rest_per_run_s']:.3f}"
                                         if r.get("box") else "-"),
    ("replay s", lambda r: mr(r["replay_s"])),
    ("overhead/run s, all", lambda r: mr(r["overhead_s"])),
    ("overhead/run s, steady", lambda r: mr(r["steady_overhead_s"])),
    ("  controller's part s", lambda r: mr(r["controller_side_s"])),
    ("  preflight+deploy s", lambda r: f"{r['steps']['boot_verified->deployed'] or 0:.3f}"),
    ("  start+run+wait+collect s", lambda r: f"{r['steps']['running->collected'] or 0:.2f}"),
    ("  ingest s", lambda r: f"{r['steps']['collected->verdict'] or 0:.3f}"),
    ("ingest batches n/mean/max", lambda r: (f"{r['ingest_batches']['n']}/"
                                             f"{r['ingest_batches']['mean']:.1f}/"
                                             f"{r['ingest_batches']['max']}")
                                            if r.get("ingest_batches") else "-"),
    ("db write statements", lambda r: f"{r['db']['write_statements']} "
                                      f"({r['db']['write_s']:.2f} s)"),
    ("db writes over wait-ms", lambda r: f"{r['db']['lock_waits']} "
                                         f"({r['db']['lock_wait_s']:.2f} s, "
                                         f"max {1000 * r['db']['lock_wait_max_s']:.0f} ms)"),
    ("db lock errors", lambda r: str(r["db"]["lock_errors"])),
    ("view read+fold ms", lambda r: mr(r["view"]["read_ms"], p=0)),
    ("view render ms", lambda r: mr(r["view"]["render_ms"], p=0)),
    ("view CPU share", lambda r: f"{100 * r['view']['cpu_share']:.1f}%"),
]


def report(results: list[dict], a) -> None:
    print(f"\nnetns lab; {a.runs} run(s) per host; pool {a.layers}x{a.experts}x"
          f"{a.expert_bytes} B; {a.tokens} tokens, {a.passes} pass(es), {a.threads} thread(s); "
          f"kernel {os.uname().release}, {os.cpu_count()} CPUs; load average now "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("medians [min-max] over the campaign's runs; slow write = a write statement over "
          f"{a.wait_ms:g} ms")
    heads = [f"{r['backend'][:8]} x{r['hosts']}" for r in results]
    w = max(24, *(len(fn(r)) + 2 for r in results for _, fn in ROWS))
    print(f"{'':<27}" + "".join(f"{h:>{w}}" for h in heads))
    for label, fn in ROWS:
        print(f"{label:<27}" + "".join(f"{fn(r):>{w}}" for r in results))
    print()
    for backend in sorted({r["backend"] for r in results}):
        goal_lines(backend, {r["hosts"]: r for r in results if r["backend"] == backend})
    for r in results:
        for b in r["bad"]:
            print(f"  {r['backend']} x{r['hosts']}: {b['host']} {b['run_id']} {b['state']}: "
                  + " | ".join(b["journal"][-3:]))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def goal_lines(backend: str, rs: dict[int, dict]) -> None:
    """The issue's goals, as measured (never redefined): overhead per run at the largest size
    over the smallest (<= 1.5x) and the controller under one core; beside them, the same
    ratio for the controller's part of the overhead and for its CPU per run, and how busy
    the whole machine was (in a netns lab the hosts' runners, agents and sshds share its
    CPUs with the controller: what they take, the controller's threads wait for)."""
    lo, hi = min(rs), max(rs)
    a, b = rs[hi], rs[lo]
    ovh = _ratio(a["overhead_s"]["median"], b["overhead_s"]["median"])
    core = max(r["cores"] for r in rs.values())
    print(f"{backend}: GOAL overhead per run at {hi} hosts / at {lo} hosts = "
          + (f"{ovh:.2f}x ({a['overhead_s']['median']:.2f} s / {b['overhead_s']['median']:.2f}"
             f" s): {'meets' if ovh <= 1.5 else 'MISSES'} 1.5x" if ovh else "-"))
    print(f"{backend}: GOAL controller at most {core:.2f} cores: "
          f"{'meets' if core < 1 else 'MISSES'} one core")
    ctl = _ratio(a["controller_side_s"]["median"], b["controller_side_s"]["median"])
    if ctl:
        print(f"{backend}:   the controller's part of the overhead at {hi} / at {lo} = "
              f"{ctl:.2f}x ({a['controller_side_s']['median']:.2f} s / "
              f"{b['controller_side_s']['median']:.2f} s; preflight, start, noticing the end, "
              "collect, ingest: wall time, CPU waits included)")
    cpu = _ratio(a["cpu_per_run_s"], b["cpu_per_run_s"])
    if cpu:
        print(f"{backend}:   the controller's CPU per run at {hi} / at {lo} = {cpu:.2f}x "
              f"({a['cpu_per_run_s']:.3f} s / {b['cpu_per_run_s']:.3f} s)")
    for n in sorted({lo, hi}):      # one line when one size was run
        box = rs[n].get("box")
        if box:
            print(f"{backend}:   at {n} hosts the machine was {100 * box['busy_share']:.0f}% "
                  f"busy ({box['cores_busy']:.2f} of {box['cpus']} cores: controller "
                  f"{rs[n]['cores']:.2f}, lab hosts and the rest "
                  f"{box['cores_busy'] - rs[n]['cores']:.2f}; "
                  f"{box['rest_per_run_s']:.2f} s of their CPU per run)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", default="2,16,64", help="campaign sizes (default 2,16,64)")
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--runs", type=int, default=2, help="runs per host (default 2)")
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--passes", type=int, default=2, help="warm-up + measured (default 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=32,
                    help="experts per layer (default 32: the tiny preset's hot set is 24)")
    ap.add_argument("--expert-bytes", type=int, default=64 << 10)
    ap.add_argument("--wait-ms", type=float, default=10.0,
                    help="a write statement slower than this counts as slow (a lock or CPU wait)")
    ap.add_argument("--prefix", default=os.environ.get("BENCH_FLEET_PREFIX", "bsc"))
    ap.add_argument("--subnet", default=os.environ.get("BENCH_FLEET_SUBNET", "10.200.94"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sizes = sorted({int(x) for x in a.hosts.split(",")})
    backends = [b for b in a.backends.split(",") if b]
    if os.geteuid() != 0:
        print("needs root (network namespaces, sshd, drop_caches)", file=sys.stderr)
        return 2
    missing = missing_capabilities()
    if missing:
        print("netns lab unavailable: missing " + ", ".join(missing), file=sys.stderr)
        return 2
    if not sizes or sizes[0] < 1 or sizes[-1] > 200 or a.runs < 1:
        print("--hosts sizes 1..200, --runs >= 1", file=sys.stderr)
        return 2
    cfg = SimpleNamespace(runs=a.runs, layers=a.layers, experts=a.experts,
                          expert_bytes=a.expert_bytes, tokens=a.tokens, passes=a.passes)
    def stop(signum, _frame):     # a SIGTERM (timeout, kill) takes lab and server down too
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    tmp = Path(tempfile.mkdtemp(prefix="bench-perf-scale-"))
    os.chmod(tmp, 0o755)     # the PostgreSQL server (its own user) keeps its socket below
    lab = Lab(tmp / "lab")
    pg = PgServer(tmp / "pg") if "postgres" in backends else None
    stats = DbStats(a.wait_ms / 1000)
    stats.install()
    results = []
    try:
        t0 = time.time()
        lab.up(sizes[-1], prefix=a.prefix, subnet=a.subnet)
        names = [h.name for h in lab.hosts()]
        print(f"lab of {len(names)} hosts up in {time.time() - t0:.1f} s", file=sys.stderr)
        seed_agents(lab, names)
        if pg is not None:
            pg.start()
        for backend in backends:
            for n in sizes:
                db = (f"sqlite:///{tmp / f'{backend}-{n}.db'}" if backend == "sqlite"
                      else pg.database() if pg is not None else "")
                r = one_campaign(cfg_with(cfg, a), tmp, lab, names[:n], db, f"{backend}-{n}",
                                 stats)
                results.append(r)
                print(f"{backend} x{n}: {r['clean']}/{r['planned']} clean in "
                      f"{r['campaign_s']:.1f} s, overhead {mr(r['overhead_s'])} s, "
                      f"{r['cores']:.2f} cores", file=sys.stderr, flush=True)
        if a.json:
            print(json.dumps(results, indent=1, default=str))
        else:
            report(results, a)
        return 0 if all(r["clean"] == r["planned"] for r in results) else 1
    finally:
        try:
            lab.down()
        finally:
            if pg is not None:
                pg.stop()
            shutil.rmtree(tmp, ignore_errors=True)


def cfg_with(cfg: SimpleNamespace, a) -> SimpleNamespace:
    return SimpleNamespace(**vars(cfg), threads=a.threads, wait_ms=a.wait_ms)


if __name__ == "__main__":
    sys.exit(main())
