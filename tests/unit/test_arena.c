/*
 * test_arena.c — the one allocator of large buffers (disk/disk_arena.c):
 * blocks of 64 KiB at 4 KiB alignment carved from 2 MiB chunks at
 * 2 MiB-aligned addresses: the header's block first, then exactly 31
 * blocks a chunk, each aligned, in its chunk, none overlapping (exact
 * bytes written and read back). An empty pool gives NULL; a chunk added
 * gives its first block and pools the other 30. With keep 31: 62 blocks
 * taken from 2 chunks, given back, the second chunk whole again past the
 * bound goes back (its address returned once, after its last block), the
 * first stays (31 in the pool, 1 chunk); at fini none. Sizes the arena
 * cannot carve are -EINVAL.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "disk_arena.h"

#define BLOCK (64u * 1024u)
#define PER   31
#define N     (2 * PER)

static uintptr_t chunk_of(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(DISK_ARENA_CHUNK - 1);
}

int main(void)
{
	struct disk_arena a;
	unsigned char *b[N];
	void *c[2], *gone = NULL;
	int bad = 0, wrong = 0, nback = 0;

	CHECK(disk_arena_init(&a, DISK_ARENA_CHUNK, 4096, 0) == -EINVAL &&
		  disk_arena_init(&a, BLOCK, 3000, 0) == -EINVAL &&
		  disk_arena_init(&a, 1000, 4096, 0) == -EINVAL,
	      "a block that does not fit a chunk, or a bad alignment, not refused");
	CHECK(disk_arena_init(&a, BLOCK, 4096, PER) == 0 && a.per == PER && a.first == 4096,
	      "64 KiB blocks: %u a chunk from offset %zu, not %d from 4096", a.per, a.first, PER);
	CHECK(disk_arena_take(&a) == NULL, "an empty arena gave a block");
	for (int k = 0; k < 2; k++) {
		c[k] = disk_arena_chunk_map();
		if (!c[k])
			return 1;
		bad += chunk_of(c[k]) != (uintptr_t)c[k];
		b[k * PER] = disk_arena_add(&a, c[k]);
		bad += (void *)b[k * PER] != (char *)c[k] + 4096;
		for (int i = 1; i < PER; i++)
			b[k * PER + i] = disk_arena_take(&a);
	}
	CHECK(bad == 0, "%d chunks or first blocks misplaced", bad);
	CHECK(disk_arena_take(&a) == NULL && a.nfree == 0 && a.chunks == 2,
	      "after %d taken: %u in the pool, %u chunks, not 0 and 2", N, a.nfree, a.chunks);
	for (int i = 0; i < N; i++) {
		if (!b[i] || (uintptr_t)b[i] % 4096 || chunk_of(b[i]) != (uintptr_t)c[i / PER])
			bad++;
		else
			memset(b[i], i + 1, BLOCK);
	}
	for (int i = 0; i < N; i++)
		for (size_t k = 0; b[i] && k < BLOCK; k += 997)
			wrong += b[i][k] != (unsigned char)(i + 1);
	CHECK(bad == 0 && wrong == 0,
	      "%d blocks misaligned or outside their chunk, %d bytes overwritten", bad, wrong);
	for (int i = 0; i < N; i++) {
		void *g = disk_arena_give(&a, b[i]);

		if (g) {
			nback++;
			gone = g;
			bad += i != N - 1;
		}
	}
	CHECK(nback == 1 && gone == c[1] && a.nfree == PER && a.chunks == 1,
	      "%d chunks back (%p, want %p), %u in the pool and %u chunks, not 1, %d and 1", nback,
	      gone, c[1], a.nfree, a.chunks, PER);
	disk_arena_chunk_unmap(gone);
	disk_arena_fini(&a);
	CHECK(a.nfree == 0 && a.free == NULL && a.chunks == 0 && a.list == NULL,
	      "%u blocks, %u chunks after fini", a.nfree, a.chunks);
	return check_summary("arena");
}
