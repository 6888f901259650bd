/*
 * test_ioinplace.c — the lean engine's receives into a sink's own memory
 * (backend/backend_io_lean.c, recv_some): a sink that offers memory and never pauses
 * (backend_read_version_async_mem without BACKEND_READ_PAUSABLE: the stage's reads,
 * cachetier_memread.c) gets the body's rest in one receive, not in pieces of the engine's
 * 64 KiB buffer; a pausable one (a fill's) gets up to 128 KiB a receive (LEAN_PAUSABLE_RECV:
 * a fill's buffer whole, not two receives of the engine's buffer's size), and a piece it
 * refuses that is longer than the engine's buffer is held in a copy of its own. Each receive
 * of body bytes is one delivery to the sink, so deliveries count the receives, and so does
 * the counter of them (backend_stats.recvs: store_recvs) past the head's receive.
 *
 * A server thread on 127.0.0.1 answers ranged GETs on one kept-alive connection of a
 * seeded random object, and sees the client's socket itself (this process's fd whose port
 * is the peer's):
 *  1. ONE bytes (120 KiB), not pausable: once the request is read, the socket's receive
 *     mark (SO_RCVLOWAT) is already the range's ONE bytes (set at the send: the loop is not
 *     woken for the head alone). The head and all but TAIL bytes of the body in the queue:
 *     nothing delivered, the socket not readable; then the tail: exactly 2 deliveries (the
 *     head's receive brings LEAN_HEAD_RECV bytes, copied; the rest in one receive, in the
 *     sink's memory);
 *  2. TWO bytes (192 KiB), not pausable: the mark is IO_LOWAT_MAX (MARK, 128 KiB) at the
 *     send; the head and MARK bytes of body (the last TAIL of them sent once the others
 *     are queued, the socket not readable before), then, once they were delivered, the
 *     rest: exactly 3 deliveries (the head's, the first part's rest in one receive, the
 *     rest in one);
 *  3. ONE bytes, pausable (a fill's kind): no mark at the send; the head alone is read,
 *     the mark set to the body's size, the body: 1 delivery (all ONE bytes in the sink's
 *     memory; 2 when a pausable receive asked at most 64 KiB);
 *  4. ONE bytes, pausable, served as 3, the sink offering no memory until its first
 *     delivery (a full fill's, whose piece is about to be held): that receive asks for one page
 *     (LEAN_NOMEM_RECV, NOMEM bytes, copied), not the engine's 64 KiB buffer, so a fill's
 *     connection touches one page of its buffer: 2 deliveries (NOMEM bytes, then the rest in
 *     the sink's memory; 3 at 64 KiB a receive). Without that bound: 2 (64 KiB copied, the
 *     rest);
 *  5. ONE bytes, pausable, served as 3, the sink refusing the piece received in its memory
 *     (BACKEND_SINK_FULL, its backend_sink_ready at once): the piece, longer than the
 *     engine's buffer, is held in a copy and offered again at the resume: 1 delivery, all
 *     ONE bytes copied, none in the sink's memory, 1 pause and 1 resume (held in the 64 KiB
 *     buffer instead, it would overrun it: ASan);
 *  6. an error answer (a 503 of a few bytes, far under the mark set at the send) to a read
 *     that is not pausable: read by the stall bound's tick (at most a second: STALL_S 60
 *     makes it 1 s), the read ends with an error, not a stall (WAIT_S is under STALL_S).
 *     Last: the store is down after it (its breaker).
 * Every byte is compared, the buffer filled with a pattern before each read (a byte the
 * receive did not write shows). Without the receive's change (at most 64 KiB a receive
 * whatever the sink) reads 1 and 2 take 3 and 4 deliveries; without the mark at the send
 * the mark checks of 1 and 2 fail; without the tick's ask in a head's wait read 5 hangs.
 *
 * No timing: every wait is for an event (a socket state, a delivery, a read's end),
 * bounded by WAIT_S (a hang fails the test).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "httpsrv.h"

#define KIB	1024u
#define ONE	(120 * KIB)
#define TWO	(192 * KIB)
#define MARK	(128 * KIB) /* IO_LOWAT_MAX (backend_io_i.h) */
#define OBJ	(256 * KIB)
#define TAIL	(4 * KIB) /* more than a head: the last bytes of a body, sent last */
#define HEADRX	2048	  /* LEAN_HEAD_RECV (backend_io_lean.c): the head's receive */
#define NOMEM	4096	  /* LEAN_NOMEM_RECV (backend_io_lean.c) */
#define NREADS	6
#define ERR503	5 /* the 503's read (the last: the store is down after it) */
#define WAIT_S	30
#define STALL_S 60

