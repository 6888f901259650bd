/*
 * test_objlock.c — the unit store under its objects' locks (issue 36 #1;
 * cachetier_run.c, cachetier_write.c, cachetier_read.c): readers wait for
 * units on their object's list, under the object's lock (ct_file.lock), and
 * the fill writer commits units as they land under that lock alone
 * (cachetier__run_landed: no ct->lock).
 * Against the fault:// test store with async=1 (its reads on threads of
 * their own, as a remote store's I/O thread runs them, so fills end on the
 * tier's fill writer).
 *
 * test_land_wake: a prefetch range of 7 units of 64 KiB whose read the
 * store holds after 4 units (hold_at: 2 full buffers of 128 KiB), the
 * writer held too (cachetier_write_hold); a probe of unit 2 on a thread
 * of its own waits for it. The writer let go writes the 2 buffers (units
 * 0-3 land; the run goes on) and wakes the reader, which returns unit 2's
 * exact bytes while the fill is still held in flight with no request
 * counted (woken by its unit's landing, not by the fill's end); the
 * reader's thread took ct->lock exactly once (its begin; the return from
 * its wait takes it again, counted by the tier as a wait, and commits the
 * unit there); 1 wake-up sent. The hold removed, the run ends: the fill
 * writer took ct->lock exactly once for the whole run (its end), where
 * the writer before took it at each batch that landed units (2 here: the
 * mid-run batch, the end); the 7 units exact.
 *
 * test_quiet_wake: a probe of unit 5 of object A waits while A's range
 * fill is held by the store after unit 3; B's chunks asked as PF_FIT
 * ranges in a cache of 12 units (A's 7 reserved) do not fit, and each
 * given back wakes every waiting reader (cachetier__units_wake): A's
 * reader, woken for none of its units, waits on under its object's lock
 * with no take of ct->lock (every such wake-up counted in
 * unit_waits_quiet, at least 1: B's chunks are asked one at a time until
 * one reached it); the hold removed, unit 5's landing is exactly 1 more
 * wake-up, not a quiet one, and the reader returns unit 5's exact bytes,
 * its thread having taken ct->lock once. The store before returned to
 * ct->lock at every wake-up (unit_waits_quiet 0 fails the check).
 *
 * test_commit_nolock: the fill writer commits units as they land, under
 * their object's lock alone (issue 36 #1: cachetier__run_landed commits,
 * unit_commit; no ct->lock). Object B's unit 7 read first (a probe: its
 * read under ct->lock arms B's units for reads without it, fast_ok; a
 * second probe of it takes no ct->lock), then a PF_FIT range of B's units
 * 0-6 whose read the store holds after unit 3: once units 0-3 landed, 4
 * planned reads (probes, no readahead) of units 0, 1, 2 and 3 take ct->lock
 * 0 times in all (4 hits, reads' takes 0) while the run is
 * still in flight and nothing took ct->lock to commit them (the writer's
 * takes 0 from the range's start); exact bytes. The store before committed
 * a landed unit at its first reader's take of ct->lock: 4 takes. The hold removed, the run ends
 * with 1 take of the writer (the fill's end), units 4-6 exact. Needs the data files' fanotify watch
 * (trusted as filled; inotify's fills are CRC-checked at their first read,
 * under ct->lock): said and not checked on a kernel before 5.13.
 *
 * test_threads (seeded, TEST_SEED; the TSan stage runs it, tests/run.sh):
 * 4 reader threads over 4 objects of 5-8 chunks (seeded ranges of 1 byte
 * to a chunk, half read through read_begin's fd, half probes) and a
 * thread asking seeded prefetch ranges, in a cache of 6 chunks (a fifth of
 * the objects, so fills evict), the store's pieces of 16 KiB (runs land
 * over several of the writer's batches, so readers find units committed
 * mid-run): every read exact, fills and evictions made, and the close's
 * check in every debug build (cachetier__run_check: no unit left claimed,
 * queued, no pin left, every idle unit counted once). Prints the
 * takes of ct->lock a read (the readers' threads) and a fill run (the
 * writer's). A unit state, a commit's field or a reader's wait list moved
 * without its lock is a TSan report, or wrong bytes.
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
#include "check.h"
#include "test_util.h"

#define UNIT	 (64u * 1024)
#define CHUNK	 (8u * UNIT) /* 8 units a chunk */
#define RUN	 (7u * UNIT) /* a range: 3 full buffers of 128 KiB and a half one */
#define NOBJ	 4
#define READERS	 4
#define READS	 150 /* each reader's */
#define PREFETCH 60  /* the prefetching thread's ranges */

