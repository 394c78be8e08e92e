/* Cache-simulator kernels for bench.sim (loaded with ctypes by bench/sim/kernels.py).
 *
 * Not part of bench-agent: built as a shared library by `make -C native sim` (or on first use
 * by bench.sim.build). Keys are dense: 0 <= key < nkeys. Every function returns 0, or -1 when
 * it could not allocate its scratch memory (the caller then uses the numpy fallback).
 *
 * Semantics are exactly those of the pure-Python/numpy fallbacks in bench/sim/stackdist.py and
 * bench/sim/policies.py (see their docstrings): identical hit flags, access by access.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define COLD INT64_MAX

/* LRU stack distance of every access: the number of distinct other keys accessed since the
 * previous access of the same key (COLD for a first access). A bitset over positions holds a 1
 * at the latest access of every key seen so far, and a Fenwick tree counts the ones of each
 * 64-bit word before the current one (n / 64 entries: both stay in the L2 cache; a word enters
 * the tree once, when t leaves it). With D keys seen, the distance of t (previous access p)
 * is D - #ones in [0, p]. */
int bench_lru_distances(const int64_t *keys, int64_t n, int64_t nkeys, int64_t *dist)
{
    int64_t nw = n / 64 + 1;
    uint64_t *bits = calloc((size_t)nw, sizeof *bits);
    int32_t *tree = calloc((size_t)nw + 1, sizeof *tree);
    int64_t *last = malloc((size_t)(nkeys > 0 ? nkeys : 1) * sizeof *last);
    if (!bits || !tree || !last) {
        free(bits);
        free(tree);
        free(last);
        return -1;
    }
    memset(last, 0xff, (size_t)(nkeys > 0 ? nkeys : 1) * sizeof *last); /* all -1 */
    int64_t seen = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t k = keys[t];
        int64_t p = last[k];
        if (p < 0) {
            dist[t] = COLD;
            seen++;
        } else {
            int64_t w = p >> 6, s = 0;
            unsigned b = (unsigned)(p & 63);
            uint64_t upto = b == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (b + 1)) - 1);
            for (int64_t i = w; i > 0; i -= i & -i)      /* ones in words [0, w) */
                s += tree[i];
            s += __builtin_popcountll(bits[w] & upto);
            dist[t] = seen - s;
            bits[w] &= ~((uint64_t)1 << b);
            if (w < (t >> 6))                   /* the current word is not in the tree yet */
                for (int64_t i = w + 1; i <= nw; i += i & -i)
                    tree[i]--;
        }
        bits[t >> 6] |= (uint64_t)1 << (t & 63);
        if ((t & 63) == 63 || t == n - 1) {     /* leaving word t >> 6: add its ones */
            int32_t ones = (int32_t)__builtin_popcountll(bits[t >> 6]);
            for (int64_t i = (t >> 6) + 1; i <= nw; i += i & -i)
                tree[i] += ones;
        }
        last[k] = t;
    }
    free(bits);
    free(tree);
    free(last);
    return 0;
}

/* hits[c] = #{t : scored[t] (or every t if scored is NULL), dist[t] < caps[c]}; caps sorted
 * ascending (so that caps[ncaps - 1] bounds every hit). */
void bench_lru_hits(const int64_t *dist, const uint8_t *scored, int64_t n, const int64_t *caps,
                    int64_t ncaps, int64_t *hits)
{
    memset(hits, 0, (size_t)ncaps * sizeof *hits);
    if (ncaps == 0)
        return;
    int64_t top = caps[ncaps - 1];
    for (int64_t t = 0; t < n; t++) {
        int64_t d = dist[t];
        if (d >= top || (scored && !scored[t]))
            continue;
        for (int64_t c = 0; c < ncaps; c++)   /* branch-free: a few compares beat a search */
            hits[c] += d < caps[c];
    }
}

/* LFU with one FIFO list per count (a hit appends the key to the next count's list): evict the
 * cached key of smallest count, among equal counts the one that reached its count earliest; a
 * miss admits the key with its count + 1. keep_counts = 0 is libCacheSim's LFU (a count is
 * forgotten on eviction, so every admission starts at 1); keep_counts = 1 is perfect LFU (the
 * counts of every key ever accessed are kept). */
static int lfu_hits(const int64_t *keys, int64_t n, int64_t nkeys, int64_t capacity,
                    uint8_t *hit, int keep_counts)
{
    memset(hit, 0, (size_t)n);
    if (capacity <= 0 || n == 0)
        return 0;
    size_t nk = (size_t)nkeys, nf = (size_t)n + 2;
    int64_t *cnt = calloc(nk, sizeof *cnt);
    uint8_t *in = calloc(nk, 1);                   /* 1: cached */
    int64_t *nx = malloc(nk * sizeof *nx), *pv = malloc(nk * sizeof *pv);
    int64_t *head = malloc(nf * sizeof *head), *tail = malloc(nf * sizeof *tail);
    if (!cnt || !in || !nx || !pv || !head || !tail) {
        free(cnt); free(in); free(nx); free(pv); free(head); free(tail);
        return -1;
    }
    memset(head, 0xff, nf * sizeof *head);
    memset(tail, 0xff, nf * sizeof *tail);
    int64_t size = 0, min_f = 0;
#define UNLINK(k, f) do { \
        if (pv[k] >= 0) nx[pv[k]] = nx[k]; else head[f] = nx[k]; \
        if (nx[k] >= 0) pv[nx[k]] = pv[k]; else tail[f] = pv[k]; } while (0)
