"""Result tables (golden, fixed width) and the CLI commands over a populated database.

Golden files live in tests/local/store/golden/; regenerate them after an intended change with
BENCH_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/local/store -k golden (and review the
diff)."""

import json

import pytest

from bench.cli import main
from bench.results import store_views
from bench.store import queries
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle
from tests.support import golden
from tests.support.bundlegen import ensure_campaigns
from tests.support.golden import check_golden, render

# binary capacities: the fixture bundles come from a real 64 MiB + 32 MiB cgroup
CELLS = [("64Mi-balloon-mglru", 1.6), ("128Mi-balloon-mglru", 1.2),
         ("160Mi-balloon-mglru", 1.0), ("64Mi-balloon-classic", 1.1), ("64Mi-cgroup-mglru", 1.15),
         ("64Mi-cgroup-classic", 1.12), ("64Mi-cgroup-mglru-pinned", 1.05),
         ("64Mi-cgroup-mglru-hybrid", 1.08), ("64Mi-cgroup-mglru-oracle-advice", 1.1),
         ("64Mi-cgroup-mglru-nocache", 2.4)]


def populate(store, bundles, reps=2):
    ensure_campaigns(store, "c1")
    pos = 0
    for rep in range(reps):
        for cell, speed in CELLS:
            ingest_bundle(store, bundles(f"c1-r{pos:03d}", cell, position=pos, repetition=rep,
                                         speed=speed, seed=pos), nominal_miss_bytes=2.0e7)
            pos += 1
    # one rejected run (kernel I/O error), shown but not counted
    ingest_bundle(store, bundles("c1-bad", "64Mi-balloon-mglru", position=pos, repetition=2,
                                 edit=lambda p: p.update({"kmsg.txt": "Buffer I/O error on dev vda\n"})))


@pytest.fixture
def full(tmp_path, bundles):
    url = f"sqlite:///{tmp_path}/full.db"
    st = open_store(url)
    populate(st, bundles)
    yield st, url
    st.close()


@pytest.mark.parametrize("kind", queries.MATRICES)
def test_golden_matrix(full, kind):
    check_golden(f"matrix_{kind}.txt", render(store_views.matrix_table(queries.matrix(full[0], kind))))


def test_golden_cell(full):
    [res] = queries.cell_results(full[0], "64Mi-balloon-mglru", verbose=True)
    text = (render(store_views.cell_result_table(res))
            + render(store_views.verdict_table(res["runs"][-1])))
    check_golden("cell_64Mi-balloon-mglru.txt", text)


