/*
 * test_watchreq.c — the change watch of cache files (cachetier_watch.c)
 * reads its notification fds once per request on a request thread, not
 * once per check; a change made before a request is seen by that request.
 *
 * Exact counts of the watch's read()s (cachetier__watch_reads):
 * - a thread that never marks a request reads the inotify fd at every
 *   check (CHECKS checks: CHECKS reads);
 * - a request (cachetier_request_begin) making CHECKS checks of two files
 *   reads it once;
 * - a write to a file before the next request's start is seen by that
 *   request's first check (changed 1, its record's count + 1), after one
 *   read; a write after a request's first check is seen by the next
 *   request (not read again in this one: 0 reads more);
 * - a second watch in the same request reads its own fd once;
 * - another thread, not a request thread, reads at every check while the
 *   request thread's mark stays (its next check: no read);
 * - a fanotify instance (when it can be had) is read once per request too,
 *   apart from the inotify one's.
 * No timing: every step is on one thread but the helper thread's, joined.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cachetier.h"
#include "cachetier_i.h"
#include "check.h"
#include "test_util.h"

#define CHECKS 1000

static char tmpdir[256];

struct other {
	struct cachetier__watch *w;
	struct ct_watch_rec *r;
	uint64_t seen;
	int changed;
};

static void *other_thread(void *arg)
{
	struct other *o = arg;

	for (int i = 0; i < CHECKS; i++)
		o->changed += cachetier__watch_changed(o->w, o->r, o->seen);
	return NULL;
}

static void test_requests(void)
{
	struct cachetier__watch *w = cachetier__watch_new(), *w2 = cachetier__watch_new();
	struct ct_watch_rec *ra, *rb, *rc;
	uint64_t sa, sb, sc, n0;
	int fa = watch_file(tmpdir, "a"), fb = watch_file(tmpdir, "b"),
	    fc = watch_file(tmpdir, "c");
	int changed;

	ENSURE(w && w2);
	ENSURE(cachetier__watch_add(w, fa, &ra, &sa) == 0);
	ENSURE(cachetier__watch_add(w, fb, &rb, &sb) == 0);
	ENSURE(cachetier__watch_add(w2, fc, &rc, &sc) == 0);

	/* not a request thread (yet): a read a check */
	n0 = cachetier__watch_reads(w);
	changed = 0;
	for (int i = 0; i < CHECKS; i++)
		changed += cachetier__watch_changed(w, ra, sa);
	CHECK(changed == 0, "no request: %d changed of %d", changed, CHECKS);
	CHECK(cachetier__watch_reads(w) - n0 == CHECKS, "no request: %llu reads for %d checks",
	      (unsigned long long)(cachetier__watch_reads(w) - n0), CHECKS);

	/* one request, CHECKS checks of two files: one read */
	cachetier_request_begin();
	n0 = cachetier__watch_reads(w);
	changed = 0;
	for (int i = 0; i < CHECKS; i++) {
		changed += cachetier__watch_changed(w, ra, sa);
		changed += cachetier__watch_events(w, rb) != sb;
	}
	CHECK(changed == 0, "request: %d changed of %d", changed, 2 * CHECKS);
	CHECK(cachetier__watch_reads(w) - n0 == 1, "request: %llu reads for %d checks",
	      (unsigned long long)(cachetier__watch_reads(w) - n0), 2 * CHECKS);

	/* a change before the next request: seen by its first check, one read */
	watch_change(fa);
	cachetier_request_begin();
	n0 = cachetier__watch_reads(w);
	CHECK(cachetier__watch_changed(w, ra, sa) == 1, "a change before the request not seen");
	CHECK(cachetier__watch_events(w, ra) == sa + 1, "events %llu, wanted %llu",
	      (unsigned long long)cachetier__watch_events(w, ra), (unsigned long long)(sa + 1));
	CHECK(cachetier__watch_events(w, rb) == sb, "b changed with a");
	CHECK(cachetier__watch_reads(w) - n0 == 1, "changed request: %llu reads",
	      (unsigned long long)(cachetier__watch_reads(w) - n0));
	sa++;

	/* a change after the request's first check: the next request's */
	watch_change(fb);
	CHECK(cachetier__watch_events(w, rb) == sb, "b's change read again in the same request");
	CHECK(cachetier__watch_reads(w) - n0 == 1, "same request: %llu reads",
	      (unsigned long long)(cachetier__watch_reads(w) - n0));
	/* a second watch in the same request: its own fd, once */
	n0 = cachetier__watch_reads(w2);
	changed = 0;
	for (int i = 0; i < CHECKS; i++)
		changed += cachetier__watch_changed(w2, rc, sc);
	CHECK(changed == 0, "w2: %d changed", changed);
	CHECK(cachetier__watch_reads(w2) - n0 == 1, "w2: %llu reads for %d checks",
	      (unsigned long long)(cachetier__watch_reads(w2) - n0), CHECKS);
	/* back to w in the same request: read once more (the mark is one watch's) */
	n0 = cachetier__watch_reads(w);
	CHECK(cachetier__watch_events(w, rb) == sb + 1, "b's change not seen after w2");
	CHECK(cachetier__watch_events(w, rb) == sb + 1, "b's change lost");
	CHECK(cachetier__watch_reads(w) - n0 == 1, "back to w: %llu reads",
	      (unsigned long long)(cachetier__watch_reads(w) - n0));
	sb++;

	/* another thread (no request marked): a read a check; this thread's
	 * mark stays, and the events it read are counted for every record */
	{
		struct other o = {w, ra, sa, 0};
		pthread_t t;

		watch_change(fa);
		n0 = cachetier__watch_reads(w);
		ENSURE(pthread_create(&t, NULL, other_thread, &o) == 0);
		ENSURE(pthread_join(t, NULL) == 0);
		CHECK(o.changed == CHECKS, "other thread: %d changed of %d", o.changed, CHECKS);
		CHECK(cachetier__watch_reads(w) - n0 == CHECKS, "other thread: %llu reads",
		      (unsigned long long)(cachetier__watch_reads(w) - n0));
		n0 = cachetier__watch_reads(w);
		CHECK(cachetier__watch_changed(w, ra, sa) == 1, "other thread's read not counted");
		CHECK(cachetier__watch_reads(w) - n0 == 0, "request thread read again: %llu",
		      (unsigned long long)(cachetier__watch_reads(w) - n0));
		sa++;
	}

	/* fanotify, when it can be had: once per request, apart from inotify */
	{
		struct ct_watch_rec *rf;
		uint64_t sf;
		int ff = watch_file(tmpdir, "f");
		int err = cachetier__watch_add_own(w, ff, &rf, &sf);

		if (err < 0) {
			printf("fanotify not to be had (%s): its part not run\n", strerror(-err));
		} else {
			cachetier_request_begin();
			n0 = cachetier__watch_reads(w);
			changed = 0;
			for (int i = 0; i < CHECKS; i++) {
				changed += cachetier__watch_changed(w, rf, sf);
				changed += cachetier__watch_changed(w, ra, sa);
			}
			CHECK(changed == 0, "fanotify request: %d changed", changed);
			CHECK(cachetier__watch_reads(w) - n0 == 2,
			      "fanotify request: %llu reads for %d checks of each kind",
			      (unsigned long long)(cachetier__watch_reads(w) - n0), CHECKS);
			cachetier__watch_drop_fd(w, rf, ff);
		}
		close(ff);
	}

	cachetier__watch_drop(w, ra);
	cachetier__watch_drop(w, rb);
	cachetier__watch_drop(w2, rc);
	cachetier__watch_close(w);
	cachetier__watch_close(w2);
	close(fa);
	close(fb);
	close(fc);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "wr", 20261130u);

	test_requests();
	return test_end("watchreq", tmpdir, seed);
}
