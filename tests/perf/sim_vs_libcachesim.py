"""Benchmark: our simulators vs libCacheSim (PyPI `libcachesim`) on K3-scale synthetic traces.

    PYTHONPATH=. python tests/perf/sim_vs_libcachesim.py [--iterations 285] [--domains 4]

Four synthetic domains (92 layers x 896 experts, k=16): seeded Zipf popularity per layer and
domain, 35% of each token's choices copied from the previous token at the same layer. Times the
full grid (lru, lfu, static, belady x per-layer, global x budgets) with
`bench.sim.simulate.simulate_accesses` (the trace flattened once, untimed, as for libCacheSim), and
libCacheSim doing the same per budget (its fastest Python use: one reused Request, the bound get;
Belady gets next_access_vtime precomputed for free; per-layer = one cache per layer). libCacheSim
has no static policy: static is compared with one libCacheSim LRU pass per budget. Prints the
times, the ratios and whether every miss count is identical. Not a test: a report.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from bench.sim.simulate import simulate_accesses
from bench.sim.stackdist import prev_next
from bench.trace.parse import accesses, parse_lines

BUDGETS = (8, 16, 32, 64, 128, 159, 256, 512)
NEVER = 2**63 - 1


def synth_trace(seed, layers=92, experts=896, k=16, iterations=285, reuse=0.35, alpha=1.0):
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, experts + 1) ** alpha
    cdf = np.cumsum(w / w.sum())
    perms = [rng.permutation(experts) for _ in range(layers)]
    lines = [json.dumps({"model": f"synth-k3-d{seed}", "k": k, "experts_per_layer": experts,
                         "layers": layers, "expert_bytes": 17550000})]
    last = [None] * layers
    for step in range(iterations):
        for layer in range(layers):
            chosen = []
            if last[layer] is not None:
                chosen = [e for e in last[layer] if rng.random() < reuse]
            seen = set(chosen)
            while len(chosen) < k:
                for r in np.searchsorted(cdf, rng.random(2 * k)):
                    e = int(perms[layer][min(r, experts - 1)])
                    if e not in seen and len(chosen) < k:
                        seen.add(e)
                        chosen.append(e)
            last[layer] = chosen
            lines.append(json.dumps({"step": step, "layer": layer, "experts": chosen}))
    return parse_lines(lines, f"synth-d{seed}")


def lcs_hits(lc, policy, acc, nxt, scored, regime, budget):
    cls = {"lru": lc.LRU, "lfu": lc.LFU, "belady": lc.Belady}[policy]
    keys = acc.keys.tolist()
    sc = scored.tolist()
    nx = [x if x >= 0 else NEVER for x in nxt.tolist()]
    req = lc.Request(obj_size=1)
    hits = 0
    if regime == "global":
        get = cls(budget * acc.layers, hashpower=18)._cache.get
        for t, k in enumerate(keys):
            req.obj_id = k + 1
            req.next_access_vtime = nx[t]
            if get(req) and sc[t]:
                hits += 1
    else:
        gets = [cls(budget, hashpower=11)._cache.get for _ in range(acc.layers)]
        layer = acc.layer.tolist()
        for t, k in enumerate(keys):
            req.obj_id = k + 1
            req.next_access_vtime = nx[t]
            if gets[layer[t]](req) and sc[t]:
                hits += 1
    return hits


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=285)
    ap.add_argument("--domains", type=int, default=4)
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    args = ap.parse_args(argv)
    budgets = tuple(int(b) for b in args.budgets.split(","))
    try:
        import libcachesim as lc
    except ImportError:
        print("libcachesim not installed (pip install .[test])")
        return 2
    t0 = time.perf_counter()
    traces = [synth_trace(100 + d, iterations=args.iterations) for d in range(args.domains)]
    print(f"generated {len(traces)} traces in {time.perf_counter() - t0:.1f}s; "
          f"accesses per trace: {[len(accesses(t)) for t in traces]}")
    policies = ("lru", "lfu", "static", "belady")
    ours_t = {p: 0.0 for p in policies}
    theirs_t = {p: 0.0 for p in policies}
    ours_rows = {}
    accs = {tr.source: accesses(tr) for tr in traces}  # flattening (bench.trace.parse) not timed
    for tr in traces:
        for regime in ("per-layer", "global"):
            for p in policies:
                t0 = time.perf_counter()
                rows = simulate_accesses(accs[tr.source], len(tr.iterations), tr.source,
                                         policies=(p,), regime=regime, budgets=budgets)
                ours_t[p] += time.perf_counter() - t0
                for r in rows:
                    ours_rows[(tr.source, regime, p, r["budget"])] = r
    mismatches = []
    compared = 0
    for tr in traces:
        acc = accesses(tr)
        nxt = prev_next(acc.keys)[1]
        scored = acc.iteration >= int(0.6 * len(tr.iterations))
        for regime in ("per-layer", "global"):
            for p in ("lru", "lfu", "belady"):
                for b in budgets:
                    t0 = time.perf_counter()
                    h = lcs_hits(lc, p, acc, nxt, scored, regime, b)
                    dt = time.perf_counter() - t0
                    theirs_t[p] += dt
                    if p == "lru":
                        theirs_t["static"] += dt
                    compared += 1
                    if ours_rows[(tr.source, regime, p, b)]["hits"] != h:
                        mismatches.append((tr.source, regime, p, b,
                                           ours_rows[(tr.source, regime, p, b)]["hits"], h))
    grid = len(traces) * 2 * len(budgets)
    print(f"grid: {len(policies)} policies x 2 regimes x {len(budgets)} budgets x "
          f"{len(traces)} domains")
    print(f"{'policy':8s} {'ours s':>9s} {'libcachesim s':>14s} {'speed-up':>9s}")
    for p in policies:
        ref = "  (vs one libcachesim LRU pass per budget)" if p == "static" else ""
        print(f"{p:8s} {ours_t[p]:9.2f} {theirs_t[p]:14.2f} {theirs_t[p] / ours_t[p]:8.1f}x{ref}")
    print(f"total    {sum(ours_t.values()):9.2f} "
          f"{sum(v for k, v in theirs_t.items() if k != 'static'):14.2f}")
    print(f"({grid} cells per policy)")
    print(f"miss counts identical: {not mismatches} ({compared} lru/lfu/belady cells compared)")
    for m in mismatches[:10]:
        print("  MISMATCH", m)
    for tr in traces[:1]:
        for regime in ("per-layer", "global"):
            rates = {p: round(ours_rows[(tr.source, regime, p, 32)]["hit_rate"], 3)
                     for p in policies if 32 in budgets}
            print(f"{tr.source} {regime} B=32 hit rates: {rates}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
