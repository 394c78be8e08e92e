"""The campaign's ingest path (bench.execute.collect.ingest): one open store per database for
the process, ingest slots sized to it (SQLite: one writer), the fingerprint and compressed raw
files made before the write transaction. Concurrent ingests from host threads store every run
with the same verdicts as one at a time, on SQLite files made by the real migrations and on a
throwaway PostgreSQL server."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

from sqlalchemy import select

from bench.execute import collect
from bench.store.db import open_store
from bench.store.models import RawFile, Run
from tests.support.bundlegen import ensure_campaigns, make_bundle


def _oom(p: dict) -> None:
    snap = p["snapshots"]["post"]
    snap["memory.oom_control"] = snap["memory.oom_control"].replace("oom_kill 0", "oom_kill 1")


def _bundles(root: Path, n: int) -> list[Path]:
    """n bundles of campaign c1, every third one with an OOM kill (rejected by no_oom)."""
    return [make_bundle(root, f"r{i}", "64Mi-cgroup-mglru", seed=i,
                        edit=_oom if i % 3 == 2 else None) for i in range(n)]


def _verdicts(url: str) -> dict:
    st = open_store(url)
    try:
        with st.session() as s:
            return {r.run_id: (r.retained, r.bundle_digest, r.fingerprint_id is not None)
                    for r in s.scalars(select(Run))}
    finally:
        st.close()


def test_concurrent_ingests_store_what_serial_ones_do(db_url, fresh_db, tmp_path):
    serial_url = fresh_db()
    for url in (db_url, serial_url):
        st = open_store(url)
        ensure_campaigns(st, "c1")
        st.close()
    serial = [collect.ingest(serial_url, b, None) for b in _bundles(tmp_path / "s", 9)]
    assert [r["retained"] for r in serial] == [True, True, False] * 3     # the fault bites

    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def one(b: Path) -> None:
        try:
            results[b.name] = collect.ingest(db_url, b, None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(b,)) for b in _bundles(tmp_path / "c", 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {k: v["retained"] for k, v in results.items()} == {
        r["run_id"]: r["retained"] for r in serial}
    assert _verdicts(db_url) == _verdicts(serial_url)
    store, _ = collect.ingest_store(db_url)
    with store.session() as s:      # raw files compressed before the transaction, stored whole
        raw = s.scalars(select(RawFile).where(RawFile.path == "spec.json")).all()
    assert len(raw) == 9 and all(len(zlib.decompress(r.data)) == r.size for r in raw)


def test_one_store_per_database_and_one_sqlite_writer(tmp_path):
    url = f"sqlite:///{tmp_path}/bench.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    a, slots = collect.ingest_store(url)
    b, _ = collect.ingest_store(url)
    assert a is b
    assert slots.acquire(blocking=False)            # SQLite: one ingest at a time
    try:
        assert not slots.acquire(blocking=False)
    finally:
        slots.release()
    assert collect.ingest(url, _bundles(tmp_path / "b", 1)[0], None)["status"] == "ingested"


def test_a_replaced_sqlite_file_is_opened_again(tmp_path):
    """A database file removed (or replaced) since the store was opened is not written through
    the old connection: the next ingest opens the new file and brings it to head."""
    url = f"sqlite:///{tmp_path}/bench.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    first, _ = collect.ingest_store(url)
    bs = _bundles(tmp_path / "b", 2)
    assert collect.ingest(url, bs[0], None)["status"] == "ingested"
    for p in tmp_path.glob("bench.db*"):
        p.unlink()
    st = open_store(url)
    ensure_campaigns(st, "c1")
    st.close()
    assert collect.ingest(url, bs[1], None)["status"] == "ingested"
    assert collect.ingest_store(url)[0] is not first
    assert set(_verdicts(url)) == {"r1"}


def test_sqlite_writers_of_a_process_queue_on_one_lock_released_at_every_end(tmp_path):
    """A write transaction holds the process's writer lock of its file from BEGIN IMMEDIATE to
    its end (commit, rollback by an exception, a session closed without commit); another
    thread's writer waits on it, not in SQLite's polling busy handler, and nothing leaks."""
    from bench.store import db
    from bench.store.campaigns import journal
    url = f"sqlite:///{tmp_path}/bench.db"
    st = open_store(url)
    ensure_campaigns(st, "c1")
    lock = db._WRITERS[str(st.engine.url.database)]

    def free_elsewhere() -> bool:
        out: list[bool] = []

        def probe() -> None:
            got = lock.acquire(blocking=False)
            out.append(got)
            if got:
                lock.release()
        t = threading.Thread(target=probe)
        t.start()
        t.join()
        return out[0]
    inside, order = threading.Event(), []
    with st.session() as s, s.begin():
        s.scalar(select(Run.id).limit(1))
        assert not free_elsewhere()             # held from BEGIN IMMEDIATE

        def other() -> None:
            inside.set()
            journal(st, "note", "second writer", campaign_id="c1")
            order.append("second")
        t = threading.Thread(target=other)
        t.start()
        inside.wait(5)
        t.join(0.3)
        assert t.is_alive()                     # waits for the first to end
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]
    try:
        with st.session() as s, s.begin():
            s.scalar(select(Run.id).limit(1))
            raise KeyError("boom")
    except KeyError:
        pass
    s = st.session()
    s.scalar(select(Run.id).limit(1))           # autobegun, closed without commit
    s.close()
    for i in range(20):
        journal(st, "note", f"n{i}", campaign_id="c1")
    assert free_elsewhere()
    st.close()
