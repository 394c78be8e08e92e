"""`bench schedule [--dry-run]` and `bench resume`: a matrix planned on hosts, then run as a
campaign. The matrices themselves are `bench matrix list|show` (bench.cli.matrix).

`bench schedule` probes every named host first (read-only, in parallel;
bench.execute.campaign.preflight: facts younger than --facts-max-age are reused, `--facts FILE`
hands them in for a dry run) and plans with those facts as data: the cells a host cannot run are
skipped with the reason, a plan with no run is an error (exit 2), an unreachable host stops the
command before anything is written. `--dry-run` writes nothing (but the facts cache); the plan comes
from the inventory files, the facts, the matrix and the seed. Without it the campaign is created in
the store and run by the executor (bench.execute.campaign); `bench resume`, `bench campaigns` and
`bench watch` continue, list and follow campaigns (watch reads the database only)."""

from __future__ import annotations

import math
import secrets
import threading
import time as _time
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer

from bench.cli.interrupt import Interrupted, signals_raise
from bench.cli.options import (SECONDS_MAX, DataDirOpt, DbOpt, HostsDirOpt, JsonOpt,
                               ScaleOpt, id_text, number)
from bench.errors import InputError
from bench.results import campaign_views, plan_views, views
from bench.results.views import compose

ThreadsOpt = Annotated[int, typer.Option("--threads", help="Agent threads per run.")]
RetriesOpt = Annotated[int, typer.Option("--retries", help="Infrastructure retries per run "
                                                           "(rejections are never retried).")]
ReconnectOpt = Annotated[Optional[float], typer.Option(
    "--reconnect-timeout", help="Longest a host may stay unreachable before it is quarantined "
                                "(default: its reboot.up_timeout).",
    callback=number("--reconnect-timeout", SECONDS_MAX, unit=" s", example="600"))]


def build_plan(matrix: str, host_names: list[str] | None, hosts_dir: Path | None, seed: int,
               campaign: str | None = None, scale: str | None = None,
               facts: dict[str, dict] | None = None, measured=None):
    """(plan, expansion, matrix) for a matrix on inventory hosts, with their probed facts as
    data when given (bench.execute.campaign.preflight gets them) and the run and reboot
    durations measured before (`measured`, bench.matrix.estimate.Estimates: measured_estimates
    reads them); pure apart from reading files."""
    from bench.hosts.inventory import load_inventory, select
    from bench.matrix.expand import expand
    from bench.matrix.load import load_matrix
    from bench.matrix.schedule import HostState, schedule
    m = load_matrix(matrix, scale)
    hosts = select(load_inventory(hosts_dir), host_names)
    exp = expand(m, hosts, facts)
    plan = schedule(exp.requests, [HostState.from_facts(h, (facts or {}).get(h.name))
                                   for h in hosts], seed,
                    campaign=campaign or f"{m.name}-s{seed}", randomize=m.randomize,
                    interleave=m.interleave, run_seconds=m.run_seconds,
                    reboot_seconds=m.reboot_seconds, measured=measured)
    return plan, exp, m


def measured_estimates(db: str | None, hosts: list[str]):
    """The durations the results database measured for these hosts (bench.store.durations), as
    Estimates whose model figures the matrix supplies; None (every estimate modelled) when
    there is no database at head to read: planning opens it read-only, creating nothing (a
    plan refused as empty leaves no database behind)."""
    from bench.errors import BenchError
    from bench.matrix.estimate import Estimates
    from bench.store.db import open_store
    from bench.store.durations import measured_durations
    try:
        store = open_store(db, write=False)
    except BenchError:
        return None
    try:
        runs, reboots = measured_durations(store, hosts)
    finally:
        store.close()
    return Estimates(0.0, 0.0, runs, reboots)


def _preflight(matrix: str, scale: str | None, names: list[str] | None,
               hosts_dir: Path | None, data_dir: Path | None, dry_run: bool,
               facts_file: Path | None, max_age: float, json_out: bool):
    """The matrix and inventory checked (bad input first), then every named host's facts
    (bench.execute.campaign.preflight): HostsUnreachable before anything is written."""
    from bench.execute.campaign.preflight import facts_note, host_facts, load_facts_file
    from bench.hosts.inventory import load_inventory, select
    from bench.matrix.load import load_matrix
    from bench.paths import default_data_dir
    if facts_file is not None and not dry_run:
        raise InputError("--facts is for --dry-run only",
                         hint="a campaign probes its hosts itself (facts younger than "
                              "--facts-max-age are reused)")
    if not math.isfinite(max_age) or max_age < 0:
        raise InputError(f"--facts-max-age must be a finite number of seconds, 0 or more; "
                         f"got {max_age:g}", hint="0 probes every host anew")
    load_matrix(matrix, scale)
    hosts = select(load_inventory(hosts_dir), names)
    given = load_facts_file(facts_file) if facts_file is not None else None
    hf = host_facts(hosts, data_dir=data_dir or default_data_dir(), dry_run=dry_run,
                    max_age_s=max_age, given=given)
    if not json_out:
        views.say(facts_note(hf))
    return hosts, hf


