"""LRU stack (reuse) distances in one vectorized pass, and the LRU miss counts derived from them.

The stack distance of access t is the number of distinct *other* keys accessed since the previous
access p(t) of the same key (``COLD`` for a first access). An LRU cache of capacity C hits access t
iff ``distance(t) < C`` (Mattson's inclusion property), so one pass gives the hit curve of every
capacity.

Algorithm (pure numpy, O(n log n)): with prev(j) the previous access of key(j) (-1 if none),

    distance(t) = #{j in (p, t) : prev(j) < p}                 (first access of a key inside (p, t))
                = (t - p - 1) - #{j < t : prev(j) > p}          (prev(j) > p implies j > p)

and only warm accesses (prev(j) >= 0) can count. prev() is injective on warm accesses, so ranking
its values turns the warm accesses into a permutation pi, and the count is the number of earlier
entries of pi greater than pi(t), i.e. t's share of the inversions. All of them are answered at
once on a wavelet matrix of pi: ceil(log2 w) levels, each built by one stable partition by a bit
plus a cumulative count of zeros, each advancing every query's range with one vectorized gather.
prev() itself comes from one SIMD sort of (key, position) packed into int64. No Python loop runs
per access.
"""

from __future__ import annotations

import numpy as np

from bench.sim import kernels

COLD = np.iinfo(np.int64).max
"""Stack distance of a key's first access: larger than every capacity, so always a miss."""


def _dense_keys(keys: np.ndarray) -> np.ndarray:
    """Keys as non-negative int64 small enough to pack with a position into one int64."""
    keys = np.asarray(keys)
    if keys.dtype.kind not in "iu":
        raise TypeError(f"keys must be integers, got dtype {keys.dtype}")
    n = keys.shape[0]
    if n == 0:
        return keys.astype(np.int64)
    lo, hi = int(keys.min()), int(keys.max())
    if lo >= 0 and (hi + 1) * (n + 1) < 2**62:
        return keys.astype(np.int64, copy=False)
    return np.unique(keys, return_inverse=True)[1].astype(np.int64).reshape(-1)


def next_use(keys: np.ndarray) -> np.ndarray:
    """Index of the next access of the same key (-1 if none): `prev_next(keys)[1]`, in one C
    scan when the kernels are loaded."""
    native = kernels.next_use(keys)
    return native if native is not None else prev_next(keys)[1]


