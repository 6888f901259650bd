/*
 * test_iolowat.c — the lean engine's body wake-ups (backend/backend_io_lean.c,
 * backend__io_lowat in backend_io_loop.c): past an answer's head, the I/O loop is woken
 * for the body's rest once it is all in (up to IO_LOWAT_MAX), not for each piece the
 * server sends; a kept connection's next head is seen whatever the last body's mark was;
 * and bytes short of the mark still arrive within a tick of the stall bound, not as a stall.
 *
 * A server thread on 127.0.0.1 answers three ranged GETs of one kept-alive connection.
 * It sees the client's socket itself (this process's fd whose port is the peer's):
 *  1. a body of PIECES pieces: the head alone, then once the socket's mark is the body's
 *     size (SO_RCVLOWAT), the pieces but the last, each sent once the one before is in the
 *     client's receive queue (SIOCINQ). With all but the last in: nothing delivered, the
 *     socket not readable (the loop has not been woken for them). Then the last: the whole
 *     body in exactly one delivery to the sink, exact bytes.
 *  2. a small answer (head and SMALL bytes at once) on the same connection: its head is far
 *     below the last body's mark (it was put back to 1 at the answer's end): exact bytes.
 *  3. a body whose first piece comes once the head was read and the mark set, and the
 *     rest only after that piece was delivered: the tick asks for bytes short of the mark
 *     (stall bound STALL_S, a tick of 1 s), so the piece arrives and the read ends with
 *     exact bytes and no stall.
 *
 * No timing: every wait is for an event (a socket state, a delivery, a read's end),
 * bounded by WAIT_S (a hang fails the test). Case 3's wait is for the tick, which comes
 * within a second.
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

#define PIECE	(16 * 1024)
#define PIECES	4
#define LEN	(PIECE * PIECES) /* at most IO_LOWAT_MAX: one mark for the whole body */
#define SMALL	100
#define WAIT_S	30
#define STALL_S 2

struct rd {
	struct httpsrv_end end;
	atomic_size_t got; /* bytes delivered */
	atomic_uint calls; /* deliveries of bytes to the sink */
	uint64_t off;
	unsigned char buf[LEN];
};

static unsigned char body[LEN];

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return 0;
	if (off < r->off || off - r->off + len > LEN)
		return -EIO;
	memcpy(r->buf + (off - r->off), buf, len);
	atomic_fetch_add(&r->calls, 1);
	atomic_fetch_add(&r->got, len);
	return 0;
}

struct srv {
	int lfd, c, cfd; /* listener, the server's end, the client's end */
	struct rd *r[3];
	size_t want; /* bytes in the client's queue or delivered (wait_in) */
};

static int lowat_is(void *arg)
{
	return httpsrv_rcvlowat(((struct srv *)arg)->cfd) == LEN;
}

static int head_read(void *arg)
{
	return httpsrv_inq(((struct srv *)arg)->cfd) == 0;
}

static int all_in(void *arg) /* case 1: s->want body bytes arrived (queued or delivered) */
{
	struct srv *s = arg;
	int q = httpsrv_inq(s->cfd);

	return q >= 0 && (size_t)q + atomic_load(&s->r[0]->got) == s->want;
}

static int piece_delivered(void *arg)
{
	return atomic_load(&((struct srv *)arg)->r[2]->got) == PIECE;
}

/* Read one request's head from c; its range into *a, *b. */
static void read_req(int c, unsigned *a, unsigned *b, int i)
{
	if (httpsrv_read_range(c, LEN, a, b, i) < 0)
		FAIL("request %d: the connection ended or failed before its head", i);
}

static void head(int c, unsigned a, unsigned b, const char *what)
{
	httpsrv_head206(c, a, b, LEN, "", what);
}

