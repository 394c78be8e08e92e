"""`json.dumps(obj, indent=2)`'s exact text, faster: with an indent the standard library
encodes in Python, value by value, which at 100,000 stored runs (a matrix holds every
retained run's iteration time) was a third of a second. Here a list of plain floats, ints or
strings is joined at once (float.__repr__, int.__repr__, the C string encoder), and the rest
follows json.encoder's own rules: the same type tests in the same order, keys converted as it
converts them, NaN and infinities written as it writes them, TypeError for what it refuses
(tests/unit/test_result_cache_json.py holds the text to json.dumps' on generated values)."""

from __future__ import annotations

import math
from json.encoder import JSONEncoder, encode_basestring_ascii
from typing import Any, Callable

_INF = float("inf")
_isfinite = math.isfinite
_isnan = math.isnan
_float_repr = float.__repr__
_int_repr = int.__repr__


def _floatstr(o: float) -> str:
    if o != o:
        return "NaN"
    if o == _INF:
        return "Infinity"
    if o == -_INF:
        return "-Infinity"
    return _float_repr(o)


def _scalar(o: Any) -> str | None:
    """The text of a scalar as json writes it; None for a container or another type."""
    if isinstance(o, str):
        return encode_basestring_ascii(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return _int_repr(o)
    if isinstance(o, float):
        return _floatstr(o)
    return None


def _key(k: Any) -> str:
    if isinstance(k, str):
        return k
    if isinstance(k, float):
        return _floatstr(k)
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, int):
        return _int_repr(k)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


_FAST: dict[type, Callable[[Any], str]] = {float: _float_repr, int: _int_repr,
                                           str: encode_basestring_ascii}


def _flat(items: list | tuple) -> list[str] | None:
    """The texts of a list whose items are all of one plain type (float, int or str), or
    None. A float list holding NaN or an infinity takes the general way."""
    kind = type(items[0])
    enc = _FAST.get(kind)
    if enc is None or set(map(type, items)) != {kind}:
        return None
    if kind is float and not all(map(_isfinite, items)):
        return None
    return list(map(enc, items))


_PLAIN = {str, int, float, bool, type(None)}
_ENCODERS: dict[str, Callable[[Any], str]] = {}


def _flat_dict(o: dict, inner: str) -> str | None:
    """The items of a dict of str keys and values of exactly str, int, float, bool or None,
    as the indented encoder writes them: what the standard library's C encoder writes with
    `inner` between items (it is used without an indent; for these types the two encoders
    write the same text). None for any other dict."""
    if any(type(k) is not str for k in o) or not set(map(type, o.values())) <= _PLAIN:
        return None
    enc = _ENCODERS.get(inner)
    if enc is None:
        enc = _ENCODERS[inner] = JSONEncoder(separators=("," + inner, ": ")).encode
    return enc(o)[1:-1]


def dumps(obj: Any) -> str:
    """json.dumps(obj, indent=2)."""
    out: list[str] = []
    _encode(obj, 0, out.append, set())
    return "".join(out)


def _encode(o: Any, level: int, put: Callable[[str], Any], seen: set[int]) -> None:
    s = _scalar(o)
    if s is not None:
        put(s)
        return
    if isinstance(o, (list, tuple)):
        _list(o, level, put, seen)
    elif isinstance(o, dict):
        _dict(o, level, put, seen)
    else:
        raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _list(o: list | tuple, level: int, put: Callable[[str], Any], seen: set[int]) -> None:
    if not o:
        put("[]")
        return
    _enter(o, seen)
    inner = "\n" + "  " * (level + 1)
    put("[" + inner)
    flat = _flat(o)
    if flat is not None:
        put(("," + inner).join(flat))
    else:
        for i, v in enumerate(o):
            if i:
                put("," + inner)
            _encode(v, level + 1, put, seen)
    put("\n" + "  " * level + "]")
    seen.discard(id(o))


def _dict(o: dict, level: int, put: Callable[[str], Any], seen: set[int]) -> None:
    if not o:
        put("{}")
        return
    _enter(o, seen)
    inner = "\n" + "  " * (level + 1)
    flat = _flat_dict(o, inner)
    if flat is not None:
        put("{" + inner + flat + "\n" + "  " * level + "}")
        seen.discard(id(o))
        return
    put("{" + inner)
    first = True
    for k, v in o.items():
        if not first:
            put("," + inner)
        first = False
        put(encode_basestring_ascii(_key(k)) + ": ")
        _encode(v, level + 1, put, seen)
    put("\n" + "  " * level + "}")
    seen.discard(id(o))


def _enter(o: Any, seen: set[int]) -> None:
    if id(o) in seen:
        raise ValueError("Circular reference detected")
    seen.add(id(o))



_SCALARS = {str, int, bool, type(None)}


def exact(obj: Any) -> bool:
    """Whether json.loads(json.dumps(obj)) == obj is sure without encoding: obj is built of
    dicts with str keys, lists, and str, int, float (no NaN: unequal to itself), bool and
    None alone, each of exactly that type (a tuple comes back a list, a key 1 comes back
    "1"; a subclass, equal or not, is refused: nothing is stored then), without a cycle.
    result_cache checked this by encoding and loading the text back, at several times the
    cost (tests/unit/test_result_cache_json.py holds the two to each other)."""
    return _exact(obj, set())


def _exact(o: Any, active: set[int]) -> bool:
    t = type(o)
    if t is float:
        return o == o
    if t in _SCALARS:
        return True
    if t is not dict and t is not list:
        return False
    if id(o) in active:                 # a cycle: json refuses it
        return False
    if t is dict and any(type(k) is not str for k in o):
        return False
    items = list(o.values()) if t is dict else o
    kinds = set(map(type, items))
    if kinds <= _SCALARS:
        return True
    if float in kinds and kinds <= _SCALARS | {float}:
        return not any(map(_isnan, [x for x in items if type(x) is float]))
    active.add(id(o))
    try:
        return all(_exact(x, active) for x in items)
    finally:
        active.discard(id(o))
