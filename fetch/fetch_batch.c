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
 * for fewer HEADs: their readers get there later). Pure but for the
 * store's call; any thread but the store's I/O thread.
 */
#include <errno.h>
#include <stdlib.h>

#include "fetch_i.h"

/* A request of its own (a thread in the store) only for this many bytes or
 * more: a smaller one costs a time to first byte for little. */
#define FETCH_BATCH_REQ_MIN (1u << 20)

size_t fetch_batch_split(const struct cachetier_batch_piece *p, size_t n, unsigned par,
			 size_t *ends)
{
	uint64_t total = 0, want;
	size_t k, g = 0;

	par = par ? par : 1;
	/* the planned bytes of objects with a unit store (others fetch nothing) */
	for (size_t i = 0; i < n; i++) {
		if (p[i].o && cachetier_obj_chunk_bytes(p[i].o) > 0)
			total += p[i].len;
	}
	k = total / FETCH_BATCH_REQ_MIN < par ? (size_t)(total / FETCH_BATCH_REQ_MIN) : par;
	k = k ? k : 1;
	want = (total + k - 1) / k;
	for (size_t i = 0; i < n; g++) {
		size_t j = i;
		uint64_t acc = 0;

		/* the last request takes the rest */
		for (; j < n && (acc < want || g + 1 >= k); j++)
			acc += p[j].o && cachetier_obj_chunk_bytes(p[j].o) > 0 ? p[j].len : 0;
		ends[g] = j;
		i = j;
	}
	return g;
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