def _refuse_empty(plan, exp, m) -> None:
    """A plan with no run is an error (exit 2) saying why each cell was skipped."""
    if plan.runs:
        return
    why = "; ".join(exp.skip_reasons()) or "the matrix has no cell"
    raise InputError(f"matrix {m.name} plans no run on {', '.join(h.host for h in plan.hosts)}: "
                     f"{why}", hint="`bench hosts probe HOST` shows what each host has; choose "
                                    "cells these hosts can run, or hosts that can run them")


FactsOpt = Annotated[Optional[Path], typer.Option(
    "--facts", help="With --dry-run: host facts from this file (`bench hosts probe --json > "
                    "FILE`) instead of probing those hosts.")]
FactsAgeOpt = Annotated[float, typer.Option(
    "--facts-max-age", help="Reuse a host's facts probed this many seconds ago or less (0: "
                            "always probe).",
    callback=number("--facts-max-age", SECONDS_MAX, zero=True, unit=" s", example="300"))]


def schedule_cmd(
    matrix: Annotated[str, typer.Option("--matrix", help="Matrix name or TOML file.")],
    hosts: Annotated[Optional[str], typer.Option(
        "--hosts", help="Comma-separated host names (default: every inventory host).",
        callback=id_text("--hosts", "host name", csv=True))] = None,
    hosts_dir: HostsDirOpt = None,
    scale: ScaleOpt = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", help="Random seed of the order (default: a fresh one, printed).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the ordered plan per host, reboots and estimated duration; "
                          "write nothing (the hosts are probed, read-only).")] = False,
    campaign: Annotated[Optional[str], typer.Option(
        "--campaign", help="Campaign id (default <matrix>-s<seed>-<UTC time>).",
        callback=id_text("--campaign", "campaign id"))] = None,
    facts_file: FactsOpt = None,
    facts_max_age: FactsAgeOpt = 300.0,
    db: DbOpt = None,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = 8,
    retries: RetriesOpt = 2,
    reconnect_timeout: ReconnectOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Schedule a matrix on hosts: every host probed first (in parallel, read-only; an
    unreachable host stops it before anything is written), the cells a host cannot run skipped
    with the reason, randomized with a recorded seed, grouped by boot config so each host
    reboots as few times as the matrix allows, repetitions interleaved. Without --dry-run:
    create the campaign in the database and run it (one run at a time per host, hosts in
    parallel, every step journaled; `bench resume` continues it after any crash)."""
    from bench.matrix.load import load_matrix

    names = [x.strip() for x in hosts.split(",") if x.strip()] if hosts else None
    drawn = seed is None
    if seed is None:
        seed = secrets.randbelow(1_000_000)
    # a signal anywhere in it says what it leaves (run_live handles the run itself)
    with signals_raise():
        try:
            if not dry_run:     # a --db it would refuse, refused before the hosts are probed
                from bench.store.db import check_database
                check_database(db)
            sel, hf = _preflight(matrix, scale, names, hosts_dir, data_dir, dry_run, facts_file,
                                 facts_max_age, json_out)
            if not dry_run and campaign is None:
                campaign = (f"{load_matrix(matrix).name}{'-' + scale if scale else ''}-s{seed}-"
                            + _time.strftime("%Y%m%dT%H%M%S", _time.gmtime()))
            measured = measured_estimates(db, [h.name for h in sel])
            plan, exp, m = build_plan(matrix, names, hosts_dir, seed, campaign, scale, hf.facts,
                                      measured)
            _refuse_empty(plan, exp, m)
            if not dry_run and m.engine is not None:   # the built-in engine needs its extra
                from bench.execute.campaign.engine_runs import check_builtin
                check_builtin(m.engine)
            if drawn and not json_out:  # after the checks, so an error is the first thing said
                views.say(f"seed {seed}")
            if not dry_run:
                from bench.execute.campaign.record import Settings
                from bench.hosts.inventory import find_hosts_dir
                # the inventory the plan was made from, absolute, so `bench resume` from another
                # directory (or with another $BENCH_HOSTS) drives the same hosts
                s = Settings(threads=threads, retries=retries, data_dir=data_dir, db_url=db,
                             hosts_dir=find_hosts_dir(hosts_dir).path.absolute(),
                             reconnect_timeout_s=reconnect_timeout,
                             passes=int(m.workload.get("passes") or 2))
                _create_and_run(plan, exp, m, [h.name for h in sel], s, str(matrix), hf, json_out)
                return
            if json_out:
                views.emit_json({"matrix": m.name, "scale": m.scale, "source": m.source,
                                 "workload": m.workload,
                                 **plan.as_dict(), "skipped": exp.as_dict()["skipped"],
                                 "warnings": exp.warnings, "facts": hf.as_dict()})
            else:
                print(plan_views.plan_text(m.as_dict(), plan.as_dict(), exp.as_dict()), end="")
        except Interrupted as sig:
            _interrupted_outside_run(None if dry_run else campaign, sig, db)


def run_live(cid: str, db_url: str | None, make_executor, json_out: bool) -> dict:
    """Run an executor (make_executor(store) -> object with run()) in a thread while the main
    thread shows the live view (plain lines without a terminal); returns its result."""

    from bench.execute.campaign.watch import progress
    from bench.store.campaigns import journal_rows
    from bench.store.db import open_store
    store = open_store(db_url)
    # the view reads through a reader of its own: a writer's SQLite transactions begin with
    # the write lock, so its reads queued behind 64 hosts' writes (3.6 s a refresh)
    reader = open_store(db_url, write=False)
    out: dict = {}

    def work():
        try:
            out["result"] = make_executor(store).run()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            out["error"] = exc
    th = threading.Thread(target=work, name="executor", daemon=True)
    try:
        with signals_raise():
            try:
                th.start()
                if not json_out:
                    campaign_views.campaign_live(
                        lambda: progress(reader, cid), lambda: not th.is_alive(),
                        journal=lambda after: journal_rows(reader, cid, after))
                th.join()
            except Interrupted as sig:
                _interrupted(store, cid, sig, db_url)
        if "error" in out:
            raise out["error"]
        if json_out:
            out["progress"] = progress(reader, cid)
        return out
    finally:
        reader.close()
        store.close()


def _create_and_run(plan, exp, m, host_names: list[str], s, matrix_ref: str, hf,
                    json_out: bool) -> None:
    from bench.execute.campaign.record import create
    from bench.store.db import open_store
    store = open_store(s.db_url)
    try:
        cid = create(store, plan, exp, m, host_names, s, matrix_ref, preflight=hf)
    finally:
        store.close()
    if not json_out:
        views.say(f"campaign {cid}: {len(plan.runs)} runs on {', '.join(host_names)}, "
                  f"{plan.reboots} reboots, estimate {views.duration(plan.estimate_s)} "
                  f"({plan_views.estimates_text(plan.as_dict()['estimates'])})"
                  + (f", {len(exp.skipped)} cells skipped" if exp.skipped else ""))
    _execute(cid, s, json_out)


def _interrupted_outside_run(cid: str | None, sig: Interrupted,
                             db_url: str | None) -> NoReturn:
    """A signal while `bench schedule` probed, planned or created the campaign `cid` (None:
    a dry run, or before its id), or after its controller ended: once the campaign's record
    is written it is an interrupted campaign like any other; before, nothing is left to
    resume."""
    if cid is not None:
        from bench.store.campaigns import journal_rows
        from bench.store.db import StoreError, open_store
        try:
            store = open_store(db_url, write=False)
        except StoreError:          # no database yet: nothing was created
            store = None
        if store is not None:
            try:
                planned = bool(journal_rows(store, cid, kinds=("plan",)))
            finally:
                store.close()
            if planned:
                store = open_store(db_url)
                try:
                    _interrupted(store, cid, sig, db_url)
                finally:
                    store.close()
    views.err_console.print(compose(("interrupted:", "bold yellow"), " before a campaign was "
                                    "created; nothing to resume"), soft_wrap=True)
    raise typer.Exit(sig.exit_code)


def _interrupted(store, cid: str, sig: Interrupted, db_url: str | None) -> NoReturn:
    """A signal ended this controller (bench.cli.interrupt): the campaign recorded
    `interrupted` and its lock released (unless another live controller drives it), one line
    saying how to go on, and the signal's exit code."""
    from bench.execute.campaign.watch import STALE_S
    from bench.store.campaigns import mark_interrupted
    from bench.store.controller_lock import live_holder, owner_info, release_lock
    me = owner_info()
    holder = live_holder(store, cid, STALE_S)
    if holder is not None and holder.get("pid") != me["pid"]:
        views.err_console.print(compose(
            ("interrupted:", "bold yellow"), f" campaign {cid} is driven by pid "
            f"{holder.get('pid')} on {holder.get('host')}, not by this process; nothing "
            "recorded"), soft_wrap=True)
        raise typer.Exit(sig.exit_code)
    state = mark_interrupted(store, cid, f"{sig.name} to controller pid {me['pid']}")
    release_lock(store, cid, me)
    resume = f"bench resume {cid}" + (f" --db {db_url}" if db_url else "")
    views.err_console.print(compose(
        ("interrupted:", "bold yellow"), f" campaign {cid}; {resume} goes on"
        if state == "interrupted" else f" campaign {cid} had finished ({state})"),
        soft_wrap=True)
    raise typer.Exit(sig.exit_code)


