/*
 * test_iosplice.c — the lean engine's receives into a sink's pipe (backend/backend_io_lean.c,
 * splice_some; backend.h, backend_sink_pipe_cb): the socket's bytes spliced into the pipe the
 * sink offers, handed to the sink with buf NULL, never copied (store_recv_spliced_bytes).
 *
 * A server thread on 127.0.0.1 answers NREADS seeded ranged GETs of a seeded random object:
 * the head alone first (the client reads it before any body byte is sent, so no body byte
 * comes in the head's receive), then the body in seeded pieces of 1 byte to 24 KiB (each its
 * own segment: TCP_NODELAY), and for a seeded third of the reads a cut: the connection closed
 * after a seeded count of body bytes. Each read has a store of its own (one connection; a
 * cut read's store is down after it, its breaker). The sink takes at most a
 * seeded cap of bytes a pipe (a short splice at each cap's end); some reads' pipes are one page
 * (one slot: full of one socket piece, so the engine says the pipe is full and the sink drains
 * it before it offers it again), the others 1 MiB. The sink reads each pipe out when it is at
 * its cap or full, and at the read's end.
 * Checks per read: a whole read ends with 0 and every byte of its range, in order; a cut one
 * ends with an error and exactly the bytes before the cut; every delivery had buf NULL (in the
 * pipe); the engine's spliced bytes (and its in-place ones) grew by exactly the bytes delivered,
 * its copied ones by 0; the pipe holds nothing the sink was not handed. Then over all reads:
 * the one-slot pipes were said full at least once, and more than one cut ran.
 * Without the engine's splice (splice_some answering 0: the memory path) every read's spliced
 * count and buf-NULL checks fail (2 checks a read).
 *
 * No timing: every wait is for an event (a socket state, a read's end), bounded by WAIT_S.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "httpsrv.h"

#define KIB	1024u
#define OBJ	(1024 * KIB)
#define NREADS	12
#define WAIT_S	30
#define STALL_S 60

struct rd {
	struct httpsrv_end end;
	uint64_t off;
	size_t len;
	size_t cut;	 /* the server closes after this many body bytes (len: none) */
	size_t cap;	 /* bytes the sink takes a pipe */
	int small;	 /* its pipe is one page */
	int pp[2];	 /* the pipe */
	size_t inpipe;	 /* bytes handed to the sink, in the pipe */
	size_t got;	 /* bytes read out of the pipe into buf */
	unsigned nonull; /* deliveries with bytes not in the pipe */
	unsigned fulls;	 /* offers with full set */
	unsigned bad;	 /* offers at another offset than the next byte's */
	unsigned char *buf;
};

static unsigned char body[OBJ];

/* The pipe's bytes into r->buf (all of them: r->inpipe). */
static void drain(struct rd *r)
{
	while (r->inpipe) {
		ssize_t n = read(r->pp[0], r->buf + r->got, r->inpipe);

		if (n <= 0)
			FAIL("the pipe short of %zu bytes handed over (%s)", r->inpipe,
			     n < 0 ? strerror(errno) : "empty");
		r->got += (size_t)n;
		r->inpipe -= (size_t)n;
	}
}

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return 0;
	if (off != r->off + r->got + r->inpipe || r->got + r->inpipe + len > r->len)
		return -EIO;
	if (buf) { /* not in the pipe: taken after the pipe's bytes */
		r->nonull++;
		drain(r);
		memcpy(r->buf + r->got, buf, len);
		r->got += len;
		return 0;
	}
	r->inpipe += len;
	if (r->inpipe >= r->cap)
		drain(r);
	return 0;
}

static int pipe_offer(void *arg, uint64_t off, size_t *len, int full)
{
	struct rd *r = arg;

	if (off != r->off + r->got + r->inpipe) {
		r->bad++;
		return -1;
	}
	if (full) {
		r->fulls++;
		drain(r);
	}
	if (r->inpipe >= r->cap)
		drain(r);
	if (*len > r->cap - r->inpipe)
		*len = r->cap - r->inpipe;
	return r->pp[1];
}

struct srv {
	int lfd, c, cfd;
	struct rd *r[NREADS];
	uint64_t seed;
};

static unsigned rnd(uint64_t *s, unsigned n)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (unsigned)((*s >> 33) % n);
}

static int head_read(void *arg)
{
	return httpsrv_inq(((struct srv *)arg)->cfd) == 0;
}

static void *serve(void *arg)
{
	struct srv *s = arg;
	uint64_t sd = s->seed ^ 0x5eedu;

	s->c = -1;
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s->r[i];
		unsigned a, b;
		size_t sent = 0;
		int one = 1;

		/* each read has a store of its own (a cut one's breaker stays its own) */
		httpsrv_accept_client(s->lfd, WAIT_S, &s->c, &s->cfd);
		setsockopt(s->c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (httpsrv_read_range(s->c, OBJ, &a, &b, i + 1) < 0)
			FAIL("request %d: the connection ended before its head", i + 1);
		if (a != r->off || b - a + 1 != r->len)
			FAIL("request %d: range %u-%u", i + 1, a, b);
		httpsrv_head206(s->c, a, b, OBJ, "", "a head");
		if (httpsrv_wait_for(head_read, s, WAIT_S) < 0)
			FAIL("answer %d: the head not read within %d s", i + 1, WAIT_S);
		while (sent < r->cut) {
			size_t n = 1 + rnd(&sd, 24 * KIB);

			if (n > r->cut - sent)
				n = r->cut - sent;
			httpsrv_send(s->c, body + a + sent, n, "a body's piece");
			sent += n;
		}
		/* the cut: the client sees the close after the bytes; a whole read's
		 * connection goes once the read ended (its store closes it) */
		if (r->cut < r->len)
			close(s->c);
		else if (httpsrv_read_range(s->c, OBJ, &a, &b, i + 1) == 0)
			FAIL("request %d: a second request on the connection", i + 1);
		else
			close(s->c);
		s->c = -1;
	}
	return NULL;
}

