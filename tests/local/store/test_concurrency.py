"""Several bench processes on one database at once, for real (tests/support/race.py: spawned
processes lined up on a barrier), on SQLite and PostgreSQL: the migrations run once however
many processes open a fresh database; get-or-create of hosts, cells, campaigns survives a
concurrent insert; the same bundle ingested twice at once is stored once, one caller told
"ingested" and the other "unchanged"; a different bundle under the same run id is refused."""

from __future__ import annotations

from sqlalchemy import func, select, text

from bench.store.db import head_revision, make_engine
from bench.store.models import (Campaign, CampaignHost, Cell, Host, JournalEntry, RawFile, Run,
                                Verdict)
from tests.support.race import open_and_ingest, together, upgrade_fresh

N = 4


def _errors(results) -> list[str]:
    return [str(r) for kind, r in results if kind != "ok"]


def _count(store, model, *where) -> int:
    with store.session() as s:
        return s.scalar(select(func.count()).select_from(model).where(*where))


def test_processes_opening_a_fresh_database_migrate_it_once(fresh_db):
    """Before the schema lock, 18 of 40 such opens on SQLite failed ("table campaigns already
    exists", "holds tables but no bench schema version"), PostgreSQL's on its catalog."""
    head = head_revision()
    for _ in range(3):
        url = fresh_db()
        results = together(upgrade_fresh, [(url,)] * N)
        assert _errors(results) == []
        befores = sorted(str(r["before"]) for _, r in results)      # type: ignore[index]
        assert befores == sorted(["None"] + [str(head)] * (N - 1)), befores
        engine = make_engine(url)
        try:
            with engine.connect() as c:
                assert c.execute(text("SELECT version_num FROM alembic_version")).all() \
                    == [(head,)]
        finally:
            engine.dispose()


def test_concurrent_ingests_of_a_new_host_cell_and_campaign(store, db_url, bundles):
    """A new host and cell, and the campaign's host reference (the campaign itself exists:
    ingest never creates one)."""
    from bench.store.campaigns import create_campaign
    create_campaign(store, "c-new")
    paths = [bundles(f"n{i}", "64m-cgroup-mglru", campaign="c-new", host="fresh-host",
                     position=i, seed=i) for i in range(N)]
    results = together(open_and_ingest, [(db_url, str(p)) for p in paths])
    assert _errors(results) == []
    assert sorted(r["status"] for _, r in results) == ["ingested"] * N   # type: ignore[index]
    assert _count(store, Host, Host.name == "fresh-host") == 1
    assert _count(store, Cell) == 1                 # the one cell, whatever its canonical case
    assert _count(store, Campaign, Campaign.id == "c-new") == 1
    assert _count(store, CampaignHost) == 1
    assert _count(store, Run) == N


def _stored_once(store, run_id: str, bundle) -> None:
    with store.session() as s:
        run = s.scalar(select(Run).where(Run.run_id == run_id))
        assert run is not None and run.state == "ingested"
        rid = run.id
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert _count(store, Run, Run.run_id == run_id) == 1
    assert _count(store, RawFile, RawFile.run_id == rid) == len(files)
    n_verdicts = _count(store, Verdict, Verdict.run_id == rid)
    assert n_verdicts == len({v for v in _rules(store, rid)})      # each rule once
    assert _count(store, JournalEntry, JournalEntry.run_ref == rid,
                  JournalEntry.kind == "ingest") == 1


def _rules(store, rid: int) -> list[str]:
    with store.session() as s:
        return list(s.scalars(select(Verdict.rule).where(Verdict.run_id == rid)))


def test_the_same_bundle_ingested_by_two_processes_at_once(store, db_url, bundles):
    for round_ in range(3):                 # three chances for the two to overlap
        b = bundles(f"dup{round_}", "64m-cgroup-mglru", campaign=None, seed=round_)
        results = together(open_and_ingest, [(db_url, str(b))] * 2)
        assert _errors(results) == []
        assert sorted(r["status"] for _, r in results) == ["ingested", "unchanged"]  # type: ignore[index]
        _stored_once(store, f"dup{round_}", b)


