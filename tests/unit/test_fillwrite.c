/*
 * test_fillwrite.c — the cache tier's fill writer (cachetier_write.c):
 * what it takes at one wake-up (a batch) it groups by fill, so a fill's
 * buffers that follow each other go to the data file with one pwritev and
 * its units are made valid once, after the last of them is written. Run
 * against the fault:// test store with async=1 (its reads on threads of
 * their own, as a remote store's I/O thread runs them), with the writer
 * held (cachetier_write_hold) while the fills' sinks push, so that a
 * batch's contents are known exactly.
 *
 * test_one_fill: a prefetch range of 7 units of 64 KiB (3 full buffers of
 * 128 KiB and a partial one, pushed with the run's end) piles up while the
 * writer is held: 4 buffers queued, no unit valid, nothing written. Let go,
 * the writer makes exactly 1 write, 1 pass making units valid (one a
 * buffer would be 4 and 4) and 1 take of the tier's lock, with no lock
 * fcntl under it (the units' write locks become read locks before it is
 * taken); the 7 units are valid and exact, and a tier
 * opened again on the directory over a store that fails every read serves
 * them exactly (their CRC32Cs, computed on the bytes written, check).
 *
 * test_two_fills: two such ranges of two objects, filled at once (their
 * buffers interleave in the pile as the store's threads push them): 8
 * buffers queued, then exactly 2 writes and 2 passes, one a fill, and 1
 * take of the tier's lock for both (one a batch, not one a fill).
 *
 * test_long: a range of 13 units in a chunk of 16 (6 full buffers and a
 * half one: 7 queued while the writer is held): let go, exactly 2 writes
 * (a pwritev takes at most CT_WRITEV_MAX, 4 buffers: 4 + 3; one, of all
 * 7, when it took 16), 1 pass making units valid, 1 take of the tier's
 * lock; the 13 units exact, and exact again from a tier opened over a
 * store that fails every read (the CRCs, computed after each write, check).
 *
 * test_kept: four fills of 3 units (a full buffer and half a buffer), one
 * at a time, the writer free: the sink keeps the full buffer for the
 * run's last bytes and pushes both with the run's end, so each fill is one
 * batch whatever the timing: exactly 4 writes, 4 passes, 4 lock takes,
 * no lock fcntl under the tier's lock.
 *
 * test_wakes: readers wake only for their own units. Object A's range
 * fill (7 units) is held by the fault store at 4 units (hold_at: DIR.hold),
 * B's (2 units) is not; with the writer held, a read of A's unit 5 and
 * one of B's unit 1 wait for them (2 readers waiting). Let go, the writer
 * makes A's units 0-3 and B's units valid in one batch: exactly 1 wake-up
 * sent (B's reader; A's is not woken for units it does not wait for, nor
 * for B's), A's reader still waiting. The hold removed, A's unit 5 lands:
 * exactly 2 wake-ups in all, both reads exact. A tier-wide broadcast (the
 * writer waking every waiting reader) sends 3 or more.
 *
 * test_cap: one prefetch fill of 97 buffers (12 MiB in pieces of 64 KiB,
 * a chunk of 16 MiB) with the writer held: its sink pauses (asks for
 * the writer's wake-up) with exactly FILL_BUFS_MAX (60) buffers queued
 * and 60 out of the pool, not FILL_WQ_MAX's 64; let go, the fill ends
 * exact in 4 chunks of the pool (cache_fill_pool_maps), not 5, with at
 * most 60 out at any time (the pool's peak count).
 *
 * test_alloc: a prefetch fill of 16 units (1 MiB, one run) held by the
 * fault store after its first 4 units: those 4 landed, the data file
 * already holds the run's blocks whole (1 MiB allocated, its size the
 * run's end: the run's first write allocated them, cachetier__run_alloc),
 * not just the 256 KiB written. Let go, the store cuts the read after
 * half the run: the run fails, and the file holds no block but the
 * valid units' (the blocks allocated ahead punched with the rest), whose
 * bytes are exact.
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "test_util.h"

#define UNIT  (64u * 1024)
#define CHUNK (8u * UNIT) /* 8 units a chunk */
#define RUN   (7u * UNIT) /* a range: 3 full buffers of 128 KiB and a half one */
#define NOBJ  2

