"""Fixtures for the native agent tests: the build, an ext4 file system on a direct-I/O loop
device, a pool on it, and plans written with bench.plan.planfile (so the formats are tested end to
end between the Python writer and the C reader)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import nativelib as nl  # noqa: E402
from native_plans import EXPERT_BYTES, EXPERTS, LAYERS, LOOP_BYTES  # noqa: E402

from bench.plan.planfile import Plan, write_plan  # noqa: E402
from bench.plan.pool import PoolSpec, make_pool  # noqa: E402


@pytest.fixture(autouse=True)
def _root_marker(request):
    """A test marked root is skipped, not failed, where the machine does not give it root."""
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root")


@pytest.fixture(scope="session")
def agent() -> Path:
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (build-essential)")
    return nl.build_agent()


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
