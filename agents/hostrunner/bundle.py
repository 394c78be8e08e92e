"""The run bundle's own files (docs/bundle.md): where a bundle is, status.json, the raw
snapshots, the manifest, and the digest of the runner that wrote it.

A bundle is private to the runner's user: its directory is made 0700 (`start`), the runner
and what it starts write under umask 077 and create files 0600 (files.py), and the manifest
step tightens every directory to 0700 and file to 0600 before it hashes them, whoever made
them. So the kernel-log copy (kmsg.txt) stays as restricted as dmesg is with
kernel.dmesg_restrict=1, and so do the other copies the host keeps from other users. The
controller collects as the same user (tar over SSH) and keeps the modes."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from typing import Any

from .files import (PRIVATE_DIR, PRIVATE_FILE, now_iso, open_private, read_text, sha256_file,
                    snap_name, write_file, write_json)
from .probes import LRU_GEN, SYS_FILES

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
AGENTS_DIR = os.path.dirname(PACKAGE_DIR)
SNAPSHOT_FILES = SYS_FILES + [LRU_GEN, "/proc/sys/kernel/random/boot_id", "/proc/cmdline"]


def bundle_dir(work_dir: str, run_id: str) -> str:
    return os.path.join(work_dir, "runs", run_id)


def status_path(work_dir: str, run_id: str) -> str:
    return os.path.join(bundle_dir(work_dir, run_id), "status.json")


def load_status(work_dir: str, run_id: str) -> dict[str, Any]:
    st: dict[str, Any] = json.loads(read_text(status_path(work_dir, run_id)))
    return st


def accepted_status(run_id: str) -> dict[str, Any]:
    """status.json as `start` writes it, before the daemon exists."""
    t = now_iso()
    return {"run_id": run_id, "phase": "accepted", "pid": None, "updated": t,
            "history": [{"phase": "accepted", "t": t, "mono_ns": time.monotonic_ns()}],
            "ok": None, "reason": None}


def runner_files() -> list[tuple[str, str]]:
    """(name relative to agents/, path) of the shipped runner: runner.py, then every *.py
    directly in hostrunner/ in byte order of their names."""
    names = sorted((n for n in os.listdir(PACKAGE_DIR) if n.endswith(".py")),
                   key=lambda n: n.encode())
    pkg = os.path.basename(PACKAGE_DIR)
    return [("runner.py", os.path.join(AGENTS_DIR, "runner.py"))] + \
        [(f"{pkg}/{n}", os.path.join(PACKAGE_DIR, n)) for n in names]


def runner_sha256() -> str:
    """runner.json's runner_sha256: sha256 over (name, NUL, bytes, NUL) of runner_files()."""
    h = hashlib.sha256()
    for name, path in runner_files():
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def snapshot(bundle: str, which: str, cg_files: list[str], balloon_pid: int | None) -> None:
    """snapshots/<which>/: raw copies of the system files, the cgroup's memory files and the
    balloon's status; a file that cannot be read leaves <name>.err saying why."""
    d = os.path.join(bundle, "snapshots", which)
    os.makedirs(d, PRIVATE_DIR, exist_ok=True)
    files = [(f, snap_name(f)) for f in SNAPSHOT_FILES if f != LRU_GEN or os.path.exists(LRU_GEN)]
    files += [(f, snap_name(f)) for f in cg_files]
    if balloon_pid is not None:
        files.append((f"/proc/{balloon_pid}/status", "balloon_status"))
    for src, name in files:
        try:
            with open(src, "rb") as fin:
                data = fin.read()
            with open_private(os.path.join(d, name), "wb") as fout:
                fout.write(data)
        except OSError as e:
            write_file(os.path.join(d, name + ".err"), f"{src}: {e.strerror}\n")


def make_private(path: str, mode: int) -> None:
    """Drop the permission bits `mode` lacks (a symlink, or a file gone meanwhile, is left
    alone)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o777 & ~mode:
            os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
    except FileNotFoundError:
        return


def write_manifest(bundle: str, run_id: str) -> None:
    """manifest.json, written last: size and sha256 of every other regular file; before
    that, every directory of the bundle made 0700 and every file 0600."""
    files = {}
    make_private(bundle, PRIVATE_DIR)
    for root, dirs, names in os.walk(bundle):
        dirs.sort()
        for d in dirs:
            make_private(os.path.join(root, d), PRIVATE_DIR)
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, bundle)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            make_private(p, PRIVATE_FILE)
            if rel == "manifest.json":
                continue
            files[rel] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    write_json(os.path.join(bundle, "manifest.json"),
               {"run_id": run_id, "complete": True, "files": files})


def dump_plans(bundle: str, cfg: dict[str, Any]) -> list[str]:
    """A prefetch run's replay plan and hint plan, copied into the bundle as plan.bin and
    hints.bin: the plans the agent read, so retention recomputes the hint plan's provenance
    and recall from them (bench.judge.hintcheck) and the plan shipped with a run stays with its
    numbers. Nothing for a run without hints. Returns the problems (a copy that failed)."""
    notes: list[str] = []
    if not cfg.get("hints"):
        return notes
    for src, name in ((cfg.get("plan"), "plan.bin"), (cfg.get("hints"), "hints.bin")):
        try:
            with open(str(src), "rb") as fin, \
                    open_private(os.path.join(bundle, name), "wb") as fout:
                while True:
                    chunk = fin.read(1 << 20)
                    if not chunk:
                        break
                    fout.write(chunk)
        except OSError as e:
            notes.append(f"{name}: {e.strerror}")
    return notes
