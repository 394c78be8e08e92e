/* Live progress for whoever watches a run (the host-side runner): a small shared file mapping
 * the replay updates at every iteration without a system call, so watching costs the measured
 * loop nothing. Layout (native-endian uint32 words): [0] magic 'BPG1', [1] sequence (odd while
 * an update is in flight: readers retry), [2] pass, [3] passes, [4] iterations done in the
 * pass, [5] iterations per pass.
 *
 * A seqlock with one writer (the replay's main thread). Every word is a C11 atomic, so the
 * protocol is race-free by the C memory model (ThreadSanitizer agrees, `make tsan`), and
 * lock-free atomics of this size are address-free, so another process mapping the file reads
 * the same words. Writer: sequence odd (relaxed), each data word with a release store,
 * sequence even with a release store. Reader (progress_read, or agents/runner.py's
 * read_progress): sequence with an acquire load, the data words with acquire loads, the
 * sequence again; a copy counts only when both sequence reads agree and are even. A data
 * load that saw an update's value synchronises with its release store, which follows the
 * odd sequence store, so the second sequence read cannot still return the first. No fences:
 * on x86_64 and aarch64 release stores and acquire loads cost what plain ones do (mov, or
 * stlr/ldar), and GCC's ThreadSanitizer does not model atomic_thread_fence. */
#ifndef BENCH_PROGRESS_H
#define BENCH_PROGRESS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define PROGRESS_MAGIC 0x31475042u /* "BPG1" in a little-endian file */
#define PROGRESS_BYTES 4096

enum { PW_MAGIC, PW_SEQ, PW_PASS, PW_PASSES, PW_DONE, PW_ITERATIONS, PW_WORDS };

struct progress {
	_Atomic uint32_t *w;   /* NULL: no progress file */
};

struct progress_view {
	uint32_t seq, pass, passes, done, iterations;
};

/* 0, or -errno with the reason written. */
int progress_open(struct progress *p, const char *path, uint32_t passes, uint32_t iterations,
		  char *reason, size_t rlen);
/* Only ever called by one thread at a time (the writer). */
void progress_set(struct progress *p, uint32_t pass, uint32_t done);
/* A consistent copy: 0; -ENODATA without a (valid) mapping; -EAGAIN when every one of `tries`
 * attempts met an update in flight. Safe from any thread, concurrently with progress_set. */
int progress_read(const struct progress *p, struct progress_view *v, unsigned tries);
void progress_close(struct progress *p);

#endif
