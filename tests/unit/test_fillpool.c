/*
 * test_fillpool.c — the fill sinks' buffer pool (cachetier_write.c,
 * cachetier__buf_get / _buf_put, on disk/disk_arena.c since the arena
 * moved there): buffers carved from chunks of 2 MiB at
 * an address that is a multiple of 2 MiB, under the arena's page policy
 * (DISK_ARENA_HUGE, disk_arena.h: huge pages, so a fresh mount's buffers
 * fault huge pages, not 33 pages of 4 KiB each; tests/bench/README.md, "L4:
 * the fill buffers' page faults" and "Fresh memory").
 *
 * 90 buffers taken from an empty pool: each one's bytes at a 4 KiB
 * boundary (O_DIRECT fills write them as they are), no two overlapping
 * (each buffer's FILL_BUF_BYTES and header written, then all read back
 * exact), in exactly 6 chunks of 2 MiB (15 a chunk); where the kernel
 * has transparent huge pages (not "[never]"), the first buffer's mapping
 * is THP-eligible exactly when the policy is huge pages (/proc/self/smaps). All 90 given back in
 * the order taken: the sixth chunk, whole again with the pool past FILL_POOL_MAX (64) and a chunk,
 * goes back to the kernel, so exactly 75 stay in the pool; 75 taken again all lie in the 5 chunks
 * kept and empty the pool, and one more takes a new chunk (14 left in the pool). At the end the
 * pool is freed: 0 in it.
 *
 * The pool's count of buffers out and of chunks mapped (cache_fill_pool_maps):
 * 6 mapped and 90 out after the first 90; no room for a prefetch fill's
 * fresh buffer then (cachetier__buf_room, FILL_BUFS_MAX 60), the writer's
 * wake-up asked; 0 out and room once all are back; taken again, room after
 * each of the first 59 takes, none from the 60th on (75 takes); one back
 * at 75 out: still none; 7 chunks mapped after the new one.
 *
 * The resume mark (resume_mark below): a prefetch sink paused for a
 * buffer is woken exactly once, by the put that leaves FILL_BUFS_RESUME - 1
 * (29) out, and takes one again only under the mark; the pool's peak count
 * (bufs_peak) is exact.
 *
 * On the malloc'd pool before the chunks (64 kept at most, the rest
 * freed), 4 of these 8 checks fail: 90 buffers in 7 regions of 2 MiB, THP
 * eligibility 0, 64 kept, 0 left after one more; 3,061 minor faults to
 * touch them, against 7 with huge-page chunks (with DISK_ARENA_HUGE 0,
 * 3,073, of which 3,072 inside 6 MADV_POPULATE_WRITE calls).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "disk_lock.h"

#define NBUF	90
#define CHUNK	(2u * 1024u * 1024u)
#define NCHUNKS 6

static uintptr_t chunk_of(const struct fill_buf *b)
{
	return (uintptr_t)b->data & ~(uintptr_t)(CHUNK - 1);
}

/* The distinct chunks of b[0..n) into ch[] (at most max); their count. */
static int chunks(struct fill_buf **b, int n, uintptr_t *ch, int max)
{
	int k = 0;

	for (int i = 0; i < n; i++) {
		int j = 0;

		while (j < k && ch[j] != chunk_of(b[i]))
			j++;
		if (j == k && k < max)
			ch[k++] = chunk_of(b[i]);
	}
	return k;
}

/* 1 when the kernel has transparent huge pages (not "[never]"), and the
 * THP-eligible flag of the mapping holding p in *elig (-1: not found). */
static int thp_on(const void *p, int *elig)
{
	char line[512];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	int on = 0, in = 0;

	*elig = -1;
	if (f) {
		on = fgets(line, sizeof(line), f) && !strstr(line, "[never]");
		fclose(f);
	}
	f = fopen("/proc/self/smaps", "r");
	if (!f)
		return on;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		int e;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "THPeligible: %d", &e) == 1)
			*elig = e;
	}
	fclose(f);
	return on;
}

static long minflt(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_minflt;
}

/* The resume mark (FILL_BUFS_RESUME, 30): FILL_BUFS_MAX out, a prefetch
 * sink's ask for a fresh buffer says no and asks for the wake-up; given
 * back one by one, exactly one wake-up (pool_wakes, backend_sink_ready: a
 * no-op without a store), at the put that leaves 29 out, none at 59 to 30
 * (where a resume at FILL_WQ_RESUME queued came with 33 fills each holding
 * one) nor after it. Then a paused sink's ask under the mark at 30 out: no,
 * the wake-up asked again and sent at the put that leaves 29; its ask at
 * 29: yes, no wake-up asked, so the puts after it send none. */
