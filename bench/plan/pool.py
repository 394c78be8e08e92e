"""Expert pools on disk: per-expert files of real data plus `pool.json` (docs/formats.md).

`make_pool` is resumable (files already complete are kept), atomic per file (temp + rename),
and refuses to touch a directory holding a different pool.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.errors import PoolError

if TYPE_CHECKING:
    # the checkout's agents/ is installed as bench.agents (pyproject's package-dir), a mapping
    # a type checker reading the checkout does not follow: it reads the same file as agents.*
    from agents.hostrunner import poolfmt
else:
    from bench.agents.hostrunner import poolfmt

# one format definition for the controller and the host's writer (runner.py pool)
DEFAULT_PATH, MANIFEST, HEADER, MAGIC = (poolfmt.DEFAULT_PATH, poolfmt.MANIFEST, poolfmt.HEADER,
                                         poolfmt.MAGIC)
_CHUNK = 8 << 20


@dataclass(frozen=True)
class PoolSpec:
    layers: int
    experts_per_layer: int
    expert_bytes: int
    path: str = DEFAULT_PATH
    seed: int = 0
    format: int = 1

    def __post_init__(self) -> None:
        why = (poolfmt.geometry_problem(self.layers, self.experts_per_layer, self.expert_bytes)
               or poolfmt.template_problem(self.path))
        if why:
            raise PoolError(why)

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
        raise PoolError(f"{p}: no pool manifest",
                        hint="create the pool with `bench pool make`") from None
    except json.JSONDecodeError as exc:
        raise PoolError(f"{p}: manifest is not JSON ({exc.msg})") from None
    try:
        f = poolfmt.parse_manifest(raw)
        spec = PoolSpec(f["layers"], f["experts_per_layer"], f["expert_bytes"], f["path"],
                        f["seed"], f["format"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PoolError(f"{p}: manifest lacks or garbles {exc}") from None
    return spec, bool(raw.get("complete", False))


def _write_manifest(directory: Path, spec: PoolSpec, complete: bool) -> None:
    poolfmt.write_manifest(str(directory), asdict(spec), complete)


def expert_header(spec: PoolSpec, layer: int, expert: int) -> bytes:
    return poolfmt.expert_header(layer, expert, spec.expert_bytes, spec.seed)


def _is_complete(path: Path, spec: PoolSpec, layer: int, expert: int) -> bool:
    return poolfmt.file_complete(str(path), expert_header(spec, layer, expert), spec.expert_bytes)


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