static void *serve(void *arg)
{
	struct srv *s = arg;
	unsigned a, b;

	httpsrv_accept_client(s->lfd, WAIT_S, &s->c, &s->cfd);

	/* 1: the head alone; once it is read and the mark is the body's, the pieces */
	read_req(s->c, &a, &b, 1);
	if (a != 0 || b != LEN - 1)
		FAIL("request 1: range %u-%u", a, b);
	head(s->c, a, b, "answer 1");
	if (httpsrv_wait_for(head_read, s, WAIT_S) < 0)
		FAIL("answer 1: the head not read within %d s", WAIT_S);
	CHECK(httpsrv_wait_for(lowat_is, s, WAIT_S) == 0,
	      "answer 1: the client's SO_RCVLOWAT never became the body's %d bytes", LEN);
	for (int k = 0; k < PIECES - 1; k++) {
		httpsrv_send(s->c, body + k * PIECE, PIECE, "answer 1's piece");
		s->want = (size_t)(k + 1) * PIECE;
		if (httpsrv_wait_for(all_in, s, WAIT_S) < 0)
			FAIL("answer 1: piece %d not in within %d s", k, WAIT_S);
	}
	{
		struct pollfd cp = {.fd = s->cfd, .events = POLLIN};

		CHECK(atomic_load(&s->r[0]->got) == 0 &&
			  httpsrv_inq(s->cfd) == (PIECES - 1) * PIECE && poll(&cp, 1, 0) == 0,
		      "answer 1, all but the last piece in: %zu bytes delivered, %d queued, the "
		      "socket %sreadable (want 0, %d, not readable)",
		      atomic_load(&s->r[0]->got), httpsrv_inq(s->cfd),
		      cp.revents & POLLIN ? "" : "not ", (PIECES - 1) * PIECE);
	}
	httpsrv_send(s->c, body + (PIECES - 1) * PIECE, PIECE, "answer 1's last piece");

	/* 2: a small answer on the same connection, head and body at once */
	read_req(s->c, &a, &b, 2);
	if (b - a + 1 != SMALL)
		FAIL("request 2: range %u-%u", a, b);
	head(s->c, a, b, "answer 2");
	httpsrv_send(s->c, body + a, SMALL, "answer 2's body");

	/* 3: a first piece, then the rest once it was delivered (the tick's ask) */
	read_req(s->c, &a, &b, 3);
	if (a != 0 || b != LEN - 1)
		FAIL("request 3: range %u-%u", a, b);
	head(s->c, a, b, "answer 3");
	if (httpsrv_wait_for(head_read, s, WAIT_S) < 0 || httpsrv_wait_for(lowat_is, s, WAIT_S) < 0)
		FAIL("answer 3: the head not read, or the mark not the body's, within %d s",
		     WAIT_S);
	httpsrv_send(s->c, body, PIECE, "answer 3's first piece");
	CHECK(httpsrv_wait_for(piece_delivered, s, WAIT_S) == 0,
	      "answer 3: the first piece, short of the mark, not delivered within %d s", WAIT_S);
	httpsrv_send(s->c, body + PIECE, LEN - PIECE, "answer 3's rest");
	return NULL;
}

int main(void)
{
	struct backend *be;
	struct srv s = {0};
	pthread_t srv;
	unsigned port;
	static const uint64_t offs[3] = {0, 1000, 0}, lens[3] = {LEN, SMALL, LEN};

	for (size_t i = 0; i < LEN; i++)
		body[i] = (unsigned char)(i * 131 + 7);
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < 3; i++) {
		s.r[i] = calloc(1, sizeof(*s.r[i]));
		if (!s.r[i])
			FAIL("calloc");
		s.r[i]->off = offs[i];
	}
	be = httpsrv_lean_store(port, WAIT_S, STALL_S);
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");
	for (int i = 0; i < 3; i++) {
		struct rd *r = s.r[i];

		backend_read_version_async(be, "obj", NULL, 0, offs[i], (size_t)lens[i], 0, sink, r,
					   httpsrv_done, &r->end);
		httpsrv_wait_done(&r->end, WAIT_S, "a read");
		CHECK(r->end.err == 0 && atomic_load(&r->got) == lens[i] &&
			  memcmp(r->buf, body + offs[i], (size_t)lens[i]) == 0,
		      "read %d: err %d (%s), %zu of %u bytes%s", i + 1, r->end.err,
		      strerror(-r->end.err), atomic_load(&r->got), (unsigned)lens[i],
		      r->end.err == 0 && atomic_load(&r->got) == lens[i] ? ", wrong bytes" : "");
	}
	CHECK(atomic_load(&s.r[0]->calls) == 1,
	      "read 1: the body in %u deliveries (want 1: the loop woken once, all of it in)",
	      atomic_load(&s.r[0]->calls));
	pthread_join(srv, NULL);
	{
		struct backend_stats st;

		backend_get_stats(be, &st);
		CHECK(st.connects == 1 && st.attempts == 3,
		      "one kept connection for the 3 reads: %llu connects, %llu attempts",
		      (unsigned long long)st.connects, (unsigned long long)st.attempts);
	}
	backend_close(be);
	close(s.c);
	close(s.lfd);
	for (int i = 0; i < 3; i++)
		free(s.r[i]);
	return check_summary("io-lowat");
}
