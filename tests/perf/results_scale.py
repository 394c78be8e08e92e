"""Results at scale: fills a fresh database built by the real migrations with N stored runs
(default 100,000) and with 10,000 in a second one, then times `bench results --matrix reclaim`,
`results --cell 64G-balloon-mglru`, `runs --cell 64G-balloon-mglru` and `campaigns` through
the real CLI, three times each, printing wall and CPU time, median (min-max), per N side by
side. Every view is computed from the database on each call (there is no stored view). Goal
for the two results views (median wall): under 0.3 s at 10,000 runs and under 1.0 s at
100,000, on SQLite; PostgreSQL is reported beside it. Each time is a whole `bench` command in
a new process (Python's start and imports included), wall and CPU (user+sys of that process).

Rows are inserted in bulk through the store's own models (populate below: runs with their
metrics, iterations summary, spec.json, workload identity and current verdicts, as ingest
keeps them), not by ingesting N bundles. On a shared machine the wall time also holds waits
for a core; the CPU time does not. That the views' output is right is a test
(tests/local/store/test_results_computed.py, test_workload_identity_0006.py), not this
benchmark.

Run: .venv/bin/python tests/perf/results_scale.py [N] [--pg POSTGRES_URL_PREFIX] [--keep DIR]
                                                 [--no-10k] [--no-sqlite] [--no-pg]
  SQLite unless --no-sqlite; PostgreSQL too: on the server --pg names (a URL without a
  database, e.g. postgresql+psycopg://postgres@/?host=/tmp/pg&port=5432), else on a throwaway
  server started here as tests/local/store/conftest.py starts one (root, postgres user), unless
  --no-pg; databases bench_perf_<N> are created. --keep DIR: SQLite files DIR/perf<N>.db
  (and, with --pg, the PostgreSQL databases) holding N runs are reused (brought to head)
  rather than filled again; --no-10k: only N."""

import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import insert  # noqa: E402

from bench.judge.retention import RULES  # noqa: E402
from bench.store.campaigns import cell_row, host_row  # noqa: E402
from bench.store.db import open_store  # noqa: E402
from bench.store.models import Campaign, Run, Verdict  # noqa: E402
from bench.store.workloads import backfill  # noqa: E402

# the console script beside this interpreter (a venv's bin/bench), else the module
_SCRIPT = Path(sys.executable).parent / "bench"
BENCH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c",
                                                 "import sys; from bench.cli import main; "
                                                 "sys.exit(main())"]

CASES = (("results --matrix reclaim", ("results", "--matrix", "reclaim"), "--json"),
         ("results --cell 64G-balloon-mglru", ("results", "--cell", "64G-balloon-mglru"),
          "--json"),
         ("runs --cell 64G-balloon-mglru", ("runs", "--cell", "64G-balloon-mglru"), "--json"),
         ("campaigns", ("campaigns",), "--json"))
GOAL = {10_000: 0.3, 100_000: 1.0}          # median wall s of the two results views
CELLS = [f"{c}G-{m}-{r}" for c in (64, 93, 128, 256, 448) for m in ("balloon", "cgroup", "memboot")
         for r in ("mglru", "classic")] + ["256G-cgroup-mglru-pinned", "256G-cgroup-mglru-hybrid",
                                           "256G-cgroup-mglru-oracle-advice"]


def spec(i: int) -> dict:
    """A spec.json of the size the runner gets (the workload identity is computed from it)."""
    return {"format": 1, "run_id": f"r{i:06d}", "campaign": "c1", "position": i,
            "repetition": i // len(CELLS), "host": ("gh200-a", "gh200-b")[i % 2],
            "cell": CELLS[i % len(CELLS)], "workload": {"trace": "prose.jsonl",
                                                        "trace_sha256": "b" * 64, "batch": 1},
            "plan": "plans/x.bin", "plan_sha256": "c" * 64, "hints": None, "hints_sha256": None,
            "pool": "/data/pool", "pool_bytes": 1446770688000,
            "agent": {"path": "native/bench-agent", "source_sha256": "a" * 64, "threads": 8,
                      "passes": 2, "arena_bytes": 0, "nocache": None, "freq": None},
            "cgroup_headroom_bytes": 6 << 30,
            "expect_boot": {"boot_id": None, "mem": None, "lru_gen": "on"},
            "mglru_runtime_toggle": True, "timeline_interval_ms": 100,
            "controller_version": "0.1.0+src.2a2bfd07991b", "created": "2026-11-29T19:00:00Z"}