def _execute(cid: str, settings, json_out: bool) -> None:
    from bench.execute.campaign.executor import Executor
    out = run_live(cid, settings.db_url,
                   lambda store: Executor(store, cid, settings), json_out)
    res = out["result"]
    if json_out:
        views.emit_json(out["progress"] | {"outcome": res.counts, "summary": res.summary})
    else:
        views.say(f"campaign {cid}: {res.state}: {res.summary}")
        views.say(f"report: bench report {cid}"
                  + (f" --db {settings.db_url}" if settings.db_url else ""))
    if res.state != "done" or res.counts.get("failed"):
        raise typer.Exit(1)


CampaignArg = Annotated[Optional[str], typer.Argument(
    help="Campaign id (default: the newest unfinished campaign no live controller drives).",
    callback=id_text("CAMPAIGN", "campaign id"))]


def resume_cmd(campaign: CampaignArg = None, db: DbOpt = None, data_dir: DataDirOpt = None,
               hosts_dir: HostsDirOpt = None, threads: Annotated[Optional[int], typer.Option(
                   "--threads", help="Agent threads (default: the campaign's).")] = None,
               retries: Annotated[Optional[int], typer.Option(
                   "--retries", help="Infrastructure retries per run (default: the "
                   "campaign's).")] = None,
               reconnect_timeout: ReconnectOpt = None, json_out: JsonOpt = False) -> None:
    """Continue a campaign after the controller died at any point: finished runs are kept,
    running ones re-attached by run id and collected, the rest started; nothing is repeated."""
    from bench.execute.campaign.record import Settings, load_record
    from bench.store.db import open_store
    store = open_store(db)
    try:
        cid = campaign or _newest_unfinished(store)
        rec = load_record(store, cid)
    finally:
        store.close()
    s = Settings.from_record(rec, threads=threads, retries=retries, data_dir=data_dir,
                             hosts_dir=hosts_dir, reconnect_timeout_s=reconnect_timeout)
    s.db_url = db
    _execute(cid, s, json_out)


