"""Sizes and cell names: bench's one grammar (docs/design.md, Vocabulary). The host
runner reads run specs with it (spec.py); the controller imports this same file as
bench.agents.hostrunner.grammar (bench.units, bench.matrix.cells). Standard library only,
Python 3.8. A refusal is a GrammarError, a ValueError with a message and a hint that lists the
valid choices; each side turns it into its own error (SpecError here, InputError there).

Sizes: `K`, `M`, `G`, `T` are decimal as the paper writes capacities (`64G` = 64 x 10^9 bytes);
`Ki`, `Mi`, `Gi`, `Ti` binary (`6Gi` = 6 x 2^30); `B` alone is bytes (`4096B`). Input is
case-insensitive and may carry a trailing `B` after a unit (`64GB`, `64GiB`) or a decimal
fraction that lands on whole bytes (`1.5G`). A bare number is bytes only where bytes are what
is asked for (`unit_required=False`: spec and file fields, options named in bytes); where a size
is expected (`unit_required=True`: capacities, cell names) `64` is refused with the fix, as
`64` bytes is never what a user meant by a capacity. `format_size` writes the canonical text,
which `parse_size` reads back to the same bytes either way: the largest decimal unit that
divides exactly (upper case), else the largest binary unit that divides exactly, else the bytes
with `B` (`4097B`; 0 is `0`). The kernel's memparse (`mem=`, cgroup files) reads
K/M/G/T/P/E as BINARY: bench hands it exact bytes (`kernel_size`) and reads what it shows with
`parse_kernel_size`.

Cell names: `{C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}]`, the mode omitted when
it is pagecache, the prefetch when it is none; C a size in the units above (`64G`, `64Gi`).
Engine cells are `e2e-{prompt}-{admit|nocache}` (capacity 0, mechanism none, reclaim `host`).
C is read as a size with its unit required (`64G`, `64GB`, `64gib`, `64000M`, `1.5G` all read as
options read them; a bare `64` is refused). Input is case-insensitive; the canonical name
writes C as `format_size` does and the rest in lower case, and is what bench shows and stores
whatever spelling came in. `cell_name(**parse_cell(n))` is the canonical spelling of n, and
`parse_cell(cell_name(**f)) == f`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Dict, Optional, Union

# ----------------------------------------------------------------------------------- sizes

DECIMAL = {"K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}
BINARY = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
KERNEL_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50,
               "E": 1 << 60}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:([kmgt])(i?))?\s*(b?)\s*$", re.IGNORECASE)
_KERNEL = re.compile(r"^\s*([0-9]+)([kmgtpe]?)\s*$", re.IGNORECASE)
SIZE_HINT = ("write a number with an optional decimal unit K, M, G, T (64G = 64 x 10^9 bytes, "
             "as the paper writes capacities) or binary unit Ki, Mi, Gi, Ti (6Gi = 6 x 2^30), "
             "or bytes: 64G, 768M, 6Gi, 4096")


class GrammarError(ValueError):
    """A size or cell name that is not one; `hint` says how to write it."""

    def __init__(self, message: str, hint: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


def size_multiplier(unit: str) -> int:
    """Bytes of one unit as bench writes it ('', 'K'.. 'T' decimal, 'Ki'.. 'Ti' binary);
    case-insensitive. KeyError for anything else."""
    if not unit:
        return 1
    u = unit[0].upper() + unit[1:].lower()
    return BINARY[u] if len(u) == 2 else DECIMAL[u]


def unit_hint(number: str) -> str:
    """The fix for a size written without a unit."""
    n = number.strip()
    return (f"write {n}G (decimal: {n} x 10^9 bytes, as the paper writes capacities) or "
            f"{n}Gi (binary: {n} x 2^30), or {n}B if you mean bytes")


def parse_size(text: Union[str, int], what: str = "size", unit_required: bool = False) -> int:
    """'64G' -> 64 x 10^9, '64Gi' -> 64 x 2^30, '4096B' -> 4096; case-insensitive. A bare
    number ('4096', or an int) is bytes unless `unit_required`: then a text without a unit is
    refused naming the fix (0 stays 0: it has no unit to miss)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise GrammarError(f"{what} must not be negative, got {text}")
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise GrammarError(f"{what} {text!r} is not a size", SIZE_HINT)
    unit = (m.group(2) or "") + (m.group(3) or "")
    if unit_required and not unit and not m.group(4) and Fraction(m.group(1)) != 0:
        raise GrammarError(f"{what} {str(text).strip()} has no unit", unit_hint(m.group(1)))
    value = Fraction(m.group(1)) * size_multiplier(unit)
    if value.denominator != 1:
        raise GrammarError(f"{what} {text!r} is not a whole number of bytes", SIZE_HINT)
    return int(value)


def format_size(n: int) -> str:
    """The canonical text of n bytes, read back by parse_size exactly (unit required or not):
    64000000000 -> '64G', 68719476736 -> '64Gi', 768000000 -> '768M', 4097 -> '4097B',
    0 -> '0'."""
    if n < 0:
        raise ValueError(f"a size is not negative: {n}")
    for table in (DECIMAL, BINARY):
        for suffix, unit in sorted(table.items(), key=lambda kv: -kv[1]):
            if n and n % unit == 0:
                return f"{n // unit}{suffix}"
    return f"{n}B" if n else "0"


