/*
 * fetch_rules.c — the store's fill rules (fetch.h: fetch_store_rules,
 * installed by fetch_new with cachetier_set_policy): which of the store's
 * queues the next fill comes from (rules_next: the order and the limits of
 * fills in flight), where a fill's run of units ends (rules_run: the
 * chunk), which planned ranges are small (rules_small), how many prefetch
 * fills (objects' cursors: `shardfs prefetch`, the warm-up, shards fetched
 * ahead; ranges: plans) run beside readers' fills, which stop part-way
 * for a reader, the slow start after readahead, and how much a reader's
 * miss fills (rules_miss_whole), whether a queued fill a reader waits for
 * is served as a miss (rules_promote), whether the object a reader reads
 * is prefetched first (rules_cursor_front), the cap of a reader's
 * readahead window (rules_window_max) and a decoder's (rules_decode_ahead),
 * whether a batch request with no room ends its call (rules_batch_unfit),
 * the share of the cache fills ahead may hold (rules_ahead_share); and
 * whether --warm auto warms a dataset
 * (fetch_warm_auto_fits). The store keeps the
 * counts and asks these with its lock held: they only compute.
 */
#include <limits.h>
#include <stdint.h>

#include "fetch_i.h"

/* No reader yet: every slot but one (rules_pf_max) at full parallelism. */
static void rules_start(struct cachetier_pf_counts *k)
{
	k->cap = k->small_fills + 1;
	k->quiet = k->fill_threads; /* no reader yet */
}

/* A reader's job: readers read (quiet counts again from 0); a readahead
 * job (a sequential reader streams) restarts the slow start at one. */
static void rules_reader_job(struct cachetier_pf_counts *k, int ra)
{
	k->quiet = 0;
	if (ra)
		k->cap = 1; /* rules_pf_max: the slow start after it */
}

/* The slow start: each prefetch fill that completes while no readahead
 * runs lets one more run (doubling per round of fills); quiet counts
 * them, up to fill_threads (a round: no reader is reading). */
static void rules_pf_ended(struct cachetier_pf_counts *k)
{
	if (!k->ra_busy && k->cap < k->small_fills + 1)
		k->cap++;
	if (k->quiet < k->fill_threads)
		k->quiet++;
}

/* Most prefetch fills in flight at once. While readers read (a demand or
 * readahead job was queued within the last round of prefetch fills:
 * quiet < fill_threads): all n fill slots but two (at least one), so that a
 * demand fill always finds a free slot and, with one slot more than
 * the backend's connections (as fs/ configures it), a free connection: a
 * reader's miss never waits for a prefetch fill to be withdrawn. With no
 * reader (a prefetch or a warm alone): all n slots but one, every
 * connection (leaving one idle cost 1/connections of the throughput: 0.83
 * of 8 x rate with 8 connections on tests/bench/link_bench.py's link); a
 * reader's first miss then withdraws one (rules_pf_yield). Less one for each
 * demand fill in flight, so that prefetch fills take only connections
 * readers leave idle (rules_pf_yield withdraws the ones readers need). None while readahead is
 * queued or in flight (a sequential reader streams), and then a slow start: cap starts again at one
 * and grows by one with each prefetch fill that completes (doubling per round of fills), so that a
 * reader reading what its readahead fetched does not share the machine with a full round of
 * prefetch fills at once, and a reader that keeps streaming stops them
 * again before they reach full parallelism.
 * rules_next asks for large prefetch fills (n = fill_threads: the store's
 * connections and one) and for all prefetch fills when those of small
 * planned ranges count too (n = small_fills + 1: its max_connections and
 * one). */
static unsigned rules_pf_max(const struct cachetier_pf_counts *k, unsigned n)
{
	int reading = k->quiet < k->fill_threads;
	unsigned m = reading ? (n > 2 ? n - 2 : 1) : (n > 1 ? n - 1 : 1);

	if (k->ra_busy)
		return 0;
	m = k->rd_inflight < m ? m - k->rd_inflight : 0;
	return m < k->cap ? m : k->cap;
}

/* Most fills of planned ranges in flight at once: rules_pf_max without the
 * slow start. A plan's ranges are its reader's next samples, not a
 * prefetch beside a streaming reader: restarting them at one after any
 * readahead (the mount's own index build leaves cap at 1) put each fill of
 * a planned cold epoch's first window a round trip behind the last, 1, 2,
 * 4, ... in flight over its first 250 ms, while its readers waited
 * (tests/bench/link_bench.py L8i: 26 of the epoch's 37 reads that waited,
 * 512 of its 709 ms). None still while readahead runs. */
static unsigned rules_range_max(const struct cachetier_pf_counts *k, unsigned n)
{
	struct cachetier_pf_counts u = *k;

	u.cap = UINT_MAX;
	return rules_pf_max(&u, n);
}