static char tmpdir[256];
static unsigned char *data[NOBJ];
static size_t sizes[NOBJ];
static char keys[NOBJ][32];

/* A tier in tmpdir/<name>: a cache of size bytes, chunks of CHUNK, 2 fill
 * threads, no rules (slots: 3). */
static struct cachetier *tier(struct backend *be, const char *name, uint64_t size)
{
	return tier_small(tmpdir, name, be, size, CHUNK);
}

/* A probe of 1,000 bytes of object i at off on a thread of its own (no
 * readahead: it fills only the units it reads), and its thread's takes of
 * ct->lock. */
struct probe {
	pthread_t t;
	struct cachetier_obj *o;
	int i;
	uint64_t off;
	int ok;
	uint64_t takes;
};

static void *probe_main(void *arg)
{
	struct probe *p = arg;
	unsigned char buf[1000];
	uint64_t t0 = cachetier_lock_takes();

	p->ok = cachetier_obj_pread_probe(p->o, buf, sizeof(buf), p->off) == (ssize_t)sizeof(buf) &&
		memcmp(buf, data[p->i] + p->off, sizeof(buf)) == 0;
	p->takes = cachetier_lock_takes() - t0;
	return NULL;
}

static void test_land_wake(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st0, st;
	struct probe p;
	uint64_t wl0;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* 4 units: 2 full buffers */
	ct = tier(be, "c-land", 1ull << 30);
	o = obj_open(ct, be, keys[0]);
	cachetier_write_hold(ct, 1);
	CHECK(cachetier_obj_prefetch_range(o, 0, RUN, CACHETIER_PF_FIT) == 0, "land: range");
	count_reach(ct, TC_BUFS_QUEUED, 2, "land: the 2 buffers before the hold queued");
	p = (struct probe){.o = o, .i = 0, .off = 2 * UNIT + 100};
	CHECK(pthread_create(&p.t, NULL, probe_main, &p) == 0, "land: reader");
	count_reach(ct, TC_UNIT_WAITERS, 1, "land: the reader waits for unit 2");
	stats(ct, &st0);
	wl0 = st0.fill_writer_locks;
	cachetier_write_hold(ct, 0);
	pthread_join(p.t, NULL);
	stats(ct, &st);
	printf("land: unit 2 read while its run is held after unit 3: %s, reader's takes of "
	       "ct->lock %llu, wake-ups %llu, fills %llu, in flight %llu, valid in the state file "
	       "%llu bytes\n",
	       p.ok ? "exact" : "WRONG", (unsigned long long)p.takes,
	       (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.fills,
	       (unsigned long long)st.fills_inflight,
	       (unsigned long long)cachetier_obj_cached_bytes(o));
	CHECK(p.ok, "land: unit 2 exact");
	CHECK(st.fills_inflight == 1 && st.fills == 0,
	      "land: the reader returned with %llu fills in flight and %llu requests counted, "
	      "want 1 and 0 (woken by its unit's landing, not by the fill's end)",
	      (unsigned long long)st.fills_inflight, (unsigned long long)st.fills);
	CHECK(p.takes == 1,
	      "land: the reader's thread took ct->lock %llu times, want 1 (its begin; its wait "
	      "on the object's lock)",
	      (unsigned long long)p.takes);
	CHECK(st.unit_waiter_wakes == 1 && st.unit_waiters == 0,
	      "land: %llu wake-ups, %llu waiting, want 1 and 0",
	      (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.unit_waiters);
	CHECK(cachetier_obj_cached_bytes(o) == 4 * UNIT,
	      "land: %llu bytes valid in the state file, want the 4 units landed",
	      (unsigned long long)cachetier_obj_cached_bytes(o));
	flag_file(gate, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "land: the fill ended");
	stats(ct, &st);
	printf("land: the run's end: the fill writer took ct->lock %llu times for the run (2 "
	       "batches), fills %llu, errors %llu\n",
	       (unsigned long long)(st.fill_writer_locks - wl0), (unsigned long long)st.fills,
	       (unsigned long long)st.fill_errors);
	CHECK(st.fill_writer_locks - wl0 == 1,
	      "land: the fill writer took ct->lock %llu times for a run of 2 batches, want 1 (its "
	      "end; the landing takes the object's lock alone)",
	      (unsigned long long)(st.fill_writer_locks - wl0));
	CHECK(st.fills == 1 && st.fill_errors == 0, "land: fills %llu, errors %llu",
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors);
	CHECK(obj_exact(o, data[0], 0, RUN), "land: the 7 units exact");
	tier_end(ct, be, o, NULL);
}

/* A reader waiting for a unit being filled, woken by what changed none of
 * its units (cachetier__units_wake: here a prefetch range of another object
 * that does not fit, its claimed units given back), waits on under its
 * object's lock with no take of ct->lock (unit_waits_quiet), and returns
 * only at its unit's landing. */
static void test_quiet_wake(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *a, *b;
	struct cachetier_stats st;
	struct probe p;
	uint64_t quiet = 0, wakes = 0, tries = 0;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* 4 units: 2 full buffers */
	ct = tier(be, "c-quiet", 12 * (uint64_t)UNIT);	    /* A's run fits, B's chunk not */
	a = obj_open(ct, be, keys[0]);
	b = obj_open(ct, be, keys[1]);
	CHECK(cachetier_obj_prefetch_range(a, 0, RUN, CACHETIER_PF_FIT) == 0, "quiet: A's range");
	count_reach(ct, TC_FILLS_INFLIGHT, 1, "quiet: A's fill in flight");
	p = (struct probe){.o = a, .i = 0, .off = 5 * UNIT + 100};
	CHECK(pthread_create(&p.t, NULL, probe_main, &p) == 0, "quiet: reader");
	count_reach(ct, TC_UNIT_WAITERS, 1, "quiet: the reader waits for unit 5");
	/* B's chunks, one at a time, each unfit (A's run reserved, 12 units
	 * of room): each given back wakes every waiting reader. Repeated until
	 * a wake-up reached the reader (one that came while it looked again
	 * after its 1 s bound would not) */
	for (uint64_t c = 0; c < 5 && quiet == 0; c++, tries++) {
		uint64_t unfit0;

		stats(ct, &st);
		unfit0 = st.unfit_bytes;
		CHECK(cachetier_obj_prefetch_range(b, c * CHUNK, CHUNK, CACHETIER_PF_FIT) == 0,
		      "quiet: B's range %llu", (unsigned long long)c);
		for (int i = 0; i < 6000 && st.unfit_bytes == unfit0; i++) {
			usleep(10000);
			stats(ct, &st);
		}
		CHECK(st.unfit_bytes == unfit0 + CHUNK, "quiet: B's chunk %llu unfit: %llu bytes",
		      (unsigned long long)c, (unsigned long long)(st.unfit_bytes - unfit0));
		count_reach(ct, TC_UNIT_WAITERS, 1, "quiet: the reader waits on");
		stats(ct, &st);
		quiet = st.unit_waits_quiet;
		wakes = st.unit_waiter_wakes;
	}
	printf("quiet: %llu of B's chunks given back with A's reader waiting: wake-ups %llu, "
	       "waited on quietly %llu, fills %llu\n",
	       (unsigned long long)tries, (unsigned long long)wakes, (unsigned long long)quiet,
	       (unsigned long long)st.fills);
	CHECK(quiet >= 1 && quiet == wakes && st.fills == 0,
	      "quiet: %llu wake-ups, %llu of them waited on quietly, want every one (and at "
	      "least 1); %llu fills",
	      (unsigned long long)wakes, (unsigned long long)quiet, (unsigned long long)st.fills);
	flag_file(gate, 0);
	pthread_join(p.t, NULL);
	stats(ct, &st);
	printf("quiet: unit 5 landed: wake-ups %llu, quiet %llu, the reader's takes of ct->lock "
	       "%llu\n",
	       (unsigned long long)st.unit_waiter_wakes, (unsigned long long)st.unit_waits_quiet,
	       (unsigned long long)p.takes);
	CHECK(p.ok && p.takes == 1,
	      "quiet: unit 5 %s, the reader's thread took ct->lock %llu "
	      "times, want 1",
	      p.ok ? "exact" : "WRONG", (unsigned long long)p.takes);
	CHECK(st.unit_waiter_wakes == wakes + 1 && st.unit_waits_quiet == quiet,
	      "quiet: the landing: %llu wake-ups more, %llu quiet more, want 1 and 0",
	      (unsigned long long)(st.unit_waiter_wakes - wakes),
	      (unsigned long long)(st.unit_waits_quiet - quiet));
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "quiet: A's fill ended");
	tier_end(ct, be, b, a, NULL);
}

/* Probe 1,000 bytes of object i at off in this thread: exact? */
static int probe_exact(struct cachetier_obj *o, int i, uint64_t off)
{
	unsigned char buf[1000];

	return cachetier_obj_pread_probe(o, buf, sizeof(buf), off) == (ssize_t)sizeof(buf) &&
	       memcmp(buf, data[i] + off, sizeof(buf)) == 0;
}

static void test_commit_nolock(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st0, st;
	uint64_t t0, takes, wl0, rl0, hits0;
	int ok = 1, fan;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* units 0-3: 2 full buffers */
	ct = tier(be, "c-commit", 1ull << 30);
	o = obj_open(ct, be, keys[1]);
	/* unit 7 (past the hold): its read under ct->lock arms B's units */
	CHECK(probe_exact(o, 1, 7 * UNIT + 100), "commit: unit 7 exact");
	fills_idle(ct);
	/* its fill's end: the writer's 1 take of ct->lock (counted after its batch) */
	count_reach(ct, TC_WRITER_LOCKS, 1, "commit: unit 7's fill ended on the writer");
	stats(ct, &st0);
	fan = st0.watch_own == 1;
	t0 = cachetier_lock_takes();
	CHECK(probe_exact(o, 1, 7 * UNIT + 200), "commit: unit 7 exact again");
	takes = cachetier_lock_takes() - t0;
	stats(ct, &st);
	if (!fan) {
		printf("commit: no fanotify watch here (inotify: a fill's units are checked at "
		       "their first read, under ct->lock): the counts not checked\n");
	} else {
		CHECK(takes == 0 && st.read_locks == st0.read_locks && st.hits == st0.hits + 1,
		      "commit: a second read of unit 7 took ct->lock %llu times (reads' takes "
		      "%llu), hits %llu, want 0, 0 and 1",
		      (unsigned long long)takes,
		      (unsigned long long)(st.read_locks - st0.read_locks),
		      (unsigned long long)(st.hits - st0.hits));
	}

	wl0 = st.fill_writer_locks;
	rl0 = st.read_locks;
	hits0 = st.hits;
	CHECK(cachetier_obj_prefetch_range(o, 0, RUN, CACHETIER_PF_FIT) == 0, "commit: range");
	for (int i = 0; i < 6000 && cachetier_obj_cached_bytes(o) != 5 * UNIT; i++)
		usleep(10000); /* units 0-3 and 7 valid in the state file */
	CHECK(cachetier_obj_cached_bytes(o) == 5 * UNIT, "commit: units 0-3 landed: %llu bytes",
	      (unsigned long long)cachetier_obj_cached_bytes(o));
	t0 = cachetier_lock_takes();
	for (uint32_t u = 0; u < 4; u++)
		ok &= probe_exact(o, 1, u * UNIT + 300);
	takes = cachetier_lock_takes() - t0;
	stats(ct, &st);
	printf("commit: units 0-3 landed, their run held in flight: 4 planned reads of them took "
	       "ct->lock %llu times (reads' takes %llu, hits %llu), the fill writer %llu times, "
	       "fills in flight %llu, %s (fanotify: %s)\n",
	       (unsigned long long)takes, (unsigned long long)(st.read_locks - rl0),
	       (unsigned long long)(st.hits - hits0),
	       (unsigned long long)(st.fill_writer_locks - wl0),
	       (unsigned long long)st.fills_inflight, ok ? "exact" : "WRONG", fan ? "yes" : "no");
	CHECK(ok, "commit: units 0-3 exact");
	CHECK(st.fills_inflight == 1, "commit: %llu fills in flight, want 1 (the run held)",
	      (unsigned long long)st.fills_inflight);
	CHECK(st.fill_writer_locks == wl0,
	      "commit: the fill writer took ct->lock %llu times landing units 0-3, want 0",
	      (unsigned long long)(st.fill_writer_locks - wl0));
	if (fan)
		CHECK(takes == 0 && st.read_locks == rl0 && st.hits - hits0 == 4,
		      "commit: 4 planned reads of landed units took ct->lock %llu times (reads' "
		      "takes %llu), hits %llu, want 0, 0 and 4 (committed as they landed, under "
		      "their object's lock alone)",
		      (unsigned long long)takes, (unsigned long long)(st.read_locks - rl0),
		      (unsigned long long)(st.hits - hits0));
	flag_file(gate, 0);
	count_reach(ct, TC_FILLS_INFLIGHT, 0, "commit: the run ended");
	count_reach(ct, TC_WRITER_LOCKS, wl0 + 1, "commit: the run's end on the writer");
	stats(ct, &st);
	CHECK(st.fill_writer_locks - wl0 == 1,
	      "commit: the fill writer took ct->lock %llu times for the run, want 1 (its end)",
	      (unsigned long long)(st.fill_writer_locks - wl0));
	CHECK(obj_exact(o, data[1], 0, 8 * UNIT), "commit: units 0-7 exact");
	tier_end(ct, be, o, NULL);
}

struct worker {
	pthread_t t;
	struct cachetier_obj **o;
	uint64_t seed;
	int bad, reads;
	uint64_t takes, busy; /* its thread's takes of ct->lock, those that found it held */
};

static void *reader_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed, t0 = cachetier_lock_takes(), b0 = cachetier_lock_busy();
	unsigned char *buf = malloc(CHUNK);

	for (int k = 0; k < READS && buf; k++) {
		int i = (int)(rnd(&s) % NOBJ);
		uint64_t off = rnd(&s) % sizes[i];
		size_t len = 1 + (size_t)(rnd(&s) % CHUNK);
		int ok;

		if (len > sizes[i] - off)
			len = (size_t)(sizes[i] - off);
		if (rnd(&s) & 1) {
			ok = obj_exact(w->o[i], data[i], off, len);
		} else {
			ssize_t n = cachetier_obj_pread_probe(w->o[i], buf, len, off);

			ok = n == (ssize_t)len && memcmp(buf, data[i] + off, len) == 0;
		}
		if (!ok && w->bad++ < 3)
			fprintf(stderr, "threads: object %d off %llu len %zu wrong\n", i,
				(unsigned long long)off, len);
		w->reads++;
	}
	w->takes = cachetier_lock_takes() - t0;
	w->busy = cachetier_lock_busy() - b0;
	free(buf);
	return NULL;
}

