/*
 * test_stagenofit.c — the stage's region fragmented (fetch/fetch_stage.c,
 * stage_make_room; fetch/fetch_stagebuf.c): a span whose bytes fit the
 * stage's count but no free run of its pages is refused and counted once
 * as such (buf_nofit, the control file's plan_stage_nofit) and once as no
 * room (full, plan_stage_full); a span over the count is counted no room
 * only; the run a span takes is the first fit the room rule found. And the
 * region is mapped at the stage's first span, not with the stage.
 *
 * One fixed sequence on a stage of 1 MiB (256 pages), one plan, its
 * position 0 (no span behind it: none goes for room): four spans of
 * 256 KiB fill the region; the first and the third are read whole (they
 * go: 512 KiB free in two runs of 256 KiB); a span of 320 KiB (80 pages)
 * fits the count and no run: refused, nofit 1; a span of 256 KiB takes
 * the first run (page 0); a span of 320 KiB again is over the count:
 * refused, nofit still 1; a span of 256 KiB takes the run at 512 KiB.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "fetch_i.h"
#include "test_util.h"
#include "test_stage.h"

#define OBJ  (4u << 20)
#define MAX  (1u << 20)
#define Q    (256u * 1024) /* a quarter of the stage: 64 pages, its own class */
#define BIG  (320u * 1024) /* 80 pages: its own class, more than a quarter */
#define KEY  "s.tar"
#define NREC 8

static char tmpdir[256];
static const int plan_id; /* compared by address only */
static struct mem_rec rec[NREC];

/* Stage [off, off + len) as one planned path of the plan (last path 5,
 * position 0); its read is rec[i]'s, driven here. */
static int add(struct fetch *s, struct cachetier_obj *o, int i, uint64_t off, uint64_t len)
{
	struct cachetier_piece sub = {.off = off, .len = len};

	memset(&rec[i], 0, sizeof(rec[i]));
	return fetch__stage_add_via(s, o, off, off + len, &sub, 1, &plan_id, 5, 0, rec_read,
				    &rec[i]);
}

/* A read into memory that does not start (the store refused it). */
static int fail_read(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len, void *buf,
		     cachetier_mem_progress_fn progress, cachetier_mem_done_fn done, void *arg)
{
	(void)ctx, (void)o, (void)off, (void)len, (void)buf, (void)progress, (void)done, (void)arg;
	return -EIO;
}

