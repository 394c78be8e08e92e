#include "pool.h"
#include "json.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

struct manifest_ctx {
	struct pool *p;
	int have_layers, have_experts, have_bytes, have_path, complete;
	int have_file, have_file_bytes, have_ranges;
	char *reason;
	size_t rlen;
};

static int num_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s == '-')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

static int manifest_member(void *vctx, const char *key, enum jtype t, const char *s, int b)
{
	struct manifest_ctx *c = vctx;
	uint64_t v;

	if (!strcmp(key, "layers") || !strcmp(key, "experts_per_layer") ||
	    !strcmp(key, "expert_bytes")) {
		if (t != JT_NUMBER || num_u64(s, &v) || v == 0 ||
		    (strcmp(key, "expert_bytes") && v > UINT32_MAX)) {
			set_reason(c->reason, c->rlen, "pool.json: bad value for %s", key);
			return -EINVAL;
		}
		if (!strcmp(key, "layers")) {
			c->p->layers = (uint32_t)v;
			c->have_layers = 1;
		} else if (!strcmp(key, "experts_per_layer")) {
			c->p->experts_per_layer = (uint32_t)v;
			c->have_experts = 1;
		} else {
			c->p->expert_bytes = v;
			c->have_bytes = 1;
		}
	} else if (!strcmp(key, "path")) {
		if (t != JT_STRING || strlen(s) >= sizeof(c->p->tmpl)) {
			set_reason(c->reason, c->rlen, "pool.json: bad path template");
			return -EINVAL;
		}
		strcpy(c->p->tmpl, s);
		c->have_path = 1;
	} else if (!strcmp(key, "complete")) {
		c->complete = t == JT_BOOL && b;
	} else if (!strcmp(key, "kind")) {
		if (t != JT_STRING || (strcmp(s, "files") && strcmp(s, "gguf"))) {
			set_reason(c->reason, c->rlen, "pool.json: kind is neither files nor gguf");
			return -EINVAL;
		}
		c->p->gguf = !strcmp(s, "gguf");
	} else if (!strcmp(key, "file")) {
		if (t != JT_STRING || !*s || strlen(s) >= sizeof(c->p->file)) {
			set_reason(c->reason, c->rlen, "pool.json: bad model file name");
			return -EINVAL;
		}
		strcpy(c->p->file, s);
		c->have_file = 1;
	} else if (!strcmp(key, "ranges")) {
		/* a plain name in the pool directory */
		if (t != JT_STRING || !*s || strchr(s, '/') || !strcmp(s, ".") || !strcmp(s, "..") ||
		    strlen(s) >= sizeof(c->p->ranges_name)) {
			set_reason(c->reason, c->rlen, "pool.json: bad ranges file name");
			return -EINVAL;
		}
		strcpy(c->p->ranges_name, s);
		c->have_ranges = 1;
	} else if (!strcmp(key, "file_bytes") || !strcmp(key, "ranges_per_expert")) {
		if (t != JT_NUMBER || num_u64(s, &v) || v == 0 || v > UINT32_MAX * 4096ULL) {
			set_reason(c->reason, c->rlen, "pool.json: bad value for %s", key);
			return -EINVAL;
		}
		if (!strcmp(key, "file_bytes")) {
			c->p->file_bytes = v;
			c->have_file_bytes = 1;
		} else {
			c->p->ranges_per_expert = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
		}
	}
	return 0;
}

/* What a non-regular file is, for the one-line reason. */
static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ?
	       "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" :
	       S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

/* Open a pool file for checking: never following a symlink in its last component and never
 * blocking (a FIFO would block an O_RDONLY open until a writer came), then fstat: a file that
 * is not regular (a symlink to /dev/zero, a FIFO, a directory) is refused with its kind.
 * Returns the fd (O_NONBLOCK cleared again) or -errno with the reason set. */
int pool_open_regular(int dirfd, const char *rel, const char *what, const char *shown,
		      int flags, struct stat *st, char *reason, size_t rlen)
{
	int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | flags);
	int ret;

	if (fd < 0) {
		ret = -errno;
		if (ret == -EINVAL && (flags & O_DIRECT)) {
			/* open(2): "The filesystem does not support the O_DIRECT flag" */
			set_reason(reason, rlen, "O_DIRECT is not supported on the pool's filesystem "
				   "(open of %s: EINVAL)", shown);
			return -EOPNOTSUPP;
		}
		if (ret == -ELOOP)
			set_reason(reason, rlen, "%s %s is a symbolic link, not a regular file",
				   what, shown);
		else
			set_reason(reason, rlen, "cannot open %s %s: %s", what, shown, strerror(-ret));
		return ret;
	}
	if (fstat(fd, st)) {
		ret = -errno;
		set_reason(reason, rlen, "fstat %s: %s", shown, strerror(-ret));
		close(fd);
		return ret;
	}
	if (!S_ISREG(st->st_mode)) {
		set_reason(reason, rlen, "%s %s is %s, not a regular file", what, shown,
			   file_kind(st->st_mode));
		close(fd);
		return -EINVAL;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)) {
		ret = -errno;
		set_reason(reason, rlen, "fcntl %s: %s", shown, strerror(-ret));
		close(fd);
		return ret;
	}
	return fd;
}

