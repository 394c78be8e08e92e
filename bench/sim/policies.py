"""Sequential cache policies on one key stream: LFU (two kinds) and Belady (demand paging,
unit-size keys).

Both return a hit flag per access (numpy bool array) for one capacity; the caller scores windows.

LFU is libCacheSim's ``LFU`` exactly (checked access by access against the `libcachesim` Python
package): on a miss with a full cache, evict the key with the smallest access count; counts start
at 1 on admission and are forgotten on eviction; among keys of equal count, evict the one that
reached that count earliest (libCacheSim keeps one FIFO list per count and appends a key to the
next list on each hit, so this is the key whose last access is oldest, i.e. LRU among ties, and
not the one inserted first). Every miss is admitted, the new key included after the eviction.

Perfect LFU (``lfu_perfect_hits``) differs in one point: a key's count survives its eviction
(the counts of every key ever accessed are kept, "perfect LFU" in the caching literature), so
a miss re-admits a key with its kept count + 1. The victim is still the cached key of smallest
count, among equal counts the one that reached its count earliest, and every miss is admitted
(the newcomer too, whatever its count). With a cache smaller than one pass (B < k) in-cache LFU
freezes on whichever keys first reached a count of 2, while perfect LFU keeps the keys of
highest running count: the paper's B=8 figures (LFU 12.7% above static 9.8%) need the latter.

Belady is the offline optimum (MIN): on a miss with a full cache, evict the cached key whose next
use is furthest in the future; keys never used again go first (any of them: the miss count does
not depend on which). Every miss is admitted.
"""

from __future__ import annotations

import heapq

import numpy as np

from bench.sim import kernels
from bench.sim.stackdist import next_use


def _leave_bucket(buckets: dict, k, f: int, min_f: int) -> int:
    """Take the hit key k out of the bucket of count f (dropping the bucket when it empties);
    returns the least count that has cached keys once k counts f + 1."""
    b = buckets[f]
    del b[k]
    if not b:
        del buckets[f]
        if min_f == f:
            return f + 1
    return min_f


def lfu_hits(keys: np.ndarray, capacity: int) -> np.ndarray:
    """Hit flag of each access of an LFU cache of `capacity` keys (libCacheSim's LFU)."""
    n = len(keys)
    hits = np.zeros(n, bool)
    if capacity <= 0 or n == 0:
        return hits
    native = kernels.lfu_hits(np.asarray(keys), capacity)
    if native is not None:
        return native
    out = bytearray(n)
    freq: dict = {}              # cached key -> count
    buckets: dict = {}           # count -> dict of keys in FIFO order of reaching that count
    min_f = 0
    size = 0
    for t, k in enumerate(np.asarray(keys).tolist()):
        f = freq.get(k)
        if f is not None:
            out[t] = 1
            min_f = _leave_bucket(buckets, k, f, min_f)
            f += 1
            freq[k] = f
            nb = buckets.get(f)
            if nb is None:
                buckets[f] = {k: None}
            else:
                nb[k] = None
            continue
        if size >= capacity:
            b = buckets[min_f]
            victim = next(iter(b))
            del b[victim]
            if not b:
                del buckets[min_f]
            del freq[victim]
        else:
            size += 1
        freq[k] = 1
        b1 = buckets.get(1)
        if b1 is None:
            buckets[1] = {k: None}
        else:
            b1[k] = None
        min_f = 1
    hits[:] = np.frombuffer(bytes(out), np.uint8).astype(bool)
    return hits


def lfu_perfect_hits(keys: np.ndarray, capacity: int) -> np.ndarray:
    """Hit flag of each access of a perfect-LFU cache of `capacity` keys (counts kept for
    evicted keys)."""
    keys = np.asarray(keys)
    n = keys.shape[0]
    if capacity <= 0 or n == 0:
        return np.zeros(n, bool)
    native = kernels.lfu_hits(keys, capacity, perfect=True)
    if native is not None:
        return native
    out = bytearray(n)
    count: dict = {}             # every key seen -> count (kept across evictions)
    cached: set = set()
    buckets: dict = {}           # count -> dict of cached keys in FIFO order of reaching it
    min_f = 0
    for t, k in enumerate(keys.tolist()):
        f = count.get(k, 0)
        if k in cached:
            out[t] = 1
            min_f = _leave_bucket(buckets, k, f, min_f)
        elif len(cached) >= capacity:
            b = buckets[min_f]
            victim = next(iter(b))
            del b[victim]
            cached.discard(victim)
            if not b:
                del buckets[min_f]
                while min_f < f + 1 and min_f not in buckets:   # the next smallest, <= f + 1
                    min_f += 1
        f += 1
        count[k] = f
        if k not in cached:
            cached.add(k)
            if len(cached) == 1 or f < min_f:
                min_f = f
        buckets.setdefault(f, {})[k] = None
    return np.frombuffer(bytes(out), np.uint8).astype(bool)


def belady_hits(keys: np.ndarray, capacity: int, nxt: np.ndarray | None = None) -> np.ndarray:
    """Hit flag of each access of Belady's MIN with `capacity` keys (demand paging).

    `nxt` (optional) is each access's next use of the same key (-1 if none), as `prev_next`
    returns it; pass it to share the computation across capacities.
    """
    keys = np.asarray(keys)
    n = keys.shape[0]
    hits = np.zeros(n, bool)
    if capacity <= 0 or n == 0:
        return hits
    if nxt is None:
        nxt = next_use(keys)
    native = kernels.belady_hits(keys, capacity, nxt)
    if native is not None:
        return native
    # Next use as a unique priority: a real position, or n + t for "never again" (beyond every
    # real position, so such keys are evicted first). The heap holds -priority; the cached key
    # behind a priority q is keys[q] (or keys[q - n]), so entries are plain ints. An entry goes
    # stale when its key is accessed at time q; stale priorities are <= now while live ones are
    # > now, so the heap's top is always live and stale entries are only purged when the heap
    # grows large.
    prio = np.where(nxt >= 0, nxt, n + np.arange(n, dtype=np.int64)).tolist()
    klist = keys.tolist()
    key_of = klist + klist
    out = bytearray(n)
    cached: set[int] = set()
    heap: list[int] = []
    push, replace = heapq.heappush, heapq.heapreplace
    limit = 4 * capacity + 64
    for t in range(n):
        k = klist[t]
        q = prio[t]
        if k in cached:
            out[t] = 1
            push(heap, -q)
        elif len(cached) < capacity:
            cached.add(k)
            push(heap, -q)
        else:
            victim = key_of[-heap[0]]
            cached.discard(victim)
            cached.add(k)
            replace(heap, -q)
        if len(heap) > limit:
            heap = [e for e in heap if -e > t]
            heapq.heapify(heap)
    hits[:] = np.frombuffer(bytes(out), np.uint8).astype(bool)
    return hits
