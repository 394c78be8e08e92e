"""The run bundle's own files (docs/bundle.md): where a bundle is, status.json, the raw
snapshots, the manifest, and the digest of the runner that wrote it."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

from .files import now_iso, read_text, sha256_file, snap_name, write_file, write_json
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
    os.makedirs(d, exist_ok=True)
    files = [(f, snap_name(f)) for f in SNAPSHOT_FILES if f != LRU_GEN or os.path.exists(LRU_GEN)]
    files += [(f, snap_name(f)) for f in cg_files]
    if balloon_pid is not None:
        files.append((f"/proc/{balloon_pid}/status", "balloon_status"))
    for src, name in files:
        try:
            with open(src, "rb") as fin:
                data = fin.read()
            with open(os.path.join(d, name), "wb") as fout:
                fout.write(data)
        except OSError as e:
            write_file(os.path.join(d, name + ".err"), f"{src}: {e.strerror}\n")


def write_manifest(bundle: str, run_id: str) -> None:
    """manifest.json, written last: size and sha256 of every other regular file."""
    files = {}
    for root, dirs, names in os.walk(bundle):
        dirs.sort()
        for n in sorted(names):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, bundle)
            if rel == "manifest.json" or not os.path.isfile(p) or os.path.islink(p):
                continue
            files[rel] = {"bytes": os.path.getsize(p), "sha256": sha256_file(p)}
    write_json(os.path.join(bundle, "manifest.json"),
               {"run_id": run_id, "complete": True, "files": files})
