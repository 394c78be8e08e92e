"""Results at scale: fills a fresh database built by the real migrations with N stored runs
(default 100,000) and with 10,000 in a second one, then times `bench results --matrix reclaim`,
`results --cell X`, `runs --cell X` and `campaigns` through the real CLI, three times each,
printing min/median/max per N side by side. Goal: results --matrix and --cell under 0.5 s.

Rows are inserted in bulk through the store's own models (tests/perf/results_10k.populate:
runs with their metrics, iterations summary, spec.json, workload identity and current
verdicts, as ingest keeps them), not by ingesting N bundles. Each timing prints the wall time
and the process's CPU time: on a shared machine the first also holds waits for a core.
That the views' output is the one of the path they replaced is a test
(tests/local/store/test_workload_identity_0006.py), not this benchmark.

Run: .venv/bin/python tests/perf/results_scale.py [N] [--pg POSTGRES_URL_PREFIX]
  SQLite always; PostgreSQL too when --pg names a server URL without a database
  (e.g. postgresql+psycopg://postgres@/?host=/tmp/pg&port=5432): two databases are created."""

import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import results_10k  # noqa: E402

from bench.cli import main  # noqa: E402

CASES = (("results --matrix reclaim", ("results", "--matrix", "reclaim"), "--json"),
         ("results --cell 64G-balloon-mglru", ("results", "--cell", "64G-balloon-mglru"),
          "--json"),
         ("runs --cell 64G-balloon-mglru", ("runs", "--cell", "64G-balloon-mglru"), "--json"),
         ("campaigns", ("campaigns",), "--json"))
GOAL = {CASES[0][0]: 0.5, CASES[1][0]: 0.5}


def timed(url: str, argv: tuple, *extra: str) -> tuple[float, float]:
    """(wall s, this process's CPU s): on a shared machine the CPU time shows the cost when
    the wall time also holds waits for a core (a PostgreSQL server's CPU is not in it)."""
    t, c = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main([*argv, "--db", url, *extra])
    assert rc == 0, (argv, rc)
    return time.perf_counter() - t, time.process_time() - c


def measure(url: str, n: int) -> dict[str, list[tuple[float, float]]]:
    results_10k.N = n
    t0 = time.perf_counter()
    results_10k.populate(url).close()
    print(f"  stored {n} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    timed(url, *CASES[0][1:])          # warm the page cache and imports once
    return {label: [timed(url, argv, extra) for _ in range(3)] for label, argv, extra in CASES}


def pg_database(prefix: str, name: str) -> str:
    import psycopg
    base, _, query = prefix.partition("?")
    kw = dict(p.split("=", 1) for p in query.split("&") if p)
    with psycopg.connect(host=kw.get("host"), port=kw.get("port"), user="postgres",
                         dbname="postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return f"{base.rstrip('/')}/{name}?{query}"


def report(kind: str, table: dict[int, dict[str, list[tuple[float, float]]]]) -> bool:
    ok = True
    ns = sorted(table)
    print(f"{kind}: wall min / median / max of 3 runs [median CPU of the process], seconds",
          file=sys.stderr)
    for label, *_ in CASES:
        cols = []
        for n in ns:
            ts = [w for w, _ in table[n][label]]
            cpu = statistics.median(c for _, c in table[n][label])
            cols.append(f"N={n}: {min(ts):.3f} / {statistics.median(ts):.3f} / {max(ts):.3f} "
                        f"[{cpu:.3f}]")
        goal = GOAL.get(label)
        slow = goal is not None and statistics.median(
            w for w, _ in table[ns[-1]][label]) >= goal
        ok &= not slow
        mark = "" if goal is None else f"  (goal < {goal} s: {'SLOW' if slow else 'ok'})"
        print(f"  {label:36s} " + "   ".join(cols) + mark, file=sys.stderr)
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    pg = None
    if "--pg" in args:
        i = args.index("--pg")
        pg = args[i + 1]
        del args[i:i + 2]
    big = int(args[0]) if args else 100_000
    ok = True
    with tempfile.TemporaryDirectory() as d:
        sq = {n: measure(f"sqlite:///{d}/perf{n}.db", n) for n in (10_000, big)}
        ok &= report("SQLite", sq)
    if pg:
        pgt = {n: measure(pg_database(pg, f"bench_perf_{n}"), n) for n in (10_000, big)}
        ok &= report("PostgreSQL", pgt)
    sys.exit(0 if ok else 1)
