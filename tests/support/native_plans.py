"""Plans and pool geometry shared by the native tests (a module of its own, not conftest, so
test modules import it by a name no other test directory uses)."""

from __future__ import annotations

import random

from bench.plan.planfile import REPLAY, Plan
from bench.trace.parse import Iteration, Pass

# Small on purpose: the machine is shared. Not a multiple of 512 or of the page size, so the
# O_DIRECT length rounding and the page-rounded device reads are exercised.
LAYERS, EXPERTS, EXPERT_BYTES = 4, 32, 1_500_000
LOOP_BYTES = 768 << 20


def make_plan(iterations: list[list[tuple[int, tuple[int, ...]]]], layers=LAYERS,
              experts=EXPERTS, expert_bytes=EXPERT_BYTES) -> Plan:
    its = tuple(Iteration(i, "normal", 1, tuple(Pass(l, tuple(e)) for l, e in passes))
                for i, passes in enumerate(iterations))
    return Plan(REPLAY, layers, experts, expert_bytes, its, {"test": True})


def mixed_plan(seed=1, n_iter=8, k=4) -> Plan:
    """Every layer routed once per iteration with k distinct experts; experts repeat across
    iterations with a skew, so a frequency table and an arena matter."""
    rng = random.Random(seed)
    weights = [1.0 / (1 + e) for e in range(EXPERTS)]
    its = []
    for _ in range(n_iter):
        passes = []
        for layer in range(LAYERS):
            chosen: list[int] = []
            while len(chosen) < k:
                e = rng.choices(range(EXPERTS), weights)[0]
                if e not in chosen:
                    chosen.append(e)
            passes.append((layer, tuple(chosen)))
        its.append(passes)
    return make_plan(its)


def distinct_plan(k=4) -> Plan:
    """Every expert of the pool read exactly once, k per router pass: nothing in it can hit
    the cache unless something (a prefetcher) put it there."""
    order = [(l, e) for e in range(0, EXPERTS, k) for l in range(LAYERS)]
    its, cur = [], []
    for layer, e0 in order:
        cur.append((layer, tuple(range(e0, e0 + k))))
        if len(cur) == LAYERS:
            its.append(cur)
            cur = []
    return make_plan(its)
