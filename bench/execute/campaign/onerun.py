"""`bench run`: one cell on one or more hosts as a one-run campaign (one run per host, hosts in
parallel), driven by the campaign executor like any campaign: the worker's run preflight,
deploy, staging, start, wait with re-attach, collect, ingest and recovery ladder
(bench.execute.campaign.worker). There is no other orchestration of a run.

1. Pure checks (cell, run ids, inventory limits), then every host's run preflight in parallel
   (bench.execute.campaign.preflight.run_spec, read-only): an InputError/SafetyError on any
   host stops the command before anything is written anywhere, the store included; a host
   that cannot be probed is an error in its result and the others go on.
2. The campaign is written to the store: its id is the run id (or options.campaign, a
   campaign of `bench run`s or one made by hand, which the runs join), its matrix `bench run`
   (how `bench campaigns` tells it apart), its record the run options, the plans made from
   the trace and --hints, and each run's boot: the host's current one (never a reboot).
3. The executor runs it without retries (a failed run is reported, as `bench run` always
   did); a host lost past its patience goes up the ladder, then is quarantined with its run
   `pending`: `bench resume CAMPAIGN` re-attaches to it.
4. Each host's result is read back from the store: the run's states and what the worker
   journaled with them (deploy, plan, pool, reconnects, the ingest's verdict).

Results are `HostRunResult`s carrying errors as data; `as_dict()` is the `--json` shape."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.errors import BenchError, InputError, SafetyError, error_data
from bench.execute.campaign.executor import CampaignResult, Executor
from bench.execute.campaign.preflight import run_spec
from bench.execute.campaign.record import (Settings, ensure_runs, load_record, plans_record)
from bench.execute.collect import figures
from bench.hosts.facts import run_parallel
from bench.hosts.inventory import Host
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import Transport
from bench.matrix.cells import Cell, parse_cell
from bench.matrix.runspec import RunOptions, build_spec, check_run_id
from bench.paths import default_data_dir
from bench.plan.planinfo import PlanInfo
from bench.store.campaigns import campaign_row, create_campaign, journal, journal_rows, run_rows
from bench.store.db import Store, StoreError, open_store
from bench.units import parse_size

TransportFor = Callable[[Host], Transport]
MATRIX = "bench run"        # the matrix name of a campaign `bench run` made
# reached steps add these (the --json shape shows only what was reached)
_STEP_KEYS = ("preflight_s", "deploy", "plan", "pool")
# the run options set for each run when it starts (Executor.run_options, preflight.run_spec),
# not kept in the record: a resume by a newer controller records itself
_PER_RUN = ("campaign", "position", "repetition", "controller_version", "created",
            "source_sha256")


@dataclass
class HostRunResult:
    """One host's run: how far it got (`stage`: its last state, `preflight` when the run
    preflight failed), and what it left."""
    host: str
    run_id: str
    cell: str
    campaign: str | None = None
    ok: bool = False
    stage: str = "preflight"
    quarantined: bool = False
    quarantine_reason: str | None = None
    error: dict | None = None
    status: dict | None = None          # the runner's final status.json (from the bundle)
    bundle: str | None = None
    figures: dict | None = None
    ingest: dict | None = None
    reconnects: int = 0
    events: list[dict] = field(default_factory=list)    # lost / reattached, with times
    timings: dict[str, float] = field(default_factory=dict)   # state -> seconds when entered
    seconds: float = 0.0
    preflight_s: float | None = None
    deploy: str | None = None
    plan: str | None = None
    pool: dict | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in _STEP_KEYS:
            if d[k] is None:
                del d[k]
        return d


def with_protocol(options: RunOptions, cell: Cell, cgroup_headroom: str | None = None,
                  balloon_max: str | None = None) -> RunOptions:
    """The options with the protocol a matrix's [protocol] sets, given for one cell on the
    command line (`bench run --cgroup-headroom 16Mi --balloon-max 2G`): bench sizes
    (bench.units: `16Mi` binary, `2G` = 2 x 10^9 bytes, bytes), recorded in the spec
    (cgroup_headroom_bytes, balloon_max_bytes). An option the cell's mechanism does not use is
    an InputError (it would be recorded and do nothing)."""
    for text, opt, mech, what in (
            (cgroup_headroom, "--cgroup-headroom", "cgroup", "memory.max = C + headroom"),
            (balloon_max, "--balloon-max", "balloon", "the cap on what its balloon locks")):
        if text is not None and cell.mechanism != mech:
            raise InputError(f"{opt} applies to {mech} cells ({what}); {cell.name} is a "
                             f"{cell.mechanism} cell", hint=f"drop {opt}")
    if cgroup_headroom is not None:
        options = replace(options, cgroup_headroom_bytes=parse_size(cgroup_headroom,
                                                                    "--cgroup-headroom"))
    if balloon_max is not None:
        options = replace(options, balloon_max_bytes=parse_size(balloon_max, "--balloon-max"))
    return options


def host_run_ids(run_id: str, names: list[str]) -> dict[str, str]:
    """The run id on each host: the id itself for one host, `<id>-<host>` for several (run ids
    are unique in the store)."""
    check_run_id(run_id)
    if not names:
        raise InputError("no host given", "pass --host HOST[,HOST...]")
    if len(set(names)) != len(names):
        raise InputError(f"host listed twice: {', '.join(names)}", "name each host once")
    ids = {n: run_id if len(names) == 1 else f"{run_id}-{n}" for n in names}
    for rid in ids.values():
        if len(rid) > 64:
            raise InputError(f"run id {rid!r} is longer than 64 characters",
                             "choose a shorter --run-id (the host name is appended when "
                             "several hosts run)")
        check_run_id(rid)
    return ids


def run_hosts(hosts: Sequence[Host], cell: Cell | str, plan: PlanInfo, plan_path: Path,
              run_id: str, *, options: RunOptions | None = None,
              transport_for: TransportFor | None = None,
              reconnect_timeout_s: float | None = None, data_dir: Path | None = None,
              db_url: str | None = None, do_ingest: bool = True, hosts_dir: Path | None = None,
              timeout_s: float = 6 * 3600.0, chunk_s: float = 20.0) -> list[HostRunResult]:
    """One cell on every host in parallel as a one-run campaign (module doc), results in the
    hosts' order. `plan` may carry the cell's hint plan (bench.matrix.hintplans); hosts_dir:
    the inventory the hosts came from, recorded for `bench resume`."""
    t0 = time.time()
    transport_for = transport_for or ssh_transport_for
    options = options or RunOptions()
    cell = parse_cell(cell) if isinstance(cell, str) else cell
    hosts = list(hosts)
    ids = host_run_ids(run_id, [h.name for h in hosts])
    for h in hosts:
        build_spec(cell, h, plan, run_id=ids[h.name], facts=None, options=options)
    results = {h.name: HostRunResult(h.name, ids[h.name], cell.name) for h in hosts}
    facts = _preflight(hosts, cell, plan, ids, options, transport_for, results)
    live = [h for h in hosts if h.name in facts]
    if live:
        cid = options.campaign or run_id
        s = Settings(retries=0, data_dir=Path(data_dir or default_data_dir()), db_url=db_url,
                     hosts_dir=hosts_dir,
                     reconnect_timeout_s=reconnect_timeout_s, chunk_s=chunk_s,
                     run_timeout_s=timeout_s, ingest=do_ingest,
                     host_lock_wait_s=0.0)      # a host another controller holds: refused
        hinted = {cell.hints: plan} if cell.hints and plan.hints_sha256 else {}
        base = replace(plan, hints_sha256=None, hints_provenance=None)
        store = open_store(db_url)
        try:
            rec = _create(store, cid, cell, live, ids, options, s,
                          plans_record(base, plan_path, hinted))
            ex = Executor(store, cid, s, transport_for=transport_for,
                          inventory={h.name: h for h in live}, record=rec)
            for h in live:      # the preflight's facts: boot-fixed ones are not probed again
                ex.workers[h.name].facts = facts[h.name]
            done = ex.run()
            for h in live:
                _read_back(store, done, results[h.name], t0)
        finally:
            store.close()
    for r in results.values():
        r.seconds = round(time.time() - t0, 3)
    return [results[h.name] for h in hosts]


def _preflight(hosts: list[Host], cell: Cell, plan: PlanInfo, ids: dict[str, str],
               options: RunOptions, transport_for: TransportFor,
               results: dict[str, HostRunResult]) -> dict[str, dict]:
    """Every host's run preflight, in parallel: host -> facts. The first InputError or
    SafetyError is raised once every probe has ended; another failure is its host's error."""
    def pre(h: Host) -> dict | BenchError | None:
        t0 = time.monotonic()
        res = results[h.name]
        try:
            t = transport_for(h)
            try:
                return run_spec(h, cell, plan, ids[h.name], options, t).facts
            finally:
                t.close()
        except (InputError, SafetyError) as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - one host's failure is data
            res.error = error_data(exc, output=2000)
            return None
        finally:
            res.preflight_s = round(time.monotonic() - t0, 3)

    got = run_parallel(hosts, pre)
    bad = [g for g in got if isinstance(g, BenchError)]
    if bad:
        raise bad[0]
    return {h.name: g for h, g in zip(hosts, got) if isinstance(g, dict)}