/* rec[i]'s bytes land whole, its read ends. */
static void land(const unsigned char *data, int i, uint64_t off, uint64_t len)
{
	memcpy(rec[i].buf, data + off, len);
	rec[i].progress(rec[i].arg, off + len);
	rec[i].donefn(rec[i].arg, 0);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "stagenofit", 20261202u);
	uint64_t rs = seed * 2654435761u + 1;
	struct stage_rig rig;
	struct fetch_stage_stats st;
	unsigned char *buf = malloc(Q);
	const unsigned char *base;
	size_t region;
	int err;

	if (!buf)
		FAIL("malloc");
	stage_rig_open(&rig, tmpdir, KEY, OBJ, &rs, MAX);
	CHECK(fetch__stagebuf_size(Q, NULL) == Q && fetch__stagebuf_size(BIG, NULL) == BIG,
	      "the spans' classes are their sizes (%zu, %zu)", fetch__stagebuf_size(Q, NULL),
	      fetch__stagebuf_size(BIG, NULL));
	base = fetch__stage_region(rig.s, &region);
	CHECK(!base && region == 0, "no region mapped before the stage's first span (%zu bytes)",
	      region);

	for (int i = 0; i < 4; i++) {
		err = add(rig.s, rig.o, i, (uint64_t)i * Q, Q);
		CHECK(err == 0, "span %d of 256 KiB staged: %d", i, err);
		if (i == 0) {
			base = fetch__stage_region(rig.s, &region);
			CHECK(base && region == MAX,
			      "the region mapped at the first span: %zu bytes", region);
		}
		CHECK(base && (unsigned char *)rec[i].buf == base + (size_t)i * Q,
		      "span %d's run at %td, want %u", i,
		      base ? (unsigned char *)rec[i].buf - base : -1, i * Q);
		land(rig.data, i, (uint64_t)i * Q, Q);
	}
	for (int i = 0; i < 4; i += 2) { /* the first and the third read whole: they go */
		int got = fetch_stage_read(rig.s, rig.o, buf, Q, (uint64_t)i * Q);

		CHECK(got == 1 && memcmp(buf, rig.data + (size_t)i * Q, Q) == 0,
		      "span %d read whole from the stage: %d", i, got);
	}
	fetch_stage_stats_get(rig.s, &st);
	CHECK(st.now == 2 * Q && st.buf_free == 2 * Q && st.buf_nofit == 0 && st.full == 0,
	      "two spans of 256 KiB left: memory %llu, free %llu, nofit %llu, full %llu",
	      (unsigned long long)st.now, (unsigned long long)st.buf_free,
	      (unsigned long long)st.buf_nofit, (unsigned long long)st.full);

	err = add(rig.s, rig.o, 4, 2 * MAX, BIG);
	fetch_stage_stats_get(rig.s, &st);
	CHECK(err == -ENOSPC && st.buf_nofit == 1 && st.full == 1 && st.now == 2 * Q,
	      "320 KiB in 512 KiB free in two runs of 256 KiB: %d, nofit %llu, full %llu, "
	      "memory %llu",
	      err, (unsigned long long)st.buf_nofit, (unsigned long long)st.full,
	      (unsigned long long)st.now);

	err = add(rig.s, rig.o, 5, 3 * MAX, Q);
	CHECK(err == 0 && (unsigned char *)rec[5].buf == base,
	      "256 KiB takes the first free run (page 0): %d at %td", err,
	      err ? -1 : (unsigned char *)rec[5].buf - base);

	err = add(rig.s, rig.o, 6, 2 * MAX, BIG);
	fetch_stage_stats_get(rig.s, &st);
	CHECK(err == -ENOSPC && st.buf_nofit == 1 && st.full == 2,
	      "320 KiB in 256 KiB free: over the count, not nofit: %d, nofit %llu, full %llu", err,
	      (unsigned long long)st.buf_nofit, (unsigned long long)st.full);

	err = add(rig.s, rig.o, 7, 3 * MAX + Q, Q);
	fetch_stage_stats_get(rig.s, &st);
	CHECK(err == 0 && (unsigned char *)rec[7].buf == base + 2 * Q && st.buf_free == 0 &&
		  st.buf_runs == 6 && st.buf_nofit == 1,
	      "256 KiB takes the run at 512 KiB: %d at %td, free %llu, runs %llu, nofit %llu", err,
	      err ? -1 : (unsigned char *)rec[7].buf - base, (unsigned long long)st.buf_free,
	      (unsigned long long)st.buf_runs, (unsigned long long)st.buf_nofit);

	rec[5].donefn(rec[5].arg, -EIO);
	/* a span whose read does not start: placed (the failed span's run at
	 * page 0, free again) and taken back, one more take of the lock; not
	 * counted staged */
	{
		struct fetch_stage_stats s0;
		struct cachetier_piece sub = {.off = 3 * MAX + 2 * Q, .len = Q};
		int e;

		fetch_stage_stats_get(rig.s, &s0);
		e = fetch__stage_add_via(rig.s, rig.o, sub.off, sub.off + Q, &sub, 1, &plan_id, 5,
					 0, fail_read, NULL);
		fetch_stage_stats_get(rig.s, &st);
		CHECK(e == -EIO && st.add_locks - s0.add_locks == 2 && st.pieces == s0.pieces &&
			  st.bytes == s0.bytes && st.now == s0.now && st.buf_free == Q &&
			  s0.buf_free == Q && st.full == s0.full,
		      "a span whose read did not start: %d, lock takes %llu, pieces %llu -> %llu, "
		      "bytes %llu -> %llu, memory %llu -> %llu, free %llu -> %llu",
		      e, (unsigned long long)(st.add_locks - s0.add_locks),
		      (unsigned long long)s0.pieces, (unsigned long long)st.pieces,
		      (unsigned long long)s0.bytes, (unsigned long long)st.bytes,
		      (unsigned long long)s0.now, (unsigned long long)st.now,
		      (unsigned long long)s0.buf_free, (unsigned long long)st.buf_free);
	}
	/* every add so far took the stage's lock once (8 spans placed or
	 * refused), the one whose read did not start twice */
	CHECK(st.add_locks == 8 + 2 && st.pieces == 6,
	      "the adds' takes of the stage's lock: %llu, want 10; pieces %llu, want 6",
	      (unsigned long long)st.add_locks, (unsigned long long)st.pieces);
	if (err == 0)
		rec[7].donefn(rec[7].arg, -EIO);
	stage_rig_close(&rig);
	free(buf);
	return test_end("stagenofit", tmpdir, seed);
}
