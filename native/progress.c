#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util.h"

/* the file is shared with other processes word by word: the atomics must be plain 4-byte
 * words that need no lock */
_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic words are 4 bytes");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "4-byte atomics are always lock-free");
_Static_assert(PW_WORDS * sizeof(uint32_t) <= PROGRESS_BYTES, "layout fits the file");

int progress_open(struct progress *p, const char *path, uint32_t passes, uint32_t iterations,
		  char *reason, size_t rlen)
{
	_Atomic uint32_t *w;
	void *m;
	int fd, ret = 0;

	p->w = NULL;
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		set_reason(reason, rlen, "--progress %s: %s", path, strerror(-ret));
		return ret;
	}
	if (ftruncate(fd, PROGRESS_BYTES)) {
		ret = -errno;
		set_reason(reason, rlen, "--progress %s: ftruncate: %s", path, strerror(-ret));
		goto cleanup;
	}
	m = mmap(NULL, PROGRESS_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		ret = -errno;
		set_reason(reason, rlen, "--progress %s: mmap: %s", path, strerror(-ret));
		goto cleanup;
	}
	w = m;
	/* nobody can trust the words before the magic appears: relaxed stores, then the
	 * sequence and the magic with release */
	atomic_store_explicit(&w[PW_PASS], 0, memory_order_relaxed);
	atomic_store_explicit(&w[PW_PASSES], passes, memory_order_relaxed);
	atomic_store_explicit(&w[PW_DONE], 0, memory_order_relaxed);
	atomic_store_explicit(&w[PW_ITERATIONS], iterations, memory_order_relaxed);
	atomic_store_explicit(&w[PW_SEQ], 2u, memory_order_release);
	atomic_store_explicit(&w[PW_MAGIC], PROGRESS_MAGIC, memory_order_release);
	p->w = w;
cleanup:
	close(fd);
	return ret;
}

void progress_set(struct progress *p, uint32_t pass, uint32_t done)
{
	_Atomic uint32_t *w = p->w;
	uint32_t seq;

	if (!w)
		return;
	/* the one writer reads back its own last store */
	seq = atomic_load_explicit(&w[PW_SEQ], memory_order_relaxed);
	atomic_store_explicit(&w[PW_SEQ], seq + 1, memory_order_relaxed);
	/* release: a reader that sees either new value also sees seq + 1 afterwards */
	atomic_store_explicit(&w[PW_PASS], pass, memory_order_release);
	atomic_store_explicit(&w[PW_DONE], done, memory_order_release);
	/* release: a reader that sees seq + 2 sees both values */
	atomic_store_explicit(&w[PW_SEQ], seq + 2, memory_order_release);
}

int progress_read(const struct progress *p, struct progress_view *v, unsigned tries)
{
	_Atomic uint32_t *w = p->w;

	if (!w || atomic_load_explicit(&w[PW_MAGIC], memory_order_acquire) != PROGRESS_MAGIC)
		return -ENODATA;
	while (tries--) {
		uint32_t s1 = atomic_load_explicit(&w[PW_SEQ], memory_order_acquire);

		if (s1 & 1)
			continue;
		v->pass = atomic_load_explicit(&w[PW_PASS], memory_order_acquire);
		v->passes = atomic_load_explicit(&w[PW_PASSES], memory_order_acquire);
		v->done = atomic_load_explicit(&w[PW_DONE], memory_order_acquire);
		v->iterations = atomic_load_explicit(&w[PW_ITERATIONS], memory_order_acquire);
		if (atomic_load_explicit(&w[PW_SEQ], memory_order_relaxed) == s1) {
			v->seq = s1;
			return 0;
		}
	}
	return -EAGAIN;
}

void progress_close(struct progress *p)
{
	if (p->w)
		munmap((void *)p->w, PROGRESS_BYTES);
	p->w = NULL;
}
