"""bench.matrix.regime and the scale keys it reads (memory, reclaims), on matrix files and the
shipped lab scales: the demand model's miss fraction at the paper's capacity next to the lab's,
a point above the lab's working set flagged out of regime, relative capacities resolved with
the scale's memory or reported as not checked."""

from __future__ import annotations

import pytest

from bench.matrix.load import load_matrix
from bench.matrix.regime import TOLERANCE, regime, regime_lines

MATRIX = """
name = "rt"
description = "regime test"
repetitions = 1
[workload]
trace = "tiny"
[estimate]
run_seconds = 1
reboot_seconds = 1
[cells]
capacities = ["4M", "2M"]
mechanisms = ["cgroup"]
reclaims = ["mglru"]
[[cells.extra]]
cell = "8M-none-mglru"
[scale.lab]
capacities = { "4M" = "%s", "2M" = "%s", "8M" = "40M" }
reclaims = { mglru = "classic" }
%s
"""


def write(tmp_path, four, two, extra=""):
    p = tmp_path / "rt.toml"
    p.write_text(MATRIX % (four, two, extra))
    return p


def test_same_workload_same_capacities_is_in_regime(tmp_path):
    m = load_matrix(write(tmp_path, "4M", "2M"), "lab")
    pts = regime(m, tmp_path)
    assert [(p.paper, p.lab) for p in pts] == [("4M", "4M"), ("2M", "2M")]  # not the none cell
    assert all(p.status == "ok" and p.difference == 0 for p in pts)
    assert 0 < pts[0].paper_miss < pts[1].paper_miss < 1


def test_a_capacity_above_the_working_set_is_out_of_regime(tmp_path):
    m = load_matrix(write(tmp_path, "20M", "2M"), "lab")
    four, two = regime(m, tmp_path)
    assert four.lab_miss == 0 and four.paper_miss > TOLERANCE
    assert four.status == "out of regime" and two.status == "ok"
    assert "out of regime" in "\n".join(regime_lines([four, two]))


def test_relative_capacities_need_the_scale_memory(tmp_path):
    m = load_matrix(write(tmp_path, "0.5mem", "2M"), "lab")
    assert regime(m, tmp_path)[0].status == "not checked"
    m = load_matrix(write(tmp_path, "0.5mem", "2M", 'memory = "8M"'), "lab")
    p = regime(m, tmp_path)[0]
    assert p.lab_bytes == 4_000_000 and p.status == "ok"


def test_reclaims_replace_every_cell(tmp_path):
    m = load_matrix(write(tmp_path, "4M", "2M"), "lab")
    assert {p.reclaim for p in m.points} == {"classic"}
    assert {p.reclaim for p in load_matrix(write(tmp_path, "4M", "2M")).points} == {"mglru"}


@pytest.mark.parametrize("name", ["equal-memory", "capacity", "reclaim"])
def test_shipped_lab_scales_keep_the_regime(name, tmp_path):
    pts = regime(load_matrix(name, "lab"), tmp_path)
    assert pts and all(p.status == "ok" for p in pts), regime_lines(pts)
