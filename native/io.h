/* One expert read, as each mode does it: the only code that touches expert
 * data on the demand path (replay workers) and in the block prefetcher. */
#ifndef BENCH_IO_H
#define BENCH_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

enum io_kind {
	IO_PREAD,      /* pagecache, random, pinned/hybrid misses */
	IO_DIRECT,     /* nocache direct: O_DIRECT descriptors, aligned buffer */
	IO_DONTNEED,   /* nocache dontneed: pread, then POSIX_FADV_DONTNEED */
	IO_DONTCACHE,  /* nocache dontcache: preadv2(RWF_DONTCACHE) */
};

struct io_cfg {
	enum io_kind kind;
	uint64_t expert_bytes;
	uint64_t read_len;     /* expert_bytes, rounded up to the DIO alignment for IO_DIRECT */
	uint64_t dio_align;    /* IO_DIRECT: the offset alignment a read's length is rounded to */
	size_t buf_align;      /* destination buffer alignment */
	int probe_cached;      /* try RWF_NOWAIT first to learn whether the cache served it */
};

struct io_stat {
	uint64_t cached;       /* reads fully served by the RWF_NOWAIT probe */
	uint64_t cached_bytes; /* bytes the probe returned (fully or partly cached reads) */
};

#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080 /* Linux 6.14 uapi; Debian 12 headers predate it */
#endif

void io_cfg_init(struct io_cfg *c, enum io_kind kind, uint64_t expert_bytes,
		 uint32_t dio_mem_align, uint32_t dio_offset_align);
/* Buffer of read_len bytes, aligned and pre-faulted (no page fault in a pass). */
void *io_buf_alloc(const struct io_cfg *c);
void io_buf_free(const struct io_cfg *c, void *buf);
/* Read an expert's extents (pool_extents: n ranges of fd, lengths summing to expert_bytes)
 * one after the other into buf. 0, -EIO with reason on a short read, or -errno. */
struct extent;
int io_read_expert(const struct io_cfg *c, int fd, const struct extent *x, uint32_t n,
		   void *buf, struct io_stat *st, char *reason, size_t rlen);
/* Check once, before any pass, that the kernel and filesystem accept the mode: 0, or -errno
 * with the reason. -EOPNOTSUPP, -EINVAL and -ENOSYS mean the kernel or the file system lacks
 * RWF_DONTCACHE (or RWF_NOWAIT, for probe_cached): see io_unsupported. */
int io_probe(const struct io_cfg *c, int fd, char *reason, size_t rlen);
/* Whether io_probe's return means a missing capability: the run is skipped, not failed. */
static inline int io_unsupported(int ret)
{
	return ret == -EOPNOTSUPP || ret == -EINVAL || ret == -ENOSYS;
}

#endif
