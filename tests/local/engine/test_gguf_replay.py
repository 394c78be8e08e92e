"""The replay of the engine's own reads (issue 25, item 3): a tiny MoE GGUF made by `bench
engine model make` on an ext4 loop device, traced through llama.cpp by `bench engine trace`,
planned by `bench plan --from-gguf` (a pool that is the model file itself) and replayed by the
real agent. With readahead off the block layer reads exactly each distinct expert's ranges
once (the pages llama.cpp reads for those experts); O_DIRECT reads every expert of the plan
from the device. A pool that no longer matches its model, or whose ranges lie, is refused
with one line before anything is measured."""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="needs the engine extra: pip install '.[engine]'")
pytest.importorskip("llama_cpp", reason="needs the engine extra: pip install '.[engine]'")

from bench.cli import main  # noqa: E402
from bench.engine.gguf_read import expert_ranges, model_facts  # noqa: E402
from bench.plan.planfile import read_plan  # noqa: E402
from tests.support import nativelib as nl  # noqa: E402

ARGS = ["--layers", "4", "--experts", "16", "--k", "4", "--expert-mib", "0.25", "--seed", "3"]
TOKENS = 24
# ext4 reads a few metadata blocks (extent tree, inode) for a file it has not opened since the
# drop; nothing else touches this private device
METADATA_SLACK = 256 << 10


@pytest.fixture(scope="module")
def gguf_plan(tmp_path_factory):
    """(loop fs, model, plan, pool dir, plan --json info): the real producers, in order."""
    with nl.loopfs_or_skip(256 << 20, "bench-gguf-") as fs:
        work = tmp_path_factory.mktemp("gguf")
        model = fs.mnt / "tiny.gguf"
        with contextlib.redirect_stdout(None):
            assert main(["engine", "model", "make", str(model), *ARGS]) == 0
            trace = work / "t.jsonl"
            assert main(["engine", "trace", str(model), "--prompt", "Pages of experts.",
                         "--tokens", str(TOKENS), "-o", str(trace)]) == 0
        yield fs, model, trace, work


def _plan(gguf_plan, capsys, *extra) -> tuple[Path, Path, dict]:
    fs, model, trace, work = gguf_plan
    capsys.readouterr()
    plan = work / "t.bpln"
    assert main(["plan", str(trace), "-o", str(plan), "--from-gguf", str(model), "--json",
                 *extra]) == 0
    info = json.loads(capsys.readouterr().out)
    return plan, Path(info["pool"]), info


@contextlib.contextmanager
def readahead_off(dev: str):
    knob = Path(f"/sys/block/{dev}/queue/read_ahead_kb")
    old = knob.read_text().strip()
    knob.write_text("0\n")
    try:
        yield
    finally:
        knob.write_text(old + "\n")


def test_the_plan_writes_a_pool_over_the_model(gguf_plan, capsys):
    fs, model, trace, work = gguf_plan
    plan, pool, info = _plan(gguf_plan, capsys)
    facts = model_facts(model)
    assert pool == work / "t.pool" and info["pool_kind"] == "gguf"
    assert info["expert_bytes"] == facts["expert_bytes"] and info["experts_share"] > 0.5
    m = json.loads((pool / "pool.json").read_text())
    assert m["kind"] == "gguf" and m["file"] == str(model.resolve())
    assert m["file_bytes"] == model.stat().st_size and m["complete"] is True
    blob = (pool / "ranges.bin").read_bytes()
    assert blob[:4] == b"BRNG" and struct.unpack_from("<IIII", blob, 4) == (1, 4, 16, 3)
    pairs = list(struct.iter_unpack("<QQ", blob[24:]))
    assert pairs[3 * 17:3 * 18] == expert_ranges(facts, 1, 1)      # (layer 1, expert 1)
    p = read_plan(plan)
    assert (p.layers, p.experts_per_layer, p.expert_bytes) == (4, 16, facts["expert_bytes"])
    assert p.meta["pool"] == {"kind": "gguf", "model": str(model),
                              "model_bytes": facts["bytes"]}


