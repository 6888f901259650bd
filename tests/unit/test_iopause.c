/*
 * test_iopause.c — a pausable sink that says it is full before a receive
 * (backend.h, backend_sink_mem_cb: NULL with *len 0; a fill whose writer
 * is full, cachetier_fill.c fill_sink_mem): the lean engine
 * (backend/backend_io_lean.c, recv_dst) pauses the transfer without
 * receiving, so no piece is received into its buffer, refused, held and
 * copied out and back, and the resume offers nothing again: the socket's
 * bytes go straight to the sink's memory.
 *
 * A server thread on 127.0.0.1 answers two ranged GETs of a seeded random
 * object (BODY bytes each) on one kept-alive connection, and sees the
 * client's socket itself (this process's fd whose port is the peer's):
 *  1. the sink full from the start: the head is sent alone and read; then
 *     the whole body. The transfer pauses (the store's pauses 1) with
 *     exactly BODY bytes in the client's receive queue (none received) and
 *     nothing delivered. The sink's room back (backend_sink_ready): the
 *     body in exactly 1 delivery (a pausable sink's receives are at most
 *     LEAN_PAUSABLE_RECV, 128 KiB; 2 when they were at most the engine's
 *     64 KiB buffer), in the sink's memory: BODY bytes received there, 0
 *     copied; 1 resume, no backstop.
 *  2. the sink full once 64 KiB arrived (it offers no more than that
 *     before; the body sent whole after the head, the loop woken at the
 *     mark): the pause leaves exactly the rest queued; let go, 1 more
 *     delivery, in the sink's memory; 0 bytes copied.
 * Before the change (an offer of no memory was a receive of LEAN_NOMEM_RECV
 * bytes into the engine's buffer, refused and held) the queues hold 4 KiB
 * less at the pauses, 4 KiB a read is copied, and each read takes one
 * delivery more: 4 of the checks fail.
 *
 * No timing: every wait is for an event (a socket state, a counter, a
 * read's end), bounded by WAIT_S (a hang fails the test).
 */
#include <errno.h>
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
#define BODY	(120 * KIB)
#define OBJ	(256 * KIB)
#define PIECE	(64 * KIB) /* read 2's sink is full once it has this much */
#define NREADS	2
#define WAIT_S	30
#define STALL_S 60

struct rd {
	struct httpsrv_end end;
	atomic_size_t got;  /* bytes delivered */
	atomic_uint calls;  /* deliveries of bytes to the sink */
	atomic_uint offers; /* deliveries whose bytes were in the offered memory */
	atomic_int full;    /* the sink has no room: offers none, refuses any piece */
	size_t full_at;	    /* full once at least this many were delivered (0: never) */
	uint64_t off;
	unsigned char buf[BODY];
};

static unsigned char body[OBJ];
static struct backend *be;

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len || atomic_load(&r->full))
		return atomic_load(&r->full) ? BACKEND_SINK_FULL : 0;
	if (off < r->off || off - r->off + len > BODY)
		return -EIO;
	if (buf == r->buf + (off - r->off))
		atomic_fetch_add(&r->offers, 1);
	else
		memcpy(r->buf + (off - r->off), buf, len);
	atomic_fetch_add(&r->calls, 1);
	if (atomic_fetch_add(&r->got, len) + len >= r->full_at && r->full_at) {
		r->full_at = 0; /* read 2: full once, when its first piece came */
		atomic_store(&r->full, 1);
	}
	return 0;
}

static void *mem(void *arg, uint64_t off, size_t *len)
{
	struct rd *r = arg;

	if (atomic_load(&r->full)) {
		*len = 0; /* full: the transfer pauses, nothing received */
		return NULL;
	}
	if (off < r->off || off - r->off >= BODY)
		return NULL;
	if (*len > BODY - (off - r->off))
		*len = BODY - (off - r->off);
	if (r->full_at && *len > r->full_at - (off - r->off)) /* read 2: up to full_at */
		*len = r->full_at - (off - r->off);
	return r->buf + (off - r->off);
}

struct srv {
	int lfd, c, cfd; /* listener, the server's end, the client's end */
	struct rd *r[NREADS];
	atomic_int sent; /* answers sent whole */
};

static int head_read(void *arg)
{
	return httpsrv_inq(((struct srv *)arg)->cfd) == 0;
}

static void *serve(void *arg)
{
	struct srv *s = arg;

	httpsrv_accept_client(s->lfd, WAIT_S, &s->c, &s->cfd);
	for (int i = 0; i < NREADS; i++) {
		unsigned a, b;

		if (httpsrv_read_range(s->c, OBJ, &a, &b, i + 1) < 0)
			FAIL("request %d: the connection ended or failed before its head", i + 1);
		if (a != s->r[i]->off || b - a + 1 != BODY)
			FAIL("request %d: range %u-%u", i + 1, a, b);
		httpsrv_head206(s->c, a, b, OBJ, "", "a head");
		if (httpsrv_wait_for(head_read, s, WAIT_S) < 0)
			FAIL("answer %d: the head not read within %d s", i + 1, WAIT_S);
		httpsrv_send(s->c, body + a, BODY, "a body");
		atomic_fetch_add(&s->sent, 1);
	}
	return NULL;
}

