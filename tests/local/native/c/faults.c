/* Fault injection for the agent's error paths, one case per run: `faults CASE [POOL PLAN]`.
 *
 * Linked with the agent's objects (all but main.c) and `-Wl,--wrap=...` for the libc calls
 * below (see test_agent_faults.py for the exact list), so a case can make one call fail with a
 * chosen errno and then check what the function under test returned and left behind.
 *
 * "clobber" models a conforming libc on the success path: C11 7.5p3 lets any library function
 * whose description does not mention errno set it to a nonzero value, so strerror, vsnprintf
 * (set_reason), close, munmap, fclose and free set errno = EDOM here after doing their job. An
 * error path that reads errno after one of those returns -EDOM or prints "Numerical argument
 * out of domain" instead of the real error, and the case fails.
 *
 * Counters (mutex/cond init and destroy, mmap and munmap) let cleanup cases check that a failed
 * start leaves nothing initialised behind. Exit 0 = the case passed, 1 = it failed (the
 * reason on stderr), 2 = usage. */
#include "arena.h"
#include "io.h"
#include "plan.h"
#include "pool.h"
#include "prefetch.h"
#include "progress.h"
#include "replay.h"
#include "snapshot.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

const char *bench_source_hash = "0000000000000000000000000000000000000000000000000000000000000000";

/* ---- rules ---------------------------------------------------------------------------- */

struct rule {
	const char *fn;
	int err;
	int nth;       /* fail the nth call from now (1 = the next); 0 = every call */
	size_t arg;    /* calloc: fail only when nmemb == arg and size == 1 (0 = any) */
	int calls;
	int fired;
};

static struct rule rules[8];
static int nrules;
static int clobber;
static int n_mutex_init, n_mutex_destroy, n_cond_init, n_cond_destroy, n_mmap, n_munmap;

static void fail_call(const char *fn, int nth, int err)
{
	rules[nrules++] = (struct rule){ .fn = fn, .err = err, .nth = nth };
}

static void reset(void)
{
	memset(rules, 0, sizeof(rules));
	nrules = 0;
	clobber = 0;
	n_mutex_init = n_mutex_destroy = n_cond_init = n_cond_destroy = n_mmap = n_munmap = 0;
}

static int should_fail(const char *fn, size_t arg)
{
	int i;

	for (i = 0; i < nrules; i++) {
		struct rule *r = &rules[i];

		if (strcmp(r->fn, fn) || (r->arg && r->arg != arg))
			continue;
		r->calls++;
		if (r->nth == 0 || r->calls == r->nth) {
			r->fired++;
			return r->err;
		}
	}
	return 0;
}

static void clobber_errno(void)
{
	if (clobber)
		errno = EDOM;
}

/* ---- wrapped libc --------------------------------------------------------------------- */

#define FAIL_IF(fn, arg, retval)                                                  \
	do {                                                                      \
		int e_ = should_fail(fn, arg);                                    \
		if (e_) {                                                         \
			errno = e_;                                               \
			return retval;                                            \
		}                                                                 \
	} while (0)

ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
	FAIL_IF("pread", 0, -1);
	return __real_pread(fd, buf, n, off);
}

ssize_t __real_preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags);
ssize_t __wrap_preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	FAIL_IF("preadv2", 0, -1);
	return __real_preadv2(fd, iov, cnt, off, flags);
}

int __real_open(const char *path, int flags, ...);
int __wrap_open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	FAIL_IF("open", 0, -1);
	return __real_open(path, flags, mode);
}

FILE *__real_fopen(const char *path, const char *mode);
FILE *__wrap_fopen(const char *path, const char *mode)
{
	FAIL_IF("fopen", 0, NULL);
	return __real_fopen(path, mode);
}

int __real_ftruncate(int fd, off_t len);
int __wrap_ftruncate(int fd, off_t len)
{
	FAIL_IF("ftruncate", 0, -1);
	return __real_ftruncate(fd, len);
}

int __real_fstat(int fd, struct stat *st);
int __wrap_fstat(int fd, struct stat *st)
{
	FAIL_IF("fstat", 0, -1);
	return __real_fstat(fd, st);
}

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	FAIL_IF("write", 0, -1);
	return __real_write(fd, buf, n);
}

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *p;

	FAIL_IF("mmap", 0, MAP_FAILED);
	p = __real_mmap(addr, len, prot, flags, fd, off);
	if (p != MAP_FAILED)
		n_mmap++;
	return p;
}

