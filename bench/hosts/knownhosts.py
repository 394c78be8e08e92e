"""OpenSSH known_hosts files, read and edited as OpenSSH does (sshd(8), SSH_KNOWN_HOSTS FILE
FORMAT), without paramiko: bench.hosts.ssh asks `KnownHosts.check` what to make of the key a
host offers, and `bench hosts trust` appends or replaces lines with `append` and `replace`.

A line is `[marker] hostnames keytype base64-key [comment]`, fields separated by any run of
spaces and tabs. Lines end at "\n" only (OpenSSH reads with getline(3)): a form feed, a
vertical tab, U+0085 or U+2028 inside a comment is part of that comment, not a line break, so
the line numbers bench reports, checks and edits are the ones `ssh-keygen -F` prints; a "\r"
before the "\n" (a file written on Windows) is blank at the line's end.

hostnames is a comma list of patterns (`*` and `?` wildcards, `!` negation, `[host]:port` for a
port other than 22) or one hashed name `|1|salt|hmac-sha1`. Markers: `@revoked` (the key must
never be accepted for the matching hosts) and `@cert-authority` (the key is a CA that signs host
certificates: paramiko cannot verify host certificates, so such lines are kept apart, never
trusted, and named in the unknown-key message). A line that does not parse (unknown marker, a
key whose blob does not decode or does not start with its type) is skipped and kept in `skipped`
with its line number, as OpenSSH skips it; every other line still loads. The file is
size-bounded; a missing file is an empty one.

`check(name, key_type, key_b64)` says: known (this exact key is pinned for the name), revoked
(an @revoked line holds it, whatever else is pinned), changed (other keys are pinned for the
name, of any type: a host that now offers an RSA key where an ed25519 key was pinned has a
changed key) or unknown (nothing pinned). Pure: reads and writes only the file it is given.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import InputError

MAX_BYTES = 64 << 20        # a known_hosts file larger than this is refused, not read
MAX_LINE = 64 << 10         # longer lines are skipped (no key is that long)
MARKERS = ("cert-authority", "revoked")
_TYPE_RE = re.compile(r"^[A-Za-z0-9@._+-]{1,64}$")


class KnownHostsError(InputError):
    """A known_hosts file bench cannot read or edit; names the file (and line)."""


def fingerprint(key_b64: str) -> str:
    """OpenSSH's SHA256 fingerprint of a base64 key blob: SHA256:<unpadded base64>."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def host_name(hostname: str, port: int) -> str:
    """The name known_hosts files a host under: `host` on port 22, else `[host]:port`."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def _blob_type(key_b64: str) -> str | None:
    """The key type written inside a base64 key blob (its first SSH string), or None."""
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(blob) < 4:
        return None
    (n,) = struct.unpack(">I", blob[:4])
    if n > 64 or len(blob) < 4 + n:
        return None
    try:
        return blob[4:4 + n].decode("ascii")
    except UnicodeDecodeError:
        return None


def _wildcard(pattern: str, name: str) -> bool:
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.IGNORECASE | re.DOTALL) is not None


def _hashed(pattern: str, name: str) -> bool:
    parts = pattern.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt, want = base64.b64decode(parts[2]), base64.b64decode(parts[3])
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


@dataclass(frozen=True)
class Entry:
    """One line that parsed: marker (None, 'cert-authority', 'revoked'), its host patterns,
    key type and base64 blob."""
    line: int
    marker: str | None
    patterns: tuple[str, ...]
    key_type: str
    key_b64: str

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key_b64)

    @property
    def hashed(self) -> bool:
        return len(self.patterns) == 1 and self.patterns[0].startswith("|")

    @property
    def literal(self) -> bool:
        """Every pattern names one host (no wildcard, no negation): a name can be removed."""
        return self.hashed or not any(set(p) & set("*?!") for p in self.patterns)

    def matches(self, name: str) -> bool:
        if self.hashed:
            return _hashed(self.patterns[0], name)
        hit = False
        for p in self.patterns:
            neg = p.startswith("!")
            if _wildcard(p[1:] if neg else p, name):
                if neg:
                    return False
                hit = True
        return hit

    def describe(self) -> str:
        return f"{self.key_type} {self.fingerprint}"


@dataclass(frozen=True)
class Verdict:
    """What a known_hosts file says about the key a host offers under `name`."""
    status: str                                 # known | unknown | changed | revoked
    name: str
    offered: tuple[str, str]                    # (key type, SHA256 fingerprint)
    pinned: tuple[Entry, ...] = ()              # plain keys pinned for the name
    revoked: Entry | None = None                # the @revoked line holding the offered key
    authorities: tuple[Entry, ...] = ()         # @cert-authority lines matching the name


_BLANKS = " \t"                     # field separators (OpenSSH's); \r too at a line's end
_FIELDS_RE = re.compile(r"[ \t]+")


def split_lines(text: str) -> list[str]:
    """The file's lines, each with its "\n" (the last one may lack it): the one rule both
    the parser and the editor number lines by, OpenSSH's (never str.splitlines, which also
    breaks at \x0b, \x0c, \x1c-\x1e, \x85, U+2028, U+2029 and a lone \r)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    return lines + [parts[-1]] if parts[-1] else lines


