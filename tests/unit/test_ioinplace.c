/*
 * test_ioinplace.c — the lean engine's receives into a sink's own memory
 * (backend/backend_io_lean.c, recv_some): a sink that offers memory and never pauses
 * (backend_read_version_async_mem without BACKEND_READ_PAUSABLE: the stage's reads,
 * cachetier_memread.c) gets the body's rest in one receive, not in pieces of the engine's
 * 64 KiB buffer; a pausable one (a fill's) still gets at most the buffer's size a receive
 * (a paused piece is held there). Each receive of body bytes is one delivery to the sink,
 * so deliveries count the receives.
 *
 * A server thread on 127.0.0.1 answers ranged GETs on one kept-alive connection of a
 * seeded random object, and sees the client's socket itself (this process's fd whose port
 * is the peer's). Each answer: the head alone; once the head was read and the socket's
 * receive mark (SO_RCVLOWAT) is the body's rest, up to IO_LOWAT_MAX (128 KiB), the body:
 *  1. ONE bytes (120 KiB: under the mark) in one send, not pausable: all of it in exactly
 *     one delivery, received in the sink's memory (recv_inplace_bytes);
 *  2. TWO bytes (192 KiB) not pausable: the first MARK bytes in one send (the loop woken
 *     once all are in), then, once they were delivered, the rest: exactly 2 deliveries;
 *  3. ONE bytes, pausable: 2 deliveries (64 KiB, then the rest), as before.
 * Every byte is compared, the buffer filled with a pattern before each read (a byte the
 * receive did not write shows). Without the change (at most 64 KiB a receive whatever the
 * sink) reads 1 and 2 take 2 and 3 deliveries.
 *
 * No timing: every wait is for an event (a socket state, a delivery, a read's end),
 * bounded by WAIT_S (a hang fails the test).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "check.h"
#include "httpsrv.h"

#define KIB	1024u
#define ONE	(120 * KIB)
#define TWO	(192 * KIB)
#define MARK	(128 * KIB) /* IO_LOWAT_MAX (backend_io_i.h) */
#define OBJ	(256 * KIB)
#define NREADS	3
#define WAIT_S	30
#define STALL_S 30

struct rd {
	struct httpsrv_end end;
	atomic_size_t got;  /* bytes delivered */
	atomic_uint calls;  /* deliveries of bytes to the sink */
	atomic_uint offers; /* deliveries whose bytes were in the offered memory */
	uint64_t off;
	size_t len;
	unsigned char buf[OBJ];
};

static unsigned char body[OBJ];

static int sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct rd *r = arg;

	if (!len)
		return 0;
	if (off < r->off || off - r->off + len > r->len)
		return -EIO;
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

	if (off < r->off || off - r->off >= r->len)
		return NULL;
	if (*len > r->len - (off - r->off))
		*len = r->len - (off - r->off);
	return r->buf + (off - r->off);
}

/* Poll cond(arg) every millisecond until it holds; 0, or -1 after WAIT_S. */
static int wait_for(int (*cond)(void *), void *arg)
{
	for (int i = 0; i < WAIT_S * 1000; i++) {
		struct timespec ms = {0, 1000000};

		if (cond(arg))
			return 0;
		nanosleep(&ms, NULL);
	}
	return cond(arg) ? 0 : -1;
}

/* This process's TCP socket whose own port is port (the client's end), or -1. */
static int client_fd(unsigned port)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int found = -1;

	if (!d)
		return -1;
	while (found < 0 && (e = readdir(d))) {
		struct sockaddr_in a;
		socklen_t l = sizeof(a);
		int fd = atoi(e->d_name);

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		if (getsockname(fd, (struct sockaddr *)&a, &l) == 0 && a.sin_family == AF_INET &&
		    ntohs(a.sin_port) == port)
			found = fd;
	}
	closedir(d);
	return found;
}

struct srv {
	int lfd, c, cfd; /* listener, the server's end, the client's end */
	struct rd *r[NREADS];
	int mark;    /* the client's SO_RCVLOWAT awaited (mark_is) */
	size_t want; /* bytes delivered awaited (delivered) */
	int cur;     /* the read under way */
};

static int inq(int fd)
{
	int n = -1;

	return ioctl(fd, SIOCINQ, &n) == 0 ? n : -1;
}

static int mark_is(void *arg)
{
	struct srv *s = arg;
	int v = 0;
	socklen_t l = sizeof(v);

	return getsockopt(s->cfd, SOL_SOCKET, SO_RCVLOWAT, &v, &l) == 0 && v == s->mark;
}

static int head_read(void *arg)
{
	return inq(((struct srv *)arg)->cfd) == 0;
}

static int delivered(void *arg)
{
	struct srv *s = arg;

	return atomic_load(&s->r[s->cur]->got) == s->want;
}

