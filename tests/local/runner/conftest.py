"""Fixtures for the host-side cell runner (agents/runner.py) against the real kernel: the agent
build, an ext4 pool on a direct-I/O loop device, plans written by bench.plan.planfile from synthetic
traces, a work dir, and a spec builder. Loop device, pool and mount helpers come from
tests/support/nativelib.py."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support import nativelib as nl
from tests.support.runner import EXPERT_BYTES, EXPERTS, LAYERS, LOOP_BYTES, make_plan_file


def _need(cond, why):
    if not cond:
        pytest.skip(why)


@pytest.fixture(scope="session")
def agent() -> Path:
    return nl.agent_or_skip()


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
