"""A real engine end to end on this machine (issue 25, items 1-2): a tiny MoE GGUF made by
`bench engine model make`, loaded and decoded by llama.cpp (llama-cpp-python, built from
source), traced through its evaluation callback, and read back by `bench trace parse/stats`
and `bench sim`. Skips, naming it, where the engine extra is not installed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf", reason="needs the engine extra: pip install '.[engine]'")
pytest.importorskip("llama_cpp", reason="needs the engine extra: pip install '.[engine]'")

from bench.cli import main  # noqa: E402
from bench.engine.gguf_model import Shape, make_model  # noqa: E402
from bench.engine.gguf_read import expert_ranges, model_facts, router_weights  # noqa: E402
from bench.engine.llama_run import decode  # noqa: E402
from bench.engine.trace_out import TOPK  # noqa: E402

SHAPE = Shape(layers=4, experts=16, k=4, expert_mib=0.25, seed=7)
PROMPT = "Experts are read from the page cache."
TOKENS = 24


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("engine") / "tiny.gguf"
    make_model(out, SHAPE)
    return out


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_model_make_is_deterministic_and_expert_dominated(model, tmp_path, capsys):
    again = tmp_path / "again.gguf"
    other = tmp_path / "other.gguf"
    assert main(["engine", "model", "make", str(again), "--layers", "4", "--experts", "16",
                 "--k", "4", "--expert-mib", "0.25", "--seed", "7"]) == 0
    assert main(["engine", "model", "make", str(other), "--layers", "4", "--experts", "16",
                 "--k", "4", "--expert-mib", "0.25", "--seed", "8"]) == 0
    capsys.readouterr()
    assert _sha(again) == _sha(model)           # same shape and seed: the same bytes
    assert _sha(other) != _sha(model)           # the seed reaches the weights
    f = model_facts(model)
    assert (f["arch"], f["layers"], f["experts"], f["k"]) == ("llama", 4, 16, 4)
    assert f["expert_bytes"] == SHAPE.expert_bytes
    # every expert tensor starts on a page and one expert's slice is whole pages
    for t in f["expert_tensors"].values():
        assert t["offset"] % 4096 == 0 and t["stride"] % 4096 == 0
        assert t["bytes"] == 16 * t["stride"]
    experts = 4 * 16 * SHAPE.expert_bytes
    assert experts / f["bytes"] > 0.7            # the default (1 MiB experts) is 96.6%


def test_reuse_keeps_the_same_model_and_refuses_anything_else(model, tmp_path, capsys):
    """`make --reuse` (what the end-to-end matrix's prepare runs before every run): a model
    bench made with this shape and seed is kept untouched; another shape, a truncated model,
    a hostile header or a file bench did not make is refused in one line, never replaced."""
    args = ["--layers", "4", "--experts", "16", "--k", "4", "--expert-mib", "0.25"]
    out = tmp_path / "new" / "dir" / "m.gguf"
    assert main(["engine", "model", "make", str(out), *args, "--seed", "7", "--reuse"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["engine", "model", "make", str(out), *args, "--seed", "7", "--reuse",
                 "--mkdir"]) == 0
    assert _sha(out) == _sha(model)
    capsys.readouterr()
    before = out.stat().st_mtime_ns
    assert main(["engine", "model", "make", str(out), *args, "--seed", "7", "--reuse",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kept"] is True
    assert out.stat().st_mtime_ns == before                 # not rewritten
    assert main(["engine", "model", "make", str(out), *args, "--seed", "8", "--reuse"]) == 2
    err = capsys.readouterr().err
    assert "4 layers x 16 experts (top-4) of 0.25 MiB, seed 7, not 4 layers" in err
    whole = out.read_bytes()
    prompt = tmp_path / "p.txt"
    prompt.write_text(PROMPT)
    for bad in (whole[: len(whole) // 2], whole[:100_000], b"GGUF\x03\x00\x00\x00" + b"\xff" * 16,
                b"", b"not a model\n"):
        out.write_bytes(bad)
        assert main(["engine", "model", "make", str(out), *args, "--seed", "7", "--reuse"]) == 2
        err = capsys.readouterr().err
        assert "not a whole model bench made" in err and "Traceback" not in err
        assert out.read_bytes() == bad                       # refused, not replaced
        if bad:             # the readers of a model say so in one line too
            assert main(["engine", "trace", str(out), "-o", str(tmp_path / "t.jsonl")]) == 2
            err = capsys.readouterr().err
            assert "not a GGUF file gguf can read" in err and "Traceback" not in err
            # the engine itself hands the file to llama.cpp (no second reader in its load)
            assert main(["engine", "run", str(out), "--prompt-file", str(prompt)]) != 0
            err = capsys.readouterr().err
            assert "cannot load it" in err and "Traceback" not in err


def test_expert_ranges_hold_the_experts_weights(model):
    """Each (layer, expert)'s byte ranges, read raw from the file, are that expert's rows of
    the three expert tensors as gguf's reader sees them (the ranges a plan over the GGUF
    would replay); the ranges of all experts tile the expert tensors without overlap."""
    import gguf
    f = model_facts(model)
    tensors = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(model)).tensors}
    seen = []
    with open(model, "rb") as fh:
        for layer in range(SHAPE.layers):
            for e in range(SHAPE.experts):
                ranges = expert_ranges(f, layer, e)
                assert len(ranges) == 3 and all(n == SHAPE.expert_bytes // 3 for _, n in ranges)
                seen += ranges
                for (off, n), name in zip(ranges, ("ffn_gate_exps", "ffn_up_exps",
                                                   "ffn_down_exps")):
                    fh.seek(off)
                    raw = np.frombuffer(fh.read(n), dtype=np.float16)
                    want = tensors[f"blk.{layer}.{name}.weight"][e]
                    assert np.array_equal(raw, want.reshape(-1))
    seen.sort()
    assert all(a + n <= b for (a, n), (b, _) in zip(seen, seen[1:]))
    assert sum(n for _, n in seen) == sum(t["bytes"] for t in f["expert_tensors"].values())


def test_greedy_decode_is_deterministic(model):
    runs = [decode(model, PROMPT, TOKENS, threads=t) for t in (2, 2, 1)]
    a = runs[0]
    assert len(a.output_tokens) == TOKENS
    assert len(set(a.output_tokens)) > 1, "a degenerate output (one token repeated)"
    for b in runs[1:]:                           # a second load, and another thread count
        assert b.prompt_tokens == a.prompt_tokens
        assert b.output_tokens == a.output_tokens
        assert b.output_hash == a.output_hash
    assert a.tokens_per_s > 0


def test_traced_experts_match_router_recomputed_from_the_file(model):
    """The traced top-k against an independent read: the router's input (ffn_norm-L, the
    callback's copy of another tensor) times the router matrix read from the GGUF by gguf's
    reader (not llama.cpp), its top-k taken in numpy. Sets must agree but where the k-th and
    (k+1)-th logits are closer than float rounding can separate."""
    dec = decode(model, PROMPT, TOKENS, prefixes=(TOPK, "ffn_norm-"))
    w = router_weights(model)
    k = SHAPE.k
    compared = close = 0
    for cap in dec.captures:
        for layer in range(SHAPE.layers):
            topk = cap.tensors[f"{TOPK}{layer}"]
            x = cap.tensors[f"ffn_norm-{layer}"]
            # the last layer computes only the output rows (llama.cpp's inp_out_ids)
            x = x[-topk.shape[0]:]
            logits = x @ w[layer].T
            for row, sel in zip(logits, topk):
                order = np.argsort(-row, kind="stable")
                if set(order[:k]) != set(int(e) for e in sel):
                    gap = row[order[k - 1]] - row[order[k]]
                    assert gap < 1e-4 * max(1.0, abs(row[order[k - 1]])), (layer, sel, order[:k])
                    close += 1
                compared += 1
    assert compared >= TOKENS * SHAPE.layers
    assert close <= compared // 100


def test_trace_reads_in_trace_stats_sim_and_plan(model, tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    assert main(["engine", "trace", str(model), "--prompt", PROMPT, "--tokens", str(TOKENS),
                 "-o", str(trace), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tokens"] == TOKENS and info["records"] == TOKENS * SHAPE.layers
    lines = [json.loads(ln) for ln in trace.read_text().splitlines()]
    assert lines[0]["k"] == SHAPE.k and lines[0]["experts_per_layer"] == SHAPE.experts
    prefill = [r for r in lines[1:] if r.get("phase") == "prefill"]
    assert len(prefill) == SHAPE.layers and all(r["n_tokens"] > 1 for r in prefill)

    assert main(["trace", "parse", str(trace), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    s = s[0] if isinstance(s, list) else s
    assert s["iterations"] == TOKENS and s["normal"] == TOKENS
    assert s["accepted_tokens"] == TOKENS
    assert s["passes"] == TOKENS * SHAPE.layers
    assert s["reads"] == TOKENS * SHAPE.layers * SHAPE.k
    assert s["prefill_records_excluded"] == SHAPE.layers

    assert main(["trace", "stats", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["sim", str(trace), "--budgets", "4,8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["plan", str(trace), "-o", str(tmp_path / "t.bpln"), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["reads"] == s["reads"]
    assert p["logical_bytes"] == s["reads"] * SHAPE.expert_bytes   # the header's expert bytes
    # the same prompt traced again: the same trace, byte for byte
    again = tmp_path / "again.jsonl"
    assert main(["engine", "trace", str(model), "--prompt", PROMPT, "--tokens", str(TOKENS),
                 "-o", str(again)]) == 0
    assert again.read_bytes() == trace.read_bytes()
