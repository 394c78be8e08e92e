"""The host-side pool writer (agents/hostrunner/poolwriter.py, `runner.py pool`) on a temporary
directory: made, resumed after a partial write, present, the refusals, and agreement with the
controller's bench.plan.pool (reader, header check, byte-identical headers and pool.json). No root
needed: none of these tests is marked `root`, so they run as any user."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from bench.agents.hostrunner import poolfmt, poolwriter
from bench.errors import PoolError
from bench.plan.pool import PoolSpec, check_pool, expert_header, load_manifest, make_pool
from tests.support.runner import PYTHON, RUNNER

L, E, S = 3, 5, 70_000          # 15 experts, not a multiple of anything in particular
SEED = 7


def tree(d: Path) -> dict[str, tuple[int, str, int]]:
    """relative path -> (size, sha256, inode) of every file: 'untouched' is comparable."""
    return {str(p.relative_to(d)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest(),
                                    p.stat().st_ino)
            for p in sorted(d.rglob("*")) if p.is_file()}


def expert_files(d: Path, template=poolfmt.DEFAULT_PATH):
    for layer in range(L):
        for expert in range(E):
            yield layer, expert, d / template.format(layer=layer, expert=expert)


def cli(*args) -> tuple[int, list[str]]:
    r = subprocess.run([PYTHON, str(RUNNER), "pool", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout.splitlines()


def assert_complete_pool(d: Path, seed=SEED, template=poolfmt.DEFAULT_PATH):
    for layer, expert, p in expert_files(d, template):
        data = p.read_bytes()
        assert len(data) == S, p
        assert data[:32] == poolfmt.expert_header(layer, expert, S, seed), p
        assert len(set(data[32:4096])) > 200, "payload must be real random data"
    assert not list(d.rglob("*.tmp")), "no temp file may be left"
    man = json.loads((d / "pool.json").read_text())
    sums = man.pop("sums")
    assert man == {"layers": L, "experts_per_layer": E, "expert_bytes": S, "path": template,
                   "seed": seed, "format": 1, "complete": True}
    # pool.sums: one digest of each file's sampled blocks, its sha256 in pool.json
    text = (d / "pool.sums").read_bytes()
    assert sums == {"file": "pool.sums", "sha256": hashlib.sha256(text).hexdigest(),
                    "block": 4096, "blocks": 4, "digest": "sha256-128"}
    lines = text.decode().splitlines()
    assert len(lines) == L * E
    for (layer, expert, p), line in zip(expert_files(d, template), lines):
        data, h = p.read_bytes(), hashlib.sha256()
        for off in poolfmt.sample_offsets(layer, expert, S, seed):
            block = data[off:off + 4096]
            h.update(off.to_bytes(8, "little") + len(block).to_bytes(4, "little") + block)
        assert line == h.hexdigest()[:32], p


# --------------------------------------------------------------------------- made / present

def test_made_then_present(tmp_path):
    d = tmp_path / "pool"
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert rc == 0 and res["ok"] is True and res["status"] == "made", res
    assert (res["written"], res["kept"], res["bytes"]) == (L * E, 0, L * E * S)
    assert isinstance(res["seconds"], float) and res["seconds"] >= 0
    assert_complete_pool(d)
    before = tree(d)
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert rc == 0 and res == {"ok": True, "status": "present", "written": 0, "kept": L * E,
                               "bytes": L * E * S, "seconds": 0.0}
    assert tree(d) == before, "a present pool is not touched"


def test_made_into_an_existing_empty_directory_with_another_template(tmp_path):
    d = tmp_path / "pool"
    d.mkdir()
    tmpl = "layer{layer}/expert_{expert:03d}.dat"
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED, tmpl)
    assert rc == 0 and res["status"] == "made", res
    assert_complete_pool(d, template=tmpl)
    assert (d / "layer2" / "expert_004.dat").is_file()


# --------------------------------------------------------------------------- resumed

class Interrupted(Exception):
    pass


def test_resumed_after_an_interrupted_write(tmp_path, monkeypatch):
    """The writer dies after 6 files: pool.json says incomplete (the controller refuses it),
    the next call keeps those 6 and writes the rest."""
    d = tmp_path / "pool"
    real, calls = poolwriter.write_expert, []

    def dying(path, header, size):
        if len(calls) == 6:
            Path(path + ".tmp").write_bytes(header[:10])      # a torn temp file
            raise Interrupted
        calls.append(path)
        real(path, header, size)
    monkeypatch.setattr(poolwriter, "write_expert", dying)
    with pytest.raises(Interrupted):
        poolwriter.write_pool(str(d), L, E, S, SEED)
    assert json.loads((d / "pool.json").read_text())["complete"] is False
    with pytest.raises(PoolError, match="incomplete"):
        check_pool(d)
    monkeypatch.setattr(poolwriter, "write_expert", real)
    kept = {p: (Path(p).stat().st_ino) for p in calls}
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert rc == 0 and res["status"] == "resumed", res
    assert (res["written"], res["kept"]) == (L * E - 6, 6)
    assert {p: Path(p).stat().st_ino for p in calls} == kept, "complete files are kept"
    assert_complete_pool(d)


def test_resume_rewrites_damaged_files_only(tmp_path):
    d = tmp_path / "pool"
    poolwriter.write_pool(str(d), L, E, S, SEED)
    poolfmt.write_manifest(str(d), poolfmt.manifest_fields(L, E, S, seed=SEED), complete=False)
    files = [p for _, _, p in expert_files(d)]
    files[0].unlink()                                       # missing
    with files[1].open("r+b") as f:                         # short
        f.truncate(S - 1)
    with files[2].open("r+b") as f:                         # wrong header (expert number)
        f.seek(12)
        f.write(b"\x63")
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert rc == 0 and res["status"] == "resumed" and (res["written"], res["kept"]) == (3, 12)
    assert_complete_pool(d)


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("change", [dict(layers=L + 1), dict(experts=E - 1),
                                    dict(expert_bytes=S * 2), dict(seed=SEED + 1),
                                    dict(template="E{expert}-L{layer}.bin")])
def test_a_different_pool_is_refused_untouched(tmp_path, change):
    d = tmp_path / "pool"
    poolwriter.write_pool(str(d), L, E, S, SEED)
    before = tree(d)
    args = dict(layers=L, experts=E, expert_bytes=S, seed=SEED,
                template=poolfmt.DEFAULT_PATH) | change
    res, rc = poolwriter.write_pool(str(d), args["layers"], args["experts"],
                                    args["expert_bytes"], args["seed"], args["template"])
    assert rc == 3 and res["ok"] is False, res
    assert res["reason"] == (f"{d} holds a different pool ({L}x{E}x{S} B, seed {SEED}, path "
                             f"{poolfmt.DEFAULT_PATH}); refusing to overwrite it")
    assert res["have"] == poolfmt.manifest_fields(L, E, S, seed=SEED)
    assert tree(d) == before


@pytest.mark.parametrize("text", ["{not json", '{"layers": 3}', '["a list"]',
                                  '{"layers": "x", "experts_per_layer": 1, "expert_bytes": 1}'])
def test_an_unreadable_manifest_is_refused_untouched(tmp_path, text):
    d = tmp_path / "pool"
    d.mkdir()
    (d / "pool.json").write_text(text)
    (d / "keep.bin").write_bytes(b"x")
    before = tree(d)
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert rc == 3 and res["ok"] is False, res
    assert res["reason"].startswith(f"{d / 'pool.json'}: unreadable pool manifest (")
    assert res["reason"].endswith("); refusing to touch it")
    assert tree(d) == before


def test_a_non_empty_directory_without_a_pool_is_refused_untouched(tmp_path):
    d = tmp_path / "data"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "precious.txt").write_text("keep me\n")
    before = tree(d)
    res, rc = poolwriter.write_pool(str(d), L, E, S, SEED)
    assert (rc, res) == (3, {"ok": False, "reason": f"{d} is not empty and holds no pool.json; "
                                                    "refusing to write into it"})
    assert tree(d) == before


@pytest.mark.parametrize("args,why", [((0, E, S), "layers must be positive"),
                                      ((L, -1, S), "experts_per_layer must be positive"),
                                      ((L, E, 31), "at least 32"),
                                      ((L, E, S, 0, "L{layer}.bin"), "template"),
                                      ((L, E, S, 0, "../{layer}/{expert}"), "inside the pool"),
                                      ((L, E, S, 0, "{layer}/{expert}/{x}"), "template")])
def test_arguments_no_pool_can_have_are_usage_errors(tmp_path, args, why):
    d = tmp_path / "pool"
    res, rc = poolwriter.write_pool(str(d), *args)
    assert rc == 2 and res["ok"] is False and why in res["reason"], res
    assert not d.exists()


# --------------------------------------------------------------------------- the command

def test_runner_pool_command(tmp_path):
    d = tmp_path / "pool"
    geometry = ["--layers", L, "--experts", E, "--expert-bytes", S, "--seed", SEED]
    rc, lines = cli("--dir", d, *geometry, "--work-dir", tmp_path / "wd")
    assert rc == 0 and len(lines) == 1, lines
    assert json.loads(lines[0])["status"] == "made"
    assert_complete_pool(d)
    rc, lines = cli("--dir", d, *geometry)
    assert rc == 0 and json.loads(lines[0])["status"] == "present"
    rc, lines = cli("--dir", d, "--layers", L, "--experts", E, "--expert-bytes", S)
    assert rc == 3 and "seed 7" in json.loads(lines[0])["reason"]           # seed 0 differs
    rc, lines = cli("--dir", tmp_path / "p2", *geometry, "--template", "flat.bin")
    assert rc == 2 and "template" in json.loads(lines[0])["reason"]
    assert not (tmp_path / "wd").exists(), "--work-dir is accepted, not used"


# --------------------------------------------------------------------------- the controller

def test_the_controller_reads_what_the_host_writer_makes(tmp_path):
    """bench.plan.pool's reader, header check and verifier accept the host's pool; headers are
    byte-identical to what bench.plan.pool.make_pool writes for the same geometry and seed, and
    pool.json too but for the digest of the sampled blocks."""
    host, ctl = tmp_path / "host", tmp_path / "ctl"
    poolwriter.write_pool(str(host), L, E, S, SEED)
    spec = PoolSpec(L, E, S, seed=SEED)
    make_pool(ctl, spec)
    assert check_pool(host) == spec and load_manifest(host) == (spec, True)
    # pool.json alike but for the digest of pool.sums (the payload bytes differ by design)
    man_host, man_ctl = (json.loads((x / "pool.json").read_text()) for x in (host, ctl))
    assert man_host["sums"].pop("sha256") != man_ctl["sums"].pop("sha256")
    assert man_host == man_ctl
    for layer, expert, p in expert_files(host):
        head = p.read_bytes()[:poolfmt.HEADER.size]
        assert head == expert_header(spec, layer, expert)
        assert head == (ctl / spec.relpath(layer, expert)).read_bytes()[:poolfmt.HEADER.size]
        assert p.stat().st_size == (ctl / spec.relpath(layer, expert)).stat().st_size
    # the controller's writer sees every host-written file as complete (its header check)
    assert make_pool(host, spec)["kept"] == L * E
    # and the host writer sees the controller's pool as present
    res, rc = poolwriter.write_pool(str(ctl), L, E, S, SEED)
    assert rc == 0 and res["status"] == "present"


def test_one_format_definition_for_controller_and_host():
    import bench.plan.pool as ctl
    assert (ctl.MAGIC, ctl.HEADER.format, ctl.HEADER.size, ctl.DEFAULT_PATH, ctl.MANIFEST) == \
        (poolfmt.MAGIC, poolfmt.HEADER.format, 32, poolfmt.DEFAULT_PATH, poolfmt.MANIFEST)
