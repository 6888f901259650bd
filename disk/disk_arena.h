/*
 * disk_arena.h — the one allocator of large buffers: equal blocks carved
 * from chunks of DISK_ARENA_CHUNK (2 MiB) at addresses that are multiples
 * of it (a block's chunk is its address rounded down), under one page
 * policy (DISK_ARENA_HUGE): huge pages, MADV_HUGEPAGE, so a fresh chunk is
 * one page fault of a huge page, not one a 4 KiB page (where the kernel has
 * no huge page to give, the chunk faults page by page, as malloc'd memory
 * does). Free blocks stay in a
 * pool; a chunk whose every block is back while the pool holds more than
 * keep blocks goes back to the kernel. Under ASan a pooled block's bytes
 * are poisoned (but its first pointer, the pool's link).
 *
 * Users: the fill sinks' buffers (cachetier_write.c); the stage's span
 * buffers are page runs of one region of its own (disk_arena_region,
 * fetch_stagebuf.c). The arena has no
 * lock of its own: its owner's lock serializes every call but
 * disk_arena_chunk_map and disk_arena_chunk_unmap, which are the only
 * system calls, so an owner may run them with its lock released.
 */
#ifndef SHARDFS_DISK_ARENA_H
#define SHARDFS_DISK_ARENA_H

#include <stddef.h>

#define DISK_ARENA_CHUNK (2u * 1024u * 1024u)

/* The page policy of every chunk, region and mapping of 2 MiB or more: 1,
 * huge pages (MADV_HUGEPAGE, a chunk one fault where it is first written);
 * 0, 4 KiB pages (MADV_NOHUGEPAGE, a chunk faulted in by MADV_POPULATE_WRITE
 * when mapped). A fresh huge page costs 10x a populated 4 KiB chunk on the
 * bench's VM (5-6 ms of CPU against 0.4-0.5: tests/bench/fresh_bench.c),
 * but the A/B of the two (tests/bench/README.md "Fresh memory") kept huge
 * pages: with 4 KiB pages the planner's zeroing went, and the I/O loop's
 * receives into the same buffers cost as much more in the planned epoch
 * and more than that in a prefetch (L4 0.785 -> 1.105 CPU-s/GB, the fill
 * writer's O_DIRECT writes too). Never 4 KiB pages without the populate:
 * faulted page by page by writes a chunk costs 9.7 ms. */
#define DISK_ARENA_HUGE 1

struct disk_arena_chunk;

struct disk_arena {
	size_t block;	 /* a block's bytes (a multiple of the alignment) */
	size_t first;	 /* a chunk's first block's offset (its header before it) */
	unsigned per;	 /* blocks a chunk */
	unsigned keep;	 /* free blocks kept before a whole chunk goes back */
	void *free;	 /* the pool: free blocks, linked through their first bytes */
	unsigned nfree;	 /* ... how many */
	unsigned chunks; /* chunks mapped */
	struct disk_arena_chunk *list;
};

/* An empty arena of blocks of block bytes, each at a multiple of align (a
 * power of two, at least a pointer's); keep: the pool's most before a
 * whole chunk goes back. -EINVAL: not one block fits a chunk. */
int disk_arena_init(struct disk_arena *a, size_t block, size_t align, unsigned keep);
/* A free block of the pool, NULL when it is empty; no system call. */
void *disk_arena_take(struct disk_arena *a);
/* A fresh chunk (mapped, aligned, under the page policy; with 4 KiB pages
 * every page faulted in here, 0.4-0.5 ms of CPU on the bench's VM, so an
 * owner that calls it under its lock would hold the lock that long), for
 * disk_arena_add; NULL: out of memory. Needs no lock. */
void *disk_arena_chunk_map(void);
/* chunk's blocks into a's pool, the first taken and returned. */
void *disk_arena_add(struct disk_arena *a, void *chunk);
/* blk back into the pool; returns a chunk out of the arena, to
 * disk_arena_chunk_unmap (the lock may be released first), or NULL. */
void *disk_arena_give(struct disk_arena *a, void *blk);
void disk_arena_chunk_unmap(void *chunk);
/* Every chunk unmapped; every block must be back. */
void disk_arena_fini(struct disk_arena *a);

/* A buffer of its own mapping, for sizes no arena's block fits (the
 * stage's spans): size bytes (a page multiple), at a 2 MiB-aligned
 * address under the page policy when it is 2 MiB or more, its pages
 * faulted in with one call (MADV_POPULATE_WRITE: no trap a page when
 * it is first written; a kernel without it faults them as they are
 * touched); NULL: out of memory. disk_arena_prefault: bytes [p, p + n)
 * of a mapping faulted in so (a grown mapping's new pages); unmapped
 * with munmap. */
void *disk_arena_map(size_t size);
void disk_arena_prefault(void *p, size_t n);
/* A region for an owner's own carving (the stage's span buffers): size
 * bytes (a page multiple) at a 2 MiB-aligned address under the page
 * policy whatever its size, no page faulted in (the owner faults in its
 * 2 MiB chunks with disk_arena_prefault as it first uses them: one huge
 * page each where the kernel has one); NULL: out of memory; unmapped with munmap. */
void *disk_arena_region(size_t size);

#endif
