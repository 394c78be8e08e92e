"""Where a key is written in a TOML document: tomllib reports line numbers for syntax errors
only, so the inventory's problems (an unknown key, a value out of bounds) find their key's line
here. One pass over the lines of a document that already parsed (bench.hosts.inventory reads at
most 1 MiB), tracking the current [table] and skipping multi-line strings; a key written in an
inline table, or not found, gets the line of the nearest enclosing key or header, else none.
Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence

_SEGMENT = re.compile(r"""\s*(?:([A-Za-z0-9_-]+)|"((?:[^"\\]|\\.)*)"|'([^']*)')\s*""")
_HEADER = re.compile(r"\s*\[\[?")
_OPENERS = ('"""', "'''")


def _keys(text: str, pos: int) -> tuple[list[str], int]:
    """A dotted key starting at pos: its parts and the position after it ([] when none)."""
    parts: list[str] = []
    while True:
        m = _SEGMENT.match(text, pos)
        if not m or m.end() == pos:
            return parts, pos
        parts.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
        if not text.startswith(".", pos):
            return parts, pos
        pos += 1


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Every table header and key of the document by its full dotted path -> its first line
    (1-based)."""
    out: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    open_string: str | None = None
    for n, line in enumerate(text.split("\n"), 1):
        if open_string is not None:
            if line.count(open_string) % 2:
                open_string = None
            continue
        h = _HEADER.match(line)
        if h:
            parts, end = _keys(line, h.end())
            if parts and line.startswith("]", end):
                table = tuple(parts)
                out.setdefault(table, n)
            continue
        parts, end = _keys(line, 0)
        if not parts or not line.startswith("=", end):
            continue
        out.setdefault(table + tuple(parts), n)
        value = line[end + 1:].lstrip()
        if value[:3] in _OPENERS and value.count(value[:3]) == 1:
            open_string = value[:3]     # a multi-line string: its lines are no keys
    return out


def line_of(lines: dict[tuple[str, ...], int], loc: Sequence[str | int]) -> int | None:
    """The line of the key at loc (list indices ignored), or of its nearest enclosing key."""
    path = tuple(p for p in loc if isinstance(p, str))
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None
