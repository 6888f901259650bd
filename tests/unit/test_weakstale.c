/*
 * test_weakstale.c — a read waiting for units of an object whose bytes
 * change under its weak ETag ends with ESTALE, never EIO (cachetier_read.c:
 * a read begun under one version of the object that sees its version
 * generation move, f->vgen, bumped by cachetier_weak.c's drop, ends with
 * -ESTALE whatever state its units are in), against the fault:// test store
 * with weak_etag=1 (the ETag stays through a rewrite), async=1 and hold_at=
 * (a fill held in flight while a file exists): the race is made, not timed.
 *
 * test_waiter: an object of 8 units (64 KiB; no fill rules: a miss fills
 * the units it reads). A read of unit 0 fills it and makes it the weak
 * ETag's anchor. Reader B (a thread) reads units 4-5: its fill lands unit 4
 * and is held at unit 5 (the hold file). The store's file is rewritten in place
 * (same size). A read of unit 4 (filled since the anchor's last probe)
 * probes the anchor, finds it changed and drops every unit (ESTALE: the
 * sequential reader's answer, right before too). The hold goes; B, whose
 * landed unit 4 was dropped under it, gets ESTALE. Before the mend B got
 * EIO (the dropped unit read as "the fill this read waited for failed").
 * Then the name opened again reads the new bytes, exact, and a read of
 * the old object gives ESTALE.
 *
 * Every wait for a state is a poll of the tier's counters bounded at 60 s
 * (a failed check, never a sleep that decides a count).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "cachetier.h"
#include "check.h"
#include "test_util.h"

#define UNIT  (64u * 1024)
#define CHUNK (8 * UNIT) /* units of 64 KiB: chunks of 512 KiB (smaller ones have 8 units) */
#define SIZE  (8 * UNIT)

static char tmpdir[256];

struct reader {
	struct cachetier_obj *o;
	uint64_t off;
	size_t len;
	ssize_t ret;
	unsigned char *buf;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	r->ret = cachetier_obj_pread(r->o, r->buf, r->len, r->off);
	return NULL;
}

static void test_waiter(uint64_t *s)
{
	unsigned char *old = src_object(tmpdir, "w.tar", SIZE, s), *now = malloc(SIZE), buf[100];
	struct cachetier_config cc;
	struct cachetier_stats st;
	struct cachetier_obj *o, *o2;
	struct reader b = {0};
	struct backend *be;
	struct cachetier *ct;
	pthread_t t;
	char q[80], dir[300], hold[300], path[300];
	ssize_t n;
	int fd;

	if (!now)
		FAIL("malloc");
	snprintf(q, sizeof(q), "weak_etag=1&async=1&hold_at=%u", 5 * UNIT);
	be = fault_store(tmpdir, q);
	snprintf(dir, sizeof(dir), "%s/c", tmpdir);
	snprintf(hold, sizeof(hold), "%s/src.hold", tmpdir);
	tier_config(&cc, dir, 1ull << 30, 2, CHUNK);
	cc.readahead_max_bytes = CHUNK;
	ct = tier_open(&cc, be);
	o = obj_open(ct, be, "w.tar");

	/* unit 0 filled, the anchor */
	n = cachetier_obj_pread(o, buf, sizeof(buf), 0);
	CHECK(n == (ssize_t)sizeof(buf) && memcmp(buf, old, sizeof(buf)) == 0,
	      "waiter: unit 0 exact (%zd)", n);
	fills_idle(ct);
	cached_wait(o, UNIT, "waiter: unit 0");

	/* B waits for units 4-5: 4 lands, 5 is held */
	flag_file(hold, 1);
	b.o = o;
	b.off = 4 * UNIT;
	b.len = 2 * UNIT;
	b.buf = malloc(b.len);
	if (!b.buf || pthread_create(&t, NULL, reader_main, &b) != 0)
		FAIL("reader thread");
	cached_wait(o, 2 * UNIT, "waiter: unit 4 landed, 5 held");

	/* the store's bytes rewritten in place, same size (the weak ETag stays) */
	for (size_t k = 0; k < SIZE; k++)
		now[k] = (unsigned char)rnd(s);
	snprintf(path, sizeof(path), "%s/src/w.tar", tmpdir);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || pwrite(fd, now, SIZE, 0) != SIZE || close(fd) != 0)
		FAIL("rewrite %s", path);

	/* unit 4, filled since the anchor's probe: the probe finds it changed */
	n = cachetier_obj_pread(o, buf, sizeof(buf), 4 * UNIT);
	CHECK(n == -ESTALE, "waiter: the read of unit 4 after the rewrite: %zd, want -ESTALE", n);
	stats(ct, &st);
	CHECK(st.weak_changed == 1, "waiter: weak_changed %llu, want 1",
	      (unsigned long long)st.weak_changed);

	/* the held fill goes on; B's landed unit 4 was dropped under it */
	flag_file(hold, 0);
	pthread_join(t, NULL);
	CHECK(b.ret == -ESTALE,
	      "waiter: B (waiting for units 4-5 across the change): %zd, want %d "
	      "(-ESTALE; -EIO before the mend)",
	      b.ret, -ESTALE);
	fills_idle(ct);

	/* the old object stays stale; the name opened again reads the new bytes */
	n = cachetier_obj_pread(o, buf, sizeof(buf), 0);
	CHECK(n == -ESTALE, "waiter: the old object's read: %zd, want -ESTALE", n);
	o2 = obj_open(ct, be, "w.tar");
	CHECK(o2 != o, "waiter: the name opened again is a new object");
	CHECK(obj_exact(o2, now, 0, SIZE), "waiter: the new version read whole, exact");
	stats(ct, &st);
	CHECK(st.weak_changed == 1 && st.fill_errors == 0,
	      "waiter: weak_changed %llu (want 1), fill_errors %llu (want 0) after the new "
	      "version's read",
	      (unsigned long long)st.weak_changed, (unsigned long long)st.fill_errors);
	cachetier_obj_unref(o2);
	cachetier_obj_unref(o);
	fills_idle(ct);
	tier_end(ct, be, NULL);
	free(b.buf);
	free(old);
	free(now);
}

int main(void)
{
	uint64_t seed = test_start(tmpdir, sizeof(tmpdir), "ws", 20261201u);
	uint64_t s = seed * 2654435761u + 1;

	test_waiter(&s);
	return test_end("weakstale", tmpdir, seed);
}