/* pool.json, checked as pool_open_regular does, read whole into text (at most cap - 1 bytes). */
static int read_manifest_text(const char *dir, char *text, size_t cap, char *reason, size_t rlen)
{
	char shown[PATH_MAX + 16];
	struct stat st;
	size_t got = 0;
	int fd, ret = 0;

	snprintf(shown, sizeof(shown), "%s/pool.json", dir);
	fd = pool_open_regular(AT_FDCWD, shown, "pool manifest", shown, 0, &st, reason, rlen);
	if (fd < 0) {
		if (fd != -EINVAL && fd != -ELOOP)
			set_reason(reason, rlen, "pool %s: cannot read pool.json: %s", dir,
				   strerror(-fd));
		return fd;
	}
	if ((uint64_t)st.st_size >= cap) {
		set_reason(reason, rlen, "pool %s: pool.json is larger than %zu bytes", dir, cap - 1);
		close(fd);
		return -EFBIG;
	}
	while (got < cap - 1) {
		ssize_t n = read(fd, text + got, cap - 1 - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			set_reason(reason, rlen, "pool %s: cannot read pool.json: %s", dir,
				   strerror(-ret));
			break;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	text[got] = '\0';
	close(fd);
	return ret;
}

int pool_load_manifest(struct pool *p, const char *dir, char *reason, size_t rlen)
{
	struct manifest_ctx c = { .p = p, .reason = reason, .rlen = rlen };
	char text[65536], probe[PATH_MAX];
	int ret;

	memset(p, 0, sizeof(*p));
	p->dirfd = -1;
	p->file_fd = -1;
	if (strlen(dir) >= sizeof(p->dir)) {
		set_reason(reason, rlen, "pool directory name too long");
		return -ENAMETOOLONG;
	}
	strcpy(p->dir, dir);
	ret = read_manifest_text(dir, text, sizeof(text), reason, rlen);
	if (ret)
		return ret;
	reason[0] = '\0';
	ret = json_scan_object(text, manifest_member, &c);
	if (ret) {
		if (!reason[0])
			set_reason(reason, rlen, "pool %s: pool.json is not a valid JSON object", dir);
		return -EINVAL;
	}
	if (!c.have_layers || !c.have_experts || !c.have_bytes || (!c.have_path && !p->gguf)) {
		set_reason(reason, rlen,
			   "pool %s: pool.json lacks layers, experts_per_layer, expert_bytes or path", dir);
		return -EINVAL;
	}
	if (!c.complete) {
		set_reason(reason, rlen, "pool %s: pool.json says the pool is not complete", dir);
		return -EINVAL;
	}
	p->whole = (struct extent){ 0, p->expert_bytes };
	if (p->gguf) {
		if (!c.have_file || !c.have_file_bytes || !c.have_ranges) {
			set_reason(reason, rlen, "pool %s: a gguf pool.json needs file, file_bytes, "
				   "ranges and ranges_per_expert", dir);
			return -EINVAL;
		}
		return pool_gguf_load_ranges(p, reason, rlen);
	}
	/* validate the template once, so later expansion cannot fail */
	ret = pool_expert_path(p, 0, 0, probe, sizeof(probe));
	if (ret) {
		set_reason(reason, rlen,
			   "pool %s: path template \"%s\" is invalid (only {layer} and {expert}, "
			   "optionally :0Nd)", dir, p->tmpl);
		return ret;
	}
	return 0;
}

/* Expand "L{layer:03d}/E{expert:04d}.bin": exactly the fields layer and expert,
 * each with an optional ":0Nd" width, as docs/formats.md allows. */
int pool_expert_path(const struct pool *p, uint32_t layer, uint32_t expert, char *out, size_t len)
{
	const char *t = p->tmpl;
	size_t n = 0;
	int m;

	m = snprintf(out, len, "%s/", p->dir);
	if (m < 0 || (size_t)m >= len)
		return -ENAMETOOLONG;
	n = (size_t)m;
	while (*t) {
		if (*t == '{') {
			const char *close = strchr(t, '}');
			uint32_t v, width = 0;
			size_t flen;

			if (!close)
				return -EINVAL;
			flen = (size_t)(close - t - 1);
			if (!strncmp(t + 1, "layer", 5) && (flen == 5 || t[6] == ':')) {
				v = layer;
				t += 6;
			} else if (!strncmp(t + 1, "expert", 6) && (flen == 6 || t[7] == ':')) {
				v = expert;
				t += 7;
			} else {
				return -EINVAL;
			}
			if (*t == ':') {
				char *end;

				if (t[1] != '0')
					return -EINVAL;
				width = (uint32_t)strtoul(t + 2, &end, 10);
				if (end == t + 2 || *end != 'd' || end + 1 != close || width > 20)
					return -EINVAL;
			}
			m = snprintf(out + n, len - n, "%0*u", (int)width, v);
			if (m < 0 || (size_t)m >= len - n)
				return -ENAMETOOLONG;
			n += (size_t)m;
			t = close + 1;
			continue;
		}
		if (*t == '}')
			return -EINVAL;
		if (n + 1 >= len)
			return -ENAMETOOLONG;
		out[n++] = *t++;
	}
	out[n] = '\0';
	return 0;
}

/* Fit every expert file's descriptor under RLIMIT_NOFILE, raising the hard limit
 * too when allowed (root), up to fs.nr_open. */
static int raise_nofile(uint64_t need, uint64_t *now, char *reason, size_t rlen)
{
	struct rlimit rl;
	char buf[64];

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
			uint64_t nr_open = 1048576;

			if (!read_text_file("/proc/sys/fs/nr_open", buf, sizeof(buf), NULL))
				nr_open = strtoull(buf, NULL, 10);
			if (need > nr_open) {
				set_reason(reason, rlen,
					   "pool needs %llu descriptors, above fs.nr_open=%llu",
					   (unsigned long long)need, (unsigned long long)nr_open);
				return -EMFILE;
			}
			rl.rlim_max = need;
		}
		rl.rlim_cur = need;
		if (setrlimit(RLIMIT_NOFILE, &rl)) {
			int err = errno;

			set_reason(reason, rlen,
				   "cannot raise RLIMIT_NOFILE to %llu (hard %llu): %s; "
				   "run as root or raise the limit",
				   (unsigned long long)need, (unsigned long long)rl.rlim_max,
				   strerror(err));
			return -err;
		}
	}
	*now = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
	return 0;
}