def _create(store: Store, cid: str, cell: Cell, hosts: list[Host], ids: dict[str, str],
            options: RunOptions, s: Settings, plans: dict) -> dict:
    """The campaign (made, or joined: module doc) with this call's record and runs; returns
    the record the executor runs (its runs: every run the campaign has, so that one left
    pending by an earlier call is known too)."""
    row = campaign_row(store, cid)
    if row is None:
        create_campaign(store, cid, matrix=MATRIX, workload={"trace": plans["plan"]["trace"]},
                        note="made by `bench run`")
    else:
        have = journal_rows(store, cid, kinds=("plan",))
        if have and not (have[0].data or {}).get("options"):
            raise InputError(f"campaign {cid} was scheduled from a matrix: `bench run` adds no "
                             "run to it", hint="`bench resume` it, or choose another --run-id")
        taken = {r.run_id for r in run_rows(store, cid)} & set(ids.values())
        if taken:
            raise StoreError(f"run {sorted(taken)[0]} exists in campaign {cid}",
                             hint="choose another --run-id")
    boot = {"label": "current"}
    runs = {ids[h.name]: {"host": h.name, "cell": cell.name, "point": 0, "rep": 0,
                          "position": i, "boot": boot, "estimate_s": None,
                          "candidates": [{"host": h.name, "cell": cell.name, "boot": boot}],
                          "placement": "each"} for i, h in enumerate(hosts)}
    rec = {"campaign": cid, "matrix": MATRIX, "hosts": [h.name for h in hosts],
           "workload": {"trace": plans["plan"]["trace"]}, "settings": s.as_dict(),
           "options": {k: v for k, v in asdict(options).items() if k not in _PER_RUN},
           "plans": plans, "runs": runs, "order": list(runs)}
    journal(store, "plan", f"bench run: {cell.name} on {', '.join(rec['hosts'])}",
            campaign_id=cid, data=json.loads(json.dumps(rec, default=str)))
    ensure_runs(store, cid, rec)
    return rec | {"runs": load_record(store, cid)["runs"]}


