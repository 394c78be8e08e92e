"""A matrix's size is bounded before it is expanded (bench.matrix.limits): repetitions of the
matrix, of an extra cell and of a scale; the cells of the product, counted before the product is
made; the runs of the matrix, and of the matrix on its hosts. Each refusal names the key, the
limit and the fix; `bench schema matrix` shows the limits."""

import copy
import json
import tomllib
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from bench.cli.app import app
from bench.hosts.inventory import Host, RebootSpec
from bench.matrix.excludes import apply_excludes
from bench.matrix.expand import expand
from bench.matrix.limits import MAX_CELLS, MAX_REPETITIONS, MAX_RUNS
from bench.matrix.load import MatrixError, MatrixFileError, _shipped, parse_matrix
from bench.units import parse_size


def doc(**over):
    d = {"name": "t", "description": "test", "repetitions": 2,
         "workload": {"trace": "tiny", "domain": "prose"},
         "cells": {"capacities": ["64M"], "mechanisms": ["cgroup"], "reclaims": ["classic"]}}
    d.update(over)
    return d


def refusal(d) -> MatrixFileError:
    with pytest.raises(MatrixFileError) as exc:
        parse_matrix(d, "m.toml")
    return exc.value


def test_repetitions_above_the_limit_are_refused_naming_the_key_the_limit_and_the_fix():
    assert parse_matrix(doc(repetitions=MAX_REPETITIONS), "m.toml").repetitions == MAX_REPETITIONS
    e = refusal(doc(repetitions=10 ** 9))
    assert str(e) == (f"m.toml: key 'repetitions': must be at most {MAX_REPETITIONS}, got "
                      "1000000000")
    assert f"1 to {MAX_REPETITIONS} repetitions" in e.hint
    extra = doc(cells={"extra": [{"cell": "64M-cgroup-classic", "repetitions": 5000}]})
    assert refusal(extra).problems[0].key == "cells.extra[0].repetitions"
    scaled = doc(scale={"lab": {"repetitions": MAX_REPETITIONS + 1}})
    assert refusal(scaled).problems[0].key == "scale.lab.repetitions"


