"""The local host as the local-transport campaign tests need it: an inventory directory with one
`local.toml` written by bench's own render_host_toml (the writer the labs use), and campaign
Settings pointing at the test's own directories. Skips, naming the capability, where this
machine cannot run the deployed runner and agent."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bench.execute.campaign.record import Settings
from bench.hosts.inventory import Host, render_host_toml


def require_runner_capabilities(root: bool = True) -> None:
    """Skip unless the runner can drop caches (root) and the agent can be built on deploy."""
    if root and os.geteuid() != 0:
        pytest.skip("needs root (the runner drops caches)")
    for tool in ("make", "cc", "python3"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (the agent is built on deploy)")


def local_hosts_dir(tmp_path: Path, root: bool = True) -> Path:
    """`tmp_path/hosts` holding the local host (pool and work dirs under tmp_path)."""
    require_runner_capabilities(root)
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local",
        pool_dir=str(tmp_path / "pool"), work_dir=str(tmp_path / "work"))))
    return hosts


def local_settings(tmp_path: Path, hosts: Path, db: str, *, retries: int = 0,
                   data_dir: Path | None = None) -> Settings:
    """Campaign settings for a short local campaign: 2 threads, 2 passes, 1 s chunks."""
    return Settings(threads=2, passes=2, retries=retries, data_dir=data_dir or tmp_path / "data",
                    db_url=db, hosts_dir=hosts, chunk_s=1.0, retry_pause_s=0.1)


def none_matrix(name: str, capacities: str = '"0.5pool", "2pool"') -> str:
    """A short matrix of `none`/classic cells for the local host: the tiny trace (an 8 MiB
    pool), two passes, two repetitions, ~1 s a run."""
    return f"""
name = "{name}"
description = "none/classic cells on the local host"
repetitions = 2

[workload]
trace = "tiny"
tokens = 40
passes = 2

[estimate]
run_seconds = 2
reboot_seconds = 30

[cells]
capacities = [{capacities}]
mechanisms = ["none"]
reclaims = ["classic"]
"""
