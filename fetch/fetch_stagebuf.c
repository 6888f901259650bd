/*
 * fetch_stagebuf.c — the stage's buffers (fetch_i.h: fetch__stagebuf_*):
 * page-aligned mappings kept for reuse, so that a span's buffer is one a
 * span before used (its pages faulted in already) rather than fresh
 * memory whose every page faults on the store's first write (3.9 % of
 * the daemon's samples in the planned epoch, tests/bench/README.md "The
 * stage").
 *
 * A buffer's size is its span's rounded up to a class: whole pages, the
 * page count's top four bits kept (at most 1/8 more than the span, less
 * than a page below 8 pages); a span takes a free buffer of its class,
 * else one of another class resized (mremap: the nearest bigger class
 * first, shrunk without a fault, else the nearest smaller, grown: only
 * its new pages fault), else a fresh mapping. A fresh mapping and a grown
 * one's new pages are faulted in with one call (disk_arena_map,
 * disk_arena_prefault: MADV_POPULATE_WRITE), not a trap a page at the
 * store's first write. A buffer's size is always
 * its span's class's: the stage's memory does not depend on which
 * buffers were free. A free buffer keeps its class
 * and the next free one of that class in its first bytes (the pool keeps
 * no memory of its own). The stage counts its buffers' sizes in its
 * memory (--plan-memory), and keeps free buffers only while they and the
 * spans' fit in it (fetch__stagebuf_trim, at each new span): mappings
 * beyond it are unmapped, the biggest class first.
 *
 * The pool is the stage's (struct fetch_stage_pool in it): every call but
 * fetch__stagebuf_map and fetch__stagebuf_unmap runs under the stage's
 * lock and makes no system call; mapping, resizing and unmapping run with
 * it released. A buffer goes back to the pool only once no read holds its
 * span and the store's read into it ended (fetch_stage.c: piece_unlink,
 * piece_drop_buf), and a read is served only bytes its own span's read
 * wrote (below its watermark): a reused buffer's old bytes are never
 * served (tests/unit/test_stagebuf.c).
 */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "disk_arena.h"
#include "fetch_i.h"

#define PAGE 4096u

/* A free buffer's first bytes. */
struct stagebuf_free {
	struct stagebuf_free *next;
	size_t size;
};

/* The class of a buffer of size (a page multiple) and size of class c. */
static unsigned class_of_pages(uint64_t pages, uint64_t *rounded)
{
	unsigned shift = 0;

	if (pages < 8) {
		*rounded = pages;
		return (unsigned)pages;
	}
	while ((pages >> shift) >= 16)
		shift++;
	pages = ((pages + (1ull << shift) - 1) >> shift) << shift; /* top four bits */
	if ((pages >> shift) == 16)
		shift++;
	*rounded = pages;
	return shift * 8 + (unsigned)(pages >> shift);
}

size_t fetch__stagebuf_size(size_t len, unsigned *cls)
{
	uint64_t pages = (len + PAGE - 1) / PAGE, rounded;
	unsigned c = class_of_pages(pages ? pages : 1, &rounded);

	if (cls)
		*cls = c;
	return (size_t)(rounded * PAGE);
}

void *fetch__stagebuf_take(struct fetch_stage_pool *pl, size_t len, size_t *size, size_t *has)
{
	unsigned c, k = FETCH_STAGEBUF_CLASSES;
	struct stagebuf_free *f;

	*size = fetch__stagebuf_size(len, &c);
	if (pl->free[c]) {
		k = c;
	} else if (pl->free_bytes > 0) {
		/* another class: the nearest bigger one (shrunk: no fault),
		 * else the nearest smaller one (grown: its new pages fault) */
		for (unsigned j = c + 1; j < FETCH_STAGEBUF_CLASSES && k == FETCH_STAGEBUF_CLASSES;
		     j++)
			k = pl->free[j] ? j : k;
		for (unsigned j = c; j-- > 0 && k == FETCH_STAGEBUF_CLASSES;)
			k = pl->free[j] ? j : k;
	}
	if (k == FETCH_STAGEBUF_CLASSES)
		return NULL;
	f = pl->free[k];
	pl->free[k] = f->next;
	pl->free_bytes -= f->size;
	*has = f->size;
	if (k == c)
		pl->reuses++;
	else
		pl->remaps++;
	return f;
}

void *fetch__stagebuf_map(void *buf, size_t has, size_t size)
{
	void *p;

	if (buf && has == size)
		return buf;
	if (buf) {
		p = mremap(buf, has, size, MREMAP_MAYMOVE);
		if (p != MAP_FAILED) {
			if (size > has) /* grown: its new pages faulted in at once */
				disk_arena_prefault((char *)p + has, size - has);
			return p;
		}
		munmap(buf, has);
	}
	return disk_arena_map(size);
}

void fetch__stagebuf_put(struct fetch_stage_pool *pl, void *buf, size_t size)
{
	struct stagebuf_free *f = buf;
	unsigned c;

	fetch__stagebuf_size(size, &c);
	f->size = size;
	f->next = pl->free[c];
	pl->free[c] = f;
	pl->free_bytes += size;
}

void *fetch__stagebuf_trim(struct fetch_stage_pool *pl, uint64_t keep)
{
	struct stagebuf_free *out = NULL;

	for (unsigned c = FETCH_STAGEBUF_CLASSES; c-- > 0 && pl->free_bytes > keep;) {
		while (pl->free[c] && pl->free_bytes > keep) {
			struct stagebuf_free *f = pl->free[c];

			pl->free[c] = f->next;
			pl->free_bytes -= f->size;
			f->next = out;
			out = f;
		}
	}
	return out;
}

void fetch__stagebuf_unmap(void *list)
{
	struct stagebuf_free *f = list;

	while (f) {
		struct stagebuf_free *n = f->next;

		munmap(f, f->size);
		f = n;
	}
}
