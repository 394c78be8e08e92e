"""The expert pool's on-disk format (docs/formats.md), one definition for both writers: the
controller's `bench.pool` (imports this as bench.agents.hostrunner.poolfmt) and the host's
`runner.py pool` (poolwriter.py).

A pool is a directory of per-expert files plus `pool.json`. Each file holds expert_bytes bytes:
a 32-byte header (magic "BXPERT\\0\\0", u32 layer, u32 expert, u64 expert_bytes, u64 seed,
little-endian) and then pseudo-random bytes that are really written. A file is complete when it
has the right size and header. pool.json holds MANIFEST_KEYS plus `complete`, written sorted by
key, one line; `complete` is true only once every file is. Writers since the pool keys also
write `pool.sums` (a digest of sampled blocks of each file) and name it, with its own sha256,
in pool.json's optional `sums` member; readers that predate it ignore the member.

On a host, pools live under the inventory's pool_dir, one directory per shape and seed:
`<pool_dir>/<L>x<E>x<S>-s<seed>/` (pool_key); poolstore.py lists, migrates and removes them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import struct
from typing import Any

MAGIC = b"BXPERT\0\0"
HEADER = struct.Struct("<8sIIQQ")   # magic, layer, expert, expert_bytes, seed: 32 bytes
DEFAULT_PATH = "L{layer:03d}/E{expert:04d}.bin"
MANIFEST = "pool.json"
FORMAT = 1
U32, U63, U64 = (1 << 32) - 1, (1 << 63) - 1, (1 << 64) - 1
MAX_FILES = 1 << 24       # files per pool: the paper's model has 82,432
MANIFEST_KEYS = ("layers", "experts_per_layer", "expert_bytes", "path", "seed", "format")
TEMPLATE_FIELD = re.compile(r"\{(layer|expert)(?::0(\d+)d)?\}")


def expert_header(layer: int, expert: int, expert_bytes: int, seed: int) -> bytes:
    return HEADER.pack(MAGIC, layer, expert, expert_bytes, seed)


def template_problem(template: str) -> str | None:
    """Why a path template is unusable, or None: it must use {layer} and {expert} once each
    (optionally zero padded as {layer:03d}) and stay inside the pool."""
    fields = sorted(m.group(1) for m in TEMPLATE_FIELD.finditer(template))
    rest = TEMPLATE_FIELD.sub("", template)
    if fields != ["expert", "layer"] or "{" in rest or "}" in rest:
        return (f"pool path template {template!r} must use {{layer}} and {{expert}} once each, "
                "optionally zero padded as {layer:03d}")
    if template.startswith("/") or ".." in template.split("/"):
        return f"pool path template {template!r} must stay inside the pool"
    return None


def geometry_problem(layers: int, experts: int, expert_bytes: int) -> str | None:
    """Why a pool geometry is unusable, or None."""
    for name, v in (("layers", layers), ("experts_per_layer", experts),
                    ("expert_bytes", expert_bytes)):
        if v <= 0:
            return f"pool {name} must be positive, got {v}"
    if expert_bytes < HEADER.size:
        return f"expert_bytes must be at least {HEADER.size}"
    if layers > U32 or experts > U32 or expert_bytes > U63:
        return "pool layers and experts_per_layer must fit 32 bits, expert_bytes 63 bits"
    if layers * experts > MAX_FILES:
        return (f"a pool of {layers} x {experts} files is more than bench handles "
                f"({MAX_FILES:,} files)")
    return None


def seed_problem(seed: int) -> str | None:
    """Why a data seed is unusable (the header holds it as a u64), or None."""
    if not 0 <= seed <= U64:
        return f"pool seed must be 0..{U64}, got {seed}"
    return None


def relpath(template: str, layer: int, expert: int) -> str:
    return template.format(layer=layer, expert=expert)


def manifest_fields(layers: int, experts: int, expert_bytes: int, template: str = DEFAULT_PATH,
                    seed: int = 0, fmt: int = FORMAT) -> dict[str, Any]:
    """pool.json without `complete`, keys in MANIFEST_KEYS order."""
    return dict(zip(MANIFEST_KEYS, (layers, experts, expert_bytes, template, seed, fmt)))


def parse_manifest(raw: Any) -> dict[str, Any]:
    """A loaded pool.json as manifest_fields (defaults for path, seed, format). Raises
    KeyError, TypeError or ValueError when it lacks or garbles a field."""
    if not isinstance(raw, dict):
        raise TypeError("pool.json is not a JSON object")
    seed = int(raw.get("seed", 0))
    if seed_problem(seed):
        raise ValueError(seed_problem(seed))
    return manifest_fields(int(raw["layers"]), int(raw["experts_per_layer"]),
                           int(raw["expert_bytes"]), str(raw.get("path", DEFAULT_PATH)),
                           seed, int(raw.get("format", FORMAT)))


def manifest_text(fields: dict[str, Any], complete: bool) -> str:
    return json.dumps(dict(fields, complete=complete), sort_keys=True) + "\n"


def write_manifest(directory: str, fields: dict[str, Any], complete: bool) -> None:
    """pool.json through a temp file and a rename."""
    path = os.path.join(directory, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(manifest_text(fields, complete))
    os.replace(tmp, path)


def file_complete(path: str, header: bytes, expert_bytes: int) -> bool:
    """The file has expert_bytes bytes and starts with header."""
    try:
        if os.path.getsize(path) != expert_bytes:
            return False
        with open(path, "rb") as f:
            return f.read(len(header)) == header
    except OSError:
        return False


# ----------------------------------------------------------------------------- keys

KEY = re.compile(r"([1-9][0-9]{0,9})x([1-9][0-9]{0,9})x([1-9][0-9]{0,19})-s([0-9]{1,20})")


def pool_key(layers: int, experts: int, expert_bytes: int, seed: int = 0) -> str:
    """The name a pool of this shape and seed has under a host's pool_dir: `<L>x<E>x<S>-s<seed>`
    (92x896x17550000-s0), so pools of several shapes (and seeds) coexist on one host."""
    return "%dx%dx%d-s%d" % (layers, experts, expert_bytes, seed)


def parse_key(key: str) -> tuple[int, int, int, int] | None:
    """(layers, experts, expert_bytes, seed) of a pool key, or None when it is not one."""
    m = KEY.fullmatch(key)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3)),
                                   int(m.group(4)))


def keyed_dir(root: str, layers: int, experts: int, expert_bytes: int, seed: int = 0) -> str:
    """Where the pool of this shape and seed lives under the host's pool_dir `root`."""
    return root.rstrip("/") + "/" + pool_key(layers, experts, expert_bytes, seed)