struct rd {
	struct httpsrv_end end;
	atomic_size_t got;  /* bytes delivered */
	atomic_uint calls;  /* deliveries of bytes to the sink */
	atomic_uint offers; /* deliveries whose bytes were in the offered memory */
	int nomem;	    /* mem offers none until the first delivery */
	int refuse;	    /* the first piece in its memory refused (BACKEND_SINK_FULL) */
	uint64_t off;
	size_t len;
	unsigned char buf[OBJ];
};

static unsigned char body[OBJ];
static struct backend *be;

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return 0;
	if (off < r->off || off - r->off + len > r->len)
		return -EIO;
	if (r->refuse && buf == r->buf + (off - r->off)) {
		r->refuse = 0;
		backend_sink_ready(be);
		return BACKEND_SINK_FULL;
	}
	if (buf == r->buf + (off - r->off))
		atomic_fetch_add(&r->offers, 1);
	else
		memcpy(r->buf + (off - r->off), buf, len);
	atomic_fetch_add(&r->calls, 1);
	atomic_fetch_add(&r->got, len);
	return 0;
}

/* The sink's memory for the bytes at off: its buffer, from off on. */
static void *mem(void *arg, uint64_t off, size_t *len)
{
	struct rd *r = arg;

	if (r->nomem && atomic_load(&r->got) == 0)
		return NULL;
	if (off < r->off || off - r->off >= r->len)
		return NULL;
	if (*len > r->len - (off - r->off))
		*len = r->len - (off - r->off);
	return r->buf + (off - r->off);
}

struct srv {
	int lfd, c, cfd; /* listener, the server's end, the client's end */
	struct rd *r[NREADS];
	int mark;    /* the client's SO_RCVLOWAT awaited (mark_is) */
	size_t want; /* bytes delivered (delivered) or queued (queued) awaited */
	int cur;     /* the read under way */
};

static int mark_is(void *arg)
{
	struct srv *s = arg;

	return httpsrv_rcvlowat(s->cfd) == s->mark;
}

static int head_read(void *arg)
{
	return httpsrv_inq(((struct srv *)arg)->cfd) == 0;
}

/* The length of httpsrv_head206's head of bytes a-b of the object. */
static size_t head_len(unsigned a, unsigned b)
{
	char h[512];

	return (size_t)snprintf(h, sizeof(h),
				"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %u-%u/%u\r\n"
				"Content-Length: %u\r\nETag: \"e1\"\r\n\r\n",
				a, b, OBJ, b - a + 1);
}

static int queued(void *arg) /* s->want bytes in the client's receive queue */
{
	struct srv *s = arg;

	return httpsrv_inq(s->cfd) == (int)s->want;
}

static int delivered(void *arg)
{
	struct srv *s = arg;

	return atomic_load(&s->r[s->cur]->got) == s->want;
}

