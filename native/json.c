#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

static void put(struct jline *j, const char *s, size_t n)
{
	if (j->len + n + 2 > sizeof(j->buf)) {
		j->overflow = 1;
		return;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
}

static void putc_(struct jline *j, char c)
{
	put(j, &c, 1);
}

static void put_escaped(struct jline *j, const char *s)
{
	char tmp[8];

	putc_(j, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			putc_(j, '\\');
			putc_(j, (char)c);
		} else if (c < 0x20) {
			snprintf(tmp, sizeof(tmp), "\\u%04x", c);
			put(j, tmp, 6);
		} else {
			putc_(j, (char)c);
		}
	}
	putc_(j, '"');
}

static void key(struct jline *j, const char *k)
{
	if (j->n++)
		putc_(j, ',');
	put_escaped(j, k);
	putc_(j, ':');
}

void jl_begin(struct jline *j)
{
	j->len = 0;
	j->n = 0;
	j->overflow = 0;
	j->finished = 0;
	putc_(j, '{');
}

void jl_u64(struct jline *j, const char *k, uint64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%llu", (unsigned long long)v);

	key(j, k);
	put(j, tmp, (size_t)n);
}

void jl_i64(struct jline *j, const char *k, int64_t v)
{
	char tmp[32];
	int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v);

	key(j, k);
	put(j, tmp, (size_t)n);
}

void jl_str(struct jline *j, const char *k, const char *v)
{
	key(j, k);
	put_escaped(j, v ? v : "");
}

void jl_bool(struct jline *j, const char *k, int v)
{
	key(j, k);
	put(j, v ? "true" : "false", v ? 4 : 5);
}

void jl_null(struct jline *j, const char *k)
{
	key(j, k);
	put(j, "null", 4);
}

void jl_u64_array(struct jline *j, const char *k, const uint64_t *v, size_t n)
{
	char tmp[32];
	size_t i;

	key(j, k);
	putc_(j, '[');
	for (i = 0; i < n; i++) {
		int m = snprintf(tmp, sizeof(tmp), "%s%llu", i ? "," : "",
				 (unsigned long long)v[i]);
		put(j, tmp, (size_t)m);
	}
	putc_(j, ']');
}

/* Nested objects reuse the member counter: the outer count is kept > 0 by the
 * key() call that opened the nested object, so restoring it to 1 is exact. */
void jl_obj_begin(struct jline *j, const char *k)
{
	key(j, k);
	putc_(j, '{');
	j->n = 0;
}

void jl_obj_end(struct jline *j)
{
	putc_(j, '}');
	j->n = 1;
}

int jl_finish(struct jline *j)
{
	if (j->overflow)
		return -ENOBUFS;
	if (!j->finished) {
		/* put() always leaves 2 bytes free for exactly this */
		j->buf[j->len++] = '}';
		j->buf[j->len++] = '\n';
		j->finished = 1;
	}
	return 0;
}

int jl_emit(struct jline *j, FILE *f)
{
	if (jl_finish(j))
		return -ENOBUFS;
	if (fwrite(j->buf, 1, j->len, f) != j->len || fflush(f))
		return -EIO;
	return 0;
}

/* ---- reader ---------------------------------------------------------- */

struct rd {
	const char *p;
};

static void ws(struct rd *r)
{
	while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')
		r->p++;
}

/* Unescape into out (cap bytes); \u escapes outside ASCII are kept as '?':
 * the manifest's fields are ASCII, and a path template needs nothing else. */
