"""The agent's replay of the engine's own trace, run like an engine (issue 25, item 5): `bench
engine prepare` writes the trace, plan, record and pool of a prompt beside the model (the
bytes `bench engine trace` and `bench plan --from-gguf` write), `bench engine run --load replay`
runs the real agent over them without llama.cpp and prints the engine's line protocol, and
every `engine run` ends with the model's bytes in the page cache, experts and the rest
(mincore, checked against util-linux fincore)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="needs the engine extra: pip install '.[engine]'")
pytest.importorskip("llama_cpp", reason="needs the engine extra: pip install '.[engine]'")

from bench.cli import main  # noqa: E402
from bench.engine.gguf_model import Shape, make_model  # noqa: E402
from bench.engine.gguf_pool import model_identity  # noqa: E402
from bench.engine.gguf_read import model_facts  # noqa: E402
from bench.engine.replay_run import (Prepared, page_cache_split, prepare_replay,  # noqa: E402
                                     replay_dir, replay_key)
from bench.judge.engine_gates import parse_load, parse_tokens  # noqa: E402
from bench.matrix.load import load_matrix  # noqa: E402

SHAPE = Shape(layers=4, experts=16, k=4, expert_mib=0.25, seed=11)
PROMPT = "Experts are read from the page cache."
TOKENS = 24
PAGE = os.sysconf("SC_PAGE_SIZE")
SPLIT = re.compile(r"^page cache after decode: experts (\d+) B, the rest (\d+) B \(model: "
                   r"experts (\d+) B, the rest (\d+) B\)$", re.MULTILINE)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> tuple[Path, Path]:
    """(model, prompt file): a small model (17 MB) and the prompt, newline-wrapped as a
    file is (engine run strips it)."""
    d = tmp_path_factory.mktemp("prepare")
    model = d / "tiny.gguf"
    make_model(model, SHAPE)
    prompt = d / "prompt.txt"
    prompt.write_text(f"\n{PROMPT}\n")
    return model, prompt


def _fincore(path: Path) -> int:
    if shutil.which("fincore") is None:
        pytest.skip("needs util-linux's fincore (page-cache residency of a file)")
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


def _drop(path: Path) -> None:
    """This file's clean pages out of the page cache (not the machine's: no drop_caches)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _mtimes(d: Path) -> dict[str, int]:
    return {str(p.relative_to(d)): p.stat().st_mtime_ns for p in sorted(d.rglob("*"))
            if p.is_file()}


def test_prepare_writes_what_trace_and_plan_write_and_keeps_it(work, tmp_path, capsys):
    """The trace is `bench engine trace`'s bytes, the plan and pool `bench plan
    --from-gguf`'s; a second prepare keeps every file untouched."""
    model, _ = work
    info = prepare_replay(model, PROMPT, TOKENS)
    d = replay_dir(model)
    assert (info["trace_state"], info["pool_state"]) == ("made", "made")
    p = Prepared(d, info["key"])
    assert info["key"] == replay_key(model_identity(model), PROMPT, TOKENS)
    assert sorted(x.name for x in d.iterdir()) == sorted(
        [p.trace.name, p.plan.name, p.record.name, "pool"])
    trace = tmp_path / "t.jsonl"
    assert main(["engine", "trace", str(model), "--prompt", PROMPT, "--tokens", str(TOKENS),
                 "-o", str(trace)]) == 0
    assert p.trace.read_bytes() == trace.read_bytes()
    plan = tmp_path / "p.plan"
    assert main(["plan", str(p.trace), "-o", str(plan), "--from-gguf", str(model),
                 "--pool-out", str(tmp_path / "pool")]) == 0
    assert p.plan.read_bytes() == plan.read_bytes()
    for name in ("pool.json", "ranges.bin"):
        assert (p.pool / name).read_bytes() == (tmp_path / "pool" / name).read_bytes()
    rec = json.loads(p.record.read_text())
    assert rec["tokens"] == TOKENS and len(rec["output_tokens"]) == TOKENS
    assert rec["reads"] == TOKENS * SHAPE.layers * SHAPE.k == info["reads"]
    assert rec["logical_bytes"] == rec["reads"] * SHAPE.expert_bytes
    assert 0 < rec["distinct_experts"] <= SHAPE.layers * SHAPE.experts
    before = _mtimes(d)
    again = prepare_replay(model, PROMPT, TOKENS)
    assert (again["trace_state"], again["pool_state"]) == ("kept", "kept")
    assert _mtimes(d) == before
    capsys.readouterr()