def test_replay_reads_exactly_the_engines_pages_of_each_distinct_expert(
        agent, gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    plan, pool, info = _plan(gguf_plan, capsys)
    p = read_plan(plan)
    distinct = len(p.distinct_experts())
    snaps = tmp_path / "snaps"
    with readahead_off(fs.dev):
        nl.drop_caches()
        r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--threads", "2",
                          "--passes", "1", "--snapshot-dir", snaps,
                          "--snapshot-file", "/proc/diskstats"])
        assert r.rc == 0, r.stderr
        read = nl.snapshot_device_bytes(snaps, 0, fs.dev)
    s = r.summary
    assert (s["pool_kind"], s["fd_strategy"], s["files_open"]) == ("gguf", "one-file", 1)
    assert s["plan_bytes"] == p.reads * p.expert_bytes
    assert sum(rec["bytes"] for rec in r.records) == p.reads * p.expert_bytes
    want = distinct * p.expert_bytes            # each distinct expert's ranges, once
    print(f"\ngguf replay: {p.reads} reads of {distinct} distinct experts, device "
          f"{read} B, distinct ranges {want} B, ratio {read / want:.4f}")
    assert want <= read <= want + METADATA_SLACK, (read, want)


def test_direct_io_reads_every_expert_of_the_plan_from_the_device(
        agent, gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    plan, pool, _ = _plan(gguf_plan, capsys)
    p = read_plan(plan)
    snaps = tmp_path / "snaps"
    nl.drop_caches()
    r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--threads", "2", "--passes",
                      "1", "--mode", "nocache", "--nocache", "direct", "--snapshot-dir", snaps,
                      "--snapshot-file", "/proc/diskstats"])
    if r.rc == nl.EXIT_SKIP:
        pytest.skip(f"this file system refuses O_DIRECT: {r.summary and r.summary['reason']}")
    assert r.rc == 0, r.stderr
    read = nl.snapshot_device_bytes(snaps, 0, fs.dev)
    assert p.reads * p.expert_bytes <= read <= p.reads * p.expert_bytes + METADATA_SLACK


def _refused(agent, pool: Path, plan: Path) -> str:
    r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--passes", "1"])
    assert r.rc == nl.EXIT_FAIL and r.summary and not r.records, (r.rc, r.stdout, r.stderr)
    assert "\n" not in r.summary["reason"]
    return r.summary["reason"]