int main(void)
{
	struct backend_stats st0, st1;
	struct backend *be;
	struct srv s = {0};
	pthread_t srv;
	unsigned port, cuts = 0, smallfull = 0;
	uint64_t seed = 20261201u, sd;
	const char *env = getenv("SHARDFS_TEST_SEED");

	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("seed %llu (SHARDFS_TEST_SEED)\n", (unsigned long long)seed);
	sd = seed;
	for (size_t i = 0; i < OBJ; i++)
		body[i] = (unsigned char)rnd(&sd, 256);
	s.seed = seed;
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = calloc(1, sizeof(*r));

		if (!r || !(r->buf = malloc(OBJ)))
			FAIL("calloc");
		r->len = 64 * KIB + rnd(&sd, 400 * KIB);
		r->off = rnd(&sd, (unsigned)(OBJ - r->len));
		r->cut = (i % 3 == 1) ? 1 + rnd(&sd, (unsigned)r->len - 1) : r->len;
		r->cap = 4 * KIB + rnd(&sd, 128 * KIB);
		r->small = (i % 2) == 0;
		if (pipe2(r->pp, O_NONBLOCK | O_CLOEXEC) != 0)
			FAIL("pipe2: %s", strerror(errno));
		if (fcntl(r->pp[1], F_SETPIPE_SZ, r->small ? 4096 : (int)(1024 * KIB)) < 0)
			FAIL("F_SETPIPE_SZ: %s", strerror(errno));
		memset(r->buf, 0xa5, OBJ);
		s.r[i] = r;
	}
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s.r[i];
		int q = -1;

		be = httpsrv_lean_store(port, WAIT_S, STALL_S);
		backend_get_stats(be, &st0);
		backend_read_version_async_pipe(be, "obj", NULL, 0, r->off, r->len,
						BACKEND_READ_PAUSABLE, sink, NULL, pipe_offer, r,
						httpsrv_done, &r->end);
		httpsrv_wait_done(&r->end, WAIT_S, "a read");
		backend_get_stats(be, &st1);
		backend_close(be);
		drain(r);
		if (r->cut < r->len) {
			cuts++;
			CHECK(r->end.err < 0 && r->got == r->cut &&
				  memcmp(r->buf, body + r->off, r->cut) == 0,
			      "read %d (cut after %zu of %zu): err %d, %zu bytes%s", i + 1, r->cut,
			      r->len, r->end.err, r->got, r->got == r->cut ? ", wrong bytes" : "");
		} else {
			CHECK(r->end.err == 0 && r->got == r->len &&
				  memcmp(r->buf, body + r->off, r->len) == 0,
			      "read %d (%zu bytes at %llu): err %d (%s), %zu bytes%s", i + 1,
			      r->len, (unsigned long long)r->off, r->end.err, strerror(-r->end.err),
			      r->got, r->got == r->len ? ", wrong bytes" : "");
		}
		CHECK(
		    r->nonull == 0 && r->bad == 0,
		    "read %d: %u deliveries not in the pipe, %u offers at a wrong offset (want 0)",
		    i + 1, r->nonull, r->bad);
		CHECK(st1.recv_spliced_bytes - st0.recv_spliced_bytes == r->got &&
			  st1.recv_inplace_bytes - st0.recv_inplace_bytes == r->got &&
			  st1.recv_copied_bytes - st0.recv_copied_bytes == 0,
		      "read %d: %llu bytes spliced, %llu in place, %llu copied (want %zu, %zu, 0)",
		      i + 1, (unsigned long long)(st1.recv_spliced_bytes - st0.recv_spliced_bytes),
		      (unsigned long long)(st1.recv_inplace_bytes - st0.recv_inplace_bytes),
		      (unsigned long long)(st1.recv_copied_bytes - st0.recv_copied_bytes), r->got,
		      r->got);
		CHECK(ioctl(r->pp[0], FIONREAD, &q) == 0 && q == 0,
		      "read %d: %d bytes left in the pipe (want 0)", i + 1, q);
		if (r->small && r->fulls)
			smallfull++;
		printf("read %d: %zu bytes at %llu, cut %zu, cap %zu, %s pipe, %u fulls\n", i + 1,
		       r->len, (unsigned long long)r->off, r->cut, r->cap,
		       r->small ? "one-page" : "1 MiB", r->fulls);
	}
	CHECK(smallfull > 0 && cuts > 1, "%u one-page pipes said full, %u cuts (want > 0, > 1)",
	      smallfull, cuts);
	pthread_join(srv, NULL);
	for (int i = 0; i < NREADS; i++) {
		close(s.r[i]->pp[0]);
		close(s.r[i]->pp[1]);
		free(s.r[i]->buf);
		free(s.r[i]);
	}
	if (s.c >= 0)
		close(s.c);
	close(s.lfd);
	return check_summary("io-splice");
}
