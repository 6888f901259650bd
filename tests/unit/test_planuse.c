/*
 * test_planuse.c — who a planned read's marks go to again (fs/core/fs_plan_use.c:
 * fs_plan__use_first, fs_plan__use_each) against a reference model, the walk
 * a read made before (a binary search from the start of p->byoff at every
 * read), on seeded generated plans (TEST_SEED repeats a run; ROUNDS rounds).
 *
 * Each round builds a plan of extents over a few objects (offsets and
 * lengths of samples and of odd sizes, a tar header before some, some
 * decoded, some empty, a path planned twice, extents overlapping) and a
 * random set of extents read, indexes it as a publish does
 * (fs_plan__use_index), and checks:
 *   - p->rank is the inverse of p->byoff;
 *   - for ranges [lo, hi) of an object (a unit-aligned range around an
 *     extent, as a read's; any range; objects with no extent), from every
 *     kind of hint (the extent's own place as a read gives it, any place,
 *     none): the first place is the reference's, and the extents called
 *     back are the reference's, in its order (the marks are made in that
 *     order; a mark keeps the nearest use, so the same calls give the same
 *     marks).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_plan_i.h"
#include "check.h"
#include "test_rng.h"

#define ROUNDS	   300
#define QUERIES	   400
#define UNIT	   65536u
#define MAX_CALLED 4096

static uint64_t rng; /* test_rng.h's state, from the seed */

/* ---- the reference: the walk before rank (a copy, kept as it was) ---- */

static int ref_range(const struct fs_plan_extent *x, uint64_t *off, uint64_t *len)
{
	uint64_t hdr = x->flags & FS_PLAN_HEADER ? 512 : 0;

	if (x->flags & FS_PLAN_DECODED)
		return 0;
	*off = x->off - hdr;
	*len = x->len + hdr;
	return *len > 0;
}

static uint64_t ref_start(const struct fs_plan_extent *x)
{
	uint64_t off, len;

	return ref_range(x, &off, &len) ? off : x->off;
}

static uint32_t ref_first(const struct fs_plan *p, uint32_t obj, uint64_t lo)
{
	uint32_t a = 0, b = p->n;

	while (a < b) {
		uint32_t m = a + (b - a) / 2;
		const struct fs_plan_extent *x = &p->ext[p->byoff[m]];

		if (x->obj < obj || (x->obj == obj && ref_start(x) < lo))
			a = m + 1;
		else
			b = m;
	}
	return a;
}

static size_t ref_each(const struct fs_plan *p, uint32_t obj, uint64_t lo, uint64_t hi,
		       uint32_t *out)
{
	uint32_t a = ref_first(p, obj, lo);
	size_t n = 0;

	for (uint32_t k = a; k-- > 0;) {
		const struct fs_plan_extent *x = &p->ext[p->byoff[k]];
		uint64_t off, len;

		if (x->obj != obj || !ref_range(x, &off, &len) || off + len <= lo)
			break;
		if (!atomic_load(&p->done[p->byoff[k]]) && n < MAX_CALLED)
			out[n++] = p->byoff[k];
	}
	for (uint32_t k = a; k < p->n; k++) {
		const struct fs_plan_extent *x = &p->ext[p->byoff[k]];

		if (x->obj != obj || ref_start(x) >= hi)
			break;
		if (!atomic_load(&p->done[p->byoff[k]]) && n < MAX_CALLED)
			out[n++] = p->byoff[k];
	}
	return n;
}

/* ---- the code's calls, collected ---- */

struct called {
	uint32_t v[MAX_CALLED];
	size_t n;
};

static void collect(void *ctx, uint32_t i)
{
	struct called *c = ctx;

	if (c->n < MAX_CALLED)
		c->v[c->n++] = i;
}

/* A generated plan: n extents over nobj objects. */
static struct fs_plan *gen_plan(uint32_t n, uint32_t nobj)
{
	struct fs_plan *p = calloc(1, sizeof(*p));

