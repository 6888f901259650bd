/*
 * test_rules.c — the fill rules the unit store asked before issue 36 #2
 * (fetch/fetch_rules.c: start, reader_job, pf_ended, pf_yield, miss_whole,
 * next, run, small), each through the store it drives (cachetier_set_policy
 * with fetch_store_rules, as fetch_new installs them), against the
 * fault:// test store; the later rules are test_chunkstore.c's
 * test_rule_*. Each test passes with the rule and fails with its
 * no-rules answer (the store's fallback, cachetier_queue.c; run's
 * fallback bounds a fill as the rule does, so its test is shown failing
 * with no bound at all).
 *
 * Two ways to see what the store does, both exact:
 *  - how many fills run at once: a store whose reads run on threads of
 *    their own (async=1, as a remote store's I/O thread runs them: two
 *    fill workers serve every slot) holds each read of an object's first
 *    chunk at byte 4096 (hold_at) while DIR.hold exists; the tests queue
 *    prefetches of objects of one chunk and wait until fills run and both
 *    workers wait with none woken (rule_settle): nothing more starts until
 *    a fill ends, so fills_inflight is what the rules let run;
 *  - which bytes each fill asks for: a store on the calling thread with
 *    one fill thread (one fill at a time, in queue order) that logs its
 *    reads (log=1: DIR.log, "read KEY OFF LEN").
 * No sleep decides a count: each step waits for a state of the store's
 * counters or its log, bounded at 60 s against a hang only. The data is
 * seeded (TEST_SEED; the seed is printed) and every byte read is compared.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "test_util.h"

#define CHUNK	(64u * 1024)
#define UNIT	(CHUNK / 8)    /* a chunk of 64 KiB has 8 units */
#define HOLD_AT 4096u	       /* the held store's reads of a first chunk wait here */
#define NONE	16	       /* objects of one chunk: one-K.tar */
#define NTINY	4	       /* objects smaller than HOLD_AT (never held): tiny-K.tar */
#define BIG	(NONE + NTINY) /* big.tar: 16 chunks and a bit */
#define NSRC	(BIG + 1)

static char tmpdir[256];
static unsigned char *data[NSRC];
static size_t sizes[NSRC];
static char keys[NSRC][32];

/* fault://tmpdir/src?query */
static struct backend *store(const char *query)
{
	return fault_store(tmpdir, query);
}

/* The held store: reads on threads of their own, a first chunk's read
 * held at HOLD_AT while src.hold exists, each hold logged ("hold KEY
 * OFF" in src.log, emptied first) as the read starts to wait. */
static struct backend *held_store(void)
{
	char q[64], path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	unlink(path);
	snprintf(q, sizeof(q), "async=1&hold_at=%u&log=1", HOLD_AT);
	return store(q);
}

/* Reads of the held store that started to wait on its hold so far. */
static uint64_t holds_logged(void)
{
	char path[sizeof(tmpdir) + 16], line[128];
	uint64_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		n += strncmp(line, "hold ", 5) == 0;
	if (f)
		fclose(f);
	return n;
}

static void hold(int on)
{
	char path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.hold", tmpdir);
	flag_file(path, on);
}

/* The logging store, its log emptied first. */
static struct backend *log_store(void)
{
	char path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	unlink(path);
	return store("log=1");
}

static void store_log(char *buf, size_t size)
{
	char path[sizeof(tmpdir) + 16];

	snprintf(path, sizeof(path), "%s/src.log", tmpdir);
	read_log(path, buf, size);
}

/* A tier in tmpdir/<name> of size bytes, chunks of CHUNK, threads fill
 * threads (large fills at once) and small small fills (fills at once, small
 * planned ranges too, less one), with the scheduler's rules installed. */
static struct cachetier *tier(struct backend *be, const char *name, uint64_t size, unsigned threads,
			      unsigned small)
{
	struct cachetier_config cc;
	struct cachetier *ct;
	char dir[sizeof(tmpdir) + 32];

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
	tier_config(&cc, dir, size, threads, CHUNK);
	cc.small_fills = small;
	ct = tier_open(&cc, be);
	cachetier_set_policy(ct, fetch_store_rules());
	return ct;
}

static struct cachetier_obj *obj(struct cachetier *ct, struct backend *be, int i)
{
	return obj_open(ct, be, keys[i]);
}

/* Bytes [off, off + len) of object i read through o are exact. */
static int exact(struct cachetier_obj *o, int i, uint64_t off, size_t len)
{
	return obj_exact(o, data[i], off, len);
}

