"""bench.matrix.regime and the scale keys it reads (memory, reclaims), on matrix files and the
shipped lab scales: the demand model's miss fraction at the paper's capacity next to the lab's,
a point above the lab's working set flagged out of regime, relative capacities resolved with
the scale's memory or reported as not checked; the share of the host a balloon or arena locks
as part of the regime; the tolerance against the gaps between the paper's own points; every
shipped matrix with a lab scale or the reason it has none; one lab C per paper C and workload."""

from __future__ import annotations

import dataclasses

import pytest

from bench.cli import main
from bench.matrix.balloon_host import (MIN_BALLOON_BYTES, PAPER_BALLOON_OVERHEAD, PAPER_MEMORY,
                                       paper_locked_share)
from bench.matrix.load import load_matrix, shipped_names
from bench.matrix.regime import (LOCKED_TOLERANCE, TOLERANCE, engine_lines, fixed_set_lines,
                                 no_scale_reason,
                                 regime, regime_lines)
from bench.units import format_size

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
mechanisms = ["%s"]
reclaims = ["mglru"]
[[cells.extra]]
cell = "8M-none-mglru"
[scale.lab]
capacities = { "4M" = "%s", "2M" = "%s", "8M" = "40M" }
reclaims = { mglru = "classic" }
%s
"""


def write(tmp_path, four, two, extra="", mechanism="cgroup"):
    p = tmp_path / "rt.toml"
    p.write_text(MATRIX % (mechanism, four, two, extra))
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
    assert four.status == "out of regime: miss" and two.status == "ok"
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


def test_a_balloon_locks_what_lies_above_c_as_a_share_of_the_host(tmp_path):
    m = load_matrix(write(tmp_path, "4M", "2M", 'memory = "8M"', mechanism="balloon"), "lab")
    four, two = regime(m, tmp_path)
    (lock,) = four.locked
    assert lock.kind == "balloon" and lock.paper == paper_locked_share(4 * 10**6)
    assert lock.paper == (PAPER_MEMORY - PAPER_BALLOON_OVERHEAD - 4e6) / PAPER_MEMORY
    assert lock.lab == (8e6 - 4e6) / 8e6 and lock.boot is None  # 0.5 of the 8M host
    assert four.miss_status == "ok" and four.status == "out of regime: locked"
    assert "balloon locks" in "\n".join(regime_lines([four, two]))
    # a scale that names the lab's own use boots each balloon's host at the mem= where it
    # locks the paper's share: in regime, and the line says which mem=
    m = load_matrix(write(tmp_path, "4M", "2M", 'memory = "8M"\nballoon_overhead = "1M"',
                          mechanism="balloon"), "lab")
    four, _two = regime(m, tmp_path)
    (lock,) = four.locked
    assert four.status == "ok" and lock.boot == dict(m.balloon_boots)["4M"]
    assert lock.lab == (lock.boot - 1e6 - 4e6) / lock.boot
    assert f"boots mem={format_size(lock.boot)}" in "\n".join(regime_lines([four]))
    # without the scale's memory the share is not checked; a cgroup wall locks nothing
    m = load_matrix(write(tmp_path, "4M", "2M", mechanism="balloon"), "lab")
    assert regime(m, tmp_path)[0].locked[0].status == "not checked"
    m = load_matrix(write(tmp_path, "4M", "2M", 'memory = "8M"'), "lab")
    assert all(p.locked == () and p.status == "ok" for p in regime(m, tmp_path))


# the shipped matrices -----------------------------------------------------------------------------

SCALES = [(n, s) for n in shipped_names() for s in load_matrix(n).scales]


def _paper_points(quantity) -> dict[str, float]:
    """Paper capacity -> the quantity at it, over every shipped scale (the paper side of the
    regime check; computed by the demand model on the matrices' full workloads)."""
    out: dict[str, float] = {}
    for name, scale in SCALES:
        for p in regime(load_matrix(name, scale), DATA):
            out.update((p.paper + k, v) for k, v in quantity(p))
    return out


DATA = None     # set by the fixture below: one plan cache for the module


@pytest.fixture(scope="module", autouse=True)
def _data_dir(tmp_path_factory):
    global DATA
    DATA = tmp_path_factory.mktemp("regime-plans")


def _smallest_half_gap(points: dict[str, float]) -> float:
    values = sorted(points.values())
    return min(b - a for a, b in zip(values, values[1:])) / 2


def test_tolerance_is_below_half_the_smallest_gap_between_paper_points():
    """No lab point can be in regime for two of the paper's points: the tolerance is below half
    the gap between any two neighbouring paper points (miss fraction; locked share per kind)."""
    miss = _paper_points(lambda p: [("", p.paper_miss)])
    assert {"64G", "93G", "448G", "339G", "256G", "128G"} <= set(miss)
    assert TOLERANCE < _smallest_half_gap(miss), sorted(miss.items(), key=lambda kv: kv[1])
    for kind in ("balloon", "pinned", "hybrid"):
        locked = _paper_points(lambda p, k=kind: [("", x.paper) for x in p.locked if x.kind == k])
        assert len(locked) >= 2, kind
        assert LOCKED_TOLERANCE < _smallest_half_gap(locked), (kind, locked)


def test_every_shipped_matrix_has_a_lab_scale_or_the_reason_it_cannot(capsys):
    for name in shipped_names():
        m = load_matrix(name)
        assert ("lab" in m.scales) != (no_scale_reason(m) is not None), name
        assert main(["matrix", "show", name, "--scale", "lab"]) == 0, name
        out = capsys.readouterr().out
        assert "regime" in out and (no_scale_reason(m) or "lab") in out.replace("\n", " ")
    e2e = load_matrix("end-to-end")
    assert "lab" in e2e.scales and no_scale_reason(e2e) is None
    assert "engine" in no_scale_reason(dataclasses.replace(e2e, scales=()))
    assert main(["matrix", "show", "capacity", "--scale", "big"]) == 2     # a typo stays an error


@pytest.mark.parametrize(("name", "scale"), SCALES)
def test_shipped_scales_keep_the_miss_regime(name, scale):
    m = load_matrix(name, scale)
    pts = regime(m, DATA)
    if m.workload.get("fixed_set_bytes"):           # admission: the set fits in C on both sides
        lines = fixed_set_lines(m)
        assert lines and all("does not fit" not in x for x in lines), lines
        return
    if m.engine is not None:                        # ample capacity: no miss curve to keep
        assert pts == [] and engine_lines(m) and "ample capacity" in engine_lines(m)[0]
        return
    assert pts and all(p.miss_status == "ok" for p in pts), regime_lines(pts)


@pytest.mark.parametrize(("name", "scale"), [(n, s) for n, s in SCALES if s == "lab"
                                             and any(p.mechanism == "balloon"
                                                     for p in load_matrix(n, s).points)])
def test_shipped_balloon_scales_lock_the_papers_share(name, scale):
    pts = regime(load_matrix(name, scale), DATA)
    shares = [x for p in pts for x in p.locked]
    assert shares and all(x.lab is not None and x.boot for x in shares)
    # a paper balloon smaller than the lab's least (448G's 1%) locks the floor, said as such
    floored = [x for x in shares if x.paper * x.boot < MIN_BALLOON_BYTES]
    assert all(abs(x.lab * x.boot - MIN_BALLOON_BYTES) < 2e6 for x in floored), floored
    assert all(x.status == "ok" for x in shares if x not in floored), regime_lines(pts)
    text = "\n".join(regime_lines(pts))
    assert text.count("a lab balloon locks at least 40M") == len(floored)


def test_one_paper_capacity_is_one_lab_capacity_per_workload():
    """Across every shipped matrix and scale: the same workload at the same paper C runs at the
    same lab C, so two matrices' points at one paper capacity are the same point."""
    seen: dict[tuple, set] = {}
    for name, scale in SCALES:
        m = load_matrix(name, scale)
        workload = tuple(sorted(m.workload.items()))
        for paper, lab in m.capacity_map:
            seen.setdefault((workload, paper), set()).add((lab, name, scale))
    shared = [v for v in seen.values() if len({n for _l, n, _s in v}) > 1]
    assert shared                                    # capacity and reclaim share a workload
    for key, labs in seen.items():
        assert len({lab for lab, _n, _s in labs}) == 1, (key[1], labs)
