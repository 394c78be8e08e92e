"""Result identity over a real store (docs/design.md, "What a result is"): bundles from the real
captures (tests/support/bundlegen.py) made to differ in host, in workload (trace sha256, pool)
and in fingerprint (kernel) land in separate groups of `bench results --cell`, are pooled only
with --pool (saying what differs), are filtered by --host/--campaign/--workload, and
`bench compare` pairs runs within one host and campaign (the 0.52 / 2.88 case of the issue:
per-host ratios right, never the 1.96 that pairing across hosts gave)."""

from __future__ import annotations

import json

import matplotlib
import pytest

from bench.cli import main
from bench.errors import InputError
from bench.results import plots, store_views
from bench.store import queries
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns
from tests.support.golden import check_golden, render

CELL = "64Mi-cgroup-classic"
OTHER_KERNEL = "6.1.0-27-amd64"


def put(store, bundles, rid, cell=CELL, *, host="fixture-a", campaign="c1", rep=0, speed=1.0,
        seed=0, trace=None, pool=None, kernel=None):
    """Ingest one generated bundle; trace/pool/kernel change its workload or fingerprint."""
    def edit(parts):
        spec = parts["spec.json"]
        if trace:
            spec["workload"]["trace_sha256"] = trace
        if pool:
            spec["pool_bytes"], spec["plan_sha256"] = pool, "f" * 64
        if kernel:
            parts["host.json"]["kernel_release"] = kernel
    if campaign:
        ensure_campaigns(store, campaign)
    return ingest_bundle(store, bundles(rid, cell, host=host, campaign=campaign, repetition=rep,
                                        position=rep, speed=speed, seed=seed, edit=edit),
                         nominal_miss_bytes=2e7)


@pytest.fixture
def four(store, bundles):
    """One cell: 2 runs on fixture-a (the base), 1 on fixture-b, 1 with another trace, 1 under
    another kernel (its own campaign, so the campaign's fingerprint rule keeps it)."""
    put(store, bundles, "base-0", seed=1)
    put(store, bundles, "base-1", rep=1, seed=2)
    put(store, bundles, "host-b", host="fixture-b", speed=3.0, seed=3)
    put(store, bundles, "trace-e", trace="e" * 64, speed=0.5, seed=4)
    put(store, bundles, "kernel-6.1", campaign="c3", kernel=OTHER_KERNEL, speed=2.0, seed=5)
    return store


def _by_run(groups):
    return {tuple(sorted(r["run_id"] for r in g["runs"])): g for g in groups}


def test_groups_split_on_host_workload_and_fingerprint(four):
    groups = queries.cell_results(four, CELL.upper())
    by = _by_run(groups)
    assert set(by) == {("base-0", "base-1"), ("host-b",), ("trace-e",), ("kernel-6.1",)}
    base = by[("base-0", "base-1")]
    assert base["host"] == "fixture-a" and base["n_retained"] == 2
    assert base["workload"]["trace_sha256"] == "b" * 64 and base["workload"]["passes"] == 2
    assert by[("host-b",)]["host"] == "fixture-b"
    assert by[("trace-e",)]["workload"]["digest"] != base["workload"]["digest"]
    assert by[("trace-e",)]["fingerprint"] == base["fingerprint"]
    assert by[("kernel-6.1",)]["fingerprint"]["kernel"] == OTHER_KERNEL
    assert by[("kernel-6.1",)]["workload"] == base["workload"]
    assert by[("kernel-6.1",)]["campaigns"] == ["c3"]
    # each group's spread is its own: nothing of the 0.5x .. 3x runs is mixed in
    assert base["spread"] < 0.2 and all(g["pooled"] is None for g in groups)
    warning = groups[0]["split"]["warning"]
    assert warning.startswith("4 groups, not pooled: they differ in host (fixture-a, fixture-b)")
    # in group order, which follows the workload digests
    assert ("trace_sha256 (bbbbbbbbbbbb, eeeeeeeeeeee)" in warning
            or "trace_sha256 (eeeeeeeeeeee, bbbbbbbbbbbb)" in warning)
    assert "fingerprint kernel (" in warning and OTHER_KERNEL in warning
    assert all(warning in g["warnings"] for g in groups)


