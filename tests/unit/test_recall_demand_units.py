"""Prediction recall, the demand model, and size units."""

import pytest

from bench.errors import InputError
from bench.plan.planfile import HINT, Plan, oracle_hints, plan_from_trace, previous_token_hints
from bench.sim.demand import amplification, demand, plan_keys
from bench.sim.recall import recall, recall_report
from bench.trace.parse import Iteration, Pass, parse_lines
from bench.trace.synth import generate, preset
from bench.units import format_size, parse_size
from tests.support.traces import header, rec


def _plan():
    lines = [header(k=2, experts=8, layers=2, expert_bytes=1000)]
    for step, (a, b) in enumerate([([1, 2], [3, 4]), ([1, 5], [3, 6]), ([1, 2], [3, 4])]):
        lines += [rec(0, a, step), rec(1, b, step)]
    return plan_from_trace(parse_lines(lines), meta={"source": "t"})


def test_oracle_recall_is_one_and_previous_token_by_hand():
    p = _plan()
    assert recall(p, oracle_hints(p))["recall"] == 1.0
    r = recall(p, previous_token_hints(p))
    # targets: L1{3,4}: no history -> 0/2; L0{1,5}: prev {1,2} -> 1/2; L1{3,6}: {3,4} -> 1/2;
    # L0{1,2}: {1,5} -> 1/2; L1{3,4}: {3,6} -> 1/2
    assert (r["hits"], r["demanded"]) == (4, 10)
    assert r["per_layer"] == {0: 0.5, 1: 2 / 6}
    assert r["provenance"] == {"source": "previous-token"}


def test_recall_of_a_recorded_plan_keeps_its_label():
    p = _plan()
    empty = [Iteration(it.index, it.kind, it.tokens,
                       tuple(Pass(x.layer, ()) for x in it.passes)) for it in p.iterations]
    h = Plan(HINT, 2, 8, 1000, tuple(empty), {"provenance": {"source": "file", "run": "r1"}})
    rep = recall_report(p, h)
    assert rep["hints"]["recall"] == 0.0 and rep["hints"]["provenance"]["run"] == "r1"
    assert rep["previous_token_baseline"]["recall"] == 0.4


def test_previous_token_recall_tracks_w1_on_synthetic_traces():
    from bench.trace.locality import trace_stats
    t = parse_lines(list(generate(preset("k3", tokens=200, layers=8, spec_accept=0, fallback=0))))
    p = plan_from_trace(t)
    r = recall(p, previous_token_hints(p))["recall"]
    assert abs(r - trace_stats(t)["reuse"]["w1"]) < 0.02


def test_demand_counts_misses_of_the_measured_pass():
    p = _plan()
    keys = plan_keys(p).tolist()
    assert keys == [1, 2, 11, 12, 1, 5, 11, 14, 1, 2, 11, 12]
    rows = demand(p, [100_000, 6000, 2000])
    big, six, two = rows
    assert big["misses"] == 0                      # everything fits: the warm-up loaded it
    assert big["nominal_miss_gb_per_iteration"] == 0
    # 6 slots = every distinct key: no misses in the measured pass either
    assert six["capacity_experts"] == 6 and six["misses"] == 0
    # 2 slots: a cyclic 4-key working set per pair of passes -> LRU misses everything
    assert two["misses"] == 12 and two["nominal_miss_bytes_per_iteration"] == 12 * 1000 / 3
    assert amplification(2 * 4000, 4000) == 2 and amplification(1, 0) is None
    with pytest.raises(InputError):
        demand(p, [0])


@pytest.mark.parametrize("text, value", [("64G", 64 << 30), ("768M", 768 << 20), ("4096", 4096),
                                         ("1.5G", 3 << 29), ("2GiB", 2 << 30), ("1t", 1 << 40)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "64X", "-1G", "1.3K"])
def test_parse_size_rejects(text):
    with pytest.raises(InputError):
        parse_size(text)


def test_format_size_inverts_parse():
    for s in ("64G", "768M", "3K", "100"):
        assert format_size(parse_size(s)) == s
