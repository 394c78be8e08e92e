"""Fixtures for the host-side cell runner (agents/runner.py) against the real kernel: the agent
build, an ext4 pool on a direct-I/O loop device, plans written by bench.plan.planfile from synthetic
traces, a work dir, and a spec builder. Loop device, pool and mount helpers come from
tests/native/nativelib.py."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "native"))
sys.path.insert(0, str(HERE))

import nativelib as nl  # noqa: E402
from runner_helpers import EXPERT_BYTES, EXPERTS, LAYERS, LOOP_BYTES, make_plan_file  # noqa: E402


def _need(cond, why):
    if not cond:
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _root_marker(request):
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root (drop_caches, cgroups, loop devices, mlock)")


@pytest.fixture(scope="session")
def agent() -> Path:
    for tool in ("make", "cc"):
        _need(shutil.which(tool), f"{tool} not installed (build-essential): cannot build the agent")
    return nl.build_agent()


@pytest.fixture(scope="session")
def loopfs():
    with nl.loopfs_or_skip(LOOP_BYTES, "bench-runner-") as fs:
        yield fs


@pytest.fixture(scope="session")
def pool(loopfs) -> Path:
    return nl.pool_on(loopfs, LAYERS, EXPERTS, EXPERT_BYTES)


@pytest.fixture(scope="session")
def plans(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("plans")
    # short: ~2.4 GB logical per pass (a fraction of a second warm); long: a measured pass of
    # a few seconds, so a test can act while it runs
    return {"short": make_plan_file(d / "short.bpln", tokens=150),
            "long": make_plan_file(d / "long.bpln", tokens=700)}


@pytest.fixture
def work_dir():
    d = Path(tempfile.mkdtemp(prefix="bench-runner-wd-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