static char tmpdir[256];
static unsigned char *data[NOBJ];
static size_t sizes[NOBJ];
static char keys[NOBJ][32];

/* fault://tmpdir/src?<query> */
static struct backend *store(const char *query)
{
	return fault_store(tmpdir, query);
}

/* A tier in tmpdir/<name> (1 GiB, chunks of CHUNK), no rules; the source
 * string is fixed so that two stores share one directory. */
static struct cachetier *tier(struct backend *be, const char *name)
{
	return tier_small(tmpdir, name, be, 1ull << 30, CHUNK);
}

static struct cachetier_obj *obj(struct cachetier *ct, struct backend *be, int i)
{
	return obj_open(ct, be, keys[i]);
}

/* Bytes [off, off + len) of object i read through o are exact. */
static int exact(struct cachetier_obj *o, int i, uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len);
	ssize_t n = cachetier_obj_pread(o, buf, len, off);
	int ok = n == (ssize_t)len && memcmp(buf, data[i] + off, len) == 0;

	free(buf);
	return ok;
}

/* nfill objects' first RUN bytes filled while the writer is held, then
 * let go: exact counts of its writes and passes, exact bytes, and the
 * same bytes from a tier opened again over a store that fails every read
 * (the stored CRC32Cs check). */
static void fills_held(const char *name, int nfill)
{
	struct backend *be = store("async=1");
	struct cachetier *ct = tier(be, name);
	struct cachetier_obj *o[NOBJ];
	struct cachetier_stats st;

	for (int i = 0; i < nfill; i++)
		o[i] = obj(ct, be, i);
	cachetier_write_hold(ct, 1);
	cachetier_wake_hold(ct, 1); /* the ranges start together */
	for (int i = 0; i < nfill; i++)
		CHECK(cachetier_obj_prefetch_range(o[i], 0, RUN, CACHETIER_PF_FIT) == 0,
		      "%s: range %d", name, i);
	cachetier_wake_hold(ct, 0);
	/* each run's last (half) buffer is pushed with its end: once every
	 * buffer is queued, every item of the fills is */
	count_reach(ct, TC_BUFS_QUEUED, 4u * (unsigned)nfill,
		    "buffers queued while the writer is held");
	stats(ct, &st);
	CHECK(st.fill_writes == 0 && st.fill_publishes == 0 && st.fills == 0 &&
		  st.fills_inflight == (uint64_t)nfill,
	      "%s: while held: %llu writes, %llu passes, %llu fills, %llu in flight", name,
	      (unsigned long long)st.fill_writes, (unsigned long long)st.fill_publishes,
	      (unsigned long long)st.fills, (unsigned long long)st.fills_inflight);
	for (int i = 0; i < nfill; i++)
		CHECK(cachetier_obj_cached_bytes(o[i]) == 0,
		      "%s: object %d: %llu bytes valid before any was written", name, i,
		      (unsigned long long)cachetier_obj_cached_bytes(o[i]));
	cachetier_write_hold(ct, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "fills ended after the hold");
	/* the writer stores its lock takes after the batch that ended the fills */
	count_reach(ct, TC_WRITER_LOCKS, 1, "the writer's batch counted");
	stats(ct, &st);
	printf("%s: %d fills of 7 units: writes %llu, passes making units valid %llu, the "
	       "writer's lock takes %llu, lock fcntls under it %llu, fills %llu\n",
	       name, nfill, (unsigned long long)st.fill_writes,
	       (unsigned long long)st.fill_publishes, (unsigned long long)st.fill_writer_locks,
	       (unsigned long long)st.fill_locked_calls, (unsigned long long)st.fills);
	CHECK(st.fill_writes == (uint64_t)nfill,
	      "%s: %llu writes, want %d (one a fill: its 4 buffers with one pwritev)", name,
	      (unsigned long long)st.fill_writes, nfill);
	CHECK(st.fill_publishes == (uint64_t)nfill,
	      "%s: %llu passes making units valid, want %d (one a fill)", name,
	      (unsigned long long)st.fill_publishes, nfill);
	CHECK(st.fill_writer_locks == 1,
	      "%s: the writer took the tier's lock %llu times, want 1 (one a batch: every fill's "
	      "units made valid, its timing noted and its end under one)",
	      name, (unsigned long long)st.fill_writer_locks);
	CHECK(st.fill_locked_calls == 0,
	      "%s: %llu lock fcntls under the tier's lock, want 0 (made before it is taken)", name,
	      (unsigned long long)st.fill_locked_calls);
	CHECK(st.fills == (uint64_t)nfill && st.fill_errors == 0 && st.fill_bufs_queued == 0,
	      "%s: fills %llu, errors %llu, buffers queued %llu", name,
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors,
	      (unsigned long long)st.fill_bufs_queued);
	for (int i = 0; i < nfill; i++) {
		CHECK(cachetier_obj_cached_bytes(o[i]) == RUN, "%s: object %d: %llu bytes valid",
		      name, i, (unsigned long long)cachetier_obj_cached_bytes(o[i]));
		CHECK(exact(o[i], i, 0, RUN), "%s: object %d's 7 units exact", name, i);
		cachetier_obj_unref(o[i]);
	}
	stats(ct, &st);
	CHECK(st.bytes_fetched == (uint64_t)nfill * RUN, "%s: %llu bytes fetched", name,
	      (unsigned long long)st.bytes_fetched);
	tier_end(ct, be, NULL);

	/* again, over a store that fails every read: the units and their
	 * CRC32Cs came from the bytes written */
	be = store("fail_every=1&fail_after_bytes=1");
	ct = tier(be, name);
	for (int i = 0; i < nfill; i++) {
		o[i] = obj(ct, be, i);
		CHECK(exact(o[i], i, 0, RUN), "%s, reopened: object %d's 7 units exact", name, i);
		cachetier_obj_unref(o[i]);
	}
	stats(ct, &st);
	CHECK(st.bytes_fetched == 0 && st.units_corrupt == 0,
	      "%s, reopened: %llu bytes fetched, %llu units corrupt", name,
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.units_corrupt);
	tier_end(ct, be, NULL);
}

