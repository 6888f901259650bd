/*
 * test_stageroom.c — the stage's room (fetch/fetch_stage.c, stage_make_room):
 * a new span that does not fit never takes the span its plan's reader is
 * reading while a span whose every path was read only waits to go (a
 * reply still holds it, or its read has not ended).
 *
 * The stage of 3 spans of SPAN bytes; the spans are read into memory by
 * this test (fetch__stage_add_via with a read that only records its
 * callbacks; the test writes the bytes and calls progress and done as the
 * store's I/O thread would). A, B, C are staged whole (paths 0, 1, 2 of
 * one plan); A is read wholly, B begun (the plan's position 2); then D
 * (path 3) is added on a thread of its own:
 *   held:   A's last read is lent to a reply (fetch_stage_hold) not
 *           released yet;
 *   inread: A's bytes are all in (the watermark at its end) and read,
 *           its read not ended (done not called yet).
 * D waits for room (room_waits 1: the test waits for that count, no
 * sleep decides) until A goes (fetch_stage_release; done), then is
 * staged: nothing dropped, nothing went to the store, B's rest and D are
 * read from the stage, exact. Before the wait, D's add dropped B (its
 * last path lies behind the position: its reader had begun it) at once,
 * and B's rest went to the cache as misses.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "fetch_i.h"
#include "test_util.h"

#define SPAN  (64u * 1024)
#define NSPAN 4
#define KEY   "s.tar"

static char tmpdir[256];
static unsigned char *data;

/* A read into memory the test runs (as the store's I/O thread would). */
struct rec {
	void *buf, *arg;
	uint64_t off;
	size_t len;
	cachetier_mem_progress_fn progress;
	cachetier_mem_done_fn done;
};
static struct rec recs[NSPAN];
static _Atomic int nrec;

static int rec_read(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len, void *buf,
		    cachetier_mem_progress_fn progress, cachetier_mem_done_fn done, void *arg)
{
	int i = atomic_fetch_add(&nrec, 1);

	(void)ctx;
	(void)o;
	if (i >= NSPAN)
		return -ENOMEM;
	recs[i] = (struct rec){
	    .buf = buf, .arg = arg, .off = off, .len = len, .progress = progress, .done = done};
	return 0;
}

/* Span i's bytes in and (end) its read ended. */
static void rec_fill(int i, int end)
{
	memcpy(recs[i].buf, data + recs[i].off, recs[i].len);
	recs[i].progress(recs[i].arg, recs[i].off + recs[i].len);
	if (end)
		recs[i].done(recs[i].arg, 0);
}

static const int plan_id; /* the plan: compared by address only */

/* Stage span i (path i of the plan) at the plan's position. */
static int add(struct fetch *s, struct cachetier_obj *o, int i, uint32_t position)
{
	struct cachetier_piece sub = {.off = (uint64_t)i * SPAN, .len = SPAN};

	return fetch__stage_add_via(s, o, sub.off, sub.off + SPAN, &sub, 1, &plan_id, (uint32_t)i,
				    position, rec_read, NULL);
}

struct adder {
	struct fetch *s;
	struct cachetier_obj *o;
	int ret;
	_Atomic int ended;
};

static void *add_d(void *arg)
{
	struct adder *a = arg;

	a->ret = add(a->s, a->o, 3, 2);
	atomic_store(&a->ended, 1);
	return NULL;
}

static void stage_stats(struct fetch *s, struct fetch_stage_stats *st)
{
	fetch_stage_stats_get(s, st);
}

/* Bytes [off, off + len) read from the stage: 1 served and exact. */
static int staged_exact(struct fetch *s, struct cachetier_obj *o, uint64_t off, size_t len)
{
	unsigned char *buf = malloc(len);
	int ok =
	    buf && fetch_stage_read(s, o, buf, len, off) == 1 && memcmp(buf, data + off, len) == 0;

	free(buf);
	return ok;
}

