"""The compiled simulator kernels (native/sim/simkern.c), loaded with ctypes when present.

Pure: no process is started here. The shared library is looked up, in order, at
$BENCH_SIM_LIB, in the cache dir where `bench.sim.build` compiles it on first use
(``<cache>/libbenchsim-<source hash>.so``, cache = $BENCH_SIM_CACHE, else
$XDG_CACHE_HOME/bench/sim, else ~/.cache/bench/sim) and at native/sim/libbenchsim.so
(`make -C native sim`). A library whose ABI number differs, or that someone other than us (or
root) owns or could write, is ignored. With none found, or with
BENCH_SIM_NATIVE=0, every function here returns None and the callers use their numpy/Python
fallbacks, which give the same hit flags access by access.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from pathlib import Path

import numpy as np

ABI = 4
_NATIVE = Path(__file__).resolve().parents[2] / "native"
SOURCE_CANDIDATES = (_NATIVE / "sim" / "simkern.c",
                     Path(__file__).resolve().parents[1] / "native" / "sim" / "simkern.c")

_lib: ctypes.CDLL | None = None
_lib_path: Path | None = None
_tried = False
_P = ctypes.c_void_p
_I = ctypes.c_int64


def source_path() -> Path | None:
    """The kernels' C source (a checkout's native/ or the installed package's bench/native/)."""
    return next((p for p in SOURCE_CANDIDATES if p.is_file()), None)


def cache_dir() -> Path | None:
    """$BENCH_SIM_CACHE, else $XDG_CACHE_HOME/bench/sim, else ~/.cache/bench/sim (None: no
    home directory to put it in)."""
    env = os.environ.get("BENCH_SIM_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "bench" / "sim"


def cached_library() -> Path | None:
    """Where `bench.sim.build` puts the library for the current source (None: no source or no
    cache dir)."""
    src, cache = source_path(), cache_dir()
    if src is None or cache is None:
        return None
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    return cache / f"libbenchsim-{digest}.so"


def _candidates() -> list[Path]:
    out = []
    env = os.environ.get("BENCH_SIM_LIB")
    if env:
        out.append(Path(env))
    cached = cached_library()
    if cached is not None:
        out.append(cached)
    out.append(_NATIVE / "sim" / "libbenchsim.so")
    return out


def _trusted(path: Path) -> bool:
    """Owned by us (or root) and writable by nobody else: a library anyone else could replace
    is never loaded."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def _open(path: Path) -> ctypes.CDLL | None:
    if not _trusted(path):
        return None
    try:
        lib = ctypes.CDLL(str(path))
        if lib.bench_sim_abi() != ABI:
            return None
    except (OSError, AttributeError):
        return None
    lib.bench_lru_distances.argtypes = [_P, _I, _I, _P]
    lib.bench_lru_hits.argtypes = [_P, _P, _I, _P, _I, _P]
    lib.bench_lru_hits.restype = None
    lib.bench_lfu_hits.argtypes = [_P, _I, _I, _I, _P]
    lib.bench_lfu_perfect_hits.argtypes = [_P, _I, _I, _I, _P]
    lib.bench_belady_hits.argtypes = [_P, _P, _I, _I, _I, _P]
    lib.bench_next_use.argtypes = [_P, _I, _I, _P]
    return lib


def library() -> ctypes.CDLL | None:
    """The loaded kernels, or None (fallbacks). Looked up once per process."""
    global _lib, _lib_path, _tried
    if os.environ.get("BENCH_SIM_NATIVE", "1") == "0":
        return None
    if not _tried:
        _tried = True
        for path in _candidates():
            if path.is_file():
                _lib = _open(path)
                if _lib is not None:
                    _lib_path = path
                    break
    return _lib


def loaded_path() -> Path | None:
    """The file the kernels were loaded from (None: not loaded)."""
    return _lib_path if library() is not None else None


def reset() -> None:
    """Forget the lookup (after a build, or for tests that switch BENCH_SIM_LIB)."""
    global _lib, _lib_path, _tried
    _lib, _lib_path, _tried = None, None, False


def _dense(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Keys as contiguous int64 in [0, nkeys), with nkeys small (at most about 4 x n)."""
    k = np.ascontiguousarray(keys, np.int64)
    n = k.shape[0]
    if n == 0:
        return k, 0
    lo, hi = int(k.min()), int(k.max())
    if lo >= 0 and hi < 4 * n + 1024:
        return k, hi + 1
    k = np.unique(k, return_inverse=True)[1].reshape(-1).astype(np.int64)
    return k, int(k.max()) + 1


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _per_access(kernel: str, keys: np.ndarray) -> np.ndarray | None:
    """One int64 per access from the kernel `kernel(keys, n, nkeys, out)`; None without the
    lib or when the kernel refuses (it returns non-zero)."""
    lib = library()
    if lib is None:
        return None
    k, nkeys = _dense(keys)
    out = np.empty(k.shape[0], np.int64)
    if getattr(lib, kernel)(_ptr(k), k.shape[0], nkeys, _ptr(out)) != 0:
        return None
    return out


def lru_distances(keys: np.ndarray) -> np.ndarray | None:
    return _per_access("bench_lru_distances", keys)


def lru_hits(dist: np.ndarray, caps: np.ndarray, scored: np.ndarray | None) -> np.ndarray | None:
    """Hits (dist < cap, among `scored`) for each capacity, any order; None without the lib."""
    lib = library()
    if lib is None:
        return None
    d = np.ascontiguousarray(dist, np.int64)
    order = np.argsort(caps, kind="stable")
    sc = np.ascontiguousarray(caps[order], np.int64)
    out = np.zeros(sc.shape[0], np.int64)
    m = None if scored is None else np.ascontiguousarray(scored)
    if m is not None:
        m = m.view(np.uint8) if m.dtype == np.bool_ else (m != 0).view(np.uint8)
    lib.bench_lru_hits(_ptr(d), None if m is None else _ptr(m), d.shape[0], _ptr(sc),
                       sc.shape[0], _ptr(out))
    res = np.empty_like(out)
    res[order] = out
    return res


def next_use(keys: np.ndarray) -> np.ndarray | None:
    return _per_access("bench_next_use", keys)


def lfu_hits(keys: np.ndarray, capacity: int, perfect: bool = False) -> np.ndarray | None:
    """LFU hit flags (libCacheSim's in-cache LFU, or with perfect=True the LFU whose counts
    survive eviction); None without the lib."""
    lib = library()
    if lib is None:
        return None
    k, nkeys = _dense(keys)
    hit = np.zeros(k.shape[0], np.uint8)
    fn = lib.bench_lfu_perfect_hits if perfect else lib.bench_lfu_hits
    if fn(_ptr(k), k.shape[0], nkeys, int(capacity), _ptr(hit)) != 0:
        return None
    return hit.view(bool)


def belady_hits(keys: np.ndarray, capacity: int, nxt: np.ndarray) -> np.ndarray | None:
    lib = library()
    if lib is None:
        return None
    k, nkeys = _dense(keys)
    nx = np.ascontiguousarray(nxt, np.int64)
    hit = np.zeros(k.shape[0], np.uint8)
    if lib.bench_belady_hits(_ptr(k), _ptr(nx), k.shape[0], nkeys, int(capacity),
                             _ptr(hit)) != 0:
        return None
    return hit.view(bool)
