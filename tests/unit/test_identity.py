"""Result identity (bench.judge.identity): the workload of a stored spec, the group key,
what tells groups apart, the --workload prefix and the pairing of compared runs. Specs are the
ones the real builders make (bench.matrix.runspec, bench.matrix.engine_cells)."""

from types import SimpleNamespace

import pytest

from bench.errors import InputError
from bench.judge import identity
from bench.matrix import engine_cells
from bench.matrix.runspec import RunOptions, build_spec
from bench.plan.planinfo import PlanInfo
from tests.support.bundlegen import ENGINE

HOST = SimpleNamespace(name="a", mem_total=None, mem_floor=None, pool_dir="/p", work_dir="/w",
                       source=None)


def plan(**kw):
    base = dict(sha256="c" * 64, layers=4, experts_per_layer=32, expert_bytes=1 << 20,
                iterations=10, trace="tiny.jsonl", trace_sha256="b" * 64)
    return PlanInfo(**(base | kw))


def spec(cell="64m-cgroup-mglru", p=None, **opt):
    return build_spec(cell, HOST, p or plan(), run_id="r1",
                      options=RunOptions(controller_version="0.1.0", **opt))


def test_workload_fields_come_from_the_stored_spec():
    w = identity.workload_of(spec(threads=4, passes=3))
    assert w["kind"] == "replay" and w["trace"] == "tiny.jsonl"
    assert (w["trace_sha256"], w["plan_sha256"]) == ("b" * 64, "c" * 64)
    assert (w["pool_bytes"], w["threads"], w["passes"], w["batch"]) == (128 << 20, 4, 3, 1)
    assert w["domain"] is None
    assert len(w["digest"]) == identity.WORKLOAD_DIGEST_LEN and int(w["digest"], 16) >= 0


def test_workload_digest_is_stable_and_separates_what_it_must():
    base = identity.workload_of(spec())["digest"]
    assert identity.workload_of(spec())["digest"] == base
    # the trace's file name is shown, not compared; the cell and run are not the workload
    assert identity.workload_of(spec(p=plan(trace="renamed.jsonl")))["digest"] == base
    assert identity.workload_of(spec("64m-balloon-classic"))["digest"] == base
    # a prefetch cell replays its baseline's workload (the hint plan belongs to the cell)
    with_hints = plan(hints_sha256="d" * 64)
    assert identity.workload_of(spec("64m-cgroup-mglru-oracle-advice", p=with_hints)
                                )["digest"] == base
    for other in (spec(p=plan(trace_sha256="e" * 64)), spec(p=plan(sha256="f" * 64)),
                  spec(p=plan(expert_bytes=1 << 19)), spec(threads=4), spec(passes=3),
                  spec(p=plan(batch=2))):
        assert identity.workload_of(other)["digest"] != base


def test_engine_workload_is_config_and_prompt():
    cfg = engine_cells.parse_engine(ENGINE, "bundlegen")

    def w(cell):
        return identity.workload_of(engine_cells.build_spec(cell, HOST, cfg, run_id="r",
                                                            pair_index=0, first="admit", seed=0))
    a, b, c = w("e2e-prose-admit"), w("e2e-prose-nocache"), w("e2e-code-admit")
    assert a["kind"] == "engine" and a["config_sha256"] == cfg.digest and a["prompt"] == "prose"
    assert a["digest"] == b["digest"] != c["digest"]


def run(cell="64M-cgroup-mglru", host="a", w=None, kernel="6.8", campaign="c1", rep=0, **kw):
    fp = {"kernel": kernel, "controller_version": "0.1.0", "settings": {"vm.swappiness": 60}}
    digest = f"fp{kernel}"
    return {"cell": cell, "host": host, "campaign_id": campaign, "repetition": rep,
            "workload": w or identity.workload_of(spec()),
            "fingerprint": identity.fingerprint_view(digest, fp), "fingerprint_data": fp, **kw}


def test_groups_split_on_host_workload_and_fingerprint_and_name_the_difference():
    w2 = identity.workload_of(spec(p=plan(trace_sha256="e" * 64)))
    runs = [run(), run(rep=1), run(host="b"), run(w=w2), run(kernel="6.1")]
    groups = identity.label_groups(identity.group_runs(runs))
    assert sorted(len(g["runs"]) for g in groups) == [1, 1, 1, 2]
    assert [g["id"] for g in groups] == ["g1", "g2", "g3", "g4"]
    assert [(g["host"], g["fingerprint"]["kernel"]) for g in groups][-1] == ("b", "6.8")
    diff = identity.differences(groups)
    assert diff["host"] == ["a", "b"]
    assert set(diff["workload"]) == {"trace_sha256"}
    assert set(diff["fingerprint"]) == {"kernel"}
    text = identity.describe_differences(diff)
    assert "host (a, b)" in text and "trace_sha256 (bbbbbbbbbbbb, eeeeeeeeeeee)" in text
    assert "fingerprint kernel (6.1, 6.8)" in text
    # settings differences are named by setting
    other = run(kernel="6.8")
    other["fingerprint_data"] = dict(other["fingerprint_data"], settings={"vm.swappiness": 10})
    other["fingerprint"] = identity.fingerprint_view("fpX", other["fingerprint_data"])
    d = identity.differences(identity.group_runs([run(), other]))
    assert d == {"fingerprint": {"settings": ["vm.swappiness"]}}


def test_grouping_without_the_cell_spans_cells():
    runs = [run(), run(cell="64M-balloon-mglru"), run(host="b")]
    assert len(identity.group_runs(runs)) == 3
    assert [len(g["runs"]) for g in identity.group_runs(runs, with_cell=False)] == [2, 1]


def test_workload_prefix_filter_refuses_ambiguous_and_unknown():
    w1 = dict(identity.workload_of(spec()), digest="abc123456789")
    w2 = dict(identity.workload_of(spec(threads=4)), digest="abd987654321")
    runs = [run(w=w1), run(w=w2), run(w=w1, rep=1)]
    assert identity.select_workload(runs, None) == runs
    assert identity.select_workload(runs, "ABC") == [runs[0], runs[2]]
    assert identity.select_workload(runs, "abd987654321") == [runs[1]]
    with pytest.raises(InputError, match="ambiguous: it matches abc123456789 .*abd987654321"):
        identity.select_workload(runs, "ab")
    with pytest.raises(InputError, match="no stored runs with workload 0000") as e:
        identity.select_workload(runs, "0000")
    assert "abc123456789, abd987654321" in e.value.hint
    for bad in ("xyz", "", " "):
        with pytest.raises(InputError, match="not a hex"):
            identity.select_workload(runs, bad)


def test_pairs_stay_within_campaign_and_repetition():
    a = [run(rep=0, v=1), run(rep=1, v=2), run(campaign=None, v=3), run(campaign="c2", v=4)]
    b = [run(rep=1, v=5), run(rep=0, v=6), run(campaign=None, v=7), run(campaign="c2", v=8),
         run(campaign="c2", v=9)]
    pairs = identity.pair_runs(a, b)
    assert sorted((x["v"], y["v"]) for x, y in pairs) == [(1, 6), (2, 5)]
