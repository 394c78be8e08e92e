"""`bench placement` over a real database (built by the migrations) filled with ingested bundles
(tests/support/bundlegen, as the plots' tests do): the worked sizing example answers from the
stored capacity curve, the same rows `bench results --matrix capacity` shows (median,
n, device GB per iteration), one curve per result group, never interpolated across hosts, and
seconds per accepted token where the plan recorded its tokens."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ITERATIONS
from tests.support.paths import REPO

EXAMPLE = str(REPO / "bench" / "data" / "bandwidths" / "paper-gh200.toml")
TOKENS = 18                         # accepted tokens of one replay of the 12-iteration plan


def _edit(extra_sectors: int):
    """More device reads in the measured interval (lower capacity, more traffic) and the
    plan's accepted tokens, as a real spec records them."""
    def edit(parts):
        for phase in ("pass1-end", "post"):
            snap = parts["snapshots"][phase]
            lines = []
            for ln in snap["proc_diskstats"].splitlines():
                f = ln.split()
                if len(f) > 5 and f[2] == "vda":
                    f[5] = str(int(f[5]) + extra_sectors)
                    ln = " ".join(f)
                lines.append(ln)
            snap["proc_diskstats"] = "\n".join(lines) + "\n"
        parts["spec.json"]["workload"]["accepted_tokens"] = TOKENS
        parts["spec.json"]["plan_iterations"] = ITERATIONS
    return edit


@pytest.fixture
def sweep(store, bundles):
    """Host fixture-a: a balloon sweep of three capacities, two runs each (slower and more
    device traffic at lower capacity). Host fixture-b: one slow point only."""
    seed = 0
    points = (("48Mi", 1.6, 60000), ("96Mi", 1.2, 30000), ("144Mi", 1.0, 20000))
    for cap, speed, sectors in points:
        for rep in range(2):
            res = ingest_bundle(store, bundles(
                f"a-{cap}-{rep}", f"{cap}-balloon-mglru", host="fixture-a", campaign="c1",
                repetition=rep, position=seed, speed=speed * (1 + rep / 20), seed=seed,
                edit=_edit(sectors + rep * 1000)), nominal_miss_bytes=2e7)
            assert res["retained"], res
            seed += 1
    res = ingest_bundle(store, bundles("b-48Mi", "48Mi-balloon-mglru", host="fixture-b",
                                       campaign="c1", position=seed, speed=1.7, seed=seed,
                                       edit=_edit(70000)), nominal_miss_bytes=2e7)
    assert res["retained"], res
    return store


def _json(capsys, argv) -> dict:
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    return json.loads(out.out)


def test_sizing_from_ingested_runs(sweep, db_url, capsys):
    cap = _json(capsys, ["results", "--matrix", "capacity", "--db", db_url, "--json"])
    gid = {g["host"]: g["id"] for g in cap["groups"]}
    rows = sorted((r for r in cap["rows"] if r["group"] == gid["fixture-a"]),
                  key=lambda r: r["capacity_bytes"])
    lo, mid, hi = rows
    assert lo["median_s"] > mid["median_s"] > hi["median_s"]
    assert lo["device_gb_per_iteration"] > mid["device_gb_per_iteration"]
    target = (lo["median_s"] + mid["median_s"]) / 2
    rep = _json(capsys, ["placement", "--bandwidths", EXAMPLE, "--db", db_url,
                         "--target-seconds", str(target), "--json"])
    assert round(rep["rule2"]["breakeven_reuse"], 2) == 1.06
    s = rep["sizing"]
    curves = {c["host"]: c for c in s["curves"]}
    a = curves["fixture-a"]["answer"]
    frac = (lo["median_s"] - target) / (lo["median_s"] - mid["median_s"])
    want = lo["capacity_bytes"] + frac * (mid["capacity_bytes"] - lo["capacity_bytes"])
    assert a["status"] == "interpolated"
    assert a["between"] == [lo["capacity_bytes"], mid["capacity_bytes"]]
    assert a["capacity_bytes"] == pytest.approx(want, abs=1)
    assert a["device_gb_per_iteration"] == pytest.approx(
        lo["device_gb_per_iteration"] + frac * (mid["device_gb_per_iteration"]
                                                - lo["device_gb_per_iteration"]))
    assert a["n"] == [lo["n_retained"], mid["n_retained"]] == [2, 2]
    assert a["upper_bound"] is True                 # balloon-conditioned rows
    top = curves["fixture-a"]["largest"]
    assert top["capacity_bytes"] == hi["capacity_bytes"] and top["n"] == 2
    assert top["iterations_per_s"] == pytest.approx(1 / hi["median_s"])
    assert top["seconds_per_accepted_token"] == pytest.approx(
        hi["median_s"] * ITERATIONS / TOKENS)
    # host b's one point is slower than the target: its own answer, never host a's points
    b = curves["fixture-b"]
    assert [p["capacity_bytes"] for p in b["points"]] == [lo["capacity_bytes"]]
    assert b["answer"]["status"] == "unreachable"
    assert any("never interpolated across groups" in w and "fixture-a, fixture-b" in w
               for w in s["warnings"])
    assert any("measured on gh200-evaluation-node" in w for w in s["warnings"])
    assert s["not_interpolated_across"]["host"] == ["fixture-a", "fixture-b"]


def test_sizing_text_and_the_filters(sweep, db_url, capsys):
    assert main(["placement", "--bandwidths", EXAMPLE, "--db", db_url, "--target-seconds", "100",
                 "--host", "fixture-b"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("rule 2: ") and "r* = 1.06" in out[2]
    assert "within 5.5% of overlapped streaming" in out[3]
    assert out[4] == "sizing (target 100 s/iteration):"
    assert out[5].startswith("  g1 balloon mglru on fixture-b: at most 50.3 MB")
    assert not any("never interpolated" in x for x in out)
