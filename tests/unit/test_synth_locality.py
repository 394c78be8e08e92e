"""Synthetic traces land near their parameters, measured by the locality analysis."""

import numpy as np
import pytest

from bench.errors import InputError
from bench.trace.locality import jaccard, locality, reuse, top_share, trace_stats, zipf_slope
from bench.trace.parse import SPEC_ACCEPT, SPEC_FALLBACK, parse_lines
from bench.trace.synth import generate, preset
from tests.support.traces import header, rec


# The k3 preset's non-stationarity (phases, bursts) switched off: tests of one generator
# parameter measure that parameter alone.
STILL = {"drift": 0.0, "burst": 0.0}


def _trace(name="tiny", **kw):
    return parse_lines(list(generate(preset(name, **kw))), f"{name}-{kw.get('domain', 0)}")


def test_same_seed_same_bytes_and_seed_matters():
    a = list(generate(preset("tiny", seed=7)))
    assert a == list(generate(preset("tiny", seed=7)))
    assert a != list(generate(preset("tiny", seed=8)))


def test_model_dimensions_and_token_count_are_exact():
    t = _trace("dsv3", tokens=41)
    assert (t.model.k, t.layer_count(), t.expert_count()) == (8, 58, 256)
    assert t.accepted_tokens == 40


def test_speculation_rates_land_near_parameters():
    t = _trace("tiny", tokens=3000, spec_accept=0.2, fallback=0.1)
    n = len(t.iterations)
    assert abs(t.count(SPEC_ACCEPT) / n - 0.2) < 0.03
    assert abs(t.count(SPEC_FALLBACK) / n - 0.1) < 0.03


@pytest.mark.parametrize("alpha", [0.8, 1.0, 1.3])
def test_zipf_slope_lands_near_alpha(alpha):
    # No reuse and no gradient: the fit sees the generator's slope, but top-k selection caps
    # the head at one pick per position, which reads a little flat (measured about -5%).
    t = _trace("k3", tokens=400, alpha=alpha, head=0.0, gradient=0.0, reuse=0.0, layers=8,
               **STILL)
    fit = trace_stats(t)["zipf_alpha"]
    assert abs(fit - alpha) <= 0.12 * alpha, fit


def test_gradient_makes_deep_layers_more_concentrated():
    s = trace_stats(_trace("k3", tokens=300, gradient=1.0, layers=10, **STILL))
    per = s["top8_share"]["per_layer"]
    assert per[-1] > per[0] * 1.5
    slopes = s["zipf_alpha_per_layer"]
    assert slopes[-1] > slopes[0]


@pytest.mark.parametrize("r", [0.0, 0.3, 0.6])
def test_reuse_w1_lands_near_parameter(r):
    # W1 = copies (rate r) plus fresh draws that happen to repeat the previous position (at
    # most the reuse-free rate `base`, less once copies have taken some of those experts).
    base = trace_stats(_trace("k3", tokens=300, reuse=0.0, layers=8, **STILL))["reuse"]["w1"]
    w1 = trace_stats(_trace("k3", tokens=300, reuse=r, layers=8, **STILL))["reuse"]["w1"]
    assert r - 0.02 <= w1 <= r + (1 - r) * base + 0.02, (w1, r, base)


def test_domain_overlap_controls_jaccard():
    def jac(overlap):
        ts = [_trace("k3", tokens=300, overlap=overlap, domain=d, layers=8, **STILL)
              for d in range(2)]
        return locality(ts, top=16)["jaccard"][0]["jaccard"]
    lo, mid, hi = jac(0.0), jac(0.5), jac(1.0)
    assert lo < mid < hi
    assert hi > 0.5 and lo < 0.2


def test_reuse_counts_by_hand():
    # layer 0 positions: {1,2}, {2,3}, {4,5}, {1,4}; selections at t>=1: 6
    positions = {0: [(1, 2), (2, 3), (4, 5), (1, 4)]}
    r = reuse(positions, windows=(1, 2, 3))
    assert r["w1"] == pytest.approx(2 / 6)   # 2 (from t0), 4 (from t2)
    assert r["w2"] == pytest.approx(2 / 6)
    assert r["w3"] == pytest.approx(3 / 6)   # + 1 (from t0, gap 3)


def test_top_share_zipf_and_jaccard_by_hand():
    counts = np.array([[10, 0, 5, 5], [1, 1, 1, 1]])
    assert top_share(counts, 2).tolist() == [0.75, 0.5]
    c = np.array([1000 / r for r in range(1, 60)])
    assert zipf_slope(c) == pytest.approx(1.0, abs=0.02)
    assert zipf_slope(np.array([9, 9, 1])) is None
    assert jaccard({1, 2}, {2, 3}) == pytest.approx(1 / 3)


def test_stats_cover_table1_quantities():
    lines = [header(k=2, experts=4, layers=2)]
    lines += [rec(0, [0, 1], 0), rec(1, [2, 3], 0), rec(0, [0, 2], 1), rec(1, [2, 3], 1)]
    s = trace_stats(parse_lines(lines))
    assert s["union_coverage"]["per_layer"] == [3, 2]
    assert s["pool_coverage_growth"] == [0.5, 0.625]
    assert s["top8_share"]["per_layer"] == [1.0, 1.0]
    assert s["reuse"]["w1"] == pytest.approx(3 / 4)


def test_bad_synth_parameters_are_refused():
    with pytest.raises(InputError, match="unknown preset"):
        preset("gpt")
    with pytest.raises(InputError, match="reuse must be in"):
        preset("tiny", reuse=1.5)
    with pytest.raises(InputError, match="llama shape has no speculative"):
        preset("k3", shape="llama")