/* Wait until fills run, each of them waits on the hold (the store logged
 * as many holds since base, what holds_logged said before they were
 * queued: a fill that has not reached it yet may still end, stopped),
 * and both fill workers (the held store's: two) wait for work with none
 * woken: every fill the rules allow has started and none can end, so
 * nothing changes until the hold goes. Returns fills_inflight. */
static uint64_t rule_settle(struct cachetier *ct, uint64_t base, const char *what)
{
	struct cachetier_stats st;
	uint64_t held = 0;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		held = holds_logged() - base;
		if (st.fills_inflight > 0 && st.workers_waiting == 2 && held == st.fills_inflight)
			return st.fills_inflight;
		usleep(10000);
	}
	CHECK(0, "%s: fills in flight %llu, held %llu, workers waiting %llu after 60 s", what,
	      (unsigned long long)st.fills_inflight, (unsigned long long)held,
	      (unsigned long long)st.workers_waiting);
	return st.fills_inflight;
}

/* Prefetch the objects of one chunk one-first .. one-(first + n - 1): as
 * planned ranges of their chunk (range) or as whole objects (their
 * cursors), queued in one batch (cachetier_wake_hold: no worker starts
 * one before the last is queued). Returns holds_logged before them. */
static uint64_t rule_prefetch(struct cachetier *ct, struct cachetier_obj **o, int first, int n,
			      int range)
{
	uint64_t base = holds_logged();

	cachetier_wake_hold(ct, 1);
	for (int i = first; i < first + n; i++)
		CHECK((range ? cachetier_obj_prefetch_range(o[i], 0, CHUNK, CACHETIER_PF_FIT)
			     : cachetier_obj_prefetch(o[i], CACHETIER_PF_FIT)) == 0,
		      "prefetch of %s", keys[i]);
	cachetier_wake_hold(ct, 0);
	return base;
}

/* Prefetch objects [first, first + n) (rule_prefetch), wait until they
 * settle (rule_settle) and check that want fills run at once (what: when,
 * in the messages). Returns how many do. */
static uint64_t rule_at_once(struct cachetier *ct, struct cachetier_obj **o, int first, int n,
			     int range, uint64_t want, const char *what)
{
	uint64_t base = rule_prefetch(ct, o, first, n, range);
	uint64_t got = rule_settle(ct, base, what);

	printf("rule %s: %llu %s fills at once\n", what, (unsigned long long)got,
	       range ? "range" : "cursor");
	CHECK(got == want, "%s: %llu %s fills at once, want %llu", what, (unsigned long long)got,
	      range ? "range" : "cursor", (unsigned long long)want);
	return got;
}

/* Wait until the prefetches of objects [first, first + n) ended (60 s). */
static void rule_ended(struct cachetier_obj **o, int first, int n)
{
	for (int i = first; i < first + n; i++) {
		int w = 0;

		while (w++ < 6000 && cachetier_obj_prefetch_state(o[i], NULL))
			usleep(10000);
		CHECK(w <= 6000, "the prefetch of %s did not end", keys[i]);
	}
}

/* The hold made, the held store's tier with every object open (o[NSRC]). */
static struct cachetier *rule_open(struct backend **be, struct cachetier_obj **o, const char *name,
				   unsigned threads, unsigned small)
{
	struct cachetier *ct;

	hold(1);
	*be = held_store();
	ct = tier(*be, name, 1ull << 30, threads, small);
	for (int i = 0; i < NSRC; i++)
		o[i] = obj(ct, *be, i);
	return ct;
}

/* The hold goes; the prefetches of objects [first, first + n) end, every
 * fill ends, and those objects are cached whole and read back exactly;
 * then the tier closes. */
static void rule_close(struct cachetier *ct, struct backend *be, struct cachetier_obj **o,
		       int first, int n, const char *what)
{
	hold(0);
	rule_ended(o, first, n);
	fills_idle(ct);
	for (int i = first; i < first + n; i++)
		CHECK(cachetier_obj_cached_bytes(o[i]) == CHUNK && exact(o[i], i, 0, CHUNK),
		      "%s: %s cached %llu, exact %d", what, keys[i],
		      (unsigned long long)cachetier_obj_cached_bytes(o[i]),
		      exact(o[i], i, 0, CHUNK));
	for (int i = 0; i < NSRC; i++)
		cachetier_obj_unref(o[i]);
	cachetier_close(ct);
	backend_close(be);
}