static void resume_mark(struct cachetier *ct, struct fill_buf **b)
{
	unsigned long long w0 = ct->wr.pool_wakes;
	int wake_at = -1, wakes = 0, yes;

	for (unsigned i = 0; i < FILL_BUFS_MAX; i++)
		b[i] = cachetier__buf_get(ct);
	CHECK(!cachetier__buf_room(ct, FILL_BUFS_MAX) && ct->wr.bufs_wake == 1,
	      "%u out: room %d, wake-up asked %d (not 0, 1)", ct->wr.bufs_out,
	      cachetier__buf_room(ct, FILL_BUFS_MAX), ct->wr.bufs_wake);
	for (unsigned i = FILL_BUFS_MAX; i-- > 0;) {
		unsigned long long w = ct->wr.pool_wakes;

		cachetier__buf_put(ct, b[i]);
		if (ct->wr.pool_wakes != w) {
			wakes++;
			wake_at = (int)ct->wr.bufs_out;
		}
	}
	printf("fillpool: %u given back from %u out: %d wake-ups, at %d out\n", FILL_BUFS_MAX,
	       FILL_BUFS_MAX, wakes, wake_at);
	CHECK(wakes == 1 && wake_at == (int)FILL_BUFS_RESUME - 1 && ct->wr.bufs_wake == 0,
	      "%d wake-ups, the first at %d out, asked %d after (want 1 at %u, 0)", wakes, wake_at,
	      ct->wr.bufs_wake, FILL_BUFS_RESUME - 1);
	for (unsigned i = 0; i < FILL_BUFS_RESUME; i++)
		b[i] = cachetier__buf_get(ct);
	yes = cachetier__buf_room(ct, FILL_BUFS_RESUME);
	CHECK(!yes && ct->wr.bufs_wake == 1,
	      "at %u out a paused sink's ask: %d, asked %d (not 0, 1)", ct->wr.bufs_out, yes,
	      ct->wr.bufs_wake);
	cachetier__buf_put(ct, b[FILL_BUFS_RESUME - 1]);
	yes = cachetier__buf_room(ct, FILL_BUFS_RESUME);
	CHECK(ct->wr.pool_wakes - w0 == 2 && yes && ct->wr.bufs_wake == 0,
	      "at %u out: %llu wake-ups in all, the ask %d, asked %d (want 2, 1, 0)",
	      ct->wr.bufs_out, ct->wr.pool_wakes - w0, yes, ct->wr.bufs_wake);
	for (unsigned i = FILL_BUFS_RESUME - 1; i-- > 0;)
		cachetier__buf_put(ct, b[i]);
	CHECK(ct->wr.pool_wakes - w0 == 2 && ct->wr.bufs_out == 0,
	      "all back: %llu wake-ups in all, %u out (want 2, 0)", ct->wr.pool_wakes - w0,
	      ct->wr.bufs_out);
}

