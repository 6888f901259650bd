/*
 * test_unitstate.c — unit states under their object's lock (issue 36 #1):
 * every change of a unit's state (ct_file.ust: claims, commits, aborts,
 * queueing, eviction's take, its punch's end) is made through
 * cachetier__unit_set (cachetier_run.h) under the object's lock,
 * ct_file.lock (and ct->lock); a thread holding the object's lock sees no
 * state move. Against the fault:// test store with async=1 (fills end on
 * the tier's fill writer), its pieces of 16 KiB (runs land over several of
 * the writer's batches), every 9th read failed and every 13th cut after
 * half its bytes (fills aborted with an error, whole or after some of
 * their units landed), on ONE object of 5 chunks in a cache of 2 (fills
 * evict it).
 *
 * test_states (seeded, TEST_SEED; the TSan stage runs the unit suite):
 * 3 reader threads (seeded ranges of 1 byte to a chunk, half read through
 * read_begin's fd, half probes: demand fills, readahead, claims and
 * commits, the fill writer's commits as units land), a thread asking seeded
 * prefetch ranges (PF_FIT, given back when they do not fit: aborts with no
 * error; PF_EVICT: evictions; withdrawals), and a looker that, 400 times,
 * holds the object's lock, reads every unit's state, yields its core 20
 * times and reads them again: every look the same (a state written
 * without the object's lock moves under it: moved_under_lock). Every read
 * returns the exact bytes or -EIO (a fault of the store), never other
 * bytes. Once every fill ended: every unit is UNIT_VALID or UNIT_EMPTY
 * (none claimed, queued, being evicted or pinned), the valid
 * units' bytes are the object's bytes (ct_file.bytes) and the tier's
 * (ct->used), each valid unit's state-file byte is set and each empty
 * one's clear, and every valid unit reads back exact with no fill
 * (fills, misses unchanged); the close's check (cachetier__run_check) in
 * every debug build. A claim's state written without the object's lock
 * aborts every debug build (cachetier__unit_set's assertion); one written
 * past cachetier__unit_set without it is seen by the looker.
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
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

#define UNIT	    (64u * 1024)
#define CHUNK	    (8u * UNIT) /* 8 units a chunk */
#define SIZE	    (5u * CHUNK - 1000u)
#define READERS	    3
#define READS	    200 /* each reader's */
#define RANGES	    80	/* the prefetching thread's */
#define LOOKS	    400 /* the looker's */
#define LOOK_YIELDS 20

static char tmpdir[256];
static unsigned char *data;
static const char *key = "one.tar";

struct worker {
	pthread_t t;
	struct cachetier_obj *o;
	uint64_t seed;
	int bad, reads, eio;
};

static void *reader_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed;
	unsigned char *buf = malloc(CHUNK);

	for (int k = 0; k < READS && buf; k++) {
		uint64_t off = rnd(&s) % SIZE;
		size_t len = 1 + (size_t)(rnd(&s) % CHUNK);
		ssize_t n;

		if (len > SIZE - off)
			len = (size_t)(SIZE - off);
		n = (rnd(&s) & 1) ? cachetier_obj_pread(w->o, buf, len, off)
				  : cachetier_obj_pread_probe(w->o, buf, len, off);
		if (n == -EIO) {
			w->eio++;
		} else if (n != (ssize_t)len || memcmp(buf, data + off, len) != 0) {
			if (w->bad++ < 3)
				fprintf(stderr, "states: off %llu len %zu: %zd, %s\n",
					(unsigned long long)off, len, n,
					n == (ssize_t)len ? "other bytes" : "short or failed");
		}
		w->reads++;
	}
	free(buf);
	return NULL;
}

static void *prefetch_main(void *arg)
{
	struct worker *w = arg;
	uint64_t s = w->seed;

	for (int k = 0; k < RANGES; k++) {
		uint64_t off = rnd(&s) % SIZE, len = 1 + rnd(&s) % (2 * CHUNK);

		if (len > SIZE - off)
			len = SIZE - off;
		if (cachetier_obj_prefetch_range(
			w->o, off, len, (rnd(&s) & 1) ? CACHETIER_PF_EVICT : CACHETIER_PF_FIT) != 0)
			w->bad++;
		if (k % 8 == 7)
			sched_yield();
	}
	return NULL;
}

