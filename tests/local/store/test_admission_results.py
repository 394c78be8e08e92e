"""`bench results --matrix admission` (§9) over a real store: the same fixed set read admitted
(pagecache) and bypassed (nocache), each run's GB/s computed from its own logical bytes and
median iteration time, the medians with min-max and n, and admitted / bypassed."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.judge.stats import GB, median
from bench.store import queries
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns


@pytest.fixture
def admission(store, bundles):
    ensure_campaigns(store, "c1")
    seed = 0
    for cell, speed in (("192Mi-none-mglru", 1.0), ("192Mi-none-mglru-nocache", 4.0)):
        for rep in range(3):
            ingest_bundle(store, bundles(f"{cell}-{rep}", cell, campaign="c1", repetition=rep,
                                         position=seed, speed=speed * (1 + rep / 20),
                                         seed=seed))
            seed += 1
    return store


def test_admission_rates_and_ratio(admission, db_url, capsys):
    m = queries.matrix(admission, "admission")
    (row,) = m["rows"]
    runs = {r["run_id"]: r for r in queries.load_runs(admission)}
    for mode, prefix in (("pagecache", "192Mi-none-mglru-"), ("nocache", "192Mi-none-mglru-n")):
        rates = [r["logical_bytes_per_iteration"] / r["iteration_median_s"] / GB
                 for rid, r in runs.items() if rid.startswith(prefix) and
                 (mode == "nocache") == ("nocache" in rid)]
        assert len(rates) == 3
        s = row[mode]
        assert s["n_retained"] == 3
        assert s["gb_per_s"] == pytest.approx(median(rates))
        assert (s["gb_per_s_min"], s["gb_per_s_max"]) == pytest.approx((min(rates), max(rates)))
    assert row["admitted_over_bypassed"] == pytest.approx(
        row["pagecache"]["gb_per_s"] / row["nocache"]["gb_per_s"])
    assert row["admitted_over_bypassed"] > 2
    assert main(["results", "--matrix", "admission", "--db", db_url]) == 0
    out = capsys.readouterr().out
    assert "admitted GB/s" in out and f"{row['admitted_over_bypassed']:.2f}x" in out
    assert main(["results", "--matrix", "admission", "--json", "--db", db_url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["matrix"] == "admission" and doc["rows"][0]["nocache"]["n_retained"] == 3
