"""`bench engine` without the engine extra: one line naming the install command, exit 2, no
traceback. The extra's modules are hidden (sys.modules[name] = None makes `import name` raise
ImportError), so this runs whether or not the extra is installed here."""

from __future__ import annotations

import sys

import pytest

from bench.cli import main
from bench.engine.gguf_model import Shape
from bench.errors import InputError


@pytest.mark.parametrize("hidden", ["gguf", "llama_cpp"])
def test_missing_extra_is_one_line(hidden, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, hidden, None)
    model = tmp_path / "m.gguf"
    if hidden == "gguf":
        argv = ["engine", "model", "make", str(model), "--layers", "1", "--experts", "2",
                "--k", "1", "--expert-mib", "0.01"]
    else:
        model.write_bytes(b"GGUF")          # refused before it is read: no llama_cpp
        argv = ["engine", "trace", str(model), "-o", str(tmp_path / "t.jsonl")]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert f"({hidden} is not installed" in err
    assert "pip install 'bench[engine]'" in err
    assert "Traceback" not in err
    assert not model.with_name("t.jsonl").exists()


@pytest.mark.parametrize("kw, word", [({"layers": 0}, "--layers"), ({"experts": 1}, "--experts"),
                                      ({"k": 5, "experts": 4}, "--k"),
                                      ({"expert_mib": 100.0}, "--expert-mib"),
                                      ({"seed": -1}, "--seed")])
def test_shape_bounds_name_the_option(kw, word):
    with pytest.raises(InputError, match=f"^{word} "):
        Shape(**kw).check()


def test_expert_slices_are_whole_pages():
    # each of an expert's three matrices is N_EMBD x n_ff f16: a multiple of 4096 bytes, so
    # page-aligned tensors give page-aligned experts (what a plan over the file relies on)
    for mib in (0.01, 0.25, 1.0, 3.3, 64.0):
        s = Shape(expert_mib=mib)
        assert s.expert_bytes % (3 * 4096) == 0
        assert s.expert_bytes <= mib * 2**20 or s.n_ff == 8


def test_seconds_since_start_counts_from_the_process_start():
    """`bench engine run`'s cold load starts at the process's start (/proc/self/stat)."""
    import subprocess
    code = ("import time; time.sleep(0.5); "
            "from bench.engine.llama_run import seconds_since_start; print(seconds_since_start())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert 0.5 <= float(out) < 30


@pytest.mark.parametrize("hidden", ["gguf", "llama_cpp"])
def test_a_builtin_engine_campaign_is_refused_before_it_starts(hidden, tmp_path, capsys,
                                                              monkeypatch):
    """The shipped end-to-end matrix runs this controller's bench: without the extra every
    run's prepare would fail, so the schedule refuses it first, in one line; a dry run and
    an engine configured on the host do not need it."""
    from bench.execute.campaign.engine_runs import check_builtin
    from bench.hosts.inventory import Host, render_host_toml
    from bench.matrix.engine_cells import parse_engine
    from bench.matrix.load import load_matrix
    monkeypatch.setitem(sys.modules, hidden, None)
    with pytest.raises(InputError, match=f"{hidden} is not installed"):
        check_builtin(load_matrix("end-to-end", scale="lab").engine)
    check_builtin(parse_engine({
        "command": ["/opt/e/decode", "{policy_args}"], "backend": "b", "prompts": {"p": "/p"},
        "tokens_regex": "^ids: (.*)$", "load_regex": "^load: (.*)$",
        "policies": {"admit": {"args": ["--admit"]}, "nocache": {"args": ["--nocache"]}}},
        "t.toml"))
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local", tags={"machine": "c"},
        pool_dir=str(tmp_path / "pool"), work_dir=str(tmp_path / "work"))))
    common = ["schedule", "--matrix", "end-to-end", "--scale", "lab", "--hosts", "local",
              "--hosts-dir", str(hosts), "--db", f"sqlite:///{tmp_path}/b.db", "--seed", "1"]
    assert main(common + ["--dry-run"]) == 0
    capsys.readouterr()
    assert main(common) == 2
    err = capsys.readouterr().err
    assert f"({hidden} is not installed" in err and "pip install 'bench[engine]'" in err
    assert not (tmp_path / "work").exists()           # nothing ran


def test_replay_needs_no_llama_cpp_and_names_prepare(tmp_path, capsys, monkeypatch):
    """`engine run --load replay` reads the prepared files, not llama.cpp (hidden here): with
    nothing prepared it says which prepare to run, in one line and its fix."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    prompt = tmp_path / "p.txt"
    prompt.write_text("hello\n")
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\nexit 0\n")
    agent.chmod(0o755)
    argv = ["engine", "run", str(model), "--prompt-file", str(prompt), "--tokens", "3"]
    assert main([*argv, "--load", "replay", "--agent", str(agent)]) == 2
    err = capsys.readouterr().err
    assert "no replay prepared for its current bytes" in err and "Traceback" not in err
    assert f"fix: run bench engine prepare {model} --prompt-file {prompt} --tokens 3" in err
    assert main([*argv, "--load", "replay"]) == 2
    assert "--load replay needs --agent PATH" in capsys.readouterr().err
    assert main([*argv, "--agent", str(agent)]) == 2
    assert "--agent goes with --load replay" in capsys.readouterr().err


def test_replay_key_is_canonical_and_follows_every_input():
    from bench.engine.replay_run import replay_key
    ident = {"bytes": 10, "mtime_ns": 1, "head_sha256": "ab"}
    key = replay_key(ident, "p", 4)
    assert len(key) == 16 and key == replay_key(dict(reversed(ident.items())), "p", 4)
    assert len({key, replay_key(ident, "q", 4), replay_key(ident, "p", 5),
                replay_key({**ident, "bytes": 11}, "p", 4)}) == 4


@pytest.mark.parametrize("page", [4096, 16384, 65536])
def test_the_page_cache_split_is_in_bytes_whatever_the_page_size(page):
    """A model laid out at 4 KiB alignment on a host of 16 or 64 KiB pages (arm64): pages hold
    the end of one tensor and the start of the next, and every page resident splits exactly
    into the model's expert bytes and the rest, never more than either."""
    import numpy as np

    from bench.engine.replay_run import split_pages
    size = 40 * 4096 + 123
    facts = {"bytes": size, "expert_tensors": {
        "a": {"offset": 3 * 4096, "bytes": 5 * 4096}, "b": {"offset": 9 * 4096, "bytes": 17 * 4096},
        "c": {"offset": 27 * 4096, "bytes": 4096}}}
    n = -(-size // page)
    s = split_pages(np.ones(n, dtype=bool), facts, page)
    assert (s["experts_resident_bytes"], s["rest_resident_bytes"]) == (23 * 4096, size - 23 * 4096)
    assert (s["experts_bytes"], s["rest_bytes"]) == (23 * 4096, size - 23 * 4096)
    none = split_pages(np.zeros(n, dtype=bool), facts, page)
    assert none["resident_bytes"] == 0
    first = np.zeros(n, dtype=bool)
    first[0] = True             # the first page: tensor a's start when it lies in it
    s = split_pages(first, facts, page)
    assert s["experts_resident_bytes"] == max(0, min(page, 8 * 4096) - 3 * 4096) + max(
        0, min(page, 26 * 4096) - 9 * 4096) + max(0, min(page, 28 * 4096) - 27 * 4096)
    assert s["resident_bytes"] == min(page, size)