static void *serve(void *arg)
{
	struct srv *s = arg;

	httpsrv_accept_client(s->lfd, WAIT_S, &s->c, &s->cfd);
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s->r[i];
		unsigned a, b;
		size_t first;

		if (httpsrv_read_range(s->c, OBJ, &a, &b, i + 1) < 0)
			FAIL("request %d: the connection ended or failed before its head", i + 1);
		if (a != r->off || b - a + 1 != r->len)
			FAIL("request %d: range %u-%u", i + 1, a, b);
		s->cur = i;
		s->mark = (int)(r->len < MARK ? r->len : MARK);
		if (i == ERR503) { /* an error answer under the mark set at the send */
			static const char e503[] = "HTTP/1.1 503 Service Unavailable\r\n"
						   "Content-Length: 5\r\n\r\nbusy\n";

			CHECK(httpsrv_wait_for(mark_is, s, WAIT_S) == 0,
			      "answer 5: the client's mark not %d at the request's send", s->mark);
			httpsrv_send(s->c, e503, sizeof(e503) - 1, "a 503");
			continue;
		}
		if (i >= 2 && i <= 4) { /* pausable: the head alone, then the body */
			httpsrv_head206(s->c, a, b, OBJ, "", "a head");
			if (httpsrv_wait_for(head_read, s, WAIT_S) < 0 ||
			    httpsrv_wait_for(mark_is, s, WAIT_S) < 0)
				FAIL(
				    "answer %d: the head not read, or the mark not %d, within %d s",
				    i + 1, s->mark, WAIT_S);
			httpsrv_send(s->c, body + a, r->len, "a body");
			continue;
		}
		CHECK(httpsrv_wait_for(mark_is, s, WAIT_S) == 0,
		      "answer %d: the client's mark not %d at the request's send (before the head)",
		      i + 1, s->mark);
		first = r->len < MARK ? r->len : MARK;
		httpsrv_head206(s->c, a, b, OBJ, "", "a head");
		httpsrv_send(s->c, body + a, first - TAIL, "a body's first part");
		s->want = head_len(a, b) + first - TAIL;
		if (httpsrv_wait_for(queued, s, WAIT_S) < 0)
			FAIL("answer %d: the head and %zu body bytes not queued within %d s", i + 1,
			     first - TAIL, WAIT_S);
		{
			struct pollfd cp = {.fd = s->cfd, .events = POLLIN};

			CHECK(
			    atomic_load(&r->got) == 0 && poll(&cp, 1, 0) == 0,
			    "answer %d, the head and all but %u bytes of the mark's in: %zu bytes "
			    "delivered, the socket %sreadable (want 0, not readable)",
			    i + 1, TAIL, atomic_load(&r->got), cp.revents & POLLIN ? "" : "not ");
		}
		httpsrv_send(s->c, body + a + first - TAIL, TAIL, "a body's tail");
		if (first < r->len) { /* the rest once the first part was delivered */
			s->want = first;
			if (httpsrv_wait_for(delivered, s, WAIT_S) < 0)
				FAIL("answer %d: the first %zu bytes not delivered within %d s",
				     i + 1, first, WAIT_S);
			httpsrv_send(s->c, body + a + first, r->len - first, "a body's rest");
		}
	}
	return NULL;
}

