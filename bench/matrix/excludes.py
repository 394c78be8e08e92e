"""The `exclude` entries of a matrix's [cells] applied to its product in one pass (bench.matrix.
load): each entry is a partial assignment of the axes (capacity, mechanism, ...), so a point's
matching entries are found by one dictionary look-up per distinct set of axes the entries give
(at most 2^5), not by comparing every entry with every point: a product of 10^4 cells and 2,000
entries took 24 s that way.

The entries apply in the file's order: an entry removes the points it matches that no earlier
entry removed, so one that matches only what earlier ones removed removes nothing (and is
reported: it is a mistake)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

P = TypeVar("P")


def apply_excludes(points: Sequence[P], entries: Sequence[Mapping[str, Hashable]],
                   axis: Callable[[P, str], Hashable]) -> tuple[list[P], list[int]]:
    """(the points no entry matches, in their order; the indexes of the entries that remove
    no point). `axis(point, name)` is the point's value on that axis, as the entries write it."""
    tables: dict[tuple[str, ...], dict[tuple, int]] = {}    # axes -> values -> first entry
    for i, entry in enumerate(entries):
        names = tuple(sorted(entry))
        tables.setdefault(names, {}).setdefault(tuple(entry[k] for k in names), i)
    kept, used = [], set()
    for p in points:
        hits = [t[key] for names, t in tables.items()
                if (key := tuple(axis(p, k) for k in names)) in t]
        if hits:
            used.add(min(hits))         # the first entry that matches it removes it
        else:
            kept.append(p)
    return kept, [i for i in range(len(entries)) if i not in used]