int __real_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len)
{
	int ret = __real_munmap(addr, len);

	if (!ret)
		n_munmap++;
	clobber_errno();
	return ret;
}

int __real_mlock(const void *addr, size_t len);
int __wrap_mlock(const void *addr, size_t len)
{
	FAIL_IF("mlock", 0, -1);
	return __real_mlock(addr, len);
}

void *__real_calloc(size_t nmemb, size_t size);
void *__wrap_calloc(size_t nmemb, size_t size)
{
	if (size == 1)
		FAIL_IF("calloc1", nmemb, NULL);
	return __real_calloc(nmemb, size);
}

int __real_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	int e = should_fail("pthread_create", 0);

	if (e)
		return e; /* pthreads return the error, errno untouched */
	return __real_pthread_create(t, a, fn, arg);
}

int __real_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a);
int __wrap_pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
	int e = should_fail("pthread_mutex_init", 0);

	if (e)
		return e;
	e = __real_pthread_mutex_init(m, a);
	if (!e)
		n_mutex_init++;
	return e;
}

int __real_pthread_mutex_destroy(pthread_mutex_t *m);
int __wrap_pthread_mutex_destroy(pthread_mutex_t *m)
{
	n_mutex_destroy++;
	return __real_pthread_mutex_destroy(m);
}

int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
	int e = should_fail("pthread_cond_init", 0);

	if (e)
		return e;
	e = __real_pthread_cond_init(c, a);
	if (!e)
		n_cond_init++;
	return e;
}

int __real_pthread_cond_destroy(pthread_cond_t *c);
int __wrap_pthread_cond_destroy(pthread_cond_t *c)
{
	n_cond_destroy++;
	return __real_pthread_cond_destroy(c);
}

/* the success paths that may legally change errno */
char *__real_strerror(int e);
char *__wrap_strerror(int e)
{
	char *s = __real_strerror(e);

	clobber_errno();
	return s;
}

int __real_vsnprintf(char *s, size_t n, const char *fmt, va_list ap);
int __wrap_vsnprintf(char *s, size_t n, const char *fmt, va_list ap)
{
	int r = __real_vsnprintf(s, n, fmt, ap);

	clobber_errno();
	return r;
}

int __real_close(int fd);
int __wrap_close(int fd)
{
	int r = __real_close(fd);

	if (!r)
		clobber_errno();
	return r;
}

int __real_fclose(FILE *f);
int __wrap_fclose(FILE *f)
{
	int r = __real_fclose(f);

	if (!r)
		clobber_errno();
	return r;
}

void __real_free(void *p);
void __wrap_free(void *p)
{
	__real_free(p);
	clobber_errno();
}

/* ---- checks --------------------------------------------------------------------------- */

static int failures;

#define CHECK(cond, ...)                                                          \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                             \
			fputc('\n', stderr);                                      \
			failures++;                                               \
		}                                                                 \
	} while (0)

static void check_ret(const char *what, int got, int want, const char *reason)
{
	CHECK(got == want, "%s returned %d (%s), want %d (%s); reason \"%s\"", what, got,
	      got < 0 ? strerror(-got) : "-", want, want < 0 ? strerror(-want) : "-",
	      reason ? reason : "");
}

static void check_reason(const char *reason, const char *want)
{
	CHECK(strstr(reason, want) != NULL, "reason \"%s\" lacks \"%s\"", reason, want);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the DIR's own descriptor */
}

/* A mkstemp/mkdtemp template under $TMPDIR (the test's own directory), else /tmp. */
static char *tmp_template(char *buf, size_t len, const char *what)
{
	const char *dir = getenv("TMPDIR");

	snprintf(buf, len, "%s/bench-faults-%s-XXXXXX", dir && *dir ? dir : "/tmp", what);
	return buf;
}

static int load_pool(struct pool *pool, const char *dir)
{
	char reason[REASON_LEN] = "";

	if (pool_load_manifest(pool, dir, reason, sizeof(reason)) ||
	    pool_open_all(pool, 0, 0, reason, sizeof(reason))) {
		fprintf(stderr, "cannot load the pool %s: %s\n", dir, reason);
		return -1;
	}
	return 0;
}

/* ---- cases: errno saved before anything else runs ------------------------------------- */