/* A reader's read of 100 bytes of big.tar at off: a miss (no window:
 * a demand fill) when ahead is 0, else a read with a window of ahead bytes
 * (its chunk and the window's queued as readahead); exact. */
static void rule_read(struct cachetier_obj *big, uint64_t off, uint64_t ahead, const char *what)
{
	unsigned char buf[100];
	ssize_t n = ahead ? cachetier_obj_pread_ahead(big, buf, sizeof(buf), off, ahead)
			  : cachetier_obj_pread(big, buf, sizeof(buf), off);

	CHECK(n == (ssize_t)sizeof(buf) && memcmp(buf, data[BIG] + off, sizeof(buf)) == 0,
	      "%s: the read of big.tar at %llu: %zd", what, (unsigned long long)off, n);
}

/* Prefetch fills stopped for readers so far: want (what: when). */
static void rule_withdrawn(struct cachetier *ct, uint64_t want, const char *what)
{
	struct cachetier_stats st;

	stats(ct, &st);
	printf("rule %s: %llu prefetch fills stopped\n", what,
	       (unsigned long long)st.prefetch_withdrawn);
	CHECK(st.prefetch_withdrawn == want, "%s: %llu prefetch fills stopped, want %llu", what,
	      (unsigned long long)st.prefetch_withdrawn, (unsigned long long)want);
}

/* The held store's tier of threads fill threads and small small fills:
 * 7 ranges of a chunk each, want of them run at once (what: when); then
 * the hold goes and every one is read back. */
static void rule_ranges(const char *name, unsigned threads, unsigned small, uint64_t want,
			const char *what)
{
	struct cachetier_obj *o[NSRC];
	struct backend *be;
	struct cachetier *ct = rule_open(&be, o, name, threads, small);

	rule_at_once(ct, o, 0, 7, 1, want, what);
	rule_close(ct, be, o, 0, 7, what);
}

/* ---- the rules ---- */

/* start: before any reader, planned ranges take every fill slot but one.
 * 4 fill threads, 4 small fills: 7 small ranges queued, 4 run at once
 * (small_fills + 1 slots, less one). Without it (the counts as the store
 * opened them: no round of prefetch fills yet, as if readers read) 3. */
static void test_rule_start(void)
{
	rule_ranges("c-rule-start", 4, 4, 4, "start: before any reader");
}

/* reader_job: a reader's job means readers read (fewer prefetch fills), a
 * readahead job restarts the slow start at one. 4 fill threads, 4 small
 * fills. A reader's miss (big.tar's chunk 1, a demand fill), then 7 small
 * ranges: 3 run at once (one slot less than before any reader). Once they
 * ended, a reader with a window (big.tar's chunks 3-5, readahead), then
 * the cursors of 7 objects of one chunk: 1 runs (the slow start's first).
 * Without it: 4, then 3. */
static void test_rule_reader_job(void)
{
	struct cachetier_obj *o[NSRC];
	struct backend *be;
	struct cachetier *ct;

	ct = rule_open(&be, o, "c-rule-reader", 4, 4);
	rule_read(o[BIG], CHUNK + 100, 0, "reader_job");
	fills_idle(ct);
	rule_at_once(ct, o, 0, 7, 1, 3, "reader_job: after a reader's miss");
	hold(0);
	rule_ended(o, 0, 7);
	fills_idle(ct);
	hold(1);
	rule_read(o[BIG], 3 * CHUNK + 100, 2 * CHUNK, "reader_job");
	fills_idle(ct);
	rule_at_once(ct, o, 7, 7, 0, 1, "reader_job: after a readahead");
	rule_close(ct, be, o, 0, 14, "reader_job");
}

/* pf_ended: the slow start grows with each prefetch fill that ends. 4 fill
 * threads, 4 small fills. A reader with a window (readahead: the slow
 * start at one, readers reading), then the cursors of the 4 objects
 * smaller than HOLD_AT (never held): their 4 fills end one after another
 * (each lets one more run; a round of them means no reader reads). Then
 * the cursors of 7 objects of one chunk: 3 run at once (every large slot
 * but one). Without it: 1 (the slow start never grows). */
