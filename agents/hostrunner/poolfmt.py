"""The expert pool's on-disk format (docs/formats.md), one definition for both writers: the
controller's `bench.pool` (imports this as bench.agents.hostrunner.poolfmt) and the host's
`runner.py pool` (poolwriter.py).

A pool is a directory of per-expert files plus `pool.json`. Each file holds expert_bytes bytes:
a 32-byte header (magic "BXPERT\\0\\0", u32 layer, u32 expert, u64 expert_bytes, u64 seed,
little-endian) and then pseudo-random bytes that are really written. A file is complete when it
has the right size and header. pool.json holds MANIFEST_KEYS plus `complete`, written sorted by
key, one line; `complete` is true only once every file is."""

from __future__ import annotations

import json
import os
import re
import struct
from typing import Any

MAGIC = b"BXPERT\0\0"
HEADER = struct.Struct("<8sIIQQ")   # magic, layer, expert, expert_bytes, seed: 32 bytes
DEFAULT_PATH = "L{layer:03d}/E{expert:04d}.bin"
MANIFEST = "pool.json"
FORMAT = 1
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
    return manifest_fields(int(raw["layers"]), int(raw["experts_per_layer"]),
                           int(raw["expert_bytes"]), str(raw.get("path", DEFAULT_PATH)),
                           int(raw.get("seed", 0)), int(raw.get("format", FORMAT)))


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
