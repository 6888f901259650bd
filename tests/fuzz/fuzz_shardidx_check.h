/*
 * fuzz_shardidx_check.h — shared by fuzz_tar.c and fuzz_index.c: walk a
 * shardidx through its public API and abort on any broken contract of
 * shardidx.h (the same properties tests/shardidx/shardidx_dump.c checks),
 * then check that it saves, loads back and saves to the same bytes.
 *
 * Not a module: a header of static functions for the fuzz harnesses only.
 */
#ifndef FUZZ_SHARDIDX_CHECK_H
#define FUZZ_SHARDIDX_CHECK_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx.h"
#include "check.h"

static uint64_t fz_rng(uint64_t *s)
{
	/* splitmix64 */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t fz_hash(const uint8_t *d, size_t n)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < n; i++) {
		h ^= d[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* Map the whole of regular entry i in steps of at most 3 extents, then a
 * few random ranges; extents must be contiguous, non-empty, in the stream. */
static void fz_check_map(const struct shardidx *ix, uint32_t i, const struct shardidx_entry *e,
			 const struct shardidx_info *inf, uint64_t *rng)
{
	struct shardidx_extent ext[3];
	uint64_t off = 0;
	int r, trunc = !!(e->flags & SHARDIDX_F_TRUNCATED);

	r = shardidx_map(ix, i, 0, e->size, ext, 3);
	ENSURE(!trunc || !e->size || r == -EIO);
	ENSURE(trunc || r >= 0);
	if (r >= 0) {
		/* a sparse file of many tiny segments: bound the walk */
		for (int steps = 0; off < e->size && steps < 4096; steps++) {
			r = shardidx_map(ix, i, off, e->size - off, ext, 3);
			ENSURE(r > 0 && r <= 3);
			for (int k = 0; k < r; k++) {
				ENSURE(ext[k].logical == off && ext[k].len);
				ENSURE(ext[k].len <= e->size - off);
				ENSURE(ext[k].hole ||
				       (ext[k].stream_off <= inf->stream_size &&
					ext[k].len <= inf->stream_size - ext[k].stream_off));
				ENSURE(!ext[k].hole || (e->flags & SHARDIDX_F_SPARSE));
				off += ext[k].len;
			}
		}
		ENSURE(shardidx_map(ix, i, e->size, 10, ext, 3) == 0);
	}
	for (int k = 0; k < 4; k++) {
		uint64_t o = fz_rng(rng) % (e->size + 2), l = fz_rng(rng) % (e->size + 2);

		if (k == 3)
			l = UINT64_MAX - o; /* overflow of off + len must be handled */
		r = shardidx_map(ix, i, o, l, ext, 1 + (int)(fz_rng(rng) % 3));
		ENSURE(r >= -4095 && r <= 3);
		if (r > 0)
			ENSURE(ext[0].logical == o && ext[0].len && ext[0].len <= e->size - o);
	}
}

static void fz_check(const struct shardidx *ix, uint64_t seed)
{
	struct shardidx_info inf;
	struct shardidx_entry e, c;
	uint32_t first, n, rootn, *in_sample;
	uint64_t rng = seed;

	shardidx_get_info(ix, &inf);
	shardidx_root(ix, &first, &rootn);
	ENSURE(first == 0 && rootn <= inf.nentries);
	ENSURE(shardidx_entry_get(ix, inf.nentries, &e) == -EINVAL);
	in_sample = calloc(inf.nentries + 1, sizeof(*in_sample));
	ENSURE(in_sample);
	for (uint32_t i = 0; i < inf.nentries; i++) {
		uint32_t lo, hi;
		size_t nl;

		ENSURE(shardidx_entry_get(ix, i, &e) == 0);
		nl = strlen(e.name);
		ENSURE(nl && nl <= 255 && !strchr(e.name, '/') && strcmp(e.name, ".") &&
		       strcmp(e.name, ".."));
		if (e.parent == SHARDIDX_NONE) {
			lo = 0;
			hi = rootn;
		} else {
			ENSURE(shardidx_entry_get(ix, e.parent, &c) == 0 && c.type == SHARDIDX_DIR);
			lo = c.first_child;
			hi = c.first_child + c.nchild;
		}
		ENSURE(i >= lo && i < hi);
		ENSURE(shardidx_lookup(ix, e.parent, e.name, nl) == i);
		ENSURE(!(e.mode & ~07777));
		switch (e.type) {
		case SHARDIDX_DIR: {
			uint32_t nsub = 0;

			ENSURE(e.first_child <= inf.nentries &&
			       e.nchild <= inf.nentries - e.first_child);
			for (uint32_t j = e.first_child; j < e.first_child + e.nchild; j++) {
				ENSURE(shardidx_entry_get(ix, j, &c) == 0 && c.parent == i);
				nsub += c.type == SHARDIDX_DIR;
			}
			ENSURE(e.nlink == 2 + nsub);
			ENSURE(shardidx_map(ix, i, 0, 1, NULL, 0) == -EINVAL);
			break;
		}
		case SHARDIDX_SYMLINK:
			ENSURE(e.link && strlen(e.link) == e.size);
			break;
		case SHARDIDX_REG:
			if (e.canon != i) {
				ENSURE(e.flags & SHARDIDX_F_HARDLINK);
				ENSURE(shardidx_entry_get(ix, e.canon, &c) == 0 &&
				       c.type == SHARDIDX_REG && c.canon == e.canon &&
				       c.size == e.size && c.data_off == e.data_off &&
				       c.nlink == e.nlink && c.nlink >= 2);
			} else {
				ENSURE(!(e.flags & SHARDIDX_F_HARDLINK));
			}
			fz_check_map(ix, i, &e, &inf, &rng);
			break;
		default:
			ENSURE(0);
		}
	}
	for (uint32_t s = 0; s < inf.nsamples; s++) {
		ENSURE(shardidx_sample_get(ix, s, &first, &n) == 0 && n && first <= inf.nentries &&
		       n <= inf.nentries - first);
		for (uint32_t j = first; j < first + n; j++)
			in_sample[j]++;
	}
	ENSURE(shardidx_sample_get(ix, inf.nsamples, &first, &n) == -EINVAL);
	for (uint32_t i = 0; i < inf.nentries; i++) {
		ENSURE(shardidx_entry_get(ix, i, &e) == 0);
		ENSURE(in_sample[i] == (e.type != SHARDIDX_DIR));
	}
	free(in_sample);
	/* lookups of names that are not there */
	ENSURE(shardidx_lookup(ix, SHARDIDX_NONE, "", 0) < 0);
	ENSURE(shardidx_lookup(ix, inf.nentries, "x", 1) < 0);
}

/* save -> load -> save is the identity, and the loaded copy checks too.
 * *saved (if not NULL) gets the first save (caller frees). */
static void fz_roundtrip(const struct shardidx *ix, uint64_t seed, void **saved, size_t *savedlen)
{
	static const char ident[] = "fuzz-ident";
	struct shardidx *ix2 = NULL;
	void *a, *b, *c;
	size_t al, cl;

	ENSURE(shardidx_save(ix, ident, sizeof(ident) - 1, &a, &al) == 0);
	b = malloc(al);
	ENSURE(b);
	memcpy(b, a, al);
	ENSURE(shardidx_load(b, al, ident, sizeof(ident) - 1, &ix2) == 0);
	ENSURE(shardidx_save(ix2, ident, sizeof(ident) - 1, &c, &cl) == 0);
	ENSURE(al == cl && memcmp(a, c, al) == 0);
	/* another identity is -ESTALE, a cut file is -EBADMSG */
	b = malloc(al);
	ENSURE(b);
	memcpy(b, a, al);
	{
		struct shardidx *ix3 = NULL;

		ENSURE(shardidx_load(b, al, "other", 5, &ix3) == -ESTALE && !ix3);
		b = malloc(al);
		ENSURE(b);
		memcpy(b, a, al - 1);
		ENSURE(shardidx_load(b, al - 1, ident, sizeof(ident) - 1, &ix3) == -EBADMSG &&
		       !ix3);
	}
	fz_check(ix2, seed);
	shardidx_free(ix2);
	free(c);
	if (saved) {
		*saved = a;
		*savedlen = al;
	} else {
		free(a);
	}
}

#endif