static void *serve(void *arg)
{
	struct srv *s = arg;
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	struct pollfd p = {.fd = s->lfd, .events = POLLIN};

	if (poll(&p, 1, WAIT_S * 1000) != 1)
		FAIL("no connection within %d s", WAIT_S);
	s->c = accept(s->lfd, (struct sockaddr *)&peer, &pl);
	if (s->c < 0)
		FAIL("accept: %s", strerror(errno));
	s->cfd = client_fd(ntohs(peer.sin_port));
	if (s->cfd < 0)
		FAIL("the client's socket (port %u) not found", ntohs(peer.sin_port));
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s->r[i];
		unsigned a, b;
		size_t first;

		if (httpsrv_read_range(s->c, OBJ, &a, &b, i + 1) < 0)
			FAIL("request %d: the connection ended or failed before its head", i + 1);
		if (a != r->off || b - a + 1 != r->len)
			FAIL("request %d: range %u-%u", i + 1, a, b);
		httpsrv_head206(s->c, a, b, OBJ, "", "a head");
		s->cur = i;
		s->mark = (int)(r->len < MARK ? r->len : MARK);
		if (wait_for(head_read, s) < 0 || wait_for(mark_is, s) < 0)
			FAIL("answer %d: the head not read, or the mark not %d, within %d s", i + 1,
			     s->mark, WAIT_S);
		first = r->len < MARK ? r->len : MARK;
		httpsrv_send(s->c, body + a, first, "a body");
		if (first < r->len) { /* the rest once the first part was delivered */
			s->want = first;
			if (wait_for(delivered, s) < 0)
				FAIL("answer %d: the first %zu bytes not delivered within %d s",
				     i + 1, first, WAIT_S);
			httpsrv_send(s->c, body + a + first, r->len - first, "a body's rest");
		}
	}
	return NULL;
}

int main(void)
{
	struct backend_config cfg = {0};
	struct backend_stats st0, st1;
	struct backend *be;
	struct srv s = {0};
	char url[128];
	pthread_t srv;
	unsigned port, seed = 37;
	int err;
	static const uint64_t offs[NREADS] = {1000, 4096 + 7, 333};
	static const size_t lens[NREADS] = {ONE, TWO, ONE};
	static const unsigned flags[NREADS] = {0, 0, BACKEND_READ_PAUSABLE};
	static const unsigned want_calls[NREADS] = {1, 2, 2};

	for (size_t i = 0; i < OBJ; i++) {
		seed = seed * 1103515245u + 12345u;
		body[i] = (unsigned char)(seed >> 16);
	}
	s.lfd = httpsrv_listen(4, &port);
	for (int i = 0; i < NREADS; i++) {
		s.r[i] = calloc(1, sizeof(*s.r[i]));
		if (!s.r[i])
			FAIL("calloc");
		s.r[i]->off = offs[i];
		s.r[i]->len = lens[i];
		memset(s.r[i]->buf, 0xa5, sizeof(s.r[i]->buf));
	}
	cfg.connections = 1;
	cfg.max_connections = 1;
	cfg.http_engine = 1;	/* the lean engine */
	cfg.retry_budget_s = 0; /* one attempt */
	cfg.connect_timeout_s = WAIT_S;
	cfg.stall_timeout_s = STALL_S;
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/d/obj", port);
	err = backend_open(&be, url, &cfg);
	if (err < 0)
		FAIL("backend_open %s: %s", url, strerror(-err));
	if (pthread_create(&srv, NULL, serve, &s) != 0)
		FAIL("server thread");
	for (int i = 0; i < NREADS; i++) {
		struct rd *r = s.r[i];

		backend_get_stats(be, &st0);
		backend_read_version_async_mem(be, "obj", NULL, 0, offs[i], lens[i], flags[i], sink,
					       mem, r, httpsrv_done, &r->end);
		httpsrv_wait_done(&r->end, WAIT_S, "a read");
		backend_get_stats(be, &st1);
		CHECK(r->end.err == 0 && atomic_load(&r->got) == lens[i] &&
			  memcmp(r->buf, body + offs[i], lens[i]) == 0,
		      "read %d: err %d (%s), %zu of %zu bytes%s", i + 1, r->end.err,
		      strerror(-r->end.err), atomic_load(&r->got), lens[i],
		      r->end.err == 0 && atomic_load(&r->got) == lens[i] ? ", wrong bytes" : "");
		CHECK(atomic_load(&r->calls) == want_calls[i] &&
			  atomic_load(&r->offers) == want_calls[i] &&
			  st1.recv_inplace_bytes - st0.recv_inplace_bytes == lens[i] &&
			  st1.recv_copied_bytes == st0.recv_copied_bytes,
		      "read %d (%zu bytes, %s): %u deliveries, %u of them in the sink's memory, "
		      "%llu bytes received there, %llu copied (want %u, %u, %zu, 0)",
		      i + 1, lens[i], flags[i] ? "pausable" : "not pausable",
		      atomic_load(&r->calls), atomic_load(&r->offers),
		      (unsigned long long)(st1.recv_inplace_bytes - st0.recv_inplace_bytes),
		      (unsigned long long)(st1.recv_copied_bytes - st0.recv_copied_bytes),
		      want_calls[i], want_calls[i], lens[i]);
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
