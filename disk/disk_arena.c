/*
 * disk_arena.c — equal blocks carved from 2 MiB chunks (disk_arena.h). A chunk's header lies in its
 * first bytes, before its first block: the next chunk and how many of its blocks are in the pool.
 */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>

#include "disk_arena.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define ARENA_POISON(p, n)   ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct disk_arena_chunk {
	struct disk_arena_chunk *next;
	unsigned nfree; /* of its blocks in the pool */
};

static struct disk_arena_chunk *chunk_of(const void *blk)
{
	return (struct disk_arena_chunk *)((uintptr_t)blk & ~(uintptr_t)(DISK_ARENA_CHUNK - 1));
}

int disk_arena_init(struct disk_arena *a, size_t block, size_t align, unsigned keep)
{
	size_t first;

	if (align < sizeof(void *) || (align & (align - 1)) || block == 0 || block % align)
		return -EINVAL;
	first = (sizeof(struct disk_arena_chunk) + align - 1) & ~(align - 1);
	if (first + block > DISK_ARENA_CHUNK)
		return -EINVAL;
	*a = (struct disk_arena){.block = block,
				 .first = first,
				 .per = (unsigned)((DISK_ARENA_CHUNK - first) / block),
				 .keep = keep};
	return 0;
}

/* blk into the pool (its link written, the rest poisoned). */
static void pool_push(struct disk_arena *a, void *blk)
{
	ARENA_UNPOISON(blk, sizeof(void *));
	*(void **)blk = a->free;
	ARENA_POISON((char *)blk + sizeof(void *), a->block - sizeof(void *));
	a->free = blk;
	a->nfree++;
}

void *disk_arena_take(struct disk_arena *a)
{
	void *blk = a->free;

	if (!blk)
		return NULL;
	a->free = *(void **)blk;
	a->nfree--;
	chunk_of(blk)->nfree--;
	ARENA_UNPOISON(blk, a->block);
	return blk;
}

/* The page policy of every chunk and region (DISK_ARENA_HUGE, disk_arena.h):
 * huge pages or 4 KiB pages, whatever the system's THP default. */
static void page_policy(void *p, size_t n)
{
	(void)madvise(p, n, DISK_ARENA_HUGE ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* no THP: 4 KiB */
}

void *disk_arena_chunk_map(void)
{
	size_t span = 2 * (size_t)DISK_ARENA_CHUNK, head;
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	/* the aligned chunk inside the span; the rest unmapped */
	head = (DISK_ARENA_CHUNK - (uintptr_t)m % DISK_ARENA_CHUNK) % DISK_ARENA_CHUNK;
	if (head)
		munmap(m, head);
	munmap(m + head + DISK_ARENA_CHUNK, span - head - DISK_ARENA_CHUNK);
	page_policy(m + head, DISK_ARENA_CHUNK);
	if (!DISK_ARENA_HUGE)
		disk_arena_prefault(m + head, DISK_ARENA_CHUNK);
	return m + head;
}

void *disk_arena_add(struct disk_arena *a, void *chunk)
{
	struct disk_arena_chunk *ch = chunk;
	char *b0 = (char *)chunk + a->first;

	ch->next = a->list;
	ch->nfree = 0;
	a->list = ch;
	a->chunks++;
	for (unsigned i = a->per; i-- > 1;) {
		pool_push(a, b0 + (size_t)i * a->block);
		ch->nfree++;
	}
	/* the tail past the last block, never handed out */
	ARENA_POISON(b0 + (size_t)a->per * a->block,
		     DISK_ARENA_CHUNK - a->first - (size_t)a->per * a->block);
	return b0;
}

/* ch's blocks off the pool and ch off the list; every block of ch in the
 * pool. */
static void chunk_unlink(struct disk_arena *a, struct disk_arena_chunk *ch)
{
	void **pp = &a->free;
	struct disk_arena_chunk **cp = &a->list;

	while (*pp) {
		if (chunk_of(*pp) == ch)
			*pp = *(void **)*pp;
		else
			pp = (void **)*pp;
	}
	a->nfree -= a->per;
	while (*cp != ch)
		cp = &(*cp)->next;
	*cp = ch->next;
	a->chunks--;
}

void *disk_arena_give(struct disk_arena *a, void *blk)
{
	struct disk_arena_chunk *ch = chunk_of(blk);

	pool_push(a, blk);
	/* a chunk whole again while the pool holds more than its most: back
	 * to the kernel (a walk of the pool, once a chunk) */
	if (++ch->nfree == a->per && a->nfree >= a->keep + a->per) {
		chunk_unlink(a, ch);
		return ch;
	}
	return NULL;
}

void disk_arena_chunk_unmap(void *chunk)
{
	if (!chunk)
		return;
	ARENA_UNPOISON(chunk, DISK_ARENA_CHUNK);
	munmap(chunk, DISK_ARENA_CHUNK);
}

void disk_arena_fini(struct disk_arena *a)
{
	while (a->list) {
		struct disk_arena_chunk *ch = a->list;

		assert(ch->nfree == a->per); /* every block back */
		a->list = ch->next;
		disk_arena_chunk_unmap(ch);
	}
	a->free = NULL;
	a->nfree = 0;
	a->chunks = 0;
}

void disk_arena_prefault(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
	if (n)
		(void)madvise(p, n, MADV_POPULATE_WRITE); /* EINVAL before 5.14: faults later */
#else
	(void)p;
	(void)n;
#endif
}

/* size bytes mapped, at a 2 MiB-aligned address under the page policy
 * when align (the rest of a bigger mapping unmapped), not faulted in. */
static char *map_aligned(size_t size, int align)
{
	size_t span = align ? size + DISK_ARENA_CHUNK : size, head = 0;
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	if (span > size) {
		/* the aligned size bytes inside the span; the rest unmapped */
		head = (DISK_ARENA_CHUNK - (uintptr_t)m % DISK_ARENA_CHUNK) % DISK_ARENA_CHUNK;
		if (head)
			munmap(m, head);
		if (span - head - size)
			munmap(m + head + size, span - head - size);
		page_policy(m + head, size);
	}
	return m + head;
}

void *disk_arena_map(size_t size)
{
	char *m = map_aligned(size, size >= DISK_ARENA_CHUNK);

	if (m)
		disk_arena_prefault(m, size);
	return m;
}

void *disk_arena_region(size_t size)
{
	return map_aligned(size, 1);
}
