/*
 * test_iotrickle.c — a trickle is a stall (backend_io_attempt.c, io_trickle):
 * an answer that sends a byte now and then is never silent, so the stall
 * rule alone let a slowloris server (a byte a second) hold a read for the
 * whole range (a 64 KiB unit: 18 hours, and a FUSE read that waits cannot be
 * killed). From the attempt's first arrival on, each window of the stall
 * bound must bring IO_TRICKLE_RATE body bytes a second on average.
 *
 * The engine's callbacks are driven by hand, as in test_ioprogress.c (no
 * server, no loop): the window's start is moved back by hand instead of
 * waiting, so no expectation depends on the clock. Cases: a body that
 * trickles (10 bytes over a 2 s window of a 1 s bound) stops the attempt as
 * stalled 2; header lines without end (no body byte) do too; a body at
 * 64 KiB a window goes on and starts a new window; a window that held a
 * sink's pause is no trickle; a call right after bytes with a bound of 0 is
 * still progress (test_ioprogress's rule). On the code before the change
 * the trickle cases fail (no stall).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_io_i.h"
#include "check.h"

static int on_data(void *arg, const void *buf, size_t len)
{
	(void)arg;
	(void)buf;
	(void)len;
	return 0;
}

static void header(struct io_easy *es, const char *line)
{
	char buf[128];
	size_t n = strlen(line);

	memcpy(buf, line, n);
	CHECK(backend__io_on_header(buf, 1, n, es) == n, "header '%s' refused", line);
}

static void body(struct io_easy *es, size_t len)
{
	static char buf[65536];

	CHECK(len <= sizeof(buf) && backend__io_on_body(buf, 1, len, es) == len,
	      "body piece of %zu refused", len);
}

static int progress(struct io_easy *es)
{
	return backend__io_on_progress(es, 0, 0, 0, 0);
}

/* A fresh attempt of a 206 of 1 MiB, its head read. */
static void begin(struct xfer *x, struct io_easy *es)
{
	backend__io_attempt_reset(x);
	x->win_ns = 0;
	x->rx = 0;
	x->arrivals = x->seen = 0;
	header(es, "HTTP/1.1 206 Partial Content\r\n");
	header(es, "Content-Range: bytes 0-1048575/2097152\r\n");
	header(es, "Content-Length: 1048576\r\n");
	header(es, "\r\n");
	CHECK(x->hdr_done && x->accept_body, "the 206's head not taken (status %ld)", x->status);
}

int main(void)
{
	struct backend_io *io = calloc(1, sizeof(*io));
	struct backend_req r = {0};
	struct xfer x = {0};
	struct io_easy es = {0};
	const uint64_t s = 1000000000u;

	if (!io)
		FAIL("out of memory");
	io->stall_ns = s; /* --stall-timeout 1 */
	io->stall_s = 1;
	r.method = "GET";
	r.range_len = 1048576;
	r.on_data = on_data;
	x.io = io;
	x.r = &r;
	es.x = &x;
	x.easy = &es;

	/* a trickle: 10 body bytes in a window of 2 s */
	begin(&x, &es);
	CHECK(progress(&es) == 0 && !x.stalled, "the head's arrival stopped the attempt");
	CHECK(x.win_ns != 0, "the first arrival began no window");
	x.win_ns -= 2 * s;
	body(&es, 10);
	CHECK(progress(&es) == 1, "10 bytes in 2 s (a bound of 1 s) did not stop the attempt");
	CHECK(x.stalled == 2 && x.trickled == 10, "stalled %d, trickled %llu: want 2, 10",
	      x.stalled, (unsigned long long)x.trickled);

	/* header lines without end: no body byte in the window */
	backend__io_attempt_reset(&x);
	x.win_ns = 0;
	x.rx = 0;
	header(&es, "HTTP/1.1 206 Partial Content\r\n");
	CHECK(progress(&es) == 0 && !x.stalled, "the status line stopped the attempt");
	x.win_ns -= 2 * s;
	header(&es,
	       "X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
	CHECK(progress(&es) == 1 && x.stalled == 2 && x.trickled == 0,
	      "header lines without a body for 2 s did not stop the attempt (stalled %d)",
	      x.stalled);

	/* a body at 64 KiB a window: goes on, and the window starts again */
	begin(&x, &es);
	CHECK(progress(&es) == 0, "the head's arrival stopped the attempt");
	x.win_ns -= 2 * s;
	body(&es, 65536);
	CHECK(progress(&es) == 0 && !x.stalled, "64 KiB in 2 s stopped the attempt");
	CHECK(x.win_rx == 65536, "the next window starts at %llu bytes, want 65536",
	      (unsigned long long)x.win_rx);

	/* a window that held a sink's pause is no trickle */
	begin(&x, &es);
	CHECK(progress(&es) == 0, "the head's arrival stopped the attempt");
	x.win_ns -= 2 * s;
	x.paused = 1;
	CHECK(progress(&es) == 0 && !x.stalled, "a paused transfer was stopped");
	x.paused = 0;
	body(&es, 10);
	CHECK(progress(&es) == 0 && !x.stalled, "10 bytes after a pause stopped the attempt");

	/* test_ioprogress's rule: a call right after bytes is progress, bound 0 */
	begin(&x, &es);
	io->stall_ns = 0;
	body(&es, 1);
	CHECK(progress(&es) == 0 && !x.stalled, "a call after bytes stalled (bound 0)");

	free(io);
	return check_summary("io-trickle");
}
