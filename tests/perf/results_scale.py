"""Results at scale: fills a fresh database built by the real migrations with N stored runs
(default 100,000) and with 10,000 in a second one, then times `bench results --matrix reclaim`,
`results --cell X`, `runs --cell X` and `campaigns` through the real CLI, three times each,
printing min/median/max per N side by side. Goal: results --matrix and --cell under 0.5 s.
Each time is a whole `bench` command in a new process (Python's start and imports included),
wall and CPU (user+sys of that process). The two results views are timed three ways, three
times each: cold (nothing stored: computed from every run), warm (served as stored,
bench.store.result_cache; a plain `--json` line by bench.store.result_serve, without typer or
SQLAlchemy) and right after a write (a new run of the viewed cell, stored as ingest stores
it: since migration 0008 only that cell's runs are read again).

Rows are inserted in bulk through the store's own models (tests/perf/results_10k.populate:
runs with their metrics, iterations summary, spec.json, workload identity and current
verdicts, as ingest keeps them), not by ingesting N bundles. On a shared machine the wall
time also holds waits for a core; the CPU time does not.
That the views' output is the one of the path they replaced is a test
(tests/local/store/test_workload_identity_0006.py, test_results_cache.py), not this benchmark.

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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import results_10k  # noqa: E402

from bench.store.db import open_store  # noqa: E402

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
GOAL = {CASES[0][0]: 0.5, CASES[1][0]: 0.5}


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


AFTER_WRITE = "(after a write)"
COLD = "(cold)"
WRITE_CELL = "64G-balloon-mglru"     # the cell of the written run: one both views read


def _clear(url: str) -> None:
    """Nothing stored: the next view computes from every run (and stores what it stores)."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM results_cache"))
    finally:
        engine.dispose()


_written = iter(range(1, 10**6))


def _ingest_like(url: str) -> None:
    """A new run of WRITE_CELL stored as ingest stores what results read: a copy of the
    cell's first run (its metrics, workload identity, fingerprint) under a new run id and
    bundle digest, with that run's verdict rows, in one transaction. Untimed."""
    import sqlalchemy as sa
    engine = sa.create_engine(url)
    k = next(_written)
    try:
        md = sa.MetaData()
        md.reflect(engine, only=("runs", "verdicts", "cells"))
        runs, verdicts, cells = md.tables["runs"], md.tables["verdicts"], md.tables["cells"]
        with engine.begin() as conn:
            cid = conn.execute(sa.select(cells.c.id).where(cells.c.name == WRITE_CELL)).scalar()
            src = conn.execute(sa.select(runs).where(runs.c.cell_id == cid)
                               .order_by(runs.c.id).limit(1)).mappings().one()
            row = {c: v for c, v in src.items() if c != "id"}
            row.update(run_id=f"w{os.getpid()}-{k}", bundle_digest=f"{10**9 + k:064x}",
                       position=10**7 + k)
            new = conn.execute(sa.insert(runs).values(**row)).inserted_primary_key[0]
            vs = conn.execute(sa.select(verdicts).where(verdicts.c.run_id == src["id"])
                              ).mappings().all()
            if vs:
                conn.execute(sa.insert(verdicts), [{c: v for c, v in x.items() if c != "id"}
                                                   | {"run_id": new} for x in vs])
    finally:
        engine.dispose()


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
    only brought to head, as a writer would). Each of the two results views, three times in
    turn: cold (nothing stored), warm (what the cold one stored), after a write (a new run
    of the very cell, so the write touches what the view reads)."""
    results_10k.N = n
    t0 = time.perf_counter()
    if reuse and _stored(url) >= n:
        open_store(url).close()
    else:
        results_10k.populate(url).close()
        print(f"  stored {n} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    for _, argv, extra in CASES:       # warm the page cache (and store what is stored) once
        timed(url, argv, extra)
    out: dict[str, list[tuple[float, float]]] = {}
    for label, argv, extra in CASES[:2]:
        for _ in range(3):
            _clear(url)
            out.setdefault(f"{label} {COLD}", []).append(timed(url, argv, extra))
            out.setdefault(label, []).append(timed(url, argv, extra))
            _ingest_like(url)
            out.setdefault(f"{label} {AFTER_WRITE}", []).append(timed(url, argv, extra))
    for label, argv, extra in CASES[2:]:
        out[label] = [timed(url, argv, extra) for _ in range(3)]
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
    min-max; the goal is judged on the median wall time at the largest N."""
    ok = True
    ns = sorted(table)
    loads = ", ".join(f"N={n}: {table[n]['_load'][0][0]:.1f}" for n in ns)
    print(f"{kind}: whole `bench` command, seconds, median (min-max) of 3; load average "
          f"(1 min) after: {loads}", file=sys.stderr)
    labels = [f"{label}{suffix}" for label, *_ in CASES[:2]
              for suffix in (f" {COLD}", "", f" {AFTER_WRITE}")] + [label for label, *_ in
                                                                     CASES[2:]]
    for label in labels:
        cols = []
        for n in ns:
            runs = table[n][label]
            cols.append(f"N={n}: wall {_spread([w for w, _ in runs])} "
                        f"cpu {_spread([c for _, c in runs])}")
        goal = None if label.endswith(COLD) else GOAL.get(label.removesuffix(f" {AFTER_WRITE}"))
        slow = goal is not None and statistics.median(
            w for w, _ in table[ns[-1]][label]) >= goal
        ok &= not slow
        mark = "" if goal is None else f"  goal < {goal} s: {'SLOW' if slow else 'ok'}"
        print(f"  {label:50s} " + "   ".join(cols) + mark, file=sys.stderr)
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
