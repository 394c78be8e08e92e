"""Fail-stop on bad inputs: every one exits non-zero with a one-line reason in the summary and
on stderr, and reports no pass as done. Plans are made with bench.plan.planfile, then damaged with
struct so the exact defect is known."""

import json
import os
import struct

import pytest

from bench.plan.planfile import HINT, Plan, encode, write_plan
from tests.support import nativelib as nl
from tests.support.native_plans import make_plan

pytestmark = pytest.mark.native

# geometry of the small_pool fixture
L, E, S = 2, 8, 8192


def good_plan():
    return make_plan([[(0, (1, 2)), (1, (3,))], [(0, (4,)), (1, (0, 7))]], L, E, S)


def agent_fails(agent, pool, plan, *extra, reason, timeout=60):
    r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--passes", 2, *extra],
                     timeout=timeout)
    assert r.rc == nl.EXIT_FAIL, r.stdout  # bad input is a failure, never a skip
    assert r.summary is not None and r.summary["ok"] is False
    assert r.summary["passes_done"] == 0
    assert not r.records, "nothing partial may be reported"
    assert reason in r.summary["reason"], r.summary["reason"]
    assert reason in r.stderr
    assert "\n" not in r.summary["reason"]
    return r


def test_good_plan_runs(agent, small_pool, tmp_path):
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    r = nl.run_agent(["replay", "--pool", small_pool, "--plan", p, "--threads", 2])
    assert r.rc == 0, r.stderr
    assert r.summary["ok"] is True and r.summary["reason"] is None
    assert [x["reads"] for x in r.records] == [3, 3, 3, 3]
    assert sum(x["bytes"] for x in r.records) == 2 * 6 * S


def damaged(tmp_path, data: bytes, name="bad.bpln"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_truncated_plan(agent, small_pool, tmp_path):
    data = encode(good_plan())
    agent_fails(agent, small_pool, damaged(tmp_path, data[:-3]), reason="size mismatch")
    agent_fails(agent, small_pool, damaged(tmp_path, data[:20]), reason="truncated header")
    agent_fails(agent, small_pool, damaged(tmp_path, b""), reason="truncated header")


def test_trailing_garbage(agent, small_pool, tmp_path):
    data = encode(good_plan()) + b"\0" * 4
    agent_fails(agent, small_pool, damaged(tmp_path, data), reason="size mismatch")


def test_wrong_magic_and_version(agent, small_pool, tmp_path):
    data = bytearray(encode(good_plan()))
    agent_fails(agent, small_pool, damaged(tmp_path, b"XPLN" + bytes(data[4:])),
                reason="wrong magic")
    struct.pack_into("<H", data, 4, 2)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(data)), reason="unsupported version")


def test_counts_that_do_not_add_up(agent, small_pool, tmp_path):
    data = bytearray(encode(good_plan()))
    meta_len = struct.unpack_from("<I", data, 40)[0]
    off_iter = (48 + meta_len + 7) // 8 * 8
    off_pass = off_iter + 8 * 2
    # iteration 1 claims to start at pass 3
    bad = bytearray(data)
    struct.pack_into("<I", bad, off_iter + 8, 3)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(bad)), reason="iteration 1 starts")
    # pass 1 claims 2 reads: the passes then cover more than the plan's reads table says
    bad = bytearray(data)
    struct.pack_into("<I", bad, off_pass + 16 + 4, 2)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(bad)), reason="pass 2 starts")
    # out-of-range expert and layer, repeated expert
    off_read = off_pass + 16 * 4
    bad = bytearray(data)
    struct.pack_into("<I", bad, off_read, E)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(bad)), reason="out of range")
    bad = bytearray(data)
    struct.pack_into("<I", bad, off_pass, L)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(bad)), reason="layer 2 out of range")
    bad = bytearray(data)
    struct.pack_into("<I", bad, off_read + 4, 1)
    agent_fails(agent, small_pool, damaged(tmp_path, bytes(bad)), reason="repeated")


def test_hint_plan_given_as_replay_plan(agent, small_pool, tmp_path):
    gp = good_plan()
    hp = Plan(HINT, gp.layers, gp.experts_per_layer, gp.expert_bytes, gp.iterations, {})
    p = tmp_path / "h.bpln"
    write_plan(p, hp)
    agent_fails(agent, small_pool, p, reason="kind 1")


@pytest.mark.parametrize("geometry", [(3, E, S), (L, E + 1, S), (L, E, S + 1)])
def test_plan_pool_mismatch(agent, small_pool, tmp_path, geometry):
    layers, experts, size = geometry
    p = tmp_path / "plan.bpln"
    write_plan(p, make_plan([[(0, (1,))]], layers, experts, size))
    agent_fails(agent, small_pool, p, reason="does not match the pool")


def test_hint_plan_shape_mismatch(agent, small_pool, tmp_path):
    p, h = tmp_path / "plan.bpln", tmp_path / "hints.bpln"
    write_plan(p, good_plan())
    short = make_plan([[(0, (1,))]], L, E, S)
    write_plan(h, Plan(HINT, L, E, S, short.iterations, {}))
    agent_fails(agent, small_pool, p, "--prefetch", "advice", "--hints", h,
                reason="hint plan shape differs")