def test_pool_only_on_request_and_says_what_differs(four):
    [g] = queries.cell_results(four, CELL, pool=True)
    assert g["n_retained"] == 5 and g["host"] is None and g["workload"] is None
    assert g["fingerprint"] is None and g["split"] is None
    assert g["pooled"]["groups"] == 4 and g["pooled"]["hosts"] == ["fixture-a", "fixture-b"]
    assert set(g["pooled"]["differs_in"]) == {"host", "workload", "fingerprint"}
    assert g["warnings"][0].startswith("pooled on request (--pool): 4 groups that differ in host")
    # one group needs no pooling: --pool changes nothing then
    [one] = queries.cell_results(four, CELL, host="fixture-b", pool=True)
    assert one["pooled"] is None and one["host"] == "fixture-b"


def test_filters_host_campaign_workload(four):
    groups = queries.cell_results(four, CELL)
    trace_e = next(g for g in groups if g["workload"]["trace_sha256"] == "e" * 64)
    digest = trace_e["workload"]["digest"]
    [g] = queries.cell_results(four, CELL, workload=digest[:8].upper())
    assert [r["run_id"] for r in g["runs"]] == ["trace-e"]
    [g] = queries.cell_results(four, CELL, campaign="c3")
    assert [r["run_id"] for r in g["runs"]] == ["kernel-6.1"]
    assert len(queries.cell_results(four, CELL, host="fixture-a")) == 3
    with pytest.raises(InputError, match="no stored runs of cell"):
        queries.cell_results(four, "64Mi-balloon-mglru", workload=digest)