static void test_rule_pf_ended(void)
{
	struct cachetier_obj *o[NSRC];
	struct backend *be;
	struct cachetier *ct;

	ct = rule_open(&be, o, "c-rule-ended", 4, 4);
	rule_read(o[BIG], 3 * CHUNK + 100, 2 * CHUNK, "pf_ended");
	fills_idle(ct);
	for (int i = NONE; i < NONE + NTINY; i++)
		CHECK(cachetier_obj_prefetch(o[i], CACHETIER_PF_FIT) == 0, "prefetch of %s",
		      keys[i]);
	rule_ended(o, NONE, NTINY);
	fills_idle(ct);
	for (int i = NONE; i < NONE + NTINY; i++)
		CHECK(cachetier_obj_cached_bytes(o[i]) == sizes[i] && exact(o[i], i, 0, sizes[i]),
		      "pf_ended: %s cached %llu of %zu", keys[i],
		      (unsigned long long)cachetier_obj_cached_bytes(o[i]), sizes[i]);
	rule_at_once(ct, o, 0, 7, 0, 3, "pf_ended: after 4 prefetch fills ended");
	rule_close(ct, be, o, 0, 7, "pf_ended");
}

/* pf_yield: prefetch fills stop for readers. 2 fill threads (1 connection
 * for large fills), 4 small fills. 7 small ranges: 4 run, held. A reader's
 * miss (big.tar's chunk 1): the fills it needs a connection for are one
 * more than small_fills allows, so one prefetch fill stops
 * (prefetch_withdrawn 1), and the miss is served while the others stay
 * held. A reader with a window (readahead of big.tar's chunks 3-5): every
 * prefetch fill with less than half its bytes stops (4 in all). Each
 * stopped fill is fetched again once the hold goes. Without it: 0 and 0. */
static void test_rule_pf_yield(void)
{
	struct cachetier_obj *o[NSRC];
	struct backend *be;
	struct cachetier *ct;

	ct = rule_open(&be, o, "c-rule-yield", 2, 4);
	rule_at_once(ct, o, 0, 7, 1, 4, "pf_yield");
	rule_read(o[BIG], CHUNK + 100, 0, "pf_yield");
	rule_withdrawn(ct, 1, "pf_yield: for a reader's miss");
	rule_read(o[BIG], 3 * CHUNK + 100, 2 * CHUNK, "pf_yield");
	rule_withdrawn(ct, 4, "pf_yield: after a readahead");
	rule_close(ct, be, o, 0, 7, "pf_yield");
}

/* next: which queue the next fill comes from, within the limits of fills
 * in flight. 2 fill threads, 4 small fills (6 slots). 7 small ranges: 4
 * run (a slot kept for a reader); a reader's miss (big.tar's chunk 1)
 * then runs at once in a free slot while they are held. Without it (the
 * queues in order, in any free slot): 6 ranges run, and the reader waits
 * for a held one. */
static void test_rule_next(void)
{
	struct cachetier_obj *o[NSRC];
	struct cachetier_stats st;
	struct backend *be;
	struct cachetier *ct;

	ct = rule_open(&be, o, "c-rule-next", 2, 4);
	if (rule_at_once(ct, o, 0, 7, 1, 4, "next") ==
	    4) { /* else the read would wait for the hold */
		rule_read(o[BIG], CHUNK + 100, 0, "next");
		for (int i = 0; i < 6000; i++) { /* its fill's end (after its units) */
			stats(ct, &st);
			if (st.fills == 1 && st.fills_inflight == 4)
				break;
			usleep(10000);
		}
		CHECK(st.misses == 1 && st.fills == 1 && st.fills_inflight == 4,
		      "next: the reader's miss served while the ranges are held: misses %llu (1), "
		      "fills %llu (1), in flight %llu (4)",
		      (unsigned long long)st.misses, (unsigned long long)st.fills,
		      (unsigned long long)st.fills_inflight);
	}
	rule_close(ct, be, o, 0, 7, "next");
}

/* small: a planned range's fill of at most 1 MiB is small: small fills
 * run beside the large ones' limit. 2 fill threads, 4 small fills: 7
 * ranges of a chunk (64 KiB) run 4 at once (small_fills + 1 slots, less
 * one). Without it (every fill large: fill_threads slots, less one): 1. */
static void test_rule_small(void)
{
	rule_ranges("c-rule-small", 2, 4, 4, "small: of a chunk each");
}

/* miss_whole: a reader's miss fills its whole chunk while the chunk fits
 * without evicting, else only the units it reads. A cache of 2 chunks, one
 * fill thread, the logging store: reads of 100 bytes of big.tar in chunk
 * 0, then chunk 1 (each fits: the whole chunk), then chunk 2 (the cache is
 * full: its unit only). Without it every miss fills only its unit. */
