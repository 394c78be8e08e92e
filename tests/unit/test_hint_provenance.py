"""Hint plans and their one provenance record (bench.matrix.hintplans) and the check the
`hint_provenance` retention rule makes of it (bench.judge.hintcheck), on plans made by the
canonical parser from a synthetic trace: every producer writes the record the rule reads
(the v1 rule read a "kind" nobody wrote), recall is bench.sim.recall's of that very plan, and
a label that contradicts the plan (pitfall 8) or a record about another plan (pitfall 11) is
rejected."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest

from bench.errors import InputError
from bench.judge.hintcheck import check_hints
from bench.matrix.hintplans import (campaign_hint_plans, default_choice, label_problem,
                                    make_hints, provenance)
from bench.plan.planfile import encode, oracle_hints, write_plan
from bench.plan.prepared import plan_from_trace_file
from bench.sim.recall import recall
from tests.support.bundlegen import fixture_plan


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _run(label: str, choice: str | None = None, tamper=None) -> tuple[dict, dict]:
    """(spec, files) as a producer + runner leave them for cell label `label`."""
    plan = fixture_plan()
    hints = make_hints(plan, choice or default_choice(label))
    pdata, hdata = encode(plan), encode(hints)
    spec = {"prefetch": label, "plan_sha256": _sha(pdata), "hints_sha256": _sha(hdata),
            "workload": {"trace_sha256": "b" * 64}}
    spec["hints_provenance"] = provenance(plan, hints, hints_sha256=spec["hints_sha256"],
                                          plan_sha256=spec["plan_sha256"],
                                          trace_sha256="b" * 64)
    files = {"plan.bin": pdata, "hints.bin": hdata}
    if tamper:
        tamper(spec, files)
    return spec, files


def test_the_record_is_the_recall_of_that_plan_on_that_trace():
    plan = fixture_plan()
    for choice, source in (("oracle", "oracle"), ("pilot", "previous-token")):
        hints = make_hints(plan, choice)
        rec = provenance(plan, hints, hints_sha256="1" * 64, plan_sha256="2" * 64,
                         trace_sha256="3" * 64)
        assert rec["source"] == source
        assert rec["recall"] == round(recall(plan, hints)["recall"], 6)
        assert rec["exact_next_pass"] is (choice == "oracle")
        assert (rec["hints_sha256"], rec["plan_sha256"], rec["trace_sha256"]) == (
            "1" * 64, "2" * 64, "3" * 64)
    assert provenance(plan, make_hints(plan, "oracle"), hints_sha256="1" * 64,
                      plan_sha256="2" * 64, trace_sha256=None)["recall"] == 1.0
    pilot = provenance(plan, make_hints(plan, "pilot"), hints_sha256="1" * 64,
                       plan_sha256="2" * 64, trace_sha256=None)["recall"]
    assert 0 < pilot < 1


@pytest.mark.parametrize("label", ["oracle", "pilot"])
def test_what_the_producers_write_passes(label):
    ok, why = check_hints(*_run(label))
    assert ok, why
    assert "recomputed" in why


def test_the_oracle_labelled_as_the_pilot_is_rejected():
    ok, why = check_hints(*_run("pilot", choice="oracle"))
    assert not ok and "oracle" in why


def test_the_oracle_in_a_file_labelled_as_the_pilot_is_rejected(tmp_path):
    plan = fixture_plan()
    f = tmp_path / "pred.hints.bin"
    write_plan(f, oracle_hints(plan))
    ok, why = check_hints(*_run("pilot", choice=str(f)))
    assert not ok and "oracle" in why
    # even with its provenance stripped, an exact next-pass plan is the oracle
    bare = oracle_hints(plan)
    write_plan(f, type(bare)(bare.kind, bare.layers, bare.experts_per_layer, bare.expert_bytes,
                             bare.iterations, {}))
    ok, why = check_hints(*_run("pilot", choice=str(f)))
    assert not ok and "exact next-pass" in why


def test_a_predictor_labelled_as_the_oracle_is_rejected():
    ok, why = check_hints(*_run("oracle", choice="pilot"))
    assert not ok and "labelled oracle" in why


@pytest.mark.parametrize("tamper, words", [
    (lambda s, f: s.update(hints_provenance={"kind": "oracle"}), "source"),
    (lambda s, f: s.update(hints_provenance=None), "not a provenance record"),
    (lambda s, f: s["hints_provenance"].update(recall=0.9), "recomputed"),
    (lambda s, f: s["hints_provenance"].update(recall=float("nan")), "not a number"),
    (lambda s, f: s["hints_provenance"].update(hints_sha256="e" * 64), "another hints"),
    (lambda s, f: s["workload"].update(trace_sha256="f" * 64), "another trace"),
    (lambda s, f: s["hints_provenance"].update(source="previous-token"), "source"),
    (lambda s, f: f.pop("hints.bin"), "lacks the replayed plans"),
    (lambda s, f: f.update({"hints.bin": f["hints.bin"] + b"x"}), "does not hash"),
    (lambda s, f: s.update(hints_sha256=None), "hash not recorded"),
])
def test_a_record_that_is_not_about_the_plans_replayed_is_rejected(tamper, words):
    spec, files = _run("oracle", tamper=tamper)
    ok, why = check_hints(spec, files)
    assert not ok and words in why, why


def test_label_problem_is_pure_data():
    base = {"source": "previous-token", "recall": 0.4, "exact_next_pass": False}
    assert label_problem("pilot", base) is None
    assert label_problem("pilot", dict(base, source="file", origin="pilot")) is None
    assert label_problem("pilot", dict(base, source="file", origin="oracle"))
    assert label_problem("mypred", dict(base, exact_next_pass=True))
    assert label_problem("oracle", dict(base, source="oracle", exact_next_pass=True)) is None


def test_no_prefetch_needs_no_record():
    assert check_hints({"prefetch": "none"}, {}) == (True, "no prefetch")


def test_a_named_label_needs_a_file():
    with pytest.raises(InputError, match="names no built-in plan"):
        default_choice("mypred")
    assert default_choice("mypred", {"mypred": "/x.bin"}) == "/x.bin"


def test_campaign_hint_plans_one_per_label_deterministic(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    from bench.trace.synth import generate, preset
    trace.write_text("\n".join(generate(preset("tiny", tokens=12))) + "\n")
    info, path = plan_from_trace_file(trace, data_dir=tmp_path / "d")
    cells = ["32M-none-classic", "32M-none-classic-oracle-advice",
             "32M-none-classic-pilot-block", "32M-none-classic-pilot-advice"]
    a = campaign_hint_plans(info, path, cells, None, tmp_path / "d")
    b = campaign_hint_plans(info, path, list(reversed(cells)), None, tmp_path / "d")
    assert sorted(a) == ["oracle", "pilot"] and a == b
    for label, p in a.items():
        f = tmp_path / "d" / "plans" / f"{p.hints_sha256}.hints.bin"
        assert _sha(f.read_bytes()) == p.hints_sha256
        assert p.hints_provenance["label"] == label
        assert p.hints_provenance["plan_sha256"] == info.sha256
        assert p.hints_provenance["trace_sha256"] == info.trace_sha256
    assert copy.deepcopy(a["oracle"].hints_provenance)["source"] == "oracle"