/* The readahead window of the block device holding the pool, as the kernel's
 * force_page_cache_ra() bounds a WILLNEED: max(read_ahead_kb, max_sectors_kb).
 * A partition has no queue/ of its own: use its parent disk's. */
static uint64_t ra_window_of(dev_t dev)
{
	static const char *const fmt[] = { "/sys/dev/block/%u:%u/queue/%s",
					   "/sys/dev/block/%u:%u/../queue/%s" };
	char path[256], buf[64];
	uint64_t best = 0;
	int i, k;

	for (i = 0; i < 2 && !best; i++) {
		for (k = 0; k < 2; k++) {
			uint64_t kb;

			snprintf(path, sizeof(path), fmt[i], major(dev), minor(dev),
				 k ? "max_sectors_kb" : "read_ahead_kb");
			if (read_text_file(path, buf, sizeof(buf), NULL))
				continue;
			kb = strtoull(buf, NULL, 10);
			if (kb * 1024 > best)
				best = kb * 1024;
		}
	}
	return best;
}

/* A read's descriptor in the per-read strategy (checked by pool_open_regular up front): never
 * through a symlink swapped in since. */
static int open_one(const struct pool *p, const char *rel, int *out)
{
	int fd = openat(p->dirfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | p->open_flags);
	int ret;

	if (fd < 0)
		return -errno;
	if (p->fadv) {
		ret = posix_fadvise(fd, 0, 0, p->fadv);
		if (ret) {
			close(fd);
			return -ret;
		}
	}
	*out = fd;
	return 0;
}

int pool_get(const struct pool *p, uint64_t idx, int *fd)
{
	if (p->gguf) {
		*fd = p->file_fd;
		return 0;
	}
	if (!p->per_read) {
		*fd = p->fds[idx];
		return 0;
	}
	return open_one(p, p->relpaths + p->reloff[idx], fd);
}

void pool_put(const struct pool *p, int fd)
{
	if (p->per_read)
		close(fd);
}

const struct extent *pool_extents(const struct pool *p, uint64_t idx, uint32_t *n)
{
	if (!p->gguf) {
		*n = 1;
		return &p->whole;
	}
	*n = p->ranges_per_expert;
	return p->ranges + idx * p->ranges_per_expert;
}

const char *pool_strategy(const struct pool *p)
{
	return p->gguf ? "one-file" : p->per_read ? "per-read" : "all-open";
}

