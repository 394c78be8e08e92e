"""llama.cpp's scheduler dry-run first pass: excluded (warned, counted) by every reader of traces.

The traces are the generator's (`bench trace synth --dry-run-pass`, both record shapes); the
same seed and domain without --dry-run-pass gives the same decode, so the clean trace is what
every number of the dry-run trace must equal once its first iteration is excluded.
"""

import json

import pytest

from bench.cli import main
from bench.plan.planfile import read_plan
from bench.sim.simulate import simulate
from bench.trace.dryrun import without_dry_runs
from bench.trace.parse import parse_lines, parse_trace
from tests.support.traces import header, rec

TOKENS = 60     # requested: 59 decode tokens, the first comes from prefill
LLAMA = ("--shape", "llama", "--spec-accept", "0", "--fallback", "0")
TINY_K = 4      # the llama shape has no header: the tiny preset's k is given


def run(capsys, *argv):
    rc = main(list(map(str, argv)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def synth(capsys, tmp_path, name, domain, *extra):
    path = tmp_path / f"{name}{domain}.jsonl"
    assert run(capsys, "trace", "synth", path, "--tokens", TOKENS, "--domain", domain,
               *extra)[0] == 0
    return path


@pytest.fixture
def pair(capsys, tmp_path):
    """Two prompts (domains) with the dry-run pass, and the same two without it."""
    dry = [synth(capsys, tmp_path, "dry", d, "--dry-run-pass") for d in (0, 1)]
    clean = [synth(capsys, tmp_path, "clean", d) for d in (0, 1)]
    return dry, clean


def _without(d: dict, *keys) -> dict:
    return {k: v for k, v in d.items() if k not in ("source", *keys)}


@pytest.mark.parametrize("shape", [(), LLAMA], ids=["production", "llama"])
def test_parse_excludes_the_dry_run_and_counts_decode_tokens(capsys, tmp_path, shape):
    dry = [synth(capsys, tmp_path, "dry", d, "--dry-run-pass", *shape) for d in (0, 1)]
    clean = [synth(capsys, tmp_path, "clean", d, *shape) for d in (0, 1)]
    raws = [parse_trace(p, TINY_K) for p in dry]
    assert [r.accepted_tokens for r in raws] == [TOKENS] * 2   # raw: the dry run counted
    rc, out, err = run(capsys, "trace", "parse", *dry, "--k", TINY_K, "--json")
    got = json.loads(out)
    rc_c, out_c, err_c = run(capsys, "trace", "parse", *clean, "--k", TINY_K, "--json")
    want = json.loads(out_c)
    assert rc == rc_c == 0 and err_c == ""
    for g, w, path, raw in zip(got, want, dry, raws, strict=True):
        assert g["accepted_tokens"] == w["accepted_tokens"] == TOKENS - 1
        assert g["dry_run_iterations_excluded"] == 1 and w["dry_run_iterations_excluded"] == 0
        assert g["dry_run_reads_excluded"] == raw.iterations[0].reads
        assert g["iterations"] == len(raw.iterations) - 1
        assert _without(g, "dry_run_iterations_excluded", "dry_run_reads_excluded") == \
            _without(w, "dry_run_iterations_excluded", "dry_run_reads_excluded")
        assert f"{path}: first iteration excluded as llama.cpp's dry-run pass" in err
    rc, out, _ = run(capsys, "trace", "parse", *dry, "--k", TINY_K)
    assert rc == 0 and "dry-run excl." in out


def test_one_trace_with_a_reference_and_the_batch_merge(capsys, pair):
    dry, clean = pair
    rc, out, err = run(capsys, "trace", "parse", dry[0], "--dry-run-ref", dry[1], "--json")
    s = json.loads(out)
    assert rc == 0 and s["accepted_tokens"] == TOKENS - 1 and s["dry_run_iterations_excluded"] == 1
    assert str(dry[1]) in err
    # alone it cannot be told from decode (the mark is across prompts): nothing excluded
    rc, out, err = run(capsys, "trace", "parse", dry[0], "--json")
    assert json.loads(out)["accepted_tokens"] == TOKENS and err == ""
    # the same file twice is no evidence; `trace check` still reads traces raw
    rc, out, err = run(capsys, "trace", "parse", dry[0], dry[0], "--json")
    assert [t["dry_run_iterations_excluded"] for t in json.loads(out)] == [0, 0] and err == ""
    assert run(capsys, "trace", "check", *dry)[0] == 1
    rc, out, _ = run(capsys, "trace", "parse", *dry, "--batch", "--json")
    merged = json.loads(out)
    rc, out, _ = run(capsys, "trace", "parse", *clean, "--batch", "--json")
    assert merged["dry_run_iterations_excluded"] == 2
    assert merged["accepted_tokens"] == json.loads(out)["accepted_tokens"]


def test_stats_of_dry_run_traces_equal_the_clean_ones(capsys, pair):
    dry, clean = pair
    rc, out, err = run(capsys, "trace", "stats", *dry, "--json")
    got = json.loads(out)
    want = json.loads(run(capsys, "trace", "stats", *clean, "--json")[1])
    assert rc == 0 and err.count("dry-run pass") == 2
    assert [t["dry_run_iterations_excluded"] for t in got["traces"]] == [1, 1]
    assert [t["accepted_tokens"] for t in got["traces"]] == [TOKENS - 1] * 2
    assert [_without(t, "dry_run_iterations_excluded") for t in got["traces"]] == \
        [_without(t, "dry_run_iterations_excluded") for t in want["traces"]]
    assert got["jaccard_range"] == want["jaccard_range"]
    out = run(capsys, "trace", "stats", *dry)[1]
    assert "dry-run first iteration excluded: dry0.jsonl, dry1.jsonl" in out


def _sim(capsys, *argv):
    rc, out, err = run(capsys, "sim", *argv, "--budgets", "4,8", "--json")
    assert rc == 0
    return [(r["policy"], r["budget"], r["hits"], r["accesses"]) for r in json.loads(out)], err


def test_sim_of_dry_run_traces_equals_the_clean_ones(capsys, pair):
    dry, clean = pair
    got, err = _sim(capsys, *dry)
    want, err_c = _sim(capsys, *clean)
    assert got == want and "dry-run pass" in err and err_c == ""
    assert _sim(capsys, dry[0], "--dry-run-ref", dry[1])[0] == _sim(capsys, clean[0])[0]
    # --train FILE is read with the FILES: its dry run is excluded too
    assert _sim(capsys, dry[1], "--train", dry[0])[0] == _sim(capsys, clean[1], "--train",
                                                               clean[0])[0]
    # a clean trace is read as before: the CLI's numbers are the raw parse's
    raw = simulate(parse_trace(clean[0]), policies=("lru", "lfu", "static", "belady"),
                   regime="per-layer", budgets=(4, 8), window=0.6, train=None)
    assert _sim(capsys, clean[0], "--dry-run-ref", clean[1])[0] == \
        [(r["policy"], r["budget"], r["hits"], r["accesses"]) for r in raw]


def test_plan_of_a_dry_run_trace_replays_decode_only(capsys, tmp_path, pair):
    dry, clean = pair
    rc, out, err = run(capsys, "plan", dry[0], "--dry-run-ref", dry[1], "-o",
                       tmp_path / "d.bin", "--json")
    info = json.loads(out)
    assert rc == 0 and info["accepted_tokens"] == TOKENS - 1
    assert info["dry_run_iterations_excluded"] == 1 and "dry-run pass" in err
    rc, out, _ = run(capsys, "plan", clean[0], "-o", tmp_path / "c.bin", "--json")
    assert json.loads(out)["dry_run_iterations_excluded"] == 0
    d, c = read_plan(tmp_path / "d.bin"), read_plan(tmp_path / "c.bin")
    assert d.iterations == c.iterations and d.meta["accepted_tokens"] == TOKENS - 1
    # a clean trace's plan is the same with or without references
    run(capsys, "plan", clean[0], "--dry-run-ref", clean[1], "-o", tmp_path / "r.bin")
    assert (tmp_path / "r.bin").read_bytes() == (tmp_path / "c.bin").read_bytes()
    assert run(capsys, "plan", *dry, "--batch", "-o", tmp_path / "db.bin")[0] == 0
    assert run(capsys, "plan", *clean, "--batch", "-o", tmp_path / "cb.bin")[0] == 0
    assert read_plan(tmp_path / "db.bin").iterations == read_plan(tmp_path / "cb.bin").iterations


def _its(*steps):
    return [rec(layer, experts, step) for step, per_layer in steps
            for layer, experts in enumerate(per_layer)]


def test_a_trace_that_is_only_a_dry_run_is_refused(capsys, write_trace):
    first = (0, [[1, 2], [3, 4], [5, 6]])
    a = write_trace([header(), *_its(first, (1, [[0, 1], [0, 1], [0, 1]]))], name="a.jsonl")
    only = write_trace([header(), *_its(first)], name="only.jsonl")
    rc, _, err = run(capsys, "trace", "parse", only, a)
    assert rc == 2 and "the only iteration is a dry-run pass" in err and str(a) in err
    b = parse_lines([header(), *_its(first, (1, [[2, 3], [2, 3], [2, 3]]))], "b")
    out = without_dry_runs([parse_lines([header(), *_its(first, (1, [[0, 1]] * 3))], "a")], [b])
    assert out[0].accepted_tokens == 1 and out[0].iterations[0].index == 0
    assert out[0].meta["dry_run_twins"] == ["b"]


def test_a_batch_workload_reads_its_streams_without_their_dry_run(pair):
    from bench.plan.workload import Streams, read_streams
    dry, clean = pair
    merged, _ = read_streams(Streams(tuple(dry), None, 2))
    want, _ = read_streams(Streams(tuple(clean), None, 2))
    assert len(merged.dry_run) == 2 and len(want.dry_run) == 0
    assert merged.iterations == want.iterations
    assert merged.accepted_tokens == want.accepted_tokens
