"""Cache-policy simulators over a parsed trace: LRU, LFU, static frequency and Belady.

Accesses are exactly `bench.trace.parse.accesses(trace)`: the distinct experts of each pass, in
issue order; a key is (layer, expert).

Regimes:
* ``per-layer``: budget B means every layer is an independent cache of B experts, fed with that
  layer's accesses only;
* ``global``: one pool of N = B x layers (layer, expert) keys shared by all layers (the paper's
  "1,472-expert budget (B=16)" for 92 layers). Rows carry ``capacity_keys`` = the keys one cache
  (per-layer) or the pool (global) holds.

Fair windows: every policy runs over the whole trace but is scored only on accesses of iterations
with index >= floor(window x n_iterations) (window 0.6: warm on the first 60%, score on the rest).

Policies (demand paging: every miss is admitted, except for static, which never changes):
* ``lru``: from LRU stack distances (`bench.sim.stackdist`), every budget in one pass;
* ``lfu``: libCacheSim's LFU (counts forgotten on eviction; among equal counts, evict the key that
  reached its count earliest), see `bench.sim.policies`;
* ``lfu-perfect``: the same LFU with counts kept for evicted keys ("perfect LFU"); the paper's
  B=8 figures (LFU above static) imply this one, see `bench.sim.policies`;
* ``static``: the cache holds, fixed, the top-B experts of each layer (per-layer) or the top-N
  keys (global) by access count; ties broken by ascending expert id (per-layer) or ascending
  (layer, expert) (global). Counts come from the warm window (``train=None``, the default), the
  whole trace (``train="oracle"``) or another trace (``train=<Trace>``, off-domain);
* ``belady``: the offline optimum MIN (evict the furthest next use), see `bench.sim.policies`.

For the demand model, `lru_steady_misses(keys, capacity)` (re-exported from `bench.sim.stackdist`)
counts global-LRU misses on a key stream run twice, measured on the second run.

Pure: numpy only, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from bench.errors import InputError
from bench.sim.policies import belady_hits, lfu_hits, lfu_perfect_hits
from bench.sim.stackdist import (COLD, lru_hits_by_capacity, lru_misses, lru_stack_distances,
                                 lru_steady_misses, next_use)
from bench.trace.parse import Accesses, Trace, accesses

__all__ = ["POLICIES", "REGIMES", "DEFAULT_WINDOW", "COLD", "simulate", "simulate_accesses",
           "scored_mask",
           "lru_stack_distances", "lru_misses", "lru_steady_misses", "static_table",
           "lfu_hits", "lfu_perfect_hits", "belady_hits", "policy_hits", "DEFAULT_POLICIES"]

POLICIES = ("lru", "lfu", "lfu-perfect", "static", "belady")
DEFAULT_POLICIES = ("lru", "lfu", "static", "belady")
REGIMES = ("per-layer", "global")
DEFAULT_WINDOW = 0.6


def _check(policies: Sequence[str], regime: str, budgets: Sequence[int], window: float) -> None:
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise InputError(f"unknown policy {bad[0]!r}" if bad else "no policy given",
                         hint=f"valid policies: {', '.join(POLICIES)}")
    if regime not in REGIMES:
        raise InputError(f"unknown regime {regime!r}", hint=f"valid regimes: {', '.join(REGIMES)}")
    if not budgets:
        raise InputError("no budget given",
                         hint="budgets are positive integers (experts per layer)")
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b <= 0:
            raise InputError(f"bad budget {b!r}",
                             hint="budgets are positive integers (experts per layer)")
    if (isinstance(window, bool) or not isinstance(window, (int, float))
            or not 0.0 <= float(window) < 1.0 or math.isnan(window)):
        raise InputError(f"bad window {window!r}",
                         hint="window is the warm fraction of iterations, in [0, 1) (default 0.6)")


def scored_mask(acc: Accesses, n_iterations: int, window: float = DEFAULT_WINDOW) -> np.ndarray:
    """Accesses that count: those of iterations with index >= floor(window x n_iterations)."""
    return acc.iteration >= math.floor(window * n_iterations)


def _substreams(acc: Accesses, regime: str) -> list[np.ndarray]:
    """Indices (into the access stream) of each independent cache's accesses, in order."""
    if regime == "global":
        return [np.arange(len(acc))]
    order = np.argsort(acc.layer, kind="stable")
    bounds = np.searchsorted(acc.layer[order], np.arange(acc.layers + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(acc.layers)
            if bounds[i + 1] > bounds[i]]


def _dense(keys: np.ndarray) -> np.ndarray:
    """Keys renumbered 0..distinct-1 (hit flags do not depend on the names of keys)."""
    if keys.size and int(keys.max()) < 4 * keys.size:
        return keys
    return np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _capacity(regime: str, budget: int, layers: int) -> int:
    return int(budget) * layers if regime == "global" else int(budget)


def _train_counts(acc: Accesses, source: str, train, warm: np.ndarray) -> tuple[np.ndarray, str]:
    """Access count of every key (layer * E + expert) from the chosen training accesses."""
    nkeys = acc.layers * acc.experts_per_layer
    if train is None:
        sel = acc.keys[warm]
        label = "warm"
    elif isinstance(train, str):
        if train != "oracle":
            raise InputError(f"unknown training source {train!r}",
                             hint="train is None (warm window), 'oracle' (whole trace) or a Trace")
        sel = acc.keys
        label = "oracle"
    elif isinstance(train, Trace):
        tacc = accesses(train)
        if len(tacc) and (int(tacc.layer.max()) >= acc.layers
                          or int(tacc.expert.max()) >= acc.experts_per_layer):
            raise InputError(f"training trace {train.source} does not fit {source}: "
                             f"it has {tacc.layers} layers x {tacc.experts_per_layer} experts, "
                             f"the scored trace {acc.layers} x {acc.experts_per_layer}")
        sel = tacc.layer.astype(np.int64) * acc.experts_per_layer + tacc.expert
        label = train.source
    else:
        raise InputError(f"bad training source {train!r}",
                         hint="train is None (warm window), 'oracle' (whole trace) or a Trace")
    return np.bincount(sel, minlength=nkeys).astype(np.int64), label


def static_table(counts: np.ndarray, layers: int, experts: int, regime: str, budget: int
                 ) -> np.ndarray:
    """Boolean membership over keys (layer * experts + expert) of the static cache: the top-B
    experts of each layer (per-layer) or the top B x layers keys (global) by count, ties broken
    by ascending expert id / ascending key."""
    nkeys = layers * experts
    member = np.zeros(nkeys, bool)
    if regime == "global":
        order = np.lexsort((np.arange(nkeys), -counts))
        member[order[:min(budget * layers, nkeys)]] = True
        return member
    c = counts.reshape(layers, experts)
    ids = np.broadcast_to(np.arange(experts), c.shape)
    order = np.lexsort((ids, -c), axis=1)[:, :min(budget, experts)]
    member.reshape(layers, experts)[np.arange(layers)[:, None], order] = True
    return member


def policy_hits(keys: np.ndarray, policy: str, capacity: int) -> np.ndarray:
    """Hit flags of a dynamic policy ('lru', 'lfu', 'lfu-perfect', 'belady') on one key
    stream."""
    if policy == "lru":
        return lru_stack_distances(keys) < capacity
    if policy == "lfu":
        return lfu_hits(keys, capacity)
    if policy == "lfu-perfect":
        return lfu_perfect_hits(keys, capacity)
    if policy == "belady":
        return belady_hits(keys, capacity)
    raise InputError(f"unknown policy {policy!r}", hint="valid: lru, lfu, lfu-perfect, belady")


def simulate(trace: Trace, policies: Iterable[str] = POLICIES, regime: str = "per-layer",
             budgets: Iterable[int] = (8, 16, 32), window: float = DEFAULT_WINDOW,
             train: None | str | Trace = None) -> list[dict]:
    """Hit counts of every (policy, budget) on `trace`, one row each, in the given order.

    Row: trace (source), policy, regime, budget (experts per layer), capacity_keys, hits,
    misses, accesses (scored), hit_rate, window, first_scored_iteration; static rows add train
    ("warm", "oracle" or the training trace's source).
    """
    policies = tuple(policies)
    budgets = tuple(budgets)
    _check(policies, regime, budgets, window)
    return simulate_accesses(accesses(trace), len(trace.iterations), trace.source, policies,
                             regime, budgets, window, train)


def simulate_accesses(acc: Accesses, n_iterations: int, source: str,
                      policies: Iterable[str] = POLICIES, regime: str = "per-layer",
                      budgets: Iterable[int] = (8, 16, 32), window: float = DEFAULT_WINDOW,
                      train: None | str | Trace = None) -> list[dict]:
    """`simulate` on an already flattened trace (`accesses(trace)`, computed once by a caller
    that runs several grids on one trace)."""
    policies = tuple(policies)
    budgets = tuple(budgets)
    _check(policies, regime, budgets, window)
    n_it = n_iterations
    first = math.floor(window * n_it)
    scored = acc.iteration >= first
    n_scored = int(scored.sum())
    keys = acc.keys
    caps = [_capacity(regime, b, acc.layers) for b in budgets]

    results: dict[tuple[str, int], int] = {}
    extra: dict[str, dict] = {}
    for policy in dict.fromkeys(policies):
        if policy == "lru":
            dist = lru_stack_distances(keys, acc.layer if regime == "per-layer" else None)
            by_capacity = lru_hits_by_capacity(dist, caps, scored)
            for b, h in zip(budgets, by_capacity):
                results[(policy, b)] = int(h)
        elif policy == "static":
            counts, label = _train_counts(acc, source, train, ~scored)
            extra[policy] = {"train": label}
            skeys = keys[scored]
            for b in budgets:
                member = static_table(counts, acc.layers, acc.experts_per_layer, regime, int(b))
                results[(policy, b)] = int(member[skeys].sum())
        else:
            # dense keys per independent cache, once for every budget (small C tables)
            # (global: the whole stream as it is, no copy)
            subs = ([(_dense(keys), scored)] if regime == "global" else
                    [(_dense(keys[idx]), scored[idx]) for idx in _substreams(acc, regime)])
            nxts = [next_use(k) for k, _ in subs] if policy == "belady" else []
            for b, cap in zip(budgets, caps):
                total = 0
                for s, (k, sc) in enumerate(subs):
                    if policy == "lfu":
                        h = lfu_hits(k, cap)
                    elif policy == "lfu-perfect":
                        h = lfu_perfect_hits(k, cap)
                    else:
                        h = belady_hits(k, cap, nxts[s])
                    total += int(np.count_nonzero(h & sc))
                results[(policy, b)] = total

    rows = []
    for policy in policies:
        for b, cap in zip(budgets, caps):
            hits = results[(policy, b)]
            row = {"trace": source, "policy": policy, "regime": regime, "budget": int(b),
                   "capacity_keys": cap, "hits": hits, "misses": n_scored - hits,
                   "accesses": n_scored, "hit_rate": hits / n_scored if n_scored else 0.0,
                   "window": float(window), "first_scored_iteration": first}
            row.update(extra.get(policy, {}))
            rows.append(row)
    return rows