def test_the_same_campaign_run_ingested_by_two_processes_at_once(store, db_url, bundles):
    from bench.store.campaigns import add_run, create_campaign, transition
    create_campaign(store, "cr", matrix="m", seed=1)
    for i in range(3):
        rid = f"cr-{i}"
        add_run(store, "cr", rid, host="fixture-a", cell="64m-cgroup-mglru", position=i)
        for state in ("boot_verified", "deployed", "running", "collected"):
            transition(store, rid, state)
        b = bundles(rid, "64m-cgroup-mglru", campaign="cr", position=i, seed=i)
        results = together(open_and_ingest, [(db_url, str(b))] * 2)
        assert _errors(results) == []
        assert sorted(r["status"] for _, r in results) == ["ingested", "unchanged"]  # type: ignore[index]
        _stored_once(store, rid, b)


def test_a_different_bundle_for_the_same_run_id_at_once_is_refused(store, db_url, bundles,
                                                                   tmp_path):
    from tests.support.bundlegen import make_bundle
    a = make_bundle(tmp_path / "a", "same", "64m-cgroup-mglru", campaign=None, seed=1)
    b = make_bundle(tmp_path / "b", "same", "64m-cgroup-mglru", campaign=None, seed=2,
                    speed=1.5)
    results = together(open_and_ingest, [(db_url, str(a)), (db_url, str(b))])
    oks = [r for kind, r in results if kind == "ok"]
    errs = [r for kind, r in results if kind != "ok"]
    assert [r["status"] for r in oks] == ["ingested"], results             # type: ignore[index]
    assert len(errs) == 1 and errs[0].startswith("StoreError: run same is already stored from a "
                                                 "different bundle"), errs
    assert _count(store, Run, Run.run_id == "same") == 1


def test_get_or_create_rolls_back_with_its_transaction(store):
    """The insert belongs to the caller's transaction (a SAVEPOINT opening a pysqlite
    transaction would have committed it on release)."""
    from bench.store.db import get_or_create

    class Boom(Exception):
        pass
    try:
        with store.session() as s, s.begin():
            assert get_or_create(s, Host, name="ghost").id is not None
            assert get_or_create(s, Host, name="ghost").name == "ghost"     # found, not added
            raise Boom
    except Boom:
        pass
    assert _count(store, Host, Host.name == "ghost") == 0


def test_a_reader_process_leaves_a_writer_whose_process_opened_the_path_again(tmp_path):
    """SQLite's POSIX locks belong to the process: closing any descriptor of the database file
    drops them all. A writer whose process opens the same path again (a second store: an
    ingest beside the campaign's own) must not read the file's header again, or a reader in
    another process (`bench watch`, `bench runs`) takes itself for the last connection when
    it closes, removes the -wal and -shm, and the writer's next commit is lost (or "disk I/O
    error" on every ingest of a campaign that a reader polled)."""
    import subprocess
    import sys

    from bench.store.db import open_store
    from tests.support.paths import REPO
    url = f"sqlite:///{tmp_path / 'b.db'}"
    writer = open_store(url, write=True)
    try:
        with writer.session() as s:
            s.execute(text("CREATE TABLE t (x INTEGER)"))
            s.execute(text("INSERT INTO t VALUES (1)"))
            s.commit()
        again = open_store(url, write=True)     # the same path, opened again in this process
        again.close()
        read = ("from bench.store.db import open_store; from sqlalchemy import text; "
                f"s = open_store({url!r}, write=False); c = s.session(); "
                "print(c.execute(text('SELECT count(*) FROM t')).scalar()); c.close(); s.close()")
        p = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "1", p.stderr[-2000:]
        with writer.session() as s:             # the writer's connection goes on writing
            s.execute(text("INSERT INTO t VALUES (2)"))
            s.commit()
        p = subprocess.run([sys.executable, "-c", read], cwd=REPO, capture_output=True,
                           text=True, timeout=60)           # and what it wrote is there
        assert p.returncode == 0 and p.stdout.strip() == "2", (p.stdout, p.stderr[-2000:])
    finally:
        writer.close()
