"""End-to-end engine results (Table 3) over a real database built by the migrations: the golden
table, `bench results --matrix end-to-end [--json]`, the median of per-pair ratios recomputed
from the stored rows, a hash mismatch shown loudly, and engine cells kept out of the replay
tables. Regenerate the golden file with BENCH_UPDATE_GOLDEN=1 (then review the diff)."""

import json
import re

import pytest

from bench.cli import main
from bench.matrix import engine_cells
from bench.results import store_views
from bench.store import queries
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns
from tests.support.golden import check_golden, render

# (prompt, pair) -> (admit wall s, nocache wall s); cold load 2.0 s everywhere
WALLS = {("prose", 0): (267.0, 296.0), ("prose", 1): (266.0, 293.0), ("prose", 2): (268.0, 297.5),
         ("code", 0): (258.0, 284.0), ("code", 1): (257.5, 283.0), ("code", 2): (259.0, 285.5),
         ("chat", 0): (275.0, 298.0), ("chat", 1): (276.0, 290.0), ("chat", 2): (274.0, 300.0)}


def _other_tokens(p):
    p["engine.stdout"] = re.sub(r"^output token ids: .*$", "output token ids: " +
                                ", ".join(str(i) for i in range(20)), p["engine.stdout"],
                                flags=re.M)


