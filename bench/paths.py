"""Where bench keeps its files on the controller by default, and keeping them private.

Bundles hold what hosts copied for a run (kernel log lines a host may restrict to root, boot
command lines, process tables), and the database holds all of it again, so what bench keeps is
private to the user that runs it:

- directories bench creates (the data directory, its plans/, traces/, bundles/<host>/ and
  rejected/, the database's directory) are 0700, as the XDG base-directory rule asks of data
  directories;
- bench's own directories found looser (made by an earlier bench) are tightened to their
  owner's bits: those inside a data directory, and the default data directory
  ($XDG_DATA_HOME/bench) itself; a directory the user named (--data-dir, BENCH_DATA_DIR,
  the directory of a --db file) is created 0700 but, when it exists, left as it is;
- files bench writes there (plans, traces, collected bundles, the SQLite database with its
  -wal, -shm and .lock files) are 0600, and found looser they are tightened, silently: the
  store is private by design; share results through PostgreSQL or `bench export`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
    gone, a symlink, or not ours to chmod is left alone."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o777 & ~mode:
            return
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
    except (FileNotFoundError, PermissionError):
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


def private_tree(root: Path) -> None:
    """Tighten a tree bench keeps (a bundle): directories 0700, files 0600; symlinks are
    neither followed nor changed."""
    tighten(root, PRIVATE_DIR)
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            tighten(Path(dirpath, d), PRIVATE_DIR)
        for f in files:
            tighten(Path(dirpath, f), PRIVATE_FILE)