static void *prefetch_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed, t0 = cachetier_lock_takes(), b0 = cachetier_lock_busy();

	for (int k = 0; k < PREFETCH; k++) {
		int i = (int)(rnd(&s) % NOBJ);
		uint64_t off = rnd(&s) % sizes[i], len = 1 + rnd(&s) % (2 * CHUNK);

		if (len > sizes[i] - off)
			len = sizes[i] - off;
		if (cachetier_obj_prefetch_range(w->o[i], off, len,
						 (rnd(&s) & 1) ? CACHETIER_PF_EVICT
							       : CACHETIER_PF_FIT) != 0)
			w->bad++;
		if (k % 8 == 7)
			usleep(1000); /* spread over the readers' run (no count depends on it) */
	}
	w->takes = cachetier_lock_takes() - t0;
	w->busy = cachetier_lock_busy() - b0;
	return NULL;
}

static void test_threads(uint64_t seed)
{
	struct backend *be = fault_store(tmpdir, "async=1&piece=16384");
	struct cachetier *ct = tier(be, "c-threads", 6 * (uint64_t)CHUNK);
	struct cachetier_obj *o[NOBJ];
	struct cachetier_stats st;
	struct worker w[READERS + 1];
	uint64_t takes = 0, busy = 0;
	int bad = 0, reads = 0;

	for (int i = 0; i < NOBJ; i++)
		o[i] = obj_open(ct, be, keys[i]);
	for (int k = 0; k <= READERS; k++) {
		w[k] = (struct worker){.o = o, .seed = seed * 31 + (uint64_t)k + 1};
		CHECK(pthread_create(&w[k].t, NULL, k < READERS ? reader_main : prefetch_main,
				     &w[k]) == 0,
		      "threads: thread %d", k);
	}
	for (int k = 0; k <= READERS; k++) {
		pthread_join(w[k].t, NULL);
		bad += w[k].bad;
		reads += w[k].reads;
		if (k < READERS) {
			takes += w[k].takes;
			busy += w[k].busy;
		}
	}
	for (int i = 0; i < NOBJ; i++)
		(void)prefetch_ended(o[i]);
	fills_idle(ct);
	stats(ct, &st);
	printf("threads: %d reads by %d threads over %d objects, %llu fills (runs), %llu "
	       "evictions, %llu passes landing units; ct->lock taken %.2f times a read "
	       "(the readers' threads: %llu), the fill writer's %llu (%.2f a run), reads' "
	       "returns from waits and takes %llu; takes that found ct->lock held %llu, an "
	       "object's lock %llu; wake-ups %llu, waited on quietly %llu\n",
	       reads, READERS, NOBJ, (unsigned long long)st.fills, (unsigned long long)st.evictions,
	       (unsigned long long)st.fill_publishes, reads ? (double)takes / reads : 0.0,
	       (unsigned long long)takes, (unsigned long long)st.fill_writer_locks,
	       st.fills ? (double)st.fill_writer_locks / (double)st.fills : 0.0,
	       (unsigned long long)st.read_locks, (unsigned long long)st.tier_lock_waits,
	       (unsigned long long)st.file_lock_waits, (unsigned long long)st.unit_waiter_wakes,
	       (unsigned long long)st.unit_waits_quiet);
	/* who met ct->lock held (counts of a run, no check: they move with the
	 * machine's load) */
	printf("threads: takes that found ct->lock held by thread: the readers' %llu, the "
	       "prefetcher's %llu (of its %llu takes), the fill writer's %llu, the fill workers' "
	       "%llu, the rest (the flusher, the puncher, the stats) %lld; waited %llu ms in all; "
	       "the puncher's takes %llu (%llu batches)\n",
	       (unsigned long long)busy, (unsigned long long)w[READERS].busy,
	       (unsigned long long)w[READERS].takes, (unsigned long long)st.fill_writer_busy,
	       (unsigned long long)st.fill_worker_busy,
	       (long long)st.tier_lock_waits -
		   (long long)(busy + w[READERS].busy + st.fill_writer_busy + st.fill_worker_busy),
	       (unsigned long long)st.tier_lock_wait_ms, (unsigned long long)st.punch_tier_locks,
	       (unsigned long long)st.punch_batches);
	CHECK(bad == 0 && reads == READERS * READS, "threads: %d of %d reads wrong or failed", bad,
	      reads);
	CHECK(st.fills > 0 && st.evictions > 0, "threads: %llu fills, %llu evictions, want both",
	      (unsigned long long)st.fills, (unsigned long long)st.evictions);
	for (int i = 0; i < NOBJ; i++) {
		CHECK(obj_exact(o[i], data[i], 0, sizes[i] < CHUNK ? sizes[i] : CHUNK),
		      "threads: object %d's first chunk exact after the run", i);
		cachetier_obj_unref(o[i]);
	}
	tier_end(ct, be, NULL); /* debug builds: cachetier__run_check */
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "ol", 20261130u);
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < NOBJ; i++) {
		sizes[i] = 5 * CHUNK + (size_t)(rnd(&s) % (3 * CHUNK));
		snprintf(keys[i], sizeof(keys[i]), "obj-%d.tar", i);
		data[i] = src_object(tmpdir, keys[i], sizes[i], &s);
	}

	test_land_wake();
	test_quiet_wake();
	test_commit_nolock();
	test_threads(seed);

	for (int i = 0; i < NOBJ; i++)
		free(data[i]);
	return test_end("objlock", tmpdir, seed);
}
