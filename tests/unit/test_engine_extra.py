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
