"""Result identity on the netns lab (real sshd, SSH transport, host runner and agent, a real
SQLite store): one cell run on two lab hosts with two workloads (two traces) is four result
groups in `bench results --cell`, never one pooled number; `bench compare` pairs runs within one
host, campaign and workload. Runs go through the code path of `bench run` (run_hosts), joining
the campaign that pairing needs, created in the store first. Needs root."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.execute.campaign.onerun import run_hosts
from bench.lab import netns as lab_netns
from bench.matrix.runspec import RunOptions
from bench.plan.prepared import plan_from_trace_file
from bench.store import campaigns
from bench.store.db import open_store
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_pools", "default_boots")]
NAMES = ["lab-netns-1", "lab-netns-2"]
A, B = "1g-none-classic", "512m-none-classic"
CAMPAIGN = "idlab"


@pytest.fixture
def default_boots(lab):
    """Lab hosts share one session: a host an earlier test left booted with mem= (the memboot
    lab) is booted back to the default command line, so its none cells are retained."""
    lab.reload()
    for h in lab.hosts():
        if h.cmdline != lab_netns.DEFAULT_CMDLINE:
            lab.reboot(h.name, lab_netns.DEFAULT_CMDLINE)
    return lab


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("identity-lab")
    data = d / "data"
    plans, traces = [], []
    for domain in (0, 1):       # two workloads: same pool geometry, different traces
        trace = d / f"tiny-d{domain}.jsonl"
        trace.write_text("\n".join(generate(preset("tiny", tokens=200, expert_bytes=1 << 20,
                                                    domain=domain, spec_accept=0.0,
                                                    fallback=0.0))) + "\n")
        plans.append(plan_from_trace_file(trace, data_dir=data))
        traces.append(trace)
    db = f"sqlite:///{d / 'bench.db'}"
    store = open_store(db)
    try:
        campaigns.create_campaign(store, CAMPAIGN, note="result identity on the lab")
    finally:
        store.close()
    return {"data": data, "db": db, "plans": plans, "traces": traces}


def test_one_cell_two_hosts_two_workloads_is_four_groups(lab, lab_inventory, work, capsys):
    """Each host runs A and B with both traces in one campaign: four groups of A, one pair
    per group; then `bench run A` itself (a campaign of its own) adds a run to its two
    groups."""
    hosts = [lab_inventory[n] for n in NAMES]
    for cell in (A, B):
        for w, (plan, path) in enumerate(work["plans"]):
            results = run_hosts(hosts, cell, plan, path, f"id-{cell[:2]}-w{w}",
                                options=RunOptions(threads=2, passes=2, campaign=CAMPAIGN),
                                data_dir=work["data"], db_url=work["db"])
            for r in results:
                assert r.ok and r.ingest and r.ingest["status"] == "ingested", r.as_dict()
    capsys.readouterr()
    assert main(["results", "--cell", A, "--db", work["db"], "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)
    keys = {(g["host"], g["workload"]["trace_sha256"]) for g in groups}
    traces = {p.trace_sha256 for p, _ in work["plans"]}
    assert len(groups) == 4 and keys == {(h, t) for h in NAMES for t in traces}
    for g in groups:
        assert g["n_retained"] + g["n_rejected"] == 1 and g["campaigns"] == [CAMPAIGN]
        assert g["workload"]["threads"] == 2 and g["workload"]["passes"] == 2
        assert g["fingerprint"]["kernel"] and g["fingerprint"]["controller_version"]
        assert g["split"]["groups"] == 4
    assert "host (lab-netns-1, lab-netns-2)" in groups[0]["split"]["warning"]
    assert "trace_sha256" in groups[0]["split"]["warning"]
    assert main(["results", "--cell", A, "--db", work["db"]]) == 0
    out = capsys.readouterr().out
    assert "4 groups, not pooled" in out and out.count("runs retained / rejected") == 4
    # compare: one pair per host and workload, never one number across them
    assert main(["compare", A, B, "--db", work["db"], "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    kept = [g for g in c["groups"] if g["n_a"] and g["n_b"]]
    assert main(["runs", "--rejected", "--db", work["db"], "--json"]) == 0
    rejected = [(r["run_id"], [v["reason"] for v in r["verdicts"] if not v["passed"]])
                for r in json.loads(capsys.readouterr().out)]
    assert {(g["host"], g["workload"]["trace_sha256"]) for g in c["groups"]} == keys, rejected
    assert all(g["time_pairs"] == 1 and g["time_median_pair_ratio"] > 0 for g in kept)
    assert len(kept) == 4, c     # every lab run is retained (none cells, one campaign)
    assert c["time_ratio_of_medians"] is None and "not pooled" in c["warnings"][0]
    with capsys.disabled():     # the per-host figures belong in the CI log
        print(f"\n{A} vs {B} per group: " + json.dumps(
            [{"host": g["host"], "workload": g["workload"]["digest"],
              "time_median_pair_ratio": g["time_median_pair_ratio"],
              "time_ratio_of_medians": g["time_ratio_of_medians"], "pairs": g["time_pairs"]}
             for g in c["groups"]]))
    w0 = groups[0]["workload"]["digest"]
    assert main(["compare", A, B, "--db", work["db"], "--host", NAMES[0], "--workload",
                 w0[:6], "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert len(one["groups"]) == 1 and one["time_pairs"] == 1
    assert one["time_median_pair_ratio"] == pytest.approx(one["time_ratio_of_medians"])
    # `bench run` itself (its one-run campaign, id-adhoc): its runs join their host's and
    # workload's groups and pair with nothing (its campaign has no B run to pair with)
    assert main(["run", A, "--host", ",".join(NAMES), "--trace", str(work["traces"][0]),
                 "--threads", "2", "--run-id", "id-adhoc", "--db", work["db"],
                 "--data-dir", str(work["data"]), "--hosts-dir", str(lab.hosts_dir),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["results", "--cell", A, "--db", work["db"], "--workload", w0, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert sorted(g["host"] for g in again) == NAMES
    assert all(g["n_retained"] + g["n_rejected"] == 2
               and g["campaigns"] == sorted([CAMPAIGN, "id-adhoc"]) for g in again)
    assert {r["campaign_id"] for g in again for r in g["runs"]} == {CAMPAIGN, "id-adhoc"}
    assert main(["compare", A, B, "--db", work["db"], "--workload", w0, "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert [g["time_pairs"] for g in c["groups"]] == [1, 1]