def test_a_pool_that_no_longer_matches_its_model_is_refused(agent, gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    plan, pool, _ = _plan(gguf_plan, capsys, "--pool-out", str(tmp_path / "pool"))
    manifest = json.loads((pool / "pool.json").read_text())
    blob = (pool / "ranges.bin").read_bytes()

    def with_manifest(**change) -> None:
        (pool / "pool.json").write_text(json.dumps({**manifest, **change}))

    with_manifest(file_bytes=manifest["file_bytes"] + 4096)
    assert "has %d bytes, pool says" % manifest["file_bytes"] in _refused(agent, pool, plan)
    with_manifest(file=str(tmp_path / "gone.gguf"))
    assert "cannot open model file" in _refused(agent, pool, plan)
    with_manifest(ranges="../ranges.bin")
    assert "bad ranges file name" in _refused(agent, pool, plan)
    with_manifest(kind="zip")
    assert "kind is neither files nor gguf" in _refused(agent, pool, plan)
    with_manifest()
    (pool / "ranges.bin").write_bytes(blob[:-16])
    assert "bytes, 4 x 16 experts x 3 ranges need" in _refused(agent, pool, plan)
    # one range of L0/E2 pointed past the end of the file
    bad = bytearray(blob)
    struct.pack_into("<Q", bad, 24 + 16 * 6, manifest["file_bytes"])
    (pool / "ranges.bin").write_bytes(bytes(bad))
    assert "range 0 of L0/E2" in _refused(agent, pool, plan)
    # two ranges of one expert that overlap (and so no longer sum to the expert's bytes)
    bad = bytearray(blob)
    off0, _ = struct.unpack_from("<QQ", blob, 24)
    struct.pack_into("<Q", bad, 24 + 16, off0)
    (pool / "ranges.bin").write_bytes(bytes(bad))
    assert "range 1 of L0/E0" in _refused(agent, pool, plan)


def test_plan_from_gguf_refuses_a_trace_of_another_shape(gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    other = tmp_path / "other.gguf"
    with contextlib.redirect_stdout(None):
        assert main(["engine", "model", "make", str(other), "--layers", "2", "--experts", "8",
                     "--k", "2", "--expert-mib", "0.25"]) == 0
    capsys.readouterr()
    assert main(["plan", str(trace), "-o", str(tmp_path / "p.bpln"), "--from-gguf",
                 str(other)]) == 2
    err = capsys.readouterr().err
    assert "the trace has 4 layers x 16 experts, the model" in err and "2 x 8" in err
    assert not (tmp_path / "p.pool").exists() and not (tmp_path / "p.bpln").exists()
    assert main(["plan", str(trace), "-o", str(tmp_path / "p.bpln"), "--pool-out",
                 str(tmp_path / "x")]) == 2
    assert "--pool-out goes with --from-gguf" in capsys.readouterr().err


def test_pool_check_names_what_changed_in_a_pool_over_a_gguf(gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(model, copy)
    capsys.readouterr()
    assert main(["plan", str(trace), "-o", str(tmp_path / "p.bpln"), "--from-gguf",
                 str(copy)]) == 0
    pool = tmp_path / "p.pool"
    capsys.readouterr()
    assert main(["pool", "check", str(pool)]) == 0
    assert "over the model" in capsys.readouterr().err     # views.say: a message, on stderr
    with copy.open("r+b") as f:               # the model changes in its first MiB
        f.seek(100)
        f.write(b"\xff")
    (pool / "stray").write_text("x")
    ranges = bytearray((pool / "ranges.bin").read_bytes())
    ranges[30] ^= 1
    (pool / "ranges.bin").write_bytes(bytes(ranges))
    assert main(["pool", "check", str(pool), "--json"]) == 1
    rep = json.loads(capsys.readouterr().out)
    kinds = {(p["file"], p["kind"]) for p in rep["problems"]}
    assert kinds == {(str(copy), "content"), ("ranges.bin", "content"), ("stray", "extra")}
    assert main(["pool", "check", str(pool)]) == 1
    out = capsys.readouterr().err
    assert f"\n{copy}: its first MiB differs" in "\n" + out and "3 problem(s)" in out


def _resident(path: Path) -> int:
    """Bytes of the file in the page cache (util-linux fincore)."""
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def test_load_modes_admit_the_whole_model_or_none_of_it(gguf_plan):
    """What the engine reads at load, cold, for each llama.cpp load mode (the admission pair
    of issue 25 item 4): mmap reads and admits the whole file (its loader madvises WILLNEED
    over the mapping), buffered read admits it too, direct-io reads it past the page cache.
    The output is the same in every mode."""
    if shutil.which("fincore") is None:
        pytest.skip("needs util-linux's fincore (page-cache residency of a file)")
    from bench.engine.llama_run import decode
    fs, model, trace, work = gguf_plan
    size = model.stat().st_size
    seen = {}
    for load in ("mmap", "read", "direct-io"):
        nl.drop_caches()
        before = nl.device_bytes_read(fs.dev)
        d = decode(model, "Pages of experts.", 8, load=load)
        seen[load] = (nl.device_bytes_read(fs.dev) - before, _resident(model), d.output_hash)
        print(f"\nload {load}: device {seen[load][0]} B, resident {seen[load][1]} B of "
              f"{size} B")
    assert len({h for _, _, h in seen.values()}) == 1
    for load in ("mmap", "read"):
        device, resident, _ = seen[load]
        assert size <= device <= size + METADATA_SLACK and resident == size, (load, seen)
    device, resident, _ = seen["direct-io"]
    assert size * 0.95 <= device <= size + METADATA_SLACK, seen
    assert resident <= 1 << 20, seen       # the header, read buffered; no tensor data


def test_an_unknown_load_mode_is_one_line(gguf_plan, capsys, tmp_path):
    fs, model, trace, work = gguf_plan
    capsys.readouterr()
    assert main(["engine", "trace", str(model), "-o", str(tmp_path / "t.jsonl"),
                 "--load", "zip"]) == 2
    err = capsys.readouterr().err
    assert "--load 'zip': one of auto, read, mmap, direct-io" in err and "Traceback" not in err
    assert not (tmp_path / "t.jsonl").exists()