def populate(url: str, n: int):
    """A database at head holding n ingested runs over CELLS on two hosts, one campaign, one
    workload, each run with a current verdict per retention rule."""
    st = open_store(url)
    rng = random.Random(1)
    with st.session() as s, s.begin():
        s.add(Campaign(id="c1", matrix="reclaim", state="done"))
        hosts = [host_row(s, h).id for h in ("gh200-a", "gh200-b")]
        cells = [cell_row(s, c).id for c in CELLS]
        s.execute(insert(Run), [
            {"run_id": f"r{i:06d}", "campaign_id": "c1", "host_id": hosts[i % 2],
             "cell_id": cells[i % len(cells)], "position": i, "repetition": i // len(cells),
             "state": "ingested", "bundle_digest": f"{i:064x}", "retained": rng.random() > .1,
             "iterations": 285, "iteration_median_s": rng.uniform(0.9, 3),
             "iteration_min_s": 0.8, "iteration_max_s": 3.2, "device_bytes": 10**10,
             "device_bytes_per_iteration": rng.uniform(5e9, 4e10),
             "nominal_miss_bytes_per_iteration": 1.5e10, "served_fraction": .7,
             "scan_steal": rng.uniform(1, 7), "locked_fraction": .8,
             "mglru_loop_entry": True, "mglru_end": True, "spec": spec(i)} for i in range(n)])
    with st.session() as s, s.begin():
        ids = [r.id for r in s.query(Run.id)]
        s.execute(insert(Verdict), [{"run_id": i, "rule": r.name, "version": r.version,
                                     "passed": True, "reason": "ok", "current": True}
                                    for i in ids for r in RULES])
    with st.engine.begin() as conn:     # runs.workload_id, as ingest sets it
        backfill(conn)
    return st


