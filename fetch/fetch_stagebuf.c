/*
 * fetch_stagebuf.c — the stage's buffers (fetch_i.h: fetch__stagebuf_*):
 * page runs of one region of --plan-memory's bytes (whole pages), mapped
 * once, at the stage's first span (disk_arena_region: 2 MiB-aligned,
 * the arena's page policy, no page faulted in; a mount that never stages a span maps
 * nothing), and kept until the stage goes. A span's run
 * is taken and given back under the stage's lock with no system call: no
 * mapping, unmapping or resizing a span (the mremap of the pool of
 * mappings before it cost the planner thread 4.8 % of the daemon's
 * samples, its TLB shootdowns; tests/bench/README.md "The stage's spans
 * in one huge-page region").
 *
 * A buffer's size is its span's rounded up to a class: whole pages, the
 * page count's top four bits kept (at most 1/8 more than the span, less
 * than a page below 8 pages): the stage's memory does not depend on
 * where runs lie. A run is the region's first free one of its pages
 * (first fit, a bit a page, searched and marked a word of bits at a time),
 * found once: the room rule's scan
 * (fetch__stagebuf_fit) names the run the span takes (fetch__stagebuf_take
 * marks it, under the same hold of the stage's lock). The region's 2 MiB chunks are faulted in
 * the first time a run reaches them (fetch__stagebuf_take hands out the
 * range, the caller faults it in with the lock released before the
 * span's read starts: disk_arena_prefault, MADV_POPULATE_WRITE: one huge
 * page a chunk where the kernel has one, DISK_ARENA_HUGE's policy), and stay so: after the first
 * epoch the stage takes no page fault. Resident: the chunks runs have
 * reached, at most the region, at most --plan-memory.
 *
 * Fragmentation is the room rule's (fetch_stage.c, stage_make_room): a
 * span whose bytes fit the stage's count but no free run of its pages is
 * "no room" once no piece can go for it (nofit counted), and goes to the
 * store as any span the stage has no room for: never a wrong byte
 * (tests/unit/test_stagebuf.c checks each refusal against the runs the
 * spans hold).
 *
 * A buffer goes back only once no read holds its span and the store's
 * read into it ended (fetch_stage.c: fetch__stage_unlink, fetch__stage_drop_buf), and a
 * read is served only bytes its own span's read wrote (below its
 * watermark): a reused run's old bytes are never served.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "disk_arena.h"
#include "fetch_i.h"

#define PAGE   4096u
#define CHUNKP (DISK_ARENA_CHUNK / PAGE) /* pages a 2 MiB chunk */

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

int fetch__stagebuf_init(struct fetch_stage_pool *pl, uint64_t max)
{
	size_t pages = (size_t)(max / PAGE), words = (pages + 63) / 64;
	size_t chunks = (pages + CHUNKP - 1) / CHUNKP;

	*pl = (struct fetch_stage_pool){.pages = pages};
	if (pages == 0)
		return 0;
	pl->used = calloc(words, sizeof(uint64_t));
	pl->faulted = calloc((chunks + 63) / 64, sizeof(uint64_t));
	if (!pl->used || !pl->faulted) {
		fetch__stagebuf_fini(pl);
		return -ENOMEM;
	}
	pl->free_bytes = (uint64_t)pages * PAGE;
	return 0;
}

int fetch__stagebuf_map(struct fetch_stage_pool *pl)
{
	if (pl->base || pl->pages == 0)
		return pl->base ? 0 : -ENOMEM;
	pl->base = disk_arena_region(pl->pages * PAGE);
	return pl->base ? 0 : -ENOMEM;
}

void fetch__stagebuf_fini(struct fetch_stage_pool *pl)
{
	if (pl->base)
		munmap(pl->base, pl->pages * PAGE);
	free(pl->used);
	free(pl->faulted);
	*pl = (struct fetch_stage_pool){0};
}

/* The first page at or after i whose bit is used (want 1) or free (want
 * 0), at most lim: a word at a time. */
static size_t page_next(const struct fetch_stage_pool *pl, size_t i, size_t lim, int want)
{
	while (i < lim) {
		uint64_t w = pl->used[i / 64];
		uint64_t bits = (want ? w : ~w) & (~0ull << (i % 64));

		if (bits) {
			size_t r = i / 64 * 64 + (size_t)__builtin_ctzll(bits);

			return r < lim ? r : lim;
		}
		i = i / 64 * 64 + 64;
	}
	return lim;
}

/* The first page of the region's first free run of n pages; pl->pages:
 * none. A word of bits at a time: the next free page, then the next used
 * one within n of it (O(words of the region) a search, not O(pages)). */
static size_t run_find(const struct fetch_stage_pool *pl, size_t n)
{
	size_t i = 0;

	for (;;) {
		size_t j;

		i = page_next(pl, i, pl->pages, 0);
		if (n > pl->pages - i)
			return pl->pages;
		j = page_next(pl, i, i + n, 1);
		if (j >= i + n)
			return i;
		i = j + 1; /* j is used: no run starts before it */
	}
}

/* Pages [i, i + n) used or free: a word of bits at a time. */
static void run_mark(struct fetch_stage_pool *pl, size_t i, size_t n, int used)
{
	for (size_t j = i, e = i + n; j < e;) {
		size_t k = e - j < 64 - j % 64 ? e - j : 64 - j % 64;
		uint64_t m = (k == 64 ? ~0ull : ((1ull << k) - 1)) << (j % 64);

		if (used)
			pl->used[j / 64] |= m;
		else
			pl->used[j / 64] &= ~m;
		j += k;
	}
}

size_t fetch__stagebuf_fit(const struct fetch_stage_pool *pl, size_t size)
{
	if (!pl->base || size == 0 || size > pl->free_bytes)
		return pl->pages;
	return run_find(pl, size / PAGE);
}

void *fetch__stagebuf_take(struct fetch_stage_pool *pl, size_t i, size_t size, void **fault,
			   size_t *nfault)
{
	size_t n = size / PAGE;
	size_t lo = SIZE_MAX, hi = 0;

	*fault = NULL;
	*nfault = 0;
	if (n == 0 || i >= pl->pages || i + n > pl->pages)
		return NULL;
	run_mark(pl, i, n, 1);
	pl->free_bytes -= size;
	pl->runs++;
	/* the chunks the run reaches first: faulted in by the caller */
	for (size_t c = i / CHUNKP; c <= (i + n - 1) / CHUNKP; c++) {
		if ((pl->faulted[c / 64] >> (c % 64)) & 1u)
			continue;
		pl->faulted[c / 64] |= 1ull << (c % 64);
		pl->chunks++;
		lo = c < lo ? c : lo;
		hi = c + 1;
	}
	if (hi) {
		size_t end = hi * CHUNKP < pl->pages ? hi * CHUNKP : pl->pages;

		*fault = pl->base + lo * CHUNKP * PAGE;
		*nfault = (end - lo * CHUNKP) * PAGE;
	}
	return pl->base + i * PAGE;
}

void fetch__stagebuf_put(struct fetch_stage_pool *pl, void *buf, size_t size)
{
	size_t i = (size_t)((unsigned char *)buf - pl->base) / PAGE;

	run_mark(pl, i, size / PAGE, 0);
	pl->free_bytes += size;
}
