"""Sizes in the paper's units, and the kernel's.

bench sizes (capacities, matrix and inventory sizes, command-line options): `K`, `M`, `G`, `T`
are decimal as the paper writes capacities (`64G` = 64 x 10^9 bytes, `768M` = 768 x 10^6);
`Ki`, `Mi`, `Gi`, `Ti` are binary (`6Gi` = 6 x 2^30, the scope headroom of Algorithm 1); a bare
integer is bytes. Input is case-insensitive (`64g` = `64G`, `64gi` = `64Gi`) and may carry a
trailing `B` (`64GB`, `64GiB`) or a decimal fraction that lands on whole bytes (`1.5G`).
`format_size` writes the canonical text, which `parse_size` reads back to the same bytes: the
largest decimal unit that divides exactly (upper case), else the largest binary unit that
divides exactly, else the bytes (`64000000000` -> `64G`, `6442450944` -> `6Gi`, `1000001` ->
`1000001`).

Kernel sizes: the kernel's `memparse` (the `mem=` boot parameter, cgroup files) reads `K`, `M`,
`G`, `T` as BINARY (`mem=102G` is 102 GiB). bench therefore hands the kernel exact bytes
(`kernel_size`: digits only) and reads what the kernel shows with `parse_kernel_size`.

Traffic is reported in GB (10^9 bytes), as the paper does (`gb`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from bench.errors import InputError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:([kmgt])(i?))?\s*b?\s*$", re.IGNORECASE)
DECIMAL = {"K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
_KERNEL = re.compile(r"^\s*([0-9]+)([kmgtpe]?)\s*$", re.IGNORECASE)
_KERNEL_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50,
                "E": 1 << 60}
MB = 10 ** 6                # a decimal megabyte: relative capacities resolve to whole MB
MiB, GiB = 1 << 20, 1 << 30
GB = 1e9
SIZE_HINT = ("write a number with an optional decimal unit K, M, G, T (64G = 64 x 10^9 bytes, "
             "as the paper writes capacities) or binary unit Ki, Mi, Gi, Ti (6Gi = 6 x 2^30), "
             "or bytes: 64G, 768M, 6Gi, 4096")


def size_multiplier(unit: str) -> int:
    """Bytes of one unit as bench writes it ('', 'K'.. 'T' decimal, 'Ki'.. 'Ti' binary);
    case-insensitive. KeyError for anything else."""
    if not unit:
        return 1
    u = unit[0].upper() + unit[1:].lower()
    return BINARY[u] if len(u) == 2 else DECIMAL[u]


def parse_size(text: str | int, what: str = "size") -> int:
    """'64G' -> 64 x 10^9, '64Gi' -> 64 x 2^30, '4096' -> 4096 (module doc); case-insensitive."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InputError(f"{what} must not be negative, got {text}")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise InputError(f"{what} {text!r} is not a size", hint=SIZE_HINT)
    unit = (m.group(2) or "") + (m.group(3) or "")
    value = Fraction(m.group(1)) * size_multiplier(unit)
    if value.denominator != 1:
        raise InputError(f"{what} {text!r} is not a whole number of bytes", hint=SIZE_HINT)
    return int(value)


def format_size(n: int) -> str:
    """The canonical text of n bytes, read back by parse_size exactly: 64000000000 -> '64G',
    68719476736 -> '64Gi', 768000000 -> '768M', 4097 -> '4097', 0 -> '0'."""
    if n < 0:
        raise ValueError(f"a size is not negative: {n}")
    for table in (DECIMAL, BINARY):
        for suffix, unit in sorted(table.items(), key=lambda kv: -kv[1]):
            if n and n % unit == 0:
                return f"{n // unit}{suffix}"
    return str(n)


def parse_kernel_size(text: str | int, what: str = "kernel size") -> int:
    """A size as the kernel's memparse reads it: digits with an optional K, M, G, T, P or E,
    all BINARY ('102G' -> 102 x 2^30; 'mem=' on the command line, cgroup files). No decimals,
    no 'iB' (the kernel would misread those)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    m = _KERNEL.match(str(text))
    if not m:
        raise InputError(f"{what} {text!r} is not a kernel size",
                         hint="the kernel reads digits with an optional binary K, M, G or T")
    return int(m.group(1)) * _KERNEL_MULT[m.group(2).upper()]


def kernel_size(n: int) -> str:
    """The text bench hands the kernel for n bytes: the exact bytes, digits only (memparse
    reads K/M/G as binary, so a bench size like 102G is never written with its suffix)."""
    if n < 0:
        raise ValueError(f"a size is not negative: {n}")
    return str(int(n))


def gb(n_bytes: float) -> float:
    return n_bytes / GB
