/*
 * test_evorder.c — eviction's order kept as units change
 * (cachetier/cachetier_evheap.c) against the scan of every unit it
 * replaced, on generated runs (issue 36 #4).
 *
 * A tier over the fault:// store (it reads in the calling thread) with a
 * cache of 48 units of 8 KiB and 160 objects of 1 to 3 units (and 4 of
 * 2 to 3 chunks) runs a seeded sequence of steps: reads with and without
 * readahead (the exact bytes each time), reads whose pins are held over
 * later steps, plans' marks of next use, plans' reads, moves of the plan
 * position, range prefetches that may evict (a prefetch fill's picks:
 * spared units, next use against its own) or may not, and plans' resets.
 * With cachetier_evict_verify on, the tier makes every pick of a victim
 * twice, by the kept order and by the scan (the code the order replaced,
 * kept for this), and counts the picks whose victim, key or next object's
 * key differ, and the looks at the bytes filled ahead that differ: the
 * test wants none, at least EV_MIN_PICKS picks, and a kept order that
 * looked at no more than EV_PER_PICK units a pick (the scan looks at
 * every unit of every live object that holds bytes: about 50).
 *
 * No pick may run while this thread changes units without ct->lock (a
 * read's end, a read served without it, a plan's mark or read): a pick
 * and the scan it is checked against would look at two states, and
 * differ though the kept order is right (it has the change at the next
 * pick: every such change is marked after it is made). So every read
 * waits, before its end, until no fill runs (fills_idle: its own, and
 * the readahead it started, whose picks ran while the reads of whole
 * objects in order ended theirs before: under TSan 2 of 60 seeds' runs
 * had a pick differ so, the scan seeing a read's unpin or mark the kept
 * order had not had yet), and so does every step that started fills
 * before the next (prefetch_ended too).
 *
 * First, a pick made to race such a change on purpose
 * (cachetier_evict_verify_hook: a plan reads the object the kept order
 * just picked, its key {LRU, t}, between that answer and the scan's,
 * which then sees {UNNEEDED, now}: the same object, a class apart): the
 * tier must see the mark that came in meanwhile and make the pick again
 * (1 raced pick, none differing, the object evicted).
 *
 * TEST_SEED repeats a run (the seed is printed); EVORDER_STEPS sets the
 * steps (default 3000).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "fetch.h"
#include "test_util.h"

#define CHUNK	     (64u * 1024)
#define UNIT	     (CHUNK / 8)
#define NSMALL	     160
#define NBIG	     4
#define NOBJS	     (NSMALL + NBIG)
#define CACHE_UNITS  48
#define NPINS	     3
#define EV_MIN_PICKS 300
#define EV_PER_PICK  12
#define EV_MIN_LISTS 300
#define EV_PER_UNIT  4

static char dir[512];
static unsigned char *data[NOBJS];
static size_t sizes[NOBJS];
static struct cachetier_obj *objs[NOBJS];
static struct cachetier_pin *pins[NPINS];
static uint64_t planned_off[NOBJS], planned_len[NOBJS]; /* the last mark of each */
static struct cachetier *ct;

/* Until no fill runs and none is queued or pending (fills_idle, polled
 * more often: most reads' ends find their fill still ending; 60 s: the
 * bound only against a hang). */
static void quiet(void)
{
	struct cachetier_stats st;

	for (int i = 0; i < 300000; i++) {
		stats(ct, &st);
		if (st.fills_inflight == 0 && st.fills_queued == 0 && st.punches_pending == 0)
			return;
		usleep(200);
	}
	CHECK(0, "fills not idle after 60 s");
}

/* Read [off, off + len) of object i (ahead: a readahead window) and
 * compare its bytes; keep: the pin is left held in *keep. */
static void read_one(int i, uint64_t off, uint64_t len, uint64_t ahead, struct cachetier_pin **keep)
{
	struct cachetier_pin *pin;
	unsigned char buf[4 * UNIT];
	uint64_t fd_off;
	int fd, err;

	if (off >= sizes[i])
		off = sizes[i] - 1;
	if (len > sizes[i] - off)
		len = sizes[i] - off;
	if (len > sizeof(buf))
		len = sizeof(buf);
	err = cachetier_obj_read_begin_ahead(objs[i], off, len, ahead, &fd, &fd_off, &pin);
	CHECK(err == 0, "read %d at %llu: %d", i, (unsigned long long)off, err);
	if (err)
		return;
	CHECK(pread(fd, buf, len, (off_t)fd_off) == (ssize_t)len &&
		  memcmp(buf, data[i] + off, len) == 0,
	      "bytes of object %d at %llu+%llu", i, (unsigned long long)off,
	      (unsigned long long)len);
	quiet(); /* no pick runs while the read ends (above) */
	if (keep)
		*keep = pin;
	else
		cachetier_obj_read_end(pin);
}