#define APPEND(k, f) do { \
        pv[k] = tail[f]; nx[k] = -1; \
        if (tail[f] >= 0) nx[tail[f]] = k; else head[f] = k; \
        tail[f] = k; } while (0)
    for (int64_t t = 0; t < n; t++) {
        int64_t k = keys[t], f = cnt[k];
        if (in[k]) {
            hit[t] = 1;
            UNLINK(k, f);
            if (head[f] < 0 && min_f == f)
                min_f = f + 1;
            cnt[k] = ++f;
            APPEND(k, f);
            continue;
        }
        cnt[k] = ++f;
        if (size >= capacity) {
            int64_t v = head[min_f];
            UNLINK(v, min_f);
            in[v] = 0;
            if (!keep_counts)
                cnt[v] = 0;
            while (min_f < f && head[min_f] < 0)   /* the next smallest, at most f */
                min_f++;
        } else {
            size++;
        }
        in[k] = 1;
        APPEND(k, f);
        if (size == 1 || f < min_f)
            min_f = f;
    }
#undef UNLINK
#undef APPEND
    free(cnt); free(in); free(nx); free(pv); free(head); free(tail);
    return 0;
}

int bench_lfu_hits(const int64_t *keys, int64_t n, int64_t nkeys, int64_t capacity,
                   uint8_t *hit)
{
    return lfu_hits(keys, n, nkeys, capacity, hit, 0);
}

int bench_lfu_perfect_hits(const int64_t *keys, int64_t n, int64_t nkeys, int64_t capacity,
                           uint8_t *hit)
{
    return lfu_hits(keys, n, nkeys, capacity, hit, 1);
}

/* Place key k at heap slot i or above it (a max-heap on pri[]), moving the keys it passes
 * down; pos[] follows every move. */
static inline void sift_up(int64_t *heap, int64_t *pos, const int64_t *pri, int64_t i,
                           int64_t k)
{
    int64_t q = pri[k];
    while (i > 0) {
        int64_t up = (i - 1) / 2, u = heap[up];
        if (pri[u] >= q)
            break;
        heap[i] = u;
        pos[u] = i;
        i = up;
    }
    heap[i] = k;
    pos[k] = i;
}

/* Belady's MIN (demand paging): on a miss with a full cache, evict the cached key whose next
 * use is furthest; nxt[t] is the next access of keys[t] (-1: never, ranked as n + t so such
 * keys go first). An indexed max-heap of the cached keys by next use. */
int bench_belady_hits(const int64_t *keys, const int64_t *nxt, int64_t n, int64_t nkeys,
                      int64_t capacity, uint8_t *hit)
{
    memset(hit, 0, (size_t)n);
    if (capacity <= 0 || n == 0)
        return 0;
    int64_t cap = capacity < nkeys ? capacity : nkeys;
    int64_t *heap = malloc((size_t)cap * sizeof *heap);
    int64_t *pos = malloc((size_t)nkeys * sizeof *pos);   /* -1: not cached */
    int64_t *pri = malloc((size_t)nkeys * sizeof *pri);
    if (!heap || !pos || !pri) {
        free(heap); free(pos); free(pri);
        return -1;
    }
    memset(pos, 0xff, (size_t)nkeys * sizeof *pos);
    int64_t size = 0;
    for (int64_t t = 0; t < n; t++) {
        int64_t k = keys[t];
        int64_t q = nxt[t] >= 0 ? nxt[t] : n + t;
        int64_t i;
        if (pos[k] >= 0) {               /* hit: the priority grows, sift up */
            hit[t] = 1;
            pri[k] = q;
            sift_up(heap, pos, pri, pos[k], k);
            continue;
        }
        pri[k] = q;
        if (size < capacity) {           /* admit: push */
            sift_up(heap, pos, pri, size++, k);
            continue;
        }
        pos[heap[0]] = -1;               /* evict the root, the new key sifts down from it */
        i = 0;
        for (;;) {
            int64_t c = 2 * i + 1;
            if (c >= size)
                break;
            if (c + 1 < size && pri[heap[c + 1]] > pri[heap[c]])
                c++;
            if (pri[heap[c]] <= q)
                break;
            heap[i] = heap[c];
            pos[heap[i]] = i;
            i = c;
        }
        heap[i] = k;
        pos[k] = i;
    }
    free(heap); free(pos); free(pri);
    return 0;
}

/* Next access of the same key (-1: none) for every access: one backward scan. */
int bench_next_use(const int64_t *keys, int64_t n, int64_t nkeys, int64_t *nxt)
{
    int64_t *seen = malloc((size_t)(nkeys > 0 ? nkeys : 1) * sizeof *seen);
    if (!seen)
        return -1;
    memset(seen, 0xff, (size_t)(nkeys > 0 ? nkeys : 1) * sizeof *seen);
    for (int64_t t = n - 1; t >= 0; t--) {
        nxt[t] = seen[keys[t]];
        seen[keys[t]] = t;
    }
    free(seen);
    return 0;
}

/* Bumped whenever a signature or a semantic changes: a library reporting another ABI is not
 * loaded (bench/sim/kernels.py ABI). */
int bench_sim_abi(void)
{
    return 4;
}
