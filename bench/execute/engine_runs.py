"""Engine runs inside a campaign (bench.execute.campaign, docs/engine.md): the spec of one end-to-end
engine run from the campaign record (the matrix's [engine] table and the run's place in its
balanced pair, both journaled at planning time so a resume needs no matrix file), and its start
on the host: the runner is deployed, no plan or pool is shipped (the engine loads its own
model; {pool_dir} is the host's pool directory as the inventory names it), the spec goes to the
host-side runner, which refuses it (a bad spec, naming the fix) when the engine command is not
an executable there."""

from __future__ import annotations

import time

from bench.matrix import engine
from bench.errors import InputError


def is_engine_campaign(rec: dict) -> bool:
    return bool(rec.get("engine"))


def spec_for(rec: dict, rid: str, cell: str, host, *, created: str | None = None) -> dict:
    """The spec of run `rid` of an engine campaign on `host` (its inventory entry)."""
    run = rec["runs"].get(rid) or {}
    pair = run.get("pair")
    if not pair:
        raise InputError(f"{rid}: the campaign record has no pair for this engine run",
                         hint="re-create the campaign with `bench schedule`")
    cfg = engine.from_dict(rec["engine"], f"campaign {rec.get('campaign')} engine")
    return engine.build_spec(cell, host, cfg, run_id=rid, pair_index=pair["index"],
                             first=pair["order"].removesuffix("-first"), seed=pair["seed"],
                             campaign=rec.get("campaign"), position=run.get("position") or 0,
                             created=created or time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime()))


def deploy_and_start(ex, host: str, rid: str, spec: dict | None) -> dict:
    """bench.execute.campaign.Executor's deploy-and-start step for an engine run: build the spec
    (unless re-starting a stored one), deploy the runner under the host lock, record the
    deployed and running states, start the runner. Returns the spec."""
    from bench.hosts.deploy import deploy
    from bench.execute.hostrun import start_run
    h = ex.hosts[host]
    ex.views[host].phase = "deploying"
    if spec is None:
        spec = spec_for(ex.rec, rid, ex.rows[rid]["cell"], h)
    t = ex.transport_for(h)
    try:
        lock = ex._host_lock(t, h, rid)
        try:
            deploy(t, h)
            if ex.rows[rid]["state"] != "running":
                ex._set(rid, "deployed", "runner ready (engine run: no plan, no pool shipped)")
                ex._set(rid, "running", "starting the runner", spec=spec)
            ex.views[host].phase = "running"
            start_run(t, h, spec)
        finally:
            lock.release()
    finally:
        try:
            t.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass
    return spec