static uint64_t want_pauses;
static int paused(void *arg)
{
	struct backend_stats st;

	(void)arg;
	backend_get_stats(be, &st);
	return st.pauses == want_pauses;
}

static size_t want_inq;
static int queued(void *arg)
{
	return httpsrv_inq(((struct srv *)arg)->cfd) == (int)want_inq;
}

static int want_sent;
static int sent(void *arg)
{
	return atomic_load(&((struct srv *)arg)->sent) == want_sent;
}

int main(void)
{
	struct backend_stats st0, st1;
	struct srv s = {0};
	pthread_t srv;
	unsigned port;
	static const uint64_t offs[NREADS] = {1000, 4096 + 9};
	static const size_t full_at[NREADS] = {0, PIECE};
	/* deliveries after the pause (read 1: all of them) */
	static const unsigned want_calls[NREADS] = {1, 1};

	httpsrv_fill(body, OBJ, 41);
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < NREADS; i++) {
		s.r[i] = calloc(1, sizeof(*s.r[i]));
		if (!s.r[i])
			FAIL("calloc");
		s.r[i]->off = offs[i];
		s.r[i]->full_at = full_at[i];
		atomic_store(&s.r[i]->full, full_at[i] == 0);
		memset(s.r[i]->buf, 0xa5, sizeof(s.r[i]->buf));
	}
	be = httpsrv_lean_store(port, WAIT_S, STALL_S);
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s.r[i];
		unsigned calls0;

		backend_get_stats(be, &st0);
		backend_read_version_async_mem(be, "obj", NULL, 0, offs[i], BODY,
					       BACKEND_READ_PAUSABLE, sink, mem, r, httpsrv_done,
					       &r->end);
		want_pauses = st0.pauses + 1;
		if (httpsrv_wait_for(paused, NULL, WAIT_S) < 0)
			FAIL("read %d: no pause within %d s", i + 1, WAIT_S);
		/* the whole body sent: what the client's queue holds is what the
		 * engine did not receive */
		want_sent = i + 1;
		if (httpsrv_wait_for(sent, &s, WAIT_S) < 0)
			FAIL("answer %d not sent within %d s", i + 1, WAIT_S);
		/* read 2: its receives up to 64 KiB (the sink offers no more before) */
		CHECK(full_at[i] ? atomic_load(&r->got) >= full_at[i] : atomic_load(&r->got) == 0,
		      "read %d: %zu bytes delivered at the pause, want %s %zu", i + 1,
		      atomic_load(&r->got), full_at[i] ? "at least" : "exactly", full_at[i]);
		want_inq = BODY - atomic_load(&r->got);
		CHECK(
		    httpsrv_wait_for(queued, &s, WAIT_S) == 0,
		    "read %d: paused with %d bytes in the client's queue, want %zu (none received "
		    "at the pause)",
		    i + 1, httpsrv_inq(s.cfd), want_inq);
		calls0 = atomic_load(&r->calls);
		atomic_store(&r->full, 0);
		backend_sink_ready(be);
		httpsrv_wait_done(&r->end, WAIT_S, "a read");
		backend_get_stats(be, &st1);
		CHECK(r->end.err == 0 && atomic_load(&r->got) == BODY &&
			  memcmp(r->buf, body + offs[i], BODY) == 0,
		      "read %d: err %d (%s), %zu of %u bytes%s", i + 1, r->end.err,
		      strerror(-r->end.err), atomic_load(&r->got), BODY,
		      r->end.err == 0 && atomic_load(&r->got) == BODY ? ", wrong bytes" : "");
		CHECK(atomic_load(&r->calls) - calls0 == want_calls[i] &&
			  atomic_load(&r->offers) == atomic_load(&r->calls) &&
			  st1.recv_inplace_bytes - st0.recv_inplace_bytes == BODY &&
			  st1.recv_copied_bytes - st0.recv_copied_bytes == 0,
		      "read %d: %u deliveries after the pause, %u of %u in the sink's memory, %llu "
		      "bytes received there, %llu copied (want %u, all, %u, 0)",
		      i + 1, atomic_load(&r->calls) - calls0, atomic_load(&r->offers),
		      atomic_load(&r->calls),
		      (unsigned long long)(st1.recv_inplace_bytes - st0.recv_inplace_bytes),
		      (unsigned long long)(st1.recv_copied_bytes - st0.recv_copied_bytes),
		      want_calls[i], BODY);
		CHECK(st1.pauses - st0.pauses == 1 && st1.resumes - st0.resumes == 1 &&
			  st1.pause_backstops == st0.pause_backstops,
		      "read %d: %llu pauses, %llu resumes, %llu by the backstop (want 1, 1, 0)",
		      i + 1, (unsigned long long)(st1.pauses - st0.pauses),
		      (unsigned long long)(st1.resumes - st0.resumes),
		      (unsigned long long)(st1.pause_backstops - st0.pause_backstops));
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
	return check_summary("io-pause");
}
