#include "arena.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

int freq_from_plan(const struct plan *p, uint64_t *counts)
{
	uint32_t i;

	for (i = 0; i < p->n_passes; i++) {
		const struct plan_pass *ps = &p->passes[i];
		uint64_t base = (uint64_t)ps->layer * p->experts_per_layer, r;

		for (r = ps->first_read; r < ps->first_read + ps->n_reads; r++)
			counts[base + p->reads[r]]++;
	}
	return 0;
}

int freq_from_file(const char *path, uint32_t layers, uint32_t experts, uint64_t *counts,
		   char *reason, size_t rlen)
{
	FILE *f = fopen(path, "re");
	char line[1024];
	unsigned lineno = 0;
	int ret = 0;

	if (!f) {
		int err = errno;

		set_reason(reason, rlen, "freq table %s: %s", path, strerror(err));
		return -err;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long l, e, c;
		char *hash = strchr(line, '#'), extra[2];
		int n;

		lineno++;
		if (hash)
			*hash = '\0';
		n = sscanf(line, "%llu %llu %llu %1s", &l, &e, &c, extra);
		if (n == EOF || n == -1)
			continue; /* blank or comment-only */
		if (n != 3 || strchr(line, '-')) {
			set_reason(reason, rlen, "freq table %s:%u: want \"layer expert count\"",
				   path, lineno);
			ret = -EINVAL;
			goto cleanup;
		}
		if (l >= layers || e >= experts) {
			set_reason(reason, rlen, "freq table %s:%u: (%llu, %llu) outside the pool",
				   path, lineno, l, e);
			ret = -EINVAL;
			goto cleanup;
		}
		if (counts[l * experts + e]) {
			set_reason(reason, rlen, "freq table %s:%u: duplicate entry (%llu, %llu)",
				   path, lineno, l, e);
			ret = -EINVAL;
			goto cleanup;
		}
		counts[l * experts + e] = c;
	}
	if (ferror(f)) {
		set_reason(reason, rlen, "freq table %s: read error", path);
		ret = -EIO;
	}
cleanup:
	fclose(f);
	return ret;
}

int arena_create(struct arena *a, uint64_t arena_bytes, const struct pool *pool,
		 char *reason, size_t rlen)
{
	uint64_t n = (uint64_t)pool->layers * pool->experts_per_layer, i, avail_kb = 0;
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

	memset(a, 0, sizeof(*a));
	a->slots = arena_bytes / pool->expert_bytes;
	a->bytes = round_up(arena_bytes, page_size());
	a->slot_of = malloc(n * sizeof(*a->slot_of));
	if (!a->slot_of) {
		set_reason(reason, rlen, "out of memory for the arena index");
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		a->slot_of[i] = -1;
	if (!a->bytes)
		return 0;
	/* locking more than is available would wake the OOM killer, not fail */
	if (!meminfo_kb("MemAvailable", &avail_kb) && a->bytes > avail_kb * 1024) {
		set_reason(reason, rlen, "arena of %llu bytes exceeds MemAvailable (%llu bytes)",
			   (unsigned long long)a->bytes, (unsigned long long)avail_kb * 1024);
		return -ENOMEM;
	}
	/* best effort: root passes on CAP_IPC_LOCK even where the hard limit is low */
	setrlimit(RLIMIT_MEMLOCK, &rl);
	a->base = mmap(NULL, a->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (a->base == MAP_FAILED) {
		int err = errno;

		a->base = NULL;
		set_reason(reason, rlen, "mmap of a %llu-byte arena: %s",
			   (unsigned long long)a->bytes, strerror(err));
		return -err;
	}
	/* mlock faults in and pins every page: the arena is resident before preload */
	if (mlock(a->base, a->bytes)) {
		int err = errno;

		set_reason(reason, rlen, "mlock of a %llu-byte arena failed: %s",
			   (unsigned long long)a->bytes, strerror(err));
		return -err;
	}
	return 0;
}

struct cand {
	uint64_t count;
	uint64_t idx;
};

static int cand_cmp(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

int arena_preload(struct arena *a, const struct pool *pool, const uint64_t *counts,
		  char *reason, size_t rlen)
{
	uint64_t n = (uint64_t)pool->layers * pool->experts_per_layer, i, nc = 0;
	struct cand *c = NULL;
	int64_t t0 = now_ns();
	int ret = 0;

	if (!a->slots)
		goto done;
	c = malloc(n * sizeof(*c));
	if (!c) {
		set_reason(reason, rlen, "out of memory for the frequency ranking");
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		if (counts[i])
			c[nc++] = (struct cand){ counts[i], i };
	qsort(c, nc, sizeof(*c), cand_cmp);
	for (i = 0; i < nc && a->n_loaded < a->slots; i++) {
		uint64_t idx = c[i].idx, off = a->n_loaded * pool->expert_bytes, pos = 0;
		uint32_t nx, r;
		const struct extent *x = pool_extents(pool, idx, &nx);
		int fd;

		ret = pool_get(pool, idx, &fd);
		if (ret) {
			set_reason(reason, rlen, "preload: cannot open L%llu/E%llu: %s",
				   (unsigned long long)(idx / pool->experts_per_layer),
				   (unsigned long long)(idx % pool->experts_per_layer), strerror(-ret));
			goto cleanup;
		}

		for (r = 0; r < nx; r++) {
			uint64_t got = 0;

			while (got < x[r].len) {
				ssize_t n = pread(fd, a->base + off + pos + got, x[r].len - got,
						  (off_t)(x[r].off + got));
				int err = n < 0 ? errno : EIO;

				if (n < 0 && err == EINTR)
					continue;
				if (n <= 0) {
					ret = -err;
					set_reason(reason, rlen, "preload of L%llu/E%llu: %s",
						   (unsigned long long)(idx / pool->experts_per_layer),
						   (unsigned long long)(idx % pool->experts_per_layer),
						   n < 0 ? strerror(err) : "short read");
					pool_put(pool, fd);
					goto cleanup;
				}
				got += (uint64_t)n;
			}
			/* the arena is the only copy: keep the preload from also sitting in
			 * the page cache and counting against the capacity twice */
			posix_fadvise(fd, (off_t)x[r].off, (off_t)x[r].len, POSIX_FADV_DONTNEED);
			pos += x[r].len;
		}
		pool_put(pool, fd);
		a->slot_of[idx] = (int32_t)a->n_loaded;
		a->n_loaded++;
		a->preload_bytes += pool->expert_bytes;
	}
done:
	a->preload_ns = now_ns() - t0;
cleanup:
	free(c);
	return ret;
}

void arena_destroy(struct arena *a)
{
	if (a->base)
		munmap(a->base, a->bytes);
	free(a->slot_of);
	memset(a, 0, sizeof(*a));
}
