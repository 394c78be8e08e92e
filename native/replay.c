#include "replay.h"
#include "arena.h"
#include "json.h"
#include "progress.h"
#include "plan.h"
#include "pool.h"
#include "readlog.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const char *bench_source_hash;

const char *mode_name(enum replay_mode m)
{
	static const char *const n[] = { "pagecache", "pinned", "hybrid", "nocache", "random" };

	return n[m];
}

const char *nocache_name(enum io_kind k)
{
	switch (k) {
	case IO_DIRECT: return "direct";
	case IO_DONTNEED: return "dontneed";
	case IO_DONTCACHE: return "dontcache";
	default: return "none";
	}
}

struct acc {
	uint64_t bytes, reads, arena_hits, cached, cached_bytes;
};

/* The thread pool of one run: workers sleep on `go` between router passes,
 * claim reads of the current pass with an atomic cursor, and the last one to
 * finish signals `done`. */
struct crew {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	uint64_t gen;
	int stop;
	uint32_t layer, n, pass;
	int log_reads;                 /* --read-log: workers record each read's interval */
	const uint32_t *reads;
	atomic_uint next;
	atomic_int abort;
	uint32_t remaining;
	struct acc acc;
	int err;
	char reason[REASON_LEN];
	const struct pool *pool;
	const struct arena *arena;
	const struct io_cfg *io;
};

struct worker {
	pthread_t th;
	struct crew *crew;
	void *buf;
	int started;
	struct rl_buf log;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct crew *c = w->crew;
	uint64_t seen = 0;
	uint64_t eb = c->pool->expert_bytes;

	w->log.tid = (int)gettid();
	for (;;) {
		struct acc a = { 0 };
		struct io_stat st = { 0 };
		char reason[REASON_LEN];
		int err = 0;
		uint32_t bad = 0;
		uint64_t base;

		pthread_mutex_lock(&c->mu);
		while (c->gen == seen && !c->stop)
			pthread_cond_wait(&c->go, &c->mu);
		if (c->stop) {
			pthread_mutex_unlock(&c->mu);
			break;
		}
		seen = c->gen;
		pthread_mutex_unlock(&c->mu);

		base = (uint64_t)c->layer * c->pool->experts_per_layer;
		while (!atomic_load_explicit(&c->abort, memory_order_relaxed)) {
			unsigned i = atomic_fetch_add(&c->next, 1);
			uint32_t e;
			int32_t slot;

			if (i >= c->n)
				break;
			e = c->reads[i];
			slot = c->arena ? c->arena->slot_of[base + e] : -1;
			if (slot >= 0) {
				/* one copy per access, as from the page cache */
				memcpy(w->buf, c->arena->base + (uint64_t)slot * eb, eb);
				a.arena_hits++;
			} else {
				int fd;
				int64_t t0 = c->log_reads ? now_ns() : 0;

				err = pool_get(c->pool, base + e, &fd);
				if (err) {
					set_reason(reason, sizeof(reason), "open: %s", strerror(-err));
				} else {
					uint32_t nx;
					const struct extent *x = pool_extents(c->pool, base + e, &nx);

					err = io_read_expert(c->io, fd, x, nx, w->buf, &st, reason,
							     sizeof(reason));
					pool_put(c->pool, fd);
				}
				if (c->log_reads && !err)
					rl_add(&w->log, c->pass, c->layer, e, t0, now_ns());
				if (err) {
					bad = e;
					atomic_store(&c->abort, 1);
					break;
				}
			}
			a.bytes += eb;
			a.reads++;
		}
		a.cached = st.cached;
		a.cached_bytes = st.cached_bytes;

		pthread_mutex_lock(&c->mu);
		c->acc.bytes += a.bytes;
		c->acc.reads += a.reads;
		c->acc.arena_hits += a.arena_hits;
		c->acc.cached += a.cached;
		c->acc.cached_bytes += a.cached_bytes;
		if (err && !c->err) {
			c->err = err;
			set_reason(c->reason, sizeof(c->reason), "read of L%u/E%u: %s", c->layer, bad,
				   reason);
		}
		if (--c->remaining == 0)
			pthread_cond_signal(&c->done);
		pthread_mutex_unlock(&c->mu);
	}
	return NULL;
}

