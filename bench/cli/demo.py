"""`bench demo`: the main job on this machine (bench.execute.demo), shown."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from bench.cli.options import JsonOpt, ints, size_option
from bench.errors import InputError
from bench.results import plan_views, store_views, trace_views, views
from bench.results.views import LiteralTable, compose

if TYPE_CHECKING:
    from bench.execute.demo import DemoCampaign

# Library modules that pull numpy (~100 ms), SQLAlchemy with alembic (~350 ms), fabric (~140 ms)
# or matplotlib (~500 ms) are imported inside the commands that use them, so that `bench --help`
# and every light command stay fast (bench --help: 0.17 s; with every command's imports at the
# top, see README, Commands). Everything else is imported at the top.


def demo(
    out: Annotated[Path, typer.Option(help="Directory for traces, plans, the pool, the work "
                                           "dir and bundles.")] = Path("bench-demo"),
    model: Annotated[str, typer.Option(help="Model preset of the trace pipeline: k3, qwen3, "
                                            "dsv3 or tiny.")] = "k3",
    budgets: Annotated[str, typer.Option(help="Comma list of B, experts per layer.")] = "8,16,32",
    seed: Annotated[int, typer.Option(help="Random seed of the synthetic traces.")] = 0,
    trace_only: Annotated[bool, typer.Option("--trace-only", help="Only the trace pipeline "
                                             "(no root needed, nothing measured).")] = False,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Skip the trace pipeline; only "
                                           "the measured campaign.")] = False,
    max_lock: Annotated[str, typer.Option("--max-lock", help="Largest balloon (mlocked "
                                          "memory) a cell may hold; larger ones are skipped "
                                          "(2G = 2 x 10^9 bytes).")]
    = "2G",
    db: Annotated[Optional[str], typer.Option("--db", help="Database URL (default $BENCH_DB, "
                                              "else the local SQLite).")] = None,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="Bundles and plans "
                                                     "(default OUT/data).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The main job on this machine: the trace pipeline (synth, parse, locality, policies,
    demand, plans), then as root a small campaign on the local host (cgroup walls, balloon,
    none on a 256 MiB pool) through the real executor, ending with its results table."""

    from bench.execute.demo import balloon_notes, not_validated, root_needs, run_demo, tool_needs
    if trace_only and no_trace:
        raise InputError("--trace-only and --no-trace exclude each other")
    lock = size_option(max_lock, "--max-lock")
    if not trace_only:      # a --db it would refuse, refused before the trace and hosts are written
        from bench.store.db import check_database
        check_database(db)
    t0 = time.monotonic()

    def step(msg: str) -> None:
        if not json_out:
            views.say(compose((f"{time.monotonic() - t0:6.1f}s", "dim"), f" {msg}"))
    result: dict = {}
    if not no_trace:
        step(f"part 1: the trace pipeline ({model})")
        result["trace"] = run_demo(out, model, tuple(ints(budgets, "--budgets")), seed, step=step)
        if not json_out:
            _show_trace(result["trace"])
    if trace_only:
        if json_out:
            views.emit_json(result["trace"])
        else:
            views.say(f"files in {out}; {time.monotonic() - t0:.1f}s")
        return
    need = root_needs() or tool_needs()
    if need:
        # the trace part ran; the measured part cannot: say what it needs, exit 0
        result["campaign"] = {"skipped": need}
        if json_out:
            views.emit_json(result)
        else:
            views.say(compose(("not measured:", "yellow"), f" {need}"))
            views.say(f"files in {out}; {time.monotonic() - t0:.1f}s")
        return
    step("part 2: a campaign on the local host (cgroup walls, balloon, none)")
    res, dc = _campaign(out, db, data_dir, lock, seed, step, json_out)
    res["notes"], bad = balloon_notes(res), not_validated(res)
    result["campaign"] = res
    result["seconds"] = round(time.monotonic() - t0, 1)
    if json_out:
        views.emit_json(result)
    else:
        _show_campaign(res, dc.out, db)
        for note in res["notes"]:
            views.say(compose(("note:", "bold"), f" {note}"))
        views.say(f"files in {out} (trace, matrix.toml, hosts/, pool/, work/) and bundles in "
                  f"{dc.data_dir}; {time.monotonic() - t0:.1f}s")
        _say_report(res["campaign"], dc.out, db)
    if res["state"] != "done" or bad:
        if not json_out:
            _say_not_validated(res, bad)
        raise typer.Exit(1)


