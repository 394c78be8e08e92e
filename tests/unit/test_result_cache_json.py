"""bench.store.result_cache_json.dumps gives json.dumps(obj, indent=2)'s text exactly, and
refuses what it refuses, on generated values of every kind json writes."""

import json
import math
import random

import pytest

from bench.store.result_cache_json import dumps, exact

SCALARS = (lambda r: r.uniform(-1e20, 1e20), lambda r: r.random() * 10 ** r.randint(-30, 30),
           lambda r: r.randint(-2 ** 70, 2 ** 70), lambda r: r.choice([True, False, None]),
           lambda r: r.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-320]),
           lambda r: "".join(r.choice('ab"\\\n\t\x00\x1f é€😀\u2028') for _ in range(r.randint(0, 6))))


def _value(r: random.Random, depth: int):
    k = r.random()
    if depth > 3 or k < .45:
        return r.choice(SCALARS)(r)
    if k < .6:                           # a flat list of one type (the joined way)
        f = r.choice(SCALARS[:3] + SCALARS[5:])
        return [f(r) for _ in range(r.randint(0, 8))]
    if k < .8:
        seq = [_value(r, depth + 1) for _ in range(r.randint(0, 4))]
        return tuple(seq) if r.random() < .2 else seq
    keys = [r.choice(SCALARS)(r) for _ in range(r.randint(0, 4))]
    return {key: _value(r, depth + 1) for key in keys}


@pytest.mark.parametrize("seed", range(300))
def test_same_text_as_json_dumps(seed):
    v = _value(random.Random(seed), 0)
    assert dumps(v) == json.dumps(v, indent=2)


def test_floats_with_nan_and_flat_lists_of_subclasses():
    class S(str):
        pass
    for v in ([1.0, math.nan, 2.5], [math.inf], [S("x"), "y"], [True, 1], [1, 2.0],
              {"a": [1e300, -1e-300]}, {1.5: 1, True: 2, None: 3, 7: [[]], "": {}}):
        assert dumps(v) == json.dumps(v, indent=2)


@pytest.mark.parametrize("bad", [{"a": {1, 2}}, [object()], {(1, 2): 1}, b"x"])
def test_refuses_what_json_refuses(bad):
    with pytest.raises(TypeError):
        json.dumps(bad, indent=2)
    with pytest.raises(TypeError):
        dumps(bad)


def test_circular_is_refused():
    a: list = []
    a.append(a)
    with pytest.raises(ValueError):
        dumps(a)


def _round_trips(v) -> bool:
    try:
        return json.loads(json.dumps(v, indent=2)) == v
    except (TypeError, ValueError):
        return False


def _plain(v) -> bool:
    """Built of exactly dict, list, str, int, float, bool and None (no subclass)."""
    if type(v) is dict:
        return all(type(k) is str for k in v) and all(map(_plain, v.values()))
    if type(v) is list:
        return all(map(_plain, v))
    return type(v) in (str, int, float, bool, type(None))


@pytest.mark.parametrize("seed", range(600))
def test_exact_is_the_round_trip(seed):
    """exact(v) says what loading json.dumps(v) back and comparing says, for every value
    built of plain types; a value with a subclass or a tuple in it is refused either way."""
    r = random.Random(seed)
    v = _value(r, 0)
    if r.random() < .3:                          # dicts with str keys, NaN-free, more often
        v = {"k": json.loads(json.dumps(v, default=str).replace("NaN", "1"))}
    if _plain(v):
        assert exact(v) == _round_trips(v), v
    else:
        assert not exact(v)


def test_exact_cases():
    class S(str):
        pass
    shared = [1.5, 2]
    assert exact({"a": [1.0, 2, True, None, "x"], "b": {"c": shared, "d": shared}, "e": []})
    assert exact([math.inf, -math.inf, -0.0])
    for bad in ([1.0, math.nan], {"a": math.nan}, [(1, 2)], {1: "a"}, {"a": S("x")},
                [S("x")], [1, {"a": [math.nan]}], {"a": {True: 1}}, [b"x"], [object()]):
        assert not exact(bad), bad
    cyc: list = []
    cyc.append(cyc)
    assert not exact(cyc)


@pytest.mark.parametrize("seed", range(200))
def test_flat_dicts_as_json_dumps(seed):
    """Dicts of str keys and plain values (written by the C encoder) at every depth, beside
    ones with a subclass, a non-str key or a container among them."""
    r = random.Random(seed)

    class F(float):
        pass

    def flat():
        d = {str(r.choice(SCALARS)(r)): r.choice(SCALARS)(r) for _ in range(r.randint(0, 5))}
        if r.random() < .2:
            d[r.choice(["k", 1, None, 2.5])] = r.choice([F(1.5), [1, 2], {"a": 1}, 3])
        return d
    v = [flat(), {"a": [flat(), {"b": flat()}]}, [[flat()]]]
    assert dumps(v) == json.dumps(v, indent=2)