int main(void)
{
	struct cachetier *ct = calloc(1, sizeof(*ct));
	struct fill_buf *b[NBUF + 1];
	uintptr_t ch[NBUF], kept[NBUF];
	int misaligned = 0, wrong = 0, outside = 0, wrong_room = 0, elig, nkept;
	long f0;

	if (!ct)
		return 1;
	disk_mutex_init(&ct->wr.bpool_lock, DISK_LOCK_CT_BPOOL);
	cachetier__buf_pool_init(ct);
	f0 = minflt();
	for (int i = 0; i < NBUF; i++) {
		b[i] = cachetier__buf_get(ct);
		if (!b[i])
			return 1;
		misaligned += (uintptr_t)b[i]->data % CT_DIO_ALIGN != 0;
		*b[i] = (struct fill_buf){.off = (uint64_t)i};
		memset(b[i]->data, i + 1, FILL_BUF_BYTES);
	}
	printf("fillpool: %d buffers touched, %ld minor faults\n", NBUF, minflt() - f0);
	CHECK(ct->wr.buf_chunks == NCHUNKS && ct->wr.bufs_out == NBUF,
	      "%llu chunks mapped and %u buffers out after %d taken, not %d and %d",
	      (unsigned long long)ct->wr.buf_chunks, ct->wr.bufs_out, NBUF, NCHUNKS, NBUF);
	CHECK(!cachetier__buf_room(ct, FILL_BUFS_MAX) && ct->wr.bufs_wake == 1,
	      "%d out: room for a prefetch's buffer %d, the writer's wake-up asked %d (not 0, 1)",
	      NBUF, cachetier__buf_room(ct, FILL_BUFS_MAX), ct->wr.bufs_wake);
	ct->wr.bufs_wake = 0;
	for (int i = 0; i < NBUF; i++) {
		wrong += b[i]->off != (uint64_t)i;
		for (size_t k = 0; k < FILL_BUF_BYTES; k += 512)
			wrong += (unsigned char)b[i]->data[k] != (unsigned char)(i + 1);
		wrong += (unsigned char)b[i]->data[FILL_BUF_BYTES - 1] != (unsigned char)(i + 1);
	}
	CHECK(misaligned == 0, "%d buffers' bytes not at a 4 KiB boundary", misaligned);
	CHECK(wrong == 0, "%d bytes or headers overwritten by another buffer", wrong);
	CHECK(chunks(b, NBUF, ch, NBUF) == NCHUNKS, "%d buffers in %d chunks of 2 MiB, not %d",
	      NBUF, chunks(b, NBUF, ch, NBUF), NCHUNKS);
	if (thp_on(b[0]->data, &elig))
		CHECK(elig == DISK_ARENA_HUGE, "the buffers' mapping is THPeligible %d, not %d",
		      elig, DISK_ARENA_HUGE);
	else
		printf("fillpool: no transparent huge pages here: eligibility not checked\n");

	for (int i = 0; i < NBUF; i++)
		cachetier__buf_put(ct, b[i]);
	CHECK(ct->wr.bpool.nfree == NBUF - 15,
	      "%u buffers kept after %d given back, not %d (the last chunk released)",
	      ct->wr.bpool.nfree, NBUF, NBUF - 15);

	CHECK(ct->wr.bufs_out == 0 && cachetier__buf_room(ct, FILL_BUFS_MAX) &&
		  ct->wr.bufs_wake == 0,
	      "all back: %u out, room %d, wake-up asked %d (not 0, 1, 0)", ct->wr.bufs_out,
	      cachetier__buf_room(ct, FILL_BUFS_MAX), ct->wr.bufs_wake);

	/* taken again: room for a prefetch's fresh buffer while fewer than
	 * FILL_BUFS_MAX are out, none from the FILL_BUFS_MAX-th on */
	nkept = chunks(b, NBUF - 15, kept, NBUF);
	for (int i = 0; i < NBUF - 15; i++) {
		int j = 0;

		b[i] = cachetier__buf_get(ct);
		if (!b[i])
			return 1;
		wrong_room +=
		    cachetier__buf_room(ct, FILL_BUFS_MAX) != (i + 1 < (int)FILL_BUFS_MAX);
		while (j < nkept && kept[j] != chunk_of(b[i]))
			j++;
		outside += j == nkept;
	}
	CHECK(outside == 0 && ct->wr.bpool.nfree == 0,
	      "%d of %d buffers taken again outside the %d chunks kept, %u left in the pool",
	      outside, NBUF - 15, nkept, ct->wr.bpool.nfree);
	CHECK(wrong_room == 0,
	      "%d of %d takes said room for a prefetch's buffer wrongly (room below %u out)",
	      wrong_room, NBUF - 15, FILL_BUFS_MAX);
	cachetier__buf_put(ct, b[0]);
	CHECK(cachetier__buf_room(ct, FILL_BUFS_MAX) == ((NBUF - 16) < (int)FILL_BUFS_MAX),
	      "one back, %d out: room %d", NBUF - 16, cachetier__buf_room(ct, FILL_BUFS_MAX));
	b[0] = cachetier__buf_get(ct);
	if (!b[0])
		return 1;
	b[NBUF - 15] = cachetier__buf_get(ct);
	CHECK(b[NBUF - 15] && ct->wr.bpool.nfree == 14 && ct->wr.buf_chunks == NCHUNKS + 1,
	      "one more buffer from an empty pool left %u in it and %llu chunks mapped, not 14 and "
	      "%d (a new chunk)",
	      ct->wr.bpool.nfree, (unsigned long long)ct->wr.buf_chunks, NCHUNKS + 1);
	for (int i = 0; i <= NBUF - 15; i++)
		cachetier__buf_put(ct, b[i]);
	CHECK(ct->wr.bufs_peak == NBUF, "the pool's peak: %u out, not %d", ct->wr.bufs_peak, NBUF);
	resume_mark(ct, b);
	cachetier__buf_pool_free(ct);
	CHECK(ct->wr.bpool.nfree == 0 && ct->wr.bpool.free == NULL, "%u buffers in the freed pool",
	      ct->wr.bpool.nfree);
	disk_mutex_destroy(&ct->wr.bpool_lock);
	free(ct);
	return check_summary("fillpool");
}
