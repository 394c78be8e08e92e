/* Per-worker read intervals (readlog.h). */
#include "readlog.h"

#include <errno.h>
#include <stdlib.h>

void rl_add(struct rl_buf *b, uint32_t pass, uint32_t layer, uint32_t expert, int64_t t0,
	    int64_t t1)
{
	if (b->n == b->cap) {
		uint32_t cap = b->cap ? b->cap * 2 : 1024;
		struct rl_rec *r;

		if (cap > RL_MAX)
			cap = RL_MAX;
		if (b->n >= cap) {
			b->dropped++;
			return;
		}
		r = realloc(b->rec, (size_t)cap * sizeof(*r));
		if (!r) {
			b->dropped++;
			return;
		}
		b->rec = r;
		b->cap = cap;
	}
	b->rec[b->n++] = (struct rl_rec){ .t0 = t0, .t1 = t1, .pass = pass, .layer = layer,
					  .expert = expert };
}

int rl_write(const char *path, const struct rl_buf *bufs, uint32_t n)
{
	FILE *f = fopen(path, "we");
	uint64_t records = 0, dropped = 0;
	uint32_t i, j;
	int err = 0;

	if (!f)
		return -errno;
	for (i = 0; i < n; i++) {
		for (j = 0; j < bufs[i].n; j++) {
			const struct rl_rec *r = &bufs[i].rec[j];

			fprintf(f, "{\"tid\": %d, \"thread\": %u, \"pass\": %u, \"layer\": %u, "
				"\"expert\": %u, \"t0_ns\": %lld, \"t1_ns\": %lld}\n", bufs[i].tid, i,
				r->pass, r->layer, r->expert, (long long)r->t0, (long long)r->t1);
		}
		records += bufs[i].n;
		dropped += bufs[i].dropped;
	}
	fprintf(f, "{\"read_log\": true, \"records\": %llu, \"dropped\": %llu}\n",
		(unsigned long long)records, (unsigned long long)dropped);
	if (ferror(f))
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

void rl_free(struct rl_buf *b)
{
	free(b->rec);
	b->rec = NULL;
	b->n = b->cap = 0;
}