/* May the prefetch fill of slot s be withdrawn for a reader's job: one that
 * no reader waits for (its chunk is not pinned), not asked already (nor in
 * this call: stop), and of another object (a reader of that object wants
 * its prefetched chunks soon: a shard fetched ahead of an in-order reader). */
static int withdrawable(const struct cachetier_pf_slot *s, const uint8_t *stop)
{
	return s->inflight && s->pf && !s->same && !s->stopping && !*stop && !s->pinned;
}

/* Prefetch fills yield to readers, after a reader's job was queued
 * (ra: a readahead job).
 *  - A readahead job means a sequential reader streams: every prefetch
 *    fill in flight with less than half its chunk received stops, so the
 *    reader gets the connections and the link's (and this machine's)
 *    throughput at once; fills past half finish (stopping them would
 *    throw away more than it frees). Measured with tests/bench/link_bench.py
 *    (cat of a fresh mount while the warm runs): stopping only as many as
 *    the reader needs connections left the reader sharing the link with a
 *    full round of prefetch fills, at 0.6-0.8 of its speed without them.
 *  - Any job: when demand and readahead jobs wait for more connections than
 *    are free, prefetch fills stop (fewest bytes received first, so the
 *    least is fetched again) until they do not. Reader's fills are large
 *    (not small planned ranges), and the store runs
 *    at most fill_threads - 1 large transfers (its connections) and
 *    small_fills transfers in all (its max_connections): a connection is
 *    free for a reader when fewer large fills than the first and fewer
 *    fills than the second are in flight. So large prefetch fills stop
 *    while the large ones are too many, any prefetch fill while all are.
 *    Fills asked to stop count as free.
 * Only fills withdrawable allows are withdrawn. */
static void rules_pf_yield(const struct cachetier_pf_counts *k, const struct cachetier_pf_slot *s,
			   unsigned n, int ra, uint8_t *stop)
{
	unsigned conns = k->fill_threads > 1 ? k->fill_threads - 1 : 1;
	unsigned total = k->small_fills;
	uint64_t busy = 0, busy_large = 0;

	for (unsigned i = 0; i < n; i++) {
		if (ra && withdrawable(&s[i], &stop[i]) && s[i].got < s[i].len / 2)
			stop[i] = 1;
		if (s[i].inflight && !s[i].stopping && !stop[i]) {
			busy++;
			busy_large += !s[i].small;
		}
	}
	while (busy_large + k->rd_queued > conns || busy + k->rd_queued > total) {
		int large = busy_large + k->rd_queued > conns;
		const struct cachetier_pf_slot *best = NULL;
		unsigned at = 0;

		for (unsigned i = 0; i < n; i++) {
			if (!withdrawable(&s[i], &stop[i]) || (large && s[i].small))
				continue;
			if (!best || s[i].got < best->got ||
			    (s[i].got == best->got && s[i].seq > best->seq)) {
				best = &s[i];
				at = i;
			}
		}
		if (!best)
			return;
		stop[at] = 1;
		busy--;
		busy_large -= !best->small;
	}
}

/* A miss fills its whole chunk (one request, the chunk's other units with
 * it) when the reader streams or the chunk fits without evicting; else
 * (random reads of data that does not fit) only the units it reads. */
static int rules_miss_whole(int streams, uint64_t used, uint64_t chunk, uint64_t cache)
{
	return streams || used + chunk <= cache;
}

/* The next fill (the store's queues, cachetier_queue_heads): a reader's
 * miss first, then readahead, while fewer large fills than fill_threads
 * (the store's connections and one) are in flight; then the planned range
 * at the front of the ranges, within rules_range_max (no slow start) of a budget of
 * small_fills + 1 slots if its next fill is small, of fill_threads large
 * ones if not; then the prefetch cursor of the object at the front (the
 * one a reader read last), within rules_pf_max of fill_threads and while
 * fewer than cursor_fills (--prefetch-connections) large prefetch fills
 * run. A range that waits for a slot does not hold back a cursor's fill. */
static enum cachetier_queue rules_next(const struct cachetier_pf_counts *k,
				       const struct cachetier_queue_heads *q)
{
	unsigned large = q->fills_inflight - q->small_inflight;
	unsigned pf_large = q->pf_running - q->small_inflight;

	if (large < k->fill_threads && q->demand)
		return CACHETIER_Q_DEMAND;
	if (large < k->fill_threads && q->readahead)
		return CACHETIER_Q_READAHEAD;
	if (q->range > 0 && q->pf_running < rules_range_max(k, k->small_fills + 1))
		return CACHETIER_Q_RANGE;
	if (q->range == 0 && pf_large < rules_range_max(k, k->fill_threads))
		return CACHETIER_Q_RANGE;
	if (q->cursor && pf_large < rules_pf_max(k, k->fill_threads) &&
	    (!k->cursor_fills || pf_large < k->cursor_fills))
		return CACHETIER_Q_CURSOR;
	return CACHETIER_Q_NONE;
}

