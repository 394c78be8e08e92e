"""CLI of the results store: ingest, runs, results, compare, sizing, export, plot (the schema
is `bench db`, bench.cli.db; retention rules `bench retention`, bench.cli.retention)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from bench.cli.options import (SECONDS_MAX, DataDirOpt, DbOpt, IncludeDemoOpt, JsonOpt, cell_text,
                               id_text, number)
from bench.errors import BenchError, InputError
from bench.results import store_views, views
from bench.results.views import compose
from bench.units import format_size

MatrixKind = Literal["capacity", "reclaim", "equal-memory", "prefetch", "admission", "end-to-end"]
PlotKind = Literal["capacity", "reclaim", "equal-memory", "prefetch", "admission"]
HostOpt = Annotated[Optional[str], typer.Option("--host", help="Only runs on this host.",
                                                callback=id_text("--host", "host name"))]
CampOpt = Annotated[Optional[str], typer.Option("--campaign", help="Only runs of this campaign.",
                                                callback=id_text("--campaign", "campaign id"))]
WorkloadOpt = Annotated[Optional[str], typer.Option(
    "--workload", help="Only runs of this workload: a prefix of the workload digest that "
                       "`bench results --cell` shows (an ambiguous prefix is refused).",
    callback=id_text("--workload", "hex digest prefix"))]
# 10^6 GB (a petabyte) a token: far above any model, and 10^9 times it is still finite
NOMINAL_GB_MAX = 1e6
PoolOpt = Annotated[bool, typer.Option(
    "--pool", help="Pool runs across result groups (hosts, workloads, fingerprints); the "
                   "output says what differs and that it was pooled.")]


def _store(db: str | None, *, write: bool = False):
    """The results database: readers (write=False) never create nor migrate it."""
    from bench.store.db import open_store
    return open_store(db, write=write)


def say_hidden_demo(store, *, cells: tuple[str, ...] = (), host: str | None = None,
                    campaign: str | None = None, include_demo: bool = False) -> int:
    """One line on stderr when a read left out runs of demo campaigns: how many, and how to
    see them (never on stdout: JSON and CSV stay clean). Returns the count."""
    from bench.store.left_out import DEMO_FIX, demo_note, hidden_demo_runs
    n = hidden_demo_runs(store, cells=cells, host=host, campaign=campaign,
                         include_demo=include_demo)
    if n:
        views.say(compose(("note:", "yellow"), f" {demo_note(n)}; {DEMO_FIX}"))
    return n


def _size(text: str | None, what: str) -> int | None:
    from bench.units import parse_size
    return None if text is None else parse_size(text, what)


def ingest(bundles: Annotated[list[Path], typer.Argument(help="Run bundle directories.")],
           plan: Annotated[Optional[Path], typer.Option(help="Plan for the demand model's "
                                                        "nominal misses.")] = None,
           nominal_gb: Annotated[Optional[float], typer.Option(
               "--nominal-gb", help="Nominal miss GB/iteration, if no plan (> 0, at most 10^6).",
               callback=number("--nominal-gb", NOMINAL_GB_MAX, unit=" GB",
                               example="0.75"))] = None,
           data_dir: DataDirOpt = None,
           max_file_bytes: Annotated[Optional[str], typer.Option(
               "--max-file-bytes", help="Cap on one bundle file (default "
               "$BENCH_BUNDLE_MAX_FILE_BYTES, else 256Mi; docs/bundle.md, Limits).")] = None,
           max_bundle_bytes: Annotated[Optional[str], typer.Option(
               "--max-bundle-bytes", help="Cap on a whole bundle (default "
               "$BENCH_BUNDLE_MAX_BYTES, else 1Gi).")] = None,
           db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Store run bundles (one transaction each; refused bundles move to rejected/). A bundle
    is validated against the contract (bench schema bundle) before anything is stored; the
    demand model's plan is --plan or <data-dir>/plans/<plan_sha256>.bin. A directory without
    spec.json and manifest.json is not a bundle: refused and left in place (exit 2)."""
    from bench.judge.bundle import Caps
    from bench.store.ingest import NotABundle, ingest_bundle
    caps = Caps.from_env(file_bytes=_size(max_file_bytes, "--max-file-bytes"),
                         total_bytes=_size(max_bundle_bytes, "--max-bundle-bytes"))
    store = _store(db, write=True)
    results, failed, exit_code = [], 0, 1
    nominal = None if nominal_gb is None else nominal_gb * 1e9
    for b in bundles:
        try:
            results.append(ingest_bundle(store, b, plan=plan, nominal_miss_bytes=nominal,
                                         data_dir=data_dir, caps=caps))
        except BenchError as exc:
            failed += 1
            refusal: dict = {"bundle": str(b), "status": "refused", "error": exc.message}
            if exc.hint:                        # a full disk, a bad bundle: say the fix
                refusal["fix"] = exc.hint
            if isinstance(exc, NotABundle):     # bad input (exit 2), not a failure of ours
                exit_code = 2
            results.append(refusal)
    if json_out:
        views.emit_json(results)
    else:
        for r in results:
            if r["status"] == "refused":        # one line per problem, never wrapped
                for line in r["error"].splitlines():
                    views.err_console.print(compose(("refused", "red"), f" {line}"),
                                            soft_wrap=True)
                if r.get("fix"):
                    views.err_console.print(compose(("fix:", "bold"), f" {r['fix']}"),
                                            soft_wrap=True)
            else:
                what = "retained" if r["retained"] else "rejected by " + ", ".join(r["failed"])
                views.say(f"{r['run_id']}: {r['status']}"
                          + (f", {what}" if r["status"] == "ingested" else ""))
    if failed:
        raise typer.Exit(exit_code)

