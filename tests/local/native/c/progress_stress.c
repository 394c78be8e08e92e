/* The progress seqlock under ThreadSanitizer: one writer thread calls progress_set(i, i) as
 * fast as it can while reader threads call progress_read on the same mapping. Built with
 * -fsanitize=thread by test_agent_tsan.py; TSan reports any data race between the writer's
 * stores and the readers' loads, and the readers check that every copy they accept is one the
 * writer published whole (pass == done, never going backwards, passes/iterations unchanged).
 *
 *   progress_stress FILE UPDATES READERS    exit 0 ok, 1 a torn or stale copy, 2 usage */
#include "progress.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSES 1000u
#define ITERATIONS 77u

static struct progress prog;
static atomic_int writer_done;
static unsigned long updates;

struct reader {
	pthread_t th;
	unsigned long copies, busy, bad;
	char why[256];
};

static void *writer(void *arg)
{
	unsigned long i;

	(void)arg;
	for (i = 1; i <= updates; i++)
		progress_set(&prog, (uint32_t)i, (uint32_t)i);
	atomic_store(&writer_done, 1);
	return NULL;
}

static void *reader(void *arg)
{
	struct reader *r = arg;
	uint32_t last = 0;

	for (;;) {
		int done = atomic_load(&writer_done);
		struct progress_view v;
		int ret = progress_read(&prog, &v, 64);

		if (ret == -EAGAIN) {
			r->busy++;
		} else if (ret) {
			snprintf(r->why, sizeof(r->why), "progress_read: %s", strerror(-ret));
			r->bad++;
			return NULL;
		} else {
			r->copies++;
			if (v.pass != v.done || v.pass < last || v.passes != PASSES ||
			    v.iterations != ITERATIONS || (v.seq & 1)) {
				if (!r->bad++)
					snprintf(r->why, sizeof(r->why),
						 "copy seq %u pass %u done %u passes %u iterations %u "
						 "after pass %u", v.seq, v.pass, v.done, v.passes,
						 v.iterations, last);
			}
			last = v.pass;
		}
		if (done)
			break;
	}
	/* after the writer finished, a copy is the final state exactly */
	if (!r->bad && last != (uint32_t)updates) {
		snprintf(r->why, sizeof(r->why), "last copy pass %u, writer ended at %lu", last,
			 updates);
		r->bad++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	char reason[REASON_LEN] = "";
	struct reader *rd;
	pthread_t w;
	int n, i, bad = 0;

	if (argc != 4 || (updates = strtoul(argv[2], NULL, 10)) == 0 || (n = atoi(argv[3])) <= 0)
		return 2;
	if (progress_open(&prog, argv[1], PASSES, ITERATIONS, reason, sizeof(reason))) {
		fprintf(stderr, "%s\n", reason);
		return 1;
	}
	rd = calloc((size_t)n, sizeof(*rd));
	if (!rd)
		return 1;
	for (i = 0; i < n; i++)
		pthread_create(&rd[i].th, NULL, reader, &rd[i]);
	pthread_create(&w, NULL, writer, NULL);
	pthread_join(w, NULL);
	for (i = 0; i < n; i++) {
		pthread_join(rd[i].th, NULL);
		printf("reader %d: %lu copies, %lu busy, %lu bad%s%s\n", i, rd[i].copies, rd[i].busy,
		       rd[i].bad, rd[i].bad ? ": " : "", rd[i].why);
		bad += rd[i].bad != 0;
	}
	progress_close(&prog);
	free(rd);
	return bad ? 1 : 0;
}
