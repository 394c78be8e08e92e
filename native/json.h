/* JSON lines out (agent records, balloon ready line) and a tiny reader for the
 * flat pool.json manifest. Writers build one line in memory, so a record is
 * emitted with a single write and never interleaves with stderr. */
#ifndef BENCH_JSON_H
#define BENCH_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct jline {
	char buf[65536];
	size_t len;
	int n;         /* members written in the current object */
	int overflow;  /* set when buf was too small: the line is then not emitted */
	int finished;
};

void jl_begin(struct jline *j);
void jl_u64(struct jline *j, const char *key, uint64_t v);
void jl_i64(struct jline *j, const char *key, int64_t v);
void jl_str(struct jline *j, const char *key, const char *v);
void jl_bool(struct jline *j, const char *key, int v);
void jl_null(struct jline *j, const char *key);
void jl_u64_array(struct jline *j, const char *key, const uint64_t *v, size_t n);
void jl_obj_begin(struct jline *j, const char *key);
void jl_obj_end(struct jline *j);
/* Close the object and append '\n' (once); -ENOBUFS when the line overflowed. */
int jl_finish(struct jline *j);
/* jl_finish, then write and flush; -errno on failure. */
int jl_emit(struct jline *j, FILE *f);

enum jtype { JT_STRING, JT_NUMBER, JT_BOOL, JT_NULL, JT_OTHER };

/* Calls cb for every member of the top-level object; nested values are
 * validated and reported as JT_OTHER. sval is the unescaped string, or the
 * number's text. Returns 0, -EINVAL on malformed JSON, or cb's non-zero. */
typedef int (*json_member_cb)(void *ctx, const char *key, enum jtype t,
			      const char *sval, int bval);
int json_scan_object(const char *text, json_member_cb cb, void *ctx);

#endif
