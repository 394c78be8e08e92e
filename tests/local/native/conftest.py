"""Fixtures for the native agent tests: the build, an ext4 file system on a direct-I/O loop
device, a pool on it, and plans written with bench.plan.planfile (so the formats are tested end to
end between the Python writer and the C reader)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.plan.planfile import Plan, write_plan
from bench.plan.pool import PoolSpec, make_pool
from tests.support import nativelib as nl
from tests.support.native_plans import EXPERT_BYTES, EXPERTS, LAYERS, LOOP_BYTES


@pytest.fixture(scope="session")
def agent() -> Path:
    return nl.agent_or_skip()


@pytest.fixture(scope="session")
def loopfs():
    with nl.loopfs_or_skip(LOOP_BYTES, "bench-native-") as fs:
        yield fs


@pytest.fixture(scope="session")
def pool(loopfs) -> Path:
    return nl.pool_on(loopfs, LAYERS, EXPERTS, EXPERT_BYTES)


@pytest.fixture
def plan_file(tmp_path):
    def write(plan: Plan, name="plan.bpln") -> Path:
        p = tmp_path / name
        write_plan(p, plan)
        return p
    return write


@pytest.fixture
def small_pool(tmp_path) -> Path:
    """A tiny pool on the test's own tmp dir, for input errors (no device needed)."""
    d = tmp_path / "small-pool"
    make_pool(d, PoolSpec(2, 8, 8192))
    return d
