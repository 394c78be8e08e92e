"""Helpers of the fleet tests: what a lab host and the controller hold of a campaign's runs, and a
campaign created in a database on an inventory of unreachable hosts (for the views, which
must read the database only)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.support.template_db import sqlite_at_head

NAMES = ["lab-netns-1", "lab-netns-2"]


def host_bundles(lab, cid: str, names=NAMES) -> dict[str, list[str]]:
    """run id -> the lab hosts holding a bundle directory of it."""
    out: dict[str, list[str]] = {}
    for name in names:
        d = Path(lab.host(name).dir) / "work" / "runs"
        for b in d.iterdir() if d.is_dir() else ():
            if b.name.startswith(cid):
                out.setdefault(b.name, []).append(name)
    return out


def host_status(lab, host: str, rid: str) -> dict | None:
    """The runner's status.json of a run on a lab host (read on this machine), or None."""
    p = Path(lab.host(host).dir) / "work" / "runs" / rid / "status.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def wait_for(cond, timeout: float, what: str, interval: float = 0.1):
    """cond()'s first truthy value, polled every `interval` s; an AssertionError naming `what`
    after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def offline_campaign(tmp_path: Path, matrix: Path, cid: str, seed: int = 3) -> str:
    """A campaign of `matrix` on NAMES (addresses in 192.0.2.0/24, never reached) in a fresh
    SQLite database; returns the database URL."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.record import Settings, create
    from bench.hosts.inventory import Host, render_host_toml
    from bench.store.db import open_store
    db = sqlite_at_head(tmp_path / (cid + ".db"))        # at head: the migrated template
    hosts = tmp_path / "hosts"
    hosts.mkdir(exist_ok=True)
    for i, n in enumerate(NAMES):
        (hosts / f"{n}.toml").write_text(render_host_toml(
            Host(name=n, address=f"192.0.2.{i + 1}", transport="ssh")))
    plan, exp, m = build_plan(str(matrix), NAMES, hosts, seed, cid)
    store = open_store(db)
    try:
        create(store, plan, exp, m, NAMES, Settings(hosts_dir=hosts), str(matrix))
    finally:
        store.close()
    return db
