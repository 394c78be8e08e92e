"""Exit codes: 0 ok, 1 failure, 2 usage, 4 skip (the machine lacks a capability the run needs,
kselftest's KSFT_SKIP). A skip is decided by the agent at its probes, before any pass; tests
and the controller branch on the code, never on the reason's wording.

ramfs is the file system that lacks all three capabilities the agent probes for: it has no
O_DIRECT (open gives EINVAL), no RWF_DONTCACHE and no RWF_NOWAIT (preadv2 gives EOPNOTSUPP)."""

import os
import subprocess

import pytest

from bench.plan.planfile import write_plan
from bench.plan.pool import PoolSpec, make_pool
from tests.support import nativelib as nl
from tests.support.native_plans import make_plan

pytestmark = [pytest.mark.native, pytest.mark.root]

L, E, S = 2, 8, 8192


@pytest.fixture
def ramfs_pool(tmp_path):
    mnt = tmp_path / "ramfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "ramfs", "-o", "mode=0755", "ramfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a ramfs (needs CAP_SYS_ADMIN and ramfs): {r.stderr.strip()}")
    try:
        make_pool(mnt / "pool", PoolSpec(L, E, S))
        yield mnt / "pool"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture
def plan(tmp_path):
    p = tmp_path / "plan.bpln"
    write_plan(p, make_plan([[(0, (1, 2)), (1, (3,))], [(0, (4,)), (1, (0, 7))]], L, E, S))
    return p


def assert_skipped(r, why):
    assert r.rc == nl.EXIT_SKIP, (r.rc, r.stderr)
    s = r.summary
    assert s["ok"] is False and s["skipped"] is True
    assert s["passes_done"] == 0 and not r.records
    assert why in s["reason"] and "\n" not in s["reason"]
    assert r.stderr.strip().endswith(s["reason"])  # the one-line reason, on stderr too
    assert s["errors"] == 0


@pytest.mark.parametrize("args,why", [
    (["--mode", "nocache", "--nocache", "dontcache"], "RWF_DONTCACHE not supported"),
    (["--mode", "nocache", "--nocache", "direct"], "O_DIRECT is not supported"),
    (["--probe-cached"], "RWF_NOWAIT) not supported"),
])
def test_missing_capability_exits_skip(agent, ramfs_pool, plan, args, why):
    r = nl.run_agent(["replay", "--pool", ramfs_pool, "--plan", plan, "--threads", 2, *args])
    assert_skipped(r, why)


def test_the_same_modes_run_where_supported(agent, ramfs_pool, plan):
    """Plain pread on ramfs works: the skip above is about the mode, not the pool."""
    r = nl.run_agent(["replay", "--pool", ramfs_pool, "--plan", plan, "--threads", 2])
    assert r.rc == nl.EXIT_OK, r.stderr
    assert r.summary["skipped"] is False and r.summary["ok"] is True


def test_genuine_failures_are_not_skips(agent, ramfs_pool, plan):
    """A missing expert file is a failure (1), in a mode that would otherwise skip on this file
    system too: the O_DIRECT open's ENOENT is not mistaken for 'O_DIRECT unsupported'."""
    os.unlink(ramfs_pool / "L000" / "E0000.bin")
    for args in (["--mode", "nocache", "--nocache", "direct"],
                 ["--mode", "nocache", "--nocache", "dontcache"], []):
        r = nl.run_agent(["replay", "--pool", ramfs_pool, "--plan", plan, *args])
        assert r.rc == nl.EXIT_FAIL, (args, r.rc, r.stderr)
        assert r.summary["ok"] is False and r.summary["skipped"] is False
        assert "cannot open expert file" in r.summary["reason"]
