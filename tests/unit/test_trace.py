"""The canonical parser: typing, accounting, errors with line numbers, merge, check."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.errors import TraceError
from bench.trace.parse import (NORMAL, SPEC_ACCEPT, SPEC_FALLBACK, merge, parse_lines, parse_trace,
                               suspicious_first_passes)
from bench.trace.synth import generate, preset
from tests.support.traces import header, rec

H = header()


def _normal(step, base=0):
    return [rec(l, [(base + l) % 8, (base + l + 1) % 8], step) for l in range(3)]


def test_types_and_accounting():
    lines = [H] + _normal(0) + [
        rec(0, [1, 2, 2, 3], 1), rec(1, [3, 4, 4, 5], 1), rec(2, [5, 6, 1, 2], 1),  # spec-accept
        rec(0, [1, 2], 2), rec(1, [3, 4], 2), rec(2, [1, 2], 2), rec(1, [3, 5], 2), rec(2, [7, 6], 2),
    ]
    t = parse_lines(lines)
    s = t.summary()
    assert (s["iterations"], s["normal"], s["spec_accept"], s["spec_fallback"]) == (3, 1, 1, 1)
    assert s["accepted_tokens"] == 1 + 2 + 1
    assert s["passes"] == 3 + 3 + 5
    # spec-accept passes read distinct experts once each: {1,2,3}, {3,4,5}, {5,6,1,2}
    assert s["reads"] == 6 + (3 + 3 + 4) + 10
    assert t.iterations[1].passes[0].experts == (1, 2, 3)
    assert t.iterations[1].passes[0].positions == ((1, 2), (2, 3))
    assert [p.layer for p in t.iterations[2].passes] == [0, 1, 2, 1, 2]


def test_fallback_without_step_is_an_immediate_repeat():
    lines = [H, rec(0, [1, 2]), rec(1, [3, 4]), rec(1, [3, 5]), rec(2, [1, 2]),
             rec(0, [1, 2]), rec(1, [3, 4]), rec(2, [1, 2])]
    t = parse_lines(lines)
    assert [it.kind for it in t.iterations] == [SPEC_FALLBACK, NORMAL]
    assert t.accepted_tokens == 2


def test_requested_300_tokens_give_299_accepted_with_speculation():
    t = parse_lines(list(generate(preset("k3", tokens=300, layers=6, experts_per_layer=64))))
    assert t.accepted_tokens == 299
    assert t.count(SPEC_ACCEPT) > 0 and t.count(SPEC_FALLBACK) > 0
    assert t.count(NORMAL) + 2 * t.count(SPEC_ACCEPT) + t.count(SPEC_FALLBACK) == 299
    assert t.prefill_records == 6


@pytest.mark.parametrize("lines, line, words", [
    ([H, "{not json"], 2, "bad JSON"),
    ([H, rec(0, [1, 2, 3], 0)], 2, "width 3"),
    ([H, rec(3, [1, 2], 0)], 2, "layer 3 out of range"),
    ([H, rec(0, [1, 8], 0)], 2, "expert 8 out of range"),
    ([H, rec(0, [-1, 2], 0)], 2, "expert -1 out of range"),
    ([H, rec(0, [4, 4], 0)], 2, "expert 4 selected twice"),
    ([H, rec(0, [1, 2, 3, 3], 0)], 2, "selected twice in position 2"),
    ([H, rec(0, [1, 2], 0), rec(1, [1, 2, 3, 4], 0)], 3, "differs from width"),
    ([H, rec(0, [1, 2], 0), rec(1, [1, 2], 0), rec(1, [1, 3], 0), rec(1, [1, 4], 0)], 5,
     "routed 3 times"),
    ([H, rec(0, [1, 2], 0), rec(1, [1, 2], 0), rec(0, [1, 3], 0), rec(2, [1, 4], 0),
      rec(1, [2, 3], 0)], 6, "neither cleanly"),
    ([H, rec(0, [1, 2, 3, 4], 0), rec(1, [1, 2, 3, 4], 0), rec(1, [1, 2, 3, 4], 0)], 4,
     "spec-accept"),
    ([H, rec(0, [1, 2], 0), rec(2, [1, 2], 0), rec(1, [1, 2], 0)], 4, "out of order"),
    ([H, rec(0, [1, 2], 0), rec(1, [1, 2], 0)], 2, "routes 2 of 3 layers"),
    ([H] + _normal(1) + [rec(0, [1, 2], 0)], 5, "must not go back"),
    ([H, rec(0, [1, 2], 0), H], 3, "header line after"),
    ([H, json.dumps({"layer": 0, "experts": "x"})], 2, "non-empty list"),
    ([H, json.dumps({"layer": "0", "experts": [1, 2]})], 2, "'layer' must be an integer"),
    ([H, json.dumps([1, 2])], 2, "JSON object"),
])
def test_malformed_records_name_file_and_line(write_trace, lines, line, words):
    path = write_trace(lines)
    with pytest.raises(TraceError) as exc:
        parse_trace(path)
    assert exc.value.line == line
    assert str(exc.value).startswith(f"{path}:{line}: ")
    assert words in str(exc.value)


def test_headerless_needs_k_and_layers_agree():
    with pytest.raises(TraceError, match="no header line and no k"):
        parse_lines([rec(0, [1, 2], 0)])
    t = parse_lines([rec(0, [1, 2], 0), rec(1, [3, 4], 0)], k=2)
    assert t.layer_count() == 2 and t.expert_count() == 5
    with pytest.raises(TraceError, match="iteration routes 1 layers"):
        parse_lines([rec(0, [1, 2], 0), rec(1, [3, 4], 0), rec(0, [1, 2], 1)], k=2)


def test_prefill_is_excluded_and_counted():
    lines = [H, rec(0, [1, 2], phase="prefill"), rec(1, [1, 2], phase="prefill"),
             rec(2, [1, 2], phase="prefill")] + _normal(0)
    t = parse_lines(lines)
    assert t.prefill_records == 3 and len(t.iterations) == 1


def test_llama_eval_callback_shape():
    lines = [json.dumps({"token": 0, "n_tokens": 5, "name": f"ffn_moe_topk-{l}",
                         "experts": list(range(8))}) for l in range(2)]
    for tok in range(1, 4):
        for l in range(2):
            lines.append(json.dumps({"token": tok, "name": f"ffn_moe_topk-{l}",
                                     "experts": [(tok + i) % 16 for i in range(8)]}))
    t = parse_lines(lines)
    assert t.model.k == 8
    assert t.prefill_records == 2
    assert (len(t.iterations), t.accepted_tokens, t.reads) == (3, 3, 3 * 2 * 8)
    with pytest.raises(TraceError, match="width 8 is neither k=3"):
        parse_lines(lines, k=3)


def test_synth_llama_shape_round_trips():
    t = parse_lines(list(generate(preset("qwen3", shape="llama", tokens=41))))
    assert t.model.k == 8 and t.accepted_tokens == 40 and t.count(NORMAL) == 40
    assert t.layer_count() == 48


def test_batch_merge_truncates_and_unions():
    a = parse_lines([H] + _normal(0) + _normal(1, 1) + _normal(2, 2), "a")
    b = parse_lines([H, rec(0, [1, 2], 0), rec(1, [1, 2], 0), rec(1, [3, 4], 0), rec(2, [5, 6], 0),
                     rec(0, [1, 2, 3, 4], 1), rec(1, [1, 2, 3, 4], 1), rec(2, [1, 2, 3, 4], 1)], "b")
    m = merge([a, b])
    assert len(m.iterations) == 2
    assert m.accepted_tokens == (1 + 1) + (1 + 2)
    first = m.iterations[0]
    # layer 1 of b was routed twice: its second routing stays a separate pass
    assert [(p.layer, p.experts) for p in first.passes] == [
        (0, (0, 1, 2)), (1, (1, 2)), (2, (2, 3, 5, 6)), (1, (3, 4))]
    assert m.meta == {"batch": 2, "truncated_to": 2}


def test_check_flags_identical_first_pass():
    dry = [parse_lines(list(generate(preset("tiny", domain=d, dry_run_pass=True))), f"d{d}")
           for d in range(3)]
    clean = [parse_lines(list(generate(preset("tiny", domain=d))), f"c{d}") for d in range(3)]
    assert suspicious_first_passes(dry) == [["d0", "d1", "d2"]]
    assert suspicious_first_passes(clean) == []


@st.composite
def traces(draw):
    k = draw(st.integers(1, 3))
    experts = draw(st.integers(2 * k, 12))
    layers = draw(st.integers(1, 4))
    kinds = draw(st.lists(st.sampled_from([NORMAL, SPEC_ACCEPT, SPEC_FALLBACK]), min_size=1,
                          max_size=8))
    pick = st.lists(st.integers(0, experts - 1), min_size=k, max_size=k, unique=True)
    lines = [header(k, experts, layers)]
    reads = passes = 0
    for step, kind in enumerate(kinds):
        for l in range(layers):
            ex = draw(pick) + (draw(pick) if kind == SPEC_ACCEPT else [])
            lines.append(rec(l, ex, step))
            reads += len(set(ex))
            passes += 1
        if kind == SPEC_FALLBACK:
            start = draw(st.integers(0, layers - 1))
            for l in range(start, layers):
                ex = draw(pick)
                lines.append(rec(l, ex, step))
                reads += len(ex)
                passes += 1
    return lines, kinds, reads, passes


@settings(max_examples=150, deadline=None)
@given(traces())
def test_parser_recovers_the_construction(case):
    lines, kinds, reads, passes = case
    t = parse_lines(lines)
    assert [it.kind for it in t.iterations] == kinds
    assert t.accepted_tokens == sum(2 if k == SPEC_ACCEPT else 1 for k in kinds)
    assert (t.reads, t.passes) == (reads, passes)
