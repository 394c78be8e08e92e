"""`bench hosts pools HOST [--rm KEY]`: the expert pools a host keeps, one per shape and seed
under its pool_dir (`<pool_dir>/<L>x<E>x<S>-s<seed>/`), listed and removed through the host
runner (`runner.py pools`, `runner.py pool-rm`; agents/hostrunner/poolstore.py). Removal holds
the host lock (one controller at a time, bench/hosts/lock.py) and the host refuses a pool a
live run reads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bench.cli.options import HostNameArg, HostsDirOpt, JsonOpt
from bench.results import views
from bench.results.views import LiteralTable, styled


def _gb(v: object) -> str:
    return "-" if not isinstance(v, int) else f"{v / 1e9:.3f} GB"


def pools_table(host: str, res: dict) -> LiteralTable:
    """One row per pool (its key says its shape and seed: <layers>x<experts>x<bytes>-s<seed>)."""
    t = LiteralTable(title=f"Pools of {host} under {res['root']}")
    for col in ("key", "state", "size", "on disk", "files", "in use by"):
        t.add_column(col)
    for p in res["pools"]:
        state = p.get("state", "?")
        t.add_row(p["key"], state if state == "complete" else styled(state, "yellow"),
                  _gb(p.get("bytes")), _gb(p.get("disk_bytes")), str(p.get("files", "-")),
                  ", ".join(p.get("in_use") or []) or "-")
    return t


def pool_notes(res: dict) -> list[str]:
    """A line for each pool that needs a word: old layout, no digests, why partial."""
    out = []
    for p in res["pools"]:
        notes = [p["reason"]] if p.get("reason") else []
        if p.get("layout") == "old":
            notes.append(f"old layout (right in {res['root']}): moved into its keyed "
                         "directory by the next run that uses it")
        if p.get("state") == "complete" and p.get("sums") is False:
            notes.append("no sampled digests (written before bench kept them): `bench pool "
                         "check` cannot verify its content")
        out += [f"{p['key']}: {n}" for n in notes]
    return out


def hosts_pools(host: HostNameArg,
                rm: Annotated[Optional[str], typer.Option(
                    "--rm", metavar="KEY", help="Remove the pool KEY (as listed, e.g. "
                    "92x896x17550000-s0); refused while another controller holds the host or "
                    "a run reads the pool.")] = None,
                hosts_dir: HostsDirOpt = None, json_out: JsonOpt = False) -> None:
    """List the expert pools on a host (shape, seed, state complete or partial, size, disk
    use, runs reading them), or remove one with --rm KEY."""
    from bench.execute.staging import check_pool_key, host_pools, remove_host_pool
    from bench.hosts.inventory import load_inventory, select
    from bench.hosts.lock import HostLock
    from bench.hosts.ssh import transport_for
    (h,) = select(load_inventory(Path(hosts_dir) if hosts_dir else None), [host])
    if rm is not None:
        check_pool_key(rm)
    t = transport_for(h)
    try:
        if rm is not None:
            with HostLock(t, h, purpose=f"bench hosts pools --rm {rm}"):
                res = remove_host_pool(t, h, rm)
        else:
            res = host_pools(t, h)
    finally:
        t.close()
    if json_out:
        views.emit_json(res)
    elif rm is not None:
        views.say(f"{h.name}: removed pool {res['key']} ({res['dir']}, "
                  f"{_gb(res.get('disk_bytes'))} on disk)")
    else:
        views.print_table(pools_table(h.name, res))
        for line in pool_notes(res):
            views.say(line)
        if res.get("note"):
            views.say(f"{h.name}: {res['note']}")


def register(hosts_app: typer.Typer) -> None:
    hosts_app.command("pools")(hosts_pools)
