/*
 * test_fillwake.c — the cache tier's fill workers' wake-ups
 * (cachetier_fill.c, cachetier__work_wake), against the fault:// test
 * store with async=1 (its reads on threads of their own, as a remote
 * store's I/O thread runs them, so fills end on the tier's fill writer)
 * and hold_at= (a fill held in flight while a file exists). No rules
 * installed: the no-rules fallback starts a queued fill in any free slot,
 * so the counts below follow from the slots alone.
 *
 * test_batch_wake: four prefetch ranges pushed in one cachetier_wake_hold
 * batch while both fill workers wait wake one worker once (work_wakes 1;
 * one wake-up per range pushed would be 4); it starts the three fills the
 * slots allow, held in flight; their ends with the fourth queued wake one
 * worker once more (work_wakes 2: the later ends find it woken or the
 * queue empty).
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
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
#include "test_util.h"

#define CHUNK (64u * 1024)
#define NOBJ  4

static char tmpdir[256];
static unsigned char *data[NOBJ];
static size_t sizes[NOBJ];
static char keys[NOBJ][32];

/* fault://tmpdir/<dir>?async=1&<query> */
static struct backend *store(const char *dir, const char *query)
{
	char src[600];
	struct backend *be;
	int err;

	snprintf(src, sizeof(src), "fault://%s/%s?async=1%s%s", tmpdir, dir, *query ? "&" : "",
		 query);
	err = backend_open(&be, src, NULL);
	if (err < 0)
		FAIL("backend_open %s: %d", src, err);
	return be;
}

/* A tier in tmpdir/<name> (1 GiB, chunks of CHUNK), no rules; the source
 * string is fixed so that two stores share one directory. */
static struct cachetier *tier(struct backend *be, const char *name, unsigned threads)
{
	struct cachetier_config cc;
	char dir[600];

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
	tier_config(&cc, dir, 1ull << 30, threads, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	cc.small_fills = 1; /* slots: threads + 1 */
	return tier_open(&cc, be);
}

static struct cachetier_obj *obj(struct cachetier *ct, struct backend *be, int i)
{
	return obj_open(ct, be, keys[i]);
}

enum what { FILLS_INFLIGHT, WAITING, CACHED };

/* Wait (up to 60 s) until the count named by w is want. */
static void reach(struct cachetier *ct, struct cachetier_obj *o, enum what w, uint64_t want,
		  const char *name)
{
	struct cachetier_stats st;
	uint64_t v = 0;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		v = w == FILLS_INFLIGHT ? st.fills_inflight
		    : w == WAITING	? st.workers_waiting
					: cachetier_obj_cached_bytes(o);
		if (v == want)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: %llu after 60 s, want %llu", name, (unsigned long long)v,
	      (unsigned long long)want);
}

static void hold(const char *dir, int on)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/%s.hold", tmpdir, dir);
	flag_file(path, on);
}

/* Bytes [off, off + len) of object i read through o are exact. */
static int exact(struct cachetier_obj *o, int i, uint64_t off, size_t len)
{
	return obj_exact(o, data[i], off, len);
}

static void test_batch_wake(void)
{
	char q[64];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *o[NOBJ];
	struct cachetier_stats st;

	/* every fill of a chunk 0 holds at its middle while src.hold exists */
	snprintf(q, sizeof(q), "hold_at=%u", CHUNK / 2);
	be = store("src", q);
	hold("src", 1);
	ct = tier(be, "c-batch", 2); /* 2 workers; 3 slots (a small one) */
	for (int i = 0; i < NOBJ; i++)
		o[i] = obj(ct, be, i);
	reach(ct, NULL, WAITING, 2, "batch: workers waiting before the batch");
	cachetier_wake_hold(ct, 1);
	for (int i = 0; i < NOBJ; i++)
		CHECK(cachetier_obj_prefetch_range(o[i], 0, CHUNK, CACHETIER_PF_FIT) == 0,
		      "batch: range %d", i);
	stats(ct, &st);
	CHECK(st.work_wakes == 0 && st.fills_inflight == 0,
	      "batch: while held: %llu wake-ups, %llu fills", (unsigned long long)st.work_wakes,
	      (unsigned long long)st.fills_inflight);
	cachetier_wake_hold(ct, 0);
	/* the woken worker starts what the 3 slots allow; the 4th waits */
	reach(ct, NULL, FILLS_INFLIGHT, 3, "batch: fills held in flight");
	reach(ct, NULL, WAITING, 2, "batch: workers waiting with every slot taken");
	stats(ct, &st);
	CHECK(st.work_wakes == 1, "batch: %llu wake-ups (want 1: one a batch)",
	      (unsigned long long)st.work_wakes);
	hold("src", 0);
	for (int i = 0; i < NOBJ; i++)
		reach(ct, o[i], CACHED, CHUNK, "batch: chunk 0 cached");
	reach(ct, NULL, FILLS_INFLIGHT, 0, "batch: fills ended");
	stats(ct, &st);
	printf("batch: wake-ups %llu, fills %llu\n", (unsigned long long)st.work_wakes,
	       (unsigned long long)st.fills);
	CHECK(st.work_wakes == 2, "batch: %llu wake-ups after the fills' ends, want 2",
	      (unsigned long long)st.work_wakes);
	CHECK(st.fills == NOBJ && st.fill_errors == 0, "batch: fills %llu, errors %llu",
	      (unsigned long long)st.fills, (unsigned long long)st.fill_errors);
	for (int i = 0; i < NOBJ; i++) {
		CHECK(exact(o[i], i, 0, CHUNK), "batch: object %d's chunk 0 exact", i);
		cachetier_obj_unref(o[i]);
	}
	tier_end(ct, be, NULL);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "fw", 20261129u);
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < NOBJ; i++) {
		sizes[i] = i == NOBJ - 1 ? 16 * CHUNK + 77 : CHUNK + 1 + (size_t)(rnd(&s) % CHUNK);
		snprintf(keys[i], sizeof(keys[i]), "obj-%d.tar", i);
		data[i] = src_object(tmpdir, keys[i], sizes[i], &s);
	}

	test_batch_wake();

	for (int i = 0; i < NOBJ; i++)
		free(data[i]);
	return test_end("fillwake", tmpdir, seed);
}
