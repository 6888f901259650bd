/*
 * test_roomacct.c — the room's accounts (cachetier_share.c, "the byte
 * accounts"; struct cachetier's reserved): every byte of a fill is counted
 * in exactly one of the directory's usage and this process's reserved
 * bytes at every moment, so no room check (a PF_FIT prefetch's pf_fits,
 * make_room, cachetier_room, the flusher's over-limit check) counts a unit
 * twice. Against the fault:// test store with async=1 (fills end on the
 * tier's fill writer).
 *
 * test_land_room: a PF_FIT prefetch range of 7 units of 64 KiB of object A
 * in a cache of 11 units, its read held by the store after 4 units
 * (hold_at: 2 full buffers of 128 KiB): the writer lands units 0-3 (valid
 * in the state file, in the directory's usage) and the run goes on, so
 * nobody takes them. Then the room is exactly the cache less A's 7 units
 * (cachetier_room: 4 units, 262,144 bytes), and a PF_FIT range of 4 units
 * of object B fits exactly: fetched whole, 0 bytes unfit, nothing
 * evicted, room 0 after it. The store before counted the 4 landed units
 * twice (in the usage at their landing, in reserved until a reader or
 * the run's end took them): room 0 and B's 262,144 bytes unfit (the
 * remote-cache-prefetch flake: a prefetch stopped at 6.68 MiB of 8).
 * The hold removed: 11 units used, room 0, both ranges exact.
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "test_util.h"

#define UNIT  (64u * 1024)
#define CHUNK (8u * UNIT) /* 8 units a chunk */
#define RUN   (7u * UNIT) /* A's range: 3 full buffers of 128 KiB and a half one */
#define SIZE  (3u * CHUNK)

static char tmpdir[256];
static unsigned char *data[2];
static const char *keys[2] = {"a.tar", "b.tar"};

/* A tier in tmpdir/<name>: a cache of size bytes, chunks of CHUNK, 2 fill
 * threads and a slot for a small fill (3 fills at once), no rules. */
static struct cachetier *tier(struct backend *be, const char *name, uint64_t size)
{
	struct cachetier_config cc;
	char dir[600];

	snprintf(dir, sizeof(dir), "%s/%s", tmpdir, name);
	tier_config(&cc, dir, size, 2, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	cc.small_fills = 1;
	return tier_open(&cc, be);
}

/* Wait (up to 60 s) until o's bytes valid in the state file are want. */
static void reach_cached(struct cachetier_obj *o, uint64_t want, const char *name)
{
	uint64_t v = 0;

	for (int i = 0; i < 6000; i++) {
		v = cachetier_obj_cached_bytes(o);
		if (v == want)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: %llu bytes valid after 60 s, want %llu", name, (unsigned long long)v,
	      (unsigned long long)want);
}

/* Wait (up to 60 s) until the tier has want fills in flight. */
static void reach_inflight(struct cachetier *ct, uint64_t want, const char *name)
{
	struct cachetier_stats st;

	for (int i = 0; i < 6000; i++) {
		stats(ct, &st);
		if (st.fills_inflight == want)
			return;
		usleep(10000);
	}
	CHECK(0, "%s: %llu fills in flight after 60 s, want %llu", name,
	      (unsigned long long)st.fills_inflight, (unsigned long long)want);
}

static void test_land_room(void)
{
	char gate[sizeof(tmpdir) + 16];
	struct backend *be;
	struct cachetier *ct;
	struct cachetier_obj *a, *b;
	struct cachetier_stats st;
	uint64_t room, unfit = 0;
	int ended;

	snprintf(gate, sizeof(gate), "%s/src.hold", tmpdir);
	flag_file(gate, 1);
	be = fault_store(tmpdir, "async=1&hold_at=262144"); /* 4 units: 2 full buffers */
	ct = tier(be, "c-land", 11 * (uint64_t)UNIT);
	a = obj_open(ct, be, keys[0]);
	b = obj_open(ct, be, keys[1]);
	CHECK(cachetier_obj_prefetch_range(a, 0, RUN, CACHETIER_PF_FIT) == 0, "land: A's range");
	reach_cached(a, 4 * UNIT, "land: A's units 0-3 landed");
	reach_inflight(ct, 1, "land: A's run held in flight");
	room = cachetier_room(ct);
	stats(ct, &st);
	printf("land: A's 4 of 7 units landed, its run in flight: room %llu bytes, used %llu\n",
	       (unsigned long long)room, (unsigned long long)st.bytes_used);
	CHECK(st.bytes_used == 4 * UNIT, "land: %llu bytes used, want the 4 units landed",
	      (unsigned long long)st.bytes_used);
	CHECK(room == 4 * UNIT,
	      "land: room %llu bytes, want %u (the cache less A's 7 units, each counted once)",
	      (unsigned long long)room, 4 * UNIT);

	/* B's 4 units fit exactly in what A's run leaves */
	CHECK(cachetier_obj_prefetch_range(b, 0, 4 * UNIT, CACHETIER_PF_FIT) == 0,
	      "land: B's range");
	ended = prefetch_ended(b);
	(void)cachetier_obj_prefetch_state(b, &unfit);
	reach_inflight(ct, 1, "land: B's fill ended");
	stats(ct, &st);
	room = cachetier_room(ct);
	printf("land: B's range of 4 units: %llu bytes fetched, %llu unfit, evictions %llu, room "
	       "%llu\n",
	       (unsigned long long)cachetier_obj_cached_bytes(b), (unsigned long long)unfit,
	       (unsigned long long)st.evictions, (unsigned long long)room);
	CHECK(ended, "land: B's prefetch ended");
	CHECK(unfit == 0 && st.unfit_bytes == 0 && cachetier_obj_cached_bytes(b) == 4 * UNIT,
	      "land: B's range %llu bytes unfit (tier %llu), %llu fetched, want 0 and %u: it "
	      "fits exactly",
	      (unsigned long long)unfit, (unsigned long long)st.unfit_bytes,
	      (unsigned long long)cachetier_obj_cached_bytes(b), 4 * UNIT);
	CHECK(st.evictions == 0 && room == 0, "land: evictions %llu, room %llu, want 0 and 0",
	      (unsigned long long)st.evictions, (unsigned long long)room);

	flag_file(gate, 0);
	reach_inflight(ct, 0, "land: A's fill ended");
	stats(ct, &st);
	room = cachetier_room(ct);
	CHECK(st.bytes_used == 11 * (uint64_t)UNIT && room == 0,
	      "land: the end: %llu bytes used, room %llu, want %u and 0",
	      (unsigned long long)st.bytes_used, (unsigned long long)room, 11 * UNIT);
	CHECK(obj_exact(a, data[0], 0, RUN) && obj_exact(b, data[1], 0, 4 * UNIT),
	      "land: A's 7 units and B's 4 exact");
	cachetier_obj_unref(b);
	cachetier_obj_unref(a);
	cachetier_close(ct); /* debug builds: no byte left reserved (cachetier__run_check) */
	backend_close(be);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "ra", 20261201u);
	uint64_t s = seed * 2654435761u + 1;

	for (int i = 0; i < 2; i++)
		data[i] = src_object(tmpdir, keys[i], SIZE, &s);

	test_land_room();

	for (int i = 0; i < 2; i++)
		free(data[i]);
	return test_end("roomacct", tmpdir, seed);
}
