/* bench-agent replay: options and the driver. */
#ifndef BENCH_REPLAY_H
#define BENCH_REPLAY_H

#include <stdint.h>

#include "io.h"
#include "prefetch.h"
#include "snapshot.h"

enum replay_mode { MODE_PAGECACHE, MODE_PINNED, MODE_HYBRID, MODE_NOCACHE, MODE_RANDOM };

struct replay_opts {
	const char *pool_dir, *plan_path, *out_path, *freq_path, *hints_path, *snap_dir;
	const char *progress_path;     /* --progress FILE: live pass/iteration (progress.h) */
	const char *read_log_path;     /* --read-log FILE: every read's interval (readlog.h) */
	const char *snap_files[SNAP_MAX_FILES];
	int n_snap;
	uint32_t threads, passes;
	enum replay_mode mode;
	enum io_kind nocache;      /* MODE_NOCACHE: IO_DIRECT, IO_DONTNEED or IO_DONTCACHE */
	int have_arena;
	uint64_t arena_bytes;
	int prefetch;              /* 0 none, else pf_kind below */
	enum pf_kind pf_kind;
	int have_advice_window;    /* --advice-window given; else the device's readahead window */
	uint64_t advice_window;
	int probe_cached;
};

const char *mode_name(enum replay_mode m);
const char *nocache_name(enum io_kind k);
/* Runs everything, writes the JSON lines, returns the process exit code. */
int replay_main(const struct replay_opts *o, const char *usage_error);

#endif
