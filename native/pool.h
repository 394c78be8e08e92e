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
 * the first pass, so a missing file fails before anything is measured.
 *
 * A pool of kind "gguf" is one file, the engine's model itself: pool.json names it and a
 * ranges file maps each expert to its byte ranges in it (its slice of each expert tensor), so
 * a replay reads exactly the pages the engine reads for those experts. One descriptor; the
 * file's size and every range are checked before the first pass. */
#ifndef BENCH_POOL_H
#define BENCH_POOL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Bytes [off, off + len) of an expert's file. */
struct extent {
	uint64_t off, len;
};

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
	/* kind "gguf": the model file, its size, the ranges file and the ranges read from it */
	int gguf;
	char file[PATH_MAX];
	uint64_t file_bytes;
	char ranges_name[256];
	uint32_t ranges_per_expert;    /* gguf: the extents of each expert (1 for files) */
	struct extent *ranges;         /* gguf: [idx * ranges_per_expert + r], in file order */
	struct extent whole;           /* files: {0, expert_bytes} */
	int file_fd;                   /* gguf: the model's descriptor */
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
/* The byte ranges of expert idx in the file pool_get gives: *n of them, in file order, their
 * lengths summing to expert_bytes. */
const struct extent *pool_extents(const struct pool *p, uint64_t idx, uint32_t *n);
const char *pool_strategy(const struct pool *p);

/* Inside the pool code (pool.c, poolgguf.c): open a file never through a symlink or blocking
 * on a FIFO, refusing what is not a regular file (fd or -errno with the reason); record the
 * device's readahead window and direct-I/O alignment from the pool's first file; and the
 * gguf kind's ranges file and model descriptor. */
int pool_open_regular(int dirfd, const char *rel, const char *what, const char *shown,
		      int flags, struct stat *st, char *reason, size_t rlen);
void pool_device_facts(struct pool *p, int fd, const struct stat *st);
int pool_gguf_load_ranges(struct pool *p, char *reason, size_t rlen);
int pool_gguf_open(struct pool *p, int open_flags, int fadv, char *reason, size_t rlen);

#endif
