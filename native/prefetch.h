/* The prefetcher: exactly one worker thread and one overwritable slot, so hints
 * can never pile up (the seed paper's Python prefetcher spawned unbounded
 * threads). Counters, per hinted expert:
 *   submitted   = placed in the slot (when a router pass starts)
 *   overwritten = still in the slot when the next pass's hints replaced them
 *   completed   = taken by the worker and issued (its WILLNEED calls returned /
 *                 its pread finished)
 *   left        = still in the slot when the replay pass ended (dropped then)
 * and submitted = overwritten + completed + left holds exactly at every pass end:
 * the worker always finishes what it took, and every replay pass ends by
 * dropping the slot and waiting for the worker to go idle.
 *
 * advice: one WILLNEED call reads at most the device's readahead window
 * (max(read_ahead_kb, max_sectors_kb), e.g. 128 KiB on many NVMe disks), so an
 * expert is advised as consecutive calls of that window covering all of it;
 * with an advice window of 0 it is one call over the whole expert, of which
 * the kernel reads only the first window (what a naive engine gets). */
#ifndef BENCH_PREFETCH_H
#define BENCH_PREFETCH_H

#include <pthread.h>
#include <stdint.h>

#include "io.h"
#include "pool.h"
#include "util.h"

enum pf_kind { PF_ADVICE, PF_BLOCK };

struct pf_counters {
	uint64_t submitted, overwritten, completed, left;
};

struct prefetcher {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake, idle;
	enum pf_kind kind;
	uint64_t advice_window;    /* bytes per WILLNEED call; 0 = one call per expert */
	const struct pool *pool;
	struct io_cfg io;
	void *buf;
	/* the slot */
	const uint32_t *slot_experts;
	uint32_t slot_layer, slot_n;
	int slot_full;
	int busy, stop, started;
	struct pf_counters c;
	int error;
	char reason[REASON_LEN];
};

/* 0, or -errno with the reason; a failed start leaves nothing initialised (no
 * thread, mutex, condition or buffer) and started 0, so pf_stop on it does nothing. */
int pf_start(struct prefetcher *pf, enum pf_kind kind, const struct pool *pool,
	     const struct io_cfg *io, uint64_t advice_window, char *reason, size_t rlen);
/* Router pass start: the hints for the next pass replace the slot's content. */
void pf_place(struct prefetcher *pf, uint32_t layer, const uint32_t *experts, uint32_t n);
/* Replay pass end: drop the slot (counted as left), wait for the worker to go
 * idle; returns the worker's first error (-errno) with its reason. */
int pf_quiesce(struct prefetcher *pf, char *reason, size_t rlen);
void pf_counters(struct prefetcher *pf, struct pf_counters *out);
void pf_stop(struct prefetcher *pf);

#endif
