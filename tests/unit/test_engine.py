"""End-to-end engine cells (bench.matrix.engine_cells, docs/engine.md), pure parts: the [engine]
table, argv substitution without a shell, balanced pair order, the output gates
(bench.judge.engine_gates), pair statistics, engine cell names, the end-to-end matrix and the
scheduler keeping pairs adjacent (properties)."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.errors import InputError
from bench.judge import engine_gates
from bench.judge.rules_plausible import _page_cache_impossible
from bench.matrix import engine_cells
from bench.matrix.cells import engine_cell, parse_cell
from bench.matrix.expand import BootConfig, Candidate, RunRequest, expand
from bench.matrix.load import MatrixError, load_matrix, parse_matrix
from bench.matrix.schedule import HostState, schedule
from bench.results import report_text

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"


def table(**over):
    t = {"command": ["/opt/e/decode", "--prompt-file", "{prompt_file}", "-n", "{n_tokens}",
                     "{policy_args}", "--tag={prompt}-{policy}"],
         "backend": "CUDA MoE backend", "n_tokens": 60, "pairs": 3,
         "tokens_regex": "^output token ids: (?P<tokens>.*)$",
         "load_regex": r"^cold load: ([0-9.]+) s",
         "policies": {"admit": {"args": ["--reader", "admit"]},
                      "nocache": {"args": ["--reader", "nocache"], "env": {"NOCACHE": "1"}}},
         "prompts": {"prose": "/p/prose.txt", "code": "/p/code.txt", "chat": "/p/chat.txt"}}
    t.update(over)
    return t


def cfg(**over):
    return engine_cells.parse_engine(table(**over), "t.toml")


# the [engine] table ------------------------------------------------------------------------------

def test_parse_keeps_everything_and_round_trips():
    c = cfg(env={"CUDA_VISIBLE_DEVICES": "0"}, cwd="/opt/e", timeout_s=900, min_tokens=50)
    assert c.prompt_names == ["prose", "code", "chat"] and c.pairs == 3 and c.min_tokens == 50
    assert [x.name for x in c.cells()] == ["e2e-prose-admit", "e2e-prose-nocache",
                                           "e2e-code-admit", "e2e-code-nocache",
                                           "e2e-chat-admit", "e2e-chat-nocache"]
    assert engine_cells.from_dict(json.loads(json.dumps(c.as_dict()))) == c
    assert c.digest == engine_cells.from_dict(c.as_dict()).digest != cfg().digest


@pytest.mark.parametrize("over, key, needle", [
    ({"speed": 1}, "engine.speed", "unknown key"),
    ({"command": []}, "engine.command[0]", "must not be empty"),
    ({"command": ["/e", "{nope}"]}, "engine.command[1]", "unknown placeholder {nope}"),
    ({"command": ["/e", "a}b"]}, "engine.command[1]", "lone"),
    ({"command": ["/e", 3]}, "engine.command[1]", "must be a string"),
    ({"command": ["/e", "{policy_args}", "{policy_args}"]}, "engine.command", "more than once"),
    ({"tokens_regex": "(unclosed"}, "engine.tokens_regex", "not a valid regular expression"),
    ({"load_regex": "(a)(b)"}, "engine.load_regex", "one capturing group"),
    ({"backend": ""}, "engine.backend", "non-empty"),
    ({"min_tokens": 61}, "engine.min_tokens", "above n_tokens"),
    ({"pairs": 0}, "engine.pairs", "at least 1"),
    ({"timeout_s": True}, "engine.timeout_s", "must be an integer"),
    ({"env": {"1X": "a"}}, "engine.env.1X", "not an environment variable name"),
    ({"cwd": "rel"}, "engine.cwd", "absolute"),
    ({"policies": {"admit": {}}}, "engine.policies.nocache", "missing"),
    ({"policies": {"admit": {}, "nocache": {}, "other": {}}}, "engine.policies.other",
     "unknown key"),
    ({"policies": {"admit": {"args": ["-x"]}, "nocache": {"args": ["-x"]}},
      "command": ["/e"]}, "engine.policies", "same arguments"),
    ({"policies": {"admit": {"argv": []}, "nocache": {}}}, "engine.policies.admit.argv",
     "unknown key"),
    ({"prompts": {}}, "engine.prompts", "at least one"),
    ({"prompts": {"Prose": "/p"}}, "engine.prompts.Prose", "not a prompt label"),
    ({"prompts": {"prose": "p.txt"}}, "engine.prompts.prose", "relative"),
])
def test_bad_tables_name_the_key(over, key, needle):
    with pytest.raises(engine_cells.EngineConfigError) as ei:
        cfg(**over)
    assert f"t.toml: key '{key}'" in ei.value.message and needle in ei.value.message


def test_missing_required_keys():
    for k in ("command", "backend", "tokens_regex", "load_regex", "policies", "prompts"):
        t = table()
        del t[k]
        with pytest.raises(engine_cells.EngineConfigError, match=f"engine.{k}'"):
            engine_cells.parse_engine(t, "t.toml")


# argv and environment ---------------------------------------------------------------------------

def test_argv_is_substituted_per_element_never_through_a_shell():
    c = cfg(prompts={"prose": "/p/it's; rm -rf / $(x) {braces}.txt"})
    v = engine_cells.values_for(c, "prose", "nocache", pool_dir="/pool dir", work_dir="/w",
                          run_id="r1")
    argv = engine_cells.argv_for(c, v)
    assert argv == ["/opt/e/decode", "--prompt-file", "/p/it's; rm -rf / $(x) {braces}.txt",
                    "-n", "60", "--reader", "nocache", "--tag=prose-nocache"]
    assert engine_cells.env_for(c, "nocache") == {"NOCACHE": "1"}
    assert engine_cells.env_for(c, "admit") == {}


def test_policy_args_are_appended_without_the_marker_and_braces_escape():
    c = cfg(command=["/e", "{{literal}}", "{run_dir}"], env={"A": "1", "NOCACHE": "0"})
    v = engine_cells.values_for(c, "code", "admit", pool_dir="/p", work_dir="/w/", run_id="r9")
    assert engine_cells.argv_for(c, v) == ["/e", "{literal}", "/w/runs/r9", "--reader", "admit"]
    assert engine_cells.env_for(c, "nocache") == {"A": "1", "NOCACHE": "1"}     # the policy wins


# balanced pair order ----------------------------------------------------------------------------

@given(st.integers(0, 12), st.integers(0, 2**40), st.text(max_size=8))
def test_pair_orders_are_balanced_and_seeded(n, seed, salt):
    o = engine_cells.pair_orders(n, seed, salt)
    assert len(o) == n and all(sorted(p) == ["admit", "nocache"] for p in o)
    if n >= 1:
        assert o[0] == ("admit", "nocache")
    if n >= 2:
        assert o[1] == ("nocache", "admit")
    assert o == engine_cells.pair_orders(n, seed, salt)                 # same seed, same order
    assert engine_cells.pair_orders(n + 3, seed, salt)[:n] == o     # later pairs do not re-order


def test_shuffled_pairs_depend_on_the_seed():
    orders = {tuple(engine_cells.pair_orders(10, s, "prose")[2:]) for s in range(20)}
    assert len(orders) > 1


# gates over captured output ---------------------------------------------------------------------

OUT = ("loading...\ncold load: 12.5 s\nMoE backend: CUDA MoE backend (grouped gemm)\n"
       "output token ids: 1, 22,333 ,-4\nbye\n")


def test_gates_find_backend_tokens_and_load():
    rx = table()
    assert engine_gates.find_backend(OUT, "", "CUDA MoE backend").startswith("MoE backend:")
    assert engine_gates.find_backend("", "warn\nusing CUDA MoE backend\n", "CUDA MoE backend") \
        == "using CUDA MoE backend"
    assert engine_gates.find_backend(OUT, "", "Metal") is None
    assert engine_gates.parse_tokens(OUT, "", rx["tokens_regex"]) == [1, 22, 333, -4]
    assert engine_gates.parse_tokens("x", "output token ids: 7 8", rx["tokens_regex"]) == [7, 8]
    assert engine_gates.parse_tokens("x", "y", rx["tokens_regex"]) is None
    # a number no vocabulary has (5000 digits would not even convert): not token IDs
    assert engine_gates.parse_tokens("output token ids: 1, " + "9" * 5000, "",
                                     rx["tokens_regex"]) is None
    assert engine_gates.parse_load(OUT, "", rx["load_regex"]) == 12.5
    assert engine_gates.parse_load("cold load: fast s", "", r"^cold load: (\S+) s") is None
    assert engine_gates.output_sha256([1, 22]) == __import__("hashlib").sha256(b"1,22").hexdigest()


@pytest.mark.parametrize("tokens, min_tokens, needle", [
    (None, 1, "no output token IDs"),
    ([], 1, "no tokens"),
    ([5, 6, 7], 4, "only 3 output tokens"),
    ([9] * 60, 60, "token 9 repeated"),
    (list(range(30)) + [4, 5] * 15, 60, "cycle of 2 tokens [4, 5]"),
    (list(range(28)) + [1, 2, 3, 4] * 8, 60, "cycle of 4"),
])
def test_degenerate_outputs(tokens, min_tokens, needle):
    assert needle in engine_gates.degenerate(tokens, min_tokens)


@pytest.mark.parametrize("tokens", [list(range(60)), [3, 3] + list(range(58)),
                                    list(range(50)) + [7] * 10, [1], [1, 2, 1, 3],
                                    list(range(40)) + [1, 2, 3, 4] * 5])
def test_ordinary_outputs_are_not_degenerate(tokens):
    assert engine_gates.degenerate(tokens, 1) is None


def test_facts_of_one_run():
    spec = {"tokens_regex": table()["tokens_regex"], "load_regex": table()["load_regex"],
            "backend": "CUDA MoE backend", "min_tokens": 2, "prompt": "prose",
            "policy": "admit", "pair": {"index": 1, "order": "nocache-first", "position": 1}}
    f = engine_gates.facts(spec, OUT, "", {"wall_s": 20.0, "exit_code": 0, "signal": None})
    assert (f["wall_s"], f["load_s"], f["steady_s"]) == (20.0, 12.5, 7.5)
    assert f["backend_found"] and f["tokens"] == 4 and f["degenerate"] is None
    assert (f["pair_index"], f["pair_order"], f["pair_position"]) == (1, "nocache-first", 1)
    assert f["output_sha256"] == engine_gates.output_sha256([1, 22, 333, -4])


# pair statistics -------------------------------------------------------------------------------

def run(pair, policy, s, h="h"):
    return {"pair": pair, "policy": policy, "steady_s": s, "output_sha256": h}


def test_median_of_pair_ratios_not_the_quotient_of_medians():
    runs = [run("p0", "admit", 10, "a"), run("p0", "nocache", 11, "a"),
            run("p1", "admit", 20, "b"), run("p1", "nocache", 30, "b"),
            run("p2", "admit", 30, "c"), run("p2", "nocache", 31, "c")]
    st_ = engine_gates.pair_stats("prose", runs)
    ratios = sorted([11 / 10, 30 / 20, 31 / 30])
    assert st_.pairs == 3 and st_.speedup == pytest.approx(ratios[1])
    assert (st_.speedup_min, st_.speedup_max) == (pytest.approx(ratios[0]),
                                                  pytest.approx(ratios[2]))
    assert st_.admit_median_s == 20 and st_.nocache_median_s == 30
    assert st_.ratio_of_medians == pytest.approx(1.5) != pytest.approx(st_.speedup)
    assert st_.hashes_match is True and st_.mismatched == [] and st_.incomplete == []


def test_mismatched_hashes_and_incomplete_pairs_are_named():
    runs = [run("p0", "admit", 10, "a"), run("p0", "nocache", 11, "b"),
            run("p1", "admit", 10, "c"), run("p2", "nocache", 12, "d"),
            run("p3", "admit", 10, "e"), run("p3", "nocache", None, "e")]
    st_ = engine_gates.pair_stats("code", runs)
    assert st_.pairs == 1 and st_.hashes_match is False and st_.mismatched == ["p0"]
    assert st_.incomplete == ["p1", "p2", "p3"]
    assert engine_gates.pair_stats("chat", []).speedup is None


# the replay-vs-engine line ----------------------------------------------------------------------

SPLIT = ("page cache after decode: experts {} B, the rest {} B (model: experts 2000000 B, the "
         "rest 100000 B)")


def rrun(policy, device, split=None, h="a", tokens=10):
    stdout = "" if split is None else SPLIT.format(*split) + "\n"
    return {"policy": policy, "device_bytes": device, "tokens": tokens, "output_sha256": h,
            "page_cache": engine_gates.parse_page_cache(stdout)}


def test_replay_stats_set_the_engine_beside_its_replay_with_each_n():
    runs = [rrun("admit", 2_100_000, (2_000_000, 100_000)), rrun("admit", 2_300_000),
            rrun("admit", 2_200_000, (1_900_000, 100_000)), rrun("nocache", 9_000_000),
            rrun("replay", 1_500_000, (1_400_000, 0)), rrun("replay", 1_400_000, (1_300_000, 0))]
    x = engine_gates.replay_stats(runs)
    e, p = x["engine"], x["replay"]
    assert (e["n"], e["n_split"], p["n"], p["n_split"]) == (3, 2, 2, 2)
    assert (e["bytes_per_token"], p["bytes_per_token"]) == (220_000, 145_000)   # medians
    assert x["ratio"] == pytest.approx(220_000 / 145_000) and x["outputs_match"] is True
    assert (e["experts"], e["rest"], e["model_experts"], p["experts"]) == (
        1_950_000, 100_000, 2_000_000, 1_350_000)
    assert engine_gates.replay_stats(runs[:4]) is None          # no replay: no line
    x = engine_gates.replay_stats(runs[:5] + [rrun("replay", 1_400_000, h="b")])
    assert x["outputs_match"] is False
    assert engine_gates.replay_stats([rrun("replay", 1)])["ratio"] is None
    r = {"group": "g1", "prompt": "prose", "arm": "500M-cgroup",
         "replay": engine_gates.replay_stats(runs)}
    line = report_text.replay_line(r)
    assert line.startswith("g1 prose 500M-cgroup: replay vs engine, device MB/token: engine "
                           "(admit) 0.22 (n=3), the agent replaying its trace 0.145 (n=2), "
                           "ratio 1.52x; MB of the model file in the page cache after the "
                           "run: engine experts 1.95 of 2, the rest 0.1 of 0.1; replay experts "
                           "1.35 of 2, the rest 0 of 0.1; the replayed trace decoded the "
                           "engine's output"), line
    assert report_text.replay_line({"replay": None}) is None


@pytest.mark.parametrize("stdout, want", [
    (SPLIT.format(5, 6), {"experts": 5, "rest": 6, "model_experts": 2_000_000,
                          "model_rest": 100_000}),
    ("x\n" + SPLIT.format(5, 6) + " more", {"experts": 5, "rest": 6, "model_experts": 2_000_000,
                                           "model_rest": 100_000}),
    ("page cache after decode: experts 5 B", None), ("", None),
    (SPLIT.format("1" * 20, 6), None)])                  # not a byte count: no split
def test_page_cache_lines(stdout, want):
    assert engine_gates.parse_page_cache(stdout) == want


@pytest.mark.parametrize("split, device, needle", [
    ((2_000_001, 0), 10**9, "more than the model's 2000000"),
    ((0, 100_001), 10**9, "of the model's rest are cached"),
    ((2_000_000, 100_000), 2_100_000 - 2 * 65536 - 1, "more than the 1968927 bytes read"),
    ((2_000_000, 100_000), 2_100_000 - 2 * 65536, None),     # a page each rounds up
    ((2_000_000, 100_000), None, None), (None, 0, None)])
def test_an_impossible_page_cache_split_is_refused(split, device, needle):
    pc = None if split is None else engine_gates.parse_page_cache(SPLIT.format(*split))
    why = _page_cache_impossible(pc, device)
    assert (why is None) if needle is None else (needle in why), why


# spec ------------------------------------------------------------------------------------------

def test_build_spec():
    h = SimpleNamespace(name="gh200-b", pool_dir="/data/pool", work_dir="/var/lib/bench")
    s = engine_cells.build_spec("e2e-code-nocache", h, cfg(), run_id="c-gh200-b-004", pair_index=2,
                          first="nocache", seed=7, campaign="c", position=4)
    assert (s["cell"], s["capacity_bytes"], s["mechanism"], s["reclaim"], s["mode"]) == (
        "e2e-code-nocache", 0, "none", "host", "nocache")
    e = s["engine"]
    assert e["argv"][:3] == ["/opt/e/decode", "--prompt-file", "/p/code.txt"]
    assert e["pair"] == {"index": 2, "order": "nocache-first", "position": 0, "seed": 7}
    assert e["env"] == {"NOCACHE": "1"} and e["config_sha256"] == cfg().digest
    assert s["repetition"] == 2 and s["pool"] == "/data/pool"
    with pytest.raises(InputError, match="not an engine cell"):
        engine_cells.build_spec("64g-none-mglru", h, cfg(), run_id="x", pair_index=0,
                          first="admit", seed=0)


# cells --------------------------------------------------------------------------------------------

@given(st.from_regex(r"[a-z0-9_]{1,32}", fullmatch=True), st.sampled_from(["admit", "nocache"]))
def test_engine_cell_names_are_exact_inverses(prompt, policy):
    c = engine_cell(prompt, policy)
    assert c.name == f"e2e-{prompt}-{policy}" and parse_cell(c.name) == c
    assert c.is_engine and c.policy == policy and c.capacity_bytes == 0
    assert c.mode == ("pagecache" if policy == "admit" else "nocache")


@given(st.from_regex(r"[a-z0-9_]{1,32}", fullmatch=True), st.sampled_from(["admit", "nocache"]),
       st.integers(1, 10**15), st.sampled_from(["cgroup", "balloon"]))
def test_engine_cells_at_a_capacity_are_exact_inverses(prompt, policy, capacity, mechanism):
    c = engine_cell(prompt, policy, capacity, mechanism)
    assert parse_cell(c.name) == c and parse_cell(c.name.upper()) == c
    assert c.name.startswith(f"e2e-{prompt}-{policy}-") and c.name.endswith(f"-{mechanism}")
    assert (c.capacity_bytes, c.mechanism, c.reclaim) == (capacity, mechanism, "host")
    assert engine_cells.pair_unit(c) == f"e2e-{prompt}-{c.name.split('-')[3]}-{mechanism}"
    assert engine_cells.pair_unit(engine_cell(prompt, policy)) == f"e2e-{prompt}"


@pytest.mark.parametrize("bad", ["e2e-prose", "e2e-prose-pagecache", "e2e--admit",
                                 "e2e-a-b-admit", "e2e-prose-admit-x", "e2e-pro$e-admit",
                                 "e2e-prose-admit-400M", "e2e-prose-admit-400M-memboot",
                                 "e2e-prose-admit-400M-none", "e2e-prose-admit-0M-cgroup",
                                 "e2e-prose-admit-400-cgroup", "e2e-prose-admit-x-balloon",
                                 "e2e-prose-admit-400M-cgroup-x"])
def test_bad_engine_cell_names(bad):
    with pytest.raises(InputError):
        parse_cell(bad)


def test_engine_cell_names_are_read_case_insensitively_and_written_lower_case():
    assert parse_cell("E2E-Prose-ADMIT") == engine_cell("prose", "admit")
    assert parse_cell("E2e-prose-nocache").name == "e2e-prose-nocache"


# the matrix --------------------------------------------------------------------------------------

def gh(name, machine):
    from bench.hosts.inventory import Host, RebootSpec
    return Host(name=name, address=name, transport="ssh", tags={"machine": machine},
                mem_total=480 << 30, reboot=RebootSpec(allowed=True, method="kexec"))


def local_host(name="local"):
    from bench.hosts.inventory import Host
    return Host(name=name, address="localhost", transport="local", tags={"machine": "c"})


def test_shipped_end_to_end_matrix():
    """Its engine is the built-in one ({bench} engine run): the paper's machine B cannot run
    it (skipped, saying why); the lab scale runs on any local host."""
    m = load_matrix("end-to-end")
    assert m.engine.pairs == 3 and m.repetitions == 3 and m.engine.n_tokens == 60
    assert m.engine.prompt_names == ["prose", "code", "chat"]
    assert [p.key for p in m.points] == [c.name for c in m.engine.cells()]
    assert m.engine.local_only and m.as_dict()["engine"]["backend"] == "backend: llama.cpp CPU"
    exp = expand(m, [gh("gh200-a", "A"), gh("gh200-b", "B")])
    assert exp.requests == [] and {s.host for s in exp.skipped} == {"gh200-b"}
    assert all(s.reason == engine_cells.LOCAL_ONLY_SKIP for s in exp.skipped)
    lab = load_matrix("end-to-end", scale="lab")
    assert lab.engine.capacities == ((500_000_000, "cgroup"),)
    exp = expand(lab, [gh("gh200-b", "B"), local_host()])
    assert len(exp.requests) == 54 and {r.candidates[0].host for r in exp.requests} == {"local"}
    assert {r.unit for r in exp.requests} == {f"e2e-{p}{a}@local" for p in ("prose", "code", "chat")
                                              for a in ("", "-500M-cgroup")}
    assert all(r.pair == (parse_cell(r.point).prompt, parse_cell(r.point).policy)
               and r.candidates[0].boot == BootConfig() for r in exp.requests)


BUILTIN = {"command": ["{bench}", "engine", "run", "{pool_dir}/m.gguf", "--prompt-file",
                       "{prompt_file}", "{policy_args}"],
           "prepare": ["{bench}", "engine", "model", "make", "{pool_dir}/m.gguf", "--reuse"],
           "prompts": {"prose": "{bench_data}/prompts/prose.txt"}}
HERE = {"bench": "/venv/bin/bench", "bench_data": "/venv/lib/bench/data"}


def test_capacity_arms_make_cells_and_specs():
    c = cfg(capacities=["400M-cgroup", "0.5Gi-balloon"])
    assert c.arms == [(0, "none"), (400_000_000, "cgroup"), (1 << 29, "balloon")]
    assert [x.name for x in c.cells()][:6] == [
        "e2e-prose-admit", "e2e-prose-nocache", "e2e-prose-admit-400M-cgroup",
        "e2e-prose-nocache-400M-cgroup", "e2e-prose-admit-512Mi-balloon",
        "e2e-prose-nocache-512Mi-balloon"]
    assert c.as_dict()["capacities"] == ["400M-cgroup", "512Mi-balloon"]
    assert engine_cells.from_dict(c.as_dict()).digest == c.digest
    assert "capacities" not in cfg().as_dict()        # older configurations keep their digest
    h = SimpleNamespace(name="b", transport="ssh", pool_dir="/p", work_dir="/w")
    s = engine_cells.build_spec("e2e-prose-admit-400M-cgroup", h, c, run_id="c-b-001",
                                pair_index=0, first="admit", seed=0)
    assert (s["capacity_bytes"], s["mechanism"], s["cgroup_headroom_bytes"]) == (
        400_000_000, "cgroup", 0)           # the wall holds the whole engine
    s = engine_cells.build_spec("e2e-prose-admit-512Mi-balloon", h, c, run_id="c-b-002",
                                pair_index=0, first="admit", seed=0)
    assert (s["capacity_bytes"], s["mechanism"]) == (1 << 29, "balloon")
    assert "cgroup_headroom_bytes" not in s


def test_a_replay_policy_adds_a_replay_cell_after_each_pair_with_its_own_backend():
    pols = table()["policies"] | {"replay": {"args": ["--load", "replay"],
                                             "backend": "backend: bench-agent replay"}}
    c = cfg(policies=pols, capacities=["400M-cgroup"])
    assert c.replay and not cfg().replay
    assert [x.name for x in c.cells()][:6] == [
        "e2e-prose-admit", "e2e-prose-nocache", "e2e-prose-replay",
        "e2e-prose-admit-400M-cgroup", "e2e-prose-nocache-400M-cgroup",
        "e2e-prose-replay-400M-cgroup"]
    assert engine_cells.from_dict(c.as_dict()).digest == c.digest
    assert "backend" not in cfg().as_dict()["policies"]["admit"]    # older digests hold
    h = SimpleNamespace(name="b", transport="ssh", pool_dir="/p", work_dir="/w")
    s = engine_cells.build_spec("e2e-prose-replay-400M-cgroup", h, c, run_id="c-b-001",
                                pair_index=1, first="nocache", seed=0)
    e = s["engine"]
    assert (s["mode"], e["policy"], e["backend"], e["pair"]["position"]) == (
        "pagecache", "replay", "backend: bench-agent replay", 2)
    assert e["argv"][-3:] == ["--load", "replay", "--tag=prose-replay"]
    assert engine_cells.build_spec("e2e-prose-admit", h, c, run_id="c-b-002", pair_index=0,
                                   first="admit", seed=0)["engine"]["backend"] == \
        "CUDA MoE backend"
    with pytest.raises(InputError, match="has no replay policy"):
        engine_cells.build_spec("e2e-prose-replay", h, cfg(), run_id="c-b-003", pair_index=0,
                                first="admit", seed=0)


@pytest.mark.parametrize("arms, needle", [
    (["400M"], "not a capacity and mechanism"), (["400M-memboot"], "not a capacity"),
    (["400M-cgroup", "0.4G-cgroup"], "twice"), (["-cgroup"], "not a capacity")])
def test_bad_capacity_arms(arms, needle):
    with pytest.raises(InputError, match=needle):
        cfg(capacities=arms)


def test_a_balloon_arm_needs_a_cap_on_what_it_locks():
    with pytest.raises(MatrixError) as ei:
        parse_matrix(doc(engine=table(capacities=["512M-balloon"])), "m.toml")
    assert "key 'engine.capacities'" in ei.value.message and "balloon_max" in ei.value.message
    m = parse_matrix(doc(engine=table(capacities=["512M-balloon"]),
                         protocol={"balloon_max": "2G"}), "m.toml")
    assert len(m.points) == 3 * 2 * 2


def test_controller_placeholders_make_the_engine_local_only():
    c = cfg(**BUILTIN)
    assert c.local_only and not cfg().local_only
    assert cfg(prompts={"p": "{bench_data}/p.txt"}).local_only
    s = engine_cells.build_spec("e2e-prose-admit", local_host(), c, run_id="c-local-001",
                                pair_index=0, first="admit", seed=1, controller=HERE)
    e = s["engine"]
    assert e["argv"] == ["/venv/bin/bench", "engine", "run", "/var/lib/bench/pool/m.gguf",
                         "--prompt-file", "/venv/lib/bench/data/prompts/prose.txt",
                         "--reader", "admit"]
    assert e["prompt_file"] == "/venv/lib/bench/data/prompts/prose.txt"
    assert e["prepare_argv"] == ["/venv/bin/bench", "engine", "model", "make",
                                 "/var/lib/bench/pool/m.gguf", "--reuse"]
    assert "prepare_argv" not in engine_cells.build_spec(
        "e2e-prose-admit", local_host(), cfg(), run_id="c-local-001", pair_index=0,
        first="admit", seed=1)["engine"]
    for host, here in ((gh("gh200-b", "B"), HERE), (local_host(), None)):
        with pytest.raises(InputError, match="cannot run this engine: .*local host only"):
            engine_cells.build_spec("e2e-prose-admit", host, c, run_id="c-x-001",
                                    pair_index=0, first="admit", seed=1, controller=here)
    # a configuration made before `prepare` existed keeps its identity
    assert "prepare" not in cfg().as_dict() and c.as_dict()["prepare"] == BUILTIN["prepare"]
    assert engine_cells.from_dict(c.as_dict()).digest == c.digest


def doc(**over):
    d = {"name": "e", "description": "engine", "engine": table()}
    d.update(over)
    return d


@pytest.mark.parametrize("over, key, needle", [
    ({"repetitions": 3}, "repetitions", "not allowed in an engine matrix"),
    ({"cells": {"capacities": ["1G"]}}, "cells", "not allowed in an engine matrix"),
    ({"mglru_at_boot": True}, "mglru_at_boot", "leaves reclaim"),
    ({"engine": table(command=["/e", "{pool}"])}, "engine.command[1]", "unknown placeholder"),
    ({"engine": table(prepare=["/e", "{bench"])}, "engine.prepare[1]", "lone"),
    ({"engine": table(prepare=[])}, "engine.prepare[0]", "must not be empty"),
    ({"engine": table(prompts={"p": "rel/p.txt"})}, "engine.prompts.p", "relative"),
])
def test_bad_engine_matrices(over, key, needle):
    with pytest.raises(MatrixError) as ei:
        parse_matrix(doc(**over), "m.toml")
    assert f"key '{key}'" in ei.value.message and needle in ei.value.message


def test_cli_matrix_show_end_to_end(capsys):
    assert main(["matrix", "show", "end-to-end"]) == 0
    out = capsys.readouterr().out
    assert "engine       '{bench}' engine run" in out and "pair 0 admit-first, pair 1" in out
    assert "e2e-chat-nocache               {bench_data}/prompts/chat.txt" in out
    assert "e2e-chat-nocache-500M-cgroup   {bench_data}/prompts/chat.txt" in out
    assert "ample capacity (no mechanism), 500M-cgroup; reclaim" in out
    assert f"where        {engine_cells.LOCAL_ONLY}" in out and "prepare      '{bench}'" in out


# the scheduler keeps pairs adjacent --------------------------------------------------------------

@st.composite
def engine_fleets(draw):
    hosts = [HostState(f"h{i}") for i in range(draw(st.integers(1, 3)))]
    names = [h.name for h in hosts]
    requests = []
    prompts = draw(st.lists(st.sampled_from(["prose", "code", "chat", "math"]), min_size=1,
                            max_size=4, unique=True))
    for i, prompt in enumerate(prompts):
        pairs = draw(st.integers(1, 5))
        hs = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
        one = draw(st.booleans())
        replay = ("replay",) if draw(st.booleans()) else ()
        for pol_i, pol in enumerate(("admit", "nocache") + replay):
            cell = f"e2e-{prompt}-{pol}"
            if one:
                cands = tuple(Candidate(h, cell, BootConfig()) for h in sorted(hs))
                requests += [RunRequest(f"e2e-{prompt}", cell, r, cands, 2 * i + pol_i,
                                        (prompt, pol)) for r in range(pairs)]
            else:
                for h in hs:
                    requests += [RunRequest(f"e2e-{prompt}@{h}", cell, r,
                                            (Candidate(h, cell, BootConfig()),), 2 * i + pol_i,
                                            (prompt, pol)) for r in range(pairs)]
    for u in range(draw(st.integers(0, 3))):       # replay cells in the same plan
        h = draw(st.sampled_from(names))
        requests += [RunRequest(f"x{u}@{h}", f"x{u}", r,
                                (Candidate(h, f"{u + 1}g-none-classic", BootConfig()),), 50 + u)
                     for r in range(draw(st.integers(1, 3)))]
    return hosts, requests


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_fleets(), st.integers(0, 2**31), st.booleans(), st.booleans())
def test_pairs_stay_adjacent_in_the_balanced_order(fleet, seed, randomize, interleave):
    hosts, requests = fleet
    plan = schedule(requests, hosts, seed, randomize=randomize, interleave=interleave,
                    campaign="c")
    runs = plan.runs
    # every run exactly once
    assert sorted((r.point, r.rep) for r in runs) == sorted((q.point, q.rep) for q in requests)
    for hp in plan.hosts:
        seq = hp.runs
        pairs = {}
        for i, r in enumerate(seq):
            if r.pair:
                pairs.setdefault((r.pair["prompt"], r.rep), []).append((i, r))
        for (prompt, rep), members in pairs.items():
            # each pair on one host, adjacent, admit and nocache once each, then its replay
            # (where the prompt has one) right after, position 2
            if len(members) == 3:
                (i, a), (j, b), (k, c) = members
                assert k == j + 1 and parse_cell(c.cell).policy == "replay"
                assert (c.pair["position"], c.pair["order"]) == (2, a.pair["order"])
            else:
                assert len(members) == 2, members
                (i, a), (j, b) = members
            assert j == i + 1
            assert {parse_cell(a.cell).policy, parse_cell(b.cell).policy} == {"admit", "nocache"}
            first = parse_cell(a.cell).policy
            assert a.pair["order"] == b.pair["order"] == f"{first}-first"
            assert (a.pair["position"], b.pair["position"]) == (0, 1)
            assert first == engine_cells.pair_orders(rep + 1, seed, prompt)[rep][0]
            if rep == 0:
                assert first == "admit"                 # pair 0 admit-first
            if rep == 1:
                assert first == "nocache"               # pair 1 nocache-first
    again = schedule(requests, hosts, seed, randomize=randomize, interleave=interleave,
                     campaign="c")
    assert [r.as_dict() for r in again.runs] == [r.as_dict() for r in runs]   # same seed


def test_dry_run_golden_end_to_end(capsys, tmp_path):
    """The shipped matrix at lab scale on the shipped inventory, with the fixture hosts'
    facts: the local host runs the pairs, the GH200s are skipped saying why (regenerate with
    BENCH_REGEN_GOLDEN=1)."""
    from tests.support.facts import DEBIAN, fixture_facts, gh200_facts
    facts = gh200_facts(tmp_path, local=fixture_facts(DEBIAN))
    absent = ["--db", str(tmp_path / "absent.db")]    # every estimate modelled
    rc = main(["schedule", "--matrix", "end-to-end", "--scale", "lab", "--hosts-dir",
               str(ROOT / "hosts"), "--seed", "7", "--dry-run", "--facts", facts, *absent])
    out = capsys.readouterr()
    assert rc == 0, out.err
    path = GOLDEN / "schedule-end-to-end-seed7.txt"
    if os.environ.get("BENCH_REGEN_GOLDEN") == "1":
        path.write_text(out.out)
    assert out.out == path.read_text()
    assert main(["schedule", "--matrix", "end-to-end", "--scale", "lab", "--hosts-dir",
                 str(ROOT / "hosts"), "--seed", "7", "--dry-run", "--json", "--facts",
                 facts]) == 0
    d = json.loads(capsys.readouterr().out)
    runs = [r for h in d["hosts"] for r in h["runs"]]
    assert len(runs) == 54 and {r["host"] for r in runs} == {"local"}
    assert runs[0]["pair"]["order"] == "admit-first" and runs[0]["pair"]["position"] == 0


def test_replay_specs_refuse_engine_cells():
    from bench.matrix.runspec import build_spec
    from bench.plan.planinfo import PlanInfo
    h = SimpleNamespace(name="h", pool_dir="/p", work_dir="/w", mem_total=None)
    plan = PlanInfo("a" * 64, 1, 2, 64, 3, "t")
    with pytest.raises(InputError, match="engine cell"):
        build_spec("e2e-prose-admit", h, plan, run_id="r1")