def _campaign(out: Path, db: str | None, data_dir: Path | None, lock: int, seed: int,
              step, json_out: bool) -> tuple[dict, DemoCampaign]:
    """The measured part: the demo campaign prepared, run with the live view, its results."""
    from bench.cli.schedule import run_live
    from bench.execute.campaign.executor import Executor
    from bench.execute.demo import demo_results, machine_lock, prepare_campaign
    # one demo measures at a time on this machine: from the MemAvailable read to the last run
    with machine_lock(wait=step):
        dc, settings = prepare_campaign(out, db_url=db, data_dir=data_dir, max_lock=lock,
                                        seed=seed, step=step)
        for r in dc.runs:
            step(f"  will run {r['cell']}")
        for s in dc.skipped:
            step(f"  skipped {s['cell'] or s['point']}: {s['reason']}")
        e = dc.estimate
        step(f"campaign {dc.campaign}: {len(dc.runs)} runs, {e['reboot_count']} reboots, "
             f"estimate {views.duration(e['seconds'])} ({plan_views.estimates_text(e)})")
        run_live(dc.campaign, db, lambda store: Executor(store, dc.campaign, settings),
                 json_out)
    return demo_results(dc), dc


def _say_report(cid: str, out: Path, db: str | None) -> None:
    """The demo's last line: its campaign's report written into OUT, and its path."""
    from bench.cli.report import write_report
    path = write_report([cid], out / "report.html", "html", db)
    views.say(f"report: {path.absolute()} (again with `bench report {cid}"
              + (f" --db {db}" if db else "") + "`)")


def _say_not_validated(res: dict, bad: list[dict]) -> None:
    """One line per run that did not end validated, with its reasons, on stderr."""
    views.err_console.print(compose(
        ("error:", "bold red"), f" the demo campaign {res['campaign']} ended {res['state']} "
        f"with {len(bad)} of {len(res['runs'])} runs not validated"), soft_wrap=True)
    for r in bad:
        why = "; ".join(r["failed_rules"]) or r.get("reason") or "see `bench watch --once`"
        views.say(f"  {r['cell']} ({r['run_id']}): {r['state']}: {why}")


def _show_trace(trace: dict) -> None:
    views.print_table(trace_views.parse_table(trace["parse"]))
    views.print_table(trace_views.stats_table(trace["locality"]))
    views.print_table(trace_views.sim_table(trace["sim"]))
    views.print_table(trace_views.sim_table(trace["sim_off_domain"], "Off-domain: static table "
                                            "trained on prose, LRU needs no table"))
    views.print_table(trace_views.demand_table(trace["demand"]))
    views.print_table(trace_views.recall_table(trace["recall"]))


def _show_campaign(res: dict, out: Path, db: str | None) -> None:
    """The reclaim-shaped table, then every demo cell: run (state, s/it, GB/it) or skipped."""
    views.print_table(store_views.matrix_table(res["table"]))
    t = LiteralTable(title=f"demo cells on {out}: run or skipped")
    for col in ("cell", "outcome", "s/it", "GB/it", "why"):
        t.add_column(col, justify="right" if col in ("s/it", "GB/it") else "left")
    for r in res["runs"]:
        dev, med = r["device_bytes_per_iteration"], r["iteration_median_s"]
        t.add_row(r["cell"], r["state"], "-" if med is None else f"{med:.4f}",
                  "-" if dev is None else f"{dev / 1e9:.4f}", "; ".join(r["failed_rules"][:2]))
    for sk in res["skipped"]:
        t.add_row(sk["cell"] or sk["point"], "skipped", "-", "-", sk["reason"])
    views.print_table(t)
    views.say(f"campaign {res['campaign']}: {res['state']}; results again with `bench results "
              f"--matrix reclaim --campaign {res['campaign']}" + (f" --db {db}" if db else "")
              + "`")


def register(app: typer.Typer) -> None:
    app.command()(demo)
