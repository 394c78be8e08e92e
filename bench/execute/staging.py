"""Putting what a run reads onto its host, idempotently: the plan (and hint plan) as
content-addressed files (`<work_dir>/plans/<sha256>.bin`, skipped when a file of that name
already hashes to it) and the pool with the plan's geometry.

The pool is written on the host by the deployed runner (`runner.py pool`,
agents/hostrunner/poolwriter.py), which shares the format definition with bench.plan.pool
(agents/hostrunner/poolfmt.py): resumable, each file written to a temp name and renamed,
pool.json complete only at the end, a directory holding a different pool (or anything that is
not a pool) refused. It is I/O bound (8 MiB chunks of getrandom bytes, well above a GB/s), so a
1.45 TB pool is device-limited, not writer-limited. Deploy comes first, so the host has it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import CommandFailed, HostError
from bench.execute.hostrun import last_json, runner_argv
from bench.hosts.inventory import Host
from bench.hosts.transport import Transport

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


def ensure_pool(t: Transport, host: Host, geometry: tuple[int, int, int], seed: int = 0,
                timeout: float | None = None) -> dict:
    """Make (or resume, or find) the pool of `geometry` = (layers, experts, expert_bytes) in
    host.pool_dir. Raises HostError when the directory holds a different pool."""
    layers, experts, size = geometry
    if timeout is None:
        timeout = 120 + layers * experts * size / 50e6   # >= 50 MB/s
    r = t.run(runner_argv(host, "pool", "--dir", host.pool_dir, "--layers", str(layers),
                          "--experts", str(experts), "--expert-bytes", str(size),
                          "--seed", str(seed), "--template", poolfmt.DEFAULT_PATH),
              timeout=timeout, check=False)
    res = last_json(r.stdout)
    if res is None or r.rc == 2:
        raise CommandFailed(host.name, ["runner.py", "pool", host.pool_dir], r.rc,
                            (res or {}).get("reason") or r.stderr or r.stdout)
    if not res.get("ok"):
        raise HostError(host.name, f"pool: {res.get('reason')}",
                        "point paths.pool_dir at another directory, or remove that pool "
                        "on the host if it is no longer needed")
    return res
