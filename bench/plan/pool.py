"""Expert pools on disk: per-expert files of real data plus `pool.json` (docs/formats.md).

`make_pool` is resumable (files already complete are kept), atomic per file (temp + rename),
and refuses to touch a directory holding a different pool. It creates the pool directory only
inside an existing parent unless asked to make the parents (`parents=True`). Like the host's
writer it records a digest of each file's sampled blocks in pool.sums; `verify_pool` checks a
pool's files (presence, type, size, header, sampled content, nothing extra) with the host
runner's verifier (agents/hostrunner/poolcheck.py). `pool_key` names a pool by shape and seed,
as a host keeps it under its pool_dir (`<pool_dir>/<L>x<E>x<S>-s<seed>/`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import InputError, PoolError

if TYPE_CHECKING:
    # the checkout's agents/ is installed as bench.agents (pyproject's package-dir), a mapping
    # a type checker reading the checkout does not follow: it reads the same file as agents.*
    from agents.hostrunner import poolcheck, poolfmt
else:
    from bench.agents.hostrunner import poolcheck, poolfmt

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
               or poolfmt.template_problem(self.path) or poolfmt.seed_problem(self.seed))
        if why:
            raise PoolError(why)

    def relpath(self, layer: int, expert: int) -> str:
        return self.path.format(layer=layer, expert=expert)

    @property
    def total_bytes(self) -> int:
        return self.layers * self.experts_per_layer * self.expert_bytes

    def same_pool(self, other: "PoolSpec") -> bool:
        return asdict(self) == asdict(other)

    @property
    def key(self) -> str:
        """Its name under a host's pool_dir: `<L>x<E>x<S>-s<seed>`."""
        return poolfmt.pool_key(self.layers, self.experts_per_layer, self.expert_bytes,
                                self.seed)


def pool_key(geometry: tuple[int, int, int], seed: int = 0) -> str:
    return poolfmt.pool_key(*geometry, seed)


def pool_path(pool_dir: str, geometry: tuple[int, int, int], seed: int = 0) -> str:
    """The directory of the pool of this geometry (layers, experts, expert_bytes) and seed
    under a host's pool_dir: what the runner writes (`runner.py pool --root`) and what a run's
    spec names."""
    return poolfmt.keyed_dir(pool_dir, *geometry, seed)


def load_manifest(directory: str | Path) -> tuple[PoolSpec, bool]:
    """The pool's spec and whether it is complete."""
    p = Path(directory) / MANIFEST
    try:
        raw = poolfmt.read_manifest(str(directory))
    except FileNotFoundError:
        raise PoolError(f"{p}: no pool manifest",
                        hint="create the pool with `bench pool make`") from None
    except json.JSONDecodeError as exc:
        raise PoolError(f"{p}: manifest is not JSON ({exc.msg})") from None
    except (OSError, ValueError) as exc:
        raise PoolError(f"{p}: unreadable manifest ({exc})") from None
    try:
        f = poolfmt.parse_manifest(raw)
        spec = PoolSpec(f["layers"], f["experts_per_layer"], f["expert_bytes"], f["path"],
                        f["seed"], f["format"])
    except (KeyError, TypeError, ValueError) as exc:
        raise PoolError(f"{p}: manifest lacks or garbles {exc}") from None
    return spec, bool(raw.get("complete", False))


def _write_manifest(directory: Path, spec: PoolSpec, complete: bool,
                    sums: str | None = None) -> None:
    fields = asdict(spec)
    if sums is not None:
        fields["sums"] = poolfmt.sums_entry(sums)
    poolfmt.write_manifest(str(directory), fields, complete)


def expert_header(spec: PoolSpec, layer: int, expert: int) -> bytes:
    return poolfmt.expert_header(layer, expert, spec.expert_bytes, spec.seed)


def _is_complete(path: Path, spec: PoolSpec, layer: int, expert: int) -> bool:
    return poolfmt.file_complete(str(path), expert_header(spec, layer, expert), spec.expert_bytes)


def _write_expert(path: Path, spec: PoolSpec, layer: int, expert: int) -> None:
    import numpy as np      # only the writer needs it (run specs import this module)
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


def _prepare_dir(d: Path, spec: PoolSpec, parents: bool) -> bool:
    """Refuse what make_pool must not write into; True when it creates the directory."""
    if (d / MANIFEST).exists():
        old, _complete = load_manifest(d)
        if not old.same_pool(spec):
            raise PoolError(f"{d} holds a different pool ({old.layers}x{old.experts_per_layer}x"
                            f"{old.expert_bytes} B, seed {old.seed}); refusing to overwrite it",
                            hint="choose another directory or remove that pool first")
        return False
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise PoolError(f"{d} exists and is not a directory",
                        hint="name a new or empty directory")
    if d.exists():
        if any(d.iterdir()):
            raise PoolError(f"{d} is not empty and holds no pool manifest; refusing to write "
                            "into it", hint="name a new or empty directory")
        return False
    if not d.parent.is_dir() and not parents:
        raise InputError(f"{d}: its parent directory {d.parent} does not exist",
                         hint="create it first, or pass --parents to create it")
    d.mkdir(parents=True)
    return True


def make_pool(directory: str | Path, spec: PoolSpec, progress: ProgressFn | None = None,
              parents: bool = False) -> dict:
    """Create or resume a pool; returns counts of experts written and kept, and whether the
    directory was created."""
    d = Path(directory)
    created = _prepare_dir(d, spec, parents)
    _write_manifest(d, spec, complete=False)
    total = spec.layers * spec.experts_per_layer
    written = kept = 0
    done_bytes = 0
    sums_out = poolfmt.SumsWriter(str(d))
    try:
        for layer in range(spec.layers):
            for expert in range(spec.experts_per_layer):
                path = d / spec.relpath(layer, expert)
                if _is_complete(path, spec, layer, expert):
                    kept += 1
                else:
                    _write_expert(path, spec, layer, expert)
                    written += 1
                    done_bytes += spec.expert_bytes
                sums_out.add(poolfmt.sample_digest(str(path), layer, expert,
                                                   spec.expert_bytes, spec.seed))
                if progress is not None:
                    progress(written + kept, total, done_bytes)
    except BaseException:           # interrupted anyhow: drop the partial pool.sums, re-raise
        sums_out.abandon()
        raise
    sums = sums_out.close()
    _write_manifest(d, spec, complete=True, sums=sums)
    return {"directory": str(d), "created": created, "key": spec.key, "experts": total,
            "written": written, "kept": kept, "bytes": spec.total_bytes}


def verify_pool(directory: str | Path) -> dict:
    """The verifier's report (agents/hostrunner/poolcheck.py: verify): every file present,
    regular, of the right size and header, its sampled blocks matching pool.sums, nothing
    extra; `problems` holds one line each."""
    return poolcheck.verify(str(directory))


def check_pool(directory: str | Path) -> PoolSpec:
    """A complete, verified pool's spec, or PoolError naming what is wrong."""
    spec, complete = load_manifest(directory)
    if not complete:
        raise PoolError(f"{directory}: pool is incomplete", hint="resume it with `bench pool make`")
    rep = verify_pool(directory)
    if not rep["ok"]:
        first = "; ".join(p["line"] for p in rep["problems"][:3])
        more = rep["problem_count"] - min(3, len(rep["problems"]))
        raise PoolError(f"{directory}: {first}" + (f" (and {more} more)" if more > 0 else ""),
                        hint="`bench pool check` lists every problem; remove a damaged file "
                             "and `bench pool make` (same shape) writes it again")
    return spec
