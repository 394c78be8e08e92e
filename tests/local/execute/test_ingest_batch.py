"""A campaign's ingests written in batches (bench.execute.collect.GroupWrite, bench.store.ingest
.write_batch): on SQLite files made by the real migrations, real bundles. A bundle whose write
fails part-way is rolled back alone (its savepoint), the others of its batch are committed;
ingests queued behind a busy writer go in one transaction, each answered with its own
verdict, the same as one at a time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from bench.errors import BenchError
from bench.execute import collect
from bench.store.campaigns import add_run
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle, prepare_bundle, write_batch
from bench.store.models import RawFile, Run, Verdict
from tests.support.bundlegen import ensure_campaigns, make_bundle


def _oom(p: dict) -> None:
    snap = p["snapshots"]["post"]
    snap["memory.oom_control"] = snap["memory.oom_control"].replace("oom_kill 0", "oom_kill 1")


def _bundles(root: Path, n: int) -> list[Path]:
    return [make_bundle(root, f"r{i}", "64Mi-cgroup-mglru", seed=i, position=i,
                        edit=_oom if i % 3 == 2 else None) for i in range(n)]


def _runs(url: str) -> dict:
    st = open_store(url)
    try:
        with st.session() as s:
            raw = dict(s.execute(select(RawFile.run_id, func.count()).group_by(RawFile.run_id))
                       .all())
            ver = dict(s.execute(select(Verdict.run_id, func.count()).group_by(Verdict.run_id))
                       .all())
            return {r.run_id: (r.state, r.bundle_digest, r.retained, raw.get(r.id, 0),
                               ver.get(r.id, 0)) for r in s.scalars(select(Run))}
    finally:
        st.close()


def test_a_bundle_failing_mid_write_is_rolled_back_alone(tmp_path):
    url = f"sqlite:///{tmp_path}/bench.db"
    store = open_store(url)
    ensure_campaigns(store, "c1")
    # r1 is the campaign's planned run: its ingest claims it (writes its digest), then meets
    # the state machine (planned -> ingested is not a move): an error after writes
    add_run(store, "c1", "r1", host="fixture-a", cell="64Mi-cgroup-mglru", position=1)
    bs = _bundles(tmp_path / "b", 3)
    res = write_batch(store, [prepare_bundle(b) for b in bs])
    store.close()
    assert isinstance(res[1], BenchError) and "r1" in res[1].message
    assert [r["status"] for r in (res[0], res[2])] == ["ingested", "ingested"]
    assert (res[0]["retained"], res[2]["retained"]) == (True, False)
    runs = _runs(url)
    assert runs["r1"][:2] == ("planned", None) and runs["r1"][3:] == (0, 0)
    for rid in ("r0", "r2"):
        state, digest, _, raw, ver = runs[rid]
        assert state == "ingested" and digest and raw > 10 and ver > 3, (rid, runs[rid])
    # the same as one at a time
    one = f"sqlite:///{tmp_path}/one.db"
    st = open_store(one)
    ensure_campaigns(st, "c1")
    for b in (bs[0], bs[2]):
        ingest_bundle(st, b)
    st.close()
    assert {k: v for k, v in _runs(url).items() if k != "r1"} == _runs(one)


def test_ingests_queued_behind_the_writer_go_in_one_transaction(tmp_path):
    url = f"sqlite:///{tmp_path}/bench.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    bs = _bundles(tmp_path / "b", 6)
    group = collect.ingest_group(url)
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def one(b: Path) -> None:
        try:
            results[b.name] = collect.ingest(url, b, None)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    assert group.slots.acquire(timeout=5)       # the writer busy: every ingest queues
    threads = [threading.Thread(target=one, args=(b,)) for b in bs]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(group._queue) < len(bs):
            assert time.monotonic() < deadline, "the ingests did not queue"
            time.sleep(0.02)
    finally:
        group.slots.release()
    for t in threads:
        t.join(60)
    assert errors == []
    assert group.batches[-1:] == [6]
    assert {k: (v["status"], v["retained"]) for k, v in results.items()} == {
        f"r{i}": ("ingested", i % 3 != 2) for i in range(6)}
    runs = _runs(url)
    assert sorted(runs) == [f"r{i}" for i in range(6)]
    assert all(v[0] == "ingested" and v[3] > 10 for v in runs.values())


@pytest.mark.parametrize("n", [1])
def test_an_ingest_alone_is_a_batch_of_one(tmp_path, n):
    url = f"sqlite:///{tmp_path}/bench.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    b = _bundles(tmp_path / "b", n)[0]
    assert collect.ingest(url, b, None)["status"] == "ingested"
    assert collect.ingest_group(url).batches[-1] == 1
    assert collect.ingest(url, b, None)["status"] == "unchanged"
