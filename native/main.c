/* bench-agent: command line. Subcommands version, replay, balloon. */
#include "balloon.h"
#include "replay.h"
#include "util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BENCH_SRC_HASH
#error "build with make: BENCH_SRC_HASH is the sha256 of the sources (see README.md)"
#endif

const char *bench_source_hash = BENCH_SRC_HASH;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: bench-agent version\n"
		"       bench-agent replay --pool DIR --plan FILE [--threads 8] [--passes 2]\n"
		"              [--mode pagecache|pinned|hybrid|nocache|random]\n"
		"              [--arena-bytes N] [--freq FILE] [--nocache direct|dontneed|dontcache]\n"
		"              [--prefetch advice|block --hints FILE] [--advice-window N]\n"
		"              [--probe-cached]\n"
		"              [--snapshot-dir DIR --snapshot-file PATH ...] [--out FILE]\n"
		"              [--progress FILE] [--read-log FILE]\n"
		"       bench-agent balloon (--bytes N | --leave-available N) [--ready-file PATH]\n"
		"sizes take K/M/G suffixes (KiB/MiB/GiB)\n");
}

static int cmd_replay(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "pool", required_argument, NULL, 'p' },
		{ "plan", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "passes", required_argument, NULL, 'n' },
		{ "mode", required_argument, NULL, 'm' },
		{ "out", required_argument, NULL, 'o' },
		{ "freq", required_argument, NULL, 'f' },
		{ "arena-bytes", required_argument, NULL, 'a' },
		{ "nocache", required_argument, NULL, 'c' },
		{ "prefetch", required_argument, NULL, 'P' },
		{ "hints", required_argument, NULL, 'H' },
		{ "snapshot-dir", required_argument, NULL, 'd' },
		{ "snapshot-file", required_argument, NULL, 's' },
		{ "probe-cached", no_argument, NULL, 'C' },
		{ "advice-window", required_argument, NULL, 'w' },
		{ "progress", required_argument, NULL, 'g' },
		{ "read-log", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	static char err[REASON_LEN];
	struct replay_opts o;
	const char *mode = "pagecache", *nocache = NULL, *prefetch = NULL;
	const char *usage_error = NULL;
	int c;

	memset(&o, 0, sizeof(o));
	o.threads = 8;
	o.passes = 2;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'p': o.pool_dir = optarg; break;
		case 'l': o.plan_path = optarg; break;
		case 'o': o.out_path = optarg; break;
		case 'f': o.freq_path = optarg; break;
		case 'H': o.hints_path = optarg; break;
		case 'd': o.snap_dir = optarg; break;
		case 'g': o.progress_path = optarg; break;
		case 'R': o.read_log_path = optarg; break;
		case 'm': mode = optarg; break;
		case 'c': nocache = optarg; break;
		case 'P': prefetch = optarg; break;
		case 'C': o.probe_cached = 1; break;
		case 'w':
			if (parse_size(optarg, &o.advice_window))
				usage_error = "--advice-window wants a size (0 = one call per expert)";
			o.have_advice_window = 1;
			break;
		case 't':
			if (parse_u32(optarg, &o.threads) || !o.threads || o.threads > 1024)
				usage_error = "--threads wants 1..1024";
			break;
		case 'n':
			if (parse_u32(optarg, &o.passes) || !o.passes || o.passes > 1000)
				usage_error = "--passes wants 1..1000";
			break;
		case 'a':
			if (parse_size(optarg, &o.arena_bytes))
				usage_error = "--arena-bytes wants a size (K/M/G suffixes)";
			o.have_arena = 1;
			break;
		case 's':
			if (o.n_snap >= SNAP_MAX_FILES)
				usage_error = "too many --snapshot-file";
			else
				o.snap_files[o.n_snap++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return BENCH_EXIT_OK;
		default:
			usage(stderr);
			usage_error = "bad command line";
			break;
		}
	}
	if (!usage_error && optind < argc)
		usage_error = "unexpected positional argument";
	if (!strcmp(mode, "pagecache")) o.mode = MODE_PAGECACHE;
	else if (!strcmp(mode, "pinned")) o.mode = MODE_PINNED;
	else if (!strcmp(mode, "hybrid")) o.mode = MODE_HYBRID;
	else if (!strcmp(mode, "nocache")) o.mode = MODE_NOCACHE;
	else if (!strcmp(mode, "random")) o.mode = MODE_RANDOM;
	else if (!usage_error) {
		snprintf(err, sizeof(err),
			 "unknown --mode %s (pagecache, pinned, hybrid, nocache, random)", mode);
		usage_error = err;
	}
	if (!usage_error && (!o.pool_dir || !o.plan_path))
		usage_error = "--pool and --plan are required";
	if (!usage_error && o.mode == MODE_NOCACHE) {
		if (!nocache)
			usage_error = "--mode nocache needs --nocache direct|dontneed|dontcache";
		else if (!strcmp(nocache, "direct")) o.nocache = IO_DIRECT;
		else if (!strcmp(nocache, "dontneed")) o.nocache = IO_DONTNEED;
		else if (!strcmp(nocache, "dontcache")) o.nocache = IO_DONTCACHE;
		else usage_error = "--nocache wants direct, dontneed or dontcache";
	} else if (!usage_error && nocache) {
		usage_error = "--nocache only applies to --mode nocache";
	}
	if (!usage_error && (o.mode == MODE_PINNED || o.mode == MODE_HYBRID) && !o.have_arena)
		usage_error = "--mode pinned/hybrid needs --arena-bytes";
	if (!usage_error && o.have_arena && o.mode != MODE_PINNED && o.mode != MODE_HYBRID)
		usage_error = "--arena-bytes only applies to --mode pinned or hybrid";
	if (!usage_error && o.freq_path && o.mode != MODE_PINNED && o.mode != MODE_HYBRID)
		usage_error = "--freq only applies to --mode pinned or hybrid";
	if (!usage_error && prefetch) {
		o.prefetch = 1;
		if (!strcmp(prefetch, "advice")) o.pf_kind = PF_ADVICE;
		else if (!strcmp(prefetch, "block")) o.pf_kind = PF_BLOCK;
		else if (!strcmp(prefetch, "none")) o.prefetch = 0;
		else usage_error = "--prefetch wants advice, block or none";
		if (!usage_error && o.prefetch && !o.hints_path)
			usage_error = "--prefetch needs --hints FILE";
	}
	if (!usage_error && o.hints_path && !o.prefetch)
		usage_error = "--hints needs --prefetch advice|block";
	if (!usage_error && o.n_snap && !o.snap_dir)
		usage_error = "--snapshot-file needs --snapshot-dir";
	return replay_main(&o, usage_error);
}

