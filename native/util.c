#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Never hard-code 4096: aarch64 hosts of the fleet run 64 KiB pages. */
size_t page_size(void)
{
	static size_t ps;

	if (!ps) {
		long v = sysconf(_SC_PAGESIZE);

		ps = v > 0 ? (size_t)v : 4096;
	}
	return ps;
}

uint64_t round_up(uint64_t v, uint64_t align)
{
	if (align <= 1)
		return v;
	return (v + align - 1) / align * align;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	if (*end) {
		switch (*end) {
		case 'k': case 'K': mult = 1ULL << 10; break;
		case 'm': case 'M': mult = 1ULL << 20; break;
		case 'g': case 'G': mult = 1ULL << 30; break;
		case 't': case 'T': mult = 1ULL << 40; break;
		default: return -EINVAL;
		}
		end++;
		/* accept "64KiB"/"64KB" spellings too, nothing else */
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v > UINT64_MAX / mult)
		return -ERANGE;
	*out = v * mult;
	return 0;
}

int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

int read_text_file(const char *path, char *buf, size_t cap, size_t *len)
{
	int fd, ret = 0;
	size_t got = 0;

	if (cap == 0)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (got < cap - 1) {
		ssize_t n = read(fd, buf + got, cap - 1 - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	if (len)
		*len = got;
cleanup:
	close(fd);
	return ret;
}

static int kb_from(const char *path, const char *key, uint64_t *kb)
{
	char buf[16384];
	size_t klen = strlen(key);
	char *p;
	int ret;

	ret = read_text_file(path, buf, sizeof(buf), NULL);
	if (ret)
		return ret;
	for (p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (!strncmp(p, key, klen) && p[klen] == ':') {
			*kb = strtoull(p + klen + 1, NULL, 10);
			return 0;
		}
	}
	return -ENOENT;
}

int proc_status_kb(const char *key, uint64_t *kb)
{
	return kb_from("/proc/self/status", key, kb);
}

int meminfo_kb(const char *key, uint64_t *kb)
{
	return kb_from("/proc/meminfo", key, kb);
}

int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int mkdir_p(const char *path)
{
	char tmp[PATH_MAX];
	size_t len = strlen(path);
	char *p;

	if (len == 0 || len >= sizeof(tmp))
		return -ENAMETOOLONG;
	memcpy(tmp, path, len + 1);
	for (p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

void set_reason(char *dst, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!dst || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(dst, len, fmt, ap);
	va_end(ap);
}
