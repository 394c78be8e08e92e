/* bench-agent balloon: hold N bytes of mlocked anonymous memory until told to
 * stop, the `balloon` capacity mechanism. */
#ifndef BENCH_BALLOON_H
#define BENCH_BALLOON_H

#include <stdint.h>

struct balloon_opts {
	int have_bytes, have_leave;
	uint64_t bytes, leave_available;
	const char *ready_file;
};

int balloon_main(const struct balloon_opts *o);

#endif
