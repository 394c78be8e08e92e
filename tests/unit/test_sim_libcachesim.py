"""Cross-check of the simulators against libCacheSim (PyPI `libcachesim`) on the same streams:
LRU, Belady and LFU miss counts must be identical."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim.policies import belady_hits, lfu_hits
from bench.sim.simulate import simulate
from bench.sim.stackdist import lru_stack_distances, prev_next
from bench.trace.parse import accesses, parse_lines

lc = pytest.importorskip("libcachesim", reason="libcachesim not installed (pip install .[test])")

NEVER = 2**63 - 1  # libCacheSim's Belady wants INT64_MAX for "no next access", not -1
CLASSES = {"lru": "LRU", "lfu": "LFU", "belady": "Belady"}


def lcs_hits(policy: str, keys: np.ndarray, capacity: int) -> np.ndarray:
    """Hit flags from libCacheSim: capacity in objects (obj_size=1), next_access_vtime set to
    the position of the key's next request (Belady is wrong without it)."""
    cache = getattr(lc, CLASSES[policy])(capacity, hashpower=14)
    req = lc.Request(obj_size=1)
    nxt = prev_next(keys)[1].tolist()
    out = np.zeros(len(keys), bool)
    for t, k in enumerate(np.asarray(keys).tolist()):
        req.obj_id = k + 1
        req.next_access_vtime = nxt[t] if nxt[t] >= 0 else NEVER
        out[t] = cache.get(req)
    return out


def ours(policy, keys, capacity):
    if policy == "lru":
        return lru_stack_distances(keys) < capacity
    return lfu_hits(keys, capacity) if policy == "lfu" else belady_hits(keys, capacity)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=300), st.integers(1, 12),
       st.sampled_from(["lru", "lfu", "belady"]))
@settings(max_examples=300, deadline=None)
def test_streams_match_libcachesim(keys, capacity, policy):
    k = np.array(keys, np.int64)
    a, b = ours(policy, k, capacity), lcs_hits(policy, k, capacity)
    assert int(a.sum()) == int(b.sum())
    if policy != "belady":  # Belady's hit count is unique, its choice among never-again keys not
        assert a.tolist() == b.tolist()


def synthetic_lines(seed=0, k=4, experts=32, layers=4, iterations=200, reuse=0.35):
    """JSONL of a Zipf-ish router: each layer has its own popularity order; a share of each
    token's choices is copied from the previous token at the same layer."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, experts + 1) ** 1.1
    perms = [rng.permutation(experts) for _ in range(layers)]
    lines = [json.dumps({"model": "synth", "k": k, "experts_per_layer": experts,
                         "layers": layers})]
    last = [None] * layers
    for step in range(iterations):
        for layer in range(layers):
            chosen: list[int] = []
            if last[layer] is not None:
                keep = rng.random(k) < reuse
                chosen = [e for e, c in zip(last[layer], keep) if c]
            while len(chosen) < k:
                e = int(perms[layer][rng.choice(experts, p=w / w.sum())])
                if e not in chosen:
                    chosen.append(e)
            last[layer] = chosen
            lines.append(json.dumps({"step": step, "layer": layer, "experts": chosen}))
    return lines


@pytest.mark.parametrize("regime", ["per-layer", "global"])
def test_synthetic_trace_matches_libcachesim(regime):
    trace = parse_lines(synthetic_lines(), "synth")
    acc = accesses(trace)
    budgets = (1, 2, 4, 8)
    rows = {(r["policy"], r["budget"]): r for r in
            simulate(trace, policies=("lru", "lfu", "belady"), regime=regime, budgets=budgets)}
    scored = acc.iteration >= int(0.6 * len(trace.iterations))
    keys = acc.keys
    for policy in ("lru", "lfu", "belady"):
        for b in budgets:
            if regime == "global":
                hits = lcs_hits(policy, keys, b * acc.layers)[scored].sum()
            else:
                hits = sum(lcs_hits(policy, keys[acc.layer == l], b)[scored[acc.layer == l]].sum()
                           for l in range(acc.layers))
            assert rows[(policy, b)]["hits"] == hits, (policy, b)
            assert rows[(policy, b)]["misses"] == rows[(policy, b)]["accesses"] - hits
