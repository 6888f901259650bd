/*
 * test_planla.c — the plan fetcher's lookahead (fetch/fetch_plan.c
 * fetch_plan_lookahead) from given inputs: a link as measured (or not yet),
 * connections, the plan's mean path, the cache and what readers pin and the
 * plans hold, --plan-lookahead. Exact outputs, each bound deciding once:
 * the floor before the link is measured, the link's need, --plan-lookahead,
 * the cache after what readers pin, the half of it fills ahead may hold,
 * what the plans hold; a stage (--plan-memory) in place of the cache's
 * bound; saturation instead of overflow. And the store's
 * rule that starts a plan's fills (fetch/fetch_rules.c rules_next): how many
 * fills of planned ranges and of prefetch cursors it lets run at once after
 * a readahead, exactly, and the cursors' own bound (--prefetch-connections).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "cachetier.h"
#include "fetch.h"
#include "check.h"

#define MiB (1ull << 20)

/* The emulated link of tests/bench (60 MB/s a connection, 30 ms to first
 * byte), 32 connections, samples of 100,000 bytes, one plan, the default
 * --plan-gap and --plan-lookahead, a cache of 1 GiB that holds nothing,
 * units of 64 KiB. */
static struct fetch_plan_sizing base(void)
{
	struct fetch_plan_sizing in = {
	    .rate = 60000000,
	    .ttfb_ns = 30000000,
	    .gap = 256 * 1024,
	    .connections = 32,
	    .sample = 100000,
	    .plans = 1,
	    .ceiling = 256 * MiB,
	    .cache = 1024 * MiB,
	    .pinned = 0,
	    .ahead_max = 512 * MiB,
	    .held = 0,
	    .unit = 65536,
	};
	return in;
}

static void expect(const char *what, const struct fetch_plan_sizing *in, uint64_t inflight,
		   uint64_t link, uint64_t ceiling, uint64_t cache, uint64_t bytes,
		   enum fetch_plan_bound bound)
{
	struct fetch_plan_lookahead la;

	fetch_plan_lookahead(in, &la);
	CHECK(la.inflight == inflight, "%s: inflight %" PRIu64 ", want %" PRIu64, what, la.inflight,
	      inflight);
	CHECK(la.link == link, "%s: link %" PRIu64 ", want %" PRIu64, what, la.link, link);
	CHECK(la.ceiling == ceiling, "%s: ceiling %" PRIu64 ", want %" PRIu64, what, la.ceiling,
	      ceiling);
	CHECK(la.cache == cache, "%s: cache %" PRIu64 ", want %" PRIu64, what, la.cache, cache);
	CHECK(la.bytes == bytes, "%s: bytes %" PRIu64 ", want %" PRIu64, what, la.bytes, bytes);
	CHECK(la.bound == bound, "%s: bound %d, want %d", what, (int)la.bound, (int)bound);
}

/* Fills the rules let start one after another, none ending, from kind's
 * queue alone (range: 1 its fills small, 0 large, -1 a cursor's instead);
 * k as the store keeps it. */
static unsigned starts(const struct cachetier_policy *p, struct cachetier_pf_counts k, int range)
{
	struct cachetier_queue_heads q = {.range = (int8_t)range, .cursor = range < 0};
	unsigned n = 0;

	while (n < 1000 && p->next(&k, &q) != CACHETIER_Q_NONE) {
		q.fills_inflight++;
		q.pf_running++;
		q.small_inflight += range > 0;
		n++;
	}
	return n;
}

/* The counts of --connections 32 (fill_threads 33) and --max-connections
 * 128 (small_fills 128). After a readahead job (the mount's index build, or
 * any sequential reader), prefetch cursors restart at one fill and grow by
 * one per fill that ends (the slow start); a plan's ranges do not: 127
 * small fills (all slots but two while readers read) and 31 large ones at
 * once. Before this rule the ranges too started at 1. */