def _read_back(store: Store, done: CampaignResult, res: HostRunResult, t0: float) -> None:
    """A host's result from its run's row and journal (module doc)."""
    res.campaign = done.campaign
    row = next(r for r in done.runs if r.run_id == res.run_id)
    res.stage = row.state
    last: dict[str, dict] = {}
    for j in journal_rows(store, done.campaign, kinds=("state",)):
        if j.run_ref == row.ref:
            last[str(j.get("to"))] = (j.data or {}) | {"message": j.message}
            when = datetime.fromisoformat(j.t).timestamp()
            res.timings[str(j.get("to"))] = round(when - t0, 3)
    staged = last.get("deployed") or {}
    res.deploy, res.plan, res.pool = staged.get("deploy"), staged.get("plan"), staged.get("pool")
    got = last.get("collected") or {}
    res.events, res.reconnects = got.get("events") or [], got.get("reconnects") or 0
    if got.get("bundle"):
        res.bundle = got["bundle"]
        res.status = json.loads((Path(res.bundle) / "status.json").read_text())
        res.figures = figures(Path(res.bundle))
    verdict = last.get("validated") or last.get("rejected")
    if verdict is not None:
        res.ingest = verdict.get("ingest")
    res.ok = bool(got.get("runner_ok")) and row.state in ("collected", "validated", "rejected")
    if res.host in done.quarantined:
        res.quarantined, res.quarantine_reason = True, done.quarantined[res.host]
        res.error = {"type": "Quarantined", "message": res.quarantine_reason,
                     "hint": f"the run goes on host-side: `bench resume {done.campaign}` "
                             f"re-attaches, `bench hosts collect {res.host} {res.run_id}` "
                             "picks up its bundle"}
    elif row.state == "failed":
        f = last["failed"]
        res.error = {"type": f.get("error") or "RunFailed", "message": f["message"],
                     "hint": f.get("hint")}
    elif got and not got.get("runner_ok"):
        res.error = {"type": "RunFailed", "message": f"{res.host}: run {res.run_id} failed "
                     f"host-side: {got.get('runner_reason')}",
                     "hint": f"see {res.bundle}/runner.log"}
    elif not res.ok:
        res.error = {"type": "Incomplete", "message": f"{res.host}: run {res.run_id} left "
                     f"{row.state}: {done.summary}", "hint": f"`bench resume {done.campaign}`"}
