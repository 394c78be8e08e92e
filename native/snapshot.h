/* Pass-boundary snapshots: copies of counter files (/proc/diskstats, vmstat,
 * meminfo, PSI, /proc/self/status, cgroup files) taken right before a pass's
 * clock starts and right after it stops. Buffers are sized and pre-faulted at
 * setup; taking a snapshot is open/read/close per file into them, with no
 * allocation and no writing, and the copies are written out after the pass's
 * end snapshot, so the writes fall outside both the pass and its snapshots. */
#ifndef BENCH_SNAPSHOT_H
#define BENCH_SNAPSHOT_H

#include <stddef.h>

#define SNAP_MAX_FILES 64

struct snap_file {
	const char *path;
	char name[256];           /* path with '/' -> '_', leading '_' dropped */
	size_t cap;
	char *buf[2];             /* [0] start, [1] end */
	size_t len[2];
	int err[2];               /* errno of the failed read, 0 when read */
	int truncated[2];
};

struct snapshots {
	char dir[4096];
	int n;
	struct snap_file f[SNAP_MAX_FILES];
};

/* 0, or -errno with the reason; a failed init has nothing left mapped. */
int snap_init(struct snapshots *s, const char *dir, const char **paths, int n,
	      char *reason, size_t rlen);
/* which: 0 = start, 1 = end. Never fails: a file that cannot be read is
 * remembered and written out as an .err file. */
void snap_take(struct snapshots *s, int which);
/* DIR/pass{p}-start/ and DIR/pass{p}-end/; -errno when the directory is unusable. */
int snap_write(struct snapshots *s, unsigned pass, char *reason, size_t rlen);
void snap_free(struct snapshots *s);

#endif
