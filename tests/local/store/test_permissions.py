"""What bench keeps on the controller is private to the user that runs it (bench.paths): the
data directory and the directories bench makes 0700, the SQLite database with its -wal, -shm
and lock files 0600, collected bundles 0700/0600 (collected here from a bundle a "host" left
0755/0644, through the real collect and the local transport), rejected/ likewise, plans and
traces 0600. Looser ones from an earlier bench are tightened; a directory the user named for a
database must exist, and is not changed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bench.execute.collect import collect
from bench.hosts.inventory import Host
from bench.hosts.transport import LocalTransport
from bench.paths import bench_home
from bench.plan.prepared import plan_from_trace_file, workload_plan
from bench.store.db import StoreError, default_url, open_store
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import make_bundle
from tests.support.runner import assert_private


def mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh $XDG_DATA_HOME; bench's defaults (data dir, database) land inside it."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("BENCH_DB", raising=False)
    monkeypatch.delenv("BENCH_DATA_DIR", raising=False)
    os.umask(old := os.umask(0o022))        # the usual umask, whatever pytest runs with
    yield tmp_path
    os.umask(old)


def _use(url: str) -> None:
    store = open_store(url)
    try:
        with store.engine.begin() as c:         # a write: SQLite makes -wal and -shm now
            c.exec_driver_sql("CREATE TABLE IF NOT EXISTS scratch (x INTEGER)")
            c.exec_driver_sql("INSERT INTO scratch VALUES (1)")
        db = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm", ".lock"):
            f = db.with_name(db.name + suffix)
            assert f.exists() and mode(f) == 0o600, (f, oct(mode(f)))
    finally:
        store.close()


def test_the_default_database_and_data_dir_are_private(home):
    assert default_url() == f"sqlite:///{home / 'xdg' / 'bench' / 'bench.db'}"
    _use(default_url())
    assert mode(bench_home()) == 0o700
    assert mode(home / "xdg") == 0o700          # created by bench too (the XDG rule)


def test_a_looser_database_from_an_earlier_bench_is_tightened(home):
    d = bench_home()
    d.mkdir(parents=True, mode=0o755)
    os.chmod(d, 0o755)
    _use(default_url())
    db = d / "bench.db"
    for f in (db, d / "bench.db.lock"):          # -wal and -shm went with the last close
        os.chmod(f, 0o644)
    os.chmod(d, 0o755)
    _use(default_url())                         # opening it again tightens everything
    assert mode(d) == 0o700


def test_a_directory_the_user_named_is_left_as_it_is(tmp_path, home):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    _use(f"sqlite:///{shared / 'team.db'}")
    assert mode(shared) == 0o755                # the user's directory, the user's choice
    new = tmp_path / "not" / "made"              # a new database's directory must exist
    with pytest.raises(StoreError, match="no directory"):
        open_store(f"sqlite:///{new / 'x.db'}")
    assert not (tmp_path / "not").exists()


def test_collected_bundles_plans_traces_and_rejected_are_private(tmp_path, home):
    work = tmp_path / "host-work"                # what a host left, world-readable
    make_bundle(work / "runs", "r1", "64m-cgroup-mglru", campaign=None, host="h1")
    for p in [work, *work.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    host = Host(name="h1", address="localhost", transport="local", pool_dir=str(tmp_path / "p"),
                work_dir=str(work))
    data = tmp_path / "data"
    res = collect(LocalTransport("h1"), host, "r1", data)
    bundle = Path(res["bundle"])
    assert res["status"] == "collected" and bundle == data / "bundles" / "h1" / "r1"
    assert_private(bundle)
    assert [mode(p) for p in (data, data / "bundles", data / "bundles" / "h1")] == [0o700] * 3
    assert mode(work / "collect") == 0o700       # the archive's directory on the host
    # an earlier bench's looser copy is tightened when found again
    os.chmod(bundle / "kmsg.txt", 0o644)
    assert collect(LocalTransport("h1"), host, "r1", data)["status"] == "present"
    assert mode(bundle / "kmsg.txt") == 0o600

    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        assert ingest_bundle(store, bundle, nominal_miss_bytes=1e7)["status"] == "ingested"
        bad = make_bundle(data / "bundles" / "h1", "r2", "64m-cgroup-mglru",
                          edit=lambda p: p.pop("status.json"))
        os.chmod(bad, 0o755)
        with pytest.raises(Exception, match="moved to"):
            ingest_bundle(store, bad)
    finally:
        store.close()
    rejected = data / "bundles" / "h1" / "rejected"
    assert mode(rejected) == 0o700
    assert_private(rejected / "r2")


def test_plans_and_traces_in_the_data_dir_are_private(tmp_path, home):
    data = tmp_path / "data"
    _, plan = workload_plan({"trace": "tiny", "tokens": 20}, data)
    assert plan.parent == data / "plans" and mode(plan) == 0o600
    assert [mode(p) for p in (data, data / "plans", data / "traces")] == [0o700] * 3
    assert all(mode(t) == 0o600 for t in (data / "traces").iterdir())
    os.chmod(plan, 0o644)                       # an earlier bench's plan: tightened when used
    os.chmod(data / "plans", 0o755)
    trace = next((data / "traces").iterdir())
    assert plan_from_trace_file(trace, data_dir=data)[1] == plan
    assert mode(plan) == 0o600 and mode(data / "plans") == 0o700