def test_the_key_follows_the_prompt_tokens_and_model(work, tmp_path):
    model, _ = work
    ident = model_identity(model)
    keys = {replay_key(ident, PROMPT, TOKENS), replay_key(ident, PROMPT + "!", TOKENS),
            replay_key(ident, PROMPT, TOKENS + 1),
            replay_key({**ident, "mtime_ns": ident["mtime_ns"] + 1}, PROMPT, TOKENS)}
    assert len(keys) == 4 and all(re.fullmatch(r"[0-9a-f]{16}", k) for k in keys)
    assert replay_key(dict(reversed(ident.items())), PROMPT, TOKENS) == \
        replay_key(ident, PROMPT, TOKENS)          # canonical JSON: key order does not count
    # another token count beside the first: its own files, the shared pool kept
    other = prepare_replay(model, PROMPT, 8)
    assert other["key"] != replay_key(ident, PROMPT, TOKENS) and other["pool_state"] == "kept"
    assert len(other["output_tokens"]) == 8


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_replay_prints_the_engines_lines_and_its_output(agent, work, capsys, monkeypatch):
    """`--load replay` without llama.cpp (hidden: importing it fails) prints what the
    end-to-end matrix's regular expressions read, and the output of `--load mmap`."""
    model, prompt = work
    prepare_replay(model, PROMPT, TOKENS)
    e = load_matrix("end-to-end", scale="lab").engine
    base = ["engine", "run", str(model), "--prompt-file", str(prompt), "--tokens", str(TOKENS)]
    rc, mm, err = _run([*base, "--load", "mmap"], capsys)
    assert rc == 0, err
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    rc, out, err = _run([*base, "--load", "replay", "--agent", str(agent)], capsys)
    assert rc == 0, err
    print("\n" + out)
    lines = out.splitlines()
    assert lines[0].startswith("backend: bench-agent replay (pagecache) of llama.cpp's trace ")
    assert lines[1].startswith("cold load: ") and "no model load" in lines[1]
    load = parse_load(out, "", e.load_regex)
    assert load is not None and load >= 0     # from the process start: pytest's, here
    ids = parse_tokens(out, "", e.tokens_regex)
    assert ids is not None and len(ids) == TOKENS and ids == parse_tokens(mm, "", e.tokens_regex)
    m = re.search(r"^replay: (\d+) reads of (\d+) distinct experts, (\d+) bytes in [0-9.]+ s",
                  out, re.MULTILINE)
    assert m and int(m[1]) == TOKENS * SHAPE.layers * SHAPE.k
    assert int(m[3]) == int(m[1]) * SHAPE.expert_bytes
    assert SPLIT.search(out) and SPLIT.search(mm)


def test_replay_without_prepare_is_one_line_naming_prepare(agent, work, tmp_path, capsys):
    model, prompt = work
    other = tmp_path / "p.txt"
    other.write_text("A prompt nobody prepared.")
    argv = ["engine", "run", str(model), "--prompt-file", str(other), "--tokens", "5",
            "--load", "replay", "--agent", str(agent)]
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "no replay prepared" in lines[0]
    assert lines[1] == (f"fix: run bench engine prepare {model} --prompt-file {other} --tokens 5 "
                        "first (it makes the trace, plan and pool the replay reads)")
    # a prepare killed between the plan and the record: the record no longer vouches
    info = prepare_replay(model, "A prompt prepared, then broken.", 5)
    other.write_text("A prompt prepared, then broken.")
    Path(info["plan"]).write_bytes(b"BPLN half")
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and "incomplete or stale" in err and "bench engine prepare" in err
    assert prepare_replay(model, "A prompt prepared, then broken.", 5)["trace_state"] == "made"
    assert _run(argv, capsys)[0] == 0
    for bad, said in ((["--load", "replay"], "--load replay needs --agent PATH"),
                      (["--load", "mmap", "--agent", str(agent)], "--agent goes with --load "
                                                                  "replay")):
        rc, _, err = _run([*argv[:7], *bad], capsys)
        assert rc == 2 and said in err


def test_a_changed_model_is_not_prepared(agent, work, tmp_path, capsys):
    """The key names the model's bytes: a model rewritten since (here only its mtime) finds
    nothing prepared, and its prepare makes the trace and the pool again."""
    model, prompt = work
    copy = tmp_path / "copy.gguf"
    shutil.copyfile(model, copy)
    assert prepare_replay(copy, PROMPT, TOKENS)["pool_state"] == "made"
    argv = ["engine", "run", str(copy), "--prompt-file", str(prompt), "--tokens", str(TOKENS),
            "--load", "replay", "--agent", str(agent)]
    assert _run(argv, capsys)[0] == 0
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    rc, _, err = _run(argv, capsys)
    assert rc == 2 and "no replay prepared for its current bytes" in err
    info = prepare_replay(copy, PROMPT, TOKENS)
    assert (info["trace_state"], info["pool_state"]) == ("made", "made")
    assert _run(argv, capsys)[0] == 0


