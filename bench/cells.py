"""Cell names: `{C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}]` (DESIGN.md).

Lower case; the mode is omitted when it is `pagecache`, the prefetch when it is `none`.
Examples: 64G-balloon-mglru, 93G-memboot-mglru, 256G-cgroup-mglru-pinned,
256G-cgroup-mglru-pilot-advice. `parse_cell` and `Cell.name` are exact inverses; a bad name is
an InputError listing the valid choices. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InputError
from .units import format_size, parse_size

MECHANISMS = ("cgroup", "balloon", "memboot", "none")
RECLAIMS = ("mglru", "classic")
MODES = ("pagecache", "pinned", "hybrid", "nocache", "random")
DELIVERIES = ("advice", "block")
_CAPACITY = re.compile(r"^[0-9]+[kmgt]?$")
_LABEL = re.compile(r"^[a-z0-9_]{1,32}$")


@dataclass(frozen=True)
class Cell:
    capacity_bytes: int
    mechanism: str
    reclaim: str
    mode: str = "pagecache"
    hints: str | None = None      # oracle, pilot, previous_token, or a label of a hint file
    delivery: str | None = None   # advice or block

    def __post_init__(self):
        if self.capacity_bytes <= 0:
            raise InputError(f"cell capacity must be positive, got {self.capacity_bytes}")
        for value, allowed, what in ((self.mechanism, MECHANISMS, "mechanism"),
                                     (self.reclaim, RECLAIMS, "reclaim"),
                                     (self.mode, MODES, "mode")):
            if value not in allowed:
                raise InputError(f"unknown {what} {value!r}", hint=f"valid: {', '.join(allowed)}")
        if (self.hints is None) != (self.delivery is None):
            raise InputError("prefetch needs both a hint plan label and a delivery",
                             hint=f"write e.g. -pilot-advice; deliveries: {', '.join(DELIVERIES)}")
        if self.hints is not None:
            if not _LABEL.match(self.hints) or self.hints in MODES or self.hints == "none":
                raise InputError(f"bad hint plan label {self.hints!r}",
                                 hint="a label is 1-32 of a-z, 0-9 and _ (oracle, pilot, ...)")
            if self.delivery not in DELIVERIES:
                raise InputError(f"unknown delivery {self.delivery!r}",
                                 hint=f"valid: {', '.join(DELIVERIES)}")

    @property
    def prefetch(self) -> str:
        return "none" if self.hints is None else f"{self.hints}-{self.delivery}"

    @property
    def name(self) -> str:
        parts = [format_size(self.capacity_bytes), self.mechanism, self.reclaim]
        if self.mode != "pagecache":
            parts.append(self.mode)
        if self.hints is not None:
            parts += [self.hints, self.delivery]
        return "-".join(parts).lower()


def _fail(name: str, why: str) -> InputError:
    return InputError(
        f"bad cell name {name!r}: {why}",
        hint="write {C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}] with C like 64G; "
             f"mechanisms: {', '.join(MECHANISMS)}; reclaim: {', '.join(RECLAIMS)}; "
             f"modes: {', '.join(MODES[1:])} (pagecache is omitted); deliveries: "
             f"{', '.join(DELIVERIES)}")


def parse_cell(name: str) -> Cell:
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_-]{1,96}", name):
        raise _fail(str(name), "only lower-case letters, digits, '_' and '-' are allowed")
    parts = name.split("-")
    if len(parts) < 3:
        raise _fail(name, "it needs at least capacity, mechanism and reclaim")
    cap, mech, reclaim, rest = parts[0], parts[1], parts[2], parts[3:]
    if not _CAPACITY.match(cap):
        raise _fail(name, f"capacity {cap!r} is not a size like 64g or 768m")
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
    cell = Cell(parse_size(cap.upper(), "cell capacity"), mech, reclaim, mode, hints, delivery)
    if cell.name != name:
        raise _fail(name, f"not in canonical form (that cell is written {cell.name})")
    return cell