def prev_next(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of the previous (-1 if none) and next (-1 if none) access of the same key."""
    k = _dense_keys(keys)
    n = k.shape[0]
    prev = np.full(n, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    if n < 2:
        return prev, nxt
    # one SIMD sort of (key, position) packed into an int64 instead of a stable argsort
    packed = np.sort(k * n + np.arange(n, dtype=np.int64))
    order = packed % n
    kk = packed // n
    same = kk[1:] == kk[:-1]
    a, b = order[:-1][same], order[1:][same]
    prev[b] = a
    nxt[a] = b
    return prev, nxt


def _left_smaller(perm: np.ndarray, starts: np.ndarray | None = None) -> np.ndarray:
    """#{i' in [starts[i], i) : perm[i'] < perm[i]} for every i (starts default 0), with perm
    non-negative and distinct inside each range.

    A wavelet matrix over `perm`, queried for all ranges at once: one level per bit, each a
    stable partition by the bit plus a cumulative count of zeros; every query's range [s, e)
    follows its value's bit down the levels, adding the zeros it passes over where the bit is 1.
    """
    w = perm.shape[0]
    res = np.zeros(w, np.int64)
    if w < 2:
        return res
    nbits = max(int(perm.max()).bit_length(), 1)
    idx_t: type[np.signedinteger] = np.int64 if w >= 2**31 - 1 else np.int32
    cur = perm.astype(idx_t)
    v = cur.copy()
    s0 = np.zeros(w, idx_t) if starts is None else starts.astype(idx_t)
    se = np.concatenate((s0, np.arange(w, dtype=idx_t)))  # s then e
    r0 = np.zeros(w + 1, idx_t)
    for level in range(nbits - 1, -1, -1):
        mask = 1 << level
        bit = (cur & mask) != 0
        np.cumsum(~bit, out=r0[1:])
        nzero = r0[w]
        cur = np.concatenate((cur[~bit], cur[bit]))
        r = r0[se]
        vb = (v & mask) != 0
        vb2 = np.concatenate((vb, vb))
        # where v's bit is 1, the zeros in [s, e) are all smaller: count them, follow the ones
        res += (r[w:] - r[:w]) * vb
        se = np.where(vb2, se - r + nzero, r)
    return res


def lru_stack_distances(keys: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """LRU stack distance of every access (int64; ``COLD`` for a key's first access).

    ``keys`` is any integer array (e.g. `Accesses.keys`). Access t hits an LRU cache of capacity
    C iff ``distances[t] < C``. With ``groups`` (e.g. `Accesses.layer`), every group is its own
    cache fed with its own accesses only (the per-layer regime), all computed in one pass.
    """
    keys = np.asarray(keys)
    n = keys.shape[0]
    if n == 0:
        return np.full(0, COLD, np.int64)
    if groups is None:
        return _distances(keys, None)
    dist = np.full(n, COLD, np.int64)
    groups = np.asarray(groups)
    if groups.shape != keys.shape:
        raise ValueError("keys and groups must have the same length")
    order = np.argsort(groups, kind="stable")
    g = np.unique(groups[order], return_inverse=True)[1].reshape(-1).astype(np.int64)
    k = _dense_keys(keys[order])
    if int(k.max()) >= 2**62 // (n + 1) // (int(g.max()) + 1):
        k = np.unique(k, return_inverse=True)[1].reshape(-1).astype(np.int64)
    dist[order] = _distances(g * (int(k.max()) + 1) + k, g)
    return dist


def _distances(keys: np.ndarray, g: np.ndarray | None) -> np.ndarray:
    """Stack distances of a stream whose groups (sorted `g`, or one group) own disjoint keys."""
    if keys.dtype.kind in "iu":        # one pass in C (groups are contiguous)
        native = kernels.lru_distances(keys)
        if native is not None:
            return native
    n = keys.shape[0]
    dist = np.full(n, COLD, np.int64)
    prev, _ = prev_next(keys)
    warm = np.flatnonzero(prev >= 0)
    if warm.size == 0:
        return dist
    p = prev[warm]
    # prev() restricted to warm accesses is injective: rank it into a permutation, so that
    # #{j < t : prev(j) > p} becomes the count of earlier, greater entries of that permutation
    is_prev = np.zeros(n, np.int32)
    is_prev[p] = 1
    perm = (np.cumsum(is_prev) - 1)[p]
    i = np.arange(warm.size, dtype=np.int64)
    if g is None:
        nested = i - _left_smaller(perm)
    else:
        # groups are contiguous, and so are their ranks: count inside the group's own range,
        # on ranks made local to the group (fewer bits, fewer levels)
        gw = g[warm]
        first = np.searchsorted(gw, gw, side="left")
        nested = (i - first) - _left_smaller(perm - first, first)
    dist[warm] = (warm - p - 1) - nested
    return dist


def lru_hits_by_capacity(distances: np.ndarray, capacities, mask: np.ndarray | None = None
                         ) -> np.ndarray:
    """Hits among the accesses selected by `mask` (all if None) for each capacity."""
    caps = np.asarray(list(capacities), np.int64)
    if caps.size == 0:
        return np.zeros(0, np.int64)
    native = kernels.lru_hits(distances, caps, mask)
    if native is not None:
        return native
    d = distances if mask is None else distances[mask]
    warm = np.sort(d[d != COLD])
    return np.searchsorted(warm, caps, side="left").astype(np.int64)


def lru_misses(keys: np.ndarray, capacities, start: int = 0) -> np.ndarray:
    """Misses of an LRU cache of each capacity (in keys) over ``keys``, counted only on accesses
    at positions >= `start` (the cache warms on the accesses before it)."""
    keys = np.asarray(keys)
    d = lru_stack_distances(keys)[start:]
    hits = lru_hits_by_capacity(d, capacities)
    return d.shape[0] - hits


def lru_steady_misses(keys: np.ndarray, capacity: int) -> int:
    """Misses of an LRU cache of `capacity` keys in steady state: the stream runs twice (warm-up,
    then measured) and only the second run's misses count. This is the demand model's figure:
    with capacity = C // expert_bytes and keys = a plan's (layer, expert) key stream, the result
    times expert_bytes is the nominal miss bytes of one pass of the plan."""
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    keys = np.asarray(keys)
    n = keys.shape[0]
    return int(lru_misses(np.concatenate((keys, keys)), [capacity], start=n)[0])
