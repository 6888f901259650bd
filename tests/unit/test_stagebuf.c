/*
 * test_stagebuf.c — the stage's buffers reused (fetch/fetch_stagebuf.c):
 * a read never gets a reused buffer's old bytes, a buffer lent to a reply
 * is never reused while held (a failed span's included), buffers are
 * page-aligned, and the stage's buffers and the pool's free ones together
 * stay within --plan-memory.
 *
 * A seeded run (TEST_SEED repeats one) of random steps on a stage of
 * 1 MiB over one object of random bytes: spans of 20-130 KiB staged in
 * free slots of the object (read into memory by this test: the bytes land
 * in steps, each followed by the watermark), reads and holds of bytes
 * below a span's watermark (read or lent: exact, page-aligned), holds
 * released later (their bytes compared again after every write of a
 * span's bytes and at the release: a buffer reused under a hold would
 * show another span's bytes), spans read whole
 * (freed), their read ended or failed (a failed span's reads fall back,
 * its buffer goes once no hold keeps it), a plan cleared (its spans
 * freed). After every step, against a model: the stage's memory exactly
 * the buffers of the spans that keep one (fetch__stagebuf_size each), and
 * it and the region's free bytes the region, within the stage. The
 * region's runs (fetch_stagebuf.c) against the model's: a span is staged
 * exactly when the runs the spans keep leave a gap of its buffer's size,
 * at the first such gap (first fit), else refused as no room and counted
 * (buf_nofit); at the end every staged span took a run and the region's
 * one 2 MiB chunk was faulted in once. The region is mapped at the first
 * span, not with the stage.
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

#define OBJ   (8u << 20)
#define SLOT  (256u * 1024)
#define NSLOT (OBJ / SLOT)
#define MAX   (1u << 20)
#define STEPS 30000
#define HOLDS 8
#define KEY   "s.tar"

static char tmpdir[256];
static unsigned char *data;
static uint64_t rs;

struct span {
	int used; /* the slot holds a span the stage has not let go */
	uint64_t off, len, written;
	int plan, cleared, done, failed, complete;
	unsigned holds;
	unsigned char *seen; /* bytes of its path read */
	struct mem_rec rd;   /* its read into memory (rec_read) */
};
static struct span sp[NSLOT];

struct hold {
	int slot;
	uint64_t a, b;
	char *ptr;
	void *ref;
};
static struct hold holds[HOLDS];
static int nholds;

static const int plan_ids[2]; /* plans: compared by address only */

static uint64_t rn(uint64_t n)
{
	return n ? rnd(&rs) % n : 0;
}

/* The model: does span x go now, does it keep its buffer? */
static void settle(struct span *x)
{
	if (x->used && (x->complete || x->cleared) && x->done && x->holds == 0) {
		x->used = 0;
		free(x->seen);
		x->seen = NULL;
	}
}

static int keeps_buf(const struct span *x)
{
	return x->used && !(x->failed && x->holds == 0);
}

/* The first gap of size bytes between the runs of the spans that keep a
 * buffer in the region [base, base + bytes); bytes: none. */
static size_t model_gap(const unsigned char *base, size_t bytes, size_t size)
{
	size_t at = 0;

	for (;;) {
		size_t next = at;

		for (unsigned i = 0; i < NSLOT; i++) {
			size_t a, b;

			if (!keeps_buf(&sp[i]))
				continue;
			a = (size_t)((unsigned char *)sp[i].rd.buf - base);
			b = a + fetch__stagebuf_size((size_t)sp[i].len, NULL);
			if (a < at + size && b > at && b > next)
				next = b; /* overlaps [at, at + size): past it */
		}
		if (next == at)
			return at + size <= bytes ? at : bytes;
		at = next;
	}
}

static uint64_t model_mem(void)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < NSLOT; i++)
		n += keeps_buf(&sp[i]) ? fetch__stagebuf_size((size_t)sp[i].len, NULL) : 0;
	return n;
}

static void note_read(struct span *x, uint64_t a, uint64_t b)
{
	uint64_t k;

	memset(x->seen + (a - x->off), 1, b - a);
	for (k = 0; k < x->len && x->seen[k]; k++)
		;
	x->complete = k == x->len;
}

