"""Cell names: `{C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}]` (docs/design.md).

The mode is omitted when it is `pagecache`, the prefetch when it is `none`. C is a size in the
paper's decimal units with binary `Ki`/`Mi`/`Gi`/`Ti` where the capacity is binary (bench.units):
`64G` is 64 x 10^9 bytes, `64Gi` 64 x 2^30. Input is case-insensitive everywhere (`64g-BALLOON-
mglru` is the cell `64G-balloon-mglru`); the canonical name, used in output and storage, writes
C as bench.units.format_size does (the unit letter upper case, `i` lower case) and the rest in
lower case. Examples: 64G-balloon-mglru, 93G-memboot-mglru, 256G-cgroup-mglru-pinned,
256G-cgroup-mglru-pilot-advice, 64Gi-cgroup-mglru. `parse_cell` and `Cell.name` are exact
inverses (parse_cell(c.name) == c, and parse_cell(n).name == n for a canonical n); another
spelling of the same capacity (`64000M`, `64GB`) is refused naming the canonical one; a bad name
is an InputError listing the valid choices. Pure.

Names stored before capacities were decimal were all lower case and read K/M/G/T as binary
(`64g-...` was 64 GiB); migration 0004 renamed them (`64Gi-...`). `legacy_cell` reads such
a name the old way, for bundles written before then.

End-to-end engine cells (bench.matrix.engine_cells, docs/engine.md) are a second kind:
`e2e-{prompt}-{policy}` with policy `admit` (page-cache admission: mode pagecache) or `nocache`
(mode nocache), e.g. e2e-prose-admit (lower case; read case-insensitively too). They run at
ample capacity with no capacity mechanism and leave reclaim as the host runs it:
capacity_bytes 0, mechanism none, reclaim `host` (ENGINE_RECLAIM); `prompt` holds the prompt
label. Replay cells never start with a letter, so the two grammars cannot collide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from bench.errors import InputError
from bench.units import format_size, parse_kernel_size, parse_size

# the allowed values, spelled once as Literal types (schemas and the type checker read those)
Mechanism = Literal["cgroup", "balloon", "memboot", "none"]
Reclaim = Literal["mglru", "classic"]
Mode = Literal["pagecache", "pinned", "hybrid", "nocache", "random"]
MECHANISMS: tuple[str, ...] = get_args(Mechanism)
RECLAIMS: tuple[str, ...] = get_args(Reclaim)
MODES: tuple[str, ...] = get_args(Mode)
DELIVERIES = ("advice", "block")
_CAPACITY = re.compile(r"^[0-9]+(?:[kmgt]i?)?$", re.IGNORECASE)
_LEGACY_CAPACITY = re.compile(r"^[0-9]+[kmgt]?$")
_LABEL = re.compile(r"^[a-z0-9_]{1,32}$")
ENGINE_PREFIX = "e2e"
ENGINE_RECLAIM = "host"                     # reclaim left as the host runs it (recorded)
POLICY_MODES = {"admit": "pagecache", "nocache": "nocache"}


@dataclass(frozen=True)
class Cell:
    capacity_bytes: int
    mechanism: str
    reclaim: str
    mode: str = "pagecache"
    hints: str | None = None      # oracle, pilot, previous_token, or a label of a hint file
    delivery: str | None = None   # advice or block
    prompt: str | None = None     # engine cells only: the prompt label

    def __post_init__(self):
        if self.prompt is not None:
            self._check_engine(self.prompt)
            return
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

    def _check_engine(self, prompt: str) -> None:
        if not _LABEL.match(prompt):
            raise InputError(f"bad prompt label {prompt!r}",
                             hint="a prompt label is 1-32 of a-z, 0-9 and _ (prose, code, chat)")
        if (self.capacity_bytes, self.mechanism, self.reclaim, self.hints, self.delivery) != (
                0, "none", ENGINE_RECLAIM, None, None) or self.mode not in POLICY_MODES.values():
            raise InputError("an engine cell has capacity 0, mechanism none, reclaim "
                             f"{ENGINE_RECLAIM}, no prefetch and mode pagecache or nocache",
                             hint="build it with engine_cell(prompt, policy)")

    @property
    def is_engine(self) -> bool:
        return self.prompt is not None

    @property
    def policy(self) -> str | None:
        """Engine cells: admit (mode pagecache) or nocache; None for replay cells."""
        if self.prompt is None:
            return None
        return next(p for p, m in POLICY_MODES.items() if m == self.mode)

    @property
    def prefetch(self) -> str:
        return "none" if self.hints is None else f"{self.hints}-{self.delivery}"

    @property
    def name(self) -> str:
        if self.prompt is not None:
            return f"{ENGINE_PREFIX}-{self.prompt}-{self.policy}"
        parts = [format_size(self.capacity_bytes), self.mechanism, self.reclaim]
        if self.mode != "pagecache":
            parts.append(self.mode)
        if self.hints is not None:
            parts.append(self.prefetch)         # {hints}-{delivery}
        return "-".join(parts)


def engine_cell(prompt: str, policy: str) -> Cell:
    """The engine cell of one prompt under one policy (admit or nocache)."""
    if policy not in POLICY_MODES:
        raise InputError(f"unknown engine policy {policy!r}",
                         hint=f"valid: {', '.join(POLICY_MODES)}")
    return Cell(0, "none", ENGINE_RECLAIM, POLICY_MODES[policy], prompt=prompt)


def _fail(name: str, why: str) -> InputError:
    return InputError(
        f"bad cell name {name!r}: {why}",
        hint="write {C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}] with C like 64G "
             "(decimal, 64 x 10^9 bytes) or 64Gi (binary); "
             f"mechanisms: {', '.join(MECHANISMS)}; reclaim: {', '.join(RECLAIMS)}; "
             f"modes: {', '.join(MODES[1:])} (pagecache is omitted); deliveries: "
             f"{', '.join(DELIVERIES)}; or an engine cell {ENGINE_PREFIX}-{{prompt}}-"
             f"{{{'|'.join(POLICY_MODES)}}}")


def parse_cell(name: str) -> Cell:
    """The cell of a name, read case-insensitively (module doc); refuses a name that is not
    the canonical spelling but for case."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,96}", name):
        raise _fail(str(name), "only letters, digits, '_' and '-' are allowed")
    parts = name.split("-")
    cap = parts[0]
    parts = [p.lower() for p in parts]
    if parts[0] == ENGINE_PREFIX:
        if len(parts) != 3 or not _LABEL.match(parts[1]) or parts[2] not in POLICY_MODES:
            raise _fail(name, f"an engine cell is {ENGINE_PREFIX}-{{prompt}}-{{policy}} with a "
                              f"prompt label of a-z, 0-9, _ and policy "
                              f"{' or '.join(POLICY_MODES)}")
        return engine_cell(parts[1], parts[2])
    if len(parts) < 3:
        raise _fail(name, "it needs at least capacity, mechanism and reclaim")
    mech, reclaim, rest = parts[1], parts[2], parts[3:]
    if not _CAPACITY.match(cap):
        raise _fail(name, f"capacity {cap!r} is not a size like 64G, 768M or 64Gi")
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
    cell = Cell(parse_size(cap, "cell capacity"), mech, reclaim, mode, hints, delivery)
    if cell.name.lower() != name.lower():
        raise _fail(name, f"not in canonical form (that cell is written {cell.name})")
    return cell


def legacy_cell(name: str) -> Cell | None:
    """The cell a name meant before capacities were decimal: an all-lower-case replay cell
    name whose K/M/G/T were binary (`64g-balloon-mglru` -> 64Gi-balloon-mglru, 64 x 2^30
    bytes); None for a name that is not one (upper case, an engine cell, a bad name)."""
    if not isinstance(name, str) or name != name.lower():
        return None
    cap, _, rest = name.partition("-")
    if not _LEGACY_CAPACITY.match(cap):
        return None
    try:
        return parse_cell(f"{format_size(parse_kernel_size(cap))}-{rest}")
    except InputError:
        return None