def _newest_unfinished(store) -> str:
    """A bare `bench resume`: the newest campaign not hidden that is unfinished (any state but
    done) and that no live controller drives, said on stderr; none is an error."""
    from bench.execute.campaign.watch import STALE_S
    from bench.store.campaigns import latest_campaign, unfinished_campaigns
    from bench.store.controller_lock import live_holder
    from bench.store.db import StoreError
    driven = []
    for c in unfinished_campaigns(store):
        holder = live_holder(store, c.id, STALE_S)
        if holder is None:
            views.say(f"resuming campaign {c.id} ({c.state}): the newest unfinished campaign")
            return c.id
        driven.append(f"{c.id} (pid {holder.get('pid')} on {holder.get('host')})")
    if latest_campaign(store) is None and not driven:
        raise StoreError("no campaign in the database", hint="start one with "
                         "`bench schedule --matrix NAME --hosts a,b`")
    raise StoreError("no unfinished campaign to resume" + (
        f": the unfinished ones are driven by live controllers: {', '.join(driven)}"
        if driven else ": every campaign is done"),
        hint="`bench campaigns` lists them; `bench resume ID` resumes one by id")


def register(app: typer.Typer) -> None:
    app.command("schedule")(schedule_cmd)
    app.command("resume")(resume_cmd)
