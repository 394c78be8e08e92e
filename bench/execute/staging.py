"""Putting what a run reads onto its host, idempotently: the plan (and hint plan) as
content-addressed files (`<work_dir>/plans/<sha256>.bin`, skipped when a file of that name
already hashes to it) and the pool with the plan's geometry, in its keyed directory
`<pool_dir>/<L>x<E>x<S>-s<seed>/` (bench.plan.pool.pool_path, the path a run's spec names), so
pools of several shapes coexist on a host. `host_pools` and `remove_host_pool` list and remove
them (`bench hosts pools`), through the runner's `pools` and `pool-rm`.

The pool is written on the host by the deployed runner (`runner.py pool`,
agents/hostrunner/poolwriter.py), which shares the format definition with bench.plan.pool
(agents/hostrunner/poolfmt.py): resumable, each file written to a temp name and renamed,
pool.json complete only at the end, a directory holding a different pool (or anything that is
not a pool) refused; a pool of the old layout (right in pool_dir) is moved into its keyed
directory first. It is I/O bound (8 MiB chunks of getrandom bytes, well above a GB/s), so a
1.45 TB pool is device-limited, not writer-limited. Deploy comes first, so the host has it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import CommandFailed, HostError, InputError
from bench.execute.hostrun import last_json, runner_argv
from bench.hosts.inventory import Host
from bench.hosts.transport import Transport
from bench.plan.planinfo import PlanInfo
from bench.plan.prepared import hints_file

if TYPE_CHECKING:
    # the checkout's agents/ is installed as bench.agents (pyproject's package-dir), a mapping
    # a type checker reading the checkout does not follow: it reads the same file as agents.*
    from agents.hostrunner import poolfmt
else:
    from bench.agents.hostrunner import poolfmt


def remote_sha256(t: Transport, path: str) -> str | None:
    r = t.run(["sha256sum", path], timeout=300, check=False)
    return r.stdout.split()[0] if r.rc == 0 and r.stdout.strip() else None


def ensure_file(t: Transport, local: Path, remote: str, sha: str) -> str:
    """Put local to remote unless remote already hashes to sha: 'present' | 'sent'."""
    if remote_sha256(t, remote) == sha:
        return "present"
    t.run(["mkdir", "-p", os.path.dirname(remote)], timeout=30)
    tmp = f"{remote}.tmp"
    t.put(Path(local), tmp)
    if remote_sha256(t, tmp) != sha:
        t.run(["rm", "-f", tmp], timeout=30, check=False)
        raise HostError(t.host, f"{remote}: the copy does not hash to {sha} (transfer damaged)")
    t.run(["mv", "-f", tmp, remote], timeout=30)
    return "sent"


def ensure_hints(t: Transport, host: Host, plan: PlanInfo, plan_path: Path) -> str | None:
    """Put the plan's hint plan (kept beside its replay plan on the controller,
    bench.plan.prepared.hints_file) to `<work_dir>/plans/<sha256>.hints.bin`; None when the
    plan has none."""
    if not plan.hints_sha256 or not plan.hints_remote_path:
        return None
    local = hints_file(Path(plan_path).parent, plan.hints_sha256)
    if not local.is_file():
        raise InputError(f"{local}: the hint plan {plan.hints_sha256[:12]} is not on the "
                         "controller", hint="make it again (bench run --hints, or resume the "
                                            "campaign: it remakes its hint plans)")
    return ensure_file(t, local, f"{host.work_dir}/{plan.hints_remote_path}",
                       plan.hints_sha256)


def ensure_pool(t: Transport, host: Host, geometry: tuple[int, int, int], seed: int = 0,
                timeout: float | None = None) -> dict:
    """Make (or resume, or find) the pool of `geometry` = (layers, experts, expert_bytes) in its
    keyed directory under host.pool_dir (the answer's `dir`). Raises HostError when that
    directory holds something else."""
    layers, experts, size = geometry
    if timeout is None:
        timeout = 120 + layers * experts * size / 50e6   # >= 50 MB/s
    r = t.run(runner_argv(host, "pool", "--root", host.pool_dir, "--layers", str(layers),
                          "--experts", str(experts), "--expert-bytes", str(size),
                          "--seed", str(seed), "--template", poolfmt.DEFAULT_PATH),
              timeout=timeout, check=False)
    res = last_json(r.stdout)
    if res is None or r.rc == 2:
        raise CommandFailed(host.name, ["runner.py", "pool", "--root", host.pool_dir], r.rc,
                            (res or {}).get("reason") or r.stderr or r.stdout)
    if not res.get("ok"):
        raise HostError(host.name, f"pool: {res.get('reason')}",
                        "list the host's pools with `bench hosts pools HOST`; remove one "
                        "with `--rm KEY` if it is no longer needed")
    return res


DEPLOY_HINT = ("the host needs a current runner: `bench hosts deploy HOST` (a runner from "
               "before the pool keys has no `pools` or `pool-rm`)")


def host_pools(t: Transport, host: Host) -> dict:
    """`runner.py pools`: {"root", "pools": [{key, dir, layout, state, layers, ..., bytes,
    disk_bytes, files, in_use}]} of the pools under host.pool_dir."""
    r = t.run(runner_argv(host, "pools", "--root", host.pool_dir), timeout=300, check=False)
    res = last_json(r.stdout)
    if r.rc != 0 or res is None or not isinstance(res.get("pools"), list):
        raise CommandFailed(host.name, ["runner.py", "pools", "--root", host.pool_dir], r.rc,
                            (res or {}).get("reason") or r.stderr or r.stdout, DEPLOY_HINT)
    return res


def check_pool_key(key: str) -> None:
    """InputError unless key names a pool as `runner.py pools` lists it."""
    if poolfmt.parse_key(key) is None:
        raise InputError(f"{key!r} is not a pool key",
                         hint="name one as `bench hosts pools HOST` lists it: "
                              "<layers>x<experts>x<expert_bytes>-s<seed>")


def remove_host_pool(t: Transport, host: Host, key: str) -> dict:
    """`runner.py pool-rm KEY`; the caller holds the host lock. Raises InputError for a string
    that is no pool key, HostError when the host refuses (no such pool, a live run reads it)."""
    check_pool_key(key)
    r = t.run(runner_argv(host, "pool-rm", key, "--root", host.pool_dir), timeout=3600,
              check=False)
    res = last_json(r.stdout)
    if res is None:
        raise CommandFailed(host.name, ["runner.py", "pool-rm", key], r.rc, r.stderr or r.stdout,
                            DEPLOY_HINT)
    if not res.get("ok"):
        raise HostError(host.name, f"pool {key}: {res.get('reason')}",
                        "`bench hosts pools HOST` lists the pools and the runs using them")
    return res


def complete_pool(t: Transport, host: Host) -> tuple[str, tuple[int, int, int]]:
    """A complete pool on the host (the largest, for reading its device): (dir, geometry)."""
    pools = [p for p in host_pools(t, host)["pools"] if p.get("state") == "complete"]
    if not pools:
        raise HostError(host.name, f"no complete pool under {host.pool_dir}",
                        "make one first (a `bench run` makes the pool its plan needs)")
    best = max(pools, key=lambda p: (p["bytes"], p["key"]))
    return best["dir"], (best["layers"], best["experts_per_layer"], best["expert_bytes"])