def test_too_many_cells_are_refused_before_the_product_is_made():
    """1,000 capacities x 4 mechanisms x 2 reclaims x 5 modes x 10 prefetch would be 400,000
    cells (hundreds of MB as Points and their names): refused from the lengths of the lists, in
    little memory."""
    from bench.matrix.cells import DELIVERIES, MECHANISMS, MODES, RECLAIMS
    cells = {"capacities": [f"{i + 1}M" for i in range(1000)], "mechanisms": list(MECHANISMS),
             "reclaims": list(RECLAIMS), "modes": list(MODES),
             "prefetch": [f"h{i}-{DELIVERIES[0]}" for i in range(10)]}
    tracemalloc.start()
    try:
        e = refusal(doc(cells=cells))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    n = 1000 * len(MECHANISMS) * len(RECLAIMS) * len(MODES) * 10
    p = e.problems[0]
    assert p.key == "cells" and f"= {n} cells" in p.message and str(MAX_CELLS) in p.message
    assert "1000 capacities x" in p.message and p.hint.startswith("list fewer values")
    assert peak < 64 << 20, peak
    # at the limit it loads
    ok = {"capacities": [f"{i + 1}M" for i in range(MAX_CELLS // 2)], "mechanisms": ["cgroup"],
          "reclaims": ["classic", "mglru"]}
    assert len(parse_matrix(doc(cells=ok, repetitions=1), "m.toml").points) == MAX_CELLS


def test_the_runs_of_a_matrix_are_bounded_with_the_key_that_sets_them():
    caps = [f"{i + 1}M" for i in range(MAX_RUNS // MAX_REPETITIONS)]
    cells = {"capacities": caps, "mechanisms": ["cgroup"], "reclaims": ["classic"]}
    m = parse_matrix(doc(cells=cells, repetitions=MAX_REPETITIONS), "m.toml")
    assert sum(p.repetitions or m.repetitions for p in m.points) == MAX_RUNS
    more = copy.deepcopy(cells)
    more["extra"] = [{"cell": "900M-balloon-classic"}]
    e = refusal(doc(cells=more, repetitions=MAX_REPETITIONS))
    assert e.problems[0].key == "repetitions"
    assert e.problems[0].message == (f"101 cells x 1000 repetitions make {MAX_RUNS + 1000} runs, "
                                     f"more than the {MAX_RUNS} a campaign may hold")
    more["extra"][0]["repetitions"] = 7
    assert "repetitions of the 101 cells add up to 100007 runs" in str(refusal(
        doc(cells=more, repetitions=MAX_REPETITIONS)))
    # an engine matrix: its pairs
    e2e = tomllib.loads(_shipped().joinpath("end-to-end.toml").read_text())
    e2e["engine"]["pairs"] = 10 ** 9
    e = refusal(e2e)
    assert e.problems[0].key == "engine.pairs" and "18 cells x 1000000000 pairs" in str(e)


AXIS_VALUES = {"capacity": ["1M", "2M", "3M"], "mechanism": ["cgroup", "balloon"],
               "reclaim": ["mglru", "classic"], "mode": ["pagecache", "pinned"]}
point = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in AXIS_VALUES.items()})
# an entry gives some axes, each a value of that axis (or one no point has)
entry = st.lists(st.sampled_from(sorted(AXIS_VALUES)), min_size=1, unique=True).flatmap(
    lambda axes: st.fixed_dictionaries({k: st.sampled_from(AXIS_VALUES[k] + ["other"])
                                        for k in axes}))


@given(st.lists(point, max_size=30), st.lists(entry, max_size=8))
def test_excludes_in_one_pass_remove_what_applying_them_in_turn_removes(points, entries):
    """The reference: each entry in turn filters what the earlier ones left; one that removes
    nothing is reported (the loop bench.matrix.load ran before, E x P comparisons)."""
    left, unused = list(points), []
    for i, want in enumerate(entries):
        keep = [p for p in left if not all(p[k] == v for k, v in want.items())]
        if len(keep) == len(left):
            unused.append(i)
        left = keep
    assert apply_excludes(points, entries, lambda p, k: p[k]) == (left, unused)


def test_excludes_of_a_big_product_apply_in_one_pass():
    """10^4 cells and 2,000 excludes: 24 s in turn (twice: the rules and the load), now well
    under a second."""
    import time
    caps = [f"{i + 1}M" for i in range(5000)]
    cells = {"capacities": caps, "mechanisms": ["cgroup", "balloon"], "reclaims": ["classic"],
             "exclude": [{"capacity": c, "mechanism": "cgroup"} for c in caps[:2000]]}
    t = time.monotonic()
    m = parse_matrix(doc(cells=cells, repetitions=1), "m.toml")
    assert len(m.points) == 8000 and time.monotonic() - t < 5


def _host(name):
    return Host(name=name, address=name, transport="ssh", tags={},
                mem_total=parse_size("3Gi"), mem_floor=None,
                reboot=RebootSpec(allowed=True, method="kexec"))


def test_the_runs_on_the_hosts_are_counted_before_any_is_made():
    cells = {"capacities": [f"{i + 1}M" for i in range(100)], "mechanisms": ["cgroup"],
             "reclaims": ["classic"]}
    m = parse_matrix(doc(cells=cells, repetitions=MAX_REPETITIONS), "m.toml")
    assert len(expand(m, [_host("a")]).requests) == MAX_RUNS
    with pytest.raises(MatrixError) as exc:
        expand(m, [_host("a"), _host("b")])
    assert str(exc.value) == (f"matrix t on 2 hosts makes {2 * MAX_RUNS} runs, more than the "
                              f"{MAX_RUNS} a campaign may hold (placement each: every host runs "
                              "every cell)")
    assert "--hosts" in exc.value.hint


def test_bench_schema_matrix_shows_the_limits():
    out = CliRunner().invoke(app, ["schema", "matrix"])
    assert out.exit_code == 0, out.output
    s = json.loads(out.output)
    reps = [s["properties"]["repetitions"], s["$defs"]["Extra"]["properties"]["repetitions"],
            s["$defs"]["Scale"]["properties"]["repetitions"]]
    assert [r["maximum"] for r in reps] == [MAX_REPETITIONS] * 3
    assert f"at most {MAX_RUNS} runs" in s["properties"]["repetitions"]["description"]
    assert f"at most {MAX_CELLS} cells" in s["properties"]["cells"]["description"]