static int release_one(int i, int step)
{
	struct hold h = holds[i];
	int ok = memcmp(h.ptr, data + h.a, h.b - h.a) == 0;

	CHECK(ok, "step %d: held bytes [%llu, %llu) still the object's at the release", step,
	      (unsigned long long)h.a, (unsigned long long)h.b);
	fetch_stage_release(h.ref);
	sp[h.slot].holds--;
	settle(&sp[h.slot]);
	holds[i] = holds[--nholds];
	return ok;
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "stagebuf", 20261130u);
	struct stage_rig rig;
	struct cachetier_obj *o;
	struct fetch *s;
	struct fetch_stage_stats st;
	uint64_t takes, pieces;
	unsigned char *buf = malloc(SLOT);
	uint64_t staged = 0, served = 0, wrong = 0, refused = 0, mem_bad = 0, nofit = 0;
	const unsigned char *base;
	size_t region;
	int err;

	rs = seed * 2654435761u + 1;
	stage_rig_open(&rig, tmpdir, KEY, OBJ, &rs, MAX);
	data = rig.data;
	s = rig.s;
	o = rig.o;
	if (!buf)
		FAIL("malloc");
	base = fetch__stage_region(s, &region);
	CHECK(!base && region == 0, "no region mapped before the stage's first span (%zu bytes)",
	      region);
	region = MAX;
	for (int step = 0; step < STEPS; step++) {
		unsigned k = (unsigned)rn(NSLOT);
		struct span *x = &sp[k];
		unsigned what = (unsigned)rn(100);

		if (what < 15) { /* stage a span in a free slot, if it fits */
			uint64_t len = 20 * 1024 + rn(110 * 1024);
			size_t size = fetch__stagebuf_size((size_t)len, NULL), gap;
			struct cachetier_piece sub;

			if (x->used || model_mem() + size > MAX)
				continue;
			gap = model_gap(base, region, size);
			memset(x, 0, sizeof(*x));
			x->off = (uint64_t)k * SLOT + rn(SLOT - len);
			x->len = len;
			x->written = 0;
			x->plan = (int)rn(2);
			x->seen = calloc(1, len);
			if (!x->seen)
				FAIL("calloc");
			sub = (struct cachetier_piece){.off = x->off, .len = len};
			fetch_stage_stats_get(s, &st);
			takes = st.add_locks;
			pieces = st.pieces;
			err = fetch__stage_add_via(s, o, x->off, x->off + len, &sub, 1,
						   &plan_ids[x->plan], 0, 0, rec_read, &x->rd);
			fetch_stage_stats_get(s, &st);
			CHECK(st.add_locks - takes == 1 && st.pieces - pieces == (err == 0),
			      "step %d: a span added (%d): %llu takes of the stage's lock, want 1; "
			      "%llu more pieces",
			      step, err, (unsigned long long)(st.add_locks - takes),
			      (unsigned long long)(st.pieces - pieces));
			CHECK(err == (gap < region ? 0 : -ENOSPC),
			      "step %d: a span of %llu bytes staged (a free run: %d): %d", step,
			      (unsigned long long)len, gap < region, err);
			if (err) {
				nofit++;
				free(x->seen);
				x->seen = NULL;
				continue;
			}
			if (!base) { /* mapped at the first span */
				base = fetch__stage_region(s, &region);
				CHECK(base && region == MAX && (uintptr_t)base % (2u << 20) == 0,
				      "the stage's region at its first span: %zu bytes at a 2 "
				      "MiB-aligned address",
				      region);
			}
			CHECK((unsigned char *)x->rd.buf == base + gap,
			      "step %d: the span's run at %zd, the first gap at %zu", step,
			      (unsigned char *)x->rd.buf - base, gap);
			x->used = 1;
			staged++;
		} else if (what < 40) { /* some of its bytes land */
			uint64_t n;

			if (!x->used || x->done || x->written == x->len)
				continue;
			n = rn(2) ? x->len - x->written : 1 + rn(x->len - x->written);
			memcpy((unsigned char *)x->rd.buf + x->written, data + x->off + x->written,
			       n);
			x->written += n;
			x->rd.progress(x->rd.arg, x->off + x->written);
			/* a buffer reused under a hold shows here */
			for (int i = 0; i < nholds; i++)
				wrong += memcmp(holds[i].ptr, data + holds[i].a,
						holds[i].b - holds[i].a) != 0;
		} else if (what < 75) { /* a read or a hold of bytes in */
			uint64_t a, b;
			char *ptr = NULL;
			void *ref = NULL;
			int got, want;

			if (!x->used || x->written == 0)
				continue;
			a = x->off + rn(x->written);
			b = a + 1 + rn(x->off + x->written - a);
			want = !x->failed;
			if (nholds < HOLDS && rn(3) == 0) {
				got = fetch_stage_hold(s, o, (size_t)(b - a), a, &ptr, &ref);
				if (got) {
					wrong += memcmp(ptr, data + a, b - a) != 0;
					CHECK(((uintptr_t)ptr - (a - x->off)) % 4096 == 0,
					      "step %d: a span's buffer page-aligned", step);
					holds[nholds++] = (struct hold){(int)k, a, b, ptr, ref};
					x->holds++;
				}
			} else {
				got = fetch_stage_read(s, o, buf, (size_t)(b - a), a);
				if (got)
					wrong += memcmp(buf, data + a, b - a) != 0;
			}
			CHECK(got == want, "step %d: [%llu, %llu) answered %d, want %d", step,
			      (unsigned long long)a, (unsigned long long)b, got, want);
			served += got;
			refused += !got;
			note_read(x, a, b);
			settle(x);
		} else if (what < 85) { /* its read ends, or fails */
			if (!x->used || x->done)
				continue;
			if (x->written == x->len && rn(8)) {
				x->rd.donefn(x->rd.arg, 0);
			} else if (x->written < x->len && rn(4)) {
				continue;
			} else {
				x->failed = 1;
				x->rd.donefn(x->rd.arg, -EIO);
			}
			x->done = 1;
			settle(x);
		} else if (what < 97) { /* a hold released */
			if (nholds && rn(3) == 0)
				release_one((int)rn((uint64_t)nholds), step);
		} else { /* a plan cleared: the other stays */
			int gone = (int)rn(2);
			void *keep[1] = {(void *)&plan_ids[!gone]};

			fetch__stage_plans(s, keep, 1);
			for (unsigned i = 0; i < NSLOT; i++) {
				if (sp[i].used && sp[i].plan == gone) {
					sp[i].cleared = 1;
					settle(&sp[i]);
				}
			}
		}
		fetch_stage_stats_get(s, &st);
		if ((st.now != model_mem() || st.now + st.buf_free != region ||
		     st.buf_nofit != nofit) &&
		    mem_bad++ < 5)
			fprintf(stderr,
				"step %d: stage memory %llu (model %llu), the region's free bytes "
				"%llu, its %zu? %llu refused for no run (model %llu)\n",
				step, (unsigned long long)st.now, (unsigned long long)model_mem(),
				(unsigned long long)st.buf_free, region,
				(unsigned long long)st.buf_nofit, (unsigned long long)nofit);
	}
	CHECK(mem_bad == 0,
	      "%llu steps where the stage's memory was not the model's or beyond the stage",
	      (unsigned long long)mem_bad);
	while (nholds)
		release_one(0, STEPS);
	fetch_stage_stats_get(s, &st);
	printf("stagebuf: %llu spans staged, %llu refused for no run, %llu reads served, %llu "
	       "fallbacks, %llu runs, %llu chunks faulted in, %llu failed\n",
	       (unsigned long long)staged, (unsigned long long)nofit, (unsigned long long)served,
	       (unsigned long long)refused, (unsigned long long)st.buf_runs,
	       (unsigned long long)st.buf_chunks, (unsigned long long)st.failed);
	CHECK(wrong == 0, "%llu reads got bytes not the object's", (unsigned long long)wrong);
	CHECK(staged > 500 && served > 1000, "%llu spans staged, %llu reads served",
	      (unsigned long long)staged, (unsigned long long)served);
	CHECK(st.buf_runs == staged && st.buf_chunks == 1 && nofit > 0,
	      "a run for each of %llu spans staged (%llu), the region's chunk faulted in once "
	      "(%llu), some refused for no run (%llu)",
	      (unsigned long long)staged, (unsigned long long)st.buf_runs,
	      (unsigned long long)st.buf_chunks, (unsigned long long)nofit);
	for (unsigned i = 0; i < NSLOT; i++) {
		if (sp[i].used && !sp[i].done)
			sp[i].rd.donefn(sp[i].rd.arg, -EIO);
		free(sp[i].seen);
	}
	stage_rig_close(&rig);
	free(buf);
	return test_end("stagebuf", tmpdir, seed);
}
