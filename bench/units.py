"""Sizes as cgroups write them (64G = 64 GiB) and GB as the paper reports traffic (1e9 bytes)."""

from __future__ import annotations

import re

from bench.errors import InputError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
GB = 1e9


def parse_size(text: str | int, what: str = "size") -> int:
    """'64G' -> 64 GiB in bytes; '768M', '4096', '1.5G' also accepted. Binary units, as cgroups."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InputError(f"{what} must not be negative, got {text}")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{what} {text!r} is not a size",
                         hint="write it as a number with an optional K, M, G or T suffix "
                              "(binary units, as cgroups take them): 64G, 768M, 4096")
    value = float(m.group(1)) * _MULT[m.group(2).upper()]
    if value != int(value):
        raise InputError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    """Inverse of parse_size for exact multiples: 68719476736 -> '64G'."""
    for suffix in ("T", "G", "M", "K"):
        unit = _MULT[suffix]
        if n and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def gb(n_bytes: float) -> float:
    return n_bytes / GB
