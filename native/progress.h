/* Live progress for whoever watches a run (the host-side runner): a small shared file mapping
 * the replay updates at every iteration without a system call, so watching costs the measured
 * loop nothing. Layout (native-endian uint32 words): [0] magic 'BPG1', [1] sequence (odd while
 * an update is in flight: readers retry), [2] pass, [3] passes, [4] iterations done in the
 * pass, [5] iterations per pass. */
#ifndef BENCH_PROGRESS_H
#define BENCH_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#define PROGRESS_MAGIC 0x31475042u /* "BPG1" in a little-endian file */
#define PROGRESS_BYTES 4096

struct progress {
	uint32_t *w;   /* NULL: no progress file */
};

/* 0, or -errno with the reason written. */
int progress_open(struct progress *p, const char *path, uint32_t passes, uint32_t iterations,
		  char *reason, size_t rlen);
void progress_set(struct progress *p, uint32_t pass, uint32_t done);
void progress_close(struct progress *p);

#endif
