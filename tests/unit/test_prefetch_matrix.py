"""The prefetch matrix's lab scale (bench schedule --matrix prefetch --scale lab --hosts
local): the five conditions of Fig. 6 at one capacity, on any host, classic reclaim (the
project's kernels have no MGLRU), and the paper's regime checked by computation: at the lab
capacity the demand model's LRU hit rate on the lab trace is near the page cache's 75.3% of
demand served at 256G (§6), and the pilot's recall near the paper's recurrence baseline
(32-36%) while the oracle's is 1. A scale's `reclaims` key replaces cells.reclaims."""

from __future__ import annotations

import pytest

from bench.errors import InputError
from bench.matrix.load import load_matrix, parse_matrix
from bench.plan.planfile import oracle_hints, previous_token_hints, read_plan
from bench.plan.prepared import workload_plan
from bench.sim.demand import demand
from bench.sim.recall import recall

PAPER_SERVED_AT_256G = 0.753      # §6: the page cache serves 75.3% of demand


def test_lab_scale_runs_the_five_conditions_on_any_host():
    m = load_matrix("prefetch", scale="lab")
    names = sorted(p.key for p in m.points)
    (c,) = {p.capacity.text for p in m.points}          # one capacity (the regime test sets it)
    assert names == [f"{c}-cgroup-classic", f"{c}-cgroup-classic-oracle-advice",
                     f"{c}-cgroup-classic-oracle-block", f"{c}-cgroup-classic-pilot-advice",
                     f"{c}-cgroup-classic-pilot-block"]
    assert m.tags is None and m.repetitions == 2
    assert m.protocol["cgroup_headroom"] == 16 << 20
    full = load_matrix("prefetch")
    assert {p.reclaim for p in full.points} == {"mglru"}     # the paper's matrix unchanged


def test_lab_scale_keeps_the_papers_regime(tmp_path):
    m = load_matrix("prefetch", scale="lab")
    info, path = workload_plan(m.workload, tmp_path)
    plan = read_plan(path)
    (cap,) = {int(p.capacity.value) for p in m.points}
    (row,) = demand(plan, [cap])
    print(f"LRU hit rate at {cap}: {row['hit_rate']:.3f} (paper served {PAPER_SERVED_AT_256G})")
    assert abs(row["hit_rate"] - PAPER_SERVED_AT_256G) < 0.05
    assert row["nominal_miss_gb_per_iteration"] > 0         # the wall is below the working set
    pilot = recall(plan, previous_token_hints(plan))["recall"]
    assert 0.25 <= pilot <= 0.45 and recall(plan, oracle_hints(plan))["recall"] == 1.0


def test_a_scale_replaces_the_reclaims():
    doc = {"name": "x", "description": "d", "repetitions": 1,
           "workload": {"trace": "tiny"}, "hosts": {"placement": "each"},
           "estimate": {"run_seconds": 1, "reboot_seconds": 1},
           "cells": {"capacities": ["1G"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]},
           "scale": {"s": {"capacities": {"1G": "10M"}, "reclaims": {"mglru": "classic"}}}}
    from bench.matrix.load import apply_scale
    m = parse_matrix(apply_scale(doc, "s", "x.toml"), "x.toml")
    assert [p.reclaim for p in m.points] == ["classic"]
    bad = dict(doc, scale={"s": {"capacities": {"1G": "10M"}, "reclaims": {"mglru": "lru"}}})
    with pytest.raises(InputError, match="reclaims"):
        apply_scale(bad, "s", "x.toml")