void pool_device_facts(struct pool *p, int fd, const struct stat *st)
{
	p->ra_window = ra_window_of(st->st_dev);
#ifdef STATX_DIOALIGN
	struct statx sx;

	if (!statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) &&
	    (sx.stx_mask & STATX_DIOALIGN)) {
		p->dio_mem_align = sx.stx_dio_mem_align;
		p->dio_offset_align = sx.stx_dio_offset_align;
		return;
	}
#else
	(void)fd;
#endif
	/* statx without DIOALIGN (Linux < 6.1): the page size is an alignment every block
	 * device accepts */
	p->dio_mem_align = (uint32_t)page_size();
	p->dio_offset_align = (uint32_t)page_size();
}

int pool_open_all(struct pool *p, int open_flags, int fadv, char *reason, size_t rlen)
{
	uint64_t n = (uint64_t)p->layers * p->experts_per_layer, i, rel_total = 0;
	char path[PATH_MAX], nofile_reason[REASON_LEN];
	int ret;
	size_t dlen = strlen(p->dir) + 1;

	p->open_flags = open_flags;
	p->fadv = fadv;
	p->dirfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dirfd < 0) {
		ret = -errno;
		set_reason(reason, rlen, "pool %s: %s", p->dir, strerror(-ret));
		p->dirfd = -1;
		return ret;
	}
	if (p->gguf) {
		ret = pool_gguf_open(p, open_flags, fadv, reason, rlen);
		if (ret)
			goto fail;
		return 0;
	}
	/* headroom for stdio, snapshots, the out file and the prefetcher */
	if (raise_nofile(n + 256, &p->nofile_limit, nofile_reason, sizeof(nofile_reason))) {
		struct rlimit rl;

		p->per_read = 1;
		if (!getrlimit(RLIMIT_NOFILE, &rl))
			p->nofile_limit = rl.rlim_cur;
		fprintf(stderr, "bench-agent: %s; falling back to one open per read\n",
			nofile_reason);
	}
	if (p->per_read) {
		p->reloff = malloc(n * sizeof(*p->reloff));
		p->relpaths = malloc(n * (strlen(p->tmpl) + 48) + 1);
		if (!p->reloff || !p->relpaths) {
			set_reason(reason, rlen, "out of memory for %llu paths", (unsigned long long)n);
			ret = -ENOMEM;
			goto fail;
		}
	} else {
		p->fds = malloc(n * sizeof(int));
		if (!p->fds) {
			set_reason(reason, rlen, "out of memory for %llu descriptors",
				   (unsigned long long)n);
			ret = -ENOMEM;
			goto fail;
		}
		for (i = 0; i < n; i++)
			p->fds[i] = -1;
	}
	for (i = 0; i < n; i++) {
		uint32_t layer = (uint32_t)(i / p->experts_per_layer);
		uint32_t expert = (uint32_t)(i % p->experts_per_layer);
		const char *rel;
		struct stat st;
		int fd;

		pool_expert_path(p, layer, expert, path, sizeof(path));
		rel = path + dlen; /* openat on the pool directory: no repeated walk of its path */
		fd = pool_open_regular(p->dirfd, rel, "expert file", path, open_flags, &st, reason, rlen);
		if (fd < 0) {
			ret = fd;
			goto fail;
		}
		if (p->fadv && !p->per_read) {
			ret = posix_fadvise(fd, 0, 0, p->fadv);
			if (ret) {
				set_reason(reason, rlen, "posix_fadvise %s: %s", path, strerror(ret));
				close(fd);
				ret = -ret;
				goto fail;
			}
		}
		if (i == 0)
			pool_device_facts(p, fd, &st);
		if (p->per_read) {
			size_t l = strlen(rel) + 1;

			close(fd);
			p->reloff[i] = (uint32_t)rel_total;
			memcpy(p->relpaths + rel_total, rel, l);
			rel_total += l;
		} else {
			p->fds[i] = fd;
		}
		if ((uint64_t)st.st_size != p->expert_bytes) {
			ret = -EINVAL;
			set_reason(reason, rlen, "expert file %s has %lld bytes, pool says %llu", path,
				   (long long)st.st_size, (unsigned long long)p->expert_bytes);
			goto fail;
		}
	}
	return 0;
fail:
	pool_close(p);
	return ret;
}

void pool_close(struct pool *p)
{
	uint64_t n = (uint64_t)p->layers * p->experts_per_layer, i;

	if (p->fds) {
		for (i = 0; i < n; i++)
			if (p->fds[i] >= 0)
				close(p->fds[i]);
		free(p->fds);
		p->fds = NULL;
	}
	free(p->relpaths);
	free(p->reloff);
	free(p->ranges);
	p->relpaths = NULL;
	p->reloff = NULL;
	p->ranges = NULL;
	if (p->file_fd >= 0)
		close(p->file_fd);
	p->file_fd = -1;
	if (p->dirfd >= 0)
		close(p->dirfd);
	p->dirfd = -1;
}