#define LONG_UNITS 13u /* test_long's range: 6 full buffers and a half one */

static void test_long(void)
{
	static const char key[] = "long.tar";
	size_t size = 20u * UNIT + 5;
	uint64_t s = 77;
	unsigned char *d = src_object(tmpdir, key, size, &s);
	struct cachetier_config cc;
	struct backend *be = store("async=1");
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st;
	char dir[600];
	unsigned char *buf = malloc(LONG_UNITS * UNIT);

	snprintf(dir, sizeof(dir), "%s/long", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, 2 * CHUNK); /* 16 units a chunk */
	cc.readahead_max_bytes = 2 * CHUNK;
	cc.small_fills = 1;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, key);
	cachetier_write_hold(ct, 1);
	cachetier_wake_hold(ct, 1);
	CHECK(cachetier_obj_prefetch_range(o, 0, LONG_UNITS * UNIT, CACHETIER_PF_FIT) == 0, "%s",
	      "long: range");
	cachetier_wake_hold(ct, 0);
	count_reach(ct, TC_BUFS_QUEUED, 7, "long: buffers queued while the writer is held");
	stats(ct, &st);
	CHECK(st.fill_writes == 0, "long: %llu writes while held",
	      (unsigned long long)st.fill_writes);
	cachetier_write_hold(ct, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "long: the fill ended after the hold");
	count_reach(ct, TC_WRITER_LOCKS, 1, "long: the writer's batch counted");
	stats(ct, &st);
	printf("long: a fill of %u units, 7 buffers in one batch: writes %llu, passes %llu, the "
	       "writer's lock takes %llu\n",
	       LONG_UNITS, (unsigned long long)st.fill_writes,
	       (unsigned long long)st.fill_publishes, (unsigned long long)st.fill_writer_locks);
	CHECK(st.fill_writes == 2,
	      "long: %llu writes, want 2 (at most 4 buffers a pwritev: 4 and 3)",
	      (unsigned long long)st.fill_writes);
	CHECK(st.fill_publishes == 1 && st.fill_writer_locks == 1 && st.fills == 1 &&
		  st.fill_errors == 0,
	      "long: %llu passes, %llu lock takes, %llu fills, %llu errors, want 1, 1, 1, 0",
	      (unsigned long long)st.fill_publishes, (unsigned long long)st.fill_writer_locks,
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors);
	CHECK(cachetier_obj_cached_bytes(o) == LONG_UNITS * UNIT, "long: %llu bytes valid",
	      (unsigned long long)cachetier_obj_cached_bytes(o));
	CHECK(buf && cachetier_obj_pread(o, buf, LONG_UNITS * UNIT, 0) == LONG_UNITS * UNIT &&
		  memcmp(buf, d, LONG_UNITS * UNIT) == 0,
	      "%s", "long: the 13 units exact");
	tier_end(ct, be, o, NULL);

	be = store("fail_every=1&fail_after_bytes=1");
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, key);
	if (buf)
		memset(buf, 0, LONG_UNITS * UNIT);
	CHECK(buf && cachetier_obj_pread(o, buf, LONG_UNITS * UNIT, 0) == LONG_UNITS * UNIT &&
		  memcmp(buf, d, LONG_UNITS * UNIT) == 0,
	      "%s", "long, reopened: the 13 units exact");
	stats(ct, &st);
	CHECK(st.bytes_fetched == 0 && st.units_corrupt == 0,
	      "long, reopened: %llu bytes fetched, %llu units corrupt",
	      (unsigned long long)st.bytes_fetched, (unsigned long long)st.units_corrupt);
	tier_end(ct, be, o, NULL);
	free(buf);
	free(d);
}