/* The hook's plan read, in a pick (cachetier_evict_verify_hook). */
static void race_read(void *arg)
{
	int i = *(int *)arg;
	uint64_t lo, hi;

	CHECK(cachetier_plan_done(objs[i], 0, sizes[i], &lo, &hi) == 0 && lo == 0 && hi == sizes[i],
	      "the hook's plan read of %d", i);
}

/* Objects 0, 1, ... read whole, the first one first, while their units
 * fit in the cache; then, with the hook set to a plan's read of object 0
 * (the least recently used: the kept order's victim, {LRU, its read}),
 * the next object's read, whose fill picks: its scan sees object 0
 * {UNNEEDED, now}. Exact counts of that one pick (counts: the tier's
 * after it). */
static void race_first(uint64_t counts[CT_EVV_N])
{
	static int victim = 0;
	struct cachetier_stats st;
	uint64_t units = 0, ev0;
	int i = 0;

	for (; i < NOBJS; i++) {
		uint64_t u = (sizes[i] + UNIT - 1) / UNIT;

		if (units + u > CACHE_UNITS)
			break;
		for (uint64_t o = 0; o < sizes[i]; o += 2 * UNIT)
			read_one(i, o, 2 * UNIT, 0, NULL);
		units += u;
	}
	stats(ct, &st);
	ev0 = st.evictions;
	CHECK(ev0 == 0, "%llu evictions while objects 0-%d fit", (unsigned long long)ev0, i - 1);
	cachetier_evict_verify_hook(ct, race_read, &victim);
	read_one(i, 0, sizes[i], 0, NULL); /* whole: it does not fit */
	stats(ct, &st);
	cachetier_evict_verify(ct, -1, counts);
	printf("evorder: a pick raced by a plan's read (objects 0-%d read, then %d): %llu picks, "
	       "%llu made again, %llu differed, %llu evictions\n",
	       i - 1, i, (unsigned long long)counts[0], (unsigned long long)counts[9],
	       (unsigned long long)counts[3], (unsigned long long)(st.evictions - ev0));
	CHECK(counts[0] >= 1 && counts[9] == 1 && counts[3] == 0,
	      "the raced pick: %llu picks, %llu made again, %llu differed (want 1 made again, "
	      "none differing)",
	      (unsigned long long)counts[0], (unsigned long long)counts[9],
	      (unsigned long long)counts[3]);
	CHECK(cachetier_obj_cached_bytes(objs[0]) == 0 &&
		  cachetier_obj_cached_bytes(objs[i - 1]) > 0,
	      "object 0 holds %llu bytes, %d %llu: the raced pick's victim is 0",
	      (unsigned long long)cachetier_obj_cached_bytes(objs[0]), i - 1,
	      (unsigned long long)cachetier_obj_cached_bytes(objs[i - 1]));
	CHECK(counts[4] >= 1 && counts[5] == 0,
	      "its evictions' lists: %llu compared, %llu differed", (unsigned long long)counts[4],
	      (unsigned long long)counts[5]);
}

/* A pick after reads of the first and the last unit of a big object b
 * (a span of all its units marked, two of them changed): the kept order
 * places the units marked, not the span's. Before it, b read whole, then
 * a small object x (its fill's pick takes every mark before); then small
 * objects y, y + 1, ... read whole until one's fill picks (one pick or
 * two). Those picks place the units of x and of the objects read since
 * (marked by their fills and reads) and b's two, and look at the first
 * units of the heaps of each object placed and of each victim (two each
 * at most): at most their units + 2 + 6 a pick units looked at (placing
 * b's span instead: b's 17 or more units, not 2). */
