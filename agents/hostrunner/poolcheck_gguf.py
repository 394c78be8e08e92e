"""`bench pool check` of a pool over a GGUF (kind "gguf", written by `bench plan --from-gguf`;
docs/formats.md): pool.json's members, the model file as recorded (regular, its size, mtime
and the sha256 of its first MiB), ranges.bin as recorded (its size for the shape, its sha256)
and nothing else in the directory. The ranges' bounds are the agent's to check (poolgguf.c)
before it reads. Standard library only, like poolcheck."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Any

RANGES_HEADER = 24
RANGES_MAX_BYTES = 256 << 20
HEAD_BYTES = 1 << 20
SHA256 = re.compile(r"^[0-9a-f]{64}$")
NAME = re.compile(r"^[^/\0]{1,255}$")


def manifest_problem(raw: dict[str, Any]) -> str | None:
    ints = ("layers", "experts_per_layer", "expert_bytes", "file_bytes", "ranges_per_expert")
    for k in ints:
        if not isinstance(raw.get(k), int) or isinstance(raw.get(k), bool) or raw[k] <= 0:
            return "%s is not a positive integer" % k
    if not isinstance(raw.get("file"), str) or not raw["file"]:
        return "file does not name the model"
    r = raw.get("ranges")
    if not isinstance(r, str) or not NAME.fullmatch(r) or r in (".", "..", "pool.json"):
        return "ranges is not a plain file name in the pool"
    m = raw.get("model")
    if not (isinstance(m, dict) and isinstance(m.get("mtime_ns"), int)
            and isinstance(m.get("head_sha256"), str) and SHA256.fullmatch(m["head_sha256"])):
        return "model does not record mtime_ns and head_sha256"
    if not isinstance(raw.get("ranges_sha256"), str) or not SHA256.fullmatch(
            raw["ranges_sha256"]):
        return "ranges_sha256 is not a sha256"
    return None


def _sha256(path: str, limit: int | None = None) -> str:
    h, left = hashlib.sha256(), limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            chunk = f.read(1 << 20 if left is None else min(1 << 20, left))
            if not chunk:
                break
            h.update(chunk)
            left = None if left is None else left - len(chunk)
    return h.hexdigest()


def _model(d: str, raw: dict[str, Any], add) -> None:
    path = raw["file"] if os.path.isabs(raw["file"]) else os.path.join(d, raw["file"])
    try:
        st = os.stat(path)
    except OSError as e:
        add(raw["file"], "missing", "the model file cannot be examined (%s)" % e.strerror)
        return
    if not stat.S_ISREG(st.st_mode):
        add(raw["file"], "not_regular", "the model is not a regular file")
        return
    if st.st_size != raw["file_bytes"]:
        add(raw["file"], "size", "%d bytes, pool.json says %d (the model changed: plan it "
            "again with `bench plan --from-gguf`)" % (st.st_size, raw["file_bytes"]))
        return
    try:
        head = _sha256(path, HEAD_BYTES)
    except OSError as e:
        add(raw["file"], "unreadable", "read error (%s)" % e.strerror)
        return
    if head != raw["model"]["head_sha256"]:
        add(raw["file"], "content", "its first MiB differs from the one planned (another "
            "model of the same size: plan it again)")
    elif st.st_mtime_ns != raw["model"]["mtime_ns"]:
        add(raw["file"], "mtime", "modified since it was planned (mtime differs; the first "
            "MiB is the same)")


def _ranges(d: str, raw: dict[str, Any], add) -> None:
    name = raw["ranges"]
    want = RANGES_HEADER + 16 * raw["layers"] * raw["experts_per_layer"] \
        * raw["ranges_per_expert"]
    try:
        st = os.lstat(os.path.join(d, name))
    except OSError as e:
        add(name, "missing", "cannot be examined (%s)" % e.strerror)
        return
    if not stat.S_ISREG(st.st_mode):
        add(name, "not_regular", "not a regular file")
    elif want > RANGES_MAX_BYTES or st.st_size != want:
        add(name, "size", "%d bytes, the shape needs %d" % (st.st_size, want))
    elif _sha256(os.path.join(d, name)) != raw["ranges_sha256"]:
        add(name, "content", "its sha256 is not the one pool.json records (altered)")


def verify_gguf(d: str, raw: dict[str, Any], res: dict[str, Any], add) -> None:
    """Fill res (poolcheck.verify's report) for a gguf pool; add(file, kind, text) reports."""
    why = manifest_problem(raw)
    if why:
        add("pool.json", "manifest", why)
        return
    res.update(manifest={k: raw[k] for k in ("kind", "file", "file_bytes", "layers",
                                             "experts_per_layer", "expert_bytes",
                                             "ranges_per_expert")},
               complete=raw.get("complete") is True, files=1, content="model")
    if not res["complete"]:
        add("pool.json", "incomplete", "says the pool is not complete")
    _model(d, raw, add)
    _ranges(d, raw, add)
    for n in sorted(os.listdir(d)):
        if n not in ("pool.json", raw["ranges"]):
            add(n, "extra", "not part of the pool (extra file)")