/* Fills of 3 units (a full buffer, then half a buffer: the sink keeps the
 * full one for the run's last bytes and pushes both with the run's end),
 * one at a time with the writer free: each is one batch of the writer
 * whatever the timing, so exactly 1 write, 1 pass and 1 lock take a fill.
 * A sink that pushes the full buffer at once lets the writer take it
 * alone (it is idle), for 2 writes and 2 passes a fill. */
static void test_kept(void)
{
	struct backend *be = store("async=1");
	struct cachetier *ct = tier(be, "c-kept");
	struct cachetier_stats st;
	int n = 0;

	for (int i = 0; i < NOBJ; i++) {
		struct cachetier_obj *o = obj(ct, be, i);

		for (uint64_t off = 0; off < 6 * UNIT; off += 3 * UNIT, n++) {
			CHECK(cachetier_obj_prefetch_range(o, off, 3 * UNIT, CACHETIER_PF_FIT) == 0,
			      "kept: range %d", n);
			count_reach(ct, TC_FILLS_INFLIGHT, 0, "kept: the fill ended");
			CHECK(exact(o, i, off, 3 * UNIT), "kept: object %d at %llu exact", i,
			      (unsigned long long)off);
		}
		cachetier_obj_unref(o);
	}
	count_reach(ct, TC_WRITER_LOCKS, (uint64_t)n, "kept: the writer's batches counted");
	stats(ct, &st);
	printf("kept: %d fills of 3 units: writes %llu, passes %llu, the writer's lock takes "
	       "%llu, fills %llu\n",
	       n, (unsigned long long)st.fill_writes, (unsigned long long)st.fill_publishes,
	       (unsigned long long)st.fill_writer_locks, (unsigned long long)st.fills);
	CHECK(st.fills == (uint64_t)n && st.fill_errors == 0 && st.bytes_fetched == n * 3ull * UNIT,
	      "kept: fills %llu, errors %llu, bytes fetched %llu", (unsigned long long)st.fills,
	      (unsigned long long)st.fill_errors, (unsigned long long)st.bytes_fetched);
	CHECK(st.fill_writes == (uint64_t)n && st.fill_publishes == (uint64_t)n &&
		  st.fill_writer_locks == (uint64_t)n && st.fill_locked_calls == 0,
	      "kept: %llu writes, %llu passes, %llu lock takes, want %d each (one batch a fill); "
	      "%llu lock fcntls under the lock, want 0",
	      (unsigned long long)st.fill_writes, (unsigned long long)st.fill_publishes,
	      (unsigned long long)st.fill_writer_locks, n,
	      (unsigned long long)st.fill_locked_calls);
	tier_end(ct, be, NULL);
}

