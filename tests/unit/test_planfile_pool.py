"""Plans (BPLN) and pools: exact byte layout, validation, hints, resumable pool writing."""

import json
import struct

import pytest

from bench.errors import FormatError, PoolError
from bench.plan.planfile import (HINT, decode, encode, frequency_table, hints_from_file,
                                 oracle_hints, plan_from_trace, previous_token_hints, read_plan,
                                 write_plan)
from bench.plan.pool import HEADER, MAGIC, PoolSpec, check_pool, load_manifest, make_pool
from bench.trace.parse import parse_lines
from tests.support.traces import header, rec


def _plan(expert_bytes=4096):
    lines = [header(k=2, experts=8, layers=2, expert_bytes=expert_bytes),
             rec(0, [1, 2], 0), rec(1, [3, 4], 0),
             rec(0, [1, 2, 2, 5], 1), rec(1, [6, 7, 0, 3], 1),
             rec(0, [1, 2], 2), rec(1, [3, 4], 2), rec(1, [3, 5], 2)]
    return plan_from_trace(parse_lines(lines, "t.jsonl"), meta={"source": "t.jsonl"})


def test_byte_layout_matches_docs():
    p = _plan()
    data = encode(p)
    magic, ver, kind, layers, epl, eb, n_it, n_pass, n_read, meta_len, _ = struct.unpack_from(
        "<4sHHIIQIIQII", data)
    assert (magic, ver, kind, layers, epl, eb) == (b"BPLN", 1, 0, 2, 8, 4096)
    assert (n_it, n_pass, n_read) == (3, 7, 2 + 2 + 3 + 4 + 2 + 2 + 2)
    assert json.loads(data[48:48 + meta_len]) == {"source": "t.jsonl"}
    off = 48 + meta_len + (-(48 + meta_len) % 8)
    # iteration 1: first_pass 2, 2 passes, kind spec_accept (1), 2 tokens
    assert struct.unpack_from("<IHBB", data, off + 8) == (2, 2, 1, 2)
    # iteration 2 is a fallback (kind 2) with 3 passes
    assert struct.unpack_from("<IHBB", data, off + 16) == (4, 3, 2, 1)
    passes = off + 3 * 8
    assert struct.unpack_from("<IIQ", data, passes + 16 * 2) == (0, 3, 4)  # layer 0: 1,2,5
    reads = passes + 7 * 16
    assert struct.unpack_from("<3I", data, reads + 4 * 4) == (1, 2, 5)
    assert len(data) == reads + 4 * n_read


def test_round_trip_and_logical_bytes(tmp_path):
    p = _plan()
    path = tmp_path / "p.bin"
    write_plan(path, p)
    q = read_plan(path)
    assert [(it.kind, it.tokens, [(x.layer, x.experts) for x in it.passes]) for it in q.iterations] \
        == [(it.kind, it.tokens, [(x.layer, x.experts) for x in it.passes]) for it in p.iterations]
    assert q.logical_bytes == p.reads * 4096
    assert (0, 5) in q.distinct_experts() and len(q.distinct_experts()) == 3 + 6


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d[:20], "truncated"),
    (lambda d: b"XPLN" + d[4:], "not a plan"),
    (lambda d: d[:4] + b"\x09\x00" + d[6:], "version 9"),
    (lambda d: d[:-4], "header implies"),
    (lambda d: d + b"\0" * 4, "header implies"),
    (lambda d: d[:-4] + struct.pack("<I", 99), "expert 99"),
])
def test_damaged_plans_are_refused(mutate, words):
    with pytest.raises(FormatError, match=words):
        decode(mutate(encode(_plan())))


def test_hint_plans_have_the_replay_shape():
    p = _plan()
    o = oracle_hints(p)
    flat = [x for it in p.iterations for x in it.passes]
    hflat = [x for it in o.iterations for x in it.passes]
    assert o.kind == HINT and len(hflat) == len(flat)
    assert [(h.layer, h.experts) for h in hflat[:-1]] == [(x.layer, x.experts) for x in flat[1:]]
    assert hflat[-1].experts == ()
    assert decode(encode(o)).meta["provenance"] == {"source": "oracle"}
    prev = previous_token_hints(p)
    pflat = [x for it in prev.iterations for x in it.passes]
    assert pflat[0].experts == () and pflat[1].experts == (1, 2)  # pass 2 is layer 0 again
    assert pflat[5] .experts == (3, 4)  # before the fallback re-route of layer 1
    relabelled = hints_from_file(p, o, "pred.bin", run="run-17")
    # a file keeps what made it (origin): an oracle plan named as a file is still the oracle's
    assert relabelled.meta["provenance"] == {"source": "file", "file": "pred.bin", "run": "run-17",
                                             "origin": "oracle"}
    with pytest.raises(FormatError, match="not a hint plan"):
        hints_from_file(p, p, "x.bin")


def test_frequency_table():
    f = frequency_table(_plan())
    assert f[(0, 1)] == 3 and f[(1, 3)] == 4 and f[(0, 5)] == 1


def test_plan_needs_expert_size():
    t = parse_lines([rec(0, [1, 2], 0)], k=2)
    with pytest.raises(FormatError, match="expert size"):
        plan_from_trace(t)
    assert plan_from_trace(t, 100).expert_bytes == 100


def test_pool_files_are_real_data_and_resumable(tmp_path):
    spec = PoolSpec(2, 3, 70_000, seed=5)
    d = tmp_path / "pool"
    calls = []
    r = make_pool(d, spec, lambda done, total, b: calls.append(done))
    assert (r["written"], r["kept"]) == (6, 0) and calls[-1] == 6
    f = d / "L001" / "E0002.bin"
    data = f.read_bytes()
    assert len(data) == 70_000
    assert data[:32] == HEADER.pack(MAGIC, 1, 2, 70_000, 5)
    assert len(set(data[32:1000])) > 200  # random bytes, not zeros or a pattern
    assert f.stat().st_blocks * 512 >= 70_000  # written, not sparse
    # a crash mid-write leaves a short file: resuming rewrites exactly that one
    f.write_bytes(data[:100])
    (d / "L000" / "E0000.bin").unlink()
    r = make_pool(d, spec)
    assert (r["written"], r["kept"]) == (2, 4)
    assert f.read_bytes() == data
    assert load_manifest(d) == (spec, True)
    assert check_pool(d) == spec


def test_pool_refuses_to_overwrite(tmp_path):
    d = tmp_path / "pool"
    make_pool(d, PoolSpec(1, 2, 4096))
    with pytest.raises(PoolError, match="different pool"):
        make_pool(d, PoolSpec(1, 2, 8192))
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("x")
    with pytest.raises(PoolError, match="not empty"):
        make_pool(other, PoolSpec(1, 2, 4096))
    with pytest.raises(PoolError, match="no pool manifest"):
        check_pool(tmp_path / "nothing")
