"""bench.store.result_serve reaches the database that open_store reaches for a reader, or
none: a SQLite file as resolve_url and make_engine make it, psycopg's keywords as
SQLAlchemy's psycopg dialect makes them, the migrations' head as bench.store.db reads it."""

from pathlib import Path

import pytest
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

from bench.store import result_serve
from bench.store.db import _parse_url, _sqlite_file, head_revision, quick_head, resolve_url


@pytest.mark.parametrize("text", [
    "postgresql+psycopg://postgres@/bench?host=/tmp/pg&port=5432",
    "postgresql://u:pw@db.example.org:6543/results",
    "postgres://u@h/d", "postgresql+psycopg://h/d", "postgresql+psycopg:///d?host=/run/pg",
    "postgresql+psycopg://u:@h:1/d-1.x",
])
def test_pg_keywords_are_sqlalchemys(text):
    kw = result_serve.pg_connect_args(text)
    _, opts = PGDialect_psycopg().create_connect_args(_parse_url(text))
    assert kw is not None and kw == {k: v for k, v in opts.items() if v != ""}, text


@pytest.mark.parametrize("text", [
    "postgresql+psycopg://u@h/d?sslmode=require", "postgresql+psycopg://u%40x@h/d",
    "postgresql+psycopg://u@h/d?host=a&host=b", "postgresql+psycopg://u@[::1]/d",
    "postgresql+psycopg://u@h/d#x", "postgresql+psycopg://u@h,h2/d", "postgresql+asyncpg://h/d",
    "mysql://h/d", "postgresql+psycopg://u@h/d?port=", "postgresql+psycopg://u@h/d/e",
    "postgresql+psycopg://u@h",
])
def test_other_pg_urls_are_left_to_the_store(text):
    assert result_serve.pg_connect_args(text) is None


@pytest.mark.parametrize("text", ["bench.db", "./x/y.db", "/abs/b.db", "~/b.db",
                                  "sqlite:////abs/b.db", "sqlite:///rel/b.db",
                                  "sqlite:///a b.db", "sqlite:/x.db"])
def test_sqlite_file_is_the_stores(text):
    assert result_serve.sqlite_path(text) == _sqlite_file(_parse_url(resolve_url(text)))


@pytest.mark.parametrize("text", ["sqlite://", "sqlite:///:memory:", "sqlite:///file:x.db",
                                  "sqlite:///~/b.db", "sqlite:///a?mode=ro", "a%20b.db",
                                  "sqlite:///a#b", " ", ""])
def test_other_sqlite_texts_are_left_to_the_store(text):
    assert result_serve.sqlite_path(text) is None


def test_head_is_the_stores():
    assert result_serve.head() == quick_head() == head_revision()


def test_key_is_the_caches():
    from bench.store import result_cache
    args = {"kind": "reclaim", "host": None, "campaign": "c", "workload": None,
            "include_demo": False}
    assert result_serve.cache_key("matrix", args) == result_cache.cache_key("matrix", args)
    assert isinstance(result_serve.sqlite_path("x.db"), Path)
