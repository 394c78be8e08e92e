"""`bench run`: one cell on one or more hosts, end to end, through the host-run layer.

Per host (`run_hosts` does every host in parallel, one dead host stopping nothing):

1. preflight, read-only (`preflight`): probe the host, build and check its spec
   (bench.matrix.runspec); an InputError/SafetyError on any host stops the command before any
   host is written to; then (`execute`) take the controller's host lock (bench.hosts.lock) for
   the set-up steps 2-5;
2. deploy the agent when it is not current (bench.hosts.deploy);
3. put the plan to `<work_dir>/plans/<sha256>.bin` and 4. make sure the pool exists with the
   plan's geometry (bench.execute.staging);
5. put spec.json and start the runner; release the lock (the runner holds its own host lock
   and run lock from here on);
6. wait with re-attach (bench.execute.hostrun.wait_run): a host unreachable longer than its
   reconnect timeout is reported `quarantined` with the reason; the run continues host-side
   and `bench hosts collect HOST RUN_ID` picks it up later;
7. collect and verify the bundle, 8. optionally ingest it (bench.execute.collect).

Results are `HostRunResult`s carrying errors as data; `as_dict()` is the `--json` shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.errors import BenchError, HostError, InputError, SafetyError, error_data
from bench.execute.collect import collect, figures, ingest
from bench.execute.hostrun import (HostSession, Quarantined, now_iso, runner_status, start_run,
                                   wait_run)
from bench.execute.staging import ensure_file, ensure_hints, ensure_pool
from bench.hosts.deploy import REPO, deploy, source_hash
from bench.hosts.facts import probe_for_run, run_parallel
from bench.hosts.inventory import Host
from bench.hosts.lock import HostLock
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import Transport
from bench.matrix.cells import Cell, parse_cell
from bench.matrix.expand import balloon_lock_problem
from bench.matrix.runspec import RunOptions, build_spec, check_run_id
from bench.paths import default_data_dir
from bench.plan.planinfo import PlanInfo
from bench.units import parse_size

TransportFor = Callable[[Host], Transport]
# reached stages add these (the --json shape shows only what was reached)
_STAGE_KEYS = ("preflight_s", "deploy", "plan", "pool", "runner", "collect")


@dataclass
class HostRunResult:
    """One host's run: how far it got (`stage`, the last one entered), and what it left."""
    host: str
    run_id: str
    cell: str
    ok: bool = False
    stage: str = "preflight"
    quarantined: bool = False
    quarantine_reason: str | None = None
    error: dict | None = None
    status: dict | None = None          # the runner's final status.json
    bundle: str | None = None
    figures: dict | None = None
    ingest: dict | None = None
    reconnects: int = 0
    events: list[dict] = field(default_factory=list)    # lost / reattached, with times
    timings: dict[str, float] = field(default_factory=dict)   # stage -> seconds at its end
    seconds: float = 0.0
    preflight_s: float | None = None
    deploy: str | None = None
    plan: str | None = None
    pool: dict | None = None
    runner: dict | None = None
    collect: dict | None = None

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for k in _STAGE_KEYS:
            if d[k] is None:
                del d[k]
        return d


@dataclass
class Preflight:
    facts: dict
    spec: dict


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


def preflight(host: Host, cell: Cell, plan: PlanInfo, run_id: str, options: RunOptions,
              t: Transport, known: dict | None = None) -> Preflight:
    """Read-only: probe what a run reads of the host (bench.hosts.facts.probe_for_run;
    `known`: its facts from an earlier preflight, reused within the same boot) and build its
    spec (InputError/SafetyError when the cell does not fit it, a balloon that would lock
    more than options.balloon_max_bytes included)."""
    pr = probe_for_run(t, host, known)
    if pr.error:
        raise pr.exception or HostError(host.name, pr.error["message"])
    facts = pr.facts
    if not facts.get("python3"):
        raise HostError(host.name, "python3 with its standard library is not installed (the "
                        "runner needs json, hashlib, fcntl, subprocess)",
                        "install python3 (>= 3.8; Debian's python3-minimal is not enough)")
    opts = replace(options, source_sha256=source_hash(REPO / "native"), created=now_iso())
    spec = build_spec(cell, host, plan, run_id=run_id, facts=facts, options=opts)
    if cell.mechanism == "balloon":
        why = balloon_lock_problem(cell.capacity_bytes, facts.get("mem_available_bytes"),
                                   options.balloon_max_bytes, "the balloon cap")
        if why is not None:
            raise InputError(f"{host.name}: {cell.name}: {why}",
                             hint="raise the cap (bench run --balloon-max, a matrix's "
                                  "protocol.balloon_max) or choose a larger C")
    return Preflight(facts, spec)