/* A read of 1,000 bytes of one unit on a thread of its own: a probe (no
 * readahead, fills only the units it reads), so it waits for the unit's
 * fill in flight and nothing else. */
struct reader {
	pthread_t t;
	struct cachetier_obj *o;
	int i;
	uint64_t off;
	int ok;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	unsigned char buf[1000];

	r->ok = cachetier_obj_pread_probe(r->o, buf, sizeof(buf), r->off) == (ssize_t)sizeof(buf) &&
		memcmp(buf, data[r->i] + r->off, sizeof(buf)) == 0;
	return NULL;
}

static void test_wakes(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o[NOBJ];
	struct cachetier_stats st;
	struct reader r[NOBJ];

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = store("async=1&hold_at=262144"); /* 4 units: A's 2 full buffers */
	ct = tier(be, "c-wakes");
	for (int i = 0; i < NOBJ; i++)
		o[i] = obj(ct, be, i);
	cachetier_write_hold(ct, 1);
	cachetier_wake_hold(ct, 1);
	CHECK(cachetier_obj_prefetch_range(o[0], 0, RUN, CACHETIER_PF_FIT) == 0, "wakes: range A");
	CHECK(cachetier_obj_prefetch_range(o[1], 0, 2 * UNIT, CACHETIER_PF_FIT) == 0,
	      "wakes: range B");
	cachetier_wake_hold(ct, 0);
	/* A's 2 buffers before the hold and B's 1: both fills claimed their units */
	count_reach(ct, TC_BUFS_QUEUED, 3, "wakes: buffers queued while the writer is held");
	r[0] = (struct reader){.o = o[0], .i = 0, .off = 5 * UNIT + 100};
	r[1] = (struct reader){.o = o[1], .i = 1, .off = UNIT + 100};
	for (int i = 0; i < NOBJ; i++)
		CHECK(pthread_create(&r[i].t, NULL, reader_main, &r[i]) == 0, "wakes: reader %d",
		      i);
	count_reach(ct, TC_UNIT_WAITERS, 2, "wakes: both readers wait");
	stats(ct, &st);
	CHECK(st.unit_waiter_wakes == 0, "wakes: %llu wake-ups before any unit landed",
	      (unsigned long long)st.unit_waiter_wakes);
	cachetier_write_hold(ct, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "wakes: B's fill ended");
	pthread_join(r[1].t, NULL);
	CHECK(r[1].ok, "wakes: B's unit 1 exact");
	count_reach(ct, TC_UNIT_WAITERS, 1, "wakes: A's reader waits on");
	stats(ct, &st);
	printf("wakes: A's units 0-3 and B's landed with A's reader waiting for unit 5: wake-ups "
	       "%llu, readers waiting %llu\n",
	       (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.unit_waiters);
	CHECK(st.unit_waiter_wakes == 1,
	      "wakes: %llu wake-ups, want 1 (B's reader; A's waits for unit 5, which did not land)",
	      (unsigned long long)st.unit_waiter_wakes);
	CHECK(cachetier_obj_cached_bytes(o[0]) == 4 * UNIT,
	      "wakes: A's valid bytes %llu, want its 4 units before the hold",
	      (unsigned long long)cachetier_obj_cached_bytes(o[0]));
	flag_file(gate, 0);
	pthread_join(r[0].t, NULL);
	CHECK(r[0].ok, "wakes: A's unit 5 exact");
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "wakes: A's fill ended");
	stats(ct, &st);
	printf("wakes: after A's unit 5 landed: wake-ups %llu, readers waiting %llu\n",
	       (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.unit_waiters);
	CHECK(st.unit_waiter_wakes == 2 && st.unit_waiters == 0,
	      "wakes: %llu wake-ups, %llu waiting, want 2 and 0 (one a reader)",
	      (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.unit_waiters);
	for (int i = 0; i < NOBJ; i++)
		cachetier_obj_unref(o[i]);
	tier_end(ct, be, NULL);
}

/* test_cap: a prefetch fill takes a fresh sink buffer only while fewer
 * than FILL_BUFS_MAX (60) are out of the pool. */
#define CAP_BYTES (12u * 1024u * 1024u + 5u) /* 97 buffers, one fill */

static void test_cap(void)
{
	static const char key[] = "cap.tar";
	uint64_t s = 91;
	unsigned char *d = src_object(tmpdir, key, CAP_BYTES, &s);
	struct cachetier_config cc;
	struct backend *be = store("async=1&piece=65536");
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st;
	char dir[600];
	unsigned char *buf = malloc(CAP_BYTES);
	int asked = 0;

	snprintf(dir, sizeof(dir), "%s/cap", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, 16u * 1024u * 1024u); /* the object: one chunk */
	cc.readahead_max_bytes = 16u * 1024u * 1024u;
	cc.small_fills = 1;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, key);
	cachetier_write_hold(ct, 1);
	CHECK(cachetier_obj_prefetch_range(o, 0, CAP_BYTES, CACHETIER_PF_FIT) == 0, "%s",
	      "cap: range");
	/* the sink's first refused piece asks for the writer's wake-up: a poll
	 * of that flag, at most 60 s */
	for (int i = 0; i < 60000 && !(asked = atomic_load(&ct->wr.bufs_wake)); i++)
		usleep(1000);
	printf("cap: the writer held, a fill of 97 buffers paused with %u queued, %u out of the "
	       "pool, in %llu chunks\n",
	       atomic_load(&ct->wr.wq_bufs), atomic_load(&ct->wr.bufs_out),
	       (unsigned long long)atomic_load(&ct->wr.buf_chunks));
	CHECK(asked && atomic_load(&ct->wr.wq_bufs) == FILL_BUFS_MAX &&
		  atomic_load(&ct->wr.bufs_out) == FILL_BUFS_MAX,
	      "cap: paused %d with %u buffers queued and %u out, want 1, %u and %u (FILL_WQ_MAX "
	      "alone: 64 and 64)",
	      asked, atomic_load(&ct->wr.wq_bufs), atomic_load(&ct->wr.bufs_out), FILL_BUFS_MAX,
	      FILL_BUFS_MAX);
	cachetier_write_hold(ct, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "cap: the fill ended after the hold");
	stats(ct, &st);
	CHECK(st.fills == 1 && st.fill_errors == 0 && st.fill_pool_maps == 4 &&
		  atomic_load(&ct->wr.bufs_peak) == FILL_BUFS_MAX,
	      "cap: %llu fills, %llu errors, %llu chunks of 2 MiB mapped, at most %u buffers out, "
	      "want 1, 0, 4 (60 buffers, 15 a chunk), %u",
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors,
	      (unsigned long long)st.fill_pool_maps, atomic_load(&ct->wr.bufs_peak), FILL_BUFS_MAX);
	CHECK(buf && cachetier_obj_pread(o, buf, CAP_BYTES, 0) == CAP_BYTES &&
		  memcmp(buf, d, CAP_BYTES) == 0,
	      "%s", "cap: the 12 MiB exact");
	tier_end(ct, be, o, NULL);
	free(buf);
	free(d);
}

/* test_alloc: a run's blocks allocated at its first write, and punched
 * with the rest when it fails. */
#define ALLOC_RUN (16u * UNIT) /* one chunk, one run: past ALLOC_MIN (512 KiB) */

static void test_alloc(void)
{
	static const char key[] = "alloc.tar";
	uint64_t s = 53;
	size_t size = ALLOC_RUN + 777;
	unsigned char *d = src_object(tmpdir, key, size, &s);
	struct cachetier_config cc;
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct stat fs;
	char dir[600], gate[sizeof(tmpdir) + 16];
	unsigned char *buf = malloc(ALLOC_RUN);
	uint64_t valid = 0;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	/* the bytes before unit 4, a hold, then half the run and -EIO */
	be = store("async=1&hold_at=262144&cut_every=1");
	snprintf(dir, sizeof(dir), "%s/alloc", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, ALLOC_RUN);
	cc.readahead_max_bytes = ALLOC_RUN;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, key);
	CHECK(cachetier_obj_prefetch_range(o, 0, ALLOC_RUN, CACHETIER_PF_FIT) == 0, "%s",
	      "alloc: range");
	/* the store's poll at the hold hands the 4 units over: a poll of
	 * their state, at most 60 s */
	for (int i = 0; i < 60000 && cachetier_obj_cached_bytes(o) < 4 * UNIT; i++)
		usleep(1000);
	CHECK(cachetier_obj_cached_bytes(o) == 4 * UNIT, "alloc: %llu bytes valid at the hold",
	      (unsigned long long)cachetier_obj_cached_bytes(o));
	CHECK(fstat(o->file->datafd, &fs) == 0, "%s", "alloc: fstat");
	printf("alloc: at the hold, 4 units written: the data file's blocks %llu bytes, its size "
	       "%llu\n",
	       (unsigned long long)fs.st_blocks * 512, (unsigned long long)fs.st_size);
	CHECK((uint64_t)fs.st_blocks * 512 == ALLOC_RUN,
	      "alloc: the data file holds %llu bytes of blocks, want %u (the run's, allocated "
	      "at its first write; 262144 without)",
	      (unsigned long long)fs.st_blocks * 512, ALLOC_RUN);
	CHECK((uint64_t)fs.st_size == ALLOC_RUN, "alloc: the data file's size %llu, want %u",
	      (unsigned long long)fs.st_size, ALLOC_RUN);
	flag_file(gate, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "alloc: the fill ended after the hold");
	valid = cachetier_obj_cached_bytes(o);
	CHECK(fstat(o->file->datafd, &fs) == 0, "%s", "alloc: fstat after");
	printf("alloc: the run cut after half: %llu bytes valid, the data file's blocks %llu "
	       "bytes\n",
	       (unsigned long long)valid, (unsigned long long)fs.st_blocks * 512);
	CHECK(valid == ALLOC_RUN / 2,
	      "alloc: %llu bytes valid after the cut, want %u (the units before it)",
	      (unsigned long long)valid, ALLOC_RUN / 2);
	CHECK((uint64_t)fs.st_blocks * 512 == valid,
	      "alloc: the data file holds %llu bytes of blocks, want the valid units' %llu (the "
	      "blocks allocated ahead punched with the failed run)",
	      (unsigned long long)fs.st_blocks * 512, (unsigned long long)valid);
	CHECK(buf && valid <= ALLOC_RUN &&
		  cachetier_obj_pread(o, buf, valid, 0) == (ssize_t)valid &&
		  memcmp(buf, d, valid) == 0,
	      "%s", "alloc: the valid units exact");
	tier_end(ct, be, o, NULL);
	free(buf);
	free(d);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "fwr", 20261129u); /* fixed in CI */
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < NOBJ; i++) {
		sizes[i] = CHUNK + 1 + (size_t)(rnd(&s) % CHUNK);
		snprintf(keys[i], sizeof(keys[i]), "obj-%d.tar", i);
		data[i] = src_object(tmpdir, keys[i], sizes[i], &s);
	}

	fills_held("c-one", 1);
	fills_held("c-two", 2);
	test_long();
	test_kept();
	test_wakes();
	test_cap();
	test_alloc();

	for (int i = 0; i < NOBJ; i++)
		free(data[i]);
	return test_end("fillwrite", tmpdir, seed);
}
