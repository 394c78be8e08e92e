"""A --db path bench does not own is refused before anything touches it, and what the file
system does to a database (a missing or unwritable home, a read-only mount, a full disk) is
one line and its fix, never a traceback (issue 23). Every case runs the real CLI in a child
process; a refused path keeps its mode, content and mtime, and nothing appears beside it.
Devices, mounts and dropped capabilities need root: without it those cases skip, saying so."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.bundlegen import make_bundle
from tests.support.paths import REPO

ROOT = os.geteuid() == 0


def bench(*argv: str, cwd: Path, env: dict | None = None,
          wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("BENCH_DB", "BENCH_DATA_DIR")}
    base.update(PYTHONPATH=str(REPO), COLUMNS="300", XDG_DATA_HOME=str(cwd / "xdg"))
    base.update(env or {})
    return subprocess.run([*wrap, sys.executable, "-m", "bench", *argv], cwd=cwd,
                          env={k: v for k, v in base.items() if v is not None},
                          capture_output=True, text=True, timeout=120)


def refused(p: subprocess.CompletedProcess, *words: str) -> str:
    """The one error line (and its fix) of a refusal that says `words`; no traceback."""
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[-1].startswith("fix: "), lines
    for w in words:
        assert w in errors[0], (w, errors[0])
    return errors[0]


def state(path: Path) -> tuple:
    """What a path is: its type and mode, mtime, content digest (regular files only)."""
    st = os.lstat(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else None
    return st.st_mode, st.st_mtime_ns, getattr(st, "st_rdev", 0), digest


def untouched(path: Path, before: tuple, listing: set[str]) -> None:
    assert state(path) == before
    assert {p.name for p in path.parent.iterdir()} == listing


def _fake_passwd(d: Path) -> Path:
    p = d / "fake-passwd"
    shutil.copyfile("/etc/passwd", p)
    os.chmod(p, 0o644)
    os.utime(p, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))
    return p


@pytest.mark.parametrize("argv", [["runs"], ["db", "upgrade"], ["db", "current"]],
                         ids=["runs", "db-upgrade", "db-current"])
def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path, argv):
    d = tmp_path / "here"
    d.mkdir()
    p = _fake_passwd(d)
    before, listing = state(p), {x.name for x in d.iterdir()}
    line = refused(bench(*argv, "--db", "./fake-passwd", cwd=d), str(p), "not a SQLite database")
    assert "root:" not in line            # nothing of the file is echoed
    untouched(p, before, listing)


def _special(d: Path, kind: str) -> Path:
    p = d / ("mynull" if kind == "chr" else "myfifo")
    if kind == "chr":
        if not ROOT:
            pytest.skip("mknod of a character device needs root (CAP_MKNOD)")
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod(p, 0o666)
    else:
        os.mkfifo(p)
        os.chmod(p, 0o644)
    return p


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["runs"]], ids=["db-upgrade", "runs"])
@pytest.mark.parametrize("kind, words", [("chr", "a character device"),
                                         ("fifo", "a FIFO")], ids=["chardev", "fifo"])
def test_a_device_or_fifo_is_refused_and_left_alone(tmp_path, argv, kind, words):
    p = _special(tmp_path, kind)
    before, listing = state(p), {x.name for x in tmp_path.iterdir()}
    refused(bench(*argv, "--db", f"./{p.name}", cwd=tmp_path), str(p), words,
            "not a database file")
    untouched(p, before, listing)


def test_a_foreign_sqlite_database_gets_no_lock_and_no_chmod(tmp_path):
    p = tmp_path / "theirs.db"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE notes (x)")
    c.close()
    os.chmod(p, 0o644)
    before, listing = state(p), {x.name for x in tmp_path.iterdir()}
    refused(bench("db", "upgrade", "--db", str(p), cwd=tmp_path), "no bench schema")
    untouched(p, before, listing)


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["demo", "--no-trace", "--out", "demo"],
                                  ["schedule", "--matrix", "smoke", "--hosts", "local"]],
                         ids=["db-upgrade", "demo", "schedule"])
def test_a_parent_that_is_a_file_is_one_line(tmp_path, argv):
    junk = tmp_path / "junk.db"
    junk.write_text("junk\n")
    before = state(junk)
    refused(bench(*argv, "--db", f"{junk}/x.db", cwd=tmp_path), f"{junk} is not a directory")
    assert state(junk) == before
    assert not (tmp_path / "demo").exists()     # refused before the demo wrote anything


def test_a_new_database_needs_its_directory(tmp_path):
    p = bench("db", "upgrade", "--db", "nodir/sub/x.db", cwd=tmp_path)
    refused(p, f"no directory {tmp_path / 'nodir' / 'sub'}")
    assert "mkdir -p" in p.stderr and not (tmp_path / "nodir").exists()
    # and with the directory there, the database is made
    (tmp_path / "nodir" / "sub").mkdir(parents=True)
    made = bench("db", "upgrade", "--db", "nodir/sub/x.db", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE((tmp_path / "nodir" / "sub" / "x.db").stat().st_mode) == 0o600


def _unprivileged() -> tuple[str, ...]:
    """A prefix that runs a command without the right to write where its owner may not
    (root without CAP_DAC_OVERRIDE: its files in our python stay readable)."""
    if not ROOT:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("dropping root's capabilities needs setpriv (util-linux)")
    return ("setpriv", "--inh-caps=-all", "--bounding-set=-all")


def test_a_home_that_cannot_be_made_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    home = locked / "nonexistent"
    p = bench("db", "upgrade", cwd=tmp_path, wrap=_unprivileged(),
              env={"HOME": str(home), "XDG_DATA_HOME": None})
    refused(p, "data directory", str(home), "Permission denied")
    assert "XDG_DATA_HOME" in p.stderr and not home.exists()


@contextmanager
def tmpfs(where: Path, size: str):
    """A small tmpfs mounted at `where` for the test (marked root), unmounted after."""
    where.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs",
                            str(where)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@pytest.mark.root
def test_a_database_on_a_read_only_file_system_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "4m") as ro:
        db = ro / "b.db"
        assert bench("db", "upgrade", "--db", str(db), cwd=tmp_path).returncode == 0
        os.chmod(db, 0o644)
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        before, listing = state(db), {x.name for x in ro.iterdir()}
        for argv in (["runs"], ["db", "upgrade"]):
            refused(bench(*argv, "--db", str(db), cwd=tmp_path), str(db),
                    "read-only file system")
        refused(bench("db", "upgrade", "--db", str(ro / "new.db"), cwd=tmp_path),
                str(ro / "new.db"), "Read-only file system")
        untouched(db, before, listing)


@pytest.mark.root
def test_a_full_disk_during_ingest_is_one_line_and_stores_nothing(tmp_path):
    bundle = make_bundle(tmp_path / "bundles", "r-full-1", "64Mi-cgroup-mglru", campaign=None)
    files = {p.relative_to(bundle): p.read_bytes() for p in bundle.rglob("*") if p.is_file()}
    with tmpfs(tmp_path / "full", "2m") as full:
        db = full / "b.db"
        assert bench("db", "upgrade", "--db", str(db), cwd=tmp_path).returncode == 0
        free = shutil.disk_usage(full).free
        (full / "filler").write_bytes(b"\0" * (free - (96 << 10)))     # too little for it
        argv = ("ingest", "--db", str(db), "--data-dir", str(tmp_path / "data"), str(bundle))
        p = bench(*argv, cwd=tmp_path)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 2 and str(db) in lines[0] and "disk is full" in lines[0], lines
        assert lines[1].startswith("fix: free space"), lines
        assert {p.relative_to(bundle): p.read_bytes()
                for p in bundle.rglob("*") if p.is_file()} == files     # the bundle stayed
        (full / "filler").unlink()
        runs = bench("runs", "--db", str(db), "--json", cwd=tmp_path)
        assert runs.returncode == 0 and json.loads(runs.stdout) == []   # rolled back
        again = bench(*argv, cwd=tmp_path)
        assert again.returncode == 0 and "r-full-1: ingested" in again.stderr + again.stdout


def test_a_filesystem_error_no_command_handled_is_one_line(tmp_path):
    """The CLI's last resort (bench.cli.app.as_bench_error): an OSError that reaches it
    unhandled (here, mkdir -p under a file) is one line with a fix; -vv says what it was."""
    (tmp_path / "junk").write_text("x")
    argv = ("pool", "make", "junk/pool/x", "--parents", "--layers", "1", "--experts", "2",
            "--expert-bytes", "4096")
    p = bench(*argv, cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("error: ") and "junk" in lines[0] and "not a directory" in \
        lines[0] and lines[-1].startswith("fix: ") and len(lines) == 2, lines
    assert (tmp_path / "junk").read_text() == "x"
