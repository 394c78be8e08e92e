/* --read-log FILE: every demand read's interval, per worker thread, for the
 * validity proof that the agent's reads really run in parallel (paper audit
 * pitfall 2: a serialized baseline). Each worker appends to its own buffer
 * (no lock, no shared cache line on the read path); the buffers are written
 * as JSON lines after the last pass:
 *   {"tid": T, "thread": I, "pass": P, "layer": L, "expert": E,
 *    "t0_ns": A, "t1_ns": B}            (CLOCK_MONOTONIC, around the read)
 * then {"read_log": true, "records": N, "dropped": D}. A worker keeps at most
 * RL_MAX records; the ones past it are counted as dropped. */
#ifndef BENCH_READLOG_H
#define BENCH_READLOG_H

#include <stdint.h>
#include <stdio.h>

#define RL_MAX (1u << 20)

struct rl_rec {
	int64_t t0, t1;
	uint32_t pass, layer, expert;
};

struct rl_buf {
	struct rl_rec *rec;
	uint32_t n, cap;
	uint64_t dropped;
	int tid;
};

void rl_add(struct rl_buf *b, uint32_t pass, uint32_t layer, uint32_t expert, int64_t t0,
	    int64_t t1);
/* 0, or -errno */
int rl_write(const char *path, const struct rl_buf *bufs, uint32_t n);
void rl_free(struct rl_buf *b);

#endif