static void case_freq_enoent(void)
{
	uint64_t counts[4] = { 0 };
	char reason[REASON_LEN] = "";
	int ret;

	clobber = 1;
	ret = freq_from_file("/nonexistent/freq.txt", 2, 2, counts, reason, sizeof(reason));
	check_ret("freq_from_file", ret, -ENOENT, reason);
	check_reason(reason, strerror(ENOENT));
}

static void io_setup(struct io_cfg *c, enum io_kind kind, int probe_cached, int *fd, void **buf)
{
	char path[4096];
	char data[8192];

	tmp_template(path, sizeof(path), "io");

	memset(data, 7, sizeof(data));
	*fd = mkstemp(path);
	if (*fd < 0 || __real_write(*fd, data, sizeof(data)) != (ssize_t)sizeof(data)) {
		perror("temp file");
		exit(1);
	}
	unlink(path);
	io_cfg_init(c, kind, sizeof(data), 4096, 4096);
	c->probe_cached = probe_cached;
	*buf = io_buf_alloc(c);
}

static void case_io_nowait_eio(void)
{
	struct io_cfg c;
	struct io_stat st = { 0 };
	struct extent whole;
	char reason[REASON_LEN] = "";
	void *buf;
	int fd, ret;

	io_setup(&c, IO_PREAD, 1, &fd, &buf);
	whole = (struct extent){ 0, c.expert_bytes };
	fail_call("preadv2", 1, EIO);
	clobber = 1;
	ret = io_read_expert(&c, fd, &whole, 1, buf, &st, reason, sizeof(reason));
	check_ret("io_read_expert (RWF_NOWAIT probe)", ret, -EIO, reason);
	check_reason(reason, strerror(EIO));
}

static void case_io_read_eio(void)
{
	struct io_cfg c;
	struct io_stat st = { 0 };
	struct extent whole;
	char reason[REASON_LEN] = "";
	void *buf;
	int fd, ret;

	io_setup(&c, IO_PREAD, 0, &fd, &buf);
	whole = (struct extent){ 0, c.expert_bytes };
	fail_call("pread", 1, EIO);
	clobber = 1;
	ret = io_read_expert(&c, fd, &whole, 1, buf, &st, reason, sizeof(reason));
	check_ret("io_read_expert (pread)", ret, -EIO, reason);
	check_reason(reason, strerror(EIO));
}

static void case_io_probe(void)
{
	static const struct { enum io_kind kind; int probe_cached, err; const char *text; } t[] = {
		{ IO_DONTCACHE, 0, EOPNOTSUPP, "RWF_DONTCACHE not supported by the pool's filesystem" },
		{ IO_DONTCACHE, 0, EINVAL, "RWF_DONTCACHE not supported by this kernel" },
		{ IO_DONTCACHE, 0, EIO, "Input/output error" },
		{ IO_PREAD, 1, EOPNOTSUPP, "RWF_NOWAIT" },
		{ IO_PREAD, 1, EIO, "Input/output error" },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct io_cfg c;
		char reason[REASON_LEN] = "";
		void *buf;
		int fd, ret;

		reset();
		io_setup(&c, t[i].kind, t[i].probe_cached, &fd, &buf);
		fail_call("preadv2", 1, t[i].err);
		clobber = 1;
		ret = io_probe(&c, fd, reason, sizeof(reason));
		check_ret("io_probe", ret, -t[i].err, reason);
		check_reason(reason, t[i].text);
		clobber = 0;
		io_buf_free(&c, buf);
		close(fd);
	}
}

static void case_arena_preload_eio(const char *pool_dir)
{
	struct pool pool;
	struct arena a;
	char reason[REASON_LEN] = "";
	uint64_t *counts;
	int ret;

	if (load_pool(&pool, pool_dir)) {
		failures++;
		return;
	}
	counts = __real_calloc((size_t)pool.layers * pool.experts_per_layer, sizeof(*counts));
	counts[0] = counts[1] = 1;
	ret = arena_create(&a, 2 * pool.expert_bytes, &pool, reason, sizeof(reason));
	check_ret("arena_create", ret, 0, reason);
	fail_call("pread", 1, EIO);
	clobber = 1;
	ret = arena_preload(&a, &pool, counts, reason, sizeof(reason));
	clobber = 0;
	check_ret("arena_preload", ret, -EIO, reason);
	check_reason(reason, strerror(EIO));
	arena_destroy(&a);
	pool_close(&pool);
}

