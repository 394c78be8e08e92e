/* The pinned arena (modes pinned and hybrid): one mlocked anonymous mapping of
 * --arena-bytes, holding the most frequent experts by a frequency table. */
#ifndef BENCH_ARENA_H
#define BENCH_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "plan.h"
#include "pool.h"

struct arena {
	char *base;
	uint64_t bytes;       /* mapped and locked: --arena-bytes rounded up to the page size */
	uint64_t slots;       /* experts that fit: floor(--arena-bytes / expert_bytes) */
	uint64_t n_loaded;
	int32_t *slot_of;     /* [layer * E + expert] -> slot, or -1 */
	uint64_t preload_bytes;
	int64_t preload_ns;
};

/* counts[layer * E + expert]: from the plan's reads, or from a --freq file. */
int freq_from_plan(const struct plan *p, uint64_t *counts);
int freq_from_file(const char *path, uint32_t layers, uint32_t experts, uint64_t *counts,
		   char *reason, size_t rlen);

/* Map and mlock the arena; any mlock failure is fatal (-errno, reason). */
int arena_create(struct arena *a, uint64_t arena_bytes, const struct pool *pool,
		 char *reason, size_t rlen);
/* Fill it by descending count, ties by ascending (layer, expert), until the
 * next expert would not fit; experts with count 0 are never loaded. */
int arena_preload(struct arena *a, const struct pool *pool, const uint64_t *counts,
		  char *reason, size_t rlen);
void arena_destroy(struct arena *a);

#endif
