"""bench.matrix.runspec on data: specs built from cells, inventory entries, plan info and probed facts,
and the refusals (each naming the fix)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.errors import InputError, SafetyError
from bench.hosts.inventory import Host
from bench.matrix.runspec import RunOptions, build_spec
from bench.plan.planinfo import PlanInfo

G, GiB = 10 ** 9, 1 << 30     # capacities in the paper's decimal GB; binary where it says Gi
HOST = Host(name="gh200-a", address="10.0.0.21", transport="ssh", mem_total=480 * G,
            mem_floor=64 * G, pool_dir="/data/pool", work_dir="/var/lib/bench",
            source="hosts/gh200-a.toml")
FACTS = {"mem_total_bytes": 470 * G, "mglru": "0x0007", "kernel": "6.8.0",
         "cgroup": {"backend": "v2"}}
PLAN = PlanInfo(sha256="a" * 64, layers=92, experts_per_layer=896, expert_bytes=17_550_000,
                iterations=283, trace="prose.jsonl", trace_sha256="b" * 64)
RUNNER = Path(__file__).resolve().parents[2] / "agents" / "runner.py"


def test_spec_of_a_balloon_cell_has_every_field_of_docs_bundle_md():
    spec = build_spec("64g-balloon-mglru", HOST, PLAN, run_id="c12-r0042",
                      facts=FACTS, options=RunOptions(campaign="c12", position=42,
                                                      created="2026-11-29T19:00:00Z"))
    assert spec["capacity_bytes"] == 64 * G and spec["mechanism"] == "balloon"
    assert spec["cell"] == "64G-balloon-mglru"          # canonical, whatever the input case
    assert spec["cgroup_headroom_bytes"] == 6 * GiB     # Algorithm 1: C + 6 GiB, exact bytes
    assert spec["plan"] == f"plans/{'a' * 64}.bin" and spec["plan_sha256"] == "a" * 64
    # the pool's keyed directory under the host's pool_dir: <L>x<E>x<S>-s<seed>
    assert spec["pool"] == "/data/pool/92x896x17550000-s0"
    assert spec["pool_bytes"] == 92 * 896 * 17_550_000
    assert spec["agent"] == {"path": "native/bench-agent", "source_sha256": None, "threads": 8,
                             "passes": 2, "arena_bytes": 0, "nocache": None, "freq": None}
    assert spec["expect_boot"] == {"boot_id": None, "mem": None, "lru_gen": None}
    assert spec["workload"] == {"trace": "prose.jsonl", "trace_sha256": "b" * 64, "batch": 1}
    doc = (Path(__file__).resolve().parents[2] / "docs" / "bundle.md").read_text()
    example = json.loads(doc.split("```json", 1)[1].split("```", 1)[0])
    assert set(example) <= set(spec)
    json.dumps(spec)  # plain data


def test_modes_set_arena_and_nocache():
    s = build_spec("256g-cgroup-mglru-pinned", HOST, PLAN, run_id="r1", facts=FACTS)
    assert s["agent"]["arena_bytes"] == 256 * G       # the paper's VmLck = 238 GiB at C = 256 GB
    s = build_spec("256g-cgroup-mglru-hybrid", HOST, PLAN, run_id="r1", facts=FACTS)
    assert s["agent"]["arena_bytes"] == 128 * G
    s = build_spec("256Gi-cgroup-mglru-pinned", HOST, PLAN, run_id="r1", facts=FACTS)
    assert s["agent"]["arena_bytes"] == 256 * GiB and s["cell"] == "256Gi-cgroup-mglru-pinned"
    s = build_spec("64g-cgroup-classic-nocache", HOST, PLAN, run_id="r1", facts=FACTS,
                   options=RunOptions(nocache="dontneed"))
    assert s["agent"]["nocache"] == "dontneed" and s["agent"]["arena_bytes"] == 0


def test_prefetch_needs_a_hint_plan():
    with pytest.raises(InputError, match="no hint plan"):
        build_spec("64g-cgroup-mglru-pilot-advice", HOST, PLAN, run_id="r1", facts=FACTS)
    p = replace(PLAN, hints_sha256="c" * 64, hints_provenance={"source": "oracle"})
    s = build_spec("64g-cgroup-mglru-pilot-advice", HOST, p, run_id="r1", facts=FACTS)
    assert s["hints"] == f"plans/{'c' * 64}.hints.bin" and s["delivery"] == "advice"
    with pytest.raises(InputError, match="no prefetch"):
        build_spec("64g-cgroup-mglru", HOST, p, run_id="r1", facts=FACTS)


@pytest.mark.parametrize("cell, facts, options, err, words", [
    ("512g-none-mglru", FACTS, RunOptions(), SafetyError, "above the host's memory"),
    ("475g-none-mglru", FACTS, RunOptions(), SafetyError, "above the host's memory"),  # MemTotal
    ("93g-memboot-mglru", FACTS, RunOptions(), InputError, "memboot"),
    ("32G-memboot-mglru", FACTS, RunOptions(mem="32000000000"), SafetyError,
     "below the host's floor"),
    # expect_boot.mem is kernel text: mem=62G there is 62 GiB, which is 66.6 GB
    ("70G-memboot-mglru", FACTS, RunOptions(mem="62G"), SafetyError,
     "capacity is above mem=62G (62Gi)"),
    ("64G-cgroup-mglru", FACTS, RunOptions(mem="102000000000"), InputError,
     "mem=102000000000 (102G) is given but cell 64G-cgroup-mglru is neither a memboot nor a "
     "balloon cell"),
    ("80G-balloon-mglru", FACTS, RunOptions(mem="70000000000"), SafetyError,
     "capacity is above mem=70000000000 (70G)"),
    ("600G-memboot-mglru", None, RunOptions(mem="600000000000"), SafetyError,
     "above the host's memory"),
    ("64g-none-mglru", dict(FACTS, mglru=None), RunOptions(), InputError, "lru_gen"),
    ("64g-cgroup-classic", dict(FACTS, cgroup={"backend": "none"}), RunOptions(), InputError,
     "memory cgroup"),
    ("64g-none-classic", FACTS, RunOptions(passes=1), InputError, "passes"),
    ("64g-none-classic", FACTS, RunOptions(threads=0), InputError, "threads"),
])
def test_refusals_name_the_fix(cell, facts, options, err, words):
    with pytest.raises(err) as e:
        build_spec(cell, HOST, PLAN, run_id="r1", facts=facts, options=options)
    assert words in e.value.message and e.value.hint


def test_a_balloon_on_a_host_booted_to_size_expects_that_boot():
    s = build_spec("64G-balloon-mglru", HOST, PLAN, run_id="r1", facts=FACTS,
                   options=RunOptions(mem="100000000000"))
    assert s["expect_boot"]["mem"] == "100000000000"


def test_memboot_at_the_floor_and_classic_without_mglru_are_fine():
    s = build_spec("93G-memboot-mglru", HOST, PLAN, run_id="r1", facts=FACTS,
                   options=RunOptions(mem="102000000000", lru_gen="on"))
    assert s["expect_boot"] == {"boot_id": None, "mem": "102000000000", "lru_gen": "on"}
    build_spec("64G-memboot-mglru", HOST, PLAN, run_id="r1", facts=FACTS,
               options=RunOptions(mem="64000000000"))             # at the floor
    build_spec("64g-none-classic", HOST, PLAN, run_id="r1", facts=dict(FACTS, mglru=None))
    # without facts, the inventory's memory is the bound
    build_spec("470g-none-classic", HOST, PLAN, run_id="r1", facts=None)


@pytest.mark.parametrize("bad", ["1g-none-classic;rm -rf /", "1g-none-classic$(id)",
                                 "1000-none-classic", "1g-none", "`x`-none-classic"])
def test_bad_cell_names_are_input_errors(bad):
    with pytest.raises(InputError) as e:
        build_spec(bad, HOST, PLAN, run_id="r1", facts=FACTS)
    assert "mechanisms:" in e.value.hint


@pytest.mark.parametrize("rid", ["", ".", "..", "a/b", "x" * 65, "a b", "$(id)"])
def test_bad_run_ids(rid):
    with pytest.raises(InputError, match="run id"):
        build_spec("1g-none-classic", HOST, PLAN, run_id=rid, facts=FACTS)


def test_plan_digests_are_checked():
    with pytest.raises(InputError, match="sha256"):
        build_spec("1g-none-classic", HOST, replace(PLAN, sha256="../../etc"), run_id="r1")


def test_the_runner_accepts_what_runspec_builds(tmp_path):
    """The host-side runner's own validation agrees (run up to its file checks)."""
    sys.path.insert(0, str(RUNNER.parent))
    try:
        import runner
    finally:
        sys.path.pop(0)
    for name in ("1g-none-classic", "64Gi-cgroup-mglru-pinned", "768m-balloon-classic",
                 "256G-cgroup-mglru-pilot-advice"):
        plan = replace(PLAN, hints_sha256="c" * 64) if "pilot" in name else PLAN
        spec = build_spec(name, HOST, plan, run_id="r1", facts=FACTS)
        cell = runner.parse_cell(spec["cell"])
        for key in ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch", "delivery"):
            assert spec[key] == cell[key]
        assert runner.parse_cell(name) == cell          # the runner reads any case too
