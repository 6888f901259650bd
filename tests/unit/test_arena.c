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
 * cannot carve are -EINVAL. A mapping of its own (disk_arena_map, the
 * stage's span buffers): 3 pages and 4 MiB, every page resident before
 * a byte is written (mincore: pre-faulted), the 4 MiB at a 2 MiB-aligned
 * address; a mapping's second half faulted in by disk_arena_prefault
 * (exactly half its pages resident). Without MADV_POPULATE_WRITE the 3
 * checks of residency fail. A region (disk_arena_region, the stage's
 * runs): 3 pages at a 2 MiB-aligned address, none resident until one
 * is faulted in (then exactly it).
 *
 * The page policy (DISK_ARENA_HUGE): fresh chunks, the 4 MiB mapping and
 * the region carry its madvise in /proc/self/smaps' VmFlags (4 KiB pages:
 * nh, not hg; huge pages: hg, not nh), and with 4 KiB pages a fresh
 * chunk's 512 pages are all resident before a byte of it is written (one
 * MADV_POPULATE_WRITE; with huge pages none before it is written). With
 * the madvise of either policy left out the 3 checks of the policy fail
 * (main before the constant, under DISK_ARENA_HUGE 0: 3 of 14).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "disk_arena.h"

#define BLOCK (64u * 1024u)
#define PER   31
#define N     (2 * PER)
/* a fresh chunk's pages resident before it is written: all with 4 KiB pages */
#define FRESH_RES (DISK_ARENA_HUGE ? 0u : DISK_ARENA_CHUNK / 4096u)

/* Pages of [p, p + n) resident (mincore). */
static size_t resident(void *p, size_t n)
{
	size_t pages = n / 4096, k = 0;
	unsigned char v[1024];

	if (pages > sizeof(v) || mincore(p, n, v))
		return (size_t)-1;
	for (size_t i = 0; i < pages; i++)
		k += v[i] & 1;
	return k;
}

/* 1 when the VmFlags of the mapping holding p (/proc/self/smaps) name
 * flag ("nh": MADV_NOHUGEPAGE, "hg": MADV_HUGEPAGE), 0 when not, -1: no
 * such mapping. */
static int vmflag(const void *p, const char *flag)
{
	char line[512], want[8];
	FILE *f = fopen("/proc/self/smaps", "r");
	int in = 0, got = -1;

	if (!f)
		return -1;
	snprintf(want, sizeof(want), " %s", flag);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && !strncmp(line, "VmFlags:", 8)) {
			line[strcspn(line, "\n")] = ' ';
			got = strstr(line + 8, want) != NULL;
		}
	}
	fclose(f);
	return got;
}

/* The page policy's marks on the mapping holding p: 1 when it is
 * DISK_ARENA_HUGE's (hg, not nh, for huge pages; nh, not hg, for 4 KiB). */
static int policy_ok(const void *p)
{
	return vmflag(p, "hg") == DISK_ARENA_HUGE && vmflag(p, "nh") == !DISK_ARENA_HUGE;
}

static uintptr_t chunk_of(const void *p)
{
	return (uintptr_t)p & ~(uintptr_t)(DISK_ARENA_CHUNK - 1);
}

int main(void)
{
	struct disk_arena a;
	unsigned char *b[N];
	void *c[2], *gone = NULL;
	int bad = 0, wrong = 0, nback = 0, unpolicied = 0;
	size_t res[2];

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
		/* before a byte is written (the add writes the header and links) */
		res[k] = resident(c[k], DISK_ARENA_CHUNK);
		unpolicied += !policy_ok(c[k]);
		b[k * PER] = disk_arena_add(&a, c[k]);
		bad += (void *)b[k * PER] != (char *)c[k] + 4096;
		for (int i = 1; i < PER; i++)
			b[k * PER + i] = disk_arena_take(&a);
	}
	CHECK(bad == 0, "%d chunks or first blocks misplaced", bad);
	CHECK(res[0] == FRESH_RES && res[1] == FRESH_RES && unpolicied == 0,
	      "fresh chunks: %zu and %zu pages resident before a byte is written, not %u; "
	      "%d of 2 without the policy's madvise",
	      res[0], res[1], FRESH_RES, unpolicied);
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
	{
		void *m3 = disk_arena_map(3 * 4096), *m4 = disk_arena_map(4u << 20);
		void *h = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);

		if (!m3 || !m4 || h == MAP_FAILED)
			return 1;
		CHECK(resident(m3, 3 * 4096) == 3, "%zu of 3 pages of a fresh mapping resident",
		      resident(m3, 3 * 4096));
		CHECK(resident(m4, 4u << 20) == 1024 && chunk_of(m4) == (uintptr_t)m4 &&
			  policy_ok(m4),
		      "%zu of 1024 pages of 4 MiB resident, at %p, policy's madvise %d",
		      resident(m4, 4u << 20), m4, policy_ok(m4));
		disk_arena_prefault((char *)h + 32 * 4096, 32 * 4096);
		CHECK(resident(h, 64 * 4096) == 32,
		      "%zu of 64 pages resident, not the 32 prefaulted", resident(h, 64 * 4096));
		munmap(m3, 3 * 4096);
		munmap(m4, 4u << 20);
		munmap(h, 64 * 4096);
	}
	{
		char *r = disk_arena_region(3 * 4096);

		if (!r)
			return 1;
		CHECK(chunk_of(r) == (uintptr_t)r && resident(r, 3 * 4096) == 0 && policy_ok(r),
		      "a region at %p, %zu of its 3 pages resident, not 0, policy's madvise %d",
		      (void *)r, resident(r, 3 * 4096), policy_ok(r));
		disk_arena_prefault(r + 4096, 4096);
		CHECK(resident(r, 3 * 4096) == 1, "%zu of 3 pages resident, not the 1 faulted in",
		      resident(r, 3 * 4096));
		munmap(r, 3 * 4096);
	}
	return check_summary("arena");
}