def parse_kernel_size(text: Union[str, int], what: str = "kernel size") -> int:
    """A size as the kernel's memparse reads it: digits with an optional K, M, G, T, P or E,
    all BINARY ('102G' -> 102 x 2^30). No decimals, no 'iB' (the kernel would misread those)."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    m = _KERNEL.match(str(text))
    if not m:
        raise GrammarError(f"{what} {text!r} is not a kernel size",
                           "the kernel reads digits with an optional binary K, M, G or T")
    return int(m.group(1)) * KERNEL_MULT[m.group(2).upper()]


def kernel_size(n: int) -> str:
    """The text bench hands the kernel for n bytes: the exact bytes, digits only."""
    if n < 0:
        raise ValueError(f"a size is not negative: {n}")
    return str(int(n))


# ------------------------------------------------------------------------------ cell names

MECHANISMS = ("cgroup", "balloon", "memboot", "none")
RECLAIMS = ("mglru", "classic")
MODES = ("pagecache", "pinned", "hybrid", "nocache", "random")
DELIVERIES = ("advice", "block")
ENGINE_PREFIX = "e2e"
ENGINE_RECLAIM = "host"                     # reclaim left as the host runs it (recorded)
# an engine cell's policy and the page-cache mode it reads with: replay (the agent replaying the
# engine's own trace over its model file, through the page cache) shares admit's mode, so the
# policy is a field of its own
POLICY_MODES = {"admit": "pagecache", "nocache": "nocache", "replay": "pagecache"}
ENGINE_MECHANISMS = ("cgroup", "balloon")    # an engine cell's capacity, where it has one
LABEL = re.compile(r"^[a-z0-9_]{1,32}$")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,96}")     # '.': a capacity's fraction (1.5G)
Fields = Dict[str, Any]


def check_cell(capacity_bytes: int, mechanism: str, reclaim: str, mode: str = "pagecache",
               hints: Optional[str] = None, delivery: Optional[str] = None,
               prompt: Optional[str] = None, policy: Optional[str] = None) -> None:
    """Refuse fields that make no cell (a replay cell, or an engine cell when prompt is set)."""
    if prompt is None and policy is not None:
        raise GrammarError(f"policy {policy!r} without a prompt: only engine cells have one")
    if prompt is not None:
        if not LABEL.fullmatch(prompt):
            raise GrammarError(f"bad prompt label {prompt!r}", "a prompt label is 1-32 of "
                               "a-z, 0-9 and _ (prose, code, chat)")
        ample = (capacity_bytes, mechanism) == (0, "none")
        if not (ample or capacity_bytes > 0 and mechanism in ENGINE_MECHANISMS) or (
                reclaim, hints, delivery) != (ENGINE_RECLAIM, None, None) \
                or POLICY_MODES.get(str(policy)) != mode:
            raise GrammarError("an engine cell has capacity 0 and mechanism none (ample) or a "
                               f"capacity under {' or '.join(ENGINE_MECHANISMS)}, reclaim "
                               f"{ENGINE_RECLAIM}, no prefetch, a policy of "
                               f"{', '.join(POLICY_MODES)} and that policy's mode",
                               "build it with engine_cell(prompt, policy[, capacity, mechanism])")
        return
    if capacity_bytes <= 0:
        raise GrammarError(f"cell capacity must be positive, got {capacity_bytes}")
    for value, allowed, what in ((mechanism, MECHANISMS, "mechanism"),
                                 (reclaim, RECLAIMS, "reclaim"), (mode, MODES, "mode")):
        if value not in allowed:
            raise GrammarError(f"unknown {what} {value!r}", f"valid: {', '.join(allowed)}")
    if (hints is None) != (delivery is None):
        raise GrammarError("prefetch needs both a hint plan label and a delivery",
                           f"write e.g. -pilot-advice; deliveries: {', '.join(DELIVERIES)}")
    if hints is not None:
        if not LABEL.fullmatch(hints) or hints in MODES or hints == "none":
            raise GrammarError(f"bad hint plan label {hints!r}",
                               "a label is 1-32 of a-z, 0-9 and _ (oracle, pilot, ...)")
        if delivery not in DELIVERIES:
            raise GrammarError(f"unknown delivery {delivery!r}",
                               f"valid: {', '.join(DELIVERIES)}")


def engine_fields(prompt: str, policy: str, capacity_bytes: int = 0,
                  mechanism: str = "none") -> Fields:
    """The fields of the engine cell of one prompt under one policy (admit, nocache or replay), at
    ample capacity or at `capacity_bytes` under a cgroup wall or a balloon."""
    if policy not in POLICY_MODES:
        raise GrammarError(f"unknown engine policy {policy!r}",
                           f"valid: {', '.join(POLICY_MODES)}")
    fields: Fields = {"capacity_bytes": capacity_bytes, "mechanism": mechanism,
                      "reclaim": ENGINE_RECLAIM,
              "mode": POLICY_MODES[policy], "hints": None, "delivery": None, "prompt": prompt,
              "policy": policy}
    check_cell(**fields)
    return fields


def cell_name(capacity_bytes: int, mechanism: str, reclaim: str, mode: str = "pagecache",
              hints: Optional[str] = None, delivery: Optional[str] = None,
              prompt: Optional[str] = None, policy: Optional[str] = None) -> str:
    """The canonical name of checked fields (the inverse of parse_cell)."""
    if prompt is not None:
        arm = f"-{format_size(capacity_bytes)}-{mechanism}" if capacity_bytes else ""
        return f"{ENGINE_PREFIX}-{prompt}-{policy}{arm}"
    parts = [format_size(capacity_bytes), mechanism, reclaim]
    if mode != "pagecache":
        parts.append(mode)
    if hints is not None:
        parts += [hints, str(delivery)]
    return "-".join(parts)


def _fail(name: str, why: str) -> GrammarError:
    return GrammarError(
        f"bad cell name {name!r}: {why}",
        "write {C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}] with C like 64G "
        "(decimal, 64 x 10^9 bytes) or 64Gi (binary); "
        f"mechanisms: {', '.join(MECHANISMS)}; reclaim: {', '.join(RECLAIMS)}; "
        f"modes: {', '.join(MODES[1:])} (pagecache is omitted); deliveries: "
        f"{', '.join(DELIVERIES)}; or an engine cell {ENGINE_PREFIX}-{{prompt}}-"
        f"{{{'|'.join(POLICY_MODES)}}}[-{{C}}-{{{'|'.join(ENGINE_MECHANISMS)}}}]")


def _engine_cell(name: str, parts: list) -> Fields:
    """parse_cell of an engine cell name (its lower-cased parts)."""
    if len(parts) not in (3, 5) or not LABEL.fullmatch(parts[1]) \
            or parts[2] not in POLICY_MODES:
        raise _fail(name, f"an engine cell is {ENGINE_PREFIX}-{{prompt}}-{{policy}}[-{{C}}-"
                          f"{{mechanism}}] with a prompt label of a-z, 0-9, _, policy "
                          f"{', '.join(POLICY_MODES)} and mechanism "
                          f"{' or '.join(ENGINE_MECHANISMS)}")
    if len(parts) == 3:
        return engine_fields(parts[1], parts[2])
    if parts[4] not in ENGINE_MECHANISMS:
        raise _fail(name, f"an engine cell's capacity is under {' or '.join(ENGINE_MECHANISMS)}"
                          f", not {parts[4]!r}")
    try:
        capacity = parse_size(name.split("-")[3], "capacity", unit_required=True)
    except GrammarError:
        raise _fail(name, f"capacity {name.split('-')[3]!r} is not a size like 400M or "
                          "512Mi") from None
    if capacity <= 0:
        raise _fail(name, "an engine cell's capacity must be positive")
    return engine_fields(parts[1], parts[2], capacity, parts[4])


def parse_cell(name: object) -> Fields:
    """The fields of a cell name (capacity_bytes, mechanism, reclaim, mode, hints, delivery,
    prompt, policy), read case-insensitively, its capacity in any spelling a size option takes
    (64G, 64GB, 64000M; 64Gi, 64gib); cell_name writes them back canonically."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(str(name), "only letters, digits, '_', '-' and a capacity's '.' are "
                               "allowed")
    cap, parts = name.split("-")[0], name.lower().split("-")
    if parts[0] == ENGINE_PREFIX:
        return _engine_cell(name, parts)
    if len(parts) < 3:
        raise _fail(name, "it needs at least capacity, mechanism and reclaim")
    mech, reclaim, rest = parts[1], parts[2], parts[3:]
    try:
        capacity = parse_size(cap, "capacity", unit_required=True)
    except GrammarError as e:
        raise _fail(name, f"{e.message}: {e.hint}" if "no unit" in e.message
                    else f"capacity {cap!r} is not a size like 64G, 768M or 64Gi") from None
    if mech not in MECHANISMS:
        raise _fail(name, f"unknown mechanism {mech!r}")
    if reclaim not in RECLAIMS:
        raise _fail(name, f"unknown reclaim {reclaim!r}")
    mode = "pagecache"
    if rest and rest[0] in MODES:
        if rest[0] == "pagecache":
            raise _fail(name, "the pagecache mode is written by omitting it")
        mode, rest = rest[0], rest[1:]
    hints = delivery = None
    if rest:
        if len(rest) != 2:
            raise _fail(name, f"unexpected {'-'.join(rest)!r} after the mode")
        hints, delivery = rest
        if delivery not in DELIVERIES:
            raise _fail(name, f"unknown delivery {delivery!r}")
    fields: Fields = {"capacity_bytes": capacity, "mechanism": mech, "reclaim": reclaim,
                      "mode": mode, "hints": hints, "delivery": delivery, "prompt": None,
                      "policy": None}
    check_cell(**fields)
    return fields
