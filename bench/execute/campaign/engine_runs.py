"""Engine runs inside a campaign (docs/engine.md): the spec of one end-to-end engine run from
the campaign record (the matrix's [engine] table and the run's place in its balanced pair, both
journaled at planning time so a resume needs no matrix file). The worker starts it like any
run, except that no plan or pool is shipped (the engine loads its own model; {pool_dir} is the
host's pool directory as the inventory names it); the host-side runner refuses the spec (a bad
spec, naming the fix) when the engine command is not an executable there."""

from __future__ import annotations

import time

from bench.errors import InputError
from bench.hosts.inventory import Host
from bench.matrix import engine_cells as engine   # only the import changed with the rename


def spec_for(rec: dict, rid: str, cell: str, host: Host, *, created: str | None = None) -> dict:
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
