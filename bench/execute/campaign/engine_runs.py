"""Engine runs inside a campaign (docs/engine.md): the spec of one end-to-end engine run from
the campaign record (the matrix's [engine] table and the run's place in its balanced pair, both
journaled at planning time so a resume needs no matrix file). The worker starts it like any
run, except that no plan or pool is shipped (the engine loads its own model; {pool_dir} is the
host's pool directory as the inventory names it); the host-side runner refuses the spec (a bad
spec, naming the fix) when the engine command is not an executable there. An engine that
runs this controller's own bench ({bench}: the built-in llama.cpp engine) gets its paths here
and runs on the local host only."""

from __future__ import annotations

import os
import shutil
import sys
import time
from importlib import resources
from pathlib import Path

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
    local = controller_paths() if cfg.local_only and host.transport == "local" else None
    cap = (rec.get("protocol") or {}).get("balloon_max")     # what a balloon arm may lock
    return engine.build_spec(cell, host, cfg, run_id=rid, pair_index=pair["index"],
                             first=pair["order"].removesuffix("-first"), seed=pair["seed"],
                             campaign=rec.get("campaign"), position=run.get("position") or 0,
                             created=created or time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime()),
                             controller=local,
                             extra={"balloon_max_bytes": int(cap)} if cap is not None else None)


def check_builtin(cfg: engine.EngineConfig) -> None:
    """Before a campaign of an engine that runs this controller's bench: that bench and its
    engine extra are here (else every run would fail at its prepare); InputError naming the
    install command."""
    if cfg.local_only:
        controller_paths()
        from bench.engine.extra import need
        need("gguf")
        need("llama_cpp")


def controller_paths() -> dict[str, str]:
    """{bench}: the bench executable of this Python (a virtual environment's, beside its
    interpreter), else the one on PATH; {bench_data}: the installed package's data directory."""
    exe = Path(sys.executable).parent / "bench"
    found = str(exe) if os.access(exe, os.X_OK) else shutil.which("bench")
    if found is None:
        raise InputError("cannot find this controller's bench executable (beside "
                         f"{sys.executable} or on PATH) for the engine's {{bench}}",
                         hint="install bench (pip install '.[engine]') and run that bench")
    return {"bench": found, "bench_data": str(resources.files("bench").joinpath("data"))}