/* A fill never crosses a chunk (group units, the store's --chunk-size):
 * one request a chunk at most, so a fill's size is bounded and a reader
 * waits at most for one chunk's request. Every kind alike. */
static void rules_run(enum cachetier_fill_kind kind, uint32_t c, uint32_t group, uint32_t nunits,
		      uint32_t *lo, uint32_t *hi)
{
	uint32_t g0 = c - c % group, g1 = g0 + group;

	(void)kind;
	(void)nunits;
	if (*lo < g0)
		*lo = g0;
	if (*hi > g1)
		*hi = g1;
}

/* A planned range's fill of at most FETCH_SMALL_FILL_BYTES is small
 * (fetch_i.h: bound by the store's time to first byte, not its rate). */
static int rules_small(uint64_t len)
{
	return len <= FETCH_SMALL_FILL_BYTES;
}

/* The stage's admission (fetch_stage.c; fetch/README.md, "The stage"): a
 * planned span of len bytes whose bytes the cache can take only by
 * evicting (more than room, the bytes it could take now without evicting,
 * less what spans of the same batch were given, from its end: pfx_dest) is fetched into
 * the stage's memory and served from there, never written to the cache;
 * one that fits the room goes to the store (a later epoch then hits it).
 * A span whose every unit the cache holds already goes to the store,
 * which skips it (cached: 1). The one place this is decided. */
int fetch__rules_stage(uint64_t len, uint64_t room, int cached)
{
	return !cached && len > room;
}

/* A staged span is a small read as a planned range's fill is (rules_small). */
int fetch__rules_stage_small(uint64_t len)
{
	return rules_small(len);
}

/* A reader waits for a unit its readahead queued (it caught up with its
 * window): that fill is a miss now, served before the other readahead. */
static int rules_promote(enum cachetier_fill_kind kind)
{
	return kind == CACHETIER_FILL_READAHEAD;
}

/* What readers touch is prefetched first: the cursor of an object a
 * reader reads goes to the front (a `shardfs prefetch` of many objects
 * fetches the one being read before the others). */
static int rules_cursor_front(void)
{
	return 1;
}

/* The cap of a reader's readahead window: what was asked (--readahead),
 * at most an eighth of the cache (readahead into a small cache would
 * evict what it fetched, or what the reader is about to reach, before the
 * reader gets there) and at least one chunk (a window queues whole
 * chunks). */
static uint64_t rules_window_max(uint64_t asked, uint64_t chunk, uint64_t cache)
{
	if (asked > cache / 8)
		asked = cache / 8;
	return asked < chunk ? chunk : asked;
}

/* A decoder reads its compressed object whole and in order: the full
 * window at once, as a reader's stream from an object's start has it
 * (fetch_stream.c). */
static uint64_t rules_decode_ahead(uint64_t max)
{
	return max;
}

/* A batch request with no room (it would evict what is needed sooner)
 * ends its call: the requests come in plan order (fetch_batch_fill), so
 * every later one is needed later still. */
static int rules_batch_unfit(size_t g, size_t nreq)
{
	(void)g;
	(void)nreq;
	return 1;
}

/* Units filled ahead of their readers hold at most 1/FETCH_AHEAD_SHARE
 * of a full cache (fetch_i.h): the rest is the readers'. */
static uint64_t rules_ahead_share(uint64_t cache)
{
	return cache / FETCH_AHEAD_SHARE;
}

static const struct cachetier_policy fetch_rules = {
    .start = rules_start,
    .reader_job = rules_reader_job,
    .pf_ended = rules_pf_ended,
    .pf_yield = rules_pf_yield,
    .miss_whole = rules_miss_whole,
    .next = rules_next,
    .run = rules_run,
    .small = rules_small,
    .promote = rules_promote,
    .cursor_front = rules_cursor_front,
    .window_max = rules_window_max,
    .decode_ahead = rules_decode_ahead,
    .batch_unfit = rules_batch_unfit,
    .ahead_share = rules_ahead_share,
};

const struct cachetier_policy *fetch_store_rules(void)
{
	return &fetch_rules;
}

/* ---- the warm-up's rule (fetch.h) ---- */

uint64_t fetch_warm_auto_max(uint64_t cache_size)
{
	return cache_size / 100 * FETCH_WARM_AUTO_PERCENT;
}

int fetch_warm_auto_fits(uint64_t total, uint64_t cache_size, uint64_t disk, uint64_t used)
{
	return total <= fetch_warm_auto_max(cache_size) && total <= disk + used;
}
