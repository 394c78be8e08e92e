#include "progress.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util.h"

int progress_open(struct progress *p, const char *path, uint32_t passes, uint32_t iterations,
		  char *reason, size_t rlen)
{
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
	p->w = m;
	p->w[2] = 0;
	p->w[3] = passes;
	p->w[4] = 0;
	p->w[5] = iterations;
	__atomic_store_n(&p->w[1], 2u, __ATOMIC_RELEASE);
	__atomic_store_n(&p->w[0], PROGRESS_MAGIC, __ATOMIC_RELEASE);
cleanup:
	close(fd);
	return ret;
}

void progress_set(struct progress *p, uint32_t pass, uint32_t done)
{
	uint32_t seq;

	if (!p->w)
		return;
	seq = p->w[1];
	__atomic_store_n(&p->w[1], seq + 1, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	p->w[2] = pass;
	p->w[4] = done;
	__atomic_store_n(&p->w[1], seq + 2, __ATOMIC_RELEASE);
}

void progress_close(struct progress *p)
{
	if (p->w)
		munmap(p->w, PROGRESS_BYTES);
	p->w = NULL;
}
