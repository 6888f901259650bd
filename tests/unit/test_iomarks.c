/*
 * test_iomarks.c — the lean engine's receive marks (backend/backend_io_lean.c): the system
 * calls that set a socket's SO_RCVLOWAT, counted (backend_stats.marks: store_marks). A staged
 * span's request (memory offered, not pausable: the stage's kind, cachetier_memread.c) sets
 * its mark at its send (the range's rest: head and body wake the loop once); a connection whose
 * answer ended gets its mark back to 1 only if it stays idle until the loop waits again, so a
 * request that waited for the connection and starts on it at once sets its own mark: one
 * system call a request, not two. An idle connection stays watched: bytes the server sends
 * unasked close it.
 *
 * A server thread on 127.0.0.1 answers on the one kept-alive connection of a store of one
 * connection (httpsrv_lean_store), each answer whole in one write (a head and at most 20,000
 * bytes of body: one segment, so each answer wakes the loop once, all of it in):
 *  1. read 0 (staged), whose done callback (on the I/O thread) submits reads 1..NQ (staged,
 *     each of its own length): the loop takes them at its next turn, after read 0's
 *     connection went idle and its mark back to 1; read 1 then holds the connection and the
 *     others wait for it, each starting as the one before ends. Exactly NQ + 3 marks: read
 *     0's send and its return to 1, one at each of reads 1..NQ's sends, one back to 1 after
 *     read NQ (2 NQ + 2 when the mark went back to 1 at each answer's end);
 *  2. NS staged reads one after another (each submitted once the one before ended and the
 *     connection's mark is 1 again): exactly 2 marks each;
 *  3. the server sends a byte on the idle connection: the client closes it (the server
 *     reads its end, or a reset: the byte was not read): the idle connection's mark is 1,
 *     so its socket says readable.
 * Every byte compared, 2 deliveries a read (the head's receive, then the rest in the sink's
 * memory); one connection, one attempt a read.
 *
 * No timing: every wait is for an event (a read's end, a socket state, the peer's end),
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

#define OBJ	(256 * 1024)
#define LENMAX	20000
#define NQ	4 /* reads queued behind one connection */
#define NS	2 /* reads one after another */
#define NREADS	(1 + NQ + NS)
#define WAIT_S	30
#define STALL_S 60

struct rd {
	struct httpsrv_end end;
	atomic_size_t got;
	atomic_uint calls; /* deliveries of bytes to the sink */
	uint64_t off;
	size_t len;
	unsigned char buf[LENMAX];
};

static unsigned char body[OBJ];
static struct backend *be;
static struct rd *rds[NREADS];
/* each its own length: a read's mark is never the one before's (no system call saved so) */
static const size_t lens[NREADS] = {6000, 8000, 11000, 14000, 17000, 9000, 13000};

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return 0;
	if (off < r->off || off - r->off + len > r->len)
		return -EIO;
	if (buf != r->buf + (off - r->off))
		memcpy(r->buf + (off - r->off), buf, len);
	atomic_fetch_add(&r->calls, 1);
	atomic_fetch_add(&r->got, len);
	return 0;
}

static void *mem(void *arg, uint64_t off, size_t *len)
{
	struct rd *r = arg;

	if (off < r->off || off - r->off >= r->len)
		return NULL;
	if (*len > r->len - (off - r->off))
		*len = r->len - (off - r->off);
	return r->buf + (off - r->off);
}

static void submit(int i, backend_done_cb done, void *darg)
{
	backend_read_version_async_mem(be, "obj", NULL, 0, rds[i]->off, rds[i]->len, 0, sink, mem,
				       rds[i], done, darg);
}

/* read 0's end, on the I/O thread: reads 1..NQ submitted at once */
static void done0(void *arg, int err, uint64_t bytes)
{
	for (int i = 1; i <= NQ; i++)
		submit(i, httpsrv_done, &rds[i]->end);
	httpsrv_done(arg, err, bytes);
}

struct srv {
	int lfd, c;
	atomic_int cfd;	  /* the client's end, once accepted */
	atomic_int stray; /* 1: send the byte unasked */
	int peer_end;	  /* 3: the client closed the idle connection */
	char stray_err[96];
};

static int stray_asked(void *arg)
{
	return atomic_load(&((struct srv *)arg)->stray);
}

