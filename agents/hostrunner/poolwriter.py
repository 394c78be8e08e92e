"""The host-side pool writer (`runner.py pool`): makes, resumes or finds an expert pool in a
directory, in the format of poolfmt.py (docs/formats.md).

Resumable: a file with the right size and header is kept; every other one is written to
<name>.tmp (the header, then the kernel's random bytes in 8 MiB chunks: real data, nothing
sparse or compressible) and renamed. pool.json says complete: false from the first write on
and complete: true only once every file is there and synced. A directory holding a different
pool, an unreadable pool.json, or anything non-empty without a pool.json is refused untouched.

Each file's sampled blocks (poolfmt.sample_offsets) are hashed after it is written (or kept):
pool.sums holds one digest per file and pool.json names it with its sha256, so `bench pool
check` can verify content, not only sizes. write_keyed puts the pool in its keyed directory
under the host's pool_dir (`<pool_dir>/<L>x<E>x<S>-s<seed>`), so several shapes coexist.

The answer is one JSON object, as the controller's ensure_pool reads it:
  {"ok": true, "status": "made"|"resumed"|"present", "written", "kept", "bytes", "seconds"}
  (write_keyed adds "dir" and "key", and "migrated" when it moved an old-layout pool)
  {"ok": false, "reason": ..., ["have": {...}]} with exit code 3 for a refusal, or 2 for
  arguments no pool can have (geometry, template)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from . import poolfmt, poolstore

CHUNK = 8 << 20
REFUSED = 3
USAGE = 2


def _existing(d: str, want: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
    """The answer when the directory already decides it (refused, or the pool is present);
    None when the pool is to be written or resumed."""
    man = os.path.join(d, poolfmt.MANIFEST)
    if os.path.exists(man):
        try:
            with open(man) as f:
                old = json.load(f)
            have = poolfmt.parse_manifest(old)
        except (OSError, ValueError, KeyError, TypeError) as e:
            return {"ok": False, "reason": "%s: unreadable pool manifest (%s); refusing to "
                    "touch it" % (man, e)}, REFUSED
        if have != want:
            return {"ok": False, "reason": "%s holds a different pool (%dx%dx%d B, seed %d, "
                    "path %s); refusing to overwrite it"
                    % (d, have["layers"], have["experts_per_layer"], have["expert_bytes"],
                       have["seed"], have["path"]), "have": have}, REFUSED
        if old.get("complete") is True:
            n = want["layers"] * want["experts_per_layer"]
            return {"ok": True, "status": "present", "written": 0, "kept": n,
                    "bytes": n * want["expert_bytes"], "seconds": 0.0}, 0
    elif os.path.isdir(d) and os.listdir(d):
        return {"ok": False, "reason": "%s is not empty and holds no pool.json; refusing to "
                "write into it" % d}, REFUSED
    return None


def write_expert(path: str, header: bytes, expert_bytes: int) -> None:
    """One expert file: header, random bytes up to expert_bytes, via <path>.tmp + rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        left = expert_bytes - len(header)
        while left > 0:
            n = min(left, CHUNK)
            f.write(os.urandom(n))
            left -= n
    os.replace(tmp, path)


def write_pool(d: str, layers: int, experts: int, expert_bytes: int, seed: int = 0,
               template: str = poolfmt.DEFAULT_PATH) -> tuple[dict[str, Any], int]:
    """Make, resume or find the pool; returns (the JSON answer, the exit code)."""
    problem = poolfmt.geometry_problem(layers, experts, expert_bytes) \
        or poolfmt.template_problem(template) or poolfmt.seed_problem(seed)
    if problem:
        return {"ok": False, "reason": problem}, USAGE
    t0 = time.monotonic()
    want = poolfmt.manifest_fields(layers, experts, expert_bytes, template, seed)
    decided = _existing(d, want)
    if decided is not None:
        return decided
    os.makedirs(d, exist_ok=True)
    poolfmt.write_manifest(d, want, complete=False)
    written = kept = 0
    sums_out = poolfmt.SumsWriter(d)
    try:
        for layer in range(layers):
            for expert in range(experts):
                p = os.path.join(d, poolfmt.relpath(template, layer, expert))
                head = poolfmt.expert_header(layer, expert, expert_bytes, seed)
                if poolfmt.file_complete(p, head, expert_bytes):
                    kept += 1
                else:
                    write_expert(p, head, expert_bytes)
                    written += 1
                sums_out.add(poolfmt.sample_digest(p, layer, expert, expert_bytes, seed))
    except BaseException:           # interrupted anyhow: drop the partial pool.sums, re-raise
        sums_out.abandon()
        raise
    sums = sums_out.close()
    os.sync()
    poolfmt.write_manifest(d, dict(want, sums=poolfmt.sums_entry(sums)), complete=True)
    os.sync()
    return {"ok": True, "status": "made" if not kept else "resumed", "written": written,
            "kept": kept, "bytes": layers * experts * expert_bytes,
            "seconds": round(time.monotonic() - t0, 3)}, 0


def write_keyed(root: str, layers: int, experts: int, expert_bytes: int, seed: int = 0,
                template: str = poolfmt.DEFAULT_PATH) -> tuple[dict[str, Any], int]:
    """The pool of this shape and seed under the host's pool_dir `root`, in its keyed
    directory `<root>/<L>x<E>x<S>-s<seed>` (made, resumed or found). A pool of the old
    layout (pool.json right in root) is first moved into its own keyed directory. The answer
    names the directory (`dir`) and the key."""
    problem = poolfmt.geometry_problem(layers, experts, expert_bytes) \
        or poolfmt.template_problem(template) or poolfmt.seed_problem(seed)
    if problem:
        return {"ok": False, "reason": problem}, USAGE
    if not os.path.isabs(root):
        return {"ok": False, "reason": "pool root %r is not an absolute path" % root}, USAGE
    os.makedirs(root, exist_ok=True)
    moved = poolstore.migrate_old_layout(root)
    if moved.get("ok") is False:
        return moved, REFUSED
    d = poolfmt.keyed_dir(root, layers, experts, expert_bytes, seed)
    res, rc = write_pool(d, layers, experts, expert_bytes, seed, template)
    res.update(dir=d, key=os.path.basename(d))
    if moved.get("migrated"):
        res["migrated"] = moved
    return res, rc