/* Runs one router pass to completion on the crew. */
static int crew_run(struct crew *c, uint32_t nthreads, uint32_t layer, const uint32_t *reads,
		    uint32_t n)
{
	if (!n)
		return 0;
	pthread_mutex_lock(&c->mu);
	c->layer = layer;
	c->reads = reads;
	c->n = n;
	atomic_store(&c->next, 0);
	c->remaining = nthreads;
	c->gen++;
	pthread_cond_broadcast(&c->go);
	while (c->remaining)
		pthread_cond_wait(&c->done, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return c->err;
}

struct iter_rec {
	int64_t wall_ns;
	struct acc a;
};

struct run {
	const struct replay_opts *o;
	FILE *out;
	struct pool pool;
	struct plan plan, hints;
	struct arena arena;
	struct io_cfg io;
	struct crew crew;
	struct worker *workers;
	struct prefetcher pf;
	struct snapshots snap;
	struct progress prog;
	int have_pool, have_plan, have_hints, have_arena, have_crew, have_snap;
	struct iter_rec *recs;
	uint64_t *pass_wall, *pass_bytes, *pass_reads, *pass_hits;
	/* the prefetcher's counters of each pass alone (submitted, overwritten, completed,
	 * left), so a reader can take the measured pass without the warm-up's hints; the
	 * summary's "hints" stays the whole run's total */
	uint64_t *pass_hint[4];
	struct pf_counters pf_seen;   /* cumulative at the end of the last pass */
	uint32_t passes_done;
	uint64_t distinct, vmlck_kb, vmlck_end_kb;
	int have_vmlck, have_vmlck_end;
	uint64_t errors;
	uint64_t advice_window;
	int skipped;           /* the machine lacks what the run needs: exit BENCH_EXIT_SKIP */
	char reason[REASON_LEN];
};

/* Distinct (layer, expert) pairs the plan reads: 0 with *out set, or -ENOMEM. */
static int count_distinct(const struct plan *p, uint64_t *out)
{
	uint64_t n = (uint64_t)p->layers * p->experts_per_layer, d = 0, i, r;
	unsigned char *seen = calloc(n, 1);

	if (!seen)
		return -ENOMEM;
	for (i = 0; i < p->n_passes; i++) {
		const struct plan_pass *ps = &p->passes[i];

		for (r = ps->first_read; r < ps->first_read + ps->n_reads; r++) {
			uint64_t idx = (uint64_t)ps->layer * p->experts_per_layer + p->reads[r];

			d += !seen[idx];
			seen[idx] = 1;
		}
	}
	free(seen);
	*out = d;
	return 0;
}

static int emit_iters(struct run *r, uint32_t pass)
{
	struct jline *j = malloc(sizeof(*j));
	uint32_t i;
	int ret = 0;

	if (!j)
		return -ENOMEM;
	for (i = 0; i < r->plan.n_iterations; i++) {
		struct iter_rec *rec = &r->recs[i];

		jl_begin(j);
		jl_u64(j, "pass", pass);
		jl_u64(j, "iter", i);
		jl_i64(j, "wall_ns", rec->wall_ns);
		jl_u64(j, "bytes", rec->a.bytes);
		jl_u64(j, "reads", rec->a.reads);
		if (r->o->mode == MODE_PINNED || r->o->mode == MODE_HYBRID)
			jl_u64(j, "arena_hits", rec->a.arena_hits);
		if (r->io.probe_cached) {
			jl_u64(j, "cached", rec->a.cached);
			jl_u64(j, "cached_bytes", rec->a.cached_bytes);
		}
		ret = jl_emit(j, r->out);
		if (ret)
			break;
	}
	free(j);
	return ret;
}

static void emit_summary(struct run *r, int ok)
{
	const struct replay_opts *o = r->o;
	struct jline *j = malloc(sizeof(*j));
	struct pf_counters pc = { 0 };
	uint64_t eb = r->pool.expert_bytes;

	if (!j) {
		fprintf(stderr, "bench-agent: out of memory for the summary\n");
		return;
	}
	if (o->prefetch && r->pf.started)
		pf_counters(&r->pf, &pc);
	jl_begin(j);
	jl_bool(j, "summary", 1);
	jl_str(j, "version", BENCH_VERSION);
	jl_str(j, "source_sha256", bench_source_hash);
	jl_str(j, "mode", mode_name(o->mode));
	if (o->mode == MODE_NOCACHE)
		jl_str(j, "nocache", nocache_name(o->nocache));
	jl_u64(j, "threads", o->threads);
	jl_u64(j, "passes", o->passes);
	jl_u64(j, "passes_done", r->passes_done);
	jl_u64(j, "page_size", page_size());
	if (r->have_plan) {
		jl_u64(j, "iterations", r->plan.n_iterations);
		jl_u64(j, "router_passes", r->plan.n_passes);
		jl_u64(j, "plan_reads", r->plan.n_reads);
		jl_u64(j, "plan_bytes", r->plan.n_reads * eb);
		jl_u64(j, "distinct_experts", r->distinct);
		jl_u64(j, "distinct_bytes", r->distinct * eb);
	}
	if (r->have_pool) {
		jl_u64(j, "expert_bytes", eb);
		jl_str(j, "pool_kind", r->pool.gguf ? "gguf" : "files");
		jl_str(j, "fd_strategy", pool_strategy(&r->pool));
		jl_u64(j, "files_open", r->pool.gguf ? 1 : r->pool.fds ?
		       (uint64_t)r->pool.layers * r->pool.experts_per_layer : 0);
		jl_u64(j, "nofile_limit", r->pool.nofile_limit);
	}
	if (o->mode == MODE_NOCACHE && o->nocache == IO_DIRECT)
		jl_u64(j, "dio_align", r->pool.dio_offset_align);
	jl_u64(j, "arena_bytes", r->arena.bytes);
	jl_u64(j, "arena_slots", r->arena.slots);
	jl_u64(j, "arena_experts", r->arena.n_loaded);
	jl_u64(j, "preload_bytes", r->arena.preload_bytes);
	jl_i64(j, "preload_wall_ns", r->arena.preload_ns);
	if (r->have_vmlck)
		jl_u64(j, "vmlck_bytes", r->vmlck_kb * 1024);
	else
		jl_null(j, "vmlck_bytes");
	if (r->have_vmlck_end)
		jl_u64(j, "vmlck_end_bytes", r->vmlck_end_kb * 1024);
	jl_str(j, "prefetch", !o->prefetch ? "none" : o->pf_kind == PF_ADVICE ? "advice" : "block");
	if (o->prefetch && o->pf_kind == PF_ADVICE)
		jl_u64(j, "advice_window", r->advice_window);
	jl_obj_begin(j, "hints");
	jl_u64(j, "submitted", pc.submitted);
	jl_u64(j, "overwritten", pc.overwritten);
	jl_u64(j, "completed", pc.completed);
	jl_u64(j, "left", pc.left);
	jl_obj_end(j);
	if (r->pass_wall) {
		jl_u64_array(j, "pass_wall_ns", r->pass_wall, r->passes_done);
		jl_u64_array(j, "pass_bytes", r->pass_bytes, r->passes_done);
		jl_u64_array(j, "pass_reads", r->pass_reads, r->passes_done);
		jl_u64_array(j, "pass_arena_hits", r->pass_hits, r->passes_done);
	}
	if (r->pass_wall && o->prefetch) {
		jl_u64_array(j, "pass_hints_submitted", r->pass_hint[0], r->passes_done);
		jl_u64_array(j, "pass_hints_overwritten", r->pass_hint[1], r->passes_done);
		jl_u64_array(j, "pass_hints_completed", r->pass_hint[2], r->passes_done);
		jl_u64_array(j, "pass_hints_left", r->pass_hint[3], r->passes_done);
	}
	jl_bool(j, "probe_cached", r->io.probe_cached);
	jl_u64(j, "errors", r->errors);
	jl_bool(j, "skipped", r->skipped);
	jl_bool(j, "ok", ok);
	if (ok)
		jl_null(j, "reason");
	else
		jl_str(j, "reason", r->reason);
	if (jl_emit(j, r->out))
		fprintf(stderr, "bench-agent: cannot write the summary\n");
	free(j);
}

static int fail(struct run *r, const char *reason)
{
	if (reason && reason != r->reason)
		set_reason(r->reason, sizeof(r->reason), "%s", reason);
	r->errors++;
	return -1;
}

/* Not a failure: the kernel or the pool's file system lacks what the run asks for, so it ends
 * before any pass with the reason and exit code BENCH_EXIT_SKIP. */
static int skip(struct run *r, const char *reason)
{
	set_reason(r->reason, sizeof(r->reason), "%s", reason);
	r->skipped = 1;
	return -1;
}

static int setup(struct run *r)
{
	const struct replay_opts *o = r->o;
	char reason[REASON_LEN];
	int open_flags = 0, fadv = 0;
	enum io_kind kind = IO_PREAD;
	uint32_t i;

	if (pool_load_manifest(&r->pool, o->pool_dir, reason, sizeof(reason)))
		return fail(r, reason);
	if (plan_load(o->plan_path, PLAN_KIND_REPLAY, &r->plan, reason, sizeof(reason)))
		return fail(r, reason);
	r->have_plan = 1;
	if (o->progress_path && progress_open(&r->prog, o->progress_path, o->passes,
					      r->plan.n_iterations, reason, sizeof(reason)))
		return fail(r, reason);
	if (plan_check_geometry(&r->plan, r->pool.layers, r->pool.experts_per_layer,
				r->pool.expert_bytes, "plan", reason, sizeof(reason)))
		return fail(r, reason);
	/* after the geometry check: the table is sized by the pool, not by a plan's claim */
	if (count_distinct(&r->plan, &r->distinct))
		return fail(r, "out of memory for the distinct-expert table");
	if (o->prefetch) {
		if (plan_load(o->hints_path, PLAN_KIND_HINTS, &r->hints, reason, sizeof(reason)))
			return fail(r, reason);
		r->have_hints = 1;
		if (plan_check_geometry(&r->hints, r->pool.layers, r->pool.experts_per_layer,
					r->pool.expert_bytes, "hint plan", reason, sizeof(reason)) ||
		    plan_check_hints(&r->hints, &r->plan, reason, sizeof(reason)))
			return fail(r, reason);
	}

	if (o->mode == MODE_NOCACHE) {
		kind = o->nocache;
		if (kind == IO_DIRECT)
			open_flags = O_DIRECT;
	}
	if (o->mode == MODE_RANDOM)
		fadv = POSIX_FADV_RANDOM;
	{
		int ret = pool_open_all(&r->pool, open_flags, fadv, reason, sizeof(reason));

		if (ret == -EOPNOTSUPP && kind == IO_DIRECT)
			return skip(r, reason);
		if (ret)
			return fail(r, reason);
	}
	r->have_pool = 1;
	if (kind == IO_DIRECT && !r->pool.dio_offset_align)
		return skip(r, "O_DIRECT is not supported on the pool's filesystem (statx DIOALIGN 0)");
	io_cfg_init(&r->io, kind, r->pool.expert_bytes, r->pool.dio_mem_align,
		    r->pool.dio_offset_align);
	r->io.probe_cached = o->probe_cached && kind == IO_PREAD;
	{
		int fd, ret = pool_get(&r->pool, 0, &fd);

		if (!ret) {
			ret = io_probe(&r->io, fd, reason, sizeof(reason));
			pool_put(&r->pool, fd);
			if (io_unsupported(ret))
				return skip(r, reason);
		} else {
			set_reason(reason, sizeof(reason), "cannot open the first expert: %s",
				   strerror(-ret));
		}
		if (ret)
			return fail(r, reason);
	}

	/* preload before pass0-start: reported apart, never inside a timed pass */
	if (arena_create(&r->arena, o->have_arena ? o->arena_bytes : 0, &r->pool, reason,
			 sizeof(reason))) {
		r->have_arena = 1;
		return fail(r, reason);
	}
	r->have_arena = 1;
	if (o->mode == MODE_PINNED || o->mode == MODE_HYBRID) {
		uint64_t n = (uint64_t)r->pool.layers * r->pool.experts_per_layer;
		uint64_t *counts = calloc(n, sizeof(*counts));
		int ret;

		if (!counts)
			return fail(r, "out of memory for the frequency table");
		if (o->freq_path)
			ret = freq_from_file(o->freq_path, r->pool.layers, r->pool.experts_per_layer,
					     counts, reason, sizeof(reason));
		else
			ret = freq_from_plan(&r->plan, counts);
		if (!ret)
			ret = arena_preload(&r->arena, &r->pool, counts, reason, sizeof(reason));
		free(counts);
		if (ret)
			return fail(r, reason);
	}
	if (!proc_status_kb("VmLck", &r->vmlck_kb))
		r->have_vmlck = 1;
	if (r->arena.bytes && (!r->have_vmlck || r->vmlck_kb * 1024 < r->arena.bytes)) {
		set_reason(reason, sizeof(reason), "VmLck %llu bytes below the %llu-byte arena",
			   (unsigned long long)r->vmlck_kb * 1024, (unsigned long long)r->arena.bytes);
		return fail(r, reason);
	}

	if (o->snap_dir) {
		if (snap_init(&r->snap, o->snap_dir, (const char **)o->snap_files, o->n_snap, reason,
			      sizeof(reason)))
			return fail(r, reason);
		r->have_snap = 1;
	}

	r->recs = calloc(r->plan.n_iterations ? r->plan.n_iterations : 1, sizeof(*r->recs));
	r->pass_wall = calloc(o->passes, sizeof(uint64_t));
	r->pass_bytes = calloc(o->passes, sizeof(uint64_t));
	r->pass_reads = calloc(o->passes, sizeof(uint64_t));
	r->pass_hits = calloc(o->passes, sizeof(uint64_t));
	for (i = 0; i < 4; i++) {
		r->pass_hint[i] = calloc(o->passes, sizeof(uint64_t));
		if (!r->pass_hint[i])
			return fail(r, "out of memory");
	}
	r->workers = calloc(o->threads, sizeof(*r->workers));
	if (!r->recs || !r->pass_wall || !r->pass_bytes || !r->pass_reads || !r->pass_hits ||
	    !r->workers)
		return fail(r, "out of memory");

	pthread_mutex_init(&r->crew.mu, NULL);
	pthread_cond_init(&r->crew.go, NULL);
	pthread_cond_init(&r->crew.done, NULL);
	r->crew.pool = &r->pool;
	r->crew.arena = r->arena.n_loaded ? &r->arena : NULL;
	r->crew.io = &r->io;
	r->crew.log_reads = o->read_log_path != NULL;
	r->have_crew = 1;
	for (i = 0; i < o->threads; i++) {
		struct worker *w = &r->workers[i];
		int ret;

		w->crew = &r->crew;
		w->buf = io_buf_alloc(&r->io);
		if (!w->buf)
			return fail(r, "out of memory for destination buffers");
		ret = pthread_create(&w->th, NULL, worker_main, w);
		if (ret) {
			set_reason(reason, sizeof(reason), "pthread_create: %s", strerror(ret));
			return fail(r, reason);
		}
		w->started = 1;
	}
	r->advice_window = o->have_advice_window ? o->advice_window
		: r->pool.ra_window ? r->pool.ra_window : 128 * 1024;
	if (o->prefetch && pf_start(&r->pf, o->pf_kind, &r->pool, &r->io, r->advice_window, reason,
				    sizeof(reason)))
		return fail(r, reason);
	return 0;
}

/* The pass's own hint counters: the prefetcher's cumulative ones less those at the end of
 * the previous pass. Called after pf_quiesce, when the slot is empty and the worker idle, so
 * submitted = overwritten + completed + left holds for the pass alone. */
static void record_pass_hints(struct run *r, uint32_t pass)
{
	struct pf_counters now = { 0 };

	pf_counters(&r->pf, &now);
	r->pass_hint[0][pass] = now.submitted - r->pf_seen.submitted;
	r->pass_hint[1][pass] = now.overwritten - r->pf_seen.overwritten;
	r->pass_hint[2][pass] = now.completed - r->pf_seen.completed;
	r->pass_hint[3][pass] = now.left - r->pf_seen.left;
	r->pf_seen = now;
}

static int run_pass(struct run *r, uint32_t pass)
{
	const struct replay_opts *o = r->o;
	const struct plan *p = &r->plan;
	char reason[REASON_LEN];
	int64_t t0, t1;
	uint32_t it;
	int err = 0;

	memset(r->recs, 0, sizeof(*r->recs) * p->n_iterations);
	r->crew.pass = pass;
	progress_set(&r->prog, pass, 0);
	if (r->have_snap)
		snap_take(&r->snap, 0);
	t0 = now_ns();
	for (it = 0; it < p->n_iterations && !err; it++) {
		const struct plan_iter *pi = &p->iters[it];
		struct iter_rec *rec = &r->recs[it];
		int64_t i0 = now_ns();
		uint32_t k;

		memset(&r->crew.acc, 0, sizeof(r->crew.acc));
		for (k = 0; k < pi->n_passes; k++) {
			uint32_t j = pi->first_pass + k;
			const struct plan_pass *ps = &p->passes[j];

			if (o->prefetch) {
				const struct plan_pass *hp = &r->hints.passes[j];

				pf_place(&r->pf, hp->layer, r->hints.reads + hp->first_read,
					 hp->n_reads);
			}
			err = crew_run(&r->crew, o->threads, ps->layer, p->reads + ps->first_read,
				       ps->n_reads);
			if (err)
				break;
		}
		rec->wall_ns = now_ns() - i0;
		rec->a = r->crew.acc;
		progress_set(&r->prog, pass, it + 1);
	}
	t1 = now_ns();
	if (o->prefetch && !err) {
		err = pf_quiesce(&r->pf, reason, sizeof(reason));
		if (err)
			fail(r, reason);
	} else if (o->prefetch) {
		pf_quiesce(&r->pf, reason, sizeof(reason));
	}
	if (r->have_snap) {
		snap_take(&r->snap, 1);
		if (snap_write(&r->snap, pass, reason, sizeof(reason)) && !err) {
			err = -EIO;
			fail(r, reason);
		}
	}
	if (r->crew.err) {
		set_reason(r->reason, sizeof(r->reason), "pass %u: %s", pass, r->crew.reason);
		r->errors++;
		return r->crew.err;
	}
	if (err)
		return err;
	r->pass_wall[pass] = (uint64_t)(t1 - t0);
	if (o->prefetch)
		record_pass_hints(r, pass);
	for (it = 0; it < p->n_iterations; it++) {
		r->pass_bytes[pass] += r->recs[it].a.bytes;
		r->pass_reads[pass] += r->recs[it].a.reads;
		r->pass_hits[pass] += r->recs[it].a.arena_hits;
	}
	/* every read of the plan, or the pass does not count */
	if (r->pass_reads[pass] != p->n_reads) {
		set_reason(reason, sizeof(reason), "pass %u did %llu reads, plan has %llu", pass,
			   (unsigned long long)r->pass_reads[pass], (unsigned long long)p->n_reads);
		fail(r, reason);
		return -EIO;
	}
	r->passes_done = pass + 1;
	if (emit_iters(r, pass)) {
		fail(r, "cannot write the output");
		return -EIO;
	}
	return 0;
}

static void teardown(struct run *r)
{
	uint32_t i;

	if (r->o->prefetch)
		pf_stop(&r->pf);
	if (r->have_crew) {
		pthread_mutex_lock(&r->crew.mu);
		r->crew.stop = 1;
		pthread_cond_broadcast(&r->crew.go);
		pthread_mutex_unlock(&r->crew.mu);
	}
	if (r->workers) {
		for (i = 0; i < r->o->threads; i++) {
			if (r->workers[i].started)
				pthread_join(r->workers[i].th, NULL);
			io_buf_free(&r->io, r->workers[i].buf);
			rl_free(&r->workers[i].log);
		}
	}
	free(r->workers);
	free(r->recs);
	free(r->pass_wall);
	free(r->pass_bytes);
	free(r->pass_reads);
	free(r->pass_hits);
	for (i = 0; i < 4; i++)
		free(r->pass_hint[i]);
	if (r->have_snap)
		snap_free(&r->snap);
	progress_close(&r->prog);
	if (r->have_arena)
		arena_destroy(&r->arena);
	pool_close(&r->pool);
	if (r->have_hints)
		plan_free(&r->hints);
	if (r->have_plan)
		plan_free(&r->plan);
}

static int read_log_write(struct run *r)
{
	struct rl_buf *bufs = calloc(r->o->threads, sizeof(*bufs));
	uint32_t i;
	int err;

	if (!bufs)
		return -ENOMEM;
	for (i = 0; i < r->o->threads; i++)
		bufs[i] = r->workers[i].log;
	err = rl_write(r->o->read_log_path, bufs, r->o->threads);
	free(bufs);
	return err;
}

int replay_main(const struct replay_opts *o, const char *usage_error)
{
	struct run *r = calloc(1, sizeof(*r));
	int ok = 0, rc = BENCH_EXIT_FAIL;
	uint32_t p;

	if (!r) {
		fprintf(stderr, "bench-agent: out of memory\n");
		return BENCH_EXIT_FAIL;
	}
	r->o = o;
	r->out = stdout;
	if (o->out_path) {
		r->out = fopen(o->out_path, "we");
		if (!r->out) {
			int err = errno;

			fprintf(stderr, "bench-agent: cannot open --out %s: %s\n", o->out_path,
				strerror(err));
			free(r);
			return BENCH_EXIT_FAIL;
		}
	}
	if (usage_error) {
		fail(r, usage_error);
		rc = BENCH_EXIT_USAGE;
		goto out;
	}
	if (setup(r)) {
		if (r->skipped)
			rc = BENCH_EXIT_SKIP;
		goto out;
	}
	for (p = 0; p < o->passes; p++)
		if (run_pass(r, p))
			goto out;
	if (!proc_status_kb("VmLck", &r->vmlck_end_kb))
		r->have_vmlck_end = 1;
	if (r->arena.bytes && r->vmlck_end_kb * 1024 < r->arena.bytes) {
		fail(r, "VmLck fell below the arena during the run");
		goto out;
	}
	ok = 1;
	rc = BENCH_EXIT_OK;
	if (o->read_log_path) {
		int err;

		/* every append happened before its worker's last `remaining` decrement, which
		 * crew_run waited for under the crew's mutex */
		err = read_log_write(r);
		if (err) {
			fail(r, "cannot write --read-log");
			ok = 0;
			rc = BENCH_EXIT_FAIL;
		}
	}
out:
	emit_summary(r, ok);
	if (!ok)
		fprintf(stderr, "bench-agent: %s\n", r->reason);
	teardown(r);
	if (r->out != stdout)
		fclose(r->out);
	free(r);
	return rc;
}
