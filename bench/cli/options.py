"""Options and arguments several command groups share, and small parsers of option text."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bench.errors import InputError

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
KOpt = Annotated[Optional[int], typer.Option("--k", help="The model's top-k (overrides the "
                                             "trace header; llama.cpp shape defaults to 8).")]
FilesArg = Annotated[list[Path], typer.Argument(help="Trace files (JSONL).", show_default=False)]
BatchOpt = Annotated[bool, typer.Option("--batch", help="Merge the traces iteration by iteration "
                                        "(batch union, truncated to the shortest) and use that.")]
HostsDirOpt = Annotated[Optional[Path], typer.Option(
    "--hosts-dir", help="Inventory directory (default: $BENCH_HOSTS, else ./hosts if it exists, "
                        "else $XDG_CONFIG_HOME/bench/hosts, i.e. ~/.config/bench/hosts).")]
DbOpt = Annotated[Optional[str], typer.Option(
    "--db", metavar="PATH|URL",
    help="Results database: a SQLite file's path (./bench.db) or a URL (sqlite:////abs/x.db, "
         "postgresql+psycopg://user@host/db). Default $BENCH_DB, else "
         "$XDG_DATA_HOME/bench/bench.db. Commands that only read never create one.")]
IncludeDemoOpt = Annotated[bool, typer.Option(
    "--include-demo", help="Also runs of `bench demo` campaigns. Every read command (runs, "
                           "results, compare, sizing, export, plot, placement) leaves them out "
                           "unless --campaign names one, and says how many it left out.")]
ScaleOpt = Annotated[Optional[str], typer.Option(
    "--scale", help="Apply the matrix's [scale.NAME] (e.g. lab: the same cells re-sized for "
                    "the vm lab's small guests).")]
DataDirOpt = Annotated[Optional[Path], typer.Option(
    "--data-dir", help="Where bundles and plans go (default $BENCH_DATA_DIR, else "
                       "~/.local/share/bench).")]


def split_csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InputError(f"{what} is empty")
    return items


def ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in split_csv(text, what)]
    except ValueError:
        raise InputError(f"{what} must be comma-separated integers, got {text!r}") from None


def size_option(text: str, option: str) -> int:
    """A size option's bytes (bench.units: 64G decimal, 64Gi binary); a bare number is refused
    with the fix, never read as bytes (`--capacity 64` is not 64 bytes). Options whose name
    says bytes (--max-bytes) read bench.units.parse_size as it is."""
    from bench.units import parse_size
    return parse_size(text, option, unit_required=True)
