/*
 * fetch_plan.c — a reading plan's lookahead (fetch.h: fetch_plan_lookahead):
 * as far ahead as the link needs to keep every connection busy, within what
 * the cache can hold ahead of the readers, at most --plan-lookahead; the
 * whole rule is written in fs/core/fs_plan_fetch.c's opening comment, whose
 * fetcher asks it. Pure: no state, any thread.
 */
#include <stdint.h>

#include "fetch.h"

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* a x b / c (c > 0), exact while the result and the remainder's product
 * fit in 64 bits, saturated past them. */
static uint64_t mul_div(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t q = a / c, r = a % c, rb;

	if (r == 0 || b <= UINT64_MAX / r)
		rb = r * b / c;
	else
		rb = (uint64_t)((double)r * (double)b / (double)c); /* < b: no overflow */
	return add_sat(mul_sat(q, b), rb);
}

/* The bytes in flight that keep every connection busy: each connection's
 * request waits a time to first byte, then moves a sample, so a
 * connection holds rate x (ttfb + sample / rate) = rate x ttfb + sample
 * bytes in flight; gap stands in for rate x ttfb until both are measured
 * (the floor: --plan-gap, as for the gap itself). The one place the
 * connections count: in->connections (pfx_connections). */
static uint64_t plan_inflight(const struct fetch_plan_sizing *in)
{
	uint64_t bdp = in->gap;

	if (in->rate > 0 && in->ttfb_ns > 0) {
		double d = (double)in->rate * (double)in->ttfb_ns / 1e9;

		bdp = d >= 1.8e19 ? UINT64_MAX : (uint64_t)d;
	}
	return mul_sat(in->connections ? in->connections : 1, add_sat(bdp, in->sample));
}

void fetch_plan_lookahead(const struct fetch_plan_sizing *in, struct fetch_plan_lookahead *out)
{
	unsigned plans = in->plans ? in->plans : 1;
	uint64_t room = in->cache > in->pinned ? in->cache - in->pinned : 0;
	uint64_t cost = add_sat(in->sample, in->unit);

	out->inflight = plan_inflight(in);
	out->link = mul_sat(out->inflight, FETCH_PLAN_SAFETY) / plans;
	out->ceiling = in->ceiling / plans;
	if (room > in->ahead_max)
		room = in->ahead_max;
	room = room > in->held ? room - in->held : 0;
	out->cache = cost ? mul_div(room, in->sample, cost) : 0;
	if (in->stage) /* planned bytes the cache cannot keep go to the stage */
		out->cache = mul_div(in->stage, FETCH_PLAN_STAGE_NUM, FETCH_PLAN_STAGE_DEN) / plans;
	out->bytes = out->link;
	out->bound = FETCH_PLAN_BOUND_LINK;
	if (out->ceiling < out->bytes) {
		out->bytes = out->ceiling;
		out->bound = FETCH_PLAN_BOUND_CEILING;
	}
	if (out->cache < out->bytes) {
		out->bytes = out->cache;
		out->bound = FETCH_PLAN_BOUND_CACHE;
	}
}

uint64_t fetch_plan_held(uint64_t unread, uint64_t sample, uint64_t la, uint64_t handed,
			 uint32_t unit)
{
	uint64_t bytes = mul_sat(unread, sample);

	if (sample == 0)
		return 0;
	if (bytes > la / 2)
		bytes = la / 2;
	bytes = add_sat(bytes, handed);
	return mul_div(bytes, add_sat(sample, unit), sample);
}
