"""`bench campaigns [list|hide|unhide|rm]` and `bench watch`: the campaigns in the store, listed,
hidden, removed and followed. Hidden campaigns (and their runs) stay in the database but out of
listings and results unless asked (`--all`, `--campaign ID`); runs of `bench demo` campaigns
are left out of results unless `--include-demo` or `--campaign ID` (bench.store.queries)."""

from __future__ import annotations

import sys
import time as _time
from typing import Annotated, Optional

import typer

from bench.cli.options import SECONDS_MAX, DbOpt, JsonOpt, id_text, ids_text, number
from bench.errors import InputError
from bench.results import campaign_views, views

campaigns_app = typer.Typer(
    invoke_without_command=True, no_args_is_help=False,
    help="Campaigns in the database: list them (the default), hide them from listings and "
         "results, or remove them with their runs.")

AllOpt = Annotated[bool, typer.Option("--all", help="Also hidden campaigns.")]
IdsArg = Annotated[list[str], typer.Argument(help="Campaign ids (`bench campaigns --all`).",
                                             show_default=False,
                                             callback=ids_text("CAMPAIGN", "campaign id"))]
CampaignArg = Annotated[Optional[str], typer.Argument(
    help="Campaign id (default: the newest campaign that is not hidden).",
    callback=id_text("CAMPAIGN", "campaign id"))]


def _listing(db: str | None, include_hidden: bool, json_out: bool) -> None:
    from bench.store.campaigns import campaign_list
    from bench.store.db import open_store
    store = open_store(db, write=False)
    try:
        rows = [c.as_listing() for c in campaign_list(store, include_hidden=include_hidden)]
    finally:
        store.close()
    if json_out:
        views.emit_json(rows)
        return
    shown = []
    for r in rows:
        flags = [f for f in ("demo", "hidden") if r[f]]
        shown.append(dict(r, state=r["state"] + (f" ({', '.join(flags)})" if flags else "")))
    views.print_table(campaign_views.campaigns_table(shown))


@campaigns_app.callback()
def campaigns_cmd(ctx: typer.Context, include_hidden: AllOpt = False, db: DbOpt = None,
                  json_out: JsonOpt = False) -> None:
    """List campaigns with their progress (runs per state); `(demo)` marks the ones `bench
    demo` made, `(hidden)` the hidden ones (shown with --all)."""
    if ctx.invoked_subcommand is None:
        _listing(db, include_hidden, json_out)
    else:
        ctx.obj = {"db": db}


def _db(ctx: typer.Context, db: str | None) -> str | None:
    return db if db is not None else (ctx.obj or {}).get("db")


@campaigns_app.command("list")
def list_cmd(ctx: typer.Context, include_hidden: AllOpt = False, db: DbOpt = None,
             json_out: JsonOpt = False) -> None:
    """List campaigns (the same as `bench campaigns`)."""
    _listing(_db(ctx, db), include_hidden, json_out)


def _set_hidden(ids: list[str], db: str | None, hidden: bool) -> None:
    from bench.store.campaigns import set_flags
    from bench.store.db import open_store
    store = open_store(db)
    try:
        for cid in ids:
            set_flags(store, cid, hidden=hidden)
            views.say(f"campaign {cid}: {'hidden' if hidden else 'shown'}")
    finally:
        store.close()


@campaigns_app.command("hide")
def hide_cmd(ctx: typer.Context, ids: IdsArg, db: DbOpt = None) -> None:
    """Hide campaigns: kept with their runs, but out of `bench campaigns` and of results
    (`bench results`, `runs`, `compare`, ...) unless `--all` or `--campaign ID`."""
    _set_hidden(ids, _db(ctx, db), True)


@campaigns_app.command("unhide")
def unhide_cmd(ctx: typer.Context, ids: IdsArg, db: DbOpt = None) -> None:
    """Show hidden campaigns again."""
    _set_hidden(ids, _db(ctx, db), False)


@campaigns_app.command("rm")
def rm_cmd(ctx: typer.Context, ids: IdsArg,
           yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
           db: DbOpt = None) -> None:
    """Remove campaigns from the database with their runs and every row of those runs
    (iterations, counters, timeline, raw files, verdicts, journal). Refuses a campaign whose
    controller is alive (its lock is live); bundles on disk are not touched."""
    from bench.store.campaigns import campaign_row, remove_campaign, run_rows
    from bench.store.controller_lock import acquire_lock, owner_info, release_lock
    from bench.store.db import StoreError, open_store
    store = open_store(_db(ctx, db))
    try:
        for cid in ids:
            if campaign_row(store, cid) is None:
                raise InputError(f"no campaign {cid!r} in the database",
                                 hint="`bench campaigns --all` lists them")
        for cid in ids:
            n = len(run_rows(store, cid))
            if not yes:
                _confirm(f"remove campaign {cid} and its {n} runs from the database?")
            me = owner_info("bench campaigns rm")
            holder = acquire_lock(store, cid, me)
            if holder is not None:
                raise StoreError(f"campaign {cid} is being run by pid {holder.get('pid')} on "
                                 f"{holder.get('host')} (its controller lock is live)",
                                 hint="stop that controller first, or wait for it to end")
            try:
                done = remove_campaign(store, cid)
            except BaseException:
                release_lock(store, cid, me)
                raise
            views.say(f"campaign {cid}: removed with {done['runs']} runs and "
                      f"{done['journal']} journal entries")
    finally:
        store.close()


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise InputError(f"{question} (no terminal to ask)", hint="pass --yes to remove "
                         "without asking")
    if not typer.confirm(question, default=False):
        raise typer.Exit(1)


def watch_cmd(campaign: CampaignArg = None, db: DbOpt = None,
              interval: Annotated[float, typer.Option("--interval", help="Seconds between "
                                                      "polls (at most a week).",
                                                      callback=number("--interval", SECONDS_MAX,
                                                                      unit=" s"))] = 1.0,
              once: Annotated[bool, typer.Option("--once", help="Print one snapshot and "
                                                 "exit.")] = False,
              json_out: JsonOpt = False) -> None:
    """Follow a campaign from another shell (read-only: polls the database, touches no host);
    ends when no controller holds the campaign any more, or on Ctrl-C."""

    from bench.execute.campaign.watch import progress
    from bench.store.campaigns import journal_rows, latest_campaign
    from bench.store.controller_lock import live_holder
    from bench.store.db import StoreError, open_store
    store = open_store(db, write=False)
    try:
        cid = campaign or latest_campaign(store)
        if cid is None:
            raise StoreError("no campaign in the database")
        if once or json_out:
            p = progress(store, cid)
            if json_out:
                views.emit_json(p)
            else:
                views.print_table(campaign_views.campaign_renderable(p))
            return
        seen = {"t": _time.monotonic()}

        def finished():
            # stop when no live controller drives it (after a grace for a restarting one)
            if live_holder(store, cid, 30.0):
                seen["t"] = _time.monotonic()
            return _time.monotonic() - seen["t"] > 5.0
        try:
            campaign_views.campaign_live(lambda: progress(store, cid), finished, interval,
                                journal=lambda after: journal_rows(store, cid, after))
        except KeyboardInterrupt:
            pass
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.add_typer(campaigns_app, name="campaigns")
    app.command("watch")(watch_cmd)
