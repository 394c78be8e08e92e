"""Cell names: `{C}-{mechanism}-{reclaim}[-{mode}][-{hints}-{delivery}]` (docs/design.md).

The mode is omitted when it is `pagecache`, the prefetch when it is `none`. C is a size in the
paper's decimal units with binary `Ki`/`Mi`/`Gi`/`Ti` where the capacity is binary (bench.units):
`64G` is 64 x 10^9 bytes, `64Gi` 64 x 2^30. Input is case-insensitive everywhere (`64g-BALLOON-
mglru` is the cell `64G-balloon-mglru`); the canonical name, used in output and storage, writes
C as bench.units.format_size does (the unit letter upper case, `i` lower case) and the rest in
lower case. Examples: 64G-balloon-mglru, 93G-memboot-mglru, 256G-cgroup-mglru-pinned,
256G-cgroup-mglru-pilot-advice, 64Gi-cgroup-mglru. C takes every spelling a size option takes
(`64GB`, `64000M`, `64gib`), its unit required (`64-...` is refused: 64 bytes is no capacity);
`parse_cell(n).name` is the canonical spelling, which bench shows and stores, and
parse_cell(c.name) == c. A bad name is an InputError listing the valid choices. Pure. The
grammar is the host runner's (agents/hostrunner/grammar.py, through bench.units); this module
gives it the Cell type.

Names stored before capacities were decimal were all lower case and read K/M/G/T as binary
(`64g-...` was 64 GiB); migration 0004 renamed them (`64Gi-...`). `legacy_cell` reads such
a name the old way, for bundles written before then.

End-to-end engine cells (bench.matrix.engine_cells, docs/engine.md) are a second kind:
`e2e-{prompt}-{policy}[-{C}-{mechanism}]` with policy `admit` (page-cache admission: mode
pagecache), `nocache` (mode nocache) or `replay` (the agent replaying the engine's own trace
over the model file: mode pagecache), e.g. e2e-prose-admit (lower case; read
case-insensitively too). Without a capacity they run at ample capacity (capacity_bytes 0,
mechanism none); with one, under a cgroup wall or a balloon of C (e2e-prose-admit-400M-cgroup).
They leave reclaim as the host runs it (reclaim `host`, ENGINE_RECLAIM); `prompt` holds the
prompt label. Replay cells never start with a letter, so the two grammars cannot collide.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from bench.errors import InputError
from bench.units import as_input_error, format_size, grammar, parse_kernel_size

# the allowed values as Literal types for schemas and the type checker; the values themselves
# are the grammar's (a test holds these Literals to grammar.MECHANISMS etc.)
Mechanism = Literal["cgroup", "balloon", "memboot", "none"]
Reclaim = Literal["mglru", "classic"]
Mode = Literal["pagecache", "pinned", "hybrid", "nocache", "random"]
MECHANISMS: tuple[str, ...] = grammar.MECHANISMS
RECLAIMS: tuple[str, ...] = grammar.RECLAIMS
MODES: tuple[str, ...] = grammar.MODES
DELIVERIES: tuple[str, ...] = grammar.DELIVERIES
ENGINE_PREFIX, ENGINE_RECLAIM, POLICY_MODES = (grammar.ENGINE_PREFIX, grammar.ENGINE_RECLAIM,
                                               grammar.POLICY_MODES)
_LEGACY_CAPACITY = re.compile(r"^[0-9]+[kmgt]?$")


@dataclass(frozen=True)
class Cell:
    capacity_bytes: int
    mechanism: str
    reclaim: str
    mode: str = "pagecache"
    hints: str | None = None      # oracle, pilot, previous_token, or a label of a hint file
    delivery: str | None = None   # advice or block
    prompt: str | None = None     # engine cells only: the prompt label
    policy: str | None = None     # engine cells only: admit, nocache or replay

    def __post_init__(self):
        as_input_error(grammar.check_cell, *self._fields())

    def _fields(self) -> tuple:
        return (self.capacity_bytes, self.mechanism, self.reclaim, self.mode, self.hints,
                self.delivery, self.prompt, self.policy)

    @property
    def is_engine(self) -> bool:
        return self.prompt is not None

    @property
    def prefetch(self) -> str:
        return "none" if self.hints is None else f"{self.hints}-{self.delivery}"

    @property
    def name(self) -> str:
        return grammar.cell_name(*self._fields())


def engine_cell(prompt: str, policy: str, capacity_bytes: int = 0,
                mechanism: str = "none") -> Cell:
    """The engine cell of one prompt under one policy (admit, nocache, replay), ample or at a
    capacity under a cgroup wall or a balloon."""
    return Cell(**as_input_error(grammar.engine_fields, prompt, policy, capacity_bytes,
                                 mechanism))


def parse_cell(name: str) -> Cell:
    """The cell of a name, read case-insensitively, its capacity in any size spelling (module
    doc); `.name` is its canonical spelling."""
    return _parse_cell(name) if isinstance(name, str) else Cell(**as_input_error(
        grammar.parse_cell, name))


@functools.lru_cache(maxsize=4096)
def _parse_cell(name: str) -> Cell:
    # cached: a Cell is frozen, and results read the same few names once per run row
    return Cell(**as_input_error(grammar.parse_cell, name))


def legacy_cell(name: str) -> Cell | None:
    """The cell a name meant before capacities were decimal: an all-lower-case replay cell
    name whose K/M/G/T were binary (`64g-balloon-mglru` -> 64Gi-balloon-mglru, 64 x 2^30
    bytes); None for a name that is not one (upper case, an engine cell, a bad name)."""
    if not isinstance(name, str) or name != name.lower():
        return None
    cap, _, rest = name.partition("-")
    if not _LEGACY_CAPACITY.fullmatch(cap):
        return None
    try:
        return parse_cell(f"{format_size(parse_kernel_size(cap))}-{rest}")
    except InputError:
        return None
