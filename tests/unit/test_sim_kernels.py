"""The compiled simulator kernels (native/sim/simkern.c via bench.sim.kernels) against the
numpy/Python fallbacks (BENCH_SIM_NATIVE=0): identical distances and hit flags, access by
access, on many random streams, and identical simulate() rows in both regimes on random traces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim import build, kernels
from bench.sim.policies import belady_hits, lfu_hits
from bench.sim.simulate import simulate
from bench.sim.stackdist import lru_hits_by_capacity, lru_stack_distances, next_use, prev_next
from bench.trace.parse import parse_lines


@pytest.fixture(scope="module", autouse=True)
def compiled():
    if build.compiler() is None:
        pytest.skip("no C compiler (cc/gcc) on this machine to build the simulator kernels")
    assert build.ensure() is not None, "the kernels failed to build or load"


def both(monkeypatch, fn):
    """fn() with the kernels, then with the fallbacks."""
    monkeypatch.setenv("BENCH_SIM_NATIVE", "1")
    assert kernels.library() is not None
    a = fn()
    monkeypatch.setenv("BENCH_SIM_NATIVE", "0")
    assert kernels.library() is None
    b = fn()
    monkeypatch.setenv("BENCH_SIM_NATIVE", "1")
    return a, b


streams = st.lists(st.integers(0, 40), min_size=0, max_size=400)


@given(keys=streams, cap=st.integers(0, 45), offset=st.sampled_from([0, 7, 2**40, -5]))
@settings(max_examples=400, deadline=None)
def test_kernels_equal_fallbacks_on_random_streams(keys, cap, offset):
    with pytest.MonkeyPatch.context() as mp:
        k = np.array(keys, np.int64) + offset       # large and negative keys take the dense path
        mask = (np.arange(k.size) % 3) != 0
        caps = [cap, 1, cap + 3, 2]

        def run():
            d = lru_stack_distances(k)
            return (d, lru_hits_by_capacity(d, caps, mask), lru_hits_by_capacity(d, caps),
                    lfu_hits(k, cap), belady_hits(k, cap), next_use(k))

        a, b = both(mp, run)
        for x, y in zip(a, b):
            assert x.dtype == y.dtype
            assert x.tolist() == y.tolist()
        assert a[5].tolist() == prev_next(k)[1].tolist()


def test_kernels_on_a_long_stream_cross_every_word_boundary(monkeypatch):
    """Long enough for the LRU bitset's many words and the Fenwick tree's upper levels."""
    rng = np.random.default_rng(7)
    k = (rng.zipf(1.3, 20_000) % 3_000).astype(np.int64)
    a, b = both(monkeypatch, lambda: (lru_stack_distances(k), lfu_hits(k, 200),
                                      belady_hits(k, 200)))
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


def synth(seed, k=3, experts=24, layers=3, iterations=60):
    rng = np.random.default_rng(seed)
    lines = [json.dumps({"model": "s", "k": k, "experts_per_layer": experts, "layers": layers})]
    for step in range(iterations):
        for layer in range(layers):
            chosen = rng.choice(experts, k, replace=False, p=None).tolist()
            lines.append(json.dumps({"step": step, "layer": layer, "experts": chosen}))
    return parse_lines(lines, f"s{seed}")


@st.composite
def traces(draw, k=3, experts=24, layers=3):
    """A random routing trace: each (token, layer) routes k distinct experts of `experts`."""
    iterations = draw(st.integers(20, 60))     # enough that a budget of 7 must hit
    chosen = st.lists(st.integers(0, experts - 1), min_size=k, max_size=k, unique=True)
    lines = [json.dumps({"model": "s", "k": k, "experts_per_layer": experts, "layers": layers})]
    for step in range(iterations):
        for layer in range(layers):
            lines.append(json.dumps({"step": step, "layer": layer, "experts": draw(chosen)}))
    return parse_lines(lines, "s")


@given(tr=traces(), regime=st.sampled_from(["per-layer", "global"]))
@settings(max_examples=40, deadline=None)
def test_simulate_rows_identical_with_and_without_kernels(tr, regime):
    with pytest.MonkeyPatch.context() as mp:
        a, b = both(mp, lambda: simulate(tr, regime=regime, budgets=(1, 2, 4, 7)))
    assert a == b
    assert any(r["hits"] for r in a)


def test_a_non_library_or_another_abi_is_ignored(monkeypatch, tmp_path):
    """BENCH_SIM_LIB naming a file that is not a library of this ABI is skipped, not loaded."""
    bogus = tmp_path / "libbogus.so"
    bogus.write_bytes(b"not an ELF file")
    monkeypatch.setenv("BENCH_SIM_LIB", str(bogus))
    kernels.reset()
    assert kernels._open(bogus) is None
    assert kernels.library() is not None          # the next candidate (the built one) loads
    kernels.reset()


def test_a_library_others_could_write_is_not_loaded(tmp_path):
    built = kernels.loaded_path()
    assert built is not None
    copy = tmp_path / "libcopy.so"
    copy.write_bytes(built.read_bytes())
    copy.chmod(0o666)
    assert kernels._open(copy) is None
    copy.chmod(0o700)
    assert kernels._open(copy) is not None


def test_first_use_builds_into_a_private_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels, "_NATIVE", tmp_path / "no-native")   # no make-built library
    monkeypatch.delenv("BENCH_SIM_LIB", raising=False)
    monkeypatch.setenv("BENCH_SIM_CACHE", str(tmp_path / "cache" / "sim"))
    kernels.reset()
    try:
        path = build.ensure()
        assert path is not None and path.parent == tmp_path / "cache" / "sim"
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert kernels.loaded_path() == path
        assert [p.name for p in path.parent.iterdir()] == [path.name]   # no temp file left
    finally:
        kernels.reset()


def test_an_unusable_cache_dir_falls_back_to_numpy(monkeypatch, tmp_path):
    """No traceback and the same rows: the build is skipped, the fallbacks run."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setattr(kernels, "_NATIVE", tmp_path / "no-native")
    monkeypatch.delenv("BENCH_SIM_LIB", raising=False)
    monkeypatch.setenv("BENCH_SIM_CACHE", str(blocker / "sim"))     # under a regular file
    kernels.reset()
    try:
        assert build.ensure() is None
        assert kernels.library() is None
        rows = simulate(synth(1), regime="global", budgets=(2,))
    finally:
        kernels.reset()
    monkeypatch.undo()
    assert rows == simulate(synth(1), regime="global", budgets=(2,))


