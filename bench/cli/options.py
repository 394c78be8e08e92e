"""Options and arguments several command groups share, and small parsers of option text."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
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

# the longest any time option may ask for (seconds): a week; a run, a wait or a target past it
# is a typo, and time.sleep() or a deadline of 1e308 seconds overflows
SECONDS_MAX = 7 * 86400.0


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


def number(option: str, high: float, *, zero: bool = False, unit: str = "",
           example: str = "1") -> Callable[[Optional[float]], Optional[float]]:
    """A float option's check (a typer callback, run while the command line is parsed, so
    nothing is written first): a finite number, positive (or 0 when `zero` says 0 means
    something), at most `high`. Click reads `nan`, `inf`, `-1` and `1e308` as floats; a
    result computed from them would be stored or shown as nonsense."""
    floor = ">= 0" if zero else "> 0"

    def check(value: Optional[float]) -> Optional[float]:
        if value is not None and not (math.isfinite(value) and (value > 0 or zero and value == 0)
                                      and value <= high):
            raise InputError(f"{option} must be a finite number {floor} and at most {high:g}"
                             f"{unit}, got {value!r}", hint=f"e.g. {option} {example}")
        return value
    return check


def _id_pattern(what: str) -> re.Pattern[str]:
    # imported when an id is given, not when the CLI loads (the schemas import pydantic)
    if what == "host name":
        from bench.hosts.inventory_schema import NAME_RE
        return NAME_RE
    from bench.judge import bundle_schema
    return {"run id": bundle_schema.RUN_ID_RE, "campaign id": bundle_schema.CAMPAIGN_RE,
            "hex digest prefix": re.compile("[0-9a-fA-F]{1,64}")}[what]


def id_text(option: str, what: str, *, csv: bool = False
            ) -> Callable[[Optional[str]], Optional[str]]:
    """An id option's check (typer callback): the whole text (each comma-separated item with
    csv) is a `what` (ID_RULES), so a trailing newline or any other trailing character is
    refused, never stripped or matched as a prefix."""
    def check(value: Optional[str]) -> Optional[str]:
        if value is None:
            return None
        items = [x.strip(" ") for x in value.split(",")] if csv else [value]
        for item in items:
            if not _id_pattern(what).fullmatch(item) or item in (".", ".."):
                raise InputError(f"{option} {item[:80]!r} is not a {what}",
                                 hint=f"a {what} is {ID_RULES[what]}")
        return value
    return check


def cell_text(option: str) -> Callable[[Optional[str]], Optional[str]]:
    """A cell option's check (typer callback): the whole text is a cell name (parse_cell),
    refused before a database is opened or a host is probed."""
    def check(value: Optional[str]) -> Optional[str]:
        if value is not None:
            from bench.matrix.cells import parse_cell
            try:
                parse_cell(value)
            except InputError as exc:
                raise InputError(f"{option}: {exc.message}", exc.hint) from None
        return value
    return check


def ids_text(option: str, what: str
             ) -> Callable[[Optional[list[str]]], Optional[list[str]]]:
    """id_text for an argument that takes several ids."""
    one = id_text(option, what)

    def check(values: Optional[list[str]]) -> Optional[list[str]]:
        for v in values or []:
            one(v)
        return values
    return check


ID_RULES = {"run id": "1-64 of A-Z, a-z, 0-9, '.', '_' and '-' (not . or ..)",
            "campaign id": "1-64 of A-Z, a-z, 0-9, '.', '_' and '-'",
            "host name": "an inventory name: 1-64 of A-Z, a-z, 0-9, '.', '_' and '-', "
                         "starting with a letter or digit",
            "hex digest prefix": "1-64 hex digits, the start of a workload digest that "
                                 "`bench results --cell` shows"}


HostNameArg = Annotated[str, typer.Argument(help="Host name from the inventory.",
                                            callback=id_text("HOST", "host name"))]
