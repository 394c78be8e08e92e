"""The prefetch results view's numbers (bench.results.prefetch_views.conditions), from run
rows and stored details as the store hands them: n over retained runs only, the change in
median iteration time against no prefetch, per-pair changes (campaign, repetition), the hint
source and recall of the plan replayed, and the median delivery counters."""

from __future__ import annotations

import pytest

from bench.results.prefetch_views import conditions, delivery_table


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