def execute(host: Host, spec: dict, plan: PlanInfo, plan_path: Path, session: HostSession,
            res: HostRunResult, *, data_dir: Path | None = None, db_url: str | None = None,
            do_ingest: bool = True, timeout_s: float = 6 * 3600.0,
            chunk_s: float = 20.0) -> HostRunResult:
    """Deploy, plan, pool, start, wait (re-attach), collect, ingest; never raises."""
    data_dir = Path(data_dir or default_data_dir())
    run_id = spec["run_id"]
    t0 = time.monotonic()

    def mark(stage: str) -> None:
        res.timings[res.stage] = round(time.monotonic() - t0, 3)
        res.stage = stage

    try:
        res.stage = "lock"
        t = session.transport
        with HostLock(t, host, purpose=f"bench run {run_id}"):
            mark("deploy")
            res.deploy = deploy(t, host)["status"]
            mark("plan")
            res.plan = ensure_file(t, plan_path, f"{host.work_dir}/{plan.remote_path}",
                                   plan.sha256)
            ensure_hints(t, host, plan, plan_path)
            mark("pool")
            res.pool = ensure_pool(t, host, plan.geometry)
            mark("start")
            started = start_run(t, host, spec)
            res.runner = {k: started.get(k) for k in ("state", "pid", "bundle")}
        mark("wait")
        res.status = wait_run(session, run_id, timeout_s=timeout_s, chunk_s=chunk_s)
        res.reconnects = session.reconnects
        mark("collect")
        res.collect = collect(session.transport, host, run_id, data_dir)
        res.bundle = res.collect["bundle"]
        res.figures = figures(Path(res.bundle))
        if do_ingest:
            mark("ingest")
            res.ingest = ingest(db_url, Path(res.bundle), plan_path)
        mark("done")
        res.ok = bool(res.status.get("ok"))
        if not res.ok:
            res.error = {"type": "RunFailed", "message": f"{host.name}: run {run_id} failed "
                         f"host-side: {res.status.get('reason')}", "hint":
                         f"see {res.bundle}/runner.log"}
    except Quarantined as exc:
        res.quarantined = True
        res.quarantine_reason = exc.message
        res.error = error_data(exc, output=2000)
    except Exception as exc:  # noqa: BLE001 - one host's failure is data
        res.error = error_data(exc, output=2000)
    finally:
        session.close()
        res.seconds = round((res.preflight_s or 0.0) + time.monotonic() - t0, 3)
    return res


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
              reconnect_timeout_s: float | None = None, **kw: Any) -> list[HostRunResult]:
    """One cell on every host in parallel, results in the hosts' order.

    Bad input touches no host: the cell, the run id and the inventory limits are checked
    first (pure), then every host is probed (read-only) and its spec built; an InputError or
    SafetyError for any host (capacity above its MemTotal, an MGLRU cell on a kernel without
    it...) raises before anything is written anywhere. An unreachable host is an error in its
    result, the others go on."""
    transport_for = transport_for or ssh_transport_for
    options = options or RunOptions()
    cell = parse_cell(cell) if isinstance(cell, str) else cell
    hosts = list(hosts)
    ids = host_run_ids(run_id, [h.name for h in hosts])
    for h in hosts:
        build_spec(cell, h, plan, run_id=ids[h.name], facts=None, options=options)

    def pre(h: Host) -> tuple[HostRunResult, Preflight | BenchError | None, HostSession]:
        res = HostRunResult(h.name, ids[h.name], cell.name)
        session = HostSession(h, transport_for, reconnect_timeout_s=reconnect_timeout_s,
                              events=res.events)
        t0 = time.monotonic()
        try:
            return res, preflight(h, cell, plan, ids[h.name], options, session.transport), \
                session
        except (InputError, SafetyError) as exc:
            session.close()
            return res, exc, session
        except Exception as exc:  # noqa: BLE001 - one host's failure is data
            session.close()
            res.error = error_data(exc, output=2000)
            return res, None, session
        finally:
            res.preflight_s = round(time.monotonic() - t0, 3)

    pres = run_parallel(hosts, pre)
    bad = [p[1] for p in pres if isinstance(p[1], BenchError)]
    if bad:
        for _res, _pf, session in pres:
            session.close()
        raise bad[0]

    def one(i: int) -> HostRunResult:
        res, pf, session = pres[i]
        if not isinstance(pf, Preflight):
            res.seconds = res.preflight_s or 0.0
            return res
        return execute(hosts[i], pf.spec, plan, plan_path, session, res, **kw)

    return run_parallel(list(range(len(hosts))), one)


def collect_run(host: Host, run_id: str, *, transport_for: TransportFor | None = None,
                data_dir: Path | None = None) -> dict:
    """`bench hosts collect`: the runner's status, then the bundle if the run ended."""
    transport_for = transport_for or ssh_transport_for
    check_run_id(run_id)
    t = transport_for(host)
    try:
        st = runner_status(t, host, run_id)
        if st is None:
            raise HostError(host.name, f"no run {run_id} in {host.work_dir}/runs",
                            "check the run id (`ls runs/` in the host's work_dir)")
        if st.get("phase") not in ("done", "failed"):
            return {"host": host.name, "run_id": run_id, "status": st, "bundle": None,
                    "collected": False, "figures": None}
        c = collect(t, host, run_id, Path(data_dir or default_data_dir()))
        return {"host": host.name, "run_id": run_id, "status": st, "bundle": c["bundle"],
                "collected": True, "figures": figures(Path(c["bundle"]))}
    finally:
        t.close()
