/*
 * fetch_batch.c — GetBatch windows (fetch.h: fetch_batch_fill): how a
 * window of a reading plan (the planner's batch, fetch_planner.c) is split
 * into the store's batch requests. The store claims, fetches, confirms and
 * publishes each request (cachetier_batch_fill); the scheduler decides the
 * requests: at most par of about equal planned bytes, at least
 * FETCH_BATCH_REQ_MIN each, each a stretch of the plan's order (a reader
 * of the window's start waits for the first only). The first is urgent
 * (cachetier_batch_fill): it sends its version HEADs at once, where the
 * later ones share HEADs with other requests (at most a round trip later,
 * for fewer HEADs: their readers get there later). A window's staged
 * spans (fetch__batch_mem_run) go as one window of the same requests
 * (cachetier_batch_read_mem: one HEAD per object of the window and per
 * object of its first request, none
 * urgent, none shared). Pure but for the store's call; any thread but the
 * store's I/O thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "fetch_i.h"

/* A request of its own only for this many bytes or more: a smaller one
 * costs a time to first byte for little. */
#define FETCH_BATCH_REQ_MIN (1u << 20)

/* The planned bytes of element i of a window's array (0: its object has
 * no unit store and fetches nothing). */
typedef uint64_t (*batch_bytes_fn)(const void *a, size_t i);

/* The split of n elements (fetch_batch_split's rule), over any array: the
 * window's pieces or a staged window's items, as they are. */
static size_t batch_split(const void *a, size_t n, batch_bytes_fn bytes, unsigned par, size_t *ends)
{
	uint64_t total = 0, want;
	size_t k, g = 0;

	par = par ? par : 1;
	for (size_t i = 0; i < n; i++)
		total += bytes(a, i);
	k = total / FETCH_BATCH_REQ_MIN < par ? (size_t)(total / FETCH_BATCH_REQ_MIN) : par;
	k = k ? k : 1;
	want = (total + k - 1) / k;
	for (size_t i = 0; i < n; g++) {
		size_t j = i;
		uint64_t acc = 0;

		/* the last request takes the rest */
		for (; j < n && (acc < want || g + 1 >= k); j++)
			acc += bytes(a, j);
		ends[g] = j;
		i = j;
	}
	return g;
}

static uint64_t piece_bytes(const void *a, size_t i)
{
	const struct cachetier_batch_piece *p = (const struct cachetier_batch_piece *)a + i;

	return p->o && cachetier_obj_chunk_bytes(p->o) > 0 ? p->len : 0;
}

static uint64_t item_bytes(const void *a, size_t i)
{
	const struct cachetier_batch_mem *it = (const struct cachetier_batch_mem *)a + i;

	return it->o && cachetier_obj_chunk_bytes(it->o) > 0 ? it->len : 0;
}

size_t fetch_batch_split(const struct cachetier_batch_piece *p, size_t n, unsigned par,
			 size_t *ends)
{
	return batch_split(p, n, piece_bytes, par, ends);
}

int fetch_batch_fill(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
		     unsigned par)
{
	size_t *ends, nreq;
	int err;

	par = par ? par : 1;
	if (n == 0)
		return 0;
	ends = calloc(par, sizeof(*ends));
	if (!ends)
		return -ENOMEM;
	nreq = fetch_batch_split(p, n, par, ends);
	err = cachetier_batch_fill(ct, p, n, ends, nreq, par, 1);
	free(ends);
	return err;
}

int fetch__batch_mem_add(void *ctx, struct cachetier_obj *o, uint64_t off, size_t len, void *buf,
			 cachetier_mem_progress_fn progress, cachetier_mem_done_fn done, void *arg)
{
	struct fetch_batch_mem *bm = ctx;

	if (!cachetier_obj_can_read_mem(o))
		return -EOPNOTSUPP;
	if (bm->n == bm->cap) {
		size_t nc = bm->cap ? 2 * bm->cap : 64;
		struct cachetier_batch_mem *a = realloc(bm->it, nc * sizeof(*a));

		if (!a)
			return -ENOMEM;
		bm->it = a;
		bm->cap = nc;
	}
	bm->it[bm->n++] = (struct cachetier_batch_mem){.o = o,
						       .off = off,
						       .len = len,
						       .buf = buf,
						       .progress = progress,
						       .done = done,
						       .arg = arg};
	return 0;
}

int fetch__batch_mem_run(struct cachetier *ct, struct fetch_batch_mem *bm, unsigned par)
{
	size_t *ends, nreq;
	int ret;

	par = par ? par : 1;
	if (bm->n == 0)
		return 0;
	ends = calloc(par, sizeof(*ends));
	if (!ends) {
		ret = -ENOMEM;
	} else { /* split over the items themselves (no copy); one window */
		nreq = batch_split(bm->it, bm->n, item_bytes, par, ends);
		ret = cachetier_batch_read_mem(ct, bm->it, bm->n, ends, nreq, par);
	}
	/* not handed over: each read ends (the stage's reads of it go the
	 * ordinary way) */
	for (size_t i = 0; ret < 0 && ret != -EOPNOTSUPP && i < bm->n; i++)
		bm->it[i].done(bm->it[i].arg, ret);
	free(ends);
	bm->n = 0;
	return ret;
}