	if (!p)
		FAIL("out of memory");
	p->n = n;
	p->ext = calloc(n ? n : 1, sizeof(*p->ext));
	p->done = calloc(n ? n : 1, sizeof(*p->done));
	if (!p->ext || !p->done)
		FAIL("out of memory");
	for (uint32_t i = 0; i < n; i++) {
		struct fs_plan_extent *x = &p->ext[i];
		uint32_t kind = rnd_n(&rng, 16);

		if (i > 0 && kind == 0) { /* a path planned again */
			*x = p->ext[rnd_n(&rng, i)];
		} else {
			x->obj = rnd_n(&rng, nobj);
			x->key = ((uint64_t)x->obj << 32) | i;
			/* samples of about 100 KB one after another, or anywhere */
			x->off = 512 + (uint64_t)rnd_n(&rng, 64) * 102912u;
			if (kind < 4)
				x->off = 512 + rnd_n(&rng, 8u << 20);
			x->len = kind == 5 ? 0 : kind < 8 ? rnd_n(&rng, 3 * UNIT) : 100000u;
			x->flags = rnd_n(&rng, 2) ? FS_PLAN_HEADER : 0;
			if (kind == 7)
				x->flags = FS_PLAN_DECODED;
		}
		atomic_store(&p->done[i], rnd_n(&rng, 3) == 0);
	}
	if (fs_plan__use_index(p) < 0)
		FAIL("out of memory");
	return p;
}

static void free_plan(struct fs_plan *p)
{
	free(p->ext);
	free((void *)p->done);
	free(p->byoff);
	free(p->rank);
	free(p);
}

static void check_one(const struct fs_plan *p, int round, uint32_t obj, uint64_t lo, uint64_t hi,
		      uint32_t at, const char *what)
{
	static uint32_t want[MAX_CALLED];
	static struct called got;
	uint32_t f = fs_plan__use_first(p, obj, lo, at), rf = ref_first(p, obj, lo);
	size_t wn = ref_each(p, obj, lo, hi, want);

	CHECK(f == rf,
	      "round %d (%s): first of (%" PRIu32 ", %" PRIu64 ") from %" PRIu32 ": %" PRIu32
	      ", the reference %" PRIu32,
	      round, what, obj, lo, at, f, rf);
	got.n = 0;
	fs_plan__use_each(p, obj, lo, hi, at, collect, &got);
	CHECK(got.n == wn && memcmp(got.v, want, wn * sizeof(*want)) == 0,
	      "round %d (%s): [%" PRIu64 ", %" PRIu64 ") of %" PRIu32 " from %" PRIu32
	      ": %zu extents called, the reference %zu (or another order)",
	      round, what, lo, hi, obj, at, got.n, wn);
}

int main(void)
{
	const char *env = getenv("TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 10) : 20261202u; /* fixed in CI */
	uint64_t called = 0;

	printf("seed %llu (set TEST_SEED to repeat)\n", (unsigned long long)seed);
	rng = seed * 2654435761u + 1;
	for (int round = 0; round < ROUNDS; round++) {
		/* a few tiny plans, most of a few hundred to a few thousand paths */
		uint32_t n = round < 10 ? (uint32_t)round : 1 + rnd_n(&rng, 3000);
		uint32_t nobj = 1 + rnd_n(&rng, round % 3 == 0 ? 2 : 40);
		struct fs_plan *p = gen_plan(n, nobj);
		int inv = 1;

		for (uint32_t k = 0; k < n; k++)
			inv &= p->byoff[k] < n && p->rank[p->byoff[k]] == k;
		CHECK(inv, "round %d: rank is not byoff's inverse", round);
		for (int q = 0; q < QUERIES; q++) {
			uint32_t i = n ? rnd_n(&rng, n) : 0, obj, at;
			uint64_t lo, hi;

			if (n && q % 4 != 3) { /* a read of extent i: its units */
				const struct fs_plan_extent *x = &p->ext[i];
				uint64_t s = ref_start(x), e = x->off + x->len;

				obj = x->obj;
				lo = s / UNIT * UNIT + (q % 4 == 1 ? UNIT : 0); /* out of order */
				hi = (e + UNIT - 1) / UNIT * UNIT;
				if (hi <= lo)
					hi = lo + UNIT;
				at = q % 4 == 2 ? rnd_n(&rng, n) : p->rank[i];
				check_one(p, round, obj, lo, hi, at, "a read's");
				check_one(p, round, obj, lo, hi, UINT32_MAX, "a read's, no hint");
			} else { /* anywhere, objects without extents too */
				obj = rnd_n(&rng, nobj + 2);
				lo = rnd_n(&rng, 9u << 20);
				hi = lo + rnd_n(&rng, 4 * UNIT);
				at = rnd_n(&rng, 3) ? rnd_n(&rng, n + 1) : UINT32_MAX;
				check_one(p, round, obj, lo, hi, at, "any range");
			}
		}
		for (uint32_t k = 0; k < n; k++) /* every extent's own read */
			check_one(p, round, p->ext[k].obj, ref_start(&p->ext[k]) / UNIT * UNIT,
				  (p->ext[k].off + p->ext[k].len) / UNIT * UNIT + UNIT, p->rank[k],
				  "each extent");
		called += n;
		free_plan(p);
	}
	printf("extents: %" PRIu64 "\n", called);
	return check_summary("planuse");
}