def test_matrix_json_carries_reliability_flags(full, capsys):
    """`bench results --matrix reclaim --json` gives JSON readers the flags the table marks:
    each cell's reliability_flags of its own n and spread (two repetitions: n=2 < 3)."""
    from bench.judge.stats import reliability_flags
    assert main(["results", "--matrix", "reclaim", "--json", "--db", full[1]]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    cells = [s for r in rows for s in (r.get("mglru"), r.get("classic")) if s]
    assert len(cells) == 6
    for s in cells:
        assert s["flags"] == reliability_flags(s["n_retained"], s["spread"])
        assert s["flags"][0] == "n=2 < 3"


def test_golden_detects_a_change(tmp_path, monkeypatch):
    monkeypatch.setattr(golden, "GOLDEN", tmp_path)
    monkeypatch.delenv("BENCH_UPDATE_GOLDEN", raising=False)
    (tmp_path / "x.txt").write_text("old\n")
    with pytest.raises(AssertionError, match="changed"):
        check_golden("x.txt", "new\n")


def test_cell_results_count_retained_only(full):
    [res] = queries.cell_results(full[0], "64Mi-balloon-mglru")
    assert (res["n_retained"], res["n_rejected"]) == (2, 1)
    assert not any("cross-check" in w for w in res["warnings"])   # 64Mi-cgroup exists


def test_cross_check_warning_suggests_a_cell(tmp_path, bundles):
    st = open_store(f"sqlite:///{tmp_path}/b.db")
    ensure_campaigns(st, "c1")
    for i, cell in enumerate(["64Mi-balloon-mglru", "160Mi-balloon-mglru"]):
        ingest_bundle(st, bundles(f"r{i}", cell))
    w = queries.cell_results(st, "64Mi-balloon-mglru")[0]["warnings"]
    assert any("add cell 64Mi-cgroup-mglru" in x for x in w), w


def test_compare_pairs_by_campaign_and_repetition(full):
    c = queries.compare(full[0], "64Mi-balloon-mglru", "64Mi-cgroup-mglru")
    assert c["time_pairs"] == 2 and c["differs_in"] == ["mechanism"]
    assert c["mechanism_agreement"] == pytest.approx(abs(c["time_ratio_of_medians"] - 1))


def _cli(capsys, url, *argv):
    rc = main([*argv, "--db", url])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_commands(full, capsys, tmp_path):
    _, url = full
    rc, out, _ = _cli(capsys, url, "runs", "--rejected", "--json")
    rows = json.loads(out)
    assert rc == 0 and [r["run_id"] for r in rows] == ["c1-bad"]
    assert rows[0]["failed"] == ["kernel_log_clean"]
    for spelling in ("64Mi-balloon-mglru", "64mi-balloon-MGLRU"):      # any case
        rc, out, _ = _cli(capsys, url, "results", "--cell", spelling, "--json")
        [res] = json.loads(out)
        assert rc == 0 and res["n_retained"] == 2 and res["host"] == "fixture-a"
        assert res["cell"] == "64Mi-balloon-mglru"
        assert res["workload"]["digest"] and res["fingerprint"]["kernel"]
    rc, _, err = _cli(capsys, url, "results", "--cell", "64M-balloon-mglru")
    assert rc == 2 and "no stored runs of cell 64M-balloon-mglru" in err    # 64 x 10^6 bytes
    rc, out, _ = _cli(capsys, url, "results", "--matrix", "reclaim", "--json")
    assert rc == 0 and {r["mechanism"] for r in json.loads(out)["rows"]} == {"balloon", "cgroup"}
    assert _cli(capsys, url, "results", "--matrix", "capacity")[0] == 0
    rc, out, _ = _cli(capsys, url, "compare", "64Mi-balloon-mglru", "64Mi-balloon-classic")
    assert rc == 0 and "pair range" in out and "fixture-a" in out
    rc, low, _ = _cli(capsys, url, "compare", "64mi-balloon-mglru", "64MI-BALLOON-CLASSIC",
                      "--json")
    assert rc == 0 and (json.loads(low)["a"], json.loads(low)["b"]) == (
        "64Mi-balloon-mglru", "64Mi-balloon-classic") and json.loads(low)["n_a"] == 2
    rc, out, _ = _cli(capsys, url, "sizing", "--target-seconds", "0.06")
    assert rc == 0 and "target 0.06 s/iteration" in out
    rc, out, _ = _cli(capsys, url, "export", "--format", "csv")
    assert rc == 0 and out.count("\n") == 1 + 2 * len(CELLS) + 1
    rc, out, _ = _cli(capsys, url, "retention", "recheck", "--json")
    assert rc == 0 and json.loads(out) == []
    rc, out, _ = _cli(capsys, url, "db", "current")
    from bench.store.db import head_revision
    head = head_revision()
    assert rc == 0 and out.startswith(f"{head} (head {head})") and head >= "0005"
    for kind in ("capacity", "reclaim", "equal-memory"):
        png = tmp_path / f"{kind}.png"
        assert _cli(capsys, url, "plot", kind, "-o", str(png))[0] == 0
        assert png.read_bytes()[:4] == b"\x89PNG"
    rc, _, err = _cli(capsys, url, "results", "--cell", "64m-bogus-mglru")
    assert rc == 2 and "unknown mechanism" in err


def test_cli_ingest_refuses_with_the_part_named(tmp_path, bundles, capsys):
    p = bundles("r9")
    (p / "kmsg.txt").write_text("tampered\n")
    rc, _, err = _cli(capsys, f"sqlite:///{tmp_path}/i.db", "ingest", str(p))
    assert rc == 1 and "kmsg.txt" in err and "rejected" in err
