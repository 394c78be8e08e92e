"""Where bench keeps its files on the controller by default, and keeping them private.

Bundles hold what hosts copied for a run (kernel log lines a host may restrict to root, boot
command lines, process tables), and the database holds all of it again, so what bench keeps is
private to the user that runs it:

- directories bench creates (the data directory, its plans/, traces/, bundles/<host>/ and
  rejected/, the default database's directory) are 0700, as the XDG base-directory rule
  asks of data directories;
- bench's own directories found looser (made by an earlier bench) are tightened to their
  owner's bits: those inside a data directory, and the default data directory
  ($XDG_DATA_HOME/bench) itself; a directory the user named (--data-dir, BENCH_DATA_DIR)
  is created 0700 but, when it exists, left as it is; the directory of a --db file must
  exist (bench.store.dbfile) and is left as it is;
- files bench writes there (plans, traces, collected bundles, the SQLite database with its
  -wal, -shm and .lock files) are 0600, and found looser they are tightened, silently: the
  store is private by design; share results through PostgreSQL or `bench export`. Only
  regular files and directories are ever chmodded (never a device, FIFO or socket).
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def bench_home() -> Path:
    """$XDG_DATA_HOME/bench (~/.local/share/bench): the default data dir and database home."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "bench"


def default_data_dir() -> Path:
    """Bundles and plans: $BENCH_DATA_DIR, else $XDG_DATA_HOME/bench (~/.local/share/bench)."""
    env = os.environ.get("BENCH_DATA_DIR")
    if env:
        return Path(env)
    return bench_home()


def tighten(path: Path, mode: int) -> None:
    """Drop the permission bits of `path` that `mode` lacks (never adds any); a path that is
    gone, a symlink, not a regular file or directory, or not ours to chmod (another owner, a
    read-only file system) is left alone."""
    try:
        st = os.lstat(path)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)) \
                or not st.st_mode & 0o777 & ~mode:
            return
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
    except OSError:
        return


def private_dir(path: Path, *, own: bool = True) -> Path:
    """mkdir -p `path`: every directory it creates is 0700; `path` itself, when `own` (one of
    bench's own directories), is tightened to 0700 if it already existed looser. The default
    data directory is tightened whenever a path inside it is made."""
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, PRIVATE_DIR)
        except FileExistsError:         # made by someone else meanwhile
            continue
        os.chmod(d, PRIVATE_DIR)        # exactly, whatever the umask
    if own:
        tighten(path, PRIVATE_DIR)
    home = bench_home()
    if path == home or home in path.parents:
        tighten(home, PRIVATE_DIR)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write `path` atomically (a temp file beside it, then rename) as a 0600 file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, PRIVATE_FILE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_replacing(out: Path, write: Callable[[BinaryIO], object]) -> None:
    """A user's output file (a figure, a report) written by `write` into a temporary file
    beside OUT, then renamed over it: a failed write leaves no partial file. The file gets the
    mode open() would give it under the umask (not mkstemp's 0600). OSError propagates."""
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
        tmp = None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def private_tree(root: Path) -> None:
    """Tighten a tree bench keeps (a bundle): directories 0700, files 0600; symlinks are
    neither followed nor changed."""
    tighten(root, PRIVATE_DIR)
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            tighten(Path(dirpath, d), PRIVATE_DIR)
        for f in files:
            tighten(Path(dirpath, f), PRIVATE_FILE)


_KINDS = ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISLNK, "a symbolic link"))


def file_kind(mode: int) -> str:
    """What an st_mode says a path is, in words: 'a character device', 'a directory', ..."""
    return next((word for test, word in _KINDS if test(mode)), "not a file")


def not_a_directory(path: Path) -> Path | None:
    """The first of `path`'s ancestors that exists and is not a directory (what ENOTDIR
    meant), or None."""
    for p in reversed(Path(path).parents):
        try:
            if not stat.S_ISDIR(os.stat(p).st_mode):
                return p
        except OSError:
            return None
    return None


def os_failure(exc: OSError, path: Path | str | None = None) -> tuple[str, str]:
    """(what went wrong, how to fix it) for an OSError on `path` (else the error's own
    filename), in one line each: the CLI's words for a filesystem error."""
    where = Path(path if path is not None else exc.filename or "?")
    code = exc.errno
    if code == errno.ENOTDIR and (blocker := not_a_directory(where)) is not None:
        return (f"{blocker} is not a directory (it is {file_kind(os.stat(blocker).st_mode)}), "
                f"so {where} cannot exist", f"give a path whose directories exist, not {where}")
    cause = exc.strerror or os.strerror(code or 0)
    fix = {errno.EACCES: f"check the owner and mode of {where} and of its directories "
                         f"(ls -ld {where} {where.parent}), or use another path",
           errno.EROFS: f"{where} is on a read-only file system: use a path on a writable one",
           errno.ENOSPC: f"free space on the file system that holds {where} "
                         f"(df -h {where.parent}) and run the command again",
           errno.ENOENT: f"check the path: {where.parent} must exist",
           errno.ELOOP: f"{where} is a symbolic link loop: point it at a file"}
    fix[errno.EPERM] = fix[errno.EACCES]
    fix[errno.EDQUOT] = fix[errno.ENOSPC].replace("free space on", "free space (a quota) on")
    return f"{where}: {cause}", fix.get(code or 0, f"check {where} (ls -ld {where})")
