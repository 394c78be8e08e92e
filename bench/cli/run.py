"""`bench run CELL --host H[,H...] --trace FILE`: one cell on each host in parallel, end to end,
as a one-run campaign through the campaign executor (bench.execute.campaign.onerun): plan from
the trace, probe, deploy, pool, runner, wait with re-attach, collect, ingest."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.text import Text

from bench.cli.options import SECONDS_MAX, DbOpt, cell_text, id_text, number, size_option
from bench.errors import InputError
from bench.paths import default_data_dir
from bench.results import views
from bench.results.views import LiteralTable, compose, styled
from bench.units import kernel_size


def _table(results: list) -> LiteralTable:
    t = LiteralTable(title="bench run")
    for col in ("host", "run id", "runner", "median iter (ms)", "device GB/iter", "verdict",
                "reconnects", "seconds", "bundle / error"):
        t.add_column(col)
    for res in results:
        r = res.as_dict()
        f = r.get("figures") or {}
        med = f.get("iteration_median_s")
        dev = f.get("device_gb_per_iteration")
        ing = r.get("ingest")
        verdict: str | Text = "-"
        if ing:
            verdict = ("retained" if ing.get("retained") else
                       styled("rejected: " + ", ".join(ing.get("failed") or []), "yellow"))
        runner: str | Text
        if r.get("quarantined"):
            runner = styled("quarantined", "red")
        elif r.get("status"):
            runner = r["status"].get("phase", "?") if r["status"].get("ok") else \
                styled(str(r["status"].get("phase")), "red")
        else:
            runner = styled(str(r.get("stage")), "red")
        err = r.get("error")
        last: str | Text = r.get("bundle") or "-"
        if err:
            last = styled(err["message"], "red")
        t.add_row(r["host"], r["run_id"], runner, "-" if med is None else f"{med * 1e3:.3f}",
                  "-" if dev is None else f"{dev:.4f}", verdict, str(r.get("reconnects", 0)),
                  str(r.get("seconds")), last)
    return t


def run(cell: Annotated[str, typer.Argument(
            help="Cell name, e.g. 64G-balloon-mglru (case-insensitive).",
            callback=cell_text("CELL"))],
        host: Annotated[str, typer.Option("--host", help="Host name(s), comma separated.",
                                          callback=id_text("--host", "host name", csv=True))],
        trace: Annotated[Path, typer.Option("--trace", help="Trace JSONL the plan is made "
                                            "from.")],
        k: Annotated[Optional[int], typer.Option("--k", help="top-k when the trace has no "
                                                 "header.")] = None,
        threads: Annotated[int, typer.Option("--threads", help="Agent threads.")] = 8,
        passes: Annotated[int, typer.Option("--passes", help="Replay passes (warm-up "
                                            "passes + 1 measured).")] = 2,
        run_id: Annotated[Optional[str], typer.Option(
            "--run-id", help="Run id, also the id of its campaign (default r<UTC "
            "time>-<random>); with several hosts each host's run id is <ID>-<host>.",
            callback=id_text("--run-id", "run id"))] = None,
        mem: Annotated[Optional[str], typer.Option(
            "--mem", help="memboot cells: the mem= the host booted with, as bench writes "
            "sizes (93G = 93 x 10^9 bytes; bench reboots write mem= as exact bytes).")] = None,
        db: DbOpt = None,
        no_ingest: Annotated[bool, typer.Option("--no-ingest", help="Collect the bundle "
                                                "but do not ingest it (the run stays "
                                                "collected: `bench resume` ingests it).")] = False,
        cgroup_headroom: Annotated[Optional[str], typer.Option(
            "--cgroup-headroom", help="cgroup cells: memory.max = C + this, a bench size "
            "(default 6Gi, Algorithm 1's; 16Mi on a small host), as a matrix's "
            "protocol.cgroup_headroom.")] = None,
        balloon_max: Annotated[Optional[str], typer.Option(
            "--balloon-max", help="balloon cells: the most the balloon may lock "
            "(MemAvailable - C), a bench size (2G = 2 x 10^9 bytes); refused before the run "
            "when the probe already shows more, as a matrix's protocol.balloon_max.")] = None,
        data_dir: Annotated[Optional[Path], typer.Option(
            "--data-dir", help="Where bundles and plans go (default $BENCH_DATA_DIR, "
            "else ~/.local/share/bench).")] = None,
        hosts_dir: Annotated[Optional[Path], typer.Option(
            "--hosts-dir", help="Inventory directory (default $BENCH_HOSTS, else ./hosts if "
            "it exists, else ~/.config/bench/hosts).")] = None,
        timeout: Annotated[float, typer.Option("--timeout", help="Longest a run may take "
                                               "(seconds, at most a week).",
                                               callback=number("--timeout", SECONDS_MAX, unit=" s",
                                                               example="3600"))] = 6 * 3600.0,
        reconnect_timeout: Annotated[Optional[float], typer.Option(
            "--reconnect-timeout", help="Longest a host may stay unreachable before it is "
            "quarantined (default: its reboot.up_timeout).",
            callback=number("--reconnect-timeout", SECONDS_MAX, unit=" s",
                            example="600"))] = None,
        hints: Annotated[Optional[str], typer.Option(
            "--hints", help="prefetch cells: the hint plan shipped, oracle, pilot (the "
            "previous-token predictor), previous-token, or a hint plan FILE (default: the "
            "cell's label: oracle or pilot); its provenance and recall on this trace go in "
            "the spec, and retention rejects a plan its label contradicts.")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
        ) -> None:
    """Run one cell on each host in parallel, end to end, as a campaign of one run per host
    (in the database like any campaign, its matrix `bench run`, its id the run id: `bench
    resume ID` re-attaches to a run a lost host left); print the bundle's key figures
    (median iteration time of the measured pass, pool-device GB per iteration between
    loop entry and pass end, verdicts if ingested). The protocol a matrix sets in its
    protocol table is set here with --cgroup-headroom and --balloon-max (recorded in the
    spec).
    Exit 1 if any host failed."""
    from bench.matrix.cells import parse_cell
    from bench.matrix.runspec import RunOptions
    from bench.hosts.inventory import find_hosts_dir, load_inventory, select
    from bench.execute.campaign.onerun import host_run_ids, run_hosts, with_protocol
    from bench.plan.prepared import plan_from_trace_file
    c = parse_cell(cell)
    mem_bytes = None if mem is None else size_option(mem, "--mem")
    for text, opt in ((cgroup_headroom, "--cgroup-headroom"), (balloon_max, "--balloon-max")):
        if text is not None:
            size_option(text, opt)          # a bare number is refused, not read as bytes
    names = [n.strip() for n in host.split(",") if n.strip()]
    if not names:
        raise InputError("--host is empty", "name at least one host of the inventory")
    hosts = select(load_inventory(hosts_dir), names)
    rid = run_id or time.strftime("r%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)
    # the kernel command line holds what bench wrote there: the exact bytes (bench.units)
    options = with_protocol(RunOptions(
        threads=threads, passes=passes,
        mem=None if mem_bytes is None else kernel_size(mem_bytes)),
        c, cgroup_headroom, balloon_max)
    ddir = data_dir or default_data_dir()
    host_run_ids(rid, names)   # bad ids fail before the trace is even parsed
    if hints is not None and c.hints is None:
        raise InputError(f"--hints is given but cell {c.name} has no prefetch",
                         hint="name a prefetch cell (...-pilot-advice) or drop --hints")
    plan, plan_path = plan_from_trace_file(trace, k=k, data_dir=ddir)
    if c.hints is not None:
        from bench.matrix.hintplans import prepare_hints
        plan, _ = prepare_hints(plan, plan_path, c.hints, hints, ddir)
    results = run_hosts(hosts, c, plan, plan_path, rid, options=options, data_dir=ddir,
                        db_url=db, do_ingest=not no_ingest, timeout_s=timeout,
                        reconnect_timeout_s=reconnect_timeout,
                        hosts_dir=find_hosts_dir(hosts_dir).path.absolute())
    if json_out:
        views.emit_json([r.as_dict() for r in results])
    else:
        views.print_table(_table(results))
        if results and results[0].campaign:
            views.say(f"campaign {results[0].campaign} (`bench campaigns`, `bench resume "
                      f"{results[0].campaign}`)")
        for r in results:
            if r.error and r.error.get("hint"):
                views.say(compose((f"{r.host}:", "bold"), f" fix: {r.error['hint']}"))
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
