#include "balloon.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

/* The ready file first, then stdout: whoever sees the line on stdout can rely
 * on the file being there too. */
static int emit(struct jline *j, const char *ready_file)
{
	if (jl_finish(j))
		return -ENOBUFS;
	if (ready_file) {
		/* write-then-rename: a runner polling the file never sees half a line */
		char tmp[4096 + 8];
		int fd, ret = 0;

		snprintf(tmp, sizeof(tmp), "%s.tmp", ready_file);
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0) {
			ret = -errno;
			goto cleanup;
		}
		ret = write_full(fd, j->buf, j->len);
		if (!ret && fsync(fd))
			ret = -errno;
		if (close(fd) && !ret)
			ret = -errno;
		if (!ret && rename(tmp, ready_file))
			ret = -errno;
cleanup:
		if (ret) {
			fprintf(stderr, "bench-agent balloon: cannot write %s: %s\n", ready_file,
				strerror(-ret));
			return -EIO;
		}
	}
	return jl_emit(j, stdout);
}

static int fail(const char *ready_file, const char *reason, uint64_t bytes)
{
	struct jline *j = malloc(sizeof(*j));

	fprintf(stderr, "bench-agent balloon: %s\n", reason);
	if (j) {
		jl_begin(j);
		jl_bool(j, "ready", 0);
		jl_u64(j, "bytes", bytes);
		jl_bool(j, "ok", 0);
		jl_str(j, "reason", reason);
		emit(j, ready_file);
		free(j);
	}
	return BENCH_EXIT_FAIL;
}

int balloon_main(const struct balloon_opts *o)
{
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
	uint64_t avail_kb = 0, vmlck_kb = 0, bytes, off, ps = page_size();
	char reason[REASON_LEN];
	struct jline *j = NULL;
	sigset_t set;
	char *mem;
	int sig = 0, rc = BENCH_EXIT_FAIL;

	if (meminfo_kb("MemAvailable", &avail_kb))
		return fail(o->ready_file, "cannot read MemAvailable from /proc/meminfo", 0);
	if (o->have_leave) {
		if (o->leave_available >= avail_kb * 1024) {
			set_reason(reason, sizeof(reason),
				   "cannot leave %llu bytes available: MemAvailable is only %llu",
				   (unsigned long long)o->leave_available,
				   (unsigned long long)avail_kb * 1024);
			return fail(o->ready_file, reason, 0);
		}
		bytes = avail_kb * 1024 - o->leave_available;
	} else {
		bytes = o->bytes;
	}
	bytes = round_up(bytes, ps);
	if (!bytes)
		return fail(o->ready_file, "balloon of 0 bytes", 0);
	/* Faulting in more than is available would wake the OOM killer (which may
	 * pick another process) instead of failing: refuse up front. */
	if (bytes > avail_kb * 1024) {
		set_reason(reason, sizeof(reason),
			   "cannot lock %llu bytes: MemAvailable is only %llu bytes",
			   (unsigned long long)bytes, (unsigned long long)avail_kb * 1024);
		return fail(o->ready_file, reason, bytes);
	}

	/* block the stop signals before anything else, so one sent early is
	 * taken by sigwait rather than killing us mid-lock */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);

	signal(SIGPIPE, SIG_IGN); /* a gone reader must not kill a held balloon */
	setrlimit(RLIMIT_MEMLOCK, &rl); /* best effort; CAP_IPC_LOCK suffices */
	mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (mem == MAP_FAILED) {
		int err = errno;

		set_reason(reason, sizeof(reason), "mmap of %llu bytes: %s",
			   (unsigned long long)bytes, strerror(err));
		return fail(o->ready_file, reason, bytes);
	}
	if (mlock(mem, bytes)) {
		int err = errno;

		set_reason(reason, sizeof(reason), "mlock of %llu bytes failed: %s",
			   (unsigned long long)bytes, strerror(err));
		munmap(mem, bytes);
		return fail(o->ready_file, reason, bytes);
	}
	/* mlock already populated the pages; writing one byte per page makes each
	 * a private anonymous page for certain (never the shared zero page) */
	for (off = 0; off < bytes; off += ps)
		mem[off] = 1;
	if (proc_status_kb("VmLck", &vmlck_kb) || vmlck_kb * 1024 < bytes) {
		set_reason(reason, sizeof(reason), "VmLck is %llu bytes, below the %llu requested",
			   (unsigned long long)vmlck_kb * 1024, (unsigned long long)bytes);
		munmap(mem, bytes);
		return fail(o->ready_file, reason, bytes);
	}
	meminfo_kb("MemAvailable", &avail_kb);
	j = malloc(sizeof(*j));
	if (!j) {
		munmap(mem, bytes);
		return fail(o->ready_file, "out of memory", bytes);
	}
	jl_begin(j);
	jl_bool(j, "ready", 1);
	jl_u64(j, "pid", (uint64_t)getpid());
	jl_u64(j, "bytes", bytes);
	jl_u64(j, "vmlck_bytes", vmlck_kb * 1024);
	jl_u64(j, "mem_available_after", avail_kb * 1024);
	jl_u64(j, "page_size", ps);
	jl_bool(j, "ok", 1);
	if (emit(j, o->ready_file)) {
		fprintf(stderr, "bench-agent balloon: cannot report ready\n");
		goto cleanup;
	}
	while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
		; /* a hang-up of the launching session must not deflate the balloon */
	jl_begin(j);
	jl_bool(j, "released", 1);
	jl_u64(j, "bytes", bytes);
	jl_str(j, "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	jl_emit(j, stdout);
	rc = BENCH_EXIT_OK;
cleanup:
	free(j);
	munlock(mem, bytes);
	munmap(mem, bytes);
	return rc;
}
