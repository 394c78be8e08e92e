"""Several pools under one pool_dir, through the real runner command line (`runner.py pool
--root`, `pools`, `pool-rm`) on real files: two shapes side by side, the listing (shape, seed,
state, sizes, live runs), removal refused while a live run reads the pool, and an old-layout
pool (pool.json right in pool_dir) moved into its keyed directory and still usable. No root
needed."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.agents.hostrunner import poolcheck, poolfmt, poolstore, poolwriter
from tests.support.runner import PYTHON, RUNNER

S1, S2 = 10_000, 12_288


def runner(*args) -> tuple[int, dict]:
    r = subprocess.run([PYTHON, str(RUNNER), *map(str, args)], capture_output=True, text=True,
                       timeout=120)
    lines = r.stdout.splitlines()
    assert len(lines) == 1, (r.stdout, r.stderr)
    return r.returncode, json.loads(lines[0])


def make(root: Path, layers: int, experts: int, size: int, seed: int = 0):
    return runner("pool", "--root", root, "--layers", layers, "--experts", experts,
                  "--expert-bytes", size, "--seed", seed)


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "pool", tmp_path / "work"


def test_two_shapes_and_two_seeds_coexist(dirs):
    root, work = dirs
    for size, seed in ((S1, 0), (S2, 0), (S1, 1)):
        rc, res = make(root, 2, 3, size, seed)
        key = f"2x3x{size}-s{seed}"
        assert rc == 0 and res["status"] == "made" and res["key"] == key, res
        assert res["dir"] == str(root / key)
        assert poolcheck.verify(res["dir"])["ok"]
    rc, res = make(root, 2, 3, S1, 0)
    assert rc == 0 and res["status"] == "present"
    rc, res = runner("pools", "--root", root, "--work-dir", work)
    assert rc == 0 and res["ok"] and res["root"] == str(root)
    got = {p["key"]: p for p in res["pools"]}
    assert sorted(got) == ["2x3x10000-s0", "2x3x10000-s1", "2x3x12288-s0"]
    p = got["2x3x12288-s0"]
    assert (p["layers"], p["experts_per_layer"], p["expert_bytes"], p["seed"], p["state"],
            p["layout"], p["sums"], p["in_use"]) == (2, 3, S2, 0, "complete", "keyed", True, [])
    assert p["bytes"] == 6 * S2 and p["files"] == 8 and p["disk_bytes"] >= 6 * S2


def test_a_partial_pool_is_listed_as_partial(dirs):
    root, work = dirs
    make(root, 2, 3, S1)
    poolfmt.write_manifest(str(root / "2x3x10000-s0"), poolfmt.manifest_fields(2, 3, S1),
                           complete=False)
    (root / "2x3x12288-s0").mkdir()           # a write that stopped before pool.json
    (root / "unrelated").mkdir()              # not a pool: not listed
    rc, res = runner("pools", "--root", root, "--work-dir", work)
    assert [(p["key"], p["state"]) for p in res["pools"]] == [("2x3x10000-s0", "partial"),
                                                              ("2x3x12288-s0", "partial")]
    assert "no pool.json" in res["pools"][1]["reason"]
    rc, res = make(root, 2, 3, S1)
    assert rc == 0 and res["status"] == "resumed"


def test_removal_is_refused_while_a_live_run_reads_the_pool(dirs):
    root, work = dirs
    make(root, 2, 3, S1)
    make(root, 2, 3, S2)
    pool = root / "2x3x10000-s0"
    # a live run: its run lock held (as the runner holds it), its spec naming the pool
    (work / "runs" / "r1").mkdir(parents=True)
    (work / "locks").mkdir()
    (work / "runs" / "r1" / "spec.json").write_text(json.dumps({"pool": str(pool)}))
    fd = os.open(work / "locks" / "r1.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        rc, res = runner("pools", "--root", root, "--work-dir", work)
        assert {p["key"]: p["in_use"] for p in res["pools"]} == {"2x3x10000-s0": ["r1"],
                                                                 "2x3x12288-s0": []}
        rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
        assert rc == 3 and res["in_use"] == ["r1"] and "in use by run r1" in res["reason"]
        assert (pool / "pool.json").exists()
        rc, res = runner("pool-rm", "2x3x12288-s0", "--root", root, "--work-dir", work)
        assert rc == 0 and res["removed"] is True and not (root / "2x3x12288-s0").exists()
    finally:
        os.close(fd)
    rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
    assert rc == 0 and res["removed"] and res["disk_bytes"] >= 6 * S1
    assert os.listdir(root) == []
    rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
    assert rc == 3 and "no pool 2x3x10000-s0" in res["reason"]


@pytest.mark.parametrize("key", ["..", "../pool", "2x3x10000-s0/../..", "/etc", "a b"])
def test_pool_rm_takes_keys_only(dirs, key):
    root, work = dirs
    make(root, 2, 3, S1)
    rc, res = runner("pool-rm", key, "--root", root, "--work-dir", work)
    assert rc == 2 and "is not a pool key" in res["reason"]
    assert (root / "2x3x10000-s0" / "pool.json").exists()


def test_an_interrupted_removal_is_finished_by_the_next(dirs):
    root, work = dirs
    make(root, 2, 3, S1)
    os.rename(root / "2x3x10000-s0", root / ".rm-2x3x10000-s0-999")
    rc, res = runner("pools", "--root", root, "--work-dir", work)
    assert [(p["key"], p["state"]) for p in res["pools"]] == [(".rm-2x3x10000-s0-999",
                                                              "removing")]
    rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
    assert rc == 0 and os.listdir(root) == []


def test_an_old_layout_pool_is_listed_then_moved_into_its_key_and_kept(dirs):
    root, work = dirs
    res, rc = poolwriter.write_pool(str(root), 2, 3, S1, 4)        # the old layout
    assert rc == 0
    inodes = {p.name: p.stat().st_ino for p in (root / "L001").iterdir()}
    rc, res = runner("pools", "--root", root, "--work-dir", work)
    (old,) = res["pools"]
    assert (old["key"], old["layout"], old["state"], old["dir"]) == ("2x3x10000-s4", "old",
                                                                     "complete", str(root))
    assert old["files"] == 8
    # a run of another shape: the old pool moves into its keyed directory, files not copied
    rc, res = make(root, 2, 3, S2)
    assert rc == 0 and res["migrated"]["key"] == "2x3x10000-s4", res
    assert sorted(os.listdir(root)) == ["2x3x10000-s4", "2x3x12288-s0"]
    moved = root / "2x3x10000-s4"
    assert {p.name: p.stat().st_ino for p in (moved / "L001").iterdir()} == inodes
    assert poolcheck.verify(str(moved))["ok"]
    rc, res = make(root, 2, 3, S1, 4)
    assert rc == 0 and res["status"] == "present" and "migrated" not in res


def test_an_interrupted_move_is_finished_and_a_clash_refused(dirs):
    root, work = dirs
    poolwriter.write_pool(str(root), 2, 3, S1, 0)
    key = root / "2x3x10000-s0"
    key.mkdir()
    os.rename(root / "L000", key / "L000")          # the move stopped after one directory
    rc, res = make(root, 2, 3, S1)
    assert rc == 0 and res["status"] == "present" and res["migrated"]["to"] == str(key)
    assert sorted(os.listdir(root)) == ["2x3x10000-s0"]
    # an old-layout pool whose key is already taken: refused, both left as they are
    poolwriter.write_pool(str(root / "x"), 2, 3, S1, 0)
    for n in os.listdir(root / "x"):
        os.rename(root / "x" / n, root / n)
    os.rmdir(root / "x")
    rc, res = make(root, 2, 3, S2)
    assert rc == 3 and "remove one of them" in res["reason"]
    assert (root / "pool.json").exists() and (key / "pool.json").exists()
    assert poolstore.migrate_old_layout(str(root))["ok"] is False


def test_a_relative_root_is_a_usage_error(tmp_path):
    rc, res = runner("pool", "--root", "rel/pool", "--layers", 1, "--experts", 1,
                     "--expert-bytes", 64)
    assert rc == 2 and "not an absolute path" in res["reason"]


def test_an_absurd_old_manifest_is_listed_as_unreadable_not_walked(dirs):
    root, work = dirs
    root.mkdir()
    (root / "pool.json").write_text(json.dumps({"layers": 10 ** 9, "experts_per_layer": 10 ** 9,
                                                "expert_bytes": 64, "complete": True}))
    rc, res = runner("pools", "--root", root, "--work-dir", work)
    (p,) = res["pools"]
    assert p["state"] == "unreadable" and "more than bench handles" in p["reason"]
    rc, res = make(root, 1, 2, 64)
    assert rc == 3 and "unusable shape" in res["reason"]


def test_pool_rm_of_an_old_layout_pool_moves_then_removes_it(dirs):
    root, work = dirs
    poolwriter.write_pool(str(root), 2, 3, S1, 0)
    make_keyed = make(root, 1, 1, 64)          # moves the old pool aside first
    assert make_keyed[0] == 0
    rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
    assert rc == 0 and sorted(os.listdir(root)) == ["1x1x64-s0"]
    poolwriter.write_pool(str(root / "old"), 2, 3, S1, 0)
    for n in os.listdir(root / "old"):
        os.rename(root / "old" / n, root / n)
    os.rmdir(root / "old")
    rc, res = runner("pool-rm", "2x3x10000-s0", "--root", root, "--work-dir", work)
    assert rc == 0 and sorted(os.listdir(root)) == ["1x1x64-s0"]
