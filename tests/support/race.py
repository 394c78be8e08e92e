"""Real concurrent processes for race tests: `together(fn, argss)` starts one process per
argument tuple (spawned: a fresh interpreter each, nothing shared with pytest but the files and
the database), lines them up on a barrier, runs fn(*args) in each at the same moment and
returns, in order, ("ok", result) or ("error", "Type: message\\ntraceback")."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
from pathlib import Path


def _child(fn, args, barrier, out, index) -> None:
    try:
        barrier.wait(timeout=120)
        res = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as it is
        res = ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    out.put((index, res))


def together(fn, argss: list[tuple], timeout: float = 300.0) -> list[tuple[str, object]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(argss)), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, a, barrier, out, i), daemon=True)
             for i, a in enumerate(argss)]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, object]] = {}
    end = time.monotonic() + timeout
    try:
        while len(results) < len(procs):
            try:
                i, res = out.get(timeout=max(0.1, end - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"only {len(results)} of {len(procs)} processes "
                                     f"reported within {timeout} s") from None
            results[i] = res
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[i] for i in range(len(procs))]


# what the processes run (module-level: spawned children import them) ----------------------

def upgrade_fresh(url: str) -> dict:
    """Bring a database to head as `bench` does when it opens one; what it saw before."""
    from bench.store.db import make_engine, upgrade
    engine = make_engine(url)
    try:
        t0 = time.monotonic()
        before, head = upgrade(engine)
        return {"before": before, "head": head, "seconds": time.monotonic() - t0}
    finally:
        engine.dispose()


def open_and_ingest(url: str, bundle: str) -> dict:
    """`bench ingest` of one bundle: open (and upgrade) the store, ingest, close."""
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    store = open_store(url)
    try:
        return ingest_bundle(store, Path(bundle), nominal_miss_bytes=2.0e7)
    finally:
        store.close()


def bench_cli(argv: list[str]) -> dict:
    """The bench command line in this process: exit code (stdout and stderr pass through)."""
    from bench.cli import main
    return {"rc": main(argv)}