/* The looker: the object's states read twice under its lock, its core
 * yielded between; a unit whose state moved meanwhile was written without
 * the lock. */
struct looker {
	pthread_t t;
	struct ct_file *f;
	uint64_t looks, moved, bad_state;
	uint32_t first_unit;
	uint8_t first_from, first_to;
};

static void *looker_main(void *arg)
{
	struct looker *l = arg;
	struct ct_file *f = l->f;
	uint8_t *a = malloc(f->nunits), *b = malloc(f->nunits);

	for (int k = 0; k < LOOKS && a && b; k++) {
		disk_mutex_lock(&f->lock);
		for (uint32_t u = 0; u < f->nunits; u++)
			a[u] = f->ust[u];
		for (int y = 0; y < LOOK_YIELDS; y++)
			sched_yield();
		for (uint32_t u = 0; u < f->nunits; u++)
			b[u] = f->ust[u];
		disk_mutex_unlock(&f->lock);
		for (uint32_t u = 0; u < f->nunits; u++) {
			l->bad_state += a[u] > UNIT_EVICTING;
			if (a[u] != b[u] && l->moved++ == 0) {
				l->first_unit = u;
				l->first_from = a[u];
				l->first_to = b[u];
			}
		}
		l->looks++;
		sched_yield();
	}
	free(a);
	free(b);
	return NULL;
}

