"""Sizes in the paper's units, and the kernel's.

bench sizes (capacities, matrix and inventory sizes, command-line options): `K`, `M`, `G`, `T`
are decimal as the paper writes capacities (`64G` = 64 x 10^9 bytes, `768M` = 768 x 10^6);
`Ki`, `Mi`, `Gi`, `Ti` are binary (`6Gi` = 6 x 2^30, the scope headroom of Algorithm 1); `B`
alone is bytes. Input is case-insensitive (`64g` = `64G`, `64gi` = `64Gi`) and may carry a
trailing `B` (`64GB`, `64GiB`) or a decimal fraction that lands on whole bytes (`1.5G`).
A bare number is bytes where the option or field says bytes (`--max-bytes 4096`); where a size
is expected (`parse_size(..., unit_required=True)`: capacities, headroom, cell names) `64` is
refused with the fix (`write 64G ... or 64Gi ...`), never read as 64 bytes.
`format_size` writes the canonical text, which `parse_size` reads back to the same bytes: the
largest decimal unit that divides exactly (upper case), else the largest binary unit that
divides exactly, else the bytes with `B` (`64000000000` -> `64G`, `6442450944` -> `6Gi`,
`1000001` -> `1000001B`).

Kernel sizes: the kernel's `memparse` (the `mem=` boot parameter, cgroup files) reads `K`, `M`,
`G`, `T` as BINARY (`mem=102G` is 102 GiB). bench therefore hands the kernel exact bytes
(`kernel_size`: digits only) and reads what the kernel shows with `parse_kernel_size`.

Traffic is reported in GB (10^9 bytes), as the paper does (`gb`).

The grammar is the host runner's (agents/hostrunner/grammar.py, shipped to hosts, standard
library only); this module is the controller's face of it and raises its refusals as InputError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from bench.errors import InputError

if TYPE_CHECKING:
    # the checkout's agents/ is installed as bench.agents (pyproject's package-dir), a mapping
    # a type checker reading the checkout does not follow: it reads the same file as agents.*
    from agents.hostrunner import grammar
else:
    from bench.agents.hostrunner import grammar

# the grammar is the host runner's (agents/hostrunner/grammar.py): one definition for both sides
DECIMAL, BINARY, SIZE_HINT = grammar.DECIMAL, grammar.BINARY, grammar.SIZE_HINT
format_size, kernel_size, size_multiplier = (grammar.format_size, grammar.kernel_size,
                                             grammar.size_multiplier)
MB = 10 ** 6                # a decimal megabyte: relative capacities resolve to whole MB
MiB, GiB = 1 << 20, 1 << 30
GB = 1e9
T = TypeVar("T")


def as_input_error(parse: Callable[..., T], *args: object) -> T:
    """parse(*args), its GrammarError (the host side's ValueError) raised as an InputError."""
    try:
        return parse(*args)
    except grammar.GrammarError as e:
        raise InputError(e.message, hint=e.hint) from None


def parse_size(text: str | int, what: str = "size", unit_required: bool = False) -> int:
    """'64G' -> 64 x 10^9, '64Gi' -> 64 x 2^30, '4096' -> 4096 (module doc); case-insensitive.
    With `unit_required`, '64' is refused naming the fix (a size option that is not bytes)."""
    return as_input_error(grammar.parse_size, text, what, unit_required)


def parse_kernel_size(text: str | int, what: str = "kernel size") -> int:
    """A size as the kernel's memparse reads it: digits with an optional K, M, G, T, P or E,
    all BINARY ('102G' -> 102 x 2^30; 'mem=' on the command line, cgroup files)."""
    return as_input_error(grammar.parse_kernel_size, text, what)


def gb(n_bytes: float) -> float:
    return n_bytes / GB
