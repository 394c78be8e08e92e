"""The trace parser and the plan reader on hostile numbers, as data: every refusal names the file,
the line and the key, and nothing is allocated from a header's claim (Python's allocations
traced while the refusal is made). The same inputs go through the CLI in
tests/local/test_hostile_inputs.py."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from bench.errors import FormatError, TraceError
from bench.plan.planfile import decode, encode, plan_from_trace, read_plan
from bench.trace.parse import LIMITS, MAX_LINE_CHARS, BigInt, parse_lines, parse_trace
from tests.support.hostile_inputs import HEADER, good_records, header_with, rebuild_plan


def _refusal(lines: list[str]) -> str:
    with pytest.raises(TraceError) as exc:
        parse_lines(lines, "t.jsonl")
    return exc.value.message


@pytest.mark.parametrize("changes, says", [
    # claims a regression would size memory from stay small here (a unit test has no cap:
    # tests/local/test_hostile_inputs.py runs the absurd ones under one)
    ({"layers": 5000}, "t.jsonl:1: key 'layers': 5000 is outside what bench reads [1, 4096]"),
    ({"experts_per_layer": 1 << 21}, "t.jsonl:1: key 'experts_per_layer': 2097152 is outside"),
    ({"layers": 4096, "experts_per_layer": 4097}, "4096 layers x 4097 experts is more than"),
    ({"expert_bytes": (1 << 40) + 1}, "t.jsonl:1: key 'expert_bytes': 1099511627777"),
    ({"k": 1025}, "t.jsonl:1: key 'k': 1025 is outside what bench reads [1, 1024]"),
    ({"expert_bytes": "1" + "0" * 30}, "t.jsonl:1: key 'expert_bytes': an integer of 31 "
                                       "digits"),
])
def test_a_header_claim_is_refused_before_anything_is_sized_from_it(changes, says):
    tracemalloc.start()
    try:
        msg = _refusal([header_with(**changes), *good_records()])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert says in msg, msg
    assert peak < 1 << 20, peak         # a MiB at most: nothing sized from the claim


def test_the_limits_admit_the_models_the_study_uses():
    from bench.trace.synth import PRESETS
    for p in PRESETS.values():
        assert p.layers * p.experts_per_layer <= LIMITS["slots"]
        assert p.k <= LIMITS["k"] and p.expert_bytes <= LIMITS["expert_bytes"]


def test_a_long_integer_is_never_converted():
    """A 10^5-digit literal stays a marker (Python's int() of it is refused past 4300 digits
    and quadratic below); the key holding it refuses it by name."""
    msg = _refusal([json.dumps(HEADER), '{"step": 0, "layer": 0, "experts": [1, '
                    + "7" * 100_000 + "]}"])
    assert msg == ("t.jsonl:2: key 'experts': expert id of an integer of 100000 digits "
                   "(at most 20)")
    assert repr(BigInt(21)) == "an integer of 21 digits (at most 20)"


def test_a_line_is_read_no_further_than_the_bound(tmp_path):
    p = tmp_path / "t.jsonl"
    with p.open("w") as f:
        f.write(json.dumps(HEADER) + "\n" + "[" * (MAX_LINE_CHARS * 4))
    with pytest.raises(TraceError) as exc:
        parse_trace(p)
    assert exc.value.message == f"{p}:2: line longer than {MAX_LINE_CHARS} characters"


def test_a_plan_header_is_held_to_the_same_shape_and_to_the_file_size(tmp_path, write_trace):
    trace = write_trace([json.dumps(HEADER), *good_records()])
    data = encode(plan_from_trace(parse_trace(trace)))
    assert decode(data).layers == HEADER["layers"]
    for fields, says in (({"layers": 1 << 31}, "header field 'layers': 2147483648 is outside"),
                         ({"reads": 1 << 40}, "plan size"),
                         ({"meta_len": (1 << 32) - 1}, "plan size")):
        p = tmp_path / "p.bin"
        p.write_bytes(rebuild_plan(data, **fields))
        with pytest.raises(FormatError) as exc:
            read_plan(p)
        assert exc.value.message.startswith(f"{p}: ") and says in exc.value.message
    for meta, says in ((b"[]", "must be a JSON object, got list"),
                       (b'{"a": {"b": ' + b"9" * 50 + b"}}", "key 'a.b': an integer of 50"),
                       (b"[" * 100_000, "nested too deep")):
        with pytest.raises(FormatError) as exc:
            decode(rebuild_plan(data, meta=meta), "p.bin")
        assert exc.value.message.startswith("p.bin: plan metadata") and says in \
            exc.value.message, exc.value.message