def _fields(raw: str) -> list[str]:
    text = raw.rstrip("\n").strip(_BLANKS + "\r")
    return _FIELDS_RE.split(text) if text else []


def _parse_line(raw: str, lineno: int) -> Entry | str | None:
    """An Entry, a reason to skip the line (str), or None for a blank or comment line."""
    fields = _fields(raw)
    if not fields or fields[0].startswith("#"):
        return None
    if len(raw) > MAX_LINE:
        return f"longer than {MAX_LINE} characters"
    marker = None
    if fields[0].startswith("@"):
        marker = fields.pop(0)[1:]
        if marker not in MARKERS:
            return f"unknown marker @{marker} (known: @cert-authority, @revoked)"
    if len(fields) < 3:
        return "expected: [marker] hostnames keytype base64-key [comment]"
    names, key_type, key_b64 = fields[:3]
    if not _TYPE_RE.fullmatch(key_type):
        return f"bad key type {key_type[:40]!r}"
    inner = _blob_type(key_b64)
    if inner is None:
        return "key is not valid base64 of an SSH key blob"
    if inner != key_type:
        return f"key blob is a {inner[:40]!r} key, the line says {key_type!r}"
    patterns = tuple(p for p in names.split(",") if p)
    if not patterns:
        return "no host names"
    return Entry(lineno, marker, patterns, key_type, key_b64)


@dataclass(frozen=True)
class KnownHosts:
    path: str
    entries: tuple[Entry, ...] = ()
    skipped: tuple[tuple[int, str], ...] = ()   # (line, why): lines OpenSSH would skip too

    @classmethod
    def parse(cls, text: str, path: str = "<text>") -> KnownHosts:
        entries, skipped = [], []
        for i, raw in enumerate(split_lines(text), 1):
            got = _parse_line(raw, i)
            if isinstance(got, Entry):
                entries.append(got)
            elif got is not None:
                skipped.append((i, got))
        return cls(path, tuple(entries), tuple(skipped))

    @classmethod
    def load(cls, path: str | os.PathLike) -> KnownHosts:
        """Read a known_hosts file (missing: empty). Lines that are not UTF-8 are skipped."""
        return cls.from_bytes(_read(Path(path)) or b"", str(path))

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> KnownHosts:
        # "\n" decodes to itself under any error handler: lines number the same as the editor's
        return cls.parse(data.decode("utf-8", errors="replace"), path)

    def for_name(self, name: str) -> list[Entry]:
        return [e for e in self.entries if e.matches(name)]

    def pinned(self, name: str) -> list[Entry]:
        """The plain keys trusted for name (revoked keys left out)."""
        hits = self.for_name(name)
        revoked = {(e.key_type, e.key_b64) for e in hits if e.marker == "revoked"}
        return [e for e in hits if e.marker is None
                and (e.key_type, e.key_b64) not in revoked]

    def check(self, name: str, key_type: str, key_b64: str) -> Verdict:
        hits = self.for_name(name)
        offered = (key_type, fingerprint(key_b64))
        cas = tuple(e for e in hits if e.marker == "cert-authority")
        for e in hits:
            if e.marker == "revoked" and e.key_b64 == key_b64:
                return Verdict("revoked", name, offered, revoked=e, authorities=cas)
        pinned = tuple(e for e in hits if e.marker is None)
        if any(e.key_type == key_type and e.key_b64 == key_b64 for e in pinned):
            return Verdict("known", name, offered, pinned, authorities=cas)
        return Verdict("changed" if pinned else "unknown", name, offered, pinned,
                       authorities=cas)