static void case_arena_mmap_mlock(const char *pool_dir)
{
	struct pool pool;
	struct arena a;
	char reason[REASON_LEN] = "";
	int ret;

	if (load_pool(&pool, pool_dir)) {
		failures++;
		return;
	}
	fail_call("mmap", 1, EAGAIN);
	clobber = 1;
	ret = arena_create(&a, pool.expert_bytes, &pool, reason, sizeof(reason));
	clobber = 0;
	check_ret("arena_create (mmap)", ret, -EAGAIN, reason);
	check_reason(reason, strerror(EAGAIN));
	arena_destroy(&a);

	reset();
	fail_call("mlock", 1, EPERM);
	clobber = 1;
	ret = arena_create(&a, pool.expert_bytes, &pool, reason, sizeof(reason));
	clobber = 0;
	check_ret("arena_create (mlock)", ret, -EPERM, reason);
	check_reason(reason, strerror(EPERM));
	arena_destroy(&a);
	pool_close(&pool);
}

static void case_progress_open(void)
{
	static const struct { const char *fn; int err; } t[] = {
		{ "open", EACCES }, { "ftruncate", EFBIG }, { "mmap", ENODEV },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct progress p;
		char reason[REASON_LEN] = "", path[4096];
		int fd = mkstemp(tmp_template(path, sizeof(path), "progress")), before, ret;

		close(fd);
		reset();
		before = count_fds();
		fail_call(t[i].fn, 1, t[i].err);
		clobber = 1;
		ret = progress_open(&p, path, 2, 10, reason, sizeof(reason));
		clobber = 0;
		check_ret(t[i].fn, ret, -t[i].err, reason);
		check_reason(reason, strerror(t[i].err));
		CHECK(p.w == NULL, "progress mapping left behind after a failed %s", t[i].fn);
		CHECK(count_fds() == before, "%s failure leaked a descriptor", t[i].fn);
		unlink(path);
	}
}

static void case_pool_open(const char *pool_dir)
{
	static const struct { const char *fn; int err; } t[] = { { "open", EACCES }, { "fstat", EIO } };
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct pool pool;
		char reason[REASON_LEN] = "";
		int before = count_fds(), ret;

		reset();
		ret = pool_load_manifest(&pool, pool_dir, reason, sizeof(reason));
		check_ret("pool_load_manifest", ret, 0, reason);
		fail_call(t[i].fn, 1, t[i].err);
		clobber = 1;
		ret = pool_open_all(&pool, 0, 0, reason, sizeof(reason));
		clobber = 0;
		check_ret(t[i].fn, ret, -t[i].err, reason);
		check_reason(reason, strerror(t[i].err));
		CHECK(count_fds() == before, "failed pool_open_all (%s) leaked descriptors", t[i].fn);
	}
}

static void case_snap_write(void)
{
	struct snapshots *s = __real_calloc(1, sizeof(*s));
	const char *files[] = { "/proc/self/stat" };
	char dir[4096], reason[REASON_LEN] = "";
	int before, ret;

	if (!s || !mkdtemp(tmp_template(dir, sizeof(dir), "snap"))) {
		perror("snap setup");
		exit(1);
	}
	ret = snap_init(s, dir, files, 1, reason, sizeof(reason));
	check_ret("snap_init", ret, 0, reason);
	snap_take(s, 0);
	snap_take(s, 1);
	before = count_fds();
	fail_call("write", 1, ENOSPC);
	clobber = 1;
	ret = snap_write(s, 0, reason, sizeof(reason));
	clobber = 0;
	check_ret("snap_write", ret, -ENOSPC, reason);
	check_reason(reason, strerror(ENOSPC));
	CHECK(count_fds() == before, "failed snap_write leaked a descriptor");
	snap_free(s);
}

static void case_snap_init(void)
{
	const char *two[] = { "/proc/self/stat", "/proc/self/statm" };
	const char *dup[] = { "/proc/self/stat", "proc/self/stat" };
	struct snapshots *s = __real_calloc(1, sizeof(*s));
	char dir[4096], reason[REASON_LEN] = "";
	int ret;

	if (!s || !mkdtemp(tmp_template(dir, sizeof(dir), "snap"))) {
		perror("snap setup");
		exit(1);
	}
	/* the second file's first buffer: the first file's two are mapped by then */
	fail_call("mmap", 3, ENOMEM);
	clobber = 1;
	ret = snap_init(s, dir, two, 2, reason, sizeof(reason));
	clobber = 0;
	check_ret("snap_init (mmap)", ret, -ENOMEM, reason);
	check_reason(reason, strerror(ENOMEM));
	CHECK(n_mmap == n_munmap, "failed snap_init: %d buffers mapped, %d unmapped", n_mmap,
	      n_munmap);
	CHECK(s->n == 0, "failed snap_init left %d files", s->n);

	reset();
	reason[0] = '\0';
	ret = snap_init(s, dir, dup, 2, reason, sizeof(reason));
	check_ret("snap_init (same name)", ret, -EINVAL, reason);
	check_reason(reason, "map to the name");
	CHECK(n_mmap == n_munmap, "failed snap_init: %d buffers mapped, %d unmapped", n_mmap,
	      n_munmap);
	free(s);
}