def populate(store, bundles, mismatch=True):
    ensure_campaigns(store, "c1", "c2")
    pos = 0
    for (prompt, pair), walls in sorted(WALLS.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        first = engine_cells.pair_orders(pair + 1, 0, prompt)[pair][0]
        order = ["admit", "nocache"] if first == "admit" else ["nocache", "admit"]
        for policy in order:
            wall = walls[0] if policy == "admit" else walls[1]
            edit = _other_tokens if (mismatch and (prompt, pair, policy) == ("chat", 1, "nocache")) \
                else None
            ingest_bundle(store, bundles(f"e2e-r{pos:03d}", f"e2e-{prompt}-{policy}",
                                         position=pos, repetition=pair, wall_s=wall,
                                         load_s=2.0, edit=edit))
            pos += 1
    # a rejected run (wrong backend) and an incomplete pair: shown, never counted
    ingest_bundle(store, bundles("e2e-bad", "e2e-prose-admit", position=pos, repetition=3,
                                 wall_s=100.0, edit=lambda p: p.update({
                                     "engine.stdout": p["engine.stdout"].replace(
                                         "fixture-pread", "cpu-fallback")})))
    # an agent run next to them (another campaign: a matrix is either replay or engine)
    ingest_bundle(store, bundles("agent-1", "64Mi-none-mglru", campaign="c2"),
                  nominal_miss_bytes=2.0e7)


@pytest.fixture
def e2e(tmp_path, bundles):
    url = f"sqlite:///{tmp_path}/e2e.db"
    st = open_store(url)
    populate(st, bundles)
    yield st, url
    st.close()


def test_golden_engine_table(e2e):
    res = queries.matrix(e2e[0], "end-to-end")
    check_golden("matrix_end-to-end.txt", render(store_views.matrix_table(res)))


def test_median_of_pair_ratios_recomputed_from_stored_rows(e2e):
    store = e2e[0]
    res = queries.engine_results(store)
    rows = queries.engine_rows(store)
    by_prompt = {p["prompt"]: p for p in res["prompts"]}
    assert set(by_prompt) == {"prose", "code", "chat"}
    for prompt, p in by_prompt.items():
        kept = [r for r in rows if r["prompt"] == prompt and r["retained"]]
        pairs = {}
        for r in kept:
            pairs.setdefault(r["pair_index"], {})[r["policy"]] = r
        ratios = sorted(v["nocache"]["steady_s"] / v["admit"]["steady_s"] for v in pairs.values()
                        if len(v) == 2)
        assert p["pairs"] == len(ratios) == 3
        assert p["speedup"] == pytest.approx(ratios[1])                      # true median
        assert (p["speedup_min"], p["speedup_max"]) == (pytest.approx(ratios[0]),
                                                        pytest.approx(ratios[-1]))
        admits = sorted(v["admit"]["steady_s"] for v in pairs.values())
        assert p["admit_median_s"] == pytest.approx(admits[1])
        for r in kept:       # steady-decode time = wall - reported cold load
            assert r["steady_s"] == pytest.approx(r["wall_s"] - r["load_s"])
        for pol in ("admit", "nocache"):    # device bytes per decoded token, median of runs
            per_token = sorted(v[pol]["device_bytes"] / v[pol]["tokens"] for v in pairs.values())
            assert per_token[1] > 0 and p[f"{pol}_bytes_per_token"] == pytest.approx(per_token[1])
        # the arms as the specs the real plan writer made say them
        assert p["arms"] == {"admit": "--policy admit", "nocache": "--policy nocache"}
    assert by_prompt["prose"]["n_rejected"] == 1 and by_prompt["prose"]["pairs"] == 3
    assert by_prompt["chat"]["hashes_match"] is False
    assert by_prompt["chat"]["mismatched"] == ["c1/fixture-a/1"]
    assert by_prompt["prose"]["hashes_match"] is True
    assert any("output hashes differ" in w for w in res["warnings"])


def test_engine_cells_stay_out_of_replay_tables(e2e):
    store = e2e[0]
    for kind in queries.MATRICES:
        text = json.dumps(queries.matrix(store, kind))
        assert "e2e-" not in text, kind
    assert "agent-1" not in {r["run_id"] for r in queries.engine_results(store)["runs"]}


def test_cli_results_end_to_end(e2e, capsys):
    url = e2e[1]
    assert main(["results", "--matrix", "end-to-end", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "NO" in out and "output hashes differ" in out
    assert main(["results", "--matrix", "end-to-end", "--db", url, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["matrix"] == "end-to-end" and len(d["runs"]) == 19
    assert main(["runs", "--rejected", "--db", url, "--json"]) == 0
    rej = json.loads(capsys.readouterr().out)
    assert [(r["run_id"], r["failed"]) for r in rej] == [("e2e-bad", ["engine_backend"])]


def test_an_engine_that_never_ran_is_named(bundles):
    """A run the runner stopped before the engine started has no engine.json."""
    from bench.judge import retention
    from bench.judge.bundle import load, read_dir
    b = load(read_dir(bundles("r1", "e2e-prose-admit")))
    b.engine = None
    b.status.update(phase="failed", ok=False, reason="host lock still held after 600 s")
    ok, why = retention.engine_exit_ok(b, {})
    assert not ok and "never ran" in why and "host lock" in why


def test_an_engine_cell_points_at_the_engine_table(e2e):
    [res] = queries.cell_results(e2e[0], "e2e-prose-admit")
    assert res["workload"]["kind"] == "engine" and res["workload"]["prompt"] == "prose"
    assert res["n_retained"] == 3 and res["median_s"] is None
    assert any("--matrix end-to-end" in w for w in res["warnings"])


def test_the_report_carries_table_3_with_bytes_per_token_and_arms(e2e):
    """bench report of an engine campaign: Table 3 from the stored runs (the same figures as
    `bench results --matrix end-to-end`), in Markdown and in HTML, with the arms and n."""
    from bench.results import report_data, report_html, report_md
    store = e2e[0]
    data = report_data.gather(store, ["c1"])
    (e,) = data["engine"]
    assert e["campaign"] == "c1"
    want = {p["prompt"]: p for p in queries.engine_results(store, campaign="c1")["prompts"]}
    assert {p["prompt"]: p for p in e["results"]["prompts"]} == want
    md = report_md.render(data)
    assert "### Table 3: end-to-end decode, page-cache admission vs nocache: c1" in md
    for prompt, p in want.items():
        row = next(ln for ln in md.splitlines() if ln.startswith(f"| {p['group']} | {prompt} |"))
        assert f"| {p['admit_bytes_per_token'] / 1e6:.3g} | " in row and f"| {p['pairs']} |" in row
    assert report_md.md("NO: c1/fixture-a/1") in md
    assert report_md.md("arms admit `--policy admit`, nocache `--policy nocache`") in md
    page = report_html.render(data, None)
    assert 'id="engine-c1"' in page and "MB/tok nocache" in page