static void test_rules_ranges(void)
{
	const struct cachetier_policy *p = fetch_store_rules();
	struct cachetier_pf_counts k = {.fill_threads = 33, .small_fills = 128};
	unsigned small, large, cursor;

	p->start(&k);
	CHECK(starts(p, k, 1) == 128 && starts(p, k, 0) == 32 && starts(p, k, -1) == 32,
	      "no reader yet: %u small ranges, %u large, %u cursor fills, want 128, 32, 32",
	      starts(p, k, 1), starts(p, k, 0), starts(p, k, -1));
	p->reader_job(&k, 1); /* a readahead job: the slow start */
	small = starts(p, k, 1);
	large = starts(p, k, 0);
	cursor = starts(p, k, -1);
	printf("rules after a readahead: %u small range fills, %u large, %u cursor fills\n", small,
	       large, cursor);
	CHECK(small == 127, "after a readahead: %u small range fills at once, want 127", small);
	CHECK(large == 31, "after a readahead: %u large range fills at once, want 31", large);
	CHECK(cursor == 1, "after a readahead: %u cursor fills at once, want 1 (slow start)",
	      cursor);
	p->pf_ended(&k);
	CHECK(starts(p, k, -1) == 2, "one prefetch fill ended: %u cursor fills, want 2",
	      starts(p, k, -1));
	k.ra_busy = 1; /* readahead in flight: no prefetch fill at all */
	CHECK(starts(p, k, 1) == 0 && starts(p, k, -1) == 0,
	      "readahead in flight: %u range and %u cursor fills, want 0", starts(p, k, 1),
	      starts(p, k, -1));
}

/* --prefetch-connections 16 (cursor_fills) with --connections 32: a
 * prefetch cursor starts at most 16 fills, before any reader and after the
 * slow start has grown past 16; the ranges keep 32 large and 128 small;
 * large range fills in flight count against the cursors' 16. 0: the
 * cursors as the ranges (31-32). */
static void test_rules_cursor_bound(void)
{
	const struct cachetier_policy *p = fetch_store_rules();
	struct cachetier_pf_counts k = {.fill_threads = 33, .small_fills = 128, .cursor_fills = 16};
	struct cachetier_queue_heads q = {
	    .range = -1, .cursor = 1, .fills_inflight = 10, .pf_running = 10};

	p->start(&k);
	CHECK(starts(p, k, -1) == 16, "--prefetch-connections 16: %u cursor fills, want 16",
	      starts(p, k, -1));
	CHECK(starts(p, k, 1) == 128 && starts(p, k, 0) == 32,
	      "--prefetch-connections 16: %u small and %u large range fills, want 128 and 32",
	      starts(p, k, 1), starts(p, k, 0));
	p->reader_job(&k, 1); /* the slow start: 1, then one more a fill ended */
	for (int i = 0; i < 40; i++)
		p->pf_ended(&k);
	CHECK(starts(p, k, -1) == 16, "slow start grown: %u cursor fills, want 16",
	      starts(p, k, -1));
	k.cursor_fills = 16;
	p->start(&k);
	CHECK(p->next(&k, &q) == CACHETIER_Q_CURSOR, "10 large prefetch fills: no cursor fill");
	q.fills_inflight = q.pf_running = 16;
	CHECK(p->next(&k, &q) == CACHETIER_Q_NONE,
	      "16 large prefetch fills (ranges or cursors): a cursor's fill started");
	k.cursor_fills = 0;
	CHECK(starts(p, k, -1) == 32, "no cursor bound: %u cursor fills, want 32",
	      starts(p, k, -1));
}