/* ---- cases: prefetcher start cleans up after itself ----------------------------------- */

static void case_pf_start(const char *pool_dir)
{
	static const struct { const char *fn; int nth, err; enum pf_kind kind; } t[] = {
		{ "pthread_create", 1, EAGAIN, PF_BLOCK },
		{ "pthread_create", 1, EAGAIN, PF_ADVICE },
		{ "mmap", 1, ENOMEM, PF_BLOCK },
		{ "pthread_mutex_init", 1, ENOMEM, PF_ADVICE },
		{ "pthread_cond_init", 1, ENOMEM, PF_ADVICE },
		{ "pthread_cond_init", 2, ENOMEM, PF_BLOCK },
	};
	struct pool pool;
	struct io_cfg io;
	size_t i;

	if (load_pool(&pool, pool_dir)) {
		failures++;
		return;
	}
	io_cfg_init(&io, IO_PREAD, pool.expert_bytes, 4096, 4096);
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct prefetcher pf;
		char reason[REASON_LEN] = "";
		int ret;

		reset();
		memset(&pf, 0x5a, sizeof(pf)); /* garbage, as an uninitialised struct would be */
		fail_call(t[i].fn, t[i].nth, t[i].err);
		ret = pf_start(&pf, t[i].kind, &pool, &io, 0, reason, sizeof(reason));
		check_ret(t[i].fn, ret, -t[i].err, reason);
		CHECK(reason[0] != '\0', "no reason after a failed %s", t[i].fn);
		CHECK(!pf.started, "started set after a failed %s", t[i].fn);
		CHECK(pf.buf == NULL, "buffer pointer left after a failed %s", t[i].fn);
		CHECK(n_mmap == n_munmap, "%s: %d buffers mapped, %d unmapped", t[i].fn, n_mmap,
		      n_munmap);
		CHECK(n_mutex_init == n_mutex_destroy, "%s: %d mutex inits, %d destroys", t[i].fn,
		      n_mutex_init, n_mutex_destroy);
		CHECK(n_cond_init == n_cond_destroy, "%s: %d cond inits, %d destroys", t[i].fn,
		      n_cond_init, n_cond_destroy);
		/* what replay's teardown does with it: must be harmless */
		pf_stop(&pf);
		CHECK(n_mutex_init == n_mutex_destroy && n_cond_init == n_cond_destroy,
		      "%s: pf_stop after a failed start destroyed again", t[i].fn);
	}
	/* and a start that works still stops cleanly */
	{
		struct prefetcher pf;
		char reason[REASON_LEN] = "";
		int ret;

		reset();
		ret = pf_start(&pf, PF_BLOCK, &pool, &io, 0, reason, sizeof(reason));
		check_ret("pf_start", ret, 0, reason);
		pf_stop(&pf);
		CHECK(n_mmap == n_munmap && n_mutex_init == n_mutex_destroy &&
		      n_cond_init == n_cond_destroy, "a clean start and stop left something behind");
	}
	pool_close(&pool);
}

/* ---- cases: replay turns an allocation failure into a fail-stop reason ---------------- */

