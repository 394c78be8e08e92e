#include "snapshot.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void snap_name(const char *path, char *out, size_t len)
{
	size_t n = 0;

	while (*path == '/')
		path++;
	for (; *path && n + 1 < len; path++)
		out[n++] = *path == '/' ? '_' : *path;
	out[n] = '\0';
}

/* read into a fixed buffer; truncated when the file outgrew it */
static void read_into(struct snap_file *f, int which)
{
	size_t got = 0;
	int fd;

	f->err[which] = 0;
	f->truncated[which] = 0;
	f->len[which] = 0;
	fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		f->err[which] = errno;
		return;
	}
	for (;;) {
		ssize_t n;

		if (got == f->cap) {
			char c;

			f->truncated[which] = read(fd, &c, 1) > 0;
			break;
		}
		n = read(fd, f->buf[which] + got, f->cap - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			f->err[which] = errno;
			break;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	f->len[which] = got;
	close(fd);
}

int snap_init(struct snapshots *s, const char *dir, const char **paths, int n,
	      char *reason, size_t rlen)
{
	int i, ret;

	memset(s, 0, sizeof(*s));
	if (n > SNAP_MAX_FILES) {
		set_reason(reason, rlen, "at most %d --snapshot-file", SNAP_MAX_FILES);
		return -E2BIG;
	}
	if (strlen(dir) >= sizeof(s->dir)) {
		set_reason(reason, rlen, "snapshot directory name too long");
		return -ENAMETOOLONG;
	}
	strcpy(s->dir, dir);
	ret = mkdir_p(dir);
	if (ret) {
		set_reason(reason, rlen, "snapshot dir %s: %s", dir, strerror(-ret));
		return ret;
	}
	for (i = 0; i < n; i++) {
		struct snap_file *f = &s->f[i];
		char *first;
		int w, j;

		f->path = paths[i];
		snap_name(paths[i], f->name, sizeof(f->name));
		for (j = 0; j < i; j++) {
			if (!strcmp(s->f[j].name, f->name)) {
				set_reason(reason, rlen, "two snapshot files map to the name %s", f->name);
				ret = -EINVAL;
				goto cleanup;
			}
		}
		/* size from a first read: 4x its size with a 64 KiB floor covers
		 * diskstats gaining loop devices or cgroup files growing */
		f->cap = 1 << 20;
		first = malloc(f->cap);
		if (!first) {
			set_reason(reason, rlen, "out of memory for snapshot buffers");
			ret = -ENOMEM;
			goto cleanup;
		}
		f->buf[0] = first;
		read_into(f, 0);
		f->buf[0] = NULL;
		free(first);
		/* from here snap_free unmaps this file's buffers too */
		s->n = i + 1;
		f->cap = round_up(f->len[0] * 4 + 65536, page_size());
		for (w = 0; w < 2; w++) {
			void *m = mmap(NULL, f->cap, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (m == MAP_FAILED) {
				ret = -errno;
				set_reason(reason, rlen, "snapshot buffers: %s", strerror(-ret));
				goto cleanup;
			}
			f->buf[w] = m;
			/* pre-fault: no page fault while a snapshot is taken */
			memset(f->buf[w], 0, f->cap);
			f->len[w] = 0;
		}
	}
	return 0;
cleanup:
	snap_free(s);
	return ret;
}

void snap_take(struct snapshots *s, int which)
{
	int i;

	for (i = 0; i < s->n; i++)
		read_into(&s->f[i], which);
}

int snap_write(struct snapshots *s, unsigned pass, char *reason, size_t rlen)
{
	static const char *const sub[2] = { "start", "end" };
	char d[4096 + 64], p[4096 + 400], msg[256];
	int w, i, ret, fd;

	for (w = 0; w < 2; w++) {
		snprintf(d, sizeof(d), "%s/pass%u-%s", s->dir, pass, sub[w]);
		ret = mkdir_p(d);
		if (ret) {
			set_reason(reason, rlen, "snapshot dir %s: %s", d, strerror(-ret));
			return ret;
		}
		for (i = 0; i < s->n; i++) {
			struct snap_file *f = &s->f[i];
			int failed = f->err[w] || f->truncated[w];

			snprintf(p, sizeof(p), "%s/%s", d, f->name);
			if (!f->err[w]) {
				fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
				ret = fd < 0 ? -errno : write_full(fd, f->buf[w], f->len[w]);
				if (fd >= 0 && close(fd) && !ret)
					ret = -errno;
				if (ret) {
					set_reason(reason, rlen, "cannot write snapshot %s: %s", p,
						   strerror(-ret));
					return ret;
				}
			}
			if (failed) {
				int m;

				snprintf(p, sizeof(p), "%s/%s.err", d, f->name);
				if (f->err[w])
					m = snprintf(msg, sizeof(msg), "%s: %s\n", f->path,
						     strerror(f->err[w]));
				else
					m = snprintf(msg, sizeof(msg),
						     "%s: truncated at %zu bytes (buffer full)\n",
						     f->path, f->len[w]);
				fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
				ret = fd < 0 ? -errno : write_full(fd, msg, (size_t)m);
				if (fd >= 0 && close(fd) && !ret)
					ret = -errno;
				if (ret) {
					set_reason(reason, rlen, "cannot write %s: %s", p, strerror(-ret));
					return ret;
				}
			}
		}
	}
	return 0;
}

void snap_free(struct snapshots *s)
{
	int i, w;

	for (i = 0; i < s->n; i++)
		for (w = 0; w < 2; w++)
			if (s->f[i].buf[w])
				munmap(s->f[i].buf[w], s->f[i].cap);
	memset(s, 0, sizeof(*s));
}
