/*
 * test_ioprogress.c — when the remote stores' I/O loop asks a request's sink
 * with nothing (backend_req.on_poll: the fill sink's len-0 call, which pushes
 * a gathered buffer that ends a unit to the fill writer): only on curl's
 * progress calls that find no header line and no body bytes since the one
 * before, never right after the bytes it just had (backend_io_attempt.c,
 * backend__io_on_progress). curl calls its progress function after every
 * read: asking the sink then cost a call per piece and pushed a unit's
 * partial buffer mid-transfer (one more writer push and pwrite), while
 * backend.h promises the len-0 call only "while no bytes arrive".
 *
 * The engine's callbacks are driven by hand, in the order curl calls them for
 * one 206 answer (no server, no loop, no clock in the expectations): exact
 * counts of polls and bytes, and the stall rule (a call right after bytes is
 * progress even with a stall bound of 0; a silent one past the bound stalls).
 * On the code before the change the first checks fail (5 polls where 2 are
 * expected).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_io_i.h"
#include "check.h"

struct counts {
	unsigned polls;
	unsigned pieces;
	size_t bytes;
};

static int on_data(void *arg, const void *buf, size_t len)
{
	struct counts *c = arg;

	(void)buf;
	c->pieces++;
	c->bytes += len;
	return 0;
}

static int on_poll(void *arg)
{
	((struct counts *)arg)->polls++;
	return 0;
}

static void header(struct io_easy *es, const char *line)
{
	char buf[128];
	size_t n = strlen(line);

	memcpy(buf, line, n); /* curl hands over a writable buffer */
	CHECK(backend__io_on_header(buf, 1, n, es) == n, "header '%s' refused", line);
}

static void body(struct io_easy *es, size_t len)
{
	static char buf[1000];

	CHECK(backend__io_on_body(buf, 1, len, es) == len, "body piece of %zu refused", len);
}

static int progress(struct io_easy *es)
{
	return backend__io_on_progress(es, 0, 0, 0, 0);
}

int main(void)
{
	struct backend_io *io = calloc(1, sizeof(*io));
	struct backend_req r = {0};
	struct xfer x = {0};
	struct io_easy es = {0};
	struct counts c = {0};

	if (!io)
		FAIL("out of memory");
	io->stall_ns = UINT64_MAX;
	r.method = "GET";
	r.range_off = 0;
	r.range_len = 1000;
	r.on_data = on_data;
	r.on_poll = on_poll;
	r.arg = &c;
	x.io = io;
	x.r = &r;
	es.x = &x;
	x.easy = &es;
	backend__io_attempt_reset(&x);

	/* waiting for the answer: each progress call asks the sink */
	CHECK(progress(&es) == 0 && c.polls == 1, "before the answer: %u polls, want 1", c.polls);
	header(&es, "HTTP/1.1 206 Partial Content\r\n");
	header(&es, "Content-Range: bytes 0-999/5000\r\n");
	header(&es, "Content-Length: 1000\r\n");
	header(&es, "\r\n");
	CHECK(x.hdr_done && x.accept_body, "the 206's headers not taken (status %ld)", x.status);
	/* headers came: progress, the sink is not asked */
	CHECK(progress(&es) == 0 && c.polls == 1, "after the headers: %u polls, want 1", c.polls);
	body(&es, 400);
	CHECK(progress(&es) == 0 && c.polls == 1, "after 400 bytes: %u polls, want 1", c.polls);
	body(&es, 100);
	body(&es, 100);
	CHECK(progress(&es) == 0 && c.polls == 1, "after 600 bytes: %u polls, want 1", c.polls);
	/* nothing since: asked once per such call */
	CHECK(progress(&es) == 0 && c.polls == 2, "a silent call: %u polls, want 2", c.polls);
	CHECK(progress(&es) == 0 && c.polls == 3, "another silent call: %u polls, want 3", c.polls);
	body(&es, 400);
	CHECK(progress(&es) == 0 && c.polls == 3, "after the last bytes: %u polls, want 3",
	      c.polls);
	CHECK(c.pieces == 4 && c.bytes == 1000 && r.delivered == 1000,
	      "sink got %u pieces, %zu bytes (delivered %llu), want 4, 1000", c.pieces, c.bytes,
	      (unsigned long long)r.delivered);

	/* the stall rule: a call right after bytes is progress, whatever the bound */
	io->stall_ns = 0;
	body(&es, 0);
	CHECK(progress(&es) == 0 && !x.stalled, "a call after bytes stalled (bound 0)");
	/* a silent call past the bound stalls: curl is told to stop (1) */
	io->stall_ns = 1000;
	x.progress_ns -= 2000;
	CHECK(progress(&es) == 1 && x.stalled, "a silent call past the bound did not stall");
	CHECK(c.polls == 4, "%u polls, want 4", c.polls);

	free(io);
	return check_summary("io-progress");
}