int main(void)
{
	struct backend_stats st0, st1;
	struct srv s = {0};
	pthread_t srv;
	unsigned port;
	static const uint64_t offs[NREADS] = {1000, 4096 + 7, 333, 777, 2021, 5000};
	static const size_t lens[NREADS] = {ONE, TWO, ONE, ONE, ONE, ONE};
	static const unsigned flags[NREADS] = {
	    0, 0, BACKEND_READ_PAUSABLE, BACKEND_READ_PAUSABLE, BACKEND_READ_PAUSABLE, 0};
	/* deliveries: the head's receive's share of the body (copied; read 4: the receive the
	 * sink offered no memory for; read 5: the refused piece, from its copy), then receives
	 * in the sink's memory */
	static const unsigned want_calls[NREADS] = {2, 3, 1, 2, 1, 0};
	static const unsigned want_pauses[NREADS] = {0, 0, 0, 0, 1, 0};

	httpsrv_fill(body, OBJ, 37);
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < NREADS; i++) {
		s.r[i] = calloc(1, sizeof(*s.r[i]));
		if (!s.r[i])
			FAIL("calloc");
		s.r[i]->off = offs[i];
		s.r[i]->len = lens[i];
		memset(s.r[i]->buf, 0xa5, sizeof(s.r[i]->buf));
	}
	s.r[3]->nomem = 1;
	s.r[4]->refuse = 1;
	be = httpsrv_lean_store(port, WAIT_S, STALL_S);
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s.r[i];

		backend_get_stats(be, &st0);
		backend_read_version_async_mem(be, "obj", NULL, 0, offs[i], lens[i], flags[i], sink,
					       mem, r, httpsrv_done, &r->end);
		httpsrv_wait_done(&r->end, WAIT_S, "a read");
		backend_get_stats(be, &st1);
		if (i == ERR503) { /* the 503: an error, read by the tick, no byte delivered */
			CHECK(r->end.err < 0 && atomic_load(&r->calls) == 0,
			      "read 6 (a 503): err %d (%s), %u deliveries (want an error, 0)",
			      r->end.err, strerror(-r->end.err), atomic_load(&r->calls));
			continue;
		}
		CHECK(r->end.err == 0 && atomic_load(&r->got) == lens[i] &&
			  memcmp(r->buf, body + offs[i], lens[i]) == 0,
		      "read %d: err %d (%s), %zu of %zu bytes%s", i + 1, r->end.err,
		      strerror(-r->end.err), atomic_load(&r->got), lens[i],
		      r->end.err == 0 && atomic_load(&r->got) == lens[i] ? ", wrong bytes" : "");
		{
			/* reads 1 and 2: the head's receive brought HEADRX - the head's bytes of
			 * body (copied from the engine's buffer); read 3: its head came alone;
			 * read 4: NOMEM bytes with no memory offered; read 5: all of it from
			 * the refused piece's copy */
			size_t cp = i == 2   ? 0
				    : i == 3 ? NOMEM
				    : i == 4 ? lens[i]
					     : HEADRX - head_len((unsigned)offs[i],
								 (unsigned)(offs[i] + lens[i] - 1));
			unsigned offers = want_calls[i] - (cp ? 1 : 0);

			CHECK(atomic_load(&r->calls) == want_calls[i] &&
				  atomic_load(&r->offers) == offers &&
				  st1.recv_inplace_bytes - st0.recv_inplace_bytes == lens[i] - cp &&
				  st1.recv_copied_bytes - st0.recv_copied_bytes == cp,
			      "read %d (%zu bytes, %s): %u deliveries, %u of them in the sink's "
			      "memory, %llu bytes received there, %llu copied (want %u, %u, %zu, "
			      "%zu)",
			      i + 1, lens[i], flags[i] ? "pausable" : "not pausable",
			      atomic_load(&r->calls), atomic_load(&r->offers),
			      (unsigned long long)(st1.recv_inplace_bytes - st0.recv_inplace_bytes),
			      (unsigned long long)(st1.recv_copied_bytes - st0.recv_copied_bytes),
			      want_calls[i], offers, lens[i] - cp, cp);
			/* receives of body past the head: the deliveries but the head's
			 * receive's share (reads 1 and 2) */
			CHECK(st1.recvs - st0.recvs == want_calls[i] - (i < 2),
			      "read %d: %llu receives of body (store_recvs), want %u", i + 1,
			      (unsigned long long)(st1.recvs - st0.recvs), want_calls[i] - (i < 2));
			CHECK(st1.pauses - st0.pauses == want_pauses[i] &&
				  st1.resumes - st0.resumes == want_pauses[i],
			      "read %d: %llu pauses, %llu resumes (want %u each)", i + 1,
			      (unsigned long long)(st1.pauses - st0.pauses),
			      (unsigned long long)(st1.resumes - st0.resumes), want_pauses[i]);
		}
	}
	pthread_join(srv, NULL);
	backend_get_stats(be, &st1);
	CHECK(st1.connects == 1 && st1.attempts == NREADS,
	      "one kept connection for the %d reads: %llu connects, %llu attempts", NREADS,
	      (unsigned long long)st1.connects, (unsigned long long)st1.attempts);
	backend_close(be);
	close(s.c);
	close(s.lfd);
	for (int i = 0; i < NREADS; i++)
		free(s.r[i]);
	return check_summary("io-inplace");
}
