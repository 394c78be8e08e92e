"""The CLI: every command has help, JSON output carries the documented fields, bad input
gives one clear message (file and line, no traceback) and a non-zero exit."""

import ast
import json
from pathlib import Path

import pytest
import typer.main

from bench.cli import main
from bench.cli.app import app

GOLDEN = Path(__file__).parent / "golden"
from tests.support.traces import header, rec


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        path = prefix + (name,)
        yield path, cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, path)


ALL = list(_commands(typer.main.get_command(app)))


def test_command_tree_is_complete():
    """Every command with its parameters, as users know them (tests/unit/golden/
    command-tree.txt was taken before the CLI moved into bench/cli/): none lost or renamed;
    commands added since are listed here."""
    got = {" ".join(p): {x.name for x in c.params} for p, c in ALL}
    known = {}
    for line in (GOLDEN / "command-tree.txt").read_text().splitlines():
        name, _, params = line.partition(" [")
        known[name] = set(ast.literal_eval("[" + params))
    lost = {name: sorted(params - got.get(name, set())) for name, params in known.items()}
    assert {name: p for name, p in lost.items() if p or name not in got} == {}
    assert set(got) - set(known) == {"schema", "schema inventory", "schema matrix",
                                     "schema engine", "schema bundle",
                                     "hosts pools",        # several pools per host
                                     "hosts facts",        # example facts, offline planning
                                     # campaigns: a group whose default is the list
                                     "campaigns list", "campaigns hide", "campaigns unhide",
                                     "campaigns rm",
                                     "placement",   # `rules` renamed; the old name is hidden
                                     "report",      # the next-morning page (issue 24)
                                     # a real engine end to end (issue 25)
                                     "engine", "engine model", "engine model make",
                                     "engine trace",
                                     "engine run",  # the built-in engine of an [engine] table
                                     "engine prepare"}  # its model, trace and plan
    # options added since, each on purpose
    assert {name: sorted(got[name] - known[name]) for name in known if got[name] - known[name]} \
        == {"hosts probe": ["campaign", "db", "verbose"],
            # result identity: filter by workload digest, pool across groups only on request
            # demo runs: every read command takes --include-demo (issue 23)
            "results": ["include_demo", "pool", "workload"],
            "compare": ["include_demo", "pool", "workload"],
            "campaigns": ["include_hidden"], "runs": ["include_demo"],
            "sizing": ["include_demo", "workload"], "plot": ["include_demo", "workload"],
            "ingest": ["data_dir", "max_bundle_bytes", "max_file_bytes"],
            # a changed host key is replaced only by naming the old one
            "hosts trust": ["replace"],
            # conventions: every stored table exports, each with the text run id
            "export": ["include_demo", "table"],
            "pool make": ["parents"],   # a missing parent is an error unless asked for
            # hosts checked before a campaign; the protocol of a matrix for one run
            "schedule": ["facts_file", "facts_max_age"],
            "run": ["balloon_max", "cgroup_headroom",
                    "hints"],   # the hint plan a prefetch cell ships (oracle, pilot, a file)
            # Fig. 1 / Fig. 5 / §3 views; the synthetic traces' non-stationarity
            "sim": ["dry_run_ref", "plot", "view"],
            "trace synth": ["burst", "drift", "order", "phase"],
            # another prompt's trace, to find one trace's llama.cpp dry-run first pass
            "trace parse": ["dry_run_ref"], "trace stats": ["dry_run_ref"],
            "demand": ["dry_run_ref"],
            # a plan whose pool is the GGUF model itself (issue 25)
            "plan": ["dry_run_ref", "from_gguf", "pool_out"],
            # a run in progress refuses them; --force names the run it kills
            "hosts reboot": ["force"], "hosts restore": ["force"], "hosts mglru": ["force"]}


