"""Stores 10,000 runs (per-run metrics and verdict rows, as ingest writes them) in a fresh
SQLite database built by the migrations, then times `bench results --matrix` and `--cell`
through the real CLI. Goal: under 1 s each. Run: .venv/bin/python tests/perf/results_10k.py"""

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sqlalchemy import insert  # noqa: E402

from bench.cli import main  # noqa: E402
from bench.judge.retention import RULES  # noqa: E402
from bench.store.campaigns import cell_row, host_row  # noqa: E402
from bench.store.db import open_store  # noqa: E402
from bench.store.models import Campaign, Run, Verdict  # noqa: E402
from bench.store.workloads import backfill  # noqa: E402

N = 10_000
CELLS = [f"{c}G-{m}-{r}" for c in (64, 93, 128, 256, 448) for m in ("balloon", "cgroup", "memboot")
         for r in ("mglru", "classic")] + ["256G-cgroup-mglru-pinned", "256G-cgroup-mglru-hybrid",
                                           "256G-cgroup-mglru-oracle-advice"]


def spec(i: int) -> dict:
    """A spec.json of the size the runner gets (results read the workload identity from it)."""
    return {"format": 1, "run_id": f"r{i:05d}", "campaign": "c1", "position": i,
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


def populate(url):
    st = open_store(url)
    rng = random.Random(1)
    with st.session() as s, s.begin():
        s.add(Campaign(id="c1", matrix="reclaim", state="done"))
        hosts = [host_row(s, h).id for h in ("gh200-a", "gh200-b")]
        cells = [cell_row(s, c).id for c in CELLS]
        runs = [{"run_id": f"r{i:05d}", "campaign_id": "c1", "host_id": hosts[i % 2],
                 "cell_id": cells[i % len(cells)], "position": i, "repetition": i // len(cells),
                 "state": "ingested", "bundle_digest": f"{i:064x}", "retained": rng.random() > .1,
                 "iterations": 285, "iteration_median_s": rng.uniform(0.9, 3),
                 "iteration_min_s": 0.8, "iteration_max_s": 3.2, "device_bytes": 10**10,
                 "device_bytes_per_iteration": rng.uniform(5e9, 4e10),
                 "nominal_miss_bytes_per_iteration": 1.5e10, "served_fraction": .7,
                 "scan_steal": rng.uniform(1, 7), "locked_fraction": .8,
                 "mglru_loop_entry": True, "mglru_end": True, "spec": spec(i)} for i in range(N)]
        s.execute(insert(Run), runs)
    with st.session() as s, s.begin():
        ids = [r.id for r in s.query(Run.id)]
        s.execute(insert(Verdict), [{"run_id": i, "rule": r.name, "version": r.version,
                                     "passed": True, "reason": "ok", "current": True}
                                    for i in ids for r in RULES])
    with st.engine.begin() as conn:     # runs.workload_id, as ingest sets it
        backfill(conn)
    return st


def timed(url, *argv):
    t = time.perf_counter()
    rc = main([*argv, "--db", url, "--json"])
    assert rc == 0
    return time.perf_counter() - t


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/perf.db"
        t0 = time.perf_counter()
        populate(url)
        print(f"stored {N} runs (+{N * len(RULES)} verdicts) in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
        import contextlib
        import io
        out = {}
        for label, argv in (("matrix reclaim", ("results", "--matrix", "reclaim")),
                            ("matrix capacity", ("results", "--matrix", "capacity")),
                            ("cell", ("results", "--cell", "64G-balloon-mglru")),
                            ("cell -v", ("results", "--cell", "64G-balloon-mglru", "-v"))):
            with contextlib.redirect_stdout(io.StringIO()):
                out[label] = min(timed(url, *argv) for _ in range(3))
        for label, t in out.items():
            print(f"bench results --{label}: {t:.3f} s (goal < 1 s) {'ok' if t < 1 else 'SLOW'}",
                  file=sys.stderr)
        sys.exit(0 if all(t < 1 for t in out.values()) else 1)
