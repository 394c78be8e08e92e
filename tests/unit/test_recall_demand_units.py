"""Prediction recall, the demand model, and size units."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


@pytest.mark.parametrize("text, value", [
    ("64G", 64 * 10 ** 9), ("768M", 768 * 10 ** 6), ("1K", 1000), ("1T", 10 ** 12),
    ("64Gi", 64 << 30), ("768Mi", 768 << 20), ("6Gi", 6 << 30), ("1Ti", 1 << 40),
    ("64g", 64 * 10 ** 9), ("64gi", 64 << 30), ("64GB", 64 * 10 ** 9), ("2GiB", 2 << 30),
    ("4096", 4096), ("1.5G", 1_500_000_000), ("1.5Gi", 3 << 29), (".5K", 500), (7, 7)])
def test_parse_size_decimal_units_binary_with_i(text, value):
    """K/M/G/T are decimal as the paper writes capacities; Ki/Mi/Gi/Ti binary; bytes bare."""
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "G", "64X", "-1G", "1.3K5", "0.5", "1.0001K", "64iG",
                                  "64 G i", "64Gib5", -1])
def test_parse_size_rejects(text):
    with pytest.raises(InputError):
        parse_size(text)


@pytest.mark.parametrize("n, text", [
    (64 * 10 ** 9, "64G"), (768 * 10 ** 6, "768M"), (3000, "3K"), (100, "100B"), (0, "0"),
    (64 << 30, "64Gi"), (6 << 30, "6Gi"), (256 << 20, "256Mi"), (4096, "4Ki"),
    (2048000, "2048K"), (1_000_001, "1000001B"), (448 * 10 ** 9, "448G"), (10 ** 12, "1T")])
def test_format_size_prefers_the_largest_decimal_unit_then_binary(n, text):
    assert format_size(n) == text
    assert parse_size(text) == n


@given(st.integers(0, 10 ** 15))
def test_format_then_parse_is_identity(n):
    assert parse_size(format_size(n)) == n
    assert parse_size(format_size(n).lower()) == n
    assert parse_size(format_size(n), unit_required=True) == n


@pytest.mark.parametrize("text", ["64", " 64 ", "1.5", "4096"])
def test_a_size_option_refuses_a_bare_number_with_the_fix(text):
    """Where a size is expected, 64 is never read as 64 bytes: the refusal says how to write
    it; where bytes are asked for (unit_required=False) the same text is bytes."""
    with pytest.raises(InputError) as exc:
        parse_size(text, "--capacity", unit_required=True)
    n = text.strip()
    assert exc.value.message == f"--capacity {n} has no unit"
    assert f"write {n}G (decimal" in exc.value.hint and f"{n}Gi (binary" in exc.value.hint
    assert f"{n}B if you mean bytes" in exc.value.hint


@pytest.mark.parametrize("text, value", [("64B", 64), ("64G", 64 * 10 ** 9), ("0", 0),
                                         ("64GiB", 64 << 30), ("64gb", 64 * 10 ** 9)])
def test_a_size_option_takes_every_unit_spelling(text, value):
    assert parse_size(text, "--capacity", unit_required=True) == value


def test_kernel_sizes_are_binary_and_bench_writes_bytes():
    """The kernel's memparse reads mem=102G as 102 GiB; bench hands it exact bytes."""
    from bench.units import kernel_size, parse_kernel_size
    assert parse_kernel_size("102G") == 102 << 30 and parse_kernel_size("768m") == 768 << 20
    assert kernel_size(parse_size("102G")) == "102000000000"
    assert parse_kernel_size(kernel_size(parse_size("102G"))) == 102 * 10 ** 9
    for bad in ("1.5G", "64Gi", "64GB", "64 G"):
        with pytest.raises(InputError):
            parse_kernel_size(bad)
