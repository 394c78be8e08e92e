/* A pool of kind "gguf": the model file itself, and the ranges file that maps each expert to
 * its byte ranges in it (docs/formats.md, "A pool over a GGUF"). Written by
 * `bench plan --from-gguf`; everything in it is checked here before the first pass:
 *   ranges file: "BRNG", u32 version 1, u32 layers, u32 experts_per_layer,
 *                u32 ranges_per_expert, u32 0, then for every expert in (layer, expert) order
 *                ranges_per_expert pairs of u64 (offset, length), little-endian.
 * Each range lies inside the file, is non-empty, the ranges of one expert are in file order
 * without overlap and their lengths sum to expert_bytes. */
#include "pool.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RANGES_MAGIC "BRNG"
#define RANGES_HEADER 24
#define RANGES_MAX_PER_EXPERT 16
/* 82,432 experts x 3 ranges is 4 MB: a bound far above any model, below any harm */
#define RANGES_MAX_BYTES (256ULL << 20)

static int read_all(int fd, unsigned char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}

/* One expert's ranges: inside the file, in order, not overlapping, summing to expert_bytes. */
static int check_expert(const struct pool *p, uint64_t idx, char *reason, size_t rlen)
{
	const struct extent *x = p->ranges + idx * p->ranges_per_expert;
	uint64_t sum = 0, end = 0;
	uint32_t r;

	for (r = 0; r < p->ranges_per_expert; r++) {
		if (!x[r].len || x[r].off > p->file_bytes || x[r].len > p->file_bytes - x[r].off ||
		    (r && x[r].off < end)) {
			set_reason(reason, rlen, "pool %s: %s: range %u of L%llu/E%llu (offset %llu, "
				   "%llu bytes) is empty, overlaps or lies outside the %llu-byte file",
				   p->dir, p->ranges_name, r,
				   (unsigned long long)(idx / p->experts_per_layer),
				   (unsigned long long)(idx % p->experts_per_layer),
				   (unsigned long long)x[r].off, (unsigned long long)x[r].len,
				   (unsigned long long)p->file_bytes);
			return -EINVAL;
		}
		end = x[r].off + x[r].len;
		sum += x[r].len;
	}
	if (sum != p->expert_bytes) {
		set_reason(reason, rlen, "pool %s: %s: the ranges of L%llu/E%llu sum to %llu bytes, "
			   "pool says expert_bytes %llu", p->dir, p->ranges_name,
			   (unsigned long long)(idx / p->experts_per_layer),
			   (unsigned long long)(idx % p->experts_per_layer), (unsigned long long)sum,
			   (unsigned long long)p->expert_bytes);
		return -EINVAL;
	}
	return 0;
}

