"""Human views of results: rich tables and progress. Only this module and the CLI import rich."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from collections.abc import Iterable, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

console = Console()
err_console = Console(stderr=True)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def parse_table(summaries: Sequence[dict]) -> Table:
    t = Table(title="Parsed traces (canonical parser)")
    for col in ("trace", "iterations", "normal", "spec-accept", "spec-fallback", "tokens",
                "passes", "reads", "reads/it", "reads/token", "prefill excl."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in summaries:
        t.add_row(_name(s["source"]), str(s["iterations"]), str(s["normal"]), str(s["spec_accept"]),
                  str(s["spec_fallback"]), str(s["accepted_tokens"]), str(s["passes"]),
                  str(s["reads"]), f"{s['reads_per_iteration']:.0f}",
                  f"{s['reads_per_accepted_token']:.0f}", str(s["prefill_records_excluded"]))
    return t


def stats_table(result: dict) -> Table:
    t = Table(title="Router locality (Table 1 quantities)")
    for col in ("trace", "zipf alpha", "W1", "W8", "W64", "top-8 share first/last/min/max",
                "union cov. min-max", "pool cov."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in result["traces"]:
        ts = s["top8_share"]
        t.add_row(_name(s["source"]), _num(s["zipf_alpha"], ".2f"), _pct(s["reuse"]["w1"]),
                  _pct(s["reuse"]["w8"]), _pct(s["reuse"]["w64"]),
                  f"{_pct(ts['first_layer'])} / {_pct(ts['last_layer'])} / {_pct(ts['min'])} / "
                  f"{_pct(ts['max'])}",
                  f"{s['union_coverage']['min']}-{s['union_coverage']['max']} of "
                  f"{s['union_coverage']['of']}", _pct(s["pool_coverage"]))
    if result.get("jaccard_range"):
        lo, hi = result["jaccard_range"]
        t.caption = f"domain Jaccard of top-{result['traces'][0]['top_set']} sets: {lo:.3f}-{hi:.3f}"
    return t


def _name(source: str) -> str:
    return Path(source).name if "/" in source else source


def sim_table(rows: Sequence[dict], title: str = "Fair-window hit rates") -> Table:
    t = Table(title=title)
    for col in ("trace", "regime", "budget", "policy", "trained on", "hits", "accesses",
                "hit rate"):
        t.add_column(col, justify="left" if col in ("trace", "regime", "policy", "trained on")
                     else "right")
    for r in rows:
        t.add_row(_name(str(r["trace"])), r["regime"], str(r["budget"]), r["policy"],
                  _name(str(r.get("train", "-"))), str(r["hits"]), str(r["accesses"]),
                  _pct(r["hit_rate"]))
    return t


def demand_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Demand model: LRU over one global pool, measured (second) pass")
    for col in ("trace", "capacity", "pool keys", "misses/it", "nominal miss GB/it",
                "logical GB/it", "hit rate"):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for r in rows:
        t.add_row(_name(str(r["trace"])), r["capacity"], str(r["capacity_experts"]),
                  f"{r['misses_per_iteration']:.1f}", f"{r['nominal_miss_gb_per_iteration']:.2f}",
                  f"{r['logical_gb_per_iteration']:.2f}", _pct(r["hit_rate"]))
    return t


def recall_table(report: dict) -> Table:
    t = Table(title="Next-pass prediction recall")
    for col in ("plan", "provenance", "recall", "per-layer range", "precision", "hinted"):
        t.add_column(col, justify="left" if col in ("plan", "provenance") else "right")
    for name, r in (("hints", report["hints"]), ("previous token", report["previous_token_baseline"])):
        rng = r["per_layer_range"]
        t.add_row(name, json.dumps(r["provenance"]), _pct(r["recall"]),
                  f"{_pct(rng[0])}-{_pct(rng[1])}" if rng else "-", _pct(r["precision"]),
                  str(r["hinted"]))
    return t


def check_lines(groups: Sequence[Sequence[str]]) -> Iterable[str]:
    for g in groups:
        yield ("suspicious first pass: bit-identical step-0 coverage in " + ", ".join(g) +
               " (a synthetic scheduler dry run recorded as decode?)")


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


def print_table(table: Table) -> None:
    console.print(table)


def say(message: str) -> None:
    err_console.print(message)