static void test_states(uint64_t seed)
{
	struct backend *be = fault_store(tmpdir, "async=1&piece=16384&fail_every=9&cut_every=13");
	struct cachetier_config cc;
	struct cachetier *ct;
	struct cachetier_obj *o;
	struct cachetier_stats st, st2;
	struct worker w[READERS + 1];
	struct looker lk = {0};
	struct ct_file *f;
	char dir[600];
	int bad = 0, reads = 0, eio = 0;
	uint32_t nstate[UNIT_EVICTING + 1] = {0}, pinned = 0, st_wrong = 0, wrong = 0;
	uint64_t valid_bytes = 0, fbytes, used;

	snprintf(dir, sizeof(dir), "%s/c-states", tmpdir);
	tier_config(&cc, dir, 2 * (uint64_t)CHUNK, 2, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	cc.small_fills = 1;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, key);
	f = o->file;
	CHECK(f && f->live && f->nunits == (SIZE + UNIT - 1) / UNIT,
	      "states: the object is in the unit store, %u units", f ? f->nunits : 0);
	if (!f || !f->live)
		return;
	lk.f = f;
	for (int k = 0; k <= READERS; k++) {
		w[k] = (struct worker){.o = o, .seed = seed * 31 + (uint64_t)k + 1};
		CHECK(pthread_create(&w[k].t, NULL, k < READERS ? reader_main : prefetch_main,
				     &w[k]) == 0,
		      "states: thread %d", k);
	}
	CHECK(pthread_create(&lk.t, NULL, looker_main, &lk) == 0, "states: looker");
	for (int k = 0; k <= READERS; k++) {
		pthread_join(w[k].t, NULL);
		bad += w[k].bad;
		reads += w[k].reads;
		eio += w[k].eio;
	}
	pthread_join(lk.t, NULL);
	(void)prefetch_ended(o);
	fills_idle(ct);
	stats(ct, &st);

	/* every fill ended: the states, looked at under both locks */
	disk_mutex_lock(&ct->lock);
	disk_mutex_lock(&f->lock);
	for (uint32_t u = 0; u < f->nunits; u++) {
		uint8_t s = f->ust[u];

		nstate[s <= UNIT_EVICTING ? s : UNIT_EVICTING]++;
		pinned += f->pins[u] != 0;
		if (s == UNIT_VALID)
			valid_bytes += cachetier__unit_len(f, u);
		st_wrong += (s == UNIT_VALID) != (cachetier__st_get(f, u) != 0);
	}
	fbytes = f->bytes;
	used = ct->used;
	disk_mutex_unlock(&f->lock);
	disk_mutex_unlock(&ct->lock);

	printf("states: %d reads by %d threads (%d -EIO from the store's faults), %llu fills, "
	       "%llu units failed, %llu evictions, %llu prefetch fills withdrawn, %llu bytes "
	       "unfit; the looker: %llu looks, %llu states moved under the object's lock; at "
	       "the end: %u valid, %u empty, %u queued, %u filling, %u evicting, %u "
	       "pinned, valid bytes %llu (the object's %llu, the tier's %llu)\n",
	       reads, READERS, eio, (unsigned long long)st.fills,
	       (unsigned long long)st.fill_errors, (unsigned long long)st.evictions,
	       (unsigned long long)st.prefetch_withdrawn, (unsigned long long)st.unfit_bytes,
	       (unsigned long long)lk.looks, (unsigned long long)lk.moved, nstate[UNIT_VALID],
	       nstate[UNIT_EMPTY], nstate[UNIT_QUEUED], nstate[UNIT_FILLING], nstate[UNIT_EVICTING],
	       pinned, (unsigned long long)valid_bytes, (unsigned long long)fbytes,
	       (unsigned long long)used);
	CHECK(bad == 0 && reads == READERS * READS,
	      "states: %d of %d reads with other bytes (or failed but with -EIO)", bad, reads);
	CHECK(st.fills > 0 && st.evictions > 0 && st.fill_errors > 0,
	      "states: %llu fills, %llu evictions, %llu failed units: want each",
	      (unsigned long long)st.fills, (unsigned long long)st.evictions,
	      (unsigned long long)st.fill_errors);
	CHECK(lk.looks == LOOKS && lk.moved == 0 && lk.bad_state == 0,
	      "states: %llu looks, %llu states moved under the object's lock (the first: unit "
	      "%u, %u -> %u), %llu not a state: want %d, 0, 0",
	      (unsigned long long)lk.looks, (unsigned long long)lk.moved, lk.first_unit,
	      lk.first_from, lk.first_to, (unsigned long long)lk.bad_state, LOOKS);
	CHECK(nstate[UNIT_VALID] + nstate[UNIT_EMPTY] == f->nunits && pinned == 0,
	      "states: at the end %u valid + %u empty of %u units, %u pinned", nstate[UNIT_VALID],
	      nstate[UNIT_EMPTY], f->nunits, pinned);
	CHECK(valid_bytes == fbytes && valid_bytes == used && st_wrong == 0,
	      "states: valid bytes %llu, the object's %llu, the tier's %llu; %u units whose "
	      "state-file byte says otherwise",
	      (unsigned long long)valid_bytes, (unsigned long long)fbytes, (unsigned long long)used,
	      st_wrong);
	/* every valid unit exact, read with no fill (one check: their number
	 * is the run's) */
	for (uint32_t u = 0; u < f->nunits; u++) {
		if (f->ust[u] == UNIT_VALID &&
		    !obj_exact(o, data, (uint64_t)u * UNIT, (size_t)cachetier__unit_len(f, u)) &&
		    wrong++ == 0)
			fprintf(stderr, "states: valid unit %u read back wrong\n", u);
	}
	CHECK(wrong == 0, "states: %u of %u valid units read back wrong", wrong,
	      nstate[UNIT_VALID]);
	stats(ct, &st2);
	CHECK(st2.fills == st.fills && st2.misses == st.misses,
	      "states: reading the valid units made %llu fills and %llu misses, want 0",
	      (unsigned long long)(st2.fills - st.fills),
	      (unsigned long long)(st2.misses - st.misses));
	tier_end(ct, be, o, NULL); /* debug builds: cachetier__run_check */
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "us", 20261130u);
	uint64_t s = seed * 2654435761u + 1;

	data = src_object(tmpdir, key, SIZE, &s);
	test_states(seed);
	free(data);
	return test_end("unitstate", tmpdir, seed);
}
