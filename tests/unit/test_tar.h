/*
 * test_tar.h — the tar writer the shardidx tests share (test_idxcursor.c,
 * test_idxrewrite.c): ustar members and old GNU sparse ones written into
 * memory from the seeded generator (test_rng.h), and two index entries
 * compared field for field. One test program is one translation unit:
 * every helper is static inline. Include after check.h and shardidx.h.
 */
#ifndef SHARDFS_TEST_TAR_H
#define SHARDFS_TEST_TAR_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rng.h"

/* ---- a tar writer (ustar, and old GNU sparse members) --------------------------- */

struct tarw {
	unsigned char *b;
	size_t len, cap;
};

static inline void tar_room(struct tarw *t, size_t more)
{
	if (t->len + more <= t->cap)
		return;
	size_t cap = (t->len + more) * 2;
	t->b = realloc(t->b, cap);
	if (!t->b)
		FAIL("realloc");
	memset(t->b + t->cap, 0, cap - t->cap);
	t->cap = cap;
}

static inline void octal(char *dst, size_t width, uint64_t v)
{
	char b[32];

	snprintf(b, sizeof(b), "%0*" PRIo64, (int)width - 1, v);
	memcpy(dst, b, width);
}

static inline void tar_sum(char *h)
{
	unsigned sum = 0;

	memset(h + 148, ' ', 8);
	for (int k = 0; k < 512; k++)
		sum += (unsigned char)h[k];
	snprintf(h + 148, 8, "%06o", sum);
}

static inline void tar_add(struct tarw *t, const char *name, char type, const char *link,
			   unsigned mode, uint64_t mtime, size_t dlen)
{
	char *h;

	tar_room(t, 512 + (dlen + 511) / 512 * 512 + 1024);
	h = (char *)t->b + t->len;
	snprintf(h, 100, "%.99s", name);
	octal(h + 100, 8, mode);
	octal(h + 108, 8, 0);
	octal(h + 116, 8, 0);
	octal(h + 124, 12, dlen);
	octal(h + 136, 12, mtime);
	h[156] = type;
	if (link)
		snprintf(h + 157, 100, "%.99s", link);
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	tar_sum(h);
	t->len += 512;
	memset(t->b + t->len, 'a' + (int)(dlen % 26), dlen);
	t->len += (dlen + 511) / 512 * 512;
}

/* An old GNU sparse member: 1-4 pieces with holes before, between, after. */
static inline void tar_sparse(struct tarw *t, uint64_t *s, const char *name, uint64_t mtime)
{
	uint64_t off[4], nb[4], pos = 0, stored = 0;
	uint32_t np = 1 + rnd_n(s, 4);
	char *h;

	for (uint32_t k = 0; k < np; k++) {
		off[k] = pos + rnd_n(s, 3000);
		nb[k] = 1 + rnd_n(s, 1500);
		pos = off[k] + nb[k];
		stored += nb[k];
	}
	tar_room(t, 512 + (stored + 511) / 512 * 512 + 1024);
	h = (char *)t->b + t->len;
	snprintf(h, 100, "%.99s", name);
	octal(h + 100, 8, 0644);
	octal(h + 108, 8, 0);
	octal(h + 116, 8, 0);
	octal(h + 124, 12, stored);
	octal(h + 136, 12, mtime);
	h[156] = 'S';
	memcpy(h + 257, "ustar  ", 8);
	for (uint32_t k = 0; k < np; k++) {
		octal(h + 386 + 24 * k, 12, off[k]);
		octal(h + 398 + 24 * k, 12, nb[k]);
	}
	octal(h + 483, 12, pos + rnd_n(s, 2000));
	tar_sum(h);
	t->len += 512;
	memset(t->b + t->len, 'S', stored);
	t->len += (stored + 511) / 512 * 512;
}

/* The same entry, field for field (link by its bytes). */
static inline int same_entry(const struct shardidx_entry *x, const struct shardidx_entry *y)
{
	return x->parent == y->parent && x->canon == y->canon && x->first_child == y->first_child &&
	       x->nchild == y->nchild && x->nlink == y->nlink && x->type == y->type &&
	       x->flags == y->flags && x->mode == y->mode && x->mtime == y->mtime &&
	       x->size == y->size && x->data_off == y->data_off && !strcmp(x->name, y->name) &&
	       (x->link ? y->link && !strcmp(x->link, y->link) : !y->link);
}

#endif
