"""A run bundle's files, read as untrusted input (docs/bundle.md, "Limits"): size caps checked
from lstat before a byte is read, regular files only (a symbolic link, a fifo or a device is
refused, never followed), hashing streamed, and a strict JSON reader (UTF-8 only, no duplicate
keys, no NaN or Infinity, bounded depth). Every refusal is a BundleError naming the bundle and
the file.

Caps (`Caps`, defaults below) bound what one bundle may cost the controller: the largest file,
all files together, how many files, and the JSON documents (*.json), which are parsed whole.
They are set by environment variables or by the caller (`bench ingest --max-file-bytes ...`):

    BENCH_BUNDLE_MAX_FILE_BYTES   one file            (default 256 MiB)
    BENCH_BUNDLE_MAX_BYTES        the whole bundle    (default 1 GiB)
    BENCH_BUNDLE_MAX_FILES        number of files     (default 100000)

The defaults hold a long real run with room to spare: agent.jsonl of 1000 passes x 3000
iterations is about 210 MB, a timeline sampled every 100 ms for ten hours about 20 MB, and the
/proc snapshots of 1000 passes (2000 directories of about 20 files) about 40000 files and
50 MB. A JSON document (spec, status, manifest ...) is capped at 16 MiB: the manifest of that
run is about 6 MB.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from sys import intern
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.errors import FormatError, InputError

MiB = 1 << 20
DEFAULT_FILE_BYTES = 256 * MiB
DEFAULT_TOTAL_BYTES = 1024 * MiB
DEFAULT_FILES = 100_000
JSON_BYTES = 16 * MiB
MAX_DEPTH = 32              # JSON nesting (the deepest part the runner writes has 4 levels)
MAX_DIR_DEPTH = 4           # snapshots/<phase>/<file> is the deepest the layout goes
MAX_PATH = 512              # raw_files.path in the store
MAX_STRING = 1 * MiB        # one JSON string (engine output is a file, not a JSON string)
INT64 = 1 << 63
ENV = {"file_bytes": "BENCH_BUNDLE_MAX_FILE_BYTES", "total_bytes": "BENCH_BUNDLE_MAX_BYTES",
       "files": "BENCH_BUNDLE_MAX_FILES"}
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f]")


class BundleError(FormatError):
    """A bundle that is damaged, incomplete or not what it claims to be; `part` names the file
    (the bundle directory itself: "."). The message is one line per problem, the first one
    complete on its own: `BUNDLE: FILE: problem`."""

    def __init__(self, where: str, part: str, message: str, hint: str | None = None):
        super().__init__(f"{where}: {part}: {message}", hint)
        self.where, self.part = where, part

    def moved(self, dest: Path | str) -> BundleError:
        """The same refusal, saying where the bundle was moved aside to (first line)."""
        first, nl, rest = self.message.partition("\n")
        err = BundleError(self.where, self.part, "", self.hint)
        err.message = f"{first} (moved to {dest}){nl}{rest}"
        err.args = (err.message,)
        return err


# caps -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Caps:
    """What one bundle may cost: the largest file, the whole bundle, the number of files."""
    file_bytes: int = DEFAULT_FILE_BYTES
    total_bytes: int = DEFAULT_TOTAL_BYTES
    files: int = DEFAULT_FILES

    @property
    def json_bytes(self) -> int:
        return min(JSON_BYTES, self.file_bytes)

    def cap_for(self, rel: str) -> int:
        return self.json_bytes if rel.endswith(".json") else self.file_bytes

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: int | None) -> Caps:
        """The defaults, overridden by the environment, overridden by what the caller gives."""
        env = os.environ if environ is None else environ
        caps = cls()
        for name, var in ENV.items():
            text = env.get(var)
            if text:
                caps = replace(caps, **{name: _positive(text, var)})
            if given.get(name) is not None:
                caps = replace(caps, **{name: _positive(given[name], f"--{name}")})
        return caps


def _positive(value: object, what: str) -> int:
    from bench.units import parse_size
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        try:
            n = parse_size(str(value), what)
        except InputError as exc:
            raise InputError(f"{what}: {exc.message}", hint="a number of bytes, e.g. "
                             "268435456, or a size such as 256Mi") from None
    if n <= 0:
        raise InputError(f"{what} must be positive, got {value!r}")
    return n


# the directory ---------------------------------------------------------------------------------

@dataclass
class Listing:
    """What verification needs of a bundle: every file's size, its sha256 (computed on
    demand, or while it was read) and the content of the files that were read."""
    sizes: dict[str, int]
    content: Mapping[str, bytes]
    digests: dict[str, str] = field(default_factory=dict)

    def sha256(self, rel: str) -> str:
        if rel not in self.digests:
            self.digests[rel] = hashlib.sha256(self.content[rel]).hexdigest()
        return self.digests[rel]

    @classmethod
    def of(cls, files: Mapping[str, bytes]) -> Listing:
        return cls({rel: len(d) for rel, d in files.items()}, files)


def walk(root: Path, caps: Caps, where: str) -> list[tuple[str, int]]:
    """(relative POSIX path, size) of every file under root, sorted, checked against the caps
    from lstat alone: nothing is opened, nothing followed. Files and directories count alike
    against caps.files, as they are read (a bundle of a million empty directories is refused
    at the cap, not listed first)."""
    out: list[tuple[str, int]] = []
    total = seen = 0
    stack: list[tuple[Path, str, int]] = [(root, "", 0)]
    while stack:
        d, prefix, depth = stack.pop()
        entries = []
        with os.scandir(d) as it:   # every entry counts as it is read (collect counts alike)
            for e in it:
                seen += 1
                if seen > caps.files:
                    raise BundleError(where, ".", f"more than {caps.files} files and "
                                      f"directories ({ENV['files']})")
                entries.append(e)
        entries.sort(key=lambda e: e.name)
        for e in entries:
            rel = prefix + _name(e.name, prefix, where)
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 >= MAX_DIR_DEPTH:
                    raise BundleError(where, rel, f"directories nested deeper than "
                                      f"{MAX_DIR_DEPTH - 1} levels")
                stack.append((Path(e.path), rel + "/", depth + 1))
                continue
            if not stat.S_ISREG(st.st_mode):
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise BundleError(where, rel, f"is {what} (a bundle holds regular files only)")
            cap = caps.cap_for(rel)
            if st.st_size > cap:
                what = "JSON document" if rel.endswith(".json") else "file"
                raise BundleError(where, rel, f"{st.st_size} bytes, above the cap of {cap} "
                                  f"bytes per {what} ({ENV['file_bytes']})")
            total += st.st_size
            out.append((rel, st.st_size))
            if total > caps.total_bytes:
                raise BundleError(where, ".", f"more than {caps.total_bytes} bytes in all "
                                  f"({ENV['total_bytes']})")
    return sorted(out)


def _name(name: str, prefix: str, where: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BundleError(where, prefix + ascii(name), "file name is not UTF-8") from None
    if _BAD_NAME.search(name) or len(prefix) + len(name) > MAX_PATH:
        raise BundleError(where, prefix + ascii(name)[:80], "file name with control characters "
                          f"or a path over {MAX_PATH} characters")
    return name


def _open(path: Path, rel: str, size: int, where: str) -> int:
    """A file descriptor of a regular file that is still the size walk saw (O_NOFOLLOW: a
    file swapped for a link since is refused, not followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise BundleError(where, rel, f"cannot be opened ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        os.close(fd)
        raise BundleError(where, rel, "changed while the bundle was read")
    return fd


def read_file(root: Path, rel: str, size: int, where: str) -> bytes:
    """The whole file (its size already checked against the caps)."""
    fd = _open(root / rel, rel, size, where)
    with os.fdopen(fd, "rb", buffering=0) as f:
        data = f.read(size + 1) if size else f.read(1)
    if len(data) != size:
        raise BundleError(where, rel, "changed while the bundle was read")
    return data


def hash_file(root: Path, rel: str, size: int, where: str) -> str:
    """sha256 of a file, streamed in 1 MiB chunks (never held whole)."""
    h, seen = hashlib.sha256(), 0
    fd = _open(root / rel, rel, size, where)
    with os.fdopen(fd, "rb", buffering=0) as f:
        for chunk in iter(lambda: f.read(MiB), b""):
            seen += len(chunk)
            if seen > size:
                break
            h.update(chunk)
    if seen != size:
        raise BundleError(where, rel, "changed while the bundle was read")
    return h.hexdigest()


def _root(directory: str | Path) -> Path:
    root = Path(directory)
    if root.is_symlink() or not root.is_dir():
        raise BundleError(str(root), ".", "not a directory")
    return root


def read_dir(directory: str | Path, caps: Caps | None = None) -> dict[str, bytes]:
    """Every file under directory, keyed by its relative POSIX path; sizes checked against the
    caps before anything is read (BundleError on a link, a special file or a cap)."""
    root = _root(directory)
    where = str(root)
    return {rel: read_file(root, rel, size, where)
            for rel, size in walk(root, caps or Caps.from_env(), where)}


def scan_dir(directory: str | Path, caps: Caps | None = None,
             keep: Callable[[str], bool] = lambda rel: rel.endswith(".json")) -> Listing:
    """Sizes and streamed sha256 of every file; the content of `keep` files only (the small
    JSON documents a verification reads)."""
    root = _root(directory)
    where = str(root)
    listing = Listing({}, {})
    content: dict[str, bytes] = {}
    for rel, size in walk(root, caps or Caps.from_env(), where):
        listing.sizes[rel] = size
        if keep(rel):
            content[rel] = read_file(root, rel, size, where)
        else:
            listing.digests[rel] = hash_file(root, rel, size, where)
    listing.content = content
    return listing


# strict JSON -----------------------------------------------------------------------------------

class NonFinite(float):
    """NaN, Infinity or a float literal beyond the double range, as the JSON text wrote it:
    kept as a marker so that validation can name the field (JSON has no such numbers)."""

    text: str = "NaN"

    def __new__(cls, text: str) -> NonFinite:
        obj = super().__new__(cls, "nan")
        obj.text = text
        return obj

    def __repr__(self) -> str:
        return self.text


class DupKeys(dict):
    """A JSON object that wrote a key twice (`dup` names the first such key)."""

    dup: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    # keys interned: millions of agent records share five key strings instead of each
    # holding its own (json memoises keys within one document only)
    d = {intern(k): v for k, v in pairs}
    if len(d) != len(pairs):
        out, seen = DupKeys(d), set()
        for k, _ in pairs:
            if k in seen:
                out.dup = k
                break
            seen.add(k)
        return out
    return d


def _float(text: str) -> float:
    v = float(text)
    return v if math.isfinite(v) else NonFinite(text)


def loads(text: str | bytes) -> Any:
    """json.loads keeping markers for what JSON cannot hold (NonFinite, DupKeys); raises
    ValueError (bad JSON, bad UTF-8) or RecursionError (nesting)."""
    return json.loads(text, object_pairs_hook=_pairs, parse_constant=NonFinite,
                      parse_float=_float)


def json_problem(value: Any, max_items: int) -> tuple[tuple[str | int, ...], str] | None:
    """The first thing a parsed document holds that bench refuses, with its location: a
    non-finite number, a duplicate key, an integer beyond 64 bits, a string over MAX_STRING,
    a list or object of more than max_items entries, nesting deeper than MAX_DEPTH.
    Iterative (a deep document cannot exhaust the stack)."""
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        loc, v = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc[:MAX_DEPTH], f"nested deeper than {MAX_DEPTH} levels"
        if isinstance(v, (dict, list)) and len(v) > max_items:
            return loc, f"{len(v)} entries (at most {max_items})"
        if isinstance(v, dict):
            if isinstance(v, DupKeys):
                return loc, f"the key {v.dup!r} is written twice"
            stack.extend((loc + (k,), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((loc + (i,), x) for i, x in enumerate(v))
        elif isinstance(v, NonFinite):
            return loc, f"{v.text} is not a finite number"
        elif isinstance(v, int) and not -INT64 <= v < 2 * INT64:   # int64 or uint64
            return loc, f"an integer of {len(str(abs(v)))} digits does not fit 64 bits"
        elif isinstance(v, str) and len(v) > MAX_STRING:
            return loc, f"a string of {len(v)} characters (at most {MAX_STRING})"
    return None


def lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a text file, one at a time (no list of every line)."""
    start, n, end_all = 0, 1, len(data)
    while start < end_all:
        end = data.find(b"\n", start)
        if end < 0:
            end = end_all
        yield n, data[start:end]
        start, n = end + 1, n + 1


def utf8(data: bytes, where: str, rel: str, line: int | None = None) -> str:
    """The text of a part (or of its line `line`), or BundleError naming the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        n = line if line is not None else data.count(b"\n", 0, exc.start) + 1
        raise BundleError(where, f"{rel}:{n}", f"not UTF-8 text (byte {exc.start}"
                          f"{' of the line' if line is not None else ''})") from None