static void marks_far(int b, int x, int y)
{
	uint64_t c0[CT_EVV_N], c1[CT_EVV_N], nb = (sizes[b] + UNIT - 1) / UNIT;
	uint64_t bound = (sizes[x] + UNIT - 1) / UNIT + 2;
	int last = y;

	for (uint64_t o = 0; o < sizes[b]; o += 2 * UNIT)
		read_one(b, o, 2 * UNIT, 0, NULL);
	read_one(x, 0, sizes[x], 0, NULL);
	cachetier_evict_verify(ct, -1, c0);
	read_one(b, 0, 1, 0, NULL);	       /* cached: marks unit 0 */
	read_one(b, sizes[b] - 1, 1, 0, NULL); /* and unit nb - 1 */
	CHECK(cachetier_obj_cached_bytes(objs[b]) == sizes[b], "object %d not all cached", b);
	for (; last < y + 20; last++) { /* until a fill picks */
		read_one(last, 0, sizes[last], 0, NULL);
		bound += (sizes[last] + UNIT - 1) / UNIT;
		cachetier_evict_verify(ct, -1, c1);
		if (c1[0] > c0[0])
			break;
	}
	bound += 6 * (c1[0] - c0[0]);
	printf("evorder: marks of units 0 and %llu of object %d, then objects %d-%d read: %llu "
	       "picks, %llu units looked at in them (at most %llu; b's span: %llu units)\n",
	       (unsigned long long)(nb - 1), b, y, last, (unsigned long long)(c1[0] - c0[0]),
	       (unsigned long long)(c1[1] - c0[1]), (unsigned long long)bound,
	       (unsigned long long)nb);
	CHECK(c1[0] - c0[0] >= 1 && c1[0] - c0[0] <= 2 && c1[1] - c0[1] <= bound && c1[3] == c0[3],
	      "the picks after marks far apart: %llu picks, %llu units looked at (at most %llu), "
	      "%llu differed",
	      (unsigned long long)(c1[0] - c0[0]), (unsigned long long)(c1[1] - c0[1]),
	      (unsigned long long)bound, (unsigned long long)(c1[3] - c0[3]));
}

