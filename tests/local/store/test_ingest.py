"""Ingest: one transaction per bundle, idempotent, damaged bundles refused and moved aside."""

import json

import pytest
from sqlalchemy import func, select

from bench.judge import retention
from bench.judge.bundle import BundleError
from bench.store import campaigns
from bench.store.ingest import ingest_bundle, stored_bundle
from bench.store.models import (CounterDelta, Iteration, JournalEntry, RawFile, Run, TimelineSample,
                                Verdict)
from bench.store.states import IllegalTransition

TABLES = (Run, RawFile, CounterDelta, Iteration, TimelineSample, Verdict, JournalEntry)


def _counts(store):
    with store.session() as s:
        return {m.__tablename__: s.scalar(select(func.count()).select_from(m)) for m in TABLES}


def test_ingest_stores_every_part(store, bundles):
    res = ingest_bundle(store, bundles("r1"))
    assert res == {"run_id": "r1", "status": "ingested", "retained": True, "failed": []}
    c = _counts(store)
    agent_rules = [r for r in retention.RULES if "agent" in r.kinds]   # one verdict each
    assert c["runs"] == 1 and c["iterations"] == 24 and c["verdicts"] == len(agent_rules)
    assert c["raw_files"] > 90 and c["timeline"] > 5 and c["counter_deltas"] > 100
    with store.session() as s:
        run = s.scalar(select(Run))
        # the device bytes are the kernel's: vda sectors over the measured interval x 512
        dev = s.scalar(select(CounterDelta.delta).where(
            CounterDelta.run_id == run.id, CounterDelta.interval == "measured",
            CounterDelta.key == "vda.sectors_read"))
        assert run.device_bytes == dev * 512 >= 384 << 20   # two reads of 192 MiB
        assert stored_bundle(s, run).digest == run.bundle_digest   # recomputable from raw files


def test_same_run_twice_changes_nothing(store, bundles):
    p = bundles("r1")
    ingest_bundle(store, p)
    before = _counts(store)
    assert ingest_bundle(store, p)["status"] == "unchanged"
    assert _counts(store) == before


@pytest.mark.parametrize("damage,part", [      # no manifest: not a bundle (test_hostile_inputs)
    (lambda p: (p / "snapshots/pass1-end/proc_diskstats").unlink(),
     "snapshots/pass1-end/proc_diskstats"),
    (lambda p: (p / "agent.jsonl").write_text("{}\n"), "agent.jsonl"),
    (lambda p: _unlist(p, "timeline.csv"), "timeline.csv"),
])
def test_damaged_bundle_is_refused_and_moved_aside(store, bundles, damage, part):
    p = bundles("r1")
    damage(p)
    with pytest.raises(BundleError) as exc:
        ingest_bundle(store, p)
    assert exc.value.part == part and part in exc.value.message
    assert not p.exists() and (p.parent / "rejected" / "r1").is_dir()
    assert _counts(store)["runs"] == 0


def _unlist(p, rel):
    m = json.loads((p / "manifest.json").read_text())
    del m["files"][rel]
    (p / "manifest.json").write_text(json.dumps(m))


def test_nominal_given_gives_amplification(store, bundles):
    from bench.store.queries import cell_results
    ingest_bundle(store, bundles("r1"), nominal_miss_bytes=16e6)
    [res] = cell_results(store, "64Mi-cgroup-mglru")
    assert res["amplification"] == pytest.approx(res["device_gb_per_iteration"] / 0.016)
    assert any("amplification" in w for w in res["warnings"])


def test_campaign_api_and_journal(store, bundles):
    campaigns.create_campaign(store, "c3", matrix="reclaim", seed=7)
    campaigns.add_run(store, "c3", "r1", host="fixture-a", cell="64Mi-cgroup-mglru", position=0)
    with pytest.raises(IllegalTransition, match="planned -> running"):
        campaigns.transition(store, "r1", "running", "never started before deploy")
    for state in ("boot_verified", "deployed", "running"):
        campaigns.transition(store, "r1", state)
    assert campaigns.run_rows(store, "c3")[0].state == "running"
    assert ingest_bundle(store, bundles("r1", campaign="c3"))["status"] == "ingested"  # the run
    assert campaigns.run_rows(store, "c3")[0].state == "ingested"
    kinds = [j.kind for j in campaigns.journal_rows(store, "c3")]
    assert kinds == ["campaign", "run", "state", "state", "state", "ingest"]


def test_ingest_into_a_finished_run_is_refused(store, bundles):
    """A campaign run already judged cannot be ingested again from another bundle path: the
    store refuses the move validated -> ingested and writes nothing."""
    campaigns.create_campaign(store, "c2")
    campaigns.add_run(store, "c2", "r1", host="fixture-a", cell="64Mi-cgroup-mglru", position=0)
    for state in ("boot_verified", "deployed", "running", "collected", "validated"):
        campaigns.transition(store, "r1", state)
    with pytest.raises(IllegalTransition, match="validated -> ingested"):
        ingest_bundle(store, bundles("r1", campaign="c2"))
    assert campaigns.run_rows(store, "c2")[0].state == "validated"
    assert _counts(store)["iterations"] == 0


def test_the_demand_models_plan_comes_from_the_plan_store_by_sha256(store, bundles, tmp_path):
    """Not the spec's plan path (a path on the host): <data_dir>/plans/<plan_sha256>.bin, used
    only when its content has that sha256."""
    import hashlib
    import shutil

    from tests.support.runner import make_plan_file
    plan = make_plan_file(tmp_path / "p.bin", 12)
    sha = hashlib.sha256(plan.read_bytes()).hexdigest()
    (tmp_path / "data" / "plans").mkdir(parents=True)
    shutil.copyfile(plan, tmp_path / "data" / "plans" / f"{sha}.bin")
    forged = "e" * 64
    (tmp_path / "data" / "plans" / f"{forged}.bin").write_bytes(plan.read_bytes())
    for rid, digest in (("r1", sha), ("r2", forged)):
        ingest_bundle(store, bundles(rid, edit=lambda p, d=digest: p["spec.json"].update(
            plan=str(plan), plan_sha256=d)), data_dir=tmp_path / "data")
    with store.session() as s:
        got = {r.run_id: (r.nominal_source, r.nominal_miss_bytes_per_iteration)
               for r in s.scalars(select(Run))}
    assert got["r1"][0] == f"demand:{sha}.bin" and got["r1"][1] > 0
    assert got["r2"] == (None, None)            # a store file that is not what its name says
