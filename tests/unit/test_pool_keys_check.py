"""Pool keys (one directory per shape and seed under a host's pool_dir), the sampled-block
offsets, and `bench pool check`'s verifier on small pools written by both writers: every kind
of damage is found and named, one line each."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from bench.agents.hostrunner import poolcheck, poolfmt, poolwriter
from bench.errors import InputError, PoolError
from bench.matrix.runspec import build_spec
from bench.plan.pool import PoolSpec, check_pool, make_pool, pool_key, pool_path, verify_pool

L, E, S = 2, 3, 20_000          # 5 blocks of 4 KiB per file, the last one short


# --------------------------------------------------------------------------- keys

@pytest.mark.parametrize("shape, key", [((92, 896, 17_550_000, 0), "92x896x17550000-s0"),
                                        ((4, 32, 1 << 20, 7), "4x32x1048576-s7"),
                                        ((1, 1, 32, 12345678901), "1x1x32-s12345678901")])
def test_keys_round_trip(shape, key):
    assert poolfmt.pool_key(*shape) == key
    assert poolfmt.parse_key(key) == shape
    assert PoolSpec(*shape[:3], seed=shape[3]).key == key
    assert pool_key(shape[:3], shape[3]) == key
    assert pool_path("/srv/pool/", shape[:3], shape[3]) == f"/srv/pool/{key}"


@pytest.mark.parametrize("text", ["", "4x32x1048576", "4x32x1048576-s", "0x32x1-s0",
                                  "4x32x1048576-s0/..", "../4x32x1-s0", "4X32X1-S0", "4x32x1-s-1",
                                  "L000", ".rm-4x32x1-s0-12", "4x32x1-s0 ", "4x32x1-s0\n",
                                  "1" * 11 + "x1x1-s0"])
def test_what_is_not_a_key(text):
    assert poolfmt.parse_key(text) is None


def test_two_shapes_get_two_directories_and_the_spec_names_its_own():
    from tests.unit.test_runspec import HOST, PLAN          # the runspec tests' data
    a = build_spec("1G-none-classic", HOST, PLAN, run_id="r1")
    b = build_spec("1G-none-classic", HOST, replace(PLAN, expert_bytes=1 << 20), run_id="r2")
    assert a["pool"] != b["pool"]
    assert os.path.dirname(a["pool"]) == os.path.dirname(b["pool"]) == HOST.pool_dir
    assert os.path.basename(a["pool"]) == "92x896x17550000-s0"
    assert os.path.basename(b["pool"]) == f"92x896x{1 << 20}-s0"


# --------------------------------------------------------------------------- sampled blocks

@pytest.mark.parametrize("size", [32, 4096, 4097, 16_384, 20_000, 17_550_000])
def test_sample_offsets_cover_first_and_last_block_inside_the_file(size):
    for layer, expert in ((0, 0), (3, 17), (91, 895)):
        offs = poolfmt.sample_offsets(layer, expert, size, 0)
        blocks = (size + 4095) // 4096
        assert offs == sorted(set(offs)) and len(offs) == min(4, blocks)
        assert offs[0] == 0 and offs[-1] == (blocks - 1) * 4096
        assert all(o % 4096 == 0 and o < size for o in offs)


def test_sample_offsets_differ_between_files_and_seeds():
    size = 17_550_000
    seen = {tuple(poolfmt.sample_offsets(0, e, size, 0)) for e in range(50)}
    assert len(seen) > 45
    assert poolfmt.sample_offsets(1, 2, size, 0) != poolfmt.sample_offsets(1, 2, size, 1)
    assert poolfmt.sample_offsets(1, 2, size, 0) == poolfmt.sample_offsets(1, 2, size, 0)


# --------------------------------------------------------------------------- the verifier

@pytest.fixture(params=["controller", "host"])
def pool(request, tmp_path) -> Path:
    d = tmp_path / "pool"
    if request.param == "controller":
        make_pool(d, PoolSpec(L, E, S, seed=5))
    else:
        assert poolwriter.write_pool(str(d), L, E, S, 5)[1] == 0
    return d


def lines(d: Path) -> list[str]:
    return [p["line"] for p in verify_pool(d)["problems"]]


def test_a_good_pool_verifies(pool):
    rep = verify_pool(pool)
    assert rep["ok"] and rep["problems"] == [] and rep["content"] == "sampled"
    assert rep["files"] == L * E and rep["complete"] is True
    assert check_pool(pool) == PoolSpec(L, E, S, seed=5)


def test_one_byte_changed_in_a_sampled_block_is_found(pool):
    layer, expert = 1, 2
    victim = pool / poolfmt.relpath(poolfmt.DEFAULT_PATH, layer, expert)
    off = poolfmt.sample_offsets(layer, expert, S, 5)[2] + 1234     # a middle sampled block
    with victim.open("r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))
    assert lines(pool) == [f"L001/E0002.bin: content differs from pool.sums in the sampled "
                           f"blocks at offsets "
                           f"{', '.join(map(str, poolfmt.sample_offsets(1, 2, S, 5)))} "
                           f"(corrupted)"]
    with pytest.raises(PoolError, match="L001/E0002.bin: content differs"):
        check_pool(pool)


def test_truncated_missing_extra_and_temp_files_are_each_named(pool):
    os.truncate(pool / "L000" / "E0001.bin", S - 1)
    (pool / "L001" / "E0000.bin").unlink()
    (pool / "L001" / "E0007.bin").write_bytes(b"x" * S)       # expert 7 of 3: not the pool's
    (pool / "notes.txt").write_text("hi")
    (pool / "L000" / "E0002.bin.tmp").write_bytes(b"torn")
    assert lines(pool) == [
        f"L000/E0001.bin: {S - 1} bytes, pool.json says {S} (truncated)",
        "L001/E0000.bin: missing",
        "notes.txt: not part of the pool (extra file)",
        "L000/E0002.bin.tmp: not part of the pool (a temp file left by an interrupted write)",
        "L001/E0007.bin: not part of the pool (extra file)"]


def test_files_that_are_not_regular_and_wrong_headers(pool):
    (pool / "L000" / "E0000.bin").unlink()
    (pool / "L000" / "E0000.bin").symlink_to("/dev/zero")
    (pool / "L000" / "E0001.bin").unlink()
    os.mkfifo(pool / "L000" / "E0001.bin")
    with (pool / "L001" / "E0001.bin").open("r+b") as f:
        f.seek(12)                                  # the expert number in the header
        f.write((9).to_bytes(4, "little"))
    os.symlink(pool / "L001", pool / "L009")
    assert lines(pool) == [
        "L000/E0000.bin: not a regular file (a symlink)",
        "L000/E0001.bin: not a regular file (a FIFO)",
        "L001/E0001.bin: header differs: expert 9, expected 1",
        "L009: a symlink to a directory (pool files must be in the pool)"]


def test_a_tampered_sums_file_and_an_incomplete_pool(pool):
    sums = pool / "pool.sums"
    text = sums.read_text()
    sums.write_text(("0" * 32) + text[32:])
    assert lines(pool) == ["pool.sums: its sha256 is not the one pool.json records (the digest "
                           "file was altered)"]
    assert verify_pool(pool)["content"] is None
    sums.write_text(text[:-33])
    assert lines(pool) == [f"pool.sums: {33 * (L * E - 1)} bytes, {33 * L * E} expected (one "
                           "32-digit line per file)"]
    sums.write_text(text)
    man = json.loads((pool / "pool.json").read_text())
    (pool / "pool.json").write_text(json.dumps(dict(man, complete=False)))
    assert lines(pool) == ["pool.json: says the pool is not complete (resume it with `bench "
                           "pool make` and the same shape)"]


def test_a_pool_written_before_the_digests_is_checked_but_for_content(pool):
    man = json.loads((pool / "pool.json").read_text())
    del man["sums"]
    (pool / "pool.json").write_text(json.dumps(man))
    (pool / "pool.sums").unlink()
    with (pool / "L001" / "E0002.bin").open("r+b") as f:
        f.seek(4096 * 3 + 7)
        f.write(b"\xff\xfe")
    rep = verify_pool(pool)
    assert rep["ok"] and rep["content"] == "unverified"
    os.truncate(pool / "L001" / "E0002.bin", 100)
    assert lines(pool) == [f"L001/E0002.bin: 100 bytes, pool.json says {S} (truncated)"]


@pytest.mark.parametrize("text, why", [
    (None, "pool.json: missing"), ("{not json", "pool.json: unreadable"),
    ("[1]", "not a JSON object"), ('{"layers": 2}', "pool.json: unreadable"),
    ('{"layers": 0, "experts_per_layer": 1, "expert_bytes": 64}', "layers must be positive"),
    ("x" * (poolfmt.MAX_MANIFEST_BYTES + 1), "larger than"),
    ('{"layers": 1000000000, "experts_per_layer": 1000000000, "expert_bytes": 64}',
     "more than bench handles"),
    ('{"layers": 5000000000, "experts_per_layer": 1, "expert_bytes": 64}', "fit 32 bits")])
def test_a_bad_manifest_is_one_line(tmp_path, text, why):
    d = tmp_path / "p"
    d.mkdir()
    if text is not None:
        (d / "pool.json").write_text(text)
    rep = poolcheck.verify(str(d))
    assert not rep["ok"] and rep["problem_count"] == 1 and why in rep["problems"][0]["line"]


def test_problem_lines_are_capped_but_counted(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "pool.json").write_text(json.dumps({"layers": 40, "experts_per_layer": 30,
                                             "expert_bytes": 64, "complete": True}))
    rep = poolcheck.verify(str(d))
    assert rep["problem_count"] == 1200 and len(rep["problems"]) == poolcheck.MAX_PROBLEMS


# --------------------------------------------------------------------------- make's directory

def test_make_creates_the_pool_directory_only_inside_an_existing_parent(tmp_path):
    spec = PoolSpec(1, 2, 4096)
    with pytest.raises(InputError, match="parent directory .* does not exist") as e:
        make_pool(tmp_path / "no" / "such" / "pool", spec)
    assert "--parents" in e.value.hint and not (tmp_path / "no").exists()
    assert make_pool(tmp_path / "pool", spec)["created"] is True
    assert make_pool(tmp_path / "pool", spec)["created"] is False
    assert make_pool(tmp_path / "a" / "b" / "pool", spec, parents=True)["created"] is True
    (tmp_path / "file").write_text("x")
    with pytest.raises(PoolError, match="is not a directory"):
        make_pool(tmp_path / "file", spec)
    digest = hashlib.sha256((tmp_path / "pool" / "pool.sums").read_bytes()).hexdigest()
    assert json.loads((tmp_path / "pool" / "pool.json").read_text())["sums"]["sha256"] == digest


# --------------------------------------------------------------------------- the commands

def cli(capsys, *args) -> tuple[int, str, str]:
    from bench.cli import main
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_pool_make_and_check_commands(capsys, tmp_path):
    shape = ("--layers", 2, "--experts", 3, "--expert-bytes", S)
    rc, _, err = cli(capsys, "pool", "make", tmp_path / "a" / "pool", *shape)
    assert rc == 2 and "parent directory" in err and "--parents" in err
    assert not (tmp_path / "a").exists()
    rc, _, err = cli(capsys, "pool", "make", tmp_path / "pool", *shape)
    assert rc == 0 and f"created {tmp_path / 'pool'}" in err and "2x3x20000-s0" in err
    rc, _, err = cli(capsys, "pool", "make", tmp_path / "pool", *shape)
    assert rc == 0 and "created" not in err and "6 kept" in err
    rc, _, err = cli(capsys, "pool", "make", tmp_path / "a" / "b", *shape, "--parents")
    assert rc == 0 and f"created {tmp_path / 'a' / 'b'}" in err
    rc, _, err = cli(capsys, "pool", "make", tmp_path / "s", *shape, "--seed", -1)
    assert rc == 2 and "seed" in err and not (tmp_path / "s").exists()
    rc, out, err = cli(capsys, "pool", "check", tmp_path / "pool")
    assert rc == 0 and "content of sampled blocks checked" in err and "0 problem(s)" in err
    os.truncate(tmp_path / "pool" / "L001" / "E0002.bin", 5)
    (tmp_path / "pool" / "extra.bin").write_bytes(b"x")
    rc, out, err = cli(capsys, "pool", "check", tmp_path / "pool")
    assert rc == 1 and "2 problem(s)" in err
    flat = "".join(err.split())             # the terminal may wrap the line anywhere
    assert f"/pool/L001/E0002.bin:5bytes,pool.jsonsays{S}(truncated)" in flat
    assert "/pool/extra.bin:notpartofthepool(extrafile)" in flat
    rc, out, _ = cli(capsys, "pool", "check", tmp_path / "pool", "--json")
    rep = json.loads(out)
    assert rc == 1 and [p["kind"] for p in rep["problems"]] == ["size", "extra"]
