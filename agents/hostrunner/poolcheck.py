"""Verify an expert pool on disk (`bench pool check`): every file's presence, type, size and
header, the content of its sampled blocks against pool.sums (poolfmt.sample_offsets), and no
file that is not part of the pool. Standard library only, O(1) memory in the pool's size (the
digests are read line by line, the directory walked once), so it can run on a host too.

A pool written before the sampled digests (no `sums` in pool.json) is checked for everything
but content, and the report says so (`content`: "unverified")."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import IO, Any, Iterator

from . import poolcheck_gguf, poolfmt

MAX_PROBLEMS = 1000        # listed; more are counted
HEX32 = re.compile(r"^[0-9a-f]{32}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
KINDS = {stat.S_IFLNK: "a symlink", stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket"}


class Report:
    def __init__(self, directory: str):
        self.dir = directory
        self.problems: list[dict[str, str]] = []
        self.count = 0

    def add(self, file: str, kind: str, text: str) -> None:
        self.count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append({"file": file, "kind": kind, "line": "%s: %s" % (file, text)})


def _template_regex(template: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in poolfmt.TEMPLATE_FIELD.finditer(template):
        out.append(re.escape(template[pos:m.start()]))
        out.append("(?P<%s>[0-9]+)" % m.group(1))
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("^" + "".join(out) + "$")


def _sums(d: str, raw: dict[str, Any], n: int, rep: Report) -> IO[bytes] | None:
    """pool.sums opened at its start once its size and sha256 match pool.json, else None."""
    s = raw.get("sums")
    if s is None:
        return None
    ok = (isinstance(s, dict) and s.get("file") == poolfmt.SUMS
          and isinstance(s.get("sha256"), str) and SHA256.fullmatch(s["sha256"])
          and s.get("block") == poolfmt.SAMPLE_BLOCK and s.get("blocks") == poolfmt.SAMPLE_BLOCKS)
    if not ok:
        rep.add(poolfmt.MANIFEST, "manifest", "its `sums` member is not one this bench writes "
                "(file pool.sums, a sha256, block %d, blocks %d)"
                % (poolfmt.SAMPLE_BLOCK, poolfmt.SAMPLE_BLOCKS))
        return None
    try:
        f = open(os.path.join(d, poolfmt.SUMS), "rb", opener=_nofollow)
    except OSError as e:
        rep.add(poolfmt.SUMS, "sums", "cannot be read (%s)" % (e.strerror or e))
        return None
    size, h = os.fstat(f.fileno()).st_size, hashlib.sha256()
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode) or size != 33 * n:
        rep.add(poolfmt.SUMS, "sums", "%d bytes, %d expected (one 32-digit line per file)"
                % (size, 33 * n))
        f.close()
        return None
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    if h.hexdigest() != s["sha256"]:
        rep.add(poolfmt.SUMS, "sums", "its sha256 is not the one pool.json records (the "
                "digest file was altered)")
        f.close()
        return None
    f.seek(0)
    return f


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def _header_problem(got: bytes, want: bytes) -> str | None:
    if got == want:
        return None
    if len(got) < len(want):
        return "header cut short"
    g, w = poolfmt.HEADER.unpack(got), poolfmt.HEADER.unpack(want)
    names = ("magic", "layer", "expert", "expert_bytes", "seed")
    diff = ["%s %r, expected %r" % (k, a, b) for k, a, b in zip(names, g, w) if a != b]
    return "header differs: " + "; ".join(diff)


def _check_file(d: str, rel: str, layer: int, expert: int, f: dict[str, Any],
                digest: str | None, rep: Report) -> None:
    size, seed = f["expert_bytes"], f["seed"]
    path = os.path.join(d, rel)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        rep.add(rel, "missing", "missing")
        return
    except OSError as e:
        rep.add(rel, "unreadable", "cannot be examined (%s)" % e.strerror)
        return
    if not stat.S_ISREG(st.st_mode):
        rep.add(rel, "not_regular", "not a regular file (%s)"
                % KINDS.get(stat.S_IFMT(st.st_mode), "of another kind"))
        return
    if st.st_size != size:
        rep.add(rel, "size", "%d bytes, pool.json says %d (%s)"
                % (st.st_size, size, "truncated" if st.st_size < size else "too long"))
        return
    try:
        fd = _nofollow(path, os.O_RDONLY)
    except OSError as e:
        rep.add(rel, "unreadable", "cannot be opened (%s)" % e.strerror)
        return
    try:
        want = poolfmt.expert_header(layer, expert, size, seed)
        why = _header_problem(os.pread(fd, len(want), 0), want)
        if why:
            rep.add(rel, "header", why)
        elif digest is not None:
            offs = poolfmt.sample_offsets(layer, expert, size, seed)
            if poolfmt.sample_digest_fd(fd, offs) != digest:
                rep.add(rel, "content", "content differs from pool.sums in the sampled blocks "
                        "at offsets %s (corrupted)" % ", ".join(map(str, offs)))
    except OSError as e:
        rep.add(rel, "unreadable", "read error (%s)" % e.strerror)
    finally:
        os.close(fd)


def _digests(sums: IO[bytes] | None, n: int, rep: Report) -> Iterator[str | None]:
    for _ in range(n):
        if sums is None:
            yield None
            continue
        line = sums.readline().decode("ascii", "replace").rstrip("\n")
        if not HEX32.fullmatch(line):
            rep.add(poolfmt.SUMS, "sums", "a line is not 32 hex digits")
            sums = None
            yield None
            continue
        yield line


def _extras(d: str, f: dict[str, Any], rep: Report) -> None:
    """Everything under d that is not pool.json, pool.sums or one of the pool's files (a
    directory is walked, never followed: a symlink to one is reported)."""
    rx = _template_regex(f["path"])
    for top, dirs, names in os.walk(d):
        rel_top = os.path.relpath(top, d)
        dirs.sort()
        for n in [x for x in dirs if os.path.islink(os.path.join(top, x))]:
            dirs.remove(n)
            rel = n if rel_top == "." else rel_top + "/" + n
            rep.add(rel, "extra", "a symlink to a directory (pool files must be in the pool)")
        for n in sorted(names):
            rel = n if rel_top == "." else rel_top + "/" + n
            if rel in (poolfmt.MANIFEST, poolfmt.SUMS):
                continue
            m = rx.fullmatch(rel)
            if m and int(m.group("layer")) < f["layers"] \
                    and int(m.group("expert")) < f["experts_per_layer"] \
                    and poolfmt.relpath(f["path"], int(m.group("layer")),
                                        int(m.group("expert"))) == rel:
                continue
            if rel.endswith(".tmp"):
                rep.add(rel, "extra", "not part of the pool (a temp file left by an "
                        "interrupted write)")
            else:
                rep.add(rel, "extra", "not part of the pool (extra file)")


def verify(d: str) -> dict[str, Any]:
    """The report: {"dir", "manifest" (or None), "complete", "files", "content" ("sampled" |
    "unverified" | None), "problems": [{"file", "kind", "line"}], "problem_count", "ok"}."""
    rep = Report(d)
    res: dict[str, Any] = {"dir": d, "manifest": None, "complete": False, "files": 0,
                           "content": None}
    try:
        raw = poolfmt.read_manifest(d)
        if isinstance(raw, dict) and raw.get("kind") == "gguf":
            poolcheck_gguf.verify_gguf(d, raw, res, rep.add)
            return _done(res, rep)
        f = poolfmt.parse_manifest(raw)
    except FileNotFoundError:
        rep.add(poolfmt.MANIFEST, "manifest", "missing (no pool here; `bench pool make` "
                "creates one)")
        return _done(res, rep)
    except (OSError, ValueError, KeyError, TypeError) as e:
        rep.add(poolfmt.MANIFEST, "manifest", "unreadable (%s)" % e)
        return _done(res, rep)
    why = poolfmt.geometry_problem(f["layers"], f["experts_per_layer"], f["expert_bytes"]) \
        or poolfmt.template_problem(f["path"])
    if why:
        rep.add(poolfmt.MANIFEST, "manifest", why)
        return _done(res, rep)
    res.update(manifest=f, complete=raw.get("complete") is True)
    if not res["complete"]:
        rep.add(poolfmt.MANIFEST, "incomplete", "says the pool is not complete (resume it "
                "with `bench pool make` and the same shape)")
    n = f["layers"] * f["experts_per_layer"]
    sums = _sums(d, raw, n, rep)
    res["content"] = "sampled" if sums is not None else (
        "unverified" if raw.get("sums") is None else None)
    digests = _digests(sums, n, rep)
    for layer in range(f["layers"]):
        for expert in range(f["experts_per_layer"]):
            _check_file(d, poolfmt.relpath(f["path"], layer, expert), layer, expert, f,
                        next(digests), rep)
    if sums is not None:
        sums.close()
    res["files"] = n
    _extras(d, f, rep)
    return _done(res, rep)


def _done(res: dict[str, Any], rep: Report) -> dict[str, Any]:
    res.update(problems=rep.problems, problem_count=rep.count, ok=rep.count == 0)
    return res
