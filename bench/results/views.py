"""Human views, shared parts: the consoles, JSON out, messages, progress bars and the number
formats every view uses. The views of each stage's results live beside it (trace_views,
fleet_views, store_views, plan_views, campaign_views); only these modules and the CLI import
rich.

Text that a host, a bundle, the database, a file or the user supplies is shown as text, never
as markup: a `str` handed to say(), to a LiteralTable (cells, headers, title, caption) or to
compose() is literal (no rich markup, no :emoji: codes), and visible() shows every control
character as an escape (`\\x1b`), so nothing a host wrote can move the cursor, set a title,
hide text or open a link in the terminal. Bench's own styling goes in as rich Text:
styled(text, style) or compose(("warning:", "yellow"), " ", message).

Tables never cut a number or an id (print_table): in a terminal a LiteralTable wraps text
cells at spaces (headers may abbreviate), but each column is at least as wide as the longest word
(a run id, a number, a cell name) of its cells; a table that cannot fit even so is printed
wider than the terminal, never cropped. When stdout is not a terminal (a pipe, a file) a
table prints whole, as wide as its content (no ellipsis, no 80-column cut), so
`bench runs | grep ID` finds the id; `--json` is the format for programs."""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Union

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.measure import Measurement
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.style import StyleType
from rich.table import Table
from rich.text import Text

from bench.units import format_size

console = Console()
err_console = Console(stderr=True)
_quiet = False


def set_quiet(quiet: bool) -> None:
    """`bench -q`: say() prints nothing (errors are printed by the CLI, not through say)."""
    global _quiet
    _quiet = quiet


# Default-ignorable code points (Unicode's DerivedCoreProperties.txt) and blanks that render as
# nothing, listed whole: some are letters or marks (U+3164 HANGUL FILLER is Lo, the variation
# selectors are Mn), and a Python built with an older Unicode calls newer ones unassigned
_IGNORABLE = frozenset([0x00AD, 0x034F, 0x061C, 0x115F, 0x1160, 0x17B4, 0x17B5,
                        *range(0x180B, 0x1810), *range(0x200B, 0x2010), *range(0x202A, 0x202F),
                        *range(0x2060, 0x2070), 0x2800, 0x3164, *range(0xFE00, 0xFE10), 0xFEFF,
                        0xFFA0, *range(0xFFF0, 0xFFF9), *range(0x1BCA0, 0x1BCA4),
                        *range(0x1D173, 0x1D17B), *range(0xE0000, 0xE1000)])
# what may need an escape: everything but printable ASCII other than the backslash
_CANDIDATE = re.compile(r"[^\x20-\x5b\x5d-\x7e]")


@lru_cache(maxsize=4096)
def _unsafe(ch: str, keep: str) -> bool:
    """A character a terminal acts on or shows as nothing or as another: controls, format
    characters, surrogates, private-use and unassigned code points (C*), separators and
    spaces other than ' ' (Z*: U+00A0 prints as ' '), default-ignorables."""
    return ch not in keep and ch != " " and (unicodedata.category(ch)[0] in "CZ"
                                             or ord(ch) in _IGNORABLE)


def _escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x80 or 0xDC80 <= o <= 0xDCFF:   # ASCII, or a byte that was not UTF-8
        return f"\\x{o & 0xFF:02x}"       # (surrogateescape): that byte, \x80-\xff
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def visible(text: object, *, lines: bool = True) -> str:
    """`text` as a str in which every character a terminal would act on or not show (_unsafe)
    shows as an escape: ESC -> `\\x1b`, U+202E -> `\\u202e`, U+E0041 -> `\\U000e0041`, an
    undecodable byte 0xff -> `\\xff`; tab and newline stay unless lines=False (one line of
    a log). A backslash that an escape could be read into (before x, u, U, a backslash or
    an escaped character) shows doubled, so two different texts never show alike; other
    printable text, a lone backslash included, is unchanged."""
    s, keep = str(text), "\t\n" if lines else ""

    def sub(m: re.Match[str]) -> str:
        ch = m.group()
        if ch == "\\":
            nxt = s[m.end():m.end() + 1]
            return "\\\\" if nxt and (nxt in "\\xuU" or _unsafe(nxt, keep)) else ch
        return _escape(ch) if _unsafe(ch, keep) else ch
    return _CANDIDATE.sub(sub, s)


def lit(text: object) -> Text:
    """Literal text: shown as it is (visible()), never parsed as markup."""
    return Text(visible(text))


def styled(text: object, style: StyleType) -> Text:
    """Literal text in one of bench's styles."""
    return Text(visible(text), style=style)