def test_page_cache_split_counts_what_fincore_counts(tmp_path):
    """mincore's split of a real file against fincore's total, after reading some pages of
    it cold (readahead off for the descriptor: the pages read are those asked for). Bytes,
    not pages: the last page counts up to the file's end (fincore counts it whole), and a
    page holding the start of an unaligned expert tensor splits at the tensor's start."""
    f = tmp_path / "file.bin"
    f.write_bytes(os.urandom(64 * PAGE + 100))
    facts = {"bytes": 64 * PAGE + 100, "expert_tensors": {
        "blk.0.ffn_gate_exps.weight": {"offset": 8 * PAGE, "bytes": 16 * PAGE},
        "blk.0.ffn_up_exps.weight": {"offset": 30 * PAGE + 100, "bytes": PAGE}}}
    _drop(f)
    assert _fincore(f) == 0 and page_cache_split(f, facts)["resident_bytes"] == 0
    fd = os.open(f, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for first, n in ((4, 6), (30, 1), (40, 2), (64, 1)):     # pages 4-9, 30, 40-41, 64
            os.pread(fd, n * PAGE, first * PAGE)
    finally:
        os.close(fd)
    s = page_cache_split(f, facts)
    assert s["experts_resident_bytes"] + s["rest_resident_bytes"] == _fincore(f) - PAGE + 100
    assert s["experts_resident_bytes"] == 3 * PAGE - 100        # pages 8, 9 and 30 from +100
    assert s["rest_resident_bytes"] == 6 * PAGE + 200           # 4-7, 30's first 100 B, 40,
    #                                                             41 and the last page's 100 B
    assert (s["experts_bytes"], s["rest_bytes"]) == (17 * PAGE, 47 * PAGE + 100)


def test_the_split_after_mmap_and_direct_io_runs(work, capsys):
    """After an mmap run the whole model is cached (its loader's WILLNEED), experts and the
    rest as fincore totals them; after a direct-io run from a cold file nothing of the
    experts, at most the header llama.cpp reads buffered."""
    model, prompt = work
    facts = model_facts(model)
    base = ["engine", "run", str(model), "--prompt-file", str(prompt), "--tokens", "4"]
    experts = sum(t["bytes"] for t in facts["expert_tensors"].values())
    for load in ("mmap", "direct-io"):
        _drop(model)
        rc, out, err = _run([*base, "--load", load], capsys)
        assert rc == 0, err
        m = SPLIT.search(out)
        assert m, out
        x, y, e, r = map(int, m.groups())
        print(f"\n{load}: {m[0]}")
        assert (e, r) == (experts, facts["bytes"] - experts)
        if load == "mmap":
            assert x + y == _fincore(model) and (x, y) == (e, r) and y > 0
        else:
            assert x == 0 and y <= 1 << 20


def test_prepare_command_on_the_default_model(tmp_path, capsys):
    """The CLI a matrix's prepare runs: the default model (277 MB, 3 s) made as `model make
    --reuse --mkdir` makes it, then kept with every file of the replay on the second run."""
    model = tmp_path / "pool" / "bench-tiny-moe.gguf"
    prompt = tmp_path / "p.txt"
    prompt.write_text(PROMPT)
    argv = ["engine", "prepare", str(model), "--prompt-file", str(prompt), "--tokens", "4"]
    rc, out, err = _run(argv, capsys)
    assert rc == 0, err
    print("\n" + out)
    lines = out.splitlines()
    assert len(lines) == 4 and lines[0] == f"{model}: made (276852736 bytes)"
    assert all(": made (" in ln for ln in lines)
    rc, out, err = _run([*argv, "--json"], capsys)
    assert rc == 0, err
    info = json.loads(out)
    assert {info[k] for k in ("model_state", "trace_state", "pool_state")} == {"kept"}
    assert Path(info["pool"]) == model.with_name(model.name + ".replay") / "pool"
    bad = tmp_path / "other.gguf"
    make_model(bad, Shape(layers=1, experts=2, k=1, expert_mib=0.01))
    rc, _, err = _run(["engine", "prepare", str(bad), "--prompt-file", str(prompt)], capsys)
    assert rc == 2 and "not 8 layers x 32 experts" in err       # refused, as make --reuse does
