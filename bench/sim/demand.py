"""The constant-free demand model (docs/design.md, the paper's Table 2 "miss" column).

Simulate LRU over one global pool of C / S experts (keys (layer, expert)), replay the plan
twice as the agent does (warm-up, then measured), and multiply the measured pass's misses by
the expert size: nominal miss bytes per iteration. Amplification is measured device bytes
divided by this figure; it needs no bandwidth constant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bench.errors import InputError
from bench.plan.planfile import Plan
from bench.sim.stackdist import lru_stack_distances
from bench.units import GB, format_size


def plan_keys(plan: Plan) -> np.ndarray:
    """Global key of every read of one replay: layer * experts_per_layer + expert."""
    keys = [p.layer * plan.experts_per_layer + e
            for it in plan.iterations for p in it.passes for e in p.experts]
    return np.asarray(keys, np.int64)


def demand(plan: Plan, capacities: Sequence[int]) -> list[dict]:
    """One row per capacity (bytes): misses of the measured pass and nominal miss GB/iteration."""
    if not plan.iterations:
        raise InputError("the plan has no iterations")
    keys = plan_keys(plan)
    n = keys.shape[0]
    dist = lru_stack_distances(np.concatenate([keys, keys]))[n:]
    iters = len(plan.iterations)
    rows = []
    for cap in capacities:
        if cap <= 0:
            raise InputError(f"capacity must be positive, got {cap}")
        slots = cap // plan.expert_bytes
        misses = int(np.count_nonzero(dist >= slots))
        rows.append({
            "trace": plan.meta.get("source", "<plan>"),
            "capacity": format_size(cap),
            "capacity_bytes": cap,
            "capacity_experts": int(slots),
            "expert_bytes": plan.expert_bytes,
            "iterations": iters,
            "reads": n,
            "misses": misses,
            "misses_per_iteration": misses / iters,
            "hit_rate": 1 - misses / n if n else 0.0,
            "nominal_miss_bytes_per_iteration": misses * plan.expert_bytes / iters,
            "nominal_miss_gb_per_iteration": misses * plan.expert_bytes / iters / GB,
            "logical_gb_per_iteration": n * plan.expert_bytes / iters / GB,
        })
    return rows


def amplification(device_bytes_per_iteration: float,
                  nominal_miss_bytes_per_iteration: float) -> float | None:
    """Measured device bytes over nominal miss bytes; None when the model predicts no misses."""
    if nominal_miss_bytes_per_iteration <= 0:
        return None
    return device_bytes_per_iteration / nominal_miss_bytes_per_iteration