def runs(cell: Annotated[Optional[str], typer.Option("--cell", help="Only this cell.",
                                                     callback=cell_text("--cell"))] = None,
         rejected: Annotated[bool, typer.Option("--rejected", help="Only rejected runs.")]
         = False, host: HostOpt = None, campaign: CampOpt = None,
         include_demo: IncludeDemoOpt = False, db: DbOpt = None,
         json_out: JsonOpt = False) -> None:
    """List stored runs with their retention verdicts (runs of `bench demo` campaigns only
    with --include-demo or --campaign)."""
    from bench.store.queries import list_runs
    store = _store(db)
    rows = list_runs(store, cell=cell, host=host, campaign=campaign, rejected=rejected,
                     include_demo=include_demo)
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(store_views.runs_table(rows))
    say_hidden_demo(store, cells=(cell,) if cell else (), host=host, campaign=campaign,
                    include_demo=include_demo)

def results(cell: Annotated[Optional[str], typer.Option(
                "--cell", help="One cell, e.g. 64G-balloon-mglru (case-insensitive).",
                callback=cell_text("--cell"))] = None,
            matrix: Annotated[Optional[MatrixKind], typer.Option(
                "--matrix", help="A campaign-shaped matrix (end-to-end: the engine pairs "
                                 "of Table 3).")] = None,
            host: HostOpt = None, campaign: CampOpt = None, workload: WorkloadOpt = None,
            pool: PoolOpt = False,
            verbose: Annotated[bool, typer.Option("-v", "--verbose",
                                                  help="Each run's verdicts.")] = False,
            include_demo: IncludeDemoOpt = False,
            db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Statistics of one cell over retained runs, one group per host, workload and fingerprint
    (never pooled across them unless --pool); or a campaign-shaped matrix, rows per group."""
    from bench.store import queries
    if matrix is not None and cell is None:
        if pool:
            raise InputError("--pool applies to --cell (a matrix keeps one row per group)",
                             hint="filter with --host, --campaign or --workload instead")
        store = _store(db)
        if matrix == "prefetch":       # recall, delivery counters, speed-up with n
            from bench.results import prefetch_views
            m = prefetch_views.prefetch_results(store, host=host, campaign=campaign,
                                                workload=workload, include_demo=include_demo)
            if not json_out:
                views.print_table(prefetch_views.delivery_table(m))
        else:
            m = queries.matrix(store, matrix, host=host, campaign=campaign,
                               workload=workload, include_demo=include_demo)
        say_hidden_demo(store, host=host, campaign=campaign, include_demo=include_demo)
        if json_out:
            return views.emit_json(m)
        if matrix == "prefetch":
            return views.print_table(store_views.matrix_table(m))
        return store_views.show_matrix(m)
    if cell is None or matrix is not None:
        raise InputError("give exactly one of --cell or --matrix")
    store = _store(db)
    groups = queries.cell_results(store, cell, host=host, campaign=campaign,
                                  workload=workload, pool=pool, verbose=verbose,
                                  include_demo=include_demo)
    say_hidden_demo(store, cells=(cell,), host=host, campaign=campaign,
                    include_demo=include_demo)
    if json_out:
        return views.emit_json(groups)
    store_views.show_cell(groups, verbose)

def compare(cell_a: str, cell_b: str, host: HostOpt = None, campaign: CampOpt = None,
            workload: WorkloadOpt = None, pool: PoolOpt = False,
            include_demo: IncludeDemoOpt = False,
            db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Ratio of medians and median of per-pair ratios of two cells, per host, workload and
    fingerprint (pairs within one host and campaign); one number across them only with --pool."""
    from bench.store.queries import compare as do
    store = _store(db)
    c = do(store, cell_a, cell_b, host=host, campaign=campaign, workload=workload, pool=pool,
           include_demo=include_demo)
    if json_out:
        views.emit_json(c)
    else:
        views.print_table(store_views.compare_table(c))
    say_hidden_demo(store, cells=(cell_a, cell_b), host=host, campaign=campaign,
                    include_demo=include_demo)

def _sizing_answer(r: dict) -> str:
    cap = r.get("capacity_bytes")
    about = format_size(cap // 10 ** 6 * 10 ** 6 if cap and cap >= 10 ** 6 else cap or 0)
    return {"interpolated": f"about {about} ({cap / 1e9:.2f} GB), interpolated" if cap else "",
            "measured": f"{format_size(cap) if cap else '-'} (measured point)",
            "below_range": f"at most {format_size(cap) if cap else '-'} (the smallest measured "
                           "capacity already meets it)",
            "unreachable": "not reached even at the largest measured capacity",
            "no_data": "no retained capacity runs"}[r["status"]]

def sizing(target_seconds: Annotated[float, typer.Option(
               "--target-seconds", help="Target seconds per iteration (> 0).",
               callback=number("--target-seconds", SECONDS_MAX, unit=" s", example="2"))],
           reclaim: Annotated[Literal["mglru", "classic"], typer.Option(
               help="Reclaim of the capacity curve to read.")] = "mglru",
           host: HostOpt = None, campaign: CampOpt = None, workload: WorkloadOpt = None,
           include_demo: IncludeDemoOpt = False,
           db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """DRAM needed for a target iteration time, off the measured capacity curves: one curve
    and one answer per host, workload, fingerprint and mechanism."""
    from bench.judge.identity import group_text
    from bench.store.queries import sizing as do
    store = _store(db)
    r = do(store, target_seconds, reclaim=reclaim, host=host, campaign=campaign,
           workload=workload, include_demo=include_demo)
    say_hidden_demo(store, host=host, campaign=campaign, include_demo=include_demo)
    if json_out:
        return views.emit_json(r)
    if not r["curves"]:
        print(f"target {target_seconds:g} s/iteration: {_sizing_answer(r)}")
    for c in r["curves"]:
        print(f"target {target_seconds:g} s/iteration on {c['host']}, {c['mechanism']} curve "
              f"({c['group']}): {_sizing_answer(c)}")
        if c.get("caveat"):
            views.say(compose((f"caveat ({c['group']} {c['mechanism']}):", "yellow"),
                              f" {c['caveat']}"))
    for g in r["groups"]:
        print(f"{g['id']}: {group_text(g)}")

def export(table: Annotated[Literal["runs", "iterations", "counters", "timeline"], typer.Option(
               "--table", help="runs: one row per run with its metrics; iterations, counters, "
               "timeline: the per-run detail tables. Every table carries the text run id "
               "(column run_id), as bench runs shows it.")] = "runs",
           fmt: Annotated[Literal["csv", "json"], typer.Option(
               "--format", help="csv (a header line, then one line per row) or json (an "
               "array of objects).")] = "csv",
           host: HostOpt = None, campaign: CampOpt = None,
           include_demo: IncludeDemoOpt = False, db: DbOpt = None) -> None:
    """Stored results to stdout, one table at a time, for sqlite3, pandas or a spreadsheet:
    the runs with their metrics, or a per-run detail table keyed by the text run id."""
    from bench.store.export import export_table
    store = _store(db)
    cols, rows = export_table(store, table, host=host, campaign=campaign,
                              include_demo=include_demo)
    if fmt == "json":
        _json_array(rows)
    else:
        w = csv.DictWriter(sys.stdout, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow(r)
    say_hidden_demo(store, host=host, campaign=campaign, include_demo=include_demo)


def _json_array(rows) -> None:
    """A JSON array written row by row (an export can be larger than memory allows at once)."""
    import json
    first = True
    sys.stdout.write("[")
    for r in rows:
        sys.stdout.write(("\n  " if first else ",\n  ") + json.dumps(r, default=str))
        first = False
    sys.stdout.write("\n]\n" if not first else "]\n")

def plot(kind: Annotated[PlotKind, typer.Argument(help="The figure to draw.")],
         out: Annotated[Path, typer.Option("-o", "--out", help="Image file to write: its "
                                           "suffix picks the format (.svg, .png, .pdf); "
                                           "a name without a suffix writes NAME.svg and "
                                           "NAME.png.")],
         host: HostOpt = None, campaign: CampOpt = None, workload: WorkloadOpt = None,
         include_demo: IncludeDemoOpt = False, db: DbOpt = None) -> None:
    """The paper's figures from stored results: capacity response (Fig. 2: every run, a/C),
    reclaim pairs (Fig. 3: device traffic and seconds), equal memory (Fig. 4: time and device
    traffic), prefetch conditions (Fig. 6), cache admission (§9). Titled with the campaign,
    host group and workload; n and min-max error bars on every point, one series per host,
    workload and fingerprint, zeros drawn (a symlog axis), missing cells marked. OUT's
    directory must exist; .svg and .pdf are vector, .png 200 dpi; no suffix: both .svg and
    .png."""
    from bench.cli.outpath import output_file
    from bench.store import left_out, queries
    plots = _plots()
    files = [output_file(f, "-o") for f in plots.figstyle.outputs(out, "-o")]
    store = _store(db)
    m = queries.matrix(store, kind, host=host, campaign=campaign, workload=workload,
                       include_demo=include_demo)
    hid = left_out.hidden_demo_runs(store, host=host, campaign=campaign,
                                    include_demo=include_demo)
    if not m["rows"] and hid:
        raise InputError(f"no retained runs for the {kind} plot ({left_out.demo_note(hid)})",
                         hint=left_out.DEMO_FIX)
    camps = queries.campaigns_in_scope(store, host=host, campaign=campaign, workload=workload,
                                       include_demo=include_demo)
    plots.draw(kind, m, out, camps)
    say_hidden_demo(store, host=host, campaign=campaign, include_demo=include_demo)
    views.say(f"wrote {', '.join(map(str, files))}")


def _plots():
    """bench.results.plots, or a clear error naming the extra when matplotlib is missing."""
    try:
        from bench.results import plots  # matplotlib: loaded only when used
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        raise BenchError("plots need matplotlib, which this install lacks",
                         hint="install the plot extra: pip install 'bench[plot]' (from a "
                         "checkout: pip install '.[plot]')") from None
    return plots


def with_legend(doc: str | None, kinds: tuple[str, ...]) -> str:
    """A command's help with what its tables' columns mean: the legends the tables print under
    themselves (store_views.LEGENDS), one paragraph per table."""
    import inspect
    parts = [inspect.cleandoc(doc or ""), "Columns of the tables (also printed under each "
             "table; " + store_views.FLAG_LEGEND + "):"]
    parts += [(f"--matrix {k}: " if len(kinds) > 1 else "") + store_views.LEGENDS[k]
              for k in kinds]
    return "\n\n".join(parts)


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)
    app.command("runs")(runs)
    app.command("results", help=with_legend(
        results.__doc__, ("capacity", "reclaim", "equal-memory", "prefetch", "admission",
                          "end-to-end")))(results)
    app.command("compare", help=with_legend(compare.__doc__, ("compare",)))(compare)
    app.command("sizing")(sizing)
    app.command("export")(export)
    app.command("plot")(plot)