def test_cli_json_list_table_and_pool(four, db_url, capsys):
    assert main(["results", "--cell", CELL, "--db", db_url, "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)
    assert isinstance(groups, list) and len(groups) == 4
    for g in groups:
        assert {"host", "workload", "fingerprint", "n_retained", "median_s", "runs"} <= set(g)
        assert {"digest", "kernel", "controller_version"} <= set(g["fingerprint"])
        assert {"digest", "trace_sha256", "plan_sha256", "pool_bytes", "threads", "passes",
                "batch", "domain"} <= set(g["workload"])
    assert main(["results", "--cell", CELL, "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "4 groups, not pooled" in out and out.count("runs retained / rejected") == 4
    assert "fixture-b" in out and OTHER_KERNEL in out
    assert main(["results", "--cell", CELL, "--db", db_url, "--pool"]) == 0
    out = capsys.readouterr().out
    assert "pooled on request (--pool)" in out and out.count("runs retained / rejected") == 1
    assert main(["results", "--cell", CELL, "--db", db_url, "--workload", "zz"]) == 2
    assert "not a hex digest prefix" in capsys.readouterr().err


def test_the_issue_case_an_8mib_pool_is_not_pooled_with_256mib(store, bundles):
    """`bench run` with an 8 MiB pool stored under the demo's cell: two groups, each with its
    own spread, instead of 4 runs with 101% spread and no warning."""
    for i in range(3):
        put(store, bundles, f"demo-{i}", rep=i, seed=i, speed=1.0)
    put(store, bundles, "tiny", campaign=None, pool=8 << 20, speed=0.02, seed=9)
    groups = queries.cell_results(store, CELL)
    assert sorted(g["n_retained"] for g in groups) == [1, 3]
    assert all(g["spread"] < 0.2 for g in groups)
    assert "pool_bytes (201326592, 8388608)" in groups[0]["split"]["warning"]
    assert "plan_sha256" in groups[0]["split"]["warning"]


# compare -------------------------------------------------------------------------------------

A, B = "64Mi-cgroup-mglru", "64Mi-balloon-mglru"


@pytest.fixture
def two_hosts(store, bundles):
    """Host a: A 0.52x of B; host b (a 2x slower B): A 2.88x of B; one campaign, two
    repetitions each. Pairing by (campaign, repetition) without the host pairs host a's A with
    host b's B: 1.04 and 2.88, a median of 1.96."""
    for rep in range(2):
        for host, sa, sb in (("fixture-a", 0.52, 1.0), ("fixture-b", 1.44, 0.5)):
            seed = 10 * rep + (host == "fixture-b")
            put(store, bundles, f"{host}-A-{rep}", A, host=host, rep=rep, speed=sa, seed=seed)
            put(store, bundles, f"{host}-B-{rep}", B, host=host, rep=rep, speed=sb, seed=seed)
    return store


def test_compare_pairs_within_a_host_and_reports_per_host(two_hosts):
    c = queries.compare(two_hosts, A, B)
    assert (c["n_a"], c["n_b"]) == (4, 4) and c["differs_in"] == ["mechanism"]
    per = {g["host"]: g for g in c["groups"]}
    assert set(per) == {"fixture-a", "fixture-b"}
    for host, want in (("fixture-a", 0.52), ("fixture-b", 2.88)):
        g = per[host]
        assert g["time_ratio_of_medians"] == pytest.approx(want, rel=1e-4)
        assert g["time_median_pair_ratio"] == pytest.approx(want, rel=1e-4)
        assert g["time_pair_ratio_min"] == pytest.approx(want, rel=1e-4)
        assert g["time_pair_ratio_max"] == pytest.approx(want, rel=1e-4)
        assert g["time_pairs"] == 2 and (g["n_a"], g["n_b"]) == (2, 2)
        assert g["campaigns"] == ["c1"] and g["workload"]["digest"]
    # no one number across hosts without --pool, and the reason is given
    assert c["time_ratio_of_medians"] is None and c["time_median_pair_ratio"] is None
    assert c["pooled"] is None and "2 groups, not pooled" in c["warnings"][0]
    assert "host (fixture-a, fixture-b)" in c["warnings"][0]


def test_compare_pool_keeps_pairs_within_hosts(two_hosts):
    c = queries.compare(two_hosts, A, B, pool=True)
    assert c["time_pairs"] == 4
    assert c["time_pair_ratio_min"] == pytest.approx(0.52, rel=1e-4)
    assert c["time_pair_ratio_max"] == pytest.approx(2.88, rel=1e-4)
    assert c["time_median_pair_ratio"] == pytest.approx((0.52 + 2.88) / 2, rel=1e-4)
    assert c["time_median_pair_ratio"] != pytest.approx(1.96, rel=1e-2)
    assert "pooled on request (--pool): 2 groups" in c["pooled"]["reason"]
    assert "pairs stay within one host and campaign" in c["warnings"][0]
    [one] = queries.compare(two_hosts, A, B, host="fixture-b")["groups"]
    assert one["time_median_pair_ratio"] == pytest.approx(2.88, rel=1e-4)


def test_compare_cli_json_and_golden(two_hosts, db_url, capsys):
    assert main(["compare", A, B, "--db", db_url, "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert [round(g["time_median_pair_ratio"], 2) for g in c["groups"]] == [0.52, 2.88]
    assert c["time_median_pair_ratio"] is None
    assert main(["compare", A, B, "--db", db_url, "--host", "fixture-a", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert round(c["time_median_pair_ratio"], 2) == 0.52 and c["time_pairs"] == 2
    if db_url.startswith("sqlite"):
        text = render(store_views.compare_table(queries.compare(two_hosts, A, B)))
        check_golden("compare_two_hosts.txt", text)


# matrices, sizing, plots -------------------------------------------------------------------

@pytest.fixture
def curves(store, bundles):
    """Two hosts, each with a balloon sweep (64M, 128M, 160M) and one cgroup point (64M), and
    the ample point (none) on host a."""
    pos = 0
    for host, slow in (("fixture-a", 1.0), ("fixture-b", 2.0)):
        for cell, speed in (("64Mi-balloon-mglru", 1.6), ("128Mi-balloon-mglru", 1.2),
                            ("160Mi-balloon-mglru", 1.0), ("64Mi-cgroup-mglru", 1.1)):
            put(store, bundles, f"{host}-{cell}", cell, host=host, speed=speed * slow, seed=pos)
            pos += 1
    put(store, bundles, "ample", "192Mi-none-mglru", speed=0.9, seed=pos)
    return store


def test_matrix_rows_per_group(curves, db_url):
    m = queries.matrix(curves, "reclaim")
    assert [g["host"] for g in m["groups"]] == ["fixture-a", "fixture-b"]
    assert {(r["group"], r["host"]) for r in m["rows"]} == {("g1", "fixture-a"),
                                                            ("g2", "fixture-b")}
    by = {(r["host"], r["capacity_bytes"] >> 20, r["mechanism"]): r for r in m["rows"]}
    assert by[("fixture-b", 64, "balloon")]["mglru"]["median_s"] == pytest.approx(
        2 * by[("fixture-a", 64, "balloon")]["mglru"]["median_s"], rel=0.2)
    assert by[("fixture-a", 64, "balloon")]["mglru"]["n_retained"] == 1
    assert "2 groups, not pooled: they differ in host" in m["warnings"][0]
    cap = queries.matrix(curves, "capacity")
    assert {(r["host"], r["mechanism"]) for r in cap["rows"]} == {
        ("fixture-a", "balloon"), ("fixture-a", "none"), ("fixture-b", "balloon")}
    if db_url.startswith("sqlite"):
        check_golden("matrix_capacity_two_hosts.txt", render(store_views.matrix_table(cap)))


def test_sizing_one_curve_per_group_and_mechanism(curves):
    r = queries.sizing(curves, 0.06)
    keys = [(c["host"], c["mechanism"]) for c in r["curves"]]
    assert keys == [("fixture-a", "cgroup"), ("fixture-a", "none"), ("fixture-a", "balloon"),
                    ("fixture-b", "cgroup"), ("fixture-b", "balloon")]
    for c in r["curves"]:
        assert {p["mechanism"] for p in c["curve"]} == {c["mechanism"]}
        assert c["status"] in ("interpolated", "measured", "below_range", "unreachable")
    # the cgroup curve is its one point, never completed with balloon points
    cg = r["curves"][0]
    assert [p["capacity_bytes"] >> 20 for p in cg["curve"]] == [64]
    bal_b = r["curves"][-1]
    assert [p["capacity_bytes"] >> 20 for p in bal_b["curve"]] == [64, 128, 160]
    assert bal_b["status"] == "unreachable"       # host b is 2x slower: 0.1 s at best
    assert "status" not in r and "5 curves (one per group and mechanism), not pooled" in r[
        "warnings"][0]
    assert [c["mechanism"] for c in queries.sizing(curves, 0.06, host="fixture-b")["curves"]
            ] == ["cgroup", "balloon"]
    only = queries.sizing(curves, 0.06, host="fixture-a")
    assert len(only["curves"]) == 3


def test_sizing_cli_answers_per_curve(curves, db_url, capsys):
    assert main(["sizing", "--target-seconds", "0.06", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert out.count("target 0.06 s/iteration on ") == 5
    assert "fixture-b, balloon curve (g2): not reached" in out
    assert "g1: host fixture-a; workload " in out


def test_plots_one_series_per_group_and_mechanism(curves, tmp_path):
    import matplotlib.pyplot as plt
    m = queries.matrix(curves, "capacity")
    fig = plots.figure("capacity", m)
    try:
        series = fig.axes[0].containers
        labels = sorted(c.get_label() for c in series)
        assert labels == ["g1 fixture-a balloon mglru", "g1 fixture-a none mglru",
                          "g2 fixture-b balloon mglru"]
        rows = {(r["group"], r["mechanism"]): r for r in m["rows"]}
        for c in series:
            gid, _host, mech, _ = c.get_label().split()
            xs = list(c.lines[0].get_xdata())
            want = sorted(r["capacity_bytes"] / 1e9 for r in m["rows"]
                          if (r["group"], r["mechanism"]) == (gid, mech))
            assert xs == want and (gid, mech) in rows
    finally:
        plt.close(fig)
    for kind in ("capacity", "reclaim"):
        out = tmp_path / f"{kind}.png"
        plots.draw(kind, queries.matrix(curves, kind), out)
        assert out.read_bytes()[:4] == b"\x89PNG"


def test_end_to_end_speedups_per_host(store, bundles):
    """Table 3 pairs within a host already; its speedup is now per host too, not a median
    over both hosts' pairs."""
    pos = 0
    for host, nocache in (("fixture-a", 120.0), ("fixture-b", 300.0)):
        for pair in range(2):
            for policy, wall in (("admit", 100.0), ("nocache", nocache)):
                ensure_campaigns(store, "c1")
                ingest_bundle(store, bundles(f"{host}-{pair}-{policy}", f"e2e-prose-{policy}",
                                             host=host, position=pos, repetition=pair,
                                             wall_s=wall, load_s=2.0))
                pos += 1
    res = queries.matrix(store, "end-to-end")
    rows = {r["host"]: r for r in res["prompts"]}
    assert rows["fixture-a"]["speedup"] == pytest.approx(118 / 98)
    assert rows["fixture-b"]["speedup"] == pytest.approx(298 / 98)
    assert all(r["pairs"] == 2 and r["prompt"] == "prose" for r in rows.values())
    assert "2 groups for 1 prompt(s), not pooled: they differ in host" in res["warnings"][-1]
    text = render(store_views.matrix_table(res))
    assert "g1 fixture-a" in text and "g2 fixture-b" in text