def test_missing_expert_file(agent, small_pool, tmp_path):
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    os.unlink(small_pool / "L001" / "E0005.bin")
    agent_fails(agent, small_pool, p, reason="cannot open expert file")


def test_truncated_expert_file(agent, small_pool, tmp_path):
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    os.truncate(small_pool / "L000" / "E0003.bin", S - 100)
    agent_fails(agent, small_pool, p, reason="has 8092 bytes")


@pytest.mark.parametrize("kind", ["symlink-dev-zero", "symlink-regular", "fifo", "directory"])
def test_a_pool_file_that_is_not_a_regular_file_is_refused(agent, small_pool, tmp_path, kind):
    """fstat after an O_NOFOLLOW|O_NONBLOCK open: a symlink (even to a good file: its bytes
    would come from another file system than the pool's device), a FIFO (which would block the
    open until a writer came: the run would hang) and a directory each fail before any pass,
    with the file and its kind named. A timeout guards the FIFO case."""
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    victim = small_pool / "L001" / "E0003.bin"
    elsewhere = tmp_path / "copy.bin"
    elsewhere.write_bytes(victim.read_bytes())
    victim.unlink()
    if kind == "symlink-dev-zero":
        victim.symlink_to("/dev/zero")
    elif kind == "symlink-regular":
        victim.symlink_to(elsewhere)
    elif kind == "fifo":
        os.mkfifo(victim)
    else:
        victim.mkdir()
    why = {"fifo": "is a FIFO, not a regular file",
           "directory": "is a directory, not a regular file"}.get(
        kind, "is a symbolic link, not a regular file")
    r = agent_fails(agent, small_pool, p, reason=why)
    assert str(victim) in r.summary["reason"]


@pytest.mark.parametrize("kind", ["fifo", "symlink-dev-zero"])
def test_a_pool_manifest_that_is_not_a_regular_file_is_refused(agent, small_pool, tmp_path,
                                                               kind):
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    manifest = small_pool / "pool.json"
    manifest.unlink()
    if kind == "fifo":
        os.mkfifo(manifest)
        why = "pool manifest %s is a FIFO, not a regular file" % manifest
    else:
        manifest.symlink_to("/dev/zero")
        why = "pool manifest %s is a symbolic link, not a regular file" % manifest
    agent_fails(agent, small_pool, p, reason=why)


def test_incomplete_or_garbled_pool(agent, small_pool, tmp_path):
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    manifest = small_pool / "pool.json"
    raw = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(dict(raw, complete=False)))
    agent_fails(agent, small_pool, p, reason="not complete")
    manifest.write_text(json.dumps(dict(raw, path="L{layer}/E{expert:4d}.bin")))
    agent_fails(agent, small_pool, p, reason="path template")
    manifest.write_text('{"layers": 2,')
    agent_fails(agent, small_pool, p, reason="not a valid JSON")
    agent_fails(agent, tmp_path / "nope", p, reason="cannot read pool.json")


def test_missing_plan_and_bad_freq_table(agent, small_pool, tmp_path):
    agent_fails(agent, small_pool, tmp_path / "absent.bpln", reason="cannot read")
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    f = tmp_path / "freq.txt"
    f.write_text("# layer expert count\n0 1 5\n9 0 1\n")
    agent_fails(agent, small_pool, p, "--mode", "pinned", "--arena-bytes", "64K", "--freq", f,
                reason="outside the pool")


def test_fd_limit_is_raised_for_the_pool(agent, small_pool, tmp_path):
    """Descriptor strategy: every expert file stays open; the agent raises RLIMIT_NOFILE."""
    p = tmp_path / "plan.bpln"
    write_plan(p, good_plan())
    import resource

    def low_soft_limit():
        # 16 files (+ headroom) need more than a soft limit of 10; the hard one is kept
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (10, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    r = nl.run_agent(["replay", "--pool", small_pool, "--plan", p, "--threads", 1],
                     preexec_fn=low_soft_limit)
    assert r.rc == 0, r.stderr
    assert r.summary["fd_strategy"] == "all-open"
    assert r.summary["files_open"] == L * E
    assert r.summary["nofile_limit"] >= L * E


@pytest.mark.root
@pytest.mark.slow
def test_paper_scale_pool_of_82432_files(agent, tmp_path):
    """92 layers x 896 experts. With the privilege to raise RLIMIT_NOFILE's hard limit
    (CAP_SYS_RESOURCE) every file is open at once; without it the agent falls back to one open
    per read, and says so. Either way the replay completes and its bytes are exact."""
    import resource

    from bench.plan.pool import PoolSpec, make_pool
    pool = tmp_path / "big"
    make_pool(pool, PoolSpec(92, 896, 64))
    p = tmp_path / "plan.bpln"
    write_plan(p, make_plan([[(0, (0, 895)), (91, (7,))]], 92, 896, 64))

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 4096))

    r = nl.run_agent(["replay", "--pool", pool, "--plan", p, "--threads", 2],
                     preexec_fn=low_limit, timeout=600)
    assert r.rc == 0, r.stderr
    s = r.summary
    assert s["pass_bytes"] == [3 * 64, 3 * 64]
    if s["fd_strategy"] == "all-open":
        assert s["files_open"] == 82432 and s["nofile_limit"] >= 82432
    else:
        assert s["fd_strategy"] == "per-read" and s["files_open"] == 0
        assert "falling back to one open per read" in r.stderr
