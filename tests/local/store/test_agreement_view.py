"""§4 agreement in `bench results --matrix reclaim` over a real store: a balloon and a cgroup
wall at one capacity on each of two hosts are compared within each host's group (never across
hosts), and the view says so in text."""

from __future__ import annotations

import pytest

from bench.results import store_views
from bench.store import queries
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns
from tests.support.golden import render


def test_balloon_against_the_wall_per_host(store, bundles):
    ensure_campaigns(store, "c1")
    seed = 0
    for host, slow in (("fixture-a", 1.0), ("fixture-b", 2.0)):
        for cell, speed in (("64Mi-balloon-mglru", 1.5), ("64Mi-cgroup-mglru", 1.0)):
            ingest_bundle(store, bundles(f"{host}-{cell}", cell, host=host, campaign="c1",
                                         position=seed, speed=speed * slow, seed=seed))
            seed += 1
    m = queries.matrix(store, "reclaim")
    rows = {(r["host"], r["mechanism"]): r for r in m["rows"]}
    got = {a["group"]: a for a in m["agreement"]}
    assert len(got) == 2
    for host in ("fixture-a", "fixture-b"):
        b, c = rows[(host, "balloon")]["mglru"], rows[(host, "cgroup")]["mglru"]
        a = got[rows[(host, "balloon")]["group"]]
        assert a["mechanism"] == "balloon" and a["reclaim"] == "mglru"
        assert a["time_vs_cgroup"] == pytest.approx(b["median_s"] / c["median_s"] - 1)
        assert a["time_vs_cgroup"] > 0.2          # the balloon runs were made slower
    text = render(store_views.matrix_table(m))
    assert text.count("balloon vs cgroup: time +") == 2
