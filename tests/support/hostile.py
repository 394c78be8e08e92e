"""A corpus of hostile names and messages (what a host, a bundle, a database row, a file or a
user may hand to a view) and a console that records what a view printed, raw and as text."""

from __future__ import annotations

import io

from rich.console import Console

# short ones: each must show literally (as bench.results.views.visible writes it)
SHORT = [
    "[/]x",
    "[bold]x",
    "[link=file:///etc/passwd]x[/link]",
    "[/link]",
    "[@click=app.quit]y[/]",
    "a\\",
    "x\\[/]",
    "\\[bold]y",
    "two\\\\",
    "three\\\\\\",
    ":smile: :cross_mark:",
    "%s %d {} {0} {x}",
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;file:///etc/passwd\x07click\x1b]8;;\x07",
    "\x1b]0;a title\x07",
    "bell\x07 cr\r bs\x08 del\x7f nul\x00",
    "\x9b31m C1 CSI",
    "\u202eevil\u202c and zero\u200bwidth",
    "caf\u00e9 \ufffd replaced",
    "byte \udcff not UTF-8",
    "[" * 30 + "]" * 30,
]
# no-crash ones: layout may fold them, they must still not crash or inject anything
LONG = ["L" * 5000 + "[/]" + "\x1b[2J", "tab\there\nnew line [/]", "\n" * 5 + "[bold]"]
ALL = SHORT + LONG

# what a terminal would act on: C0 (tab and newline apart), DEL, C1, the bidi and zero-width
# marks bench shows as escapes, lone surrogates
UNSAFE = {chr(c) for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0),
                           0x200B, 0x202C, 0x202E, 0xDCFF]}


def recording_console(width: int = 4000, color: bool = False) -> Console:
    """A console writing into a StringIO; plain (no styles at all) unless color."""
    return Console(file=io.StringIO(), width=width, record=True, force_terminal=color,
                   color_system="truecolor" if color else None, legacy_windows=False,
                   highlight=False)


def raw(console: Console) -> str:
    """Everything the console wrote, escape sequences included."""
    f = console.file
    assert isinstance(f, io.StringIO)
    return f.getvalue()
