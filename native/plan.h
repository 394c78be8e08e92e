/* BPLN plan and hint-plan files (docs/formats.md): loaded whole, validated,
 * then read in place. */
#ifndef BENCH_PLAN_H
#define BENCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_KIND_REPLAY 0
#define PLAN_KIND_HINTS  1

struct plan_iter {
	uint32_t first_pass;
	uint16_t n_passes;
	uint8_t kind;
	uint8_t tokens;
};

struct plan_pass {
	uint32_t layer;
	uint32_t n_reads;
	uint64_t first_read;
};

struct plan {
	uint16_t version, kind;
	uint32_t layers, experts_per_layer;
	uint64_t expert_bytes;
	uint32_t n_iterations, n_passes;
	uint64_t n_reads;
	const struct plan_iter *iters;
	const struct plan_pass *passes;
	const uint32_t *reads;
	void *blob;
	size_t blob_len;
};

/* Load and fully validate; reason names the first defect. -errno/-EINVAL. */
int plan_load(const char *path, uint16_t want_kind, struct plan *p, char *reason, size_t rlen);
void plan_free(struct plan *p);
/* The plan's geometry must be the pool's. */
int plan_check_geometry(const struct plan *p, uint32_t layers, uint32_t experts,
			uint64_t expert_bytes, const char *what, char *reason, size_t rlen);
/* A hint plan has exactly the shape of its replay plan. */
int plan_check_hints(const struct plan *hints, const struct plan *p, char *reason, size_t rlen);

#endif
