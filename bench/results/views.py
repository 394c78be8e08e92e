"""Human views, shared parts: the consoles, JSON out, messages, progress bars and the number
formats every view uses. The views of each stage's results live beside it (trace_views,
fleet_views, store_views, plan_views, campaign_views); only these modules and the CLI import
rich."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table

from bench.units import format_size

console = Console()
err_console = Console(stderr=True)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def print_table(table: Table) -> None:
    console.print(table)


def say(message: str) -> None:
    err_console.print(message)


@contextmanager
def progress_bar(description: str, total: int):
    """Yields update(done, total, bytes) for long work; quiet when stderr is not a terminal."""
    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, console=err_console, transient=False,
                  disable=not err_console.is_terminal) as prog:
        task = prog.add_task(description, total=total)

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