static void test_room(struct backend *be, int held)
{
	const char *what = held ? "held" : "inread";
	struct cachetier_config cc;
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct fetch *s;
	struct fetch_stage_stats st;
	struct adder a = {0};
	pthread_t t;
	char dir[sizeof(tmpdir) + 32], *ptr = NULL;
	void *ref = NULL;
	int err;

	snprintf(dir, sizeof(dir), "%s/cache-%s", tmpdir, what);
	tier_config(&cc, dir, 64u << 20, 2, SPAN);
	ct = tier_open(&cc, be);
	err = fetch_new(ct, &s);
	CHECK(err == 0, "fetch_new: %d", err);
	if (err)
		return;
	CHECK(fetch__stage_new(s, 3 * (uint64_t)SPAN) == 0, "%s: a stage of 3 spans", what);
	o = obj_open(ct, be, KEY);
	atomic_store(&nrec, 0);
	for (int i = 0; i < 3; i++) {
		CHECK(add(s, o, i, 0) == 0, "%s: span %d staged", what, i);
		rec_fill(i, !(i == 0 && !held)); /* inread: A's read not ended */
	}
	/* A read wholly: its last read lent to a reply (held), or copied */
	CHECK(staged_exact(s, o, 0, SPAN / 2), "%s: A's first half from the stage", what);
	if (held) {
		CHECK(fetch_stage_hold(s, o, SPAN / 2, SPAN / 2, &ptr, &ref) == 1 && ptr && ref &&
			  memcmp(ptr, data + SPAN / 2, SPAN / 2) == 0,
		      "%s: A's second half lent from the stage", what);
	} else {
		CHECK(staged_exact(s, o, SPAN / 2, SPAN / 2), "%s: A's second half", what);
	}
	/* B begun: the plan's position is 2 */
	CHECK(staged_exact(s, o, SPAN, 4096), "%s: B's first page from the stage", what);
	a.s = s;
	a.o = o;
	CHECK(pthread_create(&t, NULL, add_d, &a) == 0, "pthread_create");
	/* D's add waits for room, or (the stage without the wait) ends */
	for (int i = 0; i < 6000; i++) {
		stage_stats(s, &st);
		if (st.room_waits > 0 || atomic_load(&a.ended))
			break;
		usleep(10000);
	}
	printf("stageroom %s: D's add %s; dropped %llu\n", what,
	       atomic_load(&a.ended) ? "ended" : "waits for room", (unsigned long long)st.dropped);
	CHECK(st.room_waits == 1, "%s: D waited for room (%llu waits)", what,
	      (unsigned long long)st.room_waits);
	CHECK(st.dropped == 0, "%s: B (begun) not dropped for D: %llu dropped", what,
	      (unsigned long long)st.dropped);
	/* A goes: D gets its room */
	if (held)
		fetch_stage_release(ref);
	else
		recs[0].done(recs[0].arg, 0);
	pthread_join(t, NULL);
	CHECK(a.ret == 0, "%s: D staged: %d", what, a.ret);
	CHECK(staged_exact(s, o, SPAN + 4096, SPAN - 4096), "%s: B's rest from the stage", what);
	if (a.ret == 0) {
		rec_fill(3, 1);
		CHECK(staged_exact(s, o, 3 * (uint64_t)SPAN, SPAN), "%s: D from the stage", what);
	}
	CHECK(staged_exact(s, o, 2 * (uint64_t)SPAN, SPAN), "%s: C from the stage", what);
	stage_stats(s, &st);
	CHECK(st.dropped == 0 && st.full == 0, "%s: %llu dropped, %llu full", what,
	      (unsigned long long)st.dropped, (unsigned long long)st.full);
	CHECK(st.pieces == 4 && st.peak <= 3 * (uint64_t)SPAN && st.now == 0,
	      "%s: 4 spans staged (%llu), peak %llu within the stage, %llu left", what,
	      (unsigned long long)st.pieces, (unsigned long long)st.peak,
	      (unsigned long long)st.now);
	fetch_free(s);
	tier_end(ct, NULL, o, NULL); /* the store is main's */
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "stageroom", 20261130u);
	uint64_t r = seed * 2654435761u + 1;
	struct backend *be;

	data = src_object(tmpdir, KEY, NSPAN * SPAN, &r);
	be = fault_store(tmpdir, "");
	test_room(be, 1);
	test_room(be, 0);
	backend_close(be);
	free(data);
	return test_end("stageroom", tmpdir, seed);
}