Part = Union[str, Text, tuple[str, StyleType]]


def compose(*parts: Part, style: StyleType = "") -> Text:
    """One line of bench's styling around literal text: a str is literal, (text, style) is
    literal text styled, a Text is kept as built."""
    out = Text(style=style)
    for p in parts:
        if isinstance(p, Text):
            out.append_text(p)
        elif isinstance(p, tuple):
            out.append(visible(p[0]), style=p[1])
        else:
            out.append(visible(p))
    return out


class LiteralTable(Table):
    """A rich Table that shows every str it is given (cells, column headers, title, caption)
    as literal text (lit()); bench's styling goes in as Text (styled(), compose())."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("title", "caption") and isinstance(value, str):
            value = Text(visible(value), style=f"table.{name}")
        super().__setattr__(name, value)

    def add_column(self, header: RenderableType = "", footer: RenderableType = "",
                   **kw: Any) -> None:
        super().add_column(lit(header) if isinstance(header, str) else header,
                           lit(footer) if isinstance(footer, str) else footer, **kw)

    def add_row(self, *renderables: RenderableType | None, style: StyleType | None = None,
                end_section: bool = False) -> None:
        super().add_row(*(lit(r) if isinstance(r, str) else r for r in renderables),
                        style=style, end_section=end_section)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Rendered with no word of a cell cut: every column at least as wide as the longest
        word of its cells (ids and numbers are one word), text wrapping at spaces (a header
        longer than its column may end in an ellipsis); wider than `options` when it must."""
        for col in self.columns:
            if col.width is None:
                words = [longest_word(c) for c in col.cells]
                col.min_width = max([col.min_width or 0, *words])
        yield from super().__rich_console__(console, options)


def longest_word(cell: RenderableType) -> int:
    """Cells of the longest whitespace-free run of a text cell (0 for other renderables)."""
    plain = cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""
    return max((cell_len(w) for w in plain.split()), default=0)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def print_table(table: RenderableType) -> None:
    """A table (or a group of them) on stdout, never cut (module doc): in a terminal as wide
    as it fits (wider when its words need it, never cropped); to a pipe or a file as wide as
    its content."""
    if console.is_terminal:
        console.print(table, crop=False)
        return
    natural = Measurement.get(console, console.options.update_width(1 << 20), table).maximum
    width = console.width
    try:
        console.width = max(width, natural)
        console.print(table, crop=False)
    finally:
        console.width = width


def say(message: str | Text) -> None:
    """A message on stderr: a str is literal text (visible()), a Text keeps bench's styling.
    Silent under `bench -q`."""
    if _quiet:
        return
    text = lit(message) if isinstance(message, str) else message
    # soft_wrap: one message is one line (a terminal wraps it for the eye), so a log piped to
    # a file or grep keeps each message whole
    err_console.print(err_console.highlighter(text), soft_wrap=True)


def show(message: str | Text) -> None:
    """say() on stdout."""
    text = lit(message) if isinstance(message, str) else message
    console.print(console.highlighter(text))


class LogHandler(logging.Handler):
    """Log records on stderr, one line each, as literal text: `bench.ssh: message` (a
    record's text often quotes a host: control characters show as escapes, never markup)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                msg += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
            level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
            err_console.print(compose((f"{record.name}:", "dim"), f" {level}",
                                      Text(visible(msg, lines=False))), soft_wrap=True)
        except Exception:  # noqa: BLE001 - logging must never raise into the code that logs
            self.handleError(record)


@contextmanager
def progress_bar(description: str, total: int):
    """Yields update(done, total, bytes) for long work; quiet when stderr is not a terminal."""
    cols = [TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, console=err_console, transient=False,
                  disable=not err_console.is_terminal) as prog:
        task = prog.add_task(visible(description), total=total)

        def update(done: int, _total: int, done_bytes: int = 0) -> None:
            prog.update(task, completed=done)

        yield update


# number formats ---------------------------------------------------------------------------

def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def gb(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def size_text(n: int | None) -> str:
    if n is None:
        return "-"
    return format_size(n)


def capacity_text(n: int) -> str:
    return format_size(n)


def mem_gb(n: int | None) -> str:
    """Host memory in the paper's decimal GB, as capacities are written: '502.9G'."""
    return "-" if n is None else f"{n / 1e9:.1f}G"


def source_name(source: str) -> str:
    return Path(source).name if "/" in source else source


def duration(seconds: float) -> str:
    """12345 -> '3h 25m'; under an hour '12m 30s'."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s"


def dur(s: float | None) -> str:
    return "-" if s is None else duration(max(0.0, s))
