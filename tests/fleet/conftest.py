"""The SSH fleet tier: a 2-host netns lab (real sshd in network namespaces), brought up once per
session and torn down at the end, whatever happens in between."""

from __future__ import annotations

import os

import pytest

from bench.lab.netns import Lab, missing_capabilities


def lab_skip_reason() -> str | None:
    missing = missing_capabilities()
    return ("netns lab unavailable: missing " + ", ".join(missing)) if missing else None


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("bench-lab")
    lab = Lab(state)
    # overridable so two test sessions on one machine (parallel work) do not share a bridge
    lab.up(2, prefix=os.environ.get("BENCH_FLEET_PREFIX", "bft"),
           subnet=os.environ.get("BENCH_FLEET_SUBNET", "10.200.77"))
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="session")
def lab_inventory(lab):
    from bench.hosts.inventory import load_inventory
    inv = load_inventory(lab.hosts_dir)
    assert sorted(inv) == ["lab-netns-1", "lab-netns-2"]
    return inv


@pytest.fixture
def lab_host_up(lab):
    """Yields the lab; afterwards makes sure every lab host's sshd runs again (fault tests)."""
    yield lab
    for h in lab.status()["hosts"]:
        if not h["sshd"]:
            lab.start_sshd(h["name"])


@pytest.fixture
def clean_pools(lab):
    """Lab hosts share one session: each test that runs cells starts without pools (pools of
    several shapes coexist on a host, each in its keyed directory, but a test that counts or
    lists a host's pools must see only its own)."""
    import shutil
    from pathlib import Path
    for h in lab.status()["hosts"]:
        shutil.rmtree(Path(lab.host(h["name"]).dir) / "pool", ignore_errors=True)
    yield lab
