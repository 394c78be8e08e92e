#include "plan.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HDR_LEN 48

_Static_assert(sizeof(struct plan_iter) == 8, "iteration record is 8 bytes");
_Static_assert(sizeof(struct plan_pass) == 16, "pass record is 16 bytes");

static uint16_t le16(const unsigned char *b) { return (uint16_t)(b[0] | b[1] << 8); }

static int slurp(const char *path, void **out, size_t *len)
{
	struct stat st;
	size_t got = 0;
	char *buf = NULL;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		goto cleanup;
	}
	/* +1 so that an empty file still gets a buffer */
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		ret = -ENOMEM;
		goto cleanup;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			goto cleanup;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	*out = buf;
	*len = got;
	buf = NULL;
cleanup:
	free(buf);
	close(fd);
	return ret;
}

int plan_load(const char *path, uint16_t want_kind, struct plan *p, char *reason, size_t rlen)
{
	const unsigned char *b;
	uint32_t meta_len, reserved, i;
	uint64_t off_iter, off_pass, off_read, want, next_pass = 0, next_read = 0;
	uint32_t *seen = NULL;
	int ret;

	memset(p, 0, sizeof(*p));
	ret = slurp(path, &p->blob, &p->blob_len);
	if (ret) {
		set_reason(reason, rlen, "plan %s: cannot read: %s", path, strerror(-ret));
		return ret;
	}
	b = p->blob;
	ret = -EINVAL;
	if (p->blob_len < HDR_LEN) {
		set_reason(reason, rlen, "plan %s: truncated header (%zu of %d bytes)",
			   path, p->blob_len, HDR_LEN);
		goto fail;
	}
	if (memcmp(b, "BPLN", 4)) {
		set_reason(reason, rlen, "plan %s: wrong magic (not a BPLN file)", path);
		goto fail;
	}
	p->version = le16(b + 4);
	p->kind = le16(b + 6);
	p->layers = le32(b + 8);
	p->experts_per_layer = le32(b + 12);
	p->expert_bytes = le64(b + 16);
	p->n_iterations = le32(b + 24);
	p->n_passes = le32(b + 28);
	p->n_reads = le64(b + 32);
	meta_len = le32(b + 40);
	reserved = le32(b + 44);
	if (p->version != 1) {
		set_reason(reason, rlen, "plan %s: unsupported version %u (want 1)", path, p->version);
		goto fail;
	}
	if (p->kind != want_kind) {
		set_reason(reason, rlen, "plan %s: kind %u, want %u (%s)", path, p->kind, want_kind,
			   want_kind == PLAN_KIND_HINTS ? "hint plan" : "replay plan");
		goto fail;
	}
	if (reserved) {
		set_reason(reason, rlen, "plan %s: reserved header field is %u, not 0", path, reserved);
		goto fail;
	}
	if (!p->layers || !p->experts_per_layer || !p->expert_bytes) {
		set_reason(reason, rlen, "plan %s: zero layers, experts or expert_bytes", path);
		goto fail;
	}
	/* All products below fit in u64: counts are at most 2^32 and 2^64/16 */
	if (p->n_reads > (UINT64_MAX >> 3)) {
		set_reason(reason, rlen, "plan %s: n_reads %llu is absurd", path,
			   (unsigned long long)p->n_reads);
		goto fail;
	}
	off_iter = round_up(HDR_LEN + (uint64_t)meta_len, 8);
	off_pass = off_iter + 8ULL * p->n_iterations;
	off_read = off_pass + 16ULL * p->n_passes;
	want = off_read + 4ULL * p->n_reads;
	if (want != p->blob_len) {
		set_reason(reason, rlen,
			   "plan %s: size mismatch: file has %zu bytes, header implies %llu "
			   "(meta %u, %u iterations, %u passes, %llu reads)",
			   path, p->blob_len, (unsigned long long)want, meta_len, p->n_iterations,
			   p->n_passes, (unsigned long long)p->n_reads);
		goto fail;
	}
	p->iters = (const void *)(b + off_iter);
	p->passes = (const void *)(b + off_pass);
	p->reads = (const void *)(b + off_read);

	for (i = 0; i < p->n_iterations; i++) {
		if (p->iters[i].first_pass != next_pass) {
			set_reason(reason, rlen, "plan %s: iteration %u starts at pass %u, expected %llu",
				   path, i, p->iters[i].first_pass, (unsigned long long)next_pass);
			goto fail;
		}
		next_pass += p->iters[i].n_passes;
	}
	if (next_pass != p->n_passes) {
		set_reason(reason, rlen, "plan %s: iterations cover %llu passes, header says %u",
			   path, (unsigned long long)next_pass, p->n_passes);
		goto fail;
	}
	/* generation-stamped "seen" array: distinctness check in O(reads) */
	seen = calloc(p->experts_per_layer, sizeof(*seen));
	if (!seen) {
		ret = -ENOMEM;
		set_reason(reason, rlen, "plan %s: out of memory", path);
		goto fail;
	}
	for (i = 0; i < p->n_passes; i++) {
		const struct plan_pass *ps = &p->passes[i];
		uint64_t r;

		if (ps->first_read != next_read) {
			set_reason(reason, rlen, "plan %s: pass %u starts at read %llu, expected %llu",
				   path, i, (unsigned long long)ps->first_read,
				   (unsigned long long)next_read);
			goto fail;
		}
		if (ps->layer >= p->layers) {
			set_reason(reason, rlen, "plan %s: pass %u: layer %u out of range (layers %u)",
				   path, i, ps->layer, p->layers);
			goto fail;
		}
		next_read += ps->n_reads;
		if (next_read > p->n_reads) {
			set_reason(reason, rlen, "plan %s: passes cover more than %llu reads", path,
				   (unsigned long long)p->n_reads);
			goto fail;
		}
		for (r = ps->first_read; r < next_read; r++) {
			uint32_t e = p->reads[r];

			if (e >= p->experts_per_layer) {
				set_reason(reason, rlen,
					   "plan %s: pass %u: expert %u out of range (experts_per_layer %u)",
					   path, i, e, p->experts_per_layer);
				goto fail;
			}
			if (seen[e] == i + 1) {
				set_reason(reason, rlen, "plan %s: pass %u: expert %u repeated", path, i, e);
				goto fail;
			}
			seen[e] = i + 1;
		}
	}
	if (next_read != p->n_reads) {
		set_reason(reason, rlen, "plan %s: passes cover %llu reads, header says %llu", path,
			   (unsigned long long)next_read, (unsigned long long)p->n_reads);
		goto fail;
	}
	free(seen);
	return 0;
fail:
	free(seen);
	plan_free(p);
	return ret;
}

