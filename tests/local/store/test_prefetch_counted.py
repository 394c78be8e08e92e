"""The prefetch view's delivery counters over a real store (migrations, ingest of generated
bundles): a bundle whose agent recorded each pass's counters shows the measured pass's; an
older bundle (whole-run totals only) shows its totals, labelled as warm-up + measured."""

from __future__ import annotations

from bench.results.prefetch_views import delivery_table, prefetch_results
from bench.store.ingest import ingest_bundle


def _per_pass(parts):
    summary = parts["agent.jsonl"][-1]
    # the warm-up pass took 6 hints, the measured pass 4 (the totals: 10, as generated)
    summary.update(pass_hints_submitted=[6, 4], pass_hints_overwritten=[1, 0],
                   pass_hints_completed=[5, 3], pass_hints_left=[0, 1],
                   hints={"submitted": 10, "overwritten": 1, "completed": 8, "left": 1})


def test_measured_pass_counters_and_old_totals(store, bundles):
    for rid, cell, edit, campaign in (("n0", "64Mi-cgroup-mglru", None, "c1"),
                                      ("new", "64Mi-cgroup-mglru-oracle-advice", _per_pass, "c1"),
                                      ("old", "64Mi-cgroup-mglru-oracle-block", None, "c1")):
        res = ingest_bundle(store, bundles(rid, cell, campaign=campaign, edit=edit),
                            nominal_miss_bytes=2e7)
        assert res["retained"], res
    rows = {r["prefetch"]: r for r in prefetch_results(store)["conditions"]}
    new, old = rows["oracle-advice"], rows["oracle-block"]
    assert [new[c] for c in ("submitted", "overwritten", "completed", "left")] == [4, 0, 3, 1]
    assert new["counted_over"] == "measured pass"
    assert [old[c] for c in ("submitted", "overwritten", "completed", "left")] == [10, 0, 10, 0]
    assert old["counted_over"] == "all passes"
    t = delivery_table({"conditions": list(rows.values())})
    over = list(t.columns[-1].cells)
    assert str(t.columns[-1].header) == "counted over"
    assert sorted(str(x) for x in over) == ["-", "measured pass", "warm-up + measured"]