int pool_gguf_load_ranges(struct pool *p, char *reason, size_t rlen)
{
	uint64_t experts = (uint64_t)p->layers * p->experts_per_layer, n, want, i;
	unsigned char *buf = NULL, head[RANGES_HEADER];
	char shown[PATH_MAX + 300];
	struct stat st;
	int fd, ret;

	snprintf(shown, sizeof(shown), "%s/%s", p->dir, p->ranges_name);
	n = experts * p->ranges_per_expert;      /* both factors bounded first: no overflow */
	want = RANGES_HEADER + n * 16;
	if (!p->ranges_per_expert || p->ranges_per_expert > RANGES_MAX_PER_EXPERT ||
	    experts > RANGES_MAX_BYTES / 16 || want > RANGES_MAX_BYTES) {
		set_reason(reason, rlen, "pool %s: ranges_per_expert %u is not 1 to %d, or the "
			   "ranges would exceed %llu bytes", p->dir, p->ranges_per_expert,
			   RANGES_MAX_PER_EXPERT, RANGES_MAX_BYTES);
		return -EINVAL;
	}
	fd = pool_open_regular(AT_FDCWD, shown, "ranges file", shown, 0, &st, reason, rlen);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size != want) {
		set_reason(reason, rlen, "pool %s: %s has %lld bytes, %u x %u experts x %u ranges "
			   "need %llu", p->dir, p->ranges_name, (long long)st.st_size, p->layers,
			   p->experts_per_layer, p->ranges_per_expert, (unsigned long long)want);
		ret = -EINVAL;
		goto cleanup;
	}
	ret = read_all(fd, head, sizeof(head));
	if (ret)
		goto short_read;
	if (memcmp(head, RANGES_MAGIC, 4) || le32(head + 4) != 1 || le32(head + 8) != p->layers ||
	    le32(head + 12) != p->experts_per_layer || le32(head + 16) != p->ranges_per_expert) {
		set_reason(reason, rlen, "pool %s: %s is not a version 1 ranges file for %u x %u "
			   "experts x %u ranges", p->dir, p->ranges_name, p->layers,
			   p->experts_per_layer, p->ranges_per_expert);
		ret = -EINVAL;
		goto cleanup;
	}
	buf = malloc(n * 16);
	p->ranges = malloc(n * sizeof(*p->ranges));
	if (!buf || !p->ranges) {
		set_reason(reason, rlen, "out of memory for %llu ranges", (unsigned long long)n);
		ret = -ENOMEM;
		goto cleanup;
	}
	ret = read_all(fd, buf, n * 16);
	if (ret)
		goto short_read;
	for (i = 0; i < n; i++)
		p->ranges[i] = (struct extent){ le64(buf + 16 * i), le64(buf + 16 * i + 8) };
	for (i = 0; i < experts && !ret; i++)
		ret = check_expert(p, i, reason, rlen);
	goto cleanup;
short_read:
	set_reason(reason, rlen, "pool %s: cannot read %s: %s", p->dir, p->ranges_name,
		   strerror(-ret));
cleanup:
	free(buf);
	close(fd);
	if (ret) {
		free(p->ranges);
		p->ranges = NULL;
	}
	return ret;
}

int pool_gguf_open(struct pool *p, int open_flags, int fadv, char *reason, size_t rlen)
{
	uint64_t n = (uint64_t)p->layers * p->experts_per_layer * p->ranges_per_expert, i;
	struct stat st;
	int fd, ret;

	/* a relative name is the pool directory's; an absolute one stands as it is */
	fd = pool_open_regular(p->file[0] == '/' ? AT_FDCWD : p->dirfd, p->file, "model file",
			       p->file, open_flags, &st, reason, rlen);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size != p->file_bytes) {
		set_reason(reason, rlen, "model file %s has %lld bytes, pool says %llu (the model "
			   "changed since `bench plan --from-gguf`)", p->file, (long long)st.st_size,
			   (unsigned long long)p->file_bytes);
		ret = -EINVAL;
		goto fail;
	}
	if (fadv) {
		ret = posix_fadvise(fd, 0, 0, fadv);
		if (ret) {
			set_reason(reason, rlen, "posix_fadvise %s: %s", p->file, strerror(ret));
			ret = -ret;
			goto fail;
		}
	}
	pool_device_facts(p, fd, &st);
	/* O_DIRECT reads whole aligned blocks into the expert's buffer: every range must be
	 * aligned, or the pages read would not be the engine's */
	for (i = 0; (open_flags & O_DIRECT) && i < n; i++) {
		uint64_t a = p->dio_offset_align ? p->dio_offset_align : page_size();

		if (p->ranges[i].off % a || p->ranges[i].len % a) {
			set_reason(reason, rlen, "model file %s: range %llu (offset %llu, %llu bytes) "
				   "is not aligned to %llu bytes, as O_DIRECT needs", p->file,
				   (unsigned long long)i, (unsigned long long)p->ranges[i].off,
				   (unsigned long long)p->ranges[i].len, (unsigned long long)a);
			ret = -EINVAL;
			goto fail;
		}
	}
	p->file_fd = fd;
	return 0;
fail:
	close(fd);
	return ret;
}
