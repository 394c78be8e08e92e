/* Small helpers shared by every part of bench-agent: sizes, clocks, /proc readers.
 * Helpers return 0 or -errno (cgroup selftests style); callers that need a human
 * reason take a (char *reason, size_t len) pair and fill it. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>

#define BENCH_VERSION "0.1.0"
#define REASON_LEN 512

/* Exit codes of every subcommand (README.md, "Exit codes"). SKIP is kselftest's KSFT_SKIP:
 * the machine lacks what the run needs (a kernel or file system feature), nothing failed. */
#define BENCH_EXIT_OK    0
#define BENCH_EXIT_FAIL  1
#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_SKIP  4

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bench-agent reads little-endian plan files in place; build on a little-endian host"
#endif

/* Little-endian fields of the plan and ranges files, read byte by byte (no alignment). */
static inline uint32_t le32(const unsigned char *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t le64(const unsigned char *b)
{
	return le32(b) | (uint64_t)le32(b + 4) << 32;
}

int64_t now_ns(void);
size_t page_size(void);
uint64_t round_up(uint64_t v, uint64_t align);

/* "123", "64K", "768M", "2G" (binary units, as cgroups write them). */
int parse_size(const char *s, uint64_t *out);
int parse_u32(const char *s, uint32_t *out);

/* Read a whole small file into buf (NUL terminated); -errno on failure. */
int read_text_file(const char *path, char *buf, size_t cap, size_t *len);
/* Value in kB of "Key:" in /proc/self/status or /proc/meminfo. */
int proc_status_kb(const char *key, uint64_t *kb);
int meminfo_kb(const char *key, uint64_t *kb);

int write_full(int fd, const void *buf, size_t len);
int mkdir_p(const char *path);

void set_reason(char *dst, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
