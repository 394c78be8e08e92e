"""`bench placement`: the paper's §8 placement rules 2 and 3 from GPU-side bandwidths the user
measured (a small TOML file), and with a results database the worked sizing example off the
stored capacity curves (bench.results.placement).

`bench rules`, its former name, stays one release as a hidden alias: the same command, with
one line on stderr saying it is deprecated (silent under -q, as every warning)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Optional

import typer

from bench.cli.options import SECONDS_MAX, DbOpt, IncludeDemoOpt, JsonOpt, id_text, number

EXAMPLE = "paper-gh200"


def placement(bandwidths: Annotated[Path, typer.Option(
                  "--bandwidths", metavar="FILE|NAME",
                  help="TOML file of GPU-side bandwidths in GB/s measured on the serving node "
                       "([measured] host, [gb_per_s] hbm, host_read, streaming; optional "
                       f"link_ceiling). bench cannot measure them: this machine has no GPU. "
                       f"The shipped name {EXAMPLE} holds the paper's GH200 values as printed "
                       "(the file is bench/data/bandwidths/paper-gh200.toml, a template for "
                       "yours).")],
              target_seconds: Annotated[Optional[float], typer.Option(
                  "--target-seconds",
                  help="Target maximum seconds per iteration for the sizing example (the paper: "
                       "2). Reads the database (--db) for its capacity curves.",
                  callback=number("--target-seconds", SECONDS_MAX, unit=" s",
                                  example="2"))] = None,
              host: Annotated[Optional[str], typer.Option(
                  "--host", help="Sizing: only runs on this host.",
                  callback=id_text("--host", "host name"))] = None,
              campaign: Annotated[Optional[str], typer.Option(
                  "--campaign", help="Sizing: only runs of this campaign.",
                  callback=id_text("--campaign", "campaign id"))] = None,
              workload: Annotated[Optional[str], typer.Option(
                  "--workload", help="Sizing: only runs of this workload (a prefix of the "
                                     "workload digest).",
                  callback=id_text("--workload", "hex digest prefix"))] = None,
              include_demo: IncludeDemoOpt = False,
              db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Placement rules 2 and 3 (paper §8) from measured bandwidths: the breakeven reuse of an
    HBM promotion, (1/streaming) / (1/host_read - 1/hbm), and how far direct file-backed reads
    are from overlapped streaming. With --db or --target-seconds, the worked sizing example
    from the stored capacity matrix (bench results --matrix capacity), one answer per result
    group, mechanism and reclaim, never interpolated across groups: the DRAM that reaches the
    target (linear between measured capacities; an upper bound on a balloon curve) with the
    device traffic there, iterations per second at the largest capacity, and seconds per
    accepted token where the plan recorded its tokens."""
    import math

    from bench.errors import InputError
    from bench.results import placement as r
    from bench.results import views
    if target_seconds is not None and not (math.isfinite(target_seconds)
                                           and target_seconds > 0):
        raise InputError(f"--target-seconds must be a number of seconds above 0, got "
                         f"{target_seconds!r}")
    bw = r.read_bandwidths(r.resolve_bandwidths(bandwidths))
    capacity = None
    if db is not None or target_seconds is not None:
        from bench.cli.results import say_hidden_demo
        from bench.store.db import open_store
        from bench.store.queries import matrix
        store = open_store(db, write=False)
        capacity = matrix(store, "capacity", host=host, campaign=campaign, workload=workload,
                          include_demo=include_demo)
        say_hidden_demo(store, host=host, campaign=campaign, include_demo=include_demo)
    rep = r.placement_report(bw, capacity, target_seconds)
    if json_out:
        views.emit_json(rep)
        return
    for line in r.report_lines(rep):
        print(views.visible(line, lines=False))     # a file's or a host's text, escaped


@functools.wraps(placement)         # the same parameters: typer reads them through __wrapped__
def rules(**kwargs) -> None:
    from bench.results import views
    views.say(views.compose(("warning:", "yellow"), " `bench rules` is deprecated and will be "
                            "removed in the next release; use `bench placement`"))
    placement(**kwargs)


def register(app: typer.Typer) -> None:
    app.command("placement")(placement)
    app.command("rules", hidden=True,
                help="Deprecated name of `bench placement` (removed in the next release).")(rules)
