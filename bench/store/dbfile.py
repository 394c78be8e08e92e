"""The SQLite file a database path names, checked before bench touches it.

bench writes, chmods, locks or creates only what it owns. A SQLite path must be a regular file
that starts with SQLite's header (or is empty: a database not yet written), or, for a command
that stores, be absent in a directory that exists; anything else (a device, a FIFO, a
directory, /etc/passwd, a path under a file) is refused with one line before any file is
opened for writing, chmodded or created beside it. Only the default database's directory
($XDG_DATA_HOME/bench) is bench's own and made when missing; a directory the user named must
exist. Nothing here imports SQLAlchemy: the checks read the file system alone.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bench.errors import StoreError
from bench.paths import bench_home, file_kind, os_failure, private_dir

SQLITE_HEADER = b"SQLite format 3\x00"
# The files (device, inode) this process has found to be SQLite's: never opened again. SQLite
# locks a database with POSIX fcntl locks, which belong to the process, and closing ANY
# descriptor of the file drops every one of them (SQLite's "how to corrupt" §2.2): a header
# read while this process's connections are open let another process's reader take itself for
# the last connection and remove the -wal and -shm under them ("disk I/O error" on every
# ingest of a campaign that `bench watch` was reading).
_SEEN: set[tuple[int, int]] = set()
NOT_OURS = "point --db (or BENCH_DB) at a bench database, or at a new file for a new one"


def check_sqlite_file(path: Path, *, write: bool) -> bool:
    """True when `path` is an existing SQLite file (or an empty one); False when it is absent
    and `write`, its directory existing (for a writer, bench_home() is made or tightened).
    Otherwise a StoreError; nothing is written or created, and only a regular file is opened
    (for reading, to see its header)."""
    if write and path.parent == bench_home():
        _bench_home()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not write:
            raise StoreError(f"no database at {path}",
                             hint="run a campaign (or `bench db upgrade --db PATH` to make an "
                                  "empty one), or point --db / BENCH_DB at your database") \
                from None
        _directory_for(path)
        return False
    except OSError as exc:
        raise failure(exc, path, "use") from None
    if not stat.S_ISREG(st.st_mode):
        raise StoreError(f"{path} is {file_kind(st.st_mode)}, not a database file",
                         hint=NOT_OURS)
    if (st.st_dev, st.st_ino) not in _SEEN:
        _sqlite_header(path)
        _SEEN.add((st.st_dev, st.st_ino))
    return True


def _bench_home() -> None:
    """The default database's directory, bench's own: made 0700, or tightened to it."""
    try:
        private_dir(bench_home(), own=False)
    except OSError as exc:
        raise StoreError(f"cannot make bench's data directory for its database: "
                         f"{os_failure(exc, exc.filename)[0]}",
                         hint="set XDG_DATA_HOME (or HOME) to a directory you can write, "
                              "or give --db PATH / BENCH_DB") from None


def _directory_for(path: Path) -> None:
    """The directory a new database goes in must exist (and be a directory)."""
    parent = path.parent
    try:
        st = os.stat(parent)
    except FileNotFoundError:
        raise StoreError(f"no directory {parent} for the new database {path.name}",
                         hint=f"create it first (mkdir -p {parent}), or give a --db path in "
                              "a directory that exists") from None
    except OSError as exc:
        raise failure(exc, path, "create") from None
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{parent} is {file_kind(st.st_mode)}, not a directory: no database "
                         f"can be made at {path}", hint="give a --db path in a directory")


def _sqlite_header(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise failure(exc, path, "read") from None
    try:
        st = os.fstat(fd)       # the file opened, not one renamed over it since os.stat
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{path} is {file_kind(st.st_mode)}, not a database file",
                             hint=NOT_OURS)
        head = os.read(fd, len(SQLITE_HEADER))
    except OSError as exc:
        raise failure(exc, path, "read") from None
    finally:
        os.close(fd)
    if head and head != SQLITE_HEADER:
        raise StoreError(f"{path} is not a SQLite database (it does not start with SQLite's "
                         "header); bench left it as it was", hint=NOT_OURS)


def create_sqlite_file(path: Path) -> None:
    """Make the new database's file, 0600, before SQLite first opens it (SQLite gives its -wal
    and -shm files the database's mode); one made meanwhile by another process is kept."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            _SEEN.add((st.st_dev, st.st_ino))        # ours: never opened again (see _SEEN)
        finally:
            os.close(fd)
    except FileExistsError:
        check_sqlite_file(path, write=True)
    except OSError as exc:
        raise failure(exc, path, "create") from None


def failure(exc: OSError, path: Path, doing: str) -> StoreError:
    """An OSError on the database's path as one StoreError line with its fix."""
    where = exc.filename or path
    what, fix = os_failure(exc, where)
    return StoreError(f"cannot {doing} the database {path}: "
                      f"{what.removeprefix(f'{where}: ')}", hint=fix)


# SQLite's result codes for what the file system did to a database (not bench's own errors,
# nor a busy or locked database, which the store waits for or handles itself)
_SQLITE_FAILURES = {
    "SQLITE_FULL": ("write", "free space on the file system that holds {dir} (df -h {dir}) and "
                             "run the command again: what it was writing was rolled back"),
    "SQLITE_READONLY": ("write", "{path} cannot be written here (a read-only file system, or "
                                 "a file or directory you may not write): give a writable "
                                 "--db, or fix its mode"),
    "SQLITE_IOERR": ("use", "check the file system that holds {dir} (read-only? full? failing? "
                            "df -h {dir}; dmesg)"),
    "SQLITE_CANTOPEN": ("open", "{dir} must be a directory you can write: SQLite keeps its -wal "
                                "and -shm files beside the database"),
    "SQLITE_PERM": ("use", "check the owner and mode of {path} and {dir} (ls -ld)"),
    "SQLITE_NOTADB": ("open", NOT_OURS),
    "SQLITE_CORRUPT": ("use", "the file is damaged: restore it from a copy (sqlite3's "
                              ".recover may save some of it), or give another --db"),
}


def sqlite_failure(where: str, path: Path | None, exc: BaseException) -> StoreError | None:
    """A DBAPI error of SQLite that the file system caused (disk full, read-only, I/O error,
    cannot open, not a database, corrupt) as one StoreError naming the database, its cause
    and the fix; None for any other error (those stay the store's to handle)."""
    name = getattr(exc, "sqlite_errorname", None)
    if not isinstance(name, str):
        return None
    known = next((k for k in _SQLITE_FAILURES if name == k or name.startswith(k + "_")), None)
    if known is None:
        return None
    doing, fix = _SQLITE_FAILURES[known]
    cause = (str(exc).strip().splitlines() or [name])[0]
    shown = str(path) if path is not None else where
    directory = str(path.parent) if path is not None else "its directory"
    if path is not None and known != "SQLITE_NOTADB" and _read_only(path.parent):
        cause += f" ({directory} is on a read-only file system)"
        fix = ("SQLite writes -wal and -shm files beside a database even to read it: copy it "
               "to a writable directory and give --db the copy")
    return StoreError(f"cannot {doing} the database {shown}: {cause}",
                      hint=fix.format(path=shown, dir=directory))


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False
