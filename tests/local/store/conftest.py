"""Store fixtures: a real database built by the migrations, parametrized over SQLite and a
throwaway PostgreSQL server (initdb + pg_ctl as the postgres user, unix socket, random port,
stopped by its PID). The migrations run once per session and backend into a template that
each `store` copies (tests.support.template_db); tests without `store` get an empty database
and migrate it themselves. PostgreSQL skips with the missing capability named."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.bundlegen import ensure_campaigns, make_bundle
from tests.support.template_db import pg_admin, pg_database_url, pg_template, sqlite_at_head


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server():
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("postgresql server binaries not installed (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg (the PostgreSQL driver) not installed: pip install 'psycopg[binary]'")
    if os.geteuid() != 0:
        pytest.skip("starting a throwaway PostgreSQL server needs root (to run as postgres)")
    try:
        pw = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres system user")
    base = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    os.chown(base, pw.pw_uid, pw.pw_gid)
    data, sock, port = base / "data", base, _free_port()

    def as_pg(*argv):
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True,
                              capture_output=True, text=True)
    # a throwaway server: no fsync (what a crash would lose dies with the test session), so
    # CREATE DATABASE and the migrations do not wait on a disk the machine's other jobs share
    as_pg(str(bindir / "initdb"), "--no-sync", "-D", str(data), "-A", "trust", "-U", "postgres")
    as_pg(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o",
          f"-k {sock} -p {port} -c listen_addresses='' -c fsync=off "
          "-c synchronous_commit=off -c full_page_writes=off", "start")
    pid = int((data / "postmaster.pid").read_text().split()[0])
    yield {"sock": str(sock), "port": port}
    # fast shutdown (SIGINT): a smart one (SIGTERM) waits for every client to disconnect, and
    # the engines of this very process still hold some until it exits
    os.kill(pid, signal.SIGINT)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    shutil.rmtree(base, ignore_errors=True)


_counter = iter(range(1_000_000))


def _new_pg_database(srv, template: str | None = None) -> str:
    name = f"bench_{os.getpid()}_{next(_counter)}"
    pg_admin(srv, f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    return pg_database_url(srv, name)


@pytest.fixture(scope="session")
def pg_head_template(pg_server):
    """The session's PostgreSQL database at head, which `store` databases are copied from."""
    return pg_template(pg_server)


@pytest.fixture
def pg_url(pg_server):
    """A new empty PostgreSQL database (for a test that is about PostgreSQL alone)."""
    return _new_pg_database(pg_server)


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """This test's database. A test that uses `store` gets it at head, copied from the
    session's migrated template; any other test gets it empty (nothing at all for SQLite), so
    that what it does to it (the migrations, a first open) runs for real."""
    at_head = "store" in request.fixturenames
    if request.param == "sqlite":
        path = tmp_path / "bench.db"
        return sqlite_at_head(path) if at_head else f"sqlite:///{path}"
    srv = request.getfixturevalue("pg_server")
    template = request.getfixturevalue("pg_head_template") if at_head else None
    return _new_pg_database(srv, template)


@pytest.fixture
def fresh_db(db_url, request, tmp_path):
    """new() -> the URL of another empty database of db_url's kind."""
    if db_url.startswith("sqlite"):
        return lambda: f"sqlite:///{tmp_path}/fresh-{next(_counter)}.db"
    srv = request.getfixturevalue("pg_server")
    return lambda: _new_pg_database(srv)


@pytest.fixture
def store(db_url):
    """db_url's database (at head) holding campaign c1, the one generated bundles name by
    default (ingest never creates a campaign)."""
    from bench.store.db import open_store
    st = open_store(db_url)
    ensure_campaigns(st, "c1")
    yield st
    st.close()


@pytest.fixture
def bundles(tmp_path):
    """make(run_id, cell, edit=None, **kw) -> a complete bundle directory."""
    root = tmp_path / "bundles"

    def make(run_id, cell="64Mi-cgroup-mglru", edit=None, **kw):
        return make_bundle(root, run_id, cell, edit=edit, **kw)
    return make
