"""bench.store.result_cache_json.dumps gives json.dumps(obj, indent=2)'s text exactly, and
refuses what it refuses, on generated values of every kind json writes."""

import json
import math
import random

import pytest

from bench.store.result_cache_json import dumps

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