int main(void)
{
	uint64_t seed = test_start(dir, sizeof(dir), "evorder", 36004), s, steps = 3000;
	struct cachetier_config cc;
	struct backend *be;
	char cdir[600];
	uint64_t counts[CT_EVV_N], n[10] = {0};
	uint32_t pnow = 0xFFFFFF00u; /* wraps past 2^32 on the way */
	const char *env = getenv("EVORDER_STEPS");

	if (env)
		steps = strtoull(env, NULL, 10);
	s = seed;
	for (int i = 0; i < NOBJS; i++) {
		char key[32];

		snprintf(key, sizeof(key), "o%03d", i);
		sizes[i] = i < NSMALL ? (1 + rnd(&s) % 3) * UNIT - rnd(&s) % 100
				      : (2 + rnd(&s) % 2) * CHUNK + rnd(&s) % UNIT;
		data[i] = src_object(dir, key, sizes[i], &s);
	}
	be = fault_store(dir, "");
	snprintf(cdir, sizeof(cdir), "%s/cache", dir);
	tier_config(&cc, cdir, CACHE_UNITS * UNIT, 2, CHUNK);
	ct = tier_open(&cc, be);
	cachetier_set_policy(ct, fetch_store_rules());
	cachetier_evict_verify(ct, 1, NULL);
	for (int i = 0; i < NOBJS; i++) {
		char key[32];

		snprintf(key, sizeof(key), "o%03d", i);
		objs[i] = obj_open(ct, be, key);
	}
	cachetier_plan_now(ct, pnow);
	race_first(counts);
	marks_far(NSMALL, 100, 101);
	for (uint64_t k = 0; k < steps; k++) {
		unsigned op = (unsigned)(rnd(&s) % 100);
		int i = (int)(rnd(&s) % NOBJS);
		uint64_t off = rnd(&s) % sizes[i], len = 1 + rnd(&s) % (3 * UNIT), lo, hi;

		if (op < 35) { /* a read, no readahead (may be served without ct->lock) */
			read_one(i, off, len, 0, NULL);
			n[0]++;
		} else if (op < 42) { /* a read with readahead */
			read_one(i, off, len, 2 * CHUNK, NULL);
			fills_idle(ct);
			n[1]++;
		} else if (op < 48) { /* pin held over the next steps, or let go */
			int p = (int)(rnd(&s) % NPINS);

			if (pins[p]) {
				cachetier_obj_read_end(pins[p]);
				pins[p] = NULL;
			} else {
				read_one(i, off, len, 0, &pins[p]);
			}
			n[2]++;
		} else if (op < 65) { /* a plan marks a next use */
			CHECK(cachetier_plan_mark(objs[i], off,
						  len > sizes[i] - off ? sizes[i] - off : len,
						  pnow + 1 + (uint32_t)(rnd(&s) % 400)) == 0,
			      "mark %d", i);
			planned_off[i] = off;
			planned_len[i] = len > sizes[i] - off ? sizes[i] - off : len;
			n[3]++;
		} else if (op < 75) { /* a plan reads what it marked */
			if (planned_len[i]) {
				read_one(i, planned_off[i], planned_len[i], 0, NULL);
				CHECK(cachetier_plan_done(objs[i], planned_off[i], planned_len[i],
							  &lo, &hi) == 0,
				      "plan done %d", i);
				planned_len[i] = 0;
			}
			n[4]++;
		} else if (op < 82) { /* the plan position moves */
			pnow += (uint32_t)(rnd(&s) % 40);
			cachetier_plan_now(ct, pnow);
			n[5]++;
		} else if (op < 93) { /* a range prefetch that may evict (a plan's) */
			CHECK(cachetier_obj_prefetch_range(
				  objs[i], off, len > sizes[i] - off ? sizes[i] - off : len,
				  CACHETIER_PF_EVICT) == 0,
			      "prefetch %d", i);
			CHECK(prefetch_ended(objs[i]), "prefetch of %d did not end", i);
			fills_idle(ct);
			n[6]++;
		} else if (op < 98) { /* one that may not */
			CHECK(cachetier_obj_prefetch_range(
				  objs[i], off, len > sizes[i] - off ? sizes[i] - off : len,
				  CACHETIER_PF_FIT) == 0,
			      "prefetch fit %d", i);
			CHECK(prefetch_ended(objs[i]), "prefetch of %d did not end", i);
			fills_idle(ct);
			n[7]++;
		} else if (op < 99) { /* a read of a whole big object in order */
			int b = NSMALL + (int)(rnd(&s) % NBIG);

			for (uint64_t o = 0; o < sizes[b]; o += 2 * UNIT)
				read_one(b, o, 2 * UNIT, 4 * CHUNK, NULL);
			fills_idle(ct);
			n[8]++;
		} else {
			cachetier_plan_reset(ct);
			memset(planned_len, 0, sizeof(planned_len));
			n[9]++;
		}
	}
	for (int p = 0; p < NPINS; p++) {
		if (pins[p])
			cachetier_obj_read_end(pins[p]);
	}
	fills_idle(ct);
	cachetier_evict_verify(ct, 0, counts);
	printf("evorder: %llu steps (reads %llu, readahead %llu, pins %llu, marks %llu, plan "
	       "reads %llu, moves %llu, prefetch evict %llu, fit %llu, in order %llu, resets "
	       "%llu)\n",
	       (unsigned long long)steps, (unsigned long long)n[0], (unsigned long long)n[1],
	       (unsigned long long)n[2], (unsigned long long)n[3], (unsigned long long)n[4],
	       (unsigned long long)n[5], (unsigned long long)n[6], (unsigned long long)n[7],
	       (unsigned long long)n[8], (unsigned long long)n[9]);
	printf("evorder: %llu picks; units looked at: kept order %llu (%.1f a pick), scan %llu "
	       "(%.1f a pick); %llu differed, %llu made again (a unit marked meanwhile)\n",
	       (unsigned long long)counts[0], (unsigned long long)counts[1],
	       counts[0] ? (double)counts[1] / (double)counts[0] : 0.0,
	       (unsigned long long)counts[2],
	       counts[0] ? (double)counts[2] / (double)counts[0] : 0.0,
	       (unsigned long long)counts[3], (unsigned long long)counts[9]);
	CHECK(counts[3] == 0, "%llu picks of the kept order differ from the scan's",
	      (unsigned long long)counts[3]);
	CHECK(counts[9] == 1, "%llu picks raced a change without ct->lock (want the first one's 1)",
	      (unsigned long long)counts[9]);
	CHECK(counts[0] >= EV_MIN_PICKS, "only %llu picks", (unsigned long long)counts[0]);
	CHECK(counts[1] <= EV_PER_PICK * counts[0],
	      "the kept order looked at %llu units in %llu picks (more than %d a pick)",
	      (unsigned long long)counts[1], (unsigned long long)counts[0], EV_PER_PICK);
	printf("evorder: %llu evictions' lists compared with the sort, %llu differed; %llu units "
	       "evicted; units looked at: walk %llu (%.2f a unit evicted), sort %llu (%.2f)\n",
	       (unsigned long long)counts[4], (unsigned long long)counts[5],
	       (unsigned long long)counts[8], (unsigned long long)counts[6],
	       counts[8] ? (double)counts[6] / (double)counts[8] : 0.0,
	       (unsigned long long)counts[7],
	       counts[8] ? (double)counts[7] / (double)counts[8] : 0.0);
	CHECK(counts[5] == 0, "%llu evictions' unit lists differ from the sort's",
	      (unsigned long long)counts[5]);
	CHECK(counts[4] >= EV_MIN_LISTS, "only %llu evictions' lists compared",
	      (unsigned long long)counts[4]);
	CHECK(counts[6] <= EV_PER_UNIT * counts[8],
	      "evictions looked at %llu units to evict %llu (more than %d a unit)",
	      (unsigned long long)counts[6], (unsigned long long)counts[8], EV_PER_UNIT);
	for (int i = 0; i < NOBJS; i++) {
		cachetier_obj_unref(objs[i]);
		free(data[i]);
	}
	cachetier_close(ct);
	backend_close(be);
	return test_end("evorder", dir, seed);
}