static void *serve(void *arg)
{
	struct srv *s = arg;
	char ans[512 + LENMAX];
	int c, cfd;

	httpsrv_accept_client(s->lfd, WAIT_S, &c, &cfd);
	s->c = c;
	atomic_store(&s->cfd, cfd);
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = rds[i];
		unsigned a, b;
		int n;

		if (httpsrv_read_range(c, OBJ, &a, &b, i + 1) < 0)
			FAIL("request %d: the connection ended or failed before its head", i + 1);
		if (a != r->off || b - a + 1 != r->len)
			FAIL("request %d: range %u-%u, want %llu-%llu", i + 1, a, b,
			     (unsigned long long)r->off, (unsigned long long)(r->off + r->len - 1));
		n = snprintf(ans, 512,
			     "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %u-%u/%u\r\n"
			     "Content-Length: %u\r\nETag: \"e1\"\r\n\r\n",
			     a, b, OBJ, b - a + 1);
		memcpy(ans + n, body + a, r->len);
		httpsrv_send(c, ans, (size_t)n + r->len, "an answer");
	}
	/* 3: a byte unasked on the idle connection: the client closes it */
	if (httpsrv_wait_for(stray_asked, s, WAIT_S) < 0)
		FAIL("the stray byte never asked for");
	httpsrv_send(c, "x", 1, "a stray byte");
	{
		struct pollfd p = {.fd = c, .events = POLLIN};
		char x;
		int k = poll(&p, 1, WAIT_S * 1000);
		ssize_t n = k == 1 ? read(c, &x, 1) : 1;

		/* a close with the byte unread in its queue is a reset */
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			s->peer_end = 3;
		else
			snprintf(s->stray_err, sizeof(s->stray_err), "poll %d, revents %#x", k,
				 (unsigned)p.revents);
	}
	return NULL;
}

static int mark_one(void *arg) /* the client's mark back to 1 (the kernel's 1 too) */
{
	struct srv *s = arg;
	int fd = atomic_load(&s->cfd);

	return fd >= 0 && httpsrv_rcvlowat(fd) == 1;
}

static void check_read(int i)
{
	struct rd *r = rds[i];

	httpsrv_wait_done(&r->end, WAIT_S, "a read");
	CHECK(r->end.err == 0 && atomic_load(&r->got) == r->len &&
		  memcmp(r->buf, body + r->off, r->len) == 0 && atomic_load(&r->calls) == 2,
	      "read %d: err %d (%s), %zu of %zu bytes%s, %u deliveries (want 2)", i, r->end.err,
	      strerror(-r->end.err), atomic_load(&r->got), r->len,
	      r->end.err == 0 && atomic_load(&r->got) == r->len &&
		      memcmp(r->buf, body + r->off, r->len) != 0
		  ? " (wrong bytes)"
		  : "",
	      atomic_load(&r->calls));
}

int main(void)
{
	struct srv s = {0};
	struct backend_stats st0, st1;
	pthread_t srv;
	unsigned port;

	httpsrv_fill(body, OBJ, 53);
	atomic_store(&s.cfd, -1);
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < NREADS; i++) {
		rds[i] = calloc(1, sizeof(*rds[i]));
		if (!rds[i])
			FAIL("calloc");
		rds[i]->off = 1000u + 23456u * (unsigned)i;
		rds[i]->len = lens[i];
		memset(rds[i]->buf, 0xa5, sizeof(rds[i]->buf));
	}
	be = httpsrv_lean_store(port, WAIT_S, STALL_S);
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");

	/* 1: read 0, then reads 1..NQ queued behind the one connection */
	backend_get_stats(be, &st0);
	submit(0, done0, &rds[0]->end);
	for (int i = 0; i <= NQ; i++)
		check_read(i);
	CHECK(httpsrv_wait_for(mark_one, &s, WAIT_S) == 0,
	      "the idle connection's mark not back to 1 within %d s", WAIT_S);
	backend_get_stats(be, &st1);
	CHECK(st1.marks - st0.marks == NQ + 3,
	      "read 0 and %d reads queued behind it: %llu marks set (store_marks), want %d (2 a "
	      "read: %d)",
	      NQ, (unsigned long long)(st1.marks - st0.marks), NQ + 3, 2 * NQ + 2);

	/* 2: one after another, the connection idle (its mark 1) between them */
	for (int i = 1 + NQ; i < NREADS; i++) {
		backend_get_stats(be, &st0);
		submit(i, httpsrv_done, &rds[i]->end);
		check_read(i);
		CHECK(httpsrv_wait_for(mark_one, &s, WAIT_S) == 0,
		      "read %d: the idle connection's mark not back to 1 within %d s", i, WAIT_S);
		backend_get_stats(be, &st1);
		CHECK(st1.marks - st0.marks == 2, "read %d alone: %llu marks set, want 2", i,
		      (unsigned long long)(st1.marks - st0.marks));
	}

	/* 3: the stray byte */
	backend_get_stats(be, &st0);
	atomic_store(&s.stray, 1);
	pthread_join(srv, NULL);
	CHECK(s.peer_end == 3,
	      "a byte sent unasked on the idle connection: the client did not "
	      "close it within %d s (%s)",
	      WAIT_S, s.stray_err);
	backend_get_stats(be, &st1);
	CHECK(st1.connects == 1 && st1.attempts == NREADS && st1.marks == st0.marks,
	      "%llu connects, %llu attempts, %llu marks at the close (want 1, %d, 0)",
	      (unsigned long long)st1.connects, (unsigned long long)st1.attempts,
	      (unsigned long long)(st1.marks - st0.marks), NREADS);
	backend_close(be);
	close(s.c);
	close(s.lfd);
	for (int i = 0; i < NREADS; i++)
		free(rds[i]);
	return check_summary("io-marks");
}
