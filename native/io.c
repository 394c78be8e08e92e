#include "io.h"
#include "pool.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

void io_cfg_init(struct io_cfg *c, enum io_kind kind, uint64_t expert_bytes,
		 uint32_t dio_mem_align, uint32_t dio_offset_align)
{
	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->expert_bytes = expert_bytes;
	c->read_len = expert_bytes;
	c->buf_align = page_size();
	if (kind == IO_DIRECT) {
		/* O_DIRECT needs the length aligned too; the read at EOF then
		 * returns exactly the file's remaining bytes */
		c->dio_align = dio_offset_align ? dio_offset_align : page_size();
		c->read_len = round_up(expert_bytes, c->dio_align);
		if (dio_mem_align > c->buf_align)
			c->buf_align = dio_mem_align;
	}
}

void *io_buf_alloc(const struct io_cfg *c)
{
	size_t len = round_up(c->read_len, page_size());
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	memset(p, 0, len);
	return p;
}

void io_buf_free(const struct io_cfg *c, void *buf)
{
	if (buf)
		munmap(buf, round_up(c->read_len, page_size()));
}

static int short_read(uint64_t got, uint64_t want, char *reason, size_t rlen)
{
	set_reason(reason, rlen, "short read: got %llu of %llu bytes",
		   (unsigned long long)got, (unsigned long long)want);
	return -EIO;
}

/* Loop until bytes [off, want) of the range starting at file offset base are in buf; a 0
 * return before that is a short read (the file shrank or lies about its size). */
static int read_loop(const struct io_cfg *c, int fd, char *buf, uint64_t base, uint64_t off,
		     uint64_t want, char *reason, size_t rlen)
{
	uint64_t start = off;
	/* O_DIRECT reads whole aligned blocks: a file pool's last block ends at EOF (the read
	 * returns the rest), a gguf pool's ranges are aligned (pool_gguf_open) */
	uint64_t cap = c->kind == IO_DIRECT ? round_up(want, c->dio_align) : want;

	while (off < want) {
		ssize_t n;

		if (c->kind == IO_DONTCACHE) {
			struct iovec iov = { buf + off, (size_t)(want - off) };

			n = preadv2(fd, &iov, 1, (off_t)(base + off), RWF_DONTCACHE);
		} else {
			/* partial O_DIRECT reads end on a block boundary, so
			 * continuing at off keeps offset and buffer aligned */
			n = pread(fd, buf + off, (size_t)(cap - off), (off_t)(base + off));
		}
		if (n < 0) {
			int err = errno;

			if (err == EINTR)
				continue;
			set_reason(reason, rlen, "read failed at offset %llu: %s",
				   (unsigned long long)(base + off), strerror(err));
			return -err;
		}
		if (n == 0)
			return short_read(off - start, want - start, reason, rlen);
		off += (uint64_t)n;
	}
	return 0;
}

/* One extent: probe the cache (RWF_NOWAIT returns only what the page cache holds up to date),
 * read the rest, drop it again for IO_DONTNEED. *cached gets the bytes the probe returned. */
static int read_extent(const struct io_cfg *c, int fd, const struct extent *x, char *buf,
		       uint64_t *cached, char *reason, size_t rlen)
{
	uint64_t off = 0;
	int ret;

	if (c->probe_cached && c->kind == IO_PREAD) {
		struct iovec iov = { buf, (size_t)x->len };
		ssize_t n = preadv2(fd, &iov, 1, (off_t)x->off, RWF_NOWAIT);

		if (n > 0) {
			off = (uint64_t)n;
			*cached += off;
		} else if (n < 0) {
			int err = errno;

			if (err != EAGAIN) {
				set_reason(reason, rlen, "preadv2(RWF_NOWAIT) probe: %s", strerror(err));
				return -err;
			}
		}
	}
	ret = read_loop(c, fd, buf, x->off, off, x->len, reason, rlen);
	if (ret)
		return ret;
	if (c->kind == IO_DONTNEED) {
		ret = posix_fadvise(fd, (off_t)x->off, (off_t)x->len, POSIX_FADV_DONTNEED);
		if (ret) {
			set_reason(reason, rlen, "posix_fadvise(DONTNEED): %s", strerror(ret));
			return -ret;
		}
	}
	return 0;
}

int io_read_expert(const struct io_cfg *c, int fd, const struct extent *x, uint32_t n,
		   void *buf, struct io_stat *st, char *reason, size_t rlen)
{
	uint64_t pos = 0, cached = 0;
	uint32_t i;
	int ret;

	for (i = 0; i < n; i++) {
		ret = read_extent(c, fd, &x[i], (char *)buf + pos, &cached, reason, rlen);
		if (ret)
			return ret;
		pos += x[i].len;
	}
	st->cached_bytes += cached;
	if (c->probe_cached && cached == c->expert_bytes)
		st->cached++;       /* served whole by the cache: the device was not touched */
	return 0;
}

int io_probe(const struct io_cfg *c, int fd, char *reason, size_t rlen)
{
	struct iovec iov;
	char *buf;
	ssize_t n;
	int err = 0;
	size_t len = page_size();

	if (c->kind != IO_DONTCACHE && !(c->kind == IO_PREAD && c->probe_cached))
		return 0;
	buf = io_buf_alloc(c);
	if (!buf) {
		set_reason(reason, rlen, "out of memory");
		return -ENOMEM;
	}
	if (len > c->expert_bytes)
		len = (size_t)c->expert_bytes;
	iov = (struct iovec){ buf, len };
	n = preadv2(fd, &iov, 1, 0, c->kind == IO_DONTCACHE ? RWF_DONTCACHE : RWF_NOWAIT);
	if (n < 0)
		err = errno;
	if (!err || (c->kind == IO_PREAD && err == EAGAIN)) {
		err = 0;
	} else if (c->kind == IO_DONTCACHE && err == EOPNOTSUPP) {
		set_reason(reason, rlen,
			   "RWF_DONTCACHE not supported by the pool's filesystem (EOPNOTSUPP)");
	} else if (c->kind == IO_DONTCACHE && (err == EINVAL || err == ENOSYS)) {
		set_reason(reason, rlen,
			   "RWF_DONTCACHE not supported by this kernel (%s; needs Linux 6.14+)",
			   err == EINVAL ? "EINVAL" : "ENOSYS");
	} else if (c->kind == IO_PREAD && err == EOPNOTSUPP) {
		set_reason(reason, rlen,
			   "preadv2(RWF_NOWAIT) not supported by the pool's filesystem (EOPNOTSUPP)");
	} else if (c->kind == IO_PREAD && (err == EINVAL || err == ENOSYS)) {
		set_reason(reason, rlen, "preadv2(RWF_NOWAIT) not supported by this kernel (%s)",
			   err == EINVAL ? "EINVAL" : "ENOSYS");
	} else {
		set_reason(reason, rlen, "preadv2 probe: %s", strerror(err));
	}
	io_buf_free(c, buf);
	return -err;
}