void plan_free(struct plan *p)
{
	free(p->blob);
	memset(p, 0, sizeof(*p));
}

int plan_check_geometry(const struct plan *p, uint32_t layers, uint32_t experts,
			uint64_t expert_bytes, const char *what, char *reason, size_t rlen)
{
	if (p->layers == layers && p->experts_per_layer == experts && p->expert_bytes == expert_bytes)
		return 0;
	set_reason(reason, rlen,
		   "%s does not match the pool: plan has layers=%u experts_per_layer=%u "
		   "expert_bytes=%llu, pool has layers=%u experts_per_layer=%u expert_bytes=%llu",
		   what, p->layers, p->experts_per_layer, (unsigned long long)p->expert_bytes, layers,
		   experts, (unsigned long long)expert_bytes);
	return -EINVAL;
}

int plan_check_hints(const struct plan *h, const struct plan *p, char *reason, size_t rlen)
{
	uint32_t i;

	if (h->n_iterations != p->n_iterations || h->n_passes != p->n_passes) {
		set_reason(reason, rlen,
			   "hint plan shape differs from the replay plan: %u iterations/%u passes vs %u/%u",
			   h->n_iterations, h->n_passes, p->n_iterations, p->n_passes);
		return -EINVAL;
	}
	for (i = 0; i < h->n_iterations; i++) {
		if (h->iters[i].n_passes != p->iters[i].n_passes) {
			set_reason(reason, rlen,
				   "hint plan shape differs from the replay plan at iteration %u", i);
			return -EINVAL;
		}
	}
	return 0;
}