# ----------------------------------------------------------------------------- sampled digests

SUMS = "pool.sums"        # one line per expert file, in (layer, expert) order: 32 hex digits
SAMPLE_BLOCK = 4096
SAMPLE_BLOCKS = 4         # the first block (with the header), the last, and two in between
MAX_MANIFEST_BYTES = 1 << 20


def sample_offsets(layer: int, expert: int, expert_bytes: int, seed: int,
                   block: int = SAMPLE_BLOCK, blocks: int = SAMPLE_BLOCKS) -> list[int]:
    """The offsets of the sampled blocks of one expert file: 0, the last block, and blocks - 2
    more at places drawn from sha256(layer, expert, expert_bytes, seed), so every file is
    sampled somewhere else. A file of at most `blocks` blocks is sampled whole."""
    n = (expert_bytes + block - 1) // block            # blocks in the file, the last maybe short
    if n <= blocks:
        return [i * block for i in range(n)]
    h = hashlib.sha256(struct.pack("<IIQQ", layer, expert, expert_bytes, seed)).digest()
    picks = {0, n - 1}
    i = 0
    while len(picks) < blocks:
        if i + 8 > len(h):
            h = hashlib.sha256(h).digest()
            i = 0
        picks.add(1 + int.from_bytes(h[i:i + 8], "little") % (n - 2))
        i += 8
    return [b * block for b in sorted(picks)]


def sample_digest_fd(fd: int, offsets: list[int], block: int = SAMPLE_BLOCK) -> str:
    """128 bits of sha256 over the sampled blocks (each prefixed by its offset), as hex."""
    h = hashlib.sha256()
    for off in offsets:
        data = os.pread(fd, block, off)
        h.update(struct.pack("<QI", off, len(data)))
        h.update(data)
    return h.hexdigest()[:32]


def sample_digest(path: str, layer: int, expert: int, expert_bytes: int, seed: int) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return sample_digest_fd(fd, sample_offsets(layer, expert, expert_bytes, seed))
    finally:
        os.close(fd)


def sums_entry(sums_sha256: str) -> dict[str, Any]:
    """pool.json's `sums` member (optional; pools written before it have none)."""
    return {"file": SUMS, "sha256": sums_sha256, "block": SAMPLE_BLOCK,
            "blocks": SAMPLE_BLOCKS, "digest": "sha256-128"}


class SumsWriter:
    """pool.sums written line by line (memory stays flat however many files), through a temp
    file renamed by close(), which returns its sha256."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, SUMS)
        self.f = open(self.path + ".tmp", "wb")
        self.h = hashlib.sha256()

    def add(self, digest: str) -> None:
        line = (digest + "\n").encode()
        self.f.write(line)
        self.h.update(line)

    def close(self) -> str:
        self.f.close()
        os.replace(self.path + ".tmp", self.path)
        return self.h.hexdigest()

    def abandon(self) -> None:
        self.f.close()
        os.unlink(self.path + ".tmp")


def read_manifest(directory: str) -> dict[str, Any]:
    """pool.json as loaded (bounded in size, not following a symlink). Raises OSError or
    ValueError."""
    fd = os.open(os.path.join(directory, MANIFEST), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                 | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("pool.json is not a regular file")
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ValueError("pool.json is larger than %d bytes" % MAX_MANIFEST_BYTES)
    raw = json.loads(data)
    if not isinstance(raw, dict):
        raise ValueError("pool.json is not a JSON object")
    return raw
