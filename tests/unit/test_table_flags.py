"""Results tables say how far to trust each number: n (retained/total) and spread beside every
median, "!" on the cells bench.judge.stats.reliability_flags flags, one caption line per flag
naming its cells, what the columns mean under the table and in `--help`. Summaries are made by
the real bench.judge.stats.summarize from per-run medians, flagged by bench.store.queries."""

from __future__ import annotations

import io
import re

from rich.console import Console
from typer.testing import CliRunner

from bench.cli.app import app
from bench.judge import stats
from bench.results import store_views
from bench.store.queries import flagged
from tests.support.golden import render

GROUP = {"id": "g1", "host": "h", "workload": {"digest": "w", "kind": "replay", "trace": "t"},
         "fingerprint": {"digest": "f", "kernel": "k", "controller_version": "c"}}


def wide_render(table) -> str:
    """The table on a console wide enough that no cell wraps."""
    con = Console(width=250, record=True, file=io.StringIO(), color_system=None)
    con.print(table)
    return con.export_text()


def summary(times: list[float], rejected: int = 0) -> dict:
    runs = [{"retained": True, "iteration_median_s": t} for t in times]
    runs += [{"retained": False, "iteration_median_s": 9.0}] * rejected
    return flagged(stats.summarize(runs))


def reclaim(on: dict, off: dict | None) -> dict:
    return {"matrix": "reclaim", "groups": [GROUP], "warnings": [], "agreement": [],
            "interpolation": [], "rows": [{"group": "g1", "capacity_bytes": 64 << 20,
                                           "mechanism": "balloon", "mglru": on, "classic": off,
                                           "mglru_over_classic": None}]}


def test_wide_spread_over_four_runs_is_flagged_and_named():
    on = summary([1.0, 1.2, 1.4, 1.52])                  # spread (1.52 - 1.0) / 1.3 = 40%
    text = render(store_views.matrix_table(reclaim(on, summary([1.0, 1.01, 1.02]))))
    assert on["flags"] == stats.reliability_flags(4, on["spread"]) == ["spread 40% > 10%"]
    assert store_views.seconds_cell(on) == "1.300 (4/4,40.0%)!"
    wide = wide_render(store_views.matrix_table(reclaim(on, summary([1.0, 1.01, 1.02]))))
    assert "1.300 (4/4,40.0%)!" in wide
    assert "1.010 (3/3,2.0%)" in wide and "1.010 (3/3,2.0%)!" not in wide
    assert "! spread 40% > 10%: g1 64Mi balloon on\n" in re.sub(r" +\n", "\n", text)
    assert store_views.FLAG_LEGEND in " ".join(text.split())


def test_one_run_shows_no_spread():
    one = summary([2.0], rejected=1)
    assert one["spread"] == 0.0          # the statistic; the table must not print it as 0.0%
    text = render(store_views.matrix_table(reclaim(one, None)))
    assert store_views.seconds_cell(one) == "2.000 (1/2,-)!" and "0.0%" not in text
    assert "! n=1 < 3: no spread: g1 64Mi balloon on" in text


def test_unflagged_table_prints_no_flag_legend():
    ok = summary([1.0, 1.01, 1.02])
    text = " ".join(render(store_views.matrix_table(reclaim(ok, ok))).split())
    assert "!" not in text and store_views.LEGENDS["reclaim"] in text


def test_one_flag_line_lists_every_cell_it_holds_for():
    two = summary([1.0, 1.01])
    m = reclaim(two, two)
    m["rows"].append(dict(m["rows"][0], capacity_bytes=128 << 20, mechanism="cgroup"))
    text = " ".join(render(store_views.matrix_table(m)).split())
    assert ("! n=2 < 3: g1 64Mi balloon on, g1 64Mi balloon off, g1 128Mi cgroup on, "
            "g1 128Mi cgroup off") in text


def test_help_explains_every_column_legend():
    def squash(s: str) -> str:
        return re.sub(r"\s+", "", s)
    res = CliRunner().invoke(app, ["results", "--help"])
    assert res.exit_code == 0
    for kind in ("capacity", "reclaim", "equal-memory", "prefetch", "admission", "end-to-end"):
        assert squash(store_views.LEGENDS[kind]) in squash(res.output), kind
    res = CliRunner().invoke(app, ["compare", "--help"])
    assert squash(store_views.LEGENDS["compare"]) in squash(res.output)