@pytest.mark.parametrize("path, cmd", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_has_help(path, cmd, capsys):
    assert (cmd.help or "").strip(), f"bench {' '.join(path)} has no help text"
    for param in cmd.params:
        if param.param_type_name == "option" and param.name != "help":
            assert (param.help or "").strip(), f"option {param.name} of {path} has no help"
    assert main([*path, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def run(capsys, *argv):
    rc = main(list(map(str, argv)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_parse_json(capsys, write_trace):
    path = write_trace([header(), rec(0, [1, 2], 0), rec(1, [3, 4], 0), rec(2, [5, 6], 0),
                        rec(0, [1, 2, 3, 4], 1), rec(1, [1, 2, 3, 4], 1), rec(2, [1, 2, 5, 6], 1)])
    rc, out, _ = run(capsys, "trace", "parse", path, "--json")
    assert rc == 0
    s = json.loads(out)
    assert {k: s[k] for k in ("iterations", "normal", "spec_accept", "spec_fallback",
                              "accepted_tokens", "passes", "reads")} == {
        "iterations": 2, "normal": 1, "spec_accept": 1, "spec_fallback": 0,
        "accepted_tokens": 3, "passes": 6, "reads": 6 + 12}


def test_malformed_trace_is_one_clear_message(capsys, write_trace):
    path = write_trace([header(), rec(0, [1, 2], 0), rec(1, [1, 1], 0)])
    rc, out, err = run(capsys, "trace", "parse", path)
    assert rc == 2 and out == ""
    assert f"{path}:3: expert 1 selected twice" in err.replace("\n", "")
    assert "Traceback" not in err


def test_missing_file_and_bad_options(capsys, tmp_path):
    rc, _, err = run(capsys, "trace", "parse", tmp_path / "nope.jsonl")
    assert rc == 2 and "no such trace file" in err
    rc, _, err = run(capsys, "trace", "synth", tmp_path / "x", "--preset", "gpt")
    assert rc == 2 and "'gpt' is not one of" in err and "'k3'" in err


def test_synth_stats_check_pipeline(capsys, tmp_path):
    paths = []
    for d in range(2):
        p = tmp_path / f"d{d}.jsonl"
        assert run(capsys, "trace", "synth", p, "--preset", "tiny", "--domain", d, "--tokens", 80)[0] == 0
        paths.append(p)
    rc, out, _ = run(capsys, "trace", "stats", *paths, "--json")
    stats = json.loads(out)
    assert rc == 0 and len(stats["traces"]) == 2 and len(stats["jaccard"]) == 1
    assert set(stats["traces"][0]["reuse"]) == {"w1", "w8", "w64"}
    assert run(capsys, "trace", "check", *paths)[0] == 0
    dry = []
    for d in range(2):
        p = tmp_path / f"dry{d}.jsonl"
        run(capsys, "trace", "synth", p, "--domain", d, "--dry-run-pass")
        dry.append(p)
    rc, out, _ = run(capsys, "trace", "check", *dry, "--json")
    assert rc == 1 and json.loads(out)["suspicious_first_pass"] == [[str(dry[0]), str(dry[1])]]


def test_plan_recall_demand_pool(capsys, tmp_path):
    t = tmp_path / "t.jsonl"
    run(capsys, "trace", "synth", t, "--preset", "tiny", "--tokens", 40)
    plan = tmp_path / "p.bin"
    rc, out, _ = run(capsys, "plan", t, "-o", plan, "--hints", "oracle", "--freq-out",
                     tmp_path / "f.txt", "--json")
    info = json.loads(out)
    assert rc == 0 and plan.exists() and info["hints_provenance"] == {"source": "oracle"}
    assert (tmp_path / "p.hints.bin").exists()
    rc, out, _ = run(capsys, "trace", "recall", t, "--hints", "oracle", "--json")
    assert rc == 0 and json.loads(out)["hints"]["recall"] == 1.0
    rc, out, _ = run(capsys, "trace", "recall", t, "--hints", tmp_path / "p.hints.bin", "--json")
    assert json.loads(out)["hints"]["provenance"]["file"] == str(tmp_path / "p.hints.bin")
    # tiny's experts are 64 KiB: 1Mi holds 16 of them, 1M (10^6 bytes) only 15
    rc, out, _ = run(capsys, "demand", t, "--capacity", "1Mi,64Ki,1m", "--json")
    rows = json.loads(out)
    assert rc == 0 and [r["capacity_experts"] for r in rows] == [16, 1, 15]
    assert [r["capacity"] for r in rows] == ["1Mi", "64Ki", "1M"]
    assert rows[0]["nominal_miss_gb_per_iteration"] <= rows[1]["nominal_miss_gb_per_iteration"]
    rc, _, err = run(capsys, "demand", t, "--capacity", "lots")
    assert rc == 2 and "is not a size" in err
    rc, out, _ = run(capsys, "pool", "make", tmp_path / "pool", "--layers", 2, "--experts", 3,
                     "--expert-bytes", 4096, "--json")
    assert rc == 0 and json.loads(out)["written"] == 6
    rc, out, _ = run(capsys, "pool", "check", tmp_path / "pool", "--json")
    assert rc == 0 and json.loads(out)["complete"] is True
    rc, _, err = run(capsys, "pool", "make", tmp_path / "pool", "--layers", 2, "--experts", 3,
                     "--expert-bytes", 8192)
    assert rc == 1 and "refusing to overwrite" in err


@pytest.mark.parametrize("cell", ["64G-balloon-mglru", "64g-balloon-mglru", "64Gi-cgroup-mglru",
                                  "E2E-prose-admit"])
def test_bench_run_accepts_cell_names_in_any_case(capsys, tmp_path_factory, cell):
    """The cell parses (any case): bench run goes on to the next check, the host. (The empty
    inventory's message names its directory: one whose path does not say "cell".)"""
    tmp_path = tmp_path_factory.mktemp("inventory")
    rc, _, err = run(capsys, "run", cell, "--host", "nosuch", "--trace", tmp_path / "t.jsonl",
                     "--hosts-dir", tmp_path)
    assert rc == 2 and "unknown host(s): nosuch" in err and "cell" not in err


def test_bench_run_takes_every_size_spelling_and_refuses_a_bare_number(capsys, tmp_path):
    """A cell name's capacity reads as a size option does: 64000M and 64GB are the cell
    64G-balloon-mglru (so the run goes on to the host, which is unknown here); a bare 64 is
    refused with the fix, before any host is looked up."""
    for spelling in ("64000M-balloon-mglru", "64GB-balloon-mglru", "64gib-balloon-mglru"):
        rc, _, err = run(capsys, "run", spelling, "--host", "nosuch", "--trace",
                         tmp_path / "t.jsonl", "--hosts-dir", tmp_path)
        assert rc == 2 and "unknown host(s): nosuch" in err and "cell" not in err, spelling
    rc, _, err = run(capsys, "run", "64-balloon-mglru", "--host", "nosuch", "--trace",
                     tmp_path / "t.jsonl", "--hosts-dir", tmp_path)
    assert rc == 2 and "capacity 64 has no unit: write 64G" in err and "nosuch" not in err
