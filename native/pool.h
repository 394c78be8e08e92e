/* The expert pool: pool.json manifest, path template, and the descriptors.
 * Descriptor strategy:
 *  - "all-open" (the normal case): every expert file is opened once, up front,
 *    and kept open for the whole run (82,432 files for the paper's model), after
 *    raising RLIMIT_NOFILE (soft, and hard when privileged, up to fs.nr_open) to
 *    fit. No open() ever happens inside a timed pass.
 *  - "per-read" (fallback, when the limit cannot be raised that far, e.g. root
 *    without CAP_SYS_RESOURCE): each access opens the file (openat on the pool
 *    directory, with the mode's flags and advice), reads and closes it. Page
 *    cache state is per inode, so caching, WILLNEED and DONTNEED behave the
 *    same; the open costs a few microseconds of dcache lookup per read.
 * Either way every file is checked (exists, regular, expert_bytes long) before
 * the first pass, so a missing file fails before anything is measured. */
#ifndef BENCH_POOL_H
#define BENCH_POOL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct pool {
	char dir[PATH_MAX];
	char tmpl[256];
	uint32_t layers, experts_per_layer;
	uint64_t expert_bytes;
	int *fds;                  /* all-open: [layer * experts_per_layer + expert] */
	int per_read;              /* the fallback strategy: fds is NULL */
	int dirfd;                 /* the pool directory, for openat */
	int open_flags, fadv;
	char *relpaths;            /* per-read: NUL-separated relative paths ... */
	uint32_t *reloff;          /* ... and each one's offset */
	uint64_t nofile_limit;     /* RLIMIT_NOFILE soft limit after raising */
	uint32_t dio_mem_align;    /* statx STATX_DIOALIGN, 0 when O_DIRECT unsupported */
	uint32_t dio_offset_align;
	/* Linux caps one POSIX_FADV_WILLNEED call at max(read_ahead_kb,
	 * max_sectors_kb) of the backing device; 0 when unknown */
	uint64_t ra_window;
};

int pool_load_manifest(struct pool *p, const char *dir, char *reason, size_t rlen);
int pool_expert_path(const struct pool *p, uint32_t layer, uint32_t expert, char *out, size_t len);
/* open_flags are added to O_RDONLY|O_CLOEXEC; fadv != 0 is applied to every fd. 0, or -errno
 * with the reason; -EOPNOTSUPP when open_flags has O_DIRECT and the file system refuses it
 * (open gave EINVAL). */
int pool_open_all(struct pool *p, int open_flags, int fadv, char *reason, size_t rlen);
void pool_close(struct pool *p);

/* A descriptor for expert idx = layer * experts_per_layer + expert; release it
 * with pool_put. 0 or -errno. */
int pool_get(const struct pool *p, uint64_t idx, int *fd);
void pool_put(const struct pool *p, int fd);
const char *pool_strategy(const struct pool *p);

#endif
