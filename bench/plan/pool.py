"""Expert pools on disk: per-expert files of real data plus `pool.json` (docs/formats.md).

`make_pool` is resumable (files already complete are kept), atomic per file (temp + rename),
and refuses to touch a directory holding a different pool.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.errors import PoolError

DEFAULT_PATH = "L{layer:03d}/E{expert:04d}.bin"
MANIFEST = "pool.json"
HEADER = struct.Struct("<8sIIQQ")  # magic, layer, expert, expert_bytes, seed: 32 bytes
MAGIC = b"BXPERT\0\0"
_FIELD = re.compile(r"\{(layer|expert)(?::0(\d+)d)?\}")
_CHUNK = 8 << 20


@dataclass(frozen=True)
class PoolSpec:
    layers: int
    experts_per_layer: int
    expert_bytes: int
    path: str = DEFAULT_PATH
    seed: int = 0
    format: int = 1

    def __post_init__(self):
        for name in ("layers", "experts_per_layer", "expert_bytes"):
            if getattr(self, name) <= 0:
                raise PoolError(f"pool {name} must be positive, got {getattr(self, name)}")
        if self.expert_bytes < HEADER.size:
            raise PoolError(f"expert_bytes must be at least {HEADER.size}")
        fields = sorted(m.group(1) for m in _FIELD.finditer(self.path))
        rest = _FIELD.sub("", self.path)
        if fields != ["expert", "layer"] or "{" in rest or "}" in rest:
            raise PoolError(f"pool path template {self.path!r} must use {{layer}} and {{expert}} "
                            "once each, optionally zero padded as {layer:03d}")
        if self.path.startswith("/") or ".." in Path(self.path).parts:
            raise PoolError(f"pool path template {self.path!r} must stay inside the pool")

    def relpath(self, layer: int, expert: int) -> str:
        return self.path.format(layer=layer, expert=expert)

    @property
    def total_bytes(self) -> int:
        return self.layers * self.experts_per_layer * self.expert_bytes

    def same_pool(self, other: "PoolSpec") -> bool:
        return asdict(self) == asdict(other)


def load_manifest(directory: str | Path) -> tuple[PoolSpec, bool]:
    """The pool's spec and whether it is complete."""
    p = Path(directory) / MANIFEST
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise PoolError(f"{p}: no pool manifest", hint="create the pool with `bench pool make`") from None
    except json.JSONDecodeError as exc:
        raise PoolError(f"{p}: manifest is not JSON ({exc.msg})") from None
    try:
        spec = PoolSpec(int(raw["layers"]), int(raw["experts_per_layer"]), int(raw["expert_bytes"]),
                        str(raw.get("path", DEFAULT_PATH)), int(raw.get("seed", 0)),
                        int(raw.get("format", 1)))
    except (KeyError, TypeError, ValueError) as exc:
        raise PoolError(f"{p}: manifest lacks or garbles {exc}") from None
    return spec, bool(raw.get("complete", False))


def _write_manifest(directory: Path, spec: PoolSpec, complete: bool) -> None:
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(dict(asdict(spec), complete=complete), sort_keys=True) + "\n")
    tmp.replace(directory / MANIFEST)


def expert_header(spec: PoolSpec, layer: int, expert: int) -> bytes:
    return HEADER.pack(MAGIC, layer, expert, spec.expert_bytes, spec.seed)


def _is_complete(path: Path, spec: PoolSpec, layer: int, expert: int) -> bool:
    try:
        if path.stat().st_size != spec.expert_bytes:
            return False
        with path.open("rb") as fh:
            return fh.read(HEADER.size) == expert_header(spec, layer, expert)
    except FileNotFoundError:
        return False


def _write_expert(path: Path, spec: PoolSpec, layer: int, expert: int) -> None:
    rng = np.random.Generator(np.random.PCG64([spec.seed, layer, expert]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        fh.write(expert_header(spec, layer, expert))
        left = spec.expert_bytes - HEADER.size
        while left > 0:
            n = min(left, _CHUNK)
            fh.write(rng.bytes(n))
            left -= n
    tmp.replace(path)


ProgressFn = Callable[[int, int, int], None]  # (experts done, experts total, bytes written)


def make_pool(directory: str | Path, spec: PoolSpec, progress: ProgressFn | None = None) -> dict:
    """Create or resume a pool; returns counts of experts written and kept."""
    d = Path(directory)
    if (d / MANIFEST).exists():
        old, _complete = load_manifest(d)
        if not old.same_pool(spec):
            raise PoolError(f"{d} holds a different pool ({old.layers}x{old.experts_per_layer}x"
                            f"{old.expert_bytes} B, seed {old.seed}); refusing to overwrite it",
                            hint="choose another directory or remove that pool first")
    elif d.exists() and any(d.iterdir()):
        raise PoolError(f"{d} is not empty and holds no pool manifest; refusing to write into it")
    d.mkdir(parents=True, exist_ok=True)
    _write_manifest(d, spec, complete=False)
    total = spec.layers * spec.experts_per_layer
    written = kept = 0
    done_bytes = 0
    for layer in range(spec.layers):
        for expert in range(spec.experts_per_layer):
            path = d / spec.relpath(layer, expert)
            if _is_complete(path, spec, layer, expert):
                kept += 1
            else:
                _write_expert(path, spec, layer, expert)
                written += 1
                done_bytes += spec.expert_bytes
            if progress is not None:
                progress(written + kept, total, done_bytes)
    _write_manifest(d, spec, complete=True)
    return {"directory": str(d), "experts": total, "written": written, "kept": kept,
            "bytes": spec.total_bytes}


def check_pool(directory: str | Path) -> PoolSpec:
    """A complete pool's spec, or PoolError naming what is wrong."""
    spec, complete = load_manifest(directory)
    if not complete:
        raise PoolError(f"{directory}: pool is incomplete", hint="resume it with `bench pool make`")
    return spec
