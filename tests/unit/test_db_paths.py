"""The checks a SQLite path passes before bench touches it (bench.store.dbfile), and the words
for a filesystem error (bench.paths.os_failure) and for what the file system did to a SQLite
database (dbfile.sqlite_failure, on errors raised by the real sqlite3)."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from bench.errors import StoreError
from bench.paths import file_kind, not_a_directory, os_failure, tighten
from bench.store.dbfile import SQLITE_HEADER, check_sqlite_file, sqlite_failure


def test_a_sqlite_file_and_an_empty_one_pass(tmp_path):
    db = tmp_path / "a.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    assert db.read_bytes().startswith(SQLITE_HEADER)
    assert check_sqlite_file(db, write=False) is True
    (tmp_path / "empty.db").touch()
    assert check_sqlite_file(tmp_path / "empty.db", write=True) is True


def test_an_absent_file_is_for_writers_in_a_directory_that_exists(tmp_path):
    assert check_sqlite_file(tmp_path / "new.db", write=True) is False
    with pytest.raises(StoreError, match="no database at"):
        check_sqlite_file(tmp_path / "new.db", write=False)
    with pytest.raises(StoreError, match="no directory") as e:
        check_sqlite_file(tmp_path / "sub" / "new.db", write=True)
    assert "mkdir -p" in (e.value.hint or "") and not (tmp_path / "sub").exists()


@pytest.mark.parametrize("content", [b"root:x:0:0:root:/root:/bin/bash\n", b"SQLite", b"\0"])
def test_a_file_without_the_header_is_refused_unchanged(tmp_path, content):
    p = tmp_path / "x"
    p.write_bytes(content)
    os.chmod(p, 0o644)
    before = os.stat(p)
    with pytest.raises(StoreError, match="is not a SQLite database"):
        check_sqlite_file(p, write=True)
    after = os.stat(p)
    assert (after.st_mode, after.st_mtime_ns, p.read_bytes()) == \
        (before.st_mode, before.st_mtime_ns, content)


def test_what_is_not_a_regular_file_is_named(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, kind in (("fifo", "a FIFO"), ("dir", "a directory")):
        with pytest.raises(StoreError, match=f"is {kind}"):
            check_sqlite_file(tmp_path / name, write=True)


def test_a_parent_that_is_a_file(tmp_path):
    (tmp_path / "junk.db").write_text("x")
    target = tmp_path / "junk.db" / "deeper" / "x.db"
    assert not_a_directory(target) == tmp_path / "junk.db"
    with pytest.raises(StoreError, match=f"{tmp_path / 'junk.db'} is not a directory"):
        check_sqlite_file(target, write=True)
    assert not_a_directory(tmp_path / "fine" / "x.db") is None


def test_os_failure_words_each_errno_with_a_fix(tmp_path):
    p = tmp_path / "x.db"
    for code, cause, fix in ((errno.EACCES, "Permission denied", "owner and mode"),
                             (errno.EROFS, "Read-only file system", "writable"),
                             (errno.ENOSPC, "No space left", "df -h"),
                             (errno.EIO, "Input/output error", "ls -ld")):
        what, how = os_failure(OSError(code, os.strerror(code), str(p)))
        assert what.startswith(f"{p}: {cause}") and fix in how, (what, how)


def test_tighten_leaves_what_is_not_a_file_or_directory(tmp_path):
    os.mkfifo(tmp_path / "fifo", 0o644)
    os.chmod(tmp_path / "fifo", 0o644)
    tighten(tmp_path / "fifo", 0o600)
    assert stat.S_IMODE(os.stat(tmp_path / "fifo").st_mode) == 0o644
    assert file_kind(os.stat(tmp_path / "fifo").st_mode) == "a FIFO (named pipe)"


def _sqlite_error(path: Path) -> sqlite3.Error:
    try:
        sqlite3.connect(path).execute("SELECT * FROM sqlite_master").fetchall()
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("sqlite3 read it")


def test_sqlite_failures_are_named_with_the_database_and_a_fix(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("not a database, but long enough for SQLite to look at its header\n" * 2)
    err = sqlite_failure("sqlite:///x", p, _sqlite_error(p))
    assert err is not None and str(p) in err.message and "not a database" in err.message
    assert err.hint and "--db" in err.hint
    # a constraint is bench's own to handle: not translated
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE t (x UNIQUE)")
    c.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.IntegrityError) as e:
        c.execute("INSERT INTO t VALUES (1)")
    assert sqlite_failure("sqlite://", None, e.value) is None


def test_check_database_refuses_up_front_and_creates_nothing(tmp_path):
    from bench.store.db import check_database
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(StoreError, match="a FIFO"):
        check_database(str(tmp_path / "fifo"))
    with pytest.raises(StoreError, match="not a directory"):
        check_database(f"sqlite:///{tmp_path / 'fifo' / 'x.db'}")
    check_database(str(tmp_path / "new.db"))              # a writer may make it: fine
    with pytest.raises(StoreError, match="no database at"):
        check_database(str(tmp_path / "new.db"), write=False)
    check_database("postgresql://nobody@localhost/none")  # a server's URL: opened later
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_database_error_that_reaches_the_cli_is_one_line(tmp_path):
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import DBAPIError

    from bench.cli.app import as_bench_error
    engine = create_engine("sqlite://")
    with pytest.raises(DBAPIError) as e, engine.connect() as c:
        c.execute(text("SELECT * FROM no_such_table"))
    err = as_bench_error(e.value)
    assert err is not None and err.message == "the database failed: no such table: no_such_table"
    assert "-vv" in (err.hint or "")
    assert as_bench_error(ValueError("a bug")) is None      # a bug keeps its traceback
    fs = as_bench_error(FileNotFoundError(errno.ENOENT, "No such file or directory",
                                          str(tmp_path / "gone")))
    assert fs is not None and fs.message == f"{tmp_path / 'gone'}: No such file or directory"