def _read(p: Path) -> bytes | None:
    """The file's bytes (size-bounded), None when it does not exist."""
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise KnownHostsError(f"{p}: known_hosts is a directory, not a file",
                              "point ssh.known_hosts at a file") from None
    except OSError as exc:
        raise KnownHostsError(f"{p}: cannot read known_hosts: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise KnownHostsError(f"{p}: known_hosts is larger than {MAX_BYTES >> 20} MiB",
                              "is this really a known_hosts file?")
    return data


# editing ----------------------------------------------------------------------------------------

def append(path: str | os.PathLike, name: str, key_type: str, key_b64: str) -> str:
    """Append one line (the file is created 0600, its directory too); returns the line. A
    last line without its "\n" gets one first, so the new key never joins it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    line = f"{name} {key_type} {key_b64}\n"
    try:
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            lead = "\n" if size and os.pread(fd, 1, size - 1) != b"\n" else ""
            os.write(fd, (lead + line).encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise KnownHostsError(f"{p}: cannot append to known_hosts: {exc.strerror}") from None
    return line


# the hostnames field of a line: after the blanks and the marker, up to the next blank
_NAMES_RE = re.compile(r"\A([ \t]*(?:@[^ \t]+[ \t]+)?)([^ \t]+)")


@dataclass
class _Edit:
    lines: list[str]
    removed: list[int] = field(default_factory=list)


def _drop_name(edit: _Edit, e: Entry, name: str, path: Path) -> None:
    if not e.literal:
        raise KnownHostsError(
            f"{path}:{e.line}: the old key is pinned by a pattern ({','.join(e.patterns)}) that "
            "may cover other hosts too", "edit that line by hand, then run the trust again")
    raw = edit.lines[e.line - 1]
    keep = [] if e.hashed else [p for p in e.patterns if p.lower() != name.lower()]
    m = _NAMES_RE.match(raw)
    if keep and m:      # only the hostnames field changes: the key, comment and ending stay
        edit.lines[e.line - 1] = m.group(1) + ",".join(keep) + raw[m.end():]
    else:
        edit.lines[e.line - 1] = ""
    edit.removed.append(e.line)


def replace(path: str | os.PathLike, name: str, old: list[Entry], key_type: str,
            key_b64: str) -> str:
    """Remove `name` from the lines pinning the `old` keys (a line naming only it goes; a
    line naming other hosts too keeps them), then append the new key. The lines are read
    once and numbered as `KnownHosts.parse` numbers them (split_lines); every other byte of
    the file is kept. The file is rewritten atomically with its mode kept; returns the new
    line."""
    p = Path(path)
    data = _read(p)
    if data is None:
        raise KnownHostsError(f"{p}: known_hosts disappeared while bench was reading it",
                              "run the trust again")
    current = KnownHosts.from_bytes(data, str(p))
    edit = _Edit(split_lines(data.decode("utf-8", errors="surrogateescape")))
    for e in old:
        now = [x for x in current.entries if x.line == e.line]
        if not now or (now[0].key_b64, now[0].patterns) != (e.key_b64, e.patterns):
            raise KnownHostsError(f"{p}:{e.line}: changed while bench was reading it",
                                  "run the trust again")
        _drop_name(edit, e, name, p)
    kept = "".join(edit.lines)
    line = f"{name} {key_type} {key_b64}\n"
    text = kept + ("\n" if kept and not kept.endswith("\n") else "") + line
    tmp = p.with_name(p.name + ".bench-tmp")
    mode = p.stat().st_mode & 0o777
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8", errors="surrogateescape"))
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise KnownHostsError(f"{p}: cannot rewrite known_hosts: {exc.strerror}") from None
    return line
