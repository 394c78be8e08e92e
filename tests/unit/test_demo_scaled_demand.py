"""The demo's demand table prints the paper's capacities scaled to the synthetic pool: it says
so (title, a `scaled from` column naming the paper's capacity, the scaling in the caption)."""

from __future__ import annotations

import io

from rich.console import Console

from bench.execute.demo import PAPER_CAPACITIES, scaled_demand, sweep_capacities
from bench.plan.planfile import plan_from_trace
from bench.results import trace_views
from bench.trace.parse import parse_lines
from bench.trace.synth import generate, preset


def _text(table) -> str:
    con = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    con.print(table)
    return con.export_text()


def test_scaled_capacities_say_they_are_scaled():
    plan = plan_from_trace(parse_lines(list(generate(preset("k3", tokens=40, layers=4)))))
    pool = plan.layers * plan.experts_per_layer * plan.expert_bytes
    rows = scaled_demand(plan, pool)
    assert [r["capacity_bytes"] for r in rows] == sweep_capacities(pool)
    assert [r["scaled_from"] for r in rows] == list(PAPER_CAPACITIES)
    text = _text(trace_views.demand_table(rows))
    assert "the paper's capacities scaled to this pool" in text
    for r in rows:      # each scaled capacity on the line of the paper's it stands for
        assert any(r["capacity"] in line and f"paper {r['scaled_from']}" in line
                   for line in text.splitlines())
    assert f"x this pool / the paper's pool ({pool / 1e9:.3g} GB / 1.45 TB)" in text


def test_unscaled_demand_table_says_nothing_of_scaling():
    plan = plan_from_trace(parse_lines(list(generate(preset("k3", tokens=40, layers=4)))))
    rows = [{k: v for k, v in r.items() if k not in ("scaled_from", "scaled_pool_bytes",
                                                      "paper_pool_bytes")}
            for r in scaled_demand(plan, plan.layers * plan.experts_per_layer * plan.expert_bytes)]
    text = _text(trace_views.demand_table(rows))
    assert "scaled" not in text and "paper" not in text
