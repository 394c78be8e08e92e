"""`bench run` with the protocol a matrix sets (`--cgroup-headroom`, `--balloon-max`), on this
machine through the local transport: the real runner under a real memory cgroup wall, its
bundle's spec and capacity record read back; a balloon whose lock the probe already shows
above the cap is refused before anything reaches the host. Needs root (drop_caches, cgroups)
and a C toolchain (the agent is built on deploy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.trace.synth import generate, preset
from tests.support.local_host import local_hosts_dir

pytestmark = [pytest.mark.root, pytest.mark.native]


@pytest.fixture
def local(tmp_path):
    hosts = local_hosts_dir(tmp_path, root=False)
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=40))) + "\n")
    return ["--host", "local", "--trace", str(trace), "--hosts-dir", str(hosts), "--threads",
            "2", "--no-ingest", "--data-dir", str(tmp_path / "data"), "--db",
            str(tmp_path / "bench.db"), "--json"]


def test_a_cgroup_wall_with_the_headroom_given_on_the_command_line(local, tmp_path, capsys):
    from bench.hosts.facts import CGROUP_SCRIPT, parse_cgroup
    from bench.hosts.transport import LocalTransport
    cg = parse_cgroup(LocalTransport("local").run(["sh", "-c", CGROUP_SCRIPT]).stdout)
    if cg["backend"] == "none":
        pytest.skip("this machine has no memory cgroup mounted (cgroup2 or a v1 hierarchy)")
    rc = main(["run", "32M-cgroup-classic", *local, "--cgroup-headroom", "16Mi",
               "--run-id", "hr1"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    (res,) = json.loads(out.out)
    bundle = Path(res["bundle"])
    spec = json.loads((bundle / "spec.json").read_text())
    assert spec["cgroup_headroom_bytes"] == 16 << 20 and "balloon_max_bytes" not in spec
    cap = json.loads((bundle / "capacity.json").read_text())
    assert cap["limit_bytes"] == 32 * 10 ** 6 + (16 << 20), cap


def test_a_balloon_above_the_cap_is_refused_before_the_host_is_touched(local, tmp_path,
                                                                      capsys):
    rc = main(["run", "32M-balloon-classic", *local, "--balloon-max", "1M", "--run-id", "bm1"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "the balloon would lock at least" in err and "above the balloon cap 1M" in err
    assert not (tmp_path / "work" / "runs").exists() and not (tmp_path / "pool").exists()
    rc = main(["run", "32M-none-classic", *local, "--balloon-max", "1G"])
    assert rc == 2 and "--balloon-max applies to balloon cells" in capsys.readouterr().err


def test_a_run_is_a_campaign_left_collected_by_no_ingest_and_resume_ingests_it(local, tmp_path,
                                                                               capsys):
    """`bench run` writes a campaign of its own (id: the run id, matrix `bench run`) and runs
    it through the campaign executor; --no-ingest leaves the run collected, so the campaign is
    incomplete and `bench resume` (no trace, no hosts named: the record has them) ingests it."""
    db = str(tmp_path / "bench.db")
    rc = main(["run", "32M-none-classic", *local, "--run-id", "ni1"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    (res,) = json.loads(out.out)
    assert res["campaign"] == "ni1" and res["ok"] and res["stage"] == "collected", res
    assert res["ingest"] is None and Path(res["bundle"]).is_dir()
    assert list(res["timings"]) == ["boot_verified", "deployed", "running", "collected"]
    assert res["deploy"] in ("deployed", "current") and res["pool"]["ok"], res
    assert main(["campaigns", "--db", db, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == "ni1" and row["matrix"] == "bench run", row
    assert row["state"] == "incomplete" and row["states"] == {"collected": 1}, row
    assert main(["resume", "ni1", "--db", db, "--json"]) == 0, capsys.readouterr().err[-3000:]
    done = json.loads(capsys.readouterr().out)
    assert done["outcome"]["validated"] + done["outcome"]["rejected"] == 1, done
    assert main(["campaigns", "--db", db, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["state"] == "done" and sum(row["states"].values()) == 1, row


def test_runs_join_the_campaign_their_options_name_and_its_record_keeps_them_all(tmp_path):
    """options.campaign: the runs join that campaign (one made by hand, then by `bench run`
    again), so that a paired design spans several calls; the record `bench resume` reads holds
    every call's runs. A campaign scheduled from a matrix takes no `bench run`."""
    from bench.errors import InputError
    from bench.execute.campaign.onerun import run_hosts
    from bench.execute.campaign.record import load_record
    from bench.hosts.inventory import load_inventory
    from bench.matrix.runspec import RunOptions
    from bench.plan.prepared import plan_from_trace_file
    from bench.store.campaigns import create_campaign, journal, run_rows
    from bench.store.db import open_store
    host = load_inventory(local_hosts_dir(tmp_path, root=False))["local"]
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=40))) + "\n")
    plan, path = plan_from_trace_file(trace, data_dir=tmp_path / "data")
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    store = open_store(db)
    try:
        create_campaign(store, "pairs", note="made by hand")
        create_campaign(store, "sched", matrix="m")
        journal(store, "plan", "a matrix's plan", campaign_id="sched", data={"runs": {}})
    finally:
        store.close()
    for rid, cell in (("j1", "32M-none-classic"), ("j2", "16M-none-classic")):
        (res,) = run_hosts([host], cell, plan, path, rid, data_dir=tmp_path / "data",
                           db_url=db, options=RunOptions(threads=2, campaign="pairs"))
        assert res.ok and res.campaign == "pairs" and res.ingest, res.as_dict()
        spec = json.loads((Path(res.bundle) / "spec.json").read_text())
        assert spec["campaign"] == "pairs" and spec["agent"]["threads"] == 2
    with pytest.raises(InputError, match="scheduled from a matrix"):
        run_hosts([host], "32M-none-classic", plan, path, "j3", data_dir=tmp_path / "data",
                  db_url=db, options=RunOptions(campaign="sched"))
    store = open_store(db)
    try:
        rows = {r.run_id: r.state for r in run_rows(store, "pairs")}
        rec = load_record(store, "pairs")
    finally:
        store.close()
    assert set(rows) == {"j1", "j2"} and set(rows.values()) <= {"validated", "rejected"}
    assert rec["order"] == ["j1", "j2"] and {rec["runs"][r]["cell"] for r in rows} == {
        "32M-none-classic", "16M-none-classic"}
