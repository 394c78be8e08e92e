"""The prefetch results numbers (bench.judge.prefetch_conditions.conditions), from run
rows and stored details as the store hands them: n over retained runs only, the change in
median iteration time against no prefetch, per-pair changes (campaign, repetition), the hint
source and recall of the plan replayed, and the median delivery counters."""

from __future__ import annotations

import pytest

from bench.judge.prefetch_conditions import conditions, measured_hints
from bench.results.prefetch_views import delivery_table


def _run(rid, cell, t, rep, retained=True, campaign="c1"):
    return {"run_id": rid, "cell": cell, "iteration_median_s": t, "repetition": rep,
            "retained": retained, "campaign_id": campaign}


def _details(source, recall, sub, over, comp, left=0):
    return {"provenance": {"source": source, "recall": recall},
            "hints": {"submitted": sub, "overwritten": over, "completed": comp, "left": left}}


def test_speed_up_recall_and_counters_per_condition():
    runs = [_run("n0", "200M-cgroup-classic", 1.0, 0), _run("n1", "200M-cgroup-classic", 1.2, 1),
            _run("a0", "200M-cgroup-classic-oracle-advice", 0.9, 0),
            _run("a1", "200M-cgroup-classic-oracle-advice", 1.14, 1),
            _run("ax", "200M-cgroup-classic-oracle-advice", 0.1, 2, retained=False),
            _run("p0", "200M-cgroup-classic-pilot-block", 1.1, 0)]
    details = {"a0": _details("oracle", 1.0, 100, 0, 100), "a1": _details("oracle", 1.0, 100,
                                                                          10, 90),
               "p0": _details("previous-token", 0.36, 50, 40, 10)}
    rows = conditions([{"id": "g1", "runs": runs}], details)
    by = {r["prefetch"]: r for r in rows}
    assert [r["prefetch"] for r in rows] == ["none", "oracle-advice", "pilot-block"]
    assert by["none"]["n"] == 2 and by["none"]["median_s"] == pytest.approx(1.1)
    adv = by["oracle-advice"]
    assert adv["n"] == 2                       # the rejected run is not counted
    assert adv["median_s"] == pytest.approx(1.02)
    assert adv["vs_none"] == pytest.approx(1.02 / 1.1 - 1)
    assert adv["pairs"] == 2 and adv["pair_range"] == pytest.approx([-0.1, -0.05])
    assert adv["pair_median"] == pytest.approx(-0.075)
    assert adv["source"] == ["oracle"] and adv["recall"] == 1.0
    assert (adv["submitted"], adv["overwritten"], adv["completed"]) == (100, 5, 95)
    pil = by["pilot-block"]
    assert pil["pairs"] == 1 and pil["pair_median"] == pytest.approx(0.1)
    assert pil["recall"] == 0.36 and pil["source"] == ["previous-token"]
    t = delivery_table({"conditions": rows})
    assert t.row_count == 3


def test_a_group_with_no_prefetch_cells_shows_nothing():
    runs = [_run("n0", "200M-cgroup-classic", 1.0, 0)]
    assert conditions([{"id": "g1", "runs": runs}], {}) == []


def test_recall_that_differs_between_runs_is_shown_as_a_range():
    runs = [_run("n0", "1G-none-classic", 1.0, 0),
            _run("p0", "1G-none-classic-pilot-advice", 1.0, 0),
            _run("p1", "1G-none-classic-pilot-advice", 1.0, 1)]
    rows = conditions([{"id": "g1", "runs": runs}],
                      {"p0": _details("file", 0.5, 1, 0, 1), "p1": _details("file", 0.6, 1, 0,
                                                                            1)})
    assert rows[1]["recall"] == [0.5, 0.6]


def _per_pass(sub, over, comp, left, passes=2, done=2):
    return {"passes": passes, "passes_done": done, "pass_hints_submitted": sub,
            "pass_hints_overwritten": over, "pass_hints_completed": comp,
            "pass_hints_left": left}


def test_counters_are_the_measured_pass_where_the_agent_records_each_pass():
    """The summary's total holds the warm-up's hints too; the per-pass lists' last entry is
    the measured pass. Older bundles (no per-pass lists) keep the total, labelled as such."""
    runs = [_run("n0", "1G-none-classic", 1.0, 0),
            _run("new", "1G-none-classic-oracle-advice", 1.0, 0),
            _run("old", "1G-none-classic-pilot-advice", 1.0, 0)]
    new = _details("oracle", 1.0, 200, 30, 170)
    new["per_pass"] = _per_pass([100, 100], [20, 10], [80, 90], [0, 0])
    old = _details("previous-token", 0.3, 60, 40, 20)
    rows = {r["prefetch"]: r for r in conditions([{"id": "g1", "runs": runs}],
                                                 {"new": new, "old": old})}
    adv = rows["oracle-advice"]
    assert (adv["submitted"], adv["overwritten"], adv["completed"], adv["left"]) == \
        (100, 10, 90, 0)
    assert adv["counted_over"] == "measured pass"
    pil = rows["pilot-advice"]
    assert (pil["submitted"], pil["counted_over"]) == (60, "all passes")
    assert rows["none"]["counted_over"] is None
    assert delivery_table({"conditions": list(rows.values())}).row_count == 3


@pytest.mark.parametrize("per_pass", [
    _per_pass([100], [0], [100], [0]),                     # one entry for two passes
    _per_pass([100, 100], [0, 0], [100, 100], [0, 0], done=1),   # a pass not done
    _per_pass([100, -1], [0, 0], [100, 100], [0, 0]),      # not a count
    _per_pass([100, True], [0, 0], [100, 100], [0, 0]),
    _per_pass([100, 100], None, [100, 100], [0, 0]),
    _per_pass([], [], [], [], passes=0, done=0)])
def test_per_pass_counters_that_do_not_fit_fall_back_to_the_total(per_pass):
    d = _details("oracle", 1.0, 200, 0, 200)
    d["per_pass"] = per_pass
    assert measured_hints(d) == ({"submitted": 200, "overwritten": 0, "completed": 200,
                                  "left": 0}, "all passes")


def test_a_run_with_no_counters_counts_nothing():
    assert measured_hints(None) == ({}, None)
    assert measured_hints({"hints": {"submitted": None}}) == ({}, None)
