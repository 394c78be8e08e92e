"""The qwen3 and dsv3 presets against the paper's §3 numbers for Qwen3-30B-A3B (E=128) and
DeepSeek-V3 (E=256): the numbers they were fitted to, tightly (agreement there is by
construction: tests/perf/fit_synth_presets.py chose the parameters on seed 11; seed 0 shows the
fit is not one seed's accident), and the other §3 numbers as held-out checks (test_check_*),
which the fit never looked at, as orderings or loose bands.

Computed here from generated data: each preset at full depth and its own token count (401 and
301), domains 0-3, fair-window per-layer hit rates (tests/support/preset_targets.py measure).
Held-out numbers the presets do NOT reach (docs/traces.md): the fitted Zipf slope (qwen3 0.99
vs 1.10-1.26, dsv3 0.72 vs 0.86-0.93); qwen3's B=8 order among the frequency policies (static
41% above LFU 39%, the paper 33.9% below 36.0%); at E=256 perfect LFU edges LRU at B=8 (the
paper: LRU leads at every budget) and the LRU-to-Belady gap is wider than K3's."""

from __future__ import annotations

from functools import cache

import pytest

from tests.support.preset_targets import FITTED, SEED, measure, traces

# Within the paper's range widened by: Table 1 rates 1 point, Fig. 1 points (one mean over
# the domains) 2 points.
TOLERANCE = {"w1": 0.01, "w64": 0.01, "top8": 0.01, "lru32": 0.02, "static32": 0.02}


def rates(name: str, seed: int = SEED) -> dict:
    return _measured(name, seed)


@cache
def _measured(name: str, seed: int) -> dict:
    if seed != SEED:     # a second seed: only what the fit looked at
        return measure(traces(name, seed=seed), budgets=(32,), policies=("lru", "static"))
    return measure(traces(name, seed=seed))


@pytest.mark.parametrize("seed", [SEED, 0])
@pytest.mark.parametrize("name", sorted(FITTED))
def test_fitted_numbers_match_the_paper(name, seed):
    got = rates(name, seed)
    off = {key: (round(got[key], 3), lo, hi) for key, (lo, hi) in FITTED[name].items()
           if not lo - TOLERANCE[key] <= got[key] <= hi + TOLERANCE[key]}
    assert off == {}


def test_check_qwen3_b8_inversion_frequency_ahead_of_lru():
    # paper, E=128 at B=8: LRU 30.1% below static 33.9% and LFU 36.0% (recency thrashes)
    q = rates("qwen3")
    assert q["static8"] > q["lru8"] + 0.05 and q["lfup8"] > q["lru8"] + 0.05
    assert abs(q["lru8"] - 0.301) <= 0.03
    assert abs(q["lfup8"] - 0.360) <= 0.05 and abs(q["static8"] - 0.339) <= 0.08


def test_check_tie_at_e128_lru_wins_at_e256():
    # Table 1, LRU vs static at B >= 32: a tie at E=128, LRU wins at E=256; B=32 is fitted,
    # so the check is B=64 (and, for E=256, every budget below: "LRU leads at every budget")
    q, d = rates("qwen3"), rates("dsv3")
    assert abs(q["lru64"] - q["static64"]) < 0.5 * (d["lru64"] - d["static64"])
    assert d["lru64"] - d["static64"] >= 0.1
    assert d["lru16"] > d["static16"] + 0.05 and d["lru8"] > d["static8"]


def test_check_qwen3_coverage_below_the_long_runs():
    # Fact 6: the 4,000-step runs reach 73-81% of the pool and still grow, so 400 steps cover less
    assert rates("qwen3")["coverage"] < 0.73


def test_check_concentration_falls_with_expert_count():
    # Fact 1: alpha 1.10-1.26 at E=128 above 0.86-0.93 at E=256; top-8 share 34-42% at E=128
    q, d = rates("qwen3"), rates("dsv3")
    assert q["alpha"] > d["alpha"] + 0.1
    assert q["top8"] > d["top8"] + 0.05


def test_check_belady_bound_falls_as_e_grows():
    # Fig. 1: larger pools are harder to cache; Belady at B=32 is 62% at E=896 (K3), so the
    # smaller pools lie above it, E=128 highest; the LRU-to-Belady gap widens with E
    q, d = rates("qwen3"), rates("dsv3")
    assert q["belady32"] > d["belady32"] > 0.62
    assert q["belady32"] - q["lru32"] < d["belady32"] - d["lru32"]


def test_check_domain_jaccard():
    # Table 1: Qwen3 0.066-0.454, DeepSeek-V3 0.032-0.085 (min-max over domain pairs)
    q, d = rates("qwen3")["jaccard"], rates("dsv3")["jaccard"]
    assert 0.056 <= q[0] and q[1] <= 0.454
    assert 0.022 <= d[0] and d[1] <= 0.085
    assert q[1] > d[1]
