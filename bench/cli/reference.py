"""docs/cli.md, the command reference, generated from the real `--help` of every command.

`python -m bench.cli.reference` rewrites docs/cli.md; `--check` exits 1, naming the commands
whose help differs, when the file is not what the command tree renders now (the unit test
tests/unit/test_cli_reference.py does the same in memory). The tree is walked from the full
app (bench.cli.app.command()); hidden commands are left out. Help is rendered at a fixed
width without colour, so the file does not depend on the terminal that made it.

No bench command imports this module: it is a developer's tool beside the CLI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WIDTH = 100
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADER = ("# Command reference\n\n"
          "Generated from the real `--help` of every command by `python -m bench.cli.reference`"
          "\n(do not edit by hand; docs/development.md says when to regenerate it). Hidden "
          "commands are\nleft out.\n")


def walk(ctx: Any) -> Iterator[tuple[str, Any]]:
    """(command path, its click context) for the context's command and every visible command
    below it, in the order `--help` lists them. Click's classes are reached through the
    command (its context_class): typer may carry its own copy of click."""
    yield ctx.command_path, ctx
    group = ctx.command
    for name in group.list_commands(ctx) if hasattr(group, "list_commands") else ():
        sub = group.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            yield from walk(sub.context_class(sub, info_name=name, parent=ctx))


def sections() -> list[tuple[str, str]]:
    """(command path, its help text) of every visible command, root first."""
    from bench.cli.app import command
    root = command()
    ctx = root.context_class(root, info_name="bench", terminal_width=WIDTH,
                             max_content_width=WIDTH, color=False)
    return [(path, sub.command.get_help(sub).rstrip() + "\n") for path, sub in walk(ctx)]


def render(parts: list[tuple[str, str]]) -> str:
    """The Markdown of docs/cli.md: a heading and a fenced block per command."""
    body = [HEADER]
    for path, text in parts:
        body.append(f"\n## {path}\n\n```text\n{text}```\n")
    return "".join(body)


def differing(current: str, parts: list[tuple[str, str]]) -> list[str]:
    """The command paths whose section in `current` is missing or not `render` of `parts`,
    and those `current` has that the tree no longer does."""
    def split(text: str) -> dict[str, str]:
        chunks = text.split("\n## ")[1:]
        return {c.split("\n", 1)[0]: c for c in chunks}
    have = split(current)
    want = split(render(parts))
    names = [p for p, _ in parts if have.get(p) != want[p]]
    return names + [p for p in have if p not in want]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli.reference", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare instead of writing; exit 1 naming what differs")
    parser.add_argument("--out", type=Path, default=DOC, help=f"the file (default {DOC})")
    args = parser.parse_args(argv)
    parts = sections()
    text = render(parts)
    if not args.check:
        args.out.write_text(text)
        print(f"wrote {args.out} ({len(parts)} commands)")
        return 0
    current = args.out.read_text() if args.out.exists() else ""
    if current == text:
        return 0
    names = differing(current, parts) or ["(the header)"]
    print(f"{args.out} differs from the commands' --help in: {', '.join(names)}; "
          "regenerate it: python -m bench.cli.reference", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