static int cmd_balloon(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "bytes", required_argument, NULL, 'b' },
		{ "leave-available", required_argument, NULL, 'l' },
		{ "ready-file", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct balloon_opts o;
	int c;

	memset(&o, 0, sizeof(o));
	optind = 1;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (parse_size(optarg, &o.bytes)) {
				fprintf(stderr, "bench-agent balloon: bad --bytes %s\n", optarg);
				return BENCH_EXIT_USAGE;
			}
			o.have_bytes = 1;
			break;
		case 'l':
			if (parse_size(optarg, &o.leave_available)) {
				fprintf(stderr, "bench-agent balloon: bad --leave-available %s\n", optarg);
				return BENCH_EXIT_USAGE;
			}
			o.have_leave = 1;
			break;
		case 'r': o.ready_file = optarg; break;
		case 'h': usage(stdout); return BENCH_EXIT_OK;
		default: usage(stderr); return BENCH_EXIT_USAGE;
		}
	}
	if (o.have_bytes == o.have_leave || optind < argc) {
		fprintf(stderr, "bench-agent balloon: give exactly one of --bytes, --leave-available\n");
		return BENCH_EXIT_USAGE;
	}
	return balloon_main(&o);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return BENCH_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "version")) {
		printf("{\"version\":\"%s\",\"source_sha256\":\"%s\"}\n", BENCH_VERSION,
		       bench_source_hash);
		return BENCH_EXIT_OK;
	}
	if (!strcmp(argv[1], "replay"))
		return cmd_replay(argc - 1, argv + 1);
	if (!strcmp(argv[1], "balloon"))
		return cmd_balloon(argc - 1, argv + 1);
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return BENCH_EXIT_OK;
	}
	usage(stderr);
	return BENCH_EXIT_USAGE;
}