static int str(struct rd *r, char *out, size_t cap)
{
	size_t n = 0;

	if (*r->p != '"')
		return -EINVAL;
	r->p++;
	while (*r->p != '"') {
		char c = *r->p;

		if (!c || (unsigned char)c < 0x20)
			return -EINVAL;
		if (c == '\\') {
			r->p++;
			switch (*r->p) {
			case '"': c = '"'; break;
			case '\\': c = '\\'; break;
			case '/': c = '/'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u': {
				unsigned v = 0;
				int i;

				for (i = 1; i <= 4; i++) {
					char h = r->p[i];

					v <<= 4;
					if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
					else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
					else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
					else return -EINVAL;
				}
				r->p += 4;
				c = v < 0x80 ? (char)v : '?';
				break;
			}
			default:
				return -EINVAL;
			}
		}
		if (out) {
			if (n + 1 >= cap)
				return -ENAMETOOLONG;
			out[n] = c;
		}
		n++;
		r->p++;
	}
	r->p++;
	if (out)
		out[n] = '\0';
	return 0;
}

static int value(struct rd *r, int depth, enum jtype *t, char *sval, size_t cap, int *b);

static int skip_container(struct rd *r, int depth)
{
	char close = *r->p == '{' ? '}' : ']';
	int obj = *r->p == '{';
	enum jtype t;
	int b, ret;

	if (depth > 64)
		return -EINVAL;
	r->p++;
	ws(r);
	if (*r->p == close) {
		r->p++;
		return 0;
	}
	for (;;) {
		ws(r);
		if (obj) {
			ret = str(r, NULL, 0);
			if (ret)
				return ret;
			ws(r);
			if (*r->p++ != ':')
				return -EINVAL;
			ws(r);
		}
		ret = value(r, depth + 1, &t, NULL, 0, &b);
		if (ret)
			return ret;
		ws(r);
		if (*r->p == ',') {
			r->p++;
			continue;
		}
		if (*r->p == close) {
			r->p++;
			return 0;
		}
		return -EINVAL;
	}
}

static int value(struct rd *r, int depth, enum jtype *t, char *sval, size_t cap, int *b)
{
	const char *s = r->p;

	if (*s == '"') {
		*t = JT_STRING;
		return str(r, sval, cap);
	}
	if (*s == '{' || *s == '[') {
		*t = JT_OTHER;
		return skip_container(r, depth);
	}
	if (!strncmp(s, "true", 4) || !strncmp(s, "false", 5)) {
		*t = JT_BOOL;
		*b = *s == 't';
		r->p += *b ? 4 : 5;
		return 0;
	}
	if (!strncmp(s, "null", 4)) {
		*t = JT_NULL;
		r->p += 4;
		return 0;
	}
	if (*s == '-' || (*s >= '0' && *s <= '9')) {
		size_t n = 0;

		*t = JT_NUMBER;
		while (*r->p && strchr("+-0123456789.eE", *r->p))
			r->p++;
		n = (size_t)(r->p - s);
		if (sval) {
			if (n + 1 > cap)
				return -ENAMETOOLONG;
			memcpy(sval, s, n);
			sval[n] = '\0';
		}
		return 0;
	}
	return -EINVAL;
}

int json_scan_object(const char *text, json_member_cb cb, void *ctx)
{
	struct rd r = { text };
	char k[256], v[4096];
	enum jtype t;
	int b = 0, ret;

	ws(&r);
	if (*r.p++ != '{')
		return -EINVAL;
	ws(&r);
	if (*r.p == '}') {
		r.p++;
		goto tail;
	}
	for (;;) {
		ws(&r);
		ret = str(&r, k, sizeof(k));
		if (ret)
			return ret;
		ws(&r);
		if (*r.p++ != ':')
			return -EINVAL;
		ws(&r);
		ret = value(&r, 1, &t, v, sizeof(v), &b);
		if (ret)
			return ret;
		ret = cb(ctx, k, t, t == JT_STRING || t == JT_NUMBER ? v : NULL, b);
		if (ret)
			return ret;
		ws(&r);
		if (*r.p == ',') {
			r.p++;
			continue;
		}
		if (*r.p == '}') {
			r.p++;
			break;
		}
		return -EINVAL;
	}
tail:
	ws(&r);
	return *r.p ? -EINVAL : 0;
}