def _perfect_lfu_by_definition(keys, cap):
    """Perfect LFU from its definition, O(n x cap): counts of every key kept; evict the cached
    key of least count, among equal counts the one whose last access is oldest."""
    count, last, cache, out = {}, {}, [], []
    for t, k in enumerate(keys):
        count[k] = count.get(k, 0) + 1
        out.append(k in cache)
        if k not in cache:
            if len(cache) >= cap:
                cache.remove(min(cache, key=lambda x: (count[x], last[x])))
            cache.append(k)
        last[k] = t
    return out


@given(keys=streams, cap=st.integers(1, 12))
@settings(max_examples=300, deadline=None)
def test_lfu_perfect_kernel_fallback_and_definition_agree(keys, cap):
    from bench.sim.policies import lfu_perfect_hits
    with pytest.MonkeyPatch.context() as mp:
        k = np.array(keys, np.int64)
        a, b = both(mp, lambda: lfu_perfect_hits(k, cap))
        assert a.tolist() == b.tolist() == _perfect_lfu_by_definition(keys, cap)


def test_lfu_perfect_keeps_counts_that_in_cache_lfu_forgets():
    # cap 1: key 0 earns count 3, is evicted by 1, comes back with count 4; in-cache LFU
    # restarts it at 1. The streams differ exactly where the kept count decides a victim.
    from bench.sim.policies import lfu_perfect_hits
    keys = np.array([0, 0, 0, 1, 0, 2, 0], np.int64)
    assert lfu_perfect_hits(keys, 2).tolist() == [False, True, True, False, True, False, True]
    assert lfu_hits(keys, 2).tolist() == [False, True, True, False, True, False, True]
    keys = np.array([0, 0, 1, 1, 1, 2, 0, 3, 0], np.int64)
    assert lfu_perfect_hits(keys, 2).tolist() != lfu_hits(keys, 2).tolist()