static void case_count_distinct_enomem(const char *pool_dir, const char *plan_path)
{
	struct replay_opts o;
	struct pool pool;
	char reason[REASON_LEN] = "", out[4096], text[65536];
	int fd = mkstemp(tmp_template(out, sizeof(out), "out")), rc;
	size_t len = 0;

	close(fd);
	if (pool_load_manifest(&pool, pool_dir, reason, sizeof(reason))) {
		fprintf(stderr, "pool: %s\n", reason);
		failures++;
		return;
	}
	memset(&o, 0, sizeof(o));
	o.pool_dir = pool_dir;
	o.plan_path = plan_path;
	o.out_path = out;
	o.threads = 2;
	o.passes = 1;
	o.mode = MODE_PAGECACHE;
	/* count_distinct's table: one byte per (layer, expert) of the plan */
	rules[nrules++] = (struct rule){ .fn = "calloc1", .err = ENOMEM,
					 .arg = (size_t)pool.layers * pool.experts_per_layer };
	rc = replay_main(&o, NULL);
	CHECK(rules[0].fired == 1, "the distinct-expert table was allocated %d times (rule fired %d)",
	      rules[0].calls, rules[0].fired);
	CHECK(rc == 1, "replay_main returned %d, want 1", rc);
	CHECK(read_text_file(out, text, sizeof(text), &len) == 0, "cannot read %s", out);
	CHECK(strstr(text, "\"ok\":false") != NULL, "summary not ok:false: %s", text);
	CHECK(strstr(text, "out of memory") != NULL, "no out-of-memory reason: %s", text);
	CHECK(strstr(text, "\"pass\":") == NULL, "records written after the failure: %s", text);
	unlink(out);
}

/* The probe's verdict decides the exit code: a missing capability skips (4), any other error
 * at the same place fails (1). */
static void case_probe_exit_codes(const char *pool_dir, const char *plan_path)
{
	static const struct { int err, rc; const char *skipped; } t[] = {
		{ EOPNOTSUPP, BENCH_EXIT_SKIP, "\"skipped\":true" },
		{ EINVAL, BENCH_EXIT_SKIP, "\"skipped\":true" },
		{ EIO, BENCH_EXIT_FAIL, "\"skipped\":false" },
		{ EACCES, BENCH_EXIT_FAIL, "\"skipped\":false" },
	};
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct replay_opts o;
		char out[4096], text[65536] = "";
		int fd = mkstemp(tmp_template(out, sizeof(out), "out")), rc;

		close(fd);
		reset();
		memset(&o, 0, sizeof(o));
		o.pool_dir = pool_dir;
		o.plan_path = plan_path;
		o.out_path = out;
		o.threads = 1;
		o.passes = 1;
		o.mode = MODE_NOCACHE;
		o.nocache = IO_DONTCACHE;
		fail_call("preadv2", 1, t[i].err);
		rc = replay_main(&o, NULL);
		CHECK(rules[0].fired == 1, "the probe's preadv2 was not the first (fired %d)",
		      rules[0].fired);
		CHECK(rc == t[i].rc, "probe error %s: exit %d, want %d", strerror(t[i].err), rc,
		      t[i].rc);
		read_text_file(out, text, sizeof(text), NULL);
		CHECK(strstr(text, t[i].skipped) != NULL, "probe error %s: summary lacks %s: %s",
		      strerror(t[i].err), t[i].skipped, text);
		CHECK(strstr(text, "\"ok\":false") != NULL, "summary not ok:false: %s", text);
		unlink(out);
	}
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	const char *pool = argc > 2 ? argv[2] : NULL, *plan = argc > 3 ? argv[3] : NULL;

	reset();
	if (!strcmp(c, "freq-enoent")) case_freq_enoent();
	else if (!strcmp(c, "io-nowait-eio")) case_io_nowait_eio();
	else if (!strcmp(c, "io-read-eio")) case_io_read_eio();
	else if (!strcmp(c, "io-probe")) case_io_probe();
	else if (!strcmp(c, "progress-open")) case_progress_open();
	else if (!strcmp(c, "snap-write")) case_snap_write();
	else if (!strcmp(c, "snap-init")) case_snap_init();
	else if (pool && !strcmp(c, "arena-preload-eio")) case_arena_preload_eio(pool);
	else if (pool && !strcmp(c, "arena-mmap-mlock")) case_arena_mmap_mlock(pool);
	else if (pool && !strcmp(c, "pool-open")) case_pool_open(pool);
	else if (pool && !strcmp(c, "pf-start")) case_pf_start(pool);
	else if (pool && plan && !strcmp(c, "count-distinct-enomem"))
		case_count_distinct_enomem(pool, plan);
	else if (pool && plan && !strcmp(c, "probe-exit-codes"))
		case_probe_exit_codes(pool, plan);
	else {
		fprintf(stderr, "usage: faults CASE [POOL [PLAN]]\n");
		return 2;
	}
	clobber = 0;
	if (failures)
		fprintf(stderr, "%s: %d check(s) failed\n", c, failures);
	else
		printf("ok %s\n", c);
	return failures ? 1 : 0;
}