def timed(url: str, argv: tuple, *extra: str) -> tuple[float, float]:
    """(wall s, CPU s of the child: user + sys) of one whole `bench` command in a new process:
    Python's start, the imports and the query, as a user waits for them. On a shared machine
    the wall time also holds waits for a core (a PostgreSQL server's CPU is not in the CPU)."""
    t = time.perf_counter()
    p = subprocess.Popen([*BENCH, *argv, "--db", url, *extra], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    assert p.returncode == 0, (argv, p.returncode, err)
    return wall, ru.ru_utime + ru.ru_stime


def _stored(url: str) -> int:
    """Runs in the database at `url` (0 when it has no runs table yet)."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("runs"):
                return 0
            return conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() or 0
    finally:
        engine.dispose()


def measure(url: str, n: int, reuse: bool = False) -> dict[str, list[tuple[float, float]]]:
    """Three timings of each case on a database of n runs (filled here unless `reuse`: then
    only brought to head, as a writer would), after one untimed call of each (the page
    cache)."""
    t0 = time.perf_counter()
    if reuse and _stored(url) >= n:
        open_store(url).close()
    else:
        populate(url, n).close()
        print(f"  stored {n} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for _, argv, extra in CASES:
        timed(url, argv, extra)
    out = {label: [timed(url, argv, extra) for _ in range(3)] for label, argv, extra in CASES}
    out["_load"] = [(os.getloadavg()[0], 0.0)]
    return out


def pg_database(prefix: str, name: str, reuse: bool = False) -> tuple[str, bool]:
    """(URL of database `name` on the server, whether it is reused): created anew unless
    `reuse` and it exists."""
    import psycopg
    base, _, query = prefix.partition("?")
    kw = dict(p.split("=", 1) for p in query.split("&") if p)
    with psycopg.connect(host=kw.get("host"), port=kw.get("port"), user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not (reuse and found):
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
    return f"{base.rstrip('/')}/{name}?{query}", bool(reuse and found)


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"


def report(kind: str, table: dict[int, dict[str, list[tuple[float, float]]]]) -> bool:
    """Per case and N: wall and CPU (user+sys of the command's process), median of 3 with
    min-max; the goal (GOAL, by N) is judged on the median wall time of the results views."""
    ok = True
    ns = sorted(table)
    loads = ", ".join(f"N={n}: {table[n]['_load'][0][0]:.1f}" for n in ns)
    print(f"{kind}: whole `bench` command, seconds, median (min-max) of 3; load average "
          f"(1 min) after: {loads}", file=sys.stderr)
    for label, *_ in CASES:
        cols, marks = [], []
        for n in ns:
            runs = table[n][label]
            cols.append(f"N={n}: wall {_spread([w for w, _ in runs])} "
                        f"cpu {_spread([c for _, c in runs])}")
            goal = GOAL.get(n) if label.startswith("results") else None
            if goal is not None:
                slow = statistics.median(w for w, _ in runs) >= goal
                ok &= not slow or kind != "SQLite"
                marks.append(f"N={n} < {goal} s: {'SLOW' if slow else 'ok'}")
        print(f"  {label:34s} " + "   ".join(cols)
              + (f"  goal {', '.join(marks)}" if marks else ""), file=sys.stderr)
    return ok


def _option(args: list[str], name: str) -> str | None:
    if name not in args:
        return None
    i = args.index(name)
    value = args[i + 1]
    del args[i:i + 2]
    return value


@contextlib.contextmanager
def throwaway_pg():
    """A PostgreSQL server of its own (initdb + pg_ctl as the postgres user, a unix socket in
    a temporary directory, a free port: as tests/local/store/conftest.py starts one), stopped
    by its PID; yields its URL prefix, or None (with the reason on stderr) when it cannot be
    started here."""
    import glob
    import pwd
    import shutil
    import signal
    import socket
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    initdb = found[-1] if found else shutil.which("initdb")
    why = ("no postgresql server binaries" if initdb is None
           else "not root (the server runs as postgres)" if os.geteuid() != 0 else None)
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        why = why or "no postgres system user"
    if why:
        print(f"PostgreSQL: not measured ({why})", file=sys.stderr)
        yield None
        return
    bindir = Path(initdb).parent
    base = Path(tempfile.mkdtemp(prefix="bench-perf-pg-"))
    os.chown(base, pw.pw_uid, pw.pw_gid)
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]

    def as_pg(*argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                       capture_output=True, text=True)
    pid = None
    try:
        as_pg(str(bindir / "initdb"), "-D", str(base / "data"), "-A", "trust", "-U", "postgres")
        as_pg(str(bindir / "pg_ctl"), "-D", str(base / "data"), "-l", str(base / "log"), "-w",
              "-o", f"-k {base} -p {port} -c listen_addresses=''", "start")
        pid = int((base / "data" / "postmaster.pid").read_text().split()[0])
        yield f"postgresql+psycopg://postgres@/?host={base}&port={port}"
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            for _ in range(300):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    pg = _option(args, "--pg")
    keep = _option(args, "--keep")     # a directory: its perf<N>.db are reused when present
    flags = {a for a in args if a.startswith("--")}
    args = [a for a in args if a not in flags]
    big = int(args[0]) if args else 100_000
    sizes = (10_000, big) if "--no-10k" not in flags else (big,)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(keep or tmp)
        if "--no-sqlite" not in flags:
            sq = {n: measure(f"sqlite:///{d}/perf{n}.db", n, reuse=(d / f"perf{n}.db").exists())
                  for n in sizes}
            ok &= report("SQLite", sq)
    with contextlib.ExitStack() as stack:
        if pg is None and "--no-pg" not in flags:
            pg = stack.enter_context(throwaway_pg())
        if pg:
            pgt = {}
            for n in sizes:
                url, reused = pg_database(pg, f"bench_perf_{n}", reuse=keep is not None)
                pgt[n] = measure(url, n, reuse=reused)
            ok &= report("PostgreSQL", pgt)
    sys.exit(0 if ok else 1)
