"""Typed rows of the campaign tables as the executor, the progress fold and the views read
them. Pure (no SQLAlchemy), so pure code can take them as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RunRow:
    """One run of a campaign. The executor keeps its own copy and updates state, host, cell
    and spec as it writes them (bench.store.campaigns.transition)."""
    run_id: str
    host: str
    cell: str
    state: str
    position: int = 0
    repetition: int = 0
    spec: dict | None = None
    retained: bool | None = None
    ref: int = 0                 # the runs table's primary key (journal rows point at it)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class JournalRow:
    id: int
    t: str                       # ISO time
    kind: str
    message: str
    data: dict | None = None
    run_ref: int | None = None

    def get(self, key: str, default: Any = None) -> Any:
        """A field of `data` (None-safe)."""
        return (self.data or {}).get(key, default)


@dataclass(frozen=True)
class CampaignRow:
    id: str
    matrix: str | None
    seed: int | None
    state: str
    created: str | None = None
    workload: dict | None = None
    note: str | None = None
    states: dict[str, int] = field(default_factory=dict)   # runs per state (listings)
    demo: bool = False           # made by `bench demo` (left out of results unless asked)
    hidden: bool = False         # `bench campaigns hide` (left out of listings and results)

    def as_listing(self) -> dict:
        """What `bench campaigns --json` prints per campaign."""
        return {"id": self.id, "matrix": self.matrix, "seed": self.seed, "state": self.state,
                "created": self.created, "states": dict(self.states), "demo": self.demo,
                "hidden": self.hidden}
