"""Benchmark: bench's simulators vs libCacheSim's C trace loop on the K3-scale stream.

    PYTHONPATH=. python tests/perf/sim_vs_libcachesim.py [--tokens 300] [--no-fallback]

The stream is `bench trace synth --preset k3` (default 300 tokens, about 455k accesses),
flattened once by `bench.trace.parse.accesses` (untimed). The reference is libCacheSim's fastest
path: the stream written once (untimed) as an oracleGeneral binary file (24-byte records:
u32 time, u64 obj_id = key + 1, u32 size = 1, i64 next access position or -1), then
`cache.process_trace(TraceReader(file, ORACLE_GENERAL_TRACE))` timed per budget, over the paper's
8 budgets, global regime (capacity = budget x layers objects). libCacheSim scores every access,
so both sides are compared at window 0 (the whole stream); bench is also timed at the fair
window (0.6) and in the per-layer regime, and LFU and Belady once per budget as well (the
worst per-budget ratio). lfu-perfect (counts kept on eviction) has no libCacheSim class: it is
timed, and checked against its fallback, only. The "fallback" columns time the pure numpy/Python
paths (BENCH_SIM_NATIVE=0, today's implementation) and check that they give the same counts.
Prints the ratios measured in this run and whether every miss count is identical; exit 1 on a
mismatch. Not a test: a report.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.sim import build, kernels
from bench.sim.simulate import simulate_accesses
from bench.sim.stackdist import prev_next
from bench.trace.parse import accesses, parse_lines
from bench.trace.synth import generate, preset

BUDGETS = (8, 16, 32, 64, 128, 159, 256, 512)
CLASSES = {"lru": "LRU", "lfu": "LFU", "belady": "Belady"}
ORACLE = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("size", "<u4"), ("next", "<i8")],
                  align=False)


def write_oracle(keys: np.ndarray, path: Path) -> None:
    rec = np.zeros(keys.shape[0], ORACLE)
    rec["time"] = np.arange(keys.shape[0]) // 1000
    rec["obj_id"] = keys + 1
    rec["size"] = 1
    rec["next"] = prev_next(keys)[1]
    assert ORACLE.itemsize == 24
    path.write_bytes(rec.tobytes())


def lcs_run(lc, policy: str, path: Path, capacity: int, n: int) -> tuple[float, int]:
    cache = getattr(lc, CLASSES[policy])(capacity)
    reader = lc.TraceReader(str(path), lc.TraceType.ORACLE_GENERAL_TRACE)
    t0 = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    dt = time.perf_counter() - t0
    return dt, int(round(miss_ratio * n))


def ours(acc, n_it, policy, regime, budgets, window, native=True):
    os.environ["BENCH_SIM_NATIVE"] = "1" if native else "0"
    t0 = time.perf_counter()
    rows = simulate_accesses(acc, n_it, "k3", policies=(policy,), regime=regime,
                             budgets=budgets, window=window)
    dt = time.perf_counter() - t0
    os.environ["BENCH_SIM_NATIVE"] = "1"
    return dt, [r["misses"] for r in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    ap.add_argument("--no-fallback", action="store_true", help="skip the numpy/Python paths")
    args = ap.parse_args(argv)
    budgets = tuple(int(b) for b in args.budgets.split(","))
    try:
        import libcachesim as lc
    except ImportError:
        print("libcachesim not installed (pip install .[test])")
        return 2
    lib = build.ensure()
    print(f"kernels: {lib if lib else 'NONE (no compiler): numpy fallback timed as bench'}")
    t0 = time.perf_counter()
    trace = parse_lines(list(generate(preset("k3", tokens=args.tokens))), "k3")
    acc = accesses(trace)
    n, n_it = len(acc), len(trace.iterations)
    print(f"k3 stream: {n} accesses, {n_it} iterations, {acc.layers} layers "
          f"(made in {time.perf_counter() - t0:.1f}s, untimed)")
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k3.oracleGeneral.bin"
        write_oracle(acc.keys.astype(np.int64), path)
        lcs_run(lc, "lru", path, budgets[0] * acc.layers, n)       # warm-ups, untimed
        ours(acc, n_it, "lru", "global", budgets, 0.0)
        print(f"{'policy':7s} {'libCacheSim s':>13s} {'bench s':>8s} {'ratio':>7s} "
              f"{'worst b':>10s} "
              f"{'fair s':>7s} {'layer s':>7s} {'fallback s':>10s} {'fb layer s':>10s}")
        for p in ("lru", "lfu", "lfu-perfect", "belady", "static"):
            ref, ref_m, worst = 0.0, [], float("inf")
            if p in CLASSES:                # lfu-perfect and static: no libCacheSim class
                for b in budgets:
                    dt, m = lcs_run(lc, p, path, b * acc.layers, n)
                    ref += dt
                    ref_m.append(m)
                    if p != "lru":          # LRU's point is one pass for all the budgets
                        worst = min(worst, dt / ours(acc, n_it, p, "global", (b,), 0.0)[0])
            t_all, m_all = ours(acc, n_it, p, "global", budgets, 0.0)
            t_fair, m_fair = ours(acc, n_it, p, "global", budgets, 0.6)
            t_lay, m_lay = ours(acc, n_it, p, "per-layer", budgets, 0.6)
            fb = fbl = float("nan")
            if not args.no_fallback:
                fb, fm = ours(acc, n_it, p, "global", budgets, 0.6, native=False)
                fbl, fml = ours(acc, n_it, p, "per-layer", budgets, 0.6, native=False)
                if fm != m_fair or fml != m_lay:
                    bad.append((p, "fallback", fm, m_fair, fml, m_lay))
            if ref_m and ref_m != m_all:
                bad.append((p, "libCacheSim", ref_m, m_all))
            ratio = f"{ref / t_all:6.1f}x" if ref else "     -"
            low = f"{worst:9.1f}x" if worst != float("inf") else "         -"
            print(f"{p:7s} {ref:13.3f} {t_all:8.3f} {ratio} {low} {t_fair:7.3f} {t_lay:7.3f} "
                  f"{fb:10.3f} {fbl:10.3f}")
    print(f"({len(budgets)} budgets {budgets}; ratio = libCacheSim's process_trace summed over "
          "them / bench's one call for all of them, global, window 0; worst b = the lowest "
          "ratio of one budget's process_trace to bench's call for that budget alone; fair: "
          "window 0.6; layer: per-layer regime, window 0.6; fb: the numpy/Python fallbacks)")
    print(f"miss counts identical (bench vs libCacheSim, bench vs fallback): {not bad}")
    for m in bad:
        print("  MISMATCH", m)
    print(f"kernels loaded: {kernels.library() is not None}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