int main(void)
{
	test_rules_ranges();
	test_rules_cursor_bound();
	struct fetch_plan_sizing in;
	struct fetch_plan_lookahead la;

	/* measured: 60 MB/s x 30 ms = 1.8 MB a connection waits for, plus the
	 * sample it moves: 32 x 1,900,000 in flight, x 4; the cache's bound:
	 * half of 1 GiB x 100,000 / (100,000 + 65,536) */
	in = base();
	expect("the link's need", &in, 60800000, 243200000, 268435456, 324322752, 243200000,
	       FETCH_PLAN_BOUND_LINK);

	/* before the link is measured: --plan-gap stands in for rate x ttfb */
	in = base();
	in.rate = 0;
	in.ttfb_ns = 0;
	expect("the floor, nothing measured", &in, 32ull * (262144 + 100000),
	       4ull * 32 * (262144 + 100000), 268435456, 324322752, 46354432,
	       FETCH_PLAN_BOUND_LINK);
	/* a time to first byte without a rate (every fill under 1 MiB) is not a
	 * measurement of the link either */
	in.ttfb_ns = 30000000;
	expect("the floor, no rate yet", &in, 11588608, 46354432, 268435456, 324322752, 46354432,
	       FETCH_PLAN_BOUND_LINK);
	/* --plan-gap 0: the samples alone */
	in.gap = 0;
	expect("the floor, --plan-gap 0", &in, 3200000, 12800000, 268435456, 324322752, 12800000,
	       FETCH_PLAN_BOUND_LINK);

	/* --plan-lookahead below the link's need */
	in = base();
	in.ceiling = 128 * MiB;
	expect("--plan-lookahead", &in, 60800000, 243200000, 134217728, 324322752, 134217728,
	       FETCH_PLAN_BOUND_CEILING);

	/* a cache of 250 MiB (a quarter of 1 GB of data): fills ahead may hold
	 * half of it, 131,072,000 cache bytes, 79,180,359 planned bytes */
	in = base();
	in.cache = 250 * MiB;
	in.ahead_max = 125 * MiB;
	expect("half the cache", &in, 60800000, 243200000, 268435456, 79180359, 79180359,
	       FETCH_PLAN_BOUND_CACHE);
	/* readers pin 200 MiB: 50 MiB left */
	in.pinned = 200 * MiB;
	expect("the cache minus what readers pin", &in, 60800000, 243200000, 268435456, 31672143,
	       31672143, FETCH_PLAN_BOUND_CACHE);
	in.pinned = 300 * MiB;
	expect("readers pin more than the cache", &in, 60800000, 243200000, 268435456, 0, 0,
	       FETCH_PLAN_BOUND_CACHE);

	/* two plans: the link and the ceiling are split; the other plan holds
	 * 100 MiB of the 125 MiB fills ahead may hold */
	in = base();
	in.cache = 250 * MiB;
	in.ahead_max = 125 * MiB;
	in.plans = 2;
	in.held = 100 * MiB;
	expect("two plans, the other holding 100 MiB", &in, 60800000, 121600000, 134217728,
	       15836071, 15836071, FETCH_PLAN_BOUND_CACHE);
	in.held = 130 * MiB;
	expect("two plans, the other holding it all", &in, 60800000, 121600000, 134217728, 0, 0,
	       FETCH_PLAN_BOUND_CACHE);
	in.held = 0;
	in.cache = 1024 * MiB;
	in.ahead_max = 512 * MiB;
	expect("two plans in a big cache", &in, 60800000, 121600000, 134217728, 324322752,
	       121600000, FETCH_PLAN_BOUND_LINK);

	/* a stage (--plan-memory 64M): the cache's bound is half the stage over
	 * the plans, whatever the cache holds (a quarter-size cache, readers
	 * pinning most of it, the other plan holding the rest) */
	in = base();
	in.cache = 250 * MiB;
	in.ahead_max = 125 * MiB;
	in.pinned = 200 * MiB;
	in.stage = 64 * MiB;
	expect("a stage of 64 MiB", &in, 60800000, 243200000, 268435456, 33554432, 33554432,
	       FETCH_PLAN_BOUND_CACHE);
	in.plans = 2;
	in.held = 130 * MiB;
	expect("a stage of 64 MiB, two plans", &in, 60800000, 121600000, 134217728, 16777216,
	       16777216, FETCH_PLAN_BOUND_CACHE);
	in.stage = 1024 * MiB;
	expect("a stage past the link's need", &in, 60800000, 121600000, 134217728, 268435456,
	       121600000, FETCH_PLAN_BOUND_LINK);

	/* 0 connections work as 1; a plan of empty paths fetches nothing */
	in = base();
	in.connections = 0;
	expect("0 connections", &in, 1900000, 7600000, 268435456, 324322752, 7600000,
	       FETCH_PLAN_BOUND_LINK);
	in = base();
	in.sample = 0;
	expect("empty paths", &in, 57600000, 230400000, 268435456, 0, 0, FETCH_PLAN_BOUND_CACHE);

	/* saturation, not overflow */
	in = base();
	in.rate = UINT64_MAX;
	in.ttfb_ns = UINT64_MAX;
	in.ceiling = UINT64_MAX;
	expect("a link past 64 bits", &in, UINT64_MAX, UINT64_MAX, UINT64_MAX, 324322752, 324322752,
	       FETCH_PLAN_BOUND_CACHE);
	in = base();
	in.ceiling = UINT64_MAX;
	in.cache = UINT64_MAX;
	in.ahead_max = UINT64_MAX;
	in.sample = 1ull << 40;
	fetch_plan_lookahead(&in, &la);
	CHECK(la.cache < UINT64_MAX && la.cache >= UINT64_MAX / 2,
	      "a cache past 2^63: %" PRIu64 " (a path of 2^40 costs 2^40 + a unit)", la.cache);
	CHECK(la.bytes == la.link && la.link == 4 * 32 * (1800000 + (1ull << 40)),
	      "a cache past 2^63: the link's need decides (%" PRIu64 ")", la.bytes);
	return check_summary("planla");
}
