"""The schema comes from the migrations, and the models must not drift from them."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from bench.store.db import (StoreError, check, current_revision, head_revision, make_engine,
                            migrations_dir, open_store, upgrade)
from bench.store.models import Base


def test_models_match_migrations(db_url):
    engine = make_engine(db_url)
    upgrade(engine)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True,
                                                     "compare_server_default": True})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == [], f"models drifted from migrations/: {diff}"


def test_open_upgrades_a_new_database_to_head(db_url):
    st = open_store(db_url)
    assert current_revision(st.engine) == head_revision()
    assert upgrade(st.engine) == (head_revision(), head_revision())   # idempotent


def test_sqlite_runs_wal_with_foreign_keys(tmp_path):
    st = open_store(f"sqlite:///{tmp_path}/x.db")
    with st.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_default_url_follows_xdg_and_bench_db(monkeypatch, tmp_path):
    from bench.store.db import default_url
    monkeypatch.delenv("BENCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_url() == f"sqlite:///{tmp_path}/bench/bench.db"
    monkeypatch.setenv("BENCH_DB", "sqlite:////elsewhere.db")
    assert default_url() == "sqlite:////elsewhere.db"


def test_refuses_a_foreign_database(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path}/other.db")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (id INTEGER)"))
    with pytest.raises(StoreError, match="no bench schema version"):
        open_store(f"sqlite:///{tmp_path}/other.db")


def test_refuses_a_newer_schema(tmp_path):
    url = f"sqlite:///{tmp_path}/newer.db"
    open_store(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'fffffff'"))
    with pytest.raises(StoreError, match="unknown to this bench"):
        check(make_engine(url))


def test_migrations_locate_versions_next_to_env():
    d = migrations_dir()
    assert (d / "env.py").is_file() and any((d / "versions").glob("0001_*.py"))


def test_env_is_import_safe():
    import importlib
    importlib.import_module("migrations.env")


def test_a_readers_quick_head_is_alembics():
    """require_head's reading of the migration files names alembic's head."""
    from bench.store import db
    assert db.quick_head() == db.head_revision() is not None
