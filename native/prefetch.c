#include "prefetch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

static void *pf_main(void *arg)
{
	struct prefetcher *pf = arg;

	pthread_mutex_lock(&pf->mu);
	for (;;) {
		const uint32_t *experts;
		uint32_t layer, n, i;

		while (!pf->slot_full && !pf->stop)
			pthread_cond_wait(&pf->wake, &pf->mu);
		if (pf->stop)
			break;
		experts = pf->slot_experts;
		layer = pf->slot_layer;
		n = pf->slot_n;
		pf->slot_full = 0;
		pf->busy = 1;
		pthread_mutex_unlock(&pf->mu);

		for (i = 0; i < n; i++) {
			uint64_t idx = (uint64_t)layer * pf->pool->experts_per_layer + experts[i];
			char reason[REASON_LEN];
			int fd = -1, ret;

			ret = pool_get(pf->pool, idx, &fd);
			if (ret) {
				set_reason(reason, sizeof(reason), "open: %s", strerror(-ret));
			} else if (pf->kind == PF_ADVICE) {
				uint32_t nx, r;
				const struct extent *x = pool_extents(pf->pool, idx, &nx);

				ret = 0;
				for (r = 0; r < nx && !ret; r++) {
					uint64_t len = x[r].len, off;
					uint64_t step = pf->advice_window ? pf->advice_window : len;

					for (off = 0; off < len && !ret; off += step)
						ret = -posix_fadvise(fd, (off_t)(x[r].off + off),
								     (off_t)(len - off < step ?
									     len - off : step),
								     POSIX_FADV_WILLNEED);
				}
				if (ret)
					set_reason(reason, sizeof(reason), "posix_fadvise(WILLNEED): %s",
						   strerror(-ret));
			} else {
				struct io_stat st = { 0 };
				uint32_t nx;
				const struct extent *x = pool_extents(pf->pool, idx, &nx);

				ret = io_read_expert(&pf->io, fd, x, nx, pf->buf, &st, reason,
						     sizeof(reason));
			}
			if (fd >= 0)
				pool_put(pf->pool, fd);
			pthread_mutex_lock(&pf->mu);
			pf->c.completed++;
			if (ret && !pf->error) {
				pf->error = ret;
				set_reason(pf->reason, sizeof(pf->reason), "prefetch of L%u/E%u: %s",
					   layer, experts[i], reason);
			}
			pthread_mutex_unlock(&pf->mu);
		}
		pthread_mutex_lock(&pf->mu);
		pf->busy = 0;
		pthread_cond_broadcast(&pf->idle);
	}
	pthread_mutex_unlock(&pf->mu);
	return NULL;
}

int pf_start(struct prefetcher *pf, enum pf_kind kind, const struct pool *pool,
	     const struct io_cfg *io, uint64_t advice_window, char *reason, size_t rlen)
{
	int ret;

	memset(pf, 0, sizeof(*pf));
	pf->kind = kind;
	pf->advice_window = advice_window;
	pf->pool = pool;
	pf->io = *io;
	pf->io.probe_cached = 0;
	/* pthreads return the error number itself; every failure below undoes
	 * what came before it, so a failed start owns nothing (started stays 0
	 * and pf_stop is a no-op) */
	ret = pthread_mutex_init(&pf->mu, NULL);
	if (ret) {
		set_reason(reason, rlen, "cannot create the prefetch mutex: %s", strerror(ret));
		return -ret;
	}
	ret = pthread_cond_init(&pf->wake, NULL);
	if (ret) {
		set_reason(reason, rlen, "cannot create the prefetch condition: %s", strerror(ret));
		goto err_mutex;
	}
	ret = pthread_cond_init(&pf->idle, NULL);
	if (ret) {
		set_reason(reason, rlen, "cannot create the prefetch condition: %s", strerror(ret));
		goto err_wake;
	}
	if (kind == PF_BLOCK) {
		/* its own buffer: a blocking prefetch is a real read, never a copy
		 * into a demand buffer */
		pf->buf = io_buf_alloc(&pf->io);
		if (!pf->buf) {
			ret = ENOMEM;
			set_reason(reason, rlen, "out of memory for the prefetch buffer");
			goto err_idle;
		}
	}
	ret = pthread_create(&pf->thread, NULL, pf_main, pf);
	if (ret) {
		set_reason(reason, rlen, "cannot start the prefetch thread: %s", strerror(ret));
		goto err_buf;
	}
	pf->started = 1;
	return 0;

err_buf:
	io_buf_free(&pf->io, pf->buf);
	pf->buf = NULL;
err_idle:
	pthread_cond_destroy(&pf->idle);
err_wake:
	pthread_cond_destroy(&pf->wake);
err_mutex:
	pthread_mutex_destroy(&pf->mu);
	return -ret;
}

void pf_place(struct prefetcher *pf, uint32_t layer, const uint32_t *experts, uint32_t n)
{
	pthread_mutex_lock(&pf->mu);
	if (pf->slot_full)
		pf->c.overwritten += pf->slot_n;
	pf->slot_experts = experts;
	pf->slot_layer = layer;
	pf->slot_n = n;
	pf->slot_full = n > 0;
	pf->c.submitted += n;
	if (n)
		pthread_cond_signal(&pf->wake);
	pthread_mutex_unlock(&pf->mu);
}

int pf_quiesce(struct prefetcher *pf, char *reason, size_t rlen)
{
	int ret;

	pthread_mutex_lock(&pf->mu);
	if (pf->slot_full) {
		pf->c.left += pf->slot_n;
		pf->slot_full = 0;
		pf->slot_n = 0;
	}
	while (pf->busy)
		pthread_cond_wait(&pf->idle, &pf->mu);
	ret = pf->error;
	if (ret)
		set_reason(reason, rlen, "%s", pf->reason);
	pthread_mutex_unlock(&pf->mu);
	return ret;
}

void pf_counters(struct prefetcher *pf, struct pf_counters *out)
{
	pthread_mutex_lock(&pf->mu);
	*out = pf->c;
	pthread_mutex_unlock(&pf->mu);
}

void pf_stop(struct prefetcher *pf)
{
	if (!pf->started)
		return;
	pthread_mutex_lock(&pf->mu);
	pf->stop = 1;
	pthread_cond_broadcast(&pf->wake);
	pthread_mutex_unlock(&pf->mu);
	pthread_join(pf->thread, NULL);
	io_buf_free(&pf->io, pf->buf);
	pthread_mutex_destroy(&pf->mu);
	pthread_cond_destroy(&pf->wake);
	pthread_cond_destroy(&pf->idle);
	pf->started = 0;
}
