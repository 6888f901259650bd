/*
 * test_landevict.c — units that landed while their fill run goes on are
 * valid (cachetier_run.c, cachetier__run_landed), so an eviction may take
 * them before the run ends; the run then completes without making them
 * valid again, every byte read after is exact, and the room's accounts
 * (usage, reserved, evicting: cachetier__acct_get) stay exact throughout.
 * Against the fault:// test store with async=1 (fills end on the tier's
 * fill writer) and hold_at= (a fill held in flight while a file exists):
 * the interleaving is made, not timed.
 *
 * test_landed_evicted: a cache of 8 units of 64 KiB; a PF_FIT prefetch of
 * object A's 8 units (it fits exactly), its read held by the store after 4
 * units: units 0-3 land (usage 4 units, reserved 4, evicting 0). A reader
 * of object B's 4 units needs 4 units of room: the only valid units are
 * A's landed ones, and it evicts them (4 units evicted, A valid 0; once
 * punched: usage 4 (B's), reserved 4 (A's run), evicting 0). The hold
 * goes: A's run lands units 4-7 and ends; units 0-3 stay empty (A valid
 * exactly 4 units: none made valid again over its punched range), usage 8
 * = A's and B's valid bytes, reserved 0, evicting 0. A read whole is then
 * exact and fetches exactly its units 0-3 again (262,144 bytes), B exact
 * too, no fill error, and the accounts exact again at the end.
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "test_util.h"

#define UNIT  (64u * 1024)
#define CHUNK (8 * UNIT) /* units of 64 KiB (chunks under 512 KiB have smaller ones) */

static char tmpdir[256];

/* The room's accounts in one look are (usage, reserved, evicting). */
static void accounts(struct cachetier *ct, uint64_t usage, uint64_t reserved, uint64_t evicting,
		     const char *name)
{
	struct ct_room r;

	cachetier__acct_get(ct, &r);
	CHECK(r.usage == usage && r.reserved == reserved && r.evicting == evicting,
	      "%s: usage %llu, reserved %llu, evicting %llu; want %llu, %llu, %llu", name,
	      (unsigned long long)r.usage, (unsigned long long)r.reserved,
	      (unsigned long long)r.evicting, (unsigned long long)usage,
	      (unsigned long long)reserved, (unsigned long long)evicting);
}

static void test_landed_evicted(uint64_t *s)
{
	unsigned char *a = src_object(tmpdir, "a.tar", 8 * UNIT, s),
		      *b = src_object(tmpdir, "b.tar", 4 * UNIT, s);
	struct cachetier_stats st, st0;
	struct cachetier_obj *oa, *ob;
	struct backend *be;
	struct cachetier *ct;
	char q[64], hold[300];

	snprintf(q, sizeof(q), "async=1&hold_at=%u", 4 * UNIT);
	be = fault_store(tmpdir, q);
	snprintf(hold, sizeof(hold), "%s/src.hold", tmpdir);
	ct = tier_small(tmpdir, "c", be, 8 * UNIT, CHUNK);
	oa = obj_open(ct, be, "a.tar");
	ob = obj_open(ct, be, "b.tar");

	/* A's run held after 4 of its 8 units landed */
	flag_file(hold, 1);
	CHECK(cachetier_obj_prefetch_range(oa, 0, 8 * UNIT, CACHETIER_PF_FIT) == 0,
	      "A's prefetch range");
	cached_wait(oa, 4 * UNIT, "A: units 0-3 landed, the run held");
	accounts(ct, 4 * UNIT, 4 * UNIT, 0, "A held");

	/* B's reader evicts A's landed units: the only valid ones */
	CHECK(obj_exact(ob, b, 0, 4 * UNIT), "B read exact while A's run is held");
	count_reach(ct, TC_PUNCHES_PENDING, 0, "B's eviction");
	stats(ct, &st);
	CHECK(st.evict_units == 4 && st.evicted_bytes == 4 * UNIT,
	      "B's read evicted %llu units (%llu bytes), want 4 (262144)",
	      (unsigned long long)st.evict_units, (unsigned long long)st.evicted_bytes);
	CHECK(cachetier_obj_cached_bytes(oa) == 0 && cachetier_obj_cached_bytes(ob) == 4 * UNIT,
	      "A valid %llu (want 0), B valid %llu (want 262144)",
	      (unsigned long long)cachetier_obj_cached_bytes(oa),
	      (unsigned long long)cachetier_obj_cached_bytes(ob));
	accounts(ct, 4 * UNIT, 4 * UNIT, 0, "A's landed units evicted, its run held");

	/* the run goes on and ends: units 4-7 valid, 0-3 stay empty */
	flag_file(hold, 0);
	CHECK(prefetch_ended(oa), "A's prefetch ended");
	fills_idle(ct);
	stats(ct, &st0);
	CHECK(cachetier_obj_cached_bytes(oa) == 4 * UNIT,
	      "A valid after its run: %llu, want 262144 (units 4-7; 0-3 were punched)",
	      (unsigned long long)cachetier_obj_cached_bytes(oa));
	CHECK(st0.fill_errors == 0, "fill errors %llu", (unsigned long long)st0.fill_errors);
	accounts(ct, 8 * UNIT, 0, 0, "A's run ended");

	/* every byte exact: A's units 0-3 fetched again, exactly once */
	CHECK(obj_exact(oa, a, 0, 8 * UNIT), "A read whole after its run: exact");
	stats(ct, &st);
	CHECK(st.bytes_fetched - st0.bytes_fetched == 4 * UNIT,
	      "A's read fetched %llu bytes, want 262144 (its units 0-3)",
	      (unsigned long long)(st.bytes_fetched - st0.bytes_fetched));
	CHECK(obj_exact(ob, b, 0, 4 * UNIT), "B read again: exact");
	fills_idle(ct);
	stats(ct, &st);
	CHECK(st.fill_errors == 0, "fill errors at the end %llu",
	      (unsigned long long)st.fill_errors);
	accounts(ct, cachetier_obj_cached_bytes(oa) + cachetier_obj_cached_bytes(ob), 0, 0,
		 "the end (usage: A's and B's valid bytes)");
	CHECK(
	    cachetier_obj_cached_bytes(oa) + cachetier_obj_cached_bytes(ob) <= 8 * UNIT,
	    "within the cache: %llu",
	    (unsigned long long)(cachetier_obj_cached_bytes(oa) + cachetier_obj_cached_bytes(ob)));
	tier_end(ct, be, oa, ob, NULL);
	free(a);
	free(b);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "le", 20261201u);
	uint64_t s = seed * 2654435761u + 1;

	test_landed_evicted(&s);
	return test_end("landevict", tmpdir, seed);
}
