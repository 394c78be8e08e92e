"""bench.plan.workload through bench.plan.prepared.workload_plan, on the tiny synth preset:
`domain` selects another trace, `batch` replays N streams merged through the canonical
parser, `fixed_set_bytes` replays one fixed set again and again, and each is part of the
workload identity of the specs built from the plan (bench.judge.identity)."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.errors import InputError
from bench.hosts.inventory import Host
from bench.judge.identity import workload_of
from bench.matrix.runspec import RunOptions, build_spec
from bench.plan.planfile import read_plan
from bench.plan.prepared import workload_plan
from bench.plan.workload import DOMAINS, domain_index
from bench.trace.parse import parse_trace

HOST = Host(name="lab", address="127.0.0.1", transport="local", mem_total=8 << 30,
            mem_floor=1 << 30, pool_dir="/srv/pool", work_dir="/var/lib/bench",
            source="hosts/lab.toml")
FACTS = {"mem_total_bytes": 8 << 30, "mglru": "0x0007", "kernel": "6.1.0",
         "cgroup": {"backend": "v1"}}


def plan_of(tmp_path, **workload):
    info, path = workload_plan({"trace": "tiny", **workload}, tmp_path)
    return info, read_plan(path)


def reads(plan):
    return [[(p.layer, p.experts) for p in it.passes] for it in plan.iterations]


def spec_of(info):
    return build_spec("1G-none-mglru", HOST, info,
                      run_id="t-r0001", facts=FACTS, options=RunOptions())


def test_domain_names_and_indices():
    assert [domain_index(d) for d in DOMAINS] == [0, 1, 2, 3]
    assert domain_index(None) == 0 and domain_index("2") == 2 and domain_index(5) == 5
    assert domain_index("CODE") == 1
    with pytest.raises(InputError, match="not a trace domain"):
        domain_index("poetry")


def test_domain_selects_another_trace(tmp_path):
    prose, p_plan = plan_of(tmp_path, domain="prose")
    code, c_plan = plan_of(tmp_path, domain="code")
    default, _ = plan_of(tmp_path)
    assert default.trace_sha256 == prose.trace_sha256       # prose is the first domain
    assert code.trace_sha256 != prose.trace_sha256 and code.sha256 != prose.sha256
    assert reads(c_plan) != reads(p_plan)
    assert (prose.domain, code.domain) == ("prose", "code")
    assert workload_of(spec_of(code))["digest"] != workload_of(spec_of(prose))["digest"]
    assert spec_of(code)["workload"]["domain"] == "code"


def test_batch_replays_the_union_of_its_streams(tmp_path):
    one, one_plan = plan_of(tmp_path, domain="chat")
    three, plan = plan_of(tmp_path, domain="chat", batch=3)
    assert three.batch == 3 and three.trace_sha256 != one.trace_sha256
    files = sorted((tmp_path / "traces").glob("tiny-d3*.jsonl"))
    assert len(files) == 3
    streams = [parse_trace(f) for f in files]
    assert len(plan.iterations) == min(len(t.iterations) for t in streams)
    assert three.accepted_tokens == sum(
        it.tokens for t in streams for it in t.iterations[:len(plan.iterations)])
    for i, it in enumerate(plan.iterations):
        # the first routing of each layer in every stream is inside the merged pass of it
        merged = {}
        for p in it.passes:
            merged.setdefault(p.layer, set(p.experts))
        for t in streams:
            seen = set()
            for p in t.iterations[i].passes:
                if p.layer not in seen:
                    assert set(p.experts) <= merged[p.layer]
                    seen.add(p.layer)
    assert plan.reads > one_plan.reads
    a, b = spec_of(one), spec_of(three)
    assert b["workload"]["batch"] == 3
    assert workload_of(a)["digest"] != workload_of(b)["digest"]


def test_fixed_set_reads_the_most_selected_experts_every_pass(tmp_path):
    full, full_plan = plan_of(tmp_path)
    size = full.expert_bytes
    info, plan = plan_of(tmp_path, fixed_set_bytes=10 * size + size // 2)
    assert len(plan.iterations) == 1 and plan.reads == 10
    assert info.fixed_set_bytes == 10 * size
    assert (plan.layers, plan.experts_per_layer) == (full_plan.layers,
                                                     full_plan.experts_per_layer)
    counts = Counter((p.layer, e) for it in full_plan.iterations for p in it.passes
                     for e in p.experts)
    chosen = {(p.layer, e) for p in plan.iterations[0].passes for e in p.experts}
    top = sorted(counts, key=lambda k: (-counts[k], k))[:10]
    assert chosen == set(top)
    assert min(counts[k] for k in chosen) >= max(counts[k] for k in counts if k not in chosen)
    assert spec_of(info)["workload"]["fixed_set_bytes"] == 10 * size
    assert workload_of(spec_of(info))["digest"] != workload_of(spec_of(full))["digest"]


def test_refusals_name_the_fix(tmp_path):
    with pytest.raises(InputError, match="distinct ones"):
        plan_of(tmp_path, fixed_set_bytes=1 << 40)
    with pytest.raises(InputError, match="smaller than one expert"):
        plan_of(tmp_path, fixed_set_bytes=1)
    trace = tmp_path / "one.jsonl"
    trace.write_text((tmp_path / "x").as_posix())
    with pytest.raises(InputError, match="needs 2 streams"):
        workload_plan({"trace": str(trace), "batch": 2}, tmp_path)
    with pytest.raises(InputError, match="1..64"):
        plan_of(tmp_path, batch=1000)