static void test_rule_miss_whole(void)
{
	static const char want[] = "read big.tar 0 65536\n"
				   "read big.tar 65536 65536\n"
				   "read big.tar 139264 8192\n";
	char log[4096];
	struct backend *be = log_store();
	struct cachetier *ct = tier(be, "c-rule-miss", 2 * CHUNK, 1, 0);
	struct cachetier_obj *big = obj(ct, be, BIG);

	for (unsigned c = 0; c < 3; c++)
		rule_read(big, c * CHUNK + UNIT + 100, 0, "miss_whole");
	store_log(log, sizeof(log));
	printf("rule miss_whole: the store read\n%s", log);
	CHECK(strcmp(log, want) == 0, "miss_whole: the store read\n%swant\n%s", log, want);
	cachetier_obj_unref(big);
	cachetier_close(ct);
	backend_close(be);
}

/* run: a fill never crosses a chunk. One fill thread, the logging store,
 * a cache of 1 GiB. A miss of big.tar's unit 12 (chunk 1's fifth): chunk
 * 1, units 8-15, though units 5-11 are empty too. A planned range of
 * units 28-43 (half a chunk, a chunk, half a chunk): three fills, of
 * units 28-31, 32-39, 40-43. The store's fallback bounds fills so too;
 * with no bound at all (the hook leaving the bounds as asked) the miss
 * fills units 5-12 and the range units 28-35 and 36-43. */
static void test_rule_run(void)
{
	static const char want[] = "read big.tar 65536 65536\n"
				   "read big.tar 229376 32768\n"
				   "read big.tar 262144 65536\n"
				   "read big.tar 327680 32768\n";
	char log[4096];
	struct backend *be = log_store();
	struct cachetier *ct = tier(be, "c-rule-run", 1ull << 30, 1, 0);
	struct cachetier_obj *big = obj(ct, be, BIG);
	int w = 0;

	rule_read(big, 12 * UNIT + 100, 0, "run");
	CHECK(cachetier_obj_prefetch_range(big, 28 * UNIT, 16 * UNIT, CACHETIER_PF_FIT) == 0,
	      "run: the range");
	while (w++ < 6000 && cachetier_obj_prefetch_state(big, NULL))
		usleep(10000);
	fills_idle(ct);
	store_log(log, sizeof(log));
	printf("rule run: the store read\n%s", log);
	CHECK(strcmp(log, want) == 0, "run: the store read\n%swant\n%s", log, want);
	CHECK(exact(big, BIG, 8 * UNIT, 8 * UNIT) && exact(big, BIG, 28 * UNIT, 16 * UNIT),
	      "run: the bytes filled");
	cachetier_obj_unref(big);
	cachetier_close(ct);
	backend_close(be);
}

/* TEST_ONLY=test_rule_NAME: only that test runs (a loop over one test) */
static const char *only;

static int run(const char *name)
{
	return !only || !*only || strcmp(only, name) == 0;
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "rules", 20261130u);
	uint64_t s = seed * 2654435761u + 1;

	only = getenv("TEST_ONLY");
	for (int i = 0; i < NSRC; i++) {
		if (i < NONE) {
			sizes[i] = CHUNK;
			snprintf(keys[i], sizeof(keys[i]), "one-%d.tar", i);
		} else if (i < BIG) {
			sizes[i] = 1000 + (size_t)(rnd(&s) % 2000); /* below HOLD_AT */
			snprintf(keys[i], sizeof(keys[i]), "tiny-%d.tar", i - NONE);
		} else {
			sizes[i] = 16 * CHUNK + 1234;
			snprintf(keys[i], sizeof(keys[i]), "big.tar");
		}
		data[i] = src_object(tmpdir, keys[i], sizes[i], &s);
	}

	if (run("test_rule_start"))
		test_rule_start();
	if (run("test_rule_reader_job"))
		test_rule_reader_job();
	if (run("test_rule_pf_ended"))
		test_rule_pf_ended();
	if (run("test_rule_pf_yield"))
		test_rule_pf_yield();
	if (run("test_rule_next"))
		test_rule_next();
	if (run("test_rule_small"))
		test_rule_small();
	if (run("test_rule_miss_whole"))
		test_rule_miss_whole();
	if (run("test_rule_run"))
		test_rule_run();
	CHECK(check_count() > 0, "TEST_ONLY=%s: no such test", only);

	for (int i = 0; i < NSRC; i++)
		free(data[i]);
	return test_end("rules", tmpdir, seed);
}
