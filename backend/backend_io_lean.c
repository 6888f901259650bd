/*
 * backend_io_lean.c — the lean engine (contract: backend_io_i.h): one attempt of a plain ranged
 * GET (http://, a literal IP address or a host name, resolved off the loop by
 * backend_io_resolve.c, no request body, not signed: a signed request's secrets stay in curl's
 * undumped memory; no proxy in the environment) as one request and response on a kept-alive
 * connection of its own pool, on the I/O thread's loop, without curl. It sits below
 * backend_io_xfer.c's request life (slots, retries, redirects, resume, the breaker, the stats): an
 * attempt ends in backend__io_xfer_done with the curl code curl would have given (CURLE_OK,
 * PARTIAL_FILE, COULDNT_CONNECT, RECV_ERROR, ...), and the answer's head and body go through the
 * checks both engines share (backend_io_attempt.c).
 *
 * A connection: a non-blocking TCP socket (TCP_NODELAY, SO_KEEPALIVE, as curl sets them) with one
 * uv_poll_t, polled for reading from its connect to its close (a reused connection costs no
 * epoll_ctl), for writing only while its connect or request is under way. Its buffer
 * (IO_BUFFER_BYTES) holds the head (with the body bytes that came in its receive: at most
 * LEAN_HEAD_RECV bytes in all when the sink offers memory) and each piece of body (at most
 * LEAN_NOMEM_RECV when a sink that offers memory and may pause offers none: a full fill, whose
 * piece is held; so a fill's connection touches one page of its buffer), unless the sink offers
 * memory of its own (backend_req.on_mem: a fill's buffer, the stage's span) for a body it takes
 * whole (a 2xx, nothing to skip): then the body is received there, at most LEAN_PAUSABLE_RECV a
 * receive for a sink that may pause (a fill's buffer whole), else as much of the body's rest as is
 * in (one receive a wake-up, not one per 64 KiB: test io-inplace), and handed to the same checks
 * (backend__io_body) and the sink, which need not copy it; the counters say which
 * (recv_inplace_bytes, recv_copied_bytes). One request is out at a time, and a recv of body never
 * asks for more than the body has left: bytes past the answer are the server's error (the
 * connection is then not kept). A paused sink (BACKEND_SINK_FULL) leaves the piece in the buffer
 * (a piece received in the sink's memory is copied there first: that memory is the sink's again
 * once it answered, and a fill may hand it to its writer; one longer than the buffer into a copy
 * of its own, held_copy) and the socket unpolled until backend__io_lean_resume offers it again;
 * one that says it is full when asked for memory (*len 0) pauses before the receive.
 *
 * Kept alive when the answer was read whole and neither side said close; closed on any error, on
 * Connection: close, at HTTP/1.0 without keep-alive, when an attempt ends before its answer does,
 * when the server closes or writes to an idle one (it is polled), when idle longer than
 * LEAN_IDLE_MS, and past the pool's bound (curl's CURLMOPT_MAXCONNECTS: 2 * max_connections + 2).
 * A request sent on a kept connection the server had closed (nothing came back, EOF or a reset) is
 * sent once more on a new connection, as curl does, not counted as an attempt.
 *
 * A redirect is read as any answer; its Location, resolved as curl resolves it
 * (backend__url_join), is what backend_io_xfer.c follows. What it leaves to curl
 * (backend__io_xfer_to_curl: the attempt goes again through curl, not counted): an answer
 * backend__h1_head does not read (BACKEND_H1_UNSUP or not HTTP/1.x: 1xx, chunked, no
 * Content-Length, ...); LEAN_UNSUP_MAX such answers in a row leave every later request of the
 * store to curl. Past an answer's head the loop is woken for its body only once the body's rest
 * (up to IO_LOWAT_MAX) is in (the socket's SO_RCVLOWAT: on_readable), the mark back to 1 when the
 * connection stays idle until the loop waits (prep_cb; a request started on it at once sets its
 * own: io-marks; a pause keeps it); each tick asks for what is in, so bytes short of the mark wait
 * at most a tick. For a sink that offers memory and never pauses (the stage's reads) the mark is
 * set when the request is sent, to the range's rest (up to IO_LOWAT_MAX): the head and the
 * body wake the loop once (io-inplace), and an answer shorter than it (an error, a shorter range)
 * is read at the next tick. Bounds: a connect by connect_timeout_s, silence by stall_timeout_s,
 * both checked by one tick (at most 1 s, at most half of either bound) while an attempt runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <uv.h>

#include "backend_h1.h"
#include "backend_i.h"
#include "backend_io_i.h"

#define LEAN_IDLE_MS  60000u /* curl's CURLOPT_MAXAGE_CONN is 118 s; servers close sooner */
#define LEAN_REQ_MAX  4096   /* a request head (signed headers included) */
#define LEAN_HDRS_MAX 32
/* The first receive of an answer whose sink offers memory asks for at most this much (a head is a
 * few hundred bytes; one past it gets the rest of the buffer): the body bytes that come with the
 * head are copied, the rest is received in the sink's memory */
#define LEAN_HEAD_RECV 2048
/* A receive of body for a sink that offers memory and may pause, when it offers none and is not
 * full (a piece it may yet refuse, to be held) asks for at most this much: the held piece is one
 * page of the connection's buffer, the page the head was received into, so a connection faults in
 * 1 page of its buffer, not 16 (a fresh mount's prefetch opens some 40 connections, each page
 * fault a trap to the hypervisor on a VM: tests/bench/README.md, L4), and the bytes copied once
 * the sink takes them again are a page, not 64 KiB */
#define LEAN_NOMEM_RECV 4096
/* The most a receive of body asks into the memory of a sink that may pause (a fill's buffer of 128
 * KiB, FILL_BUF_BYTES): one receive a buffer, not two of the engine's buffer's size. A sink that
 * offered memory seldom refuses the piece received there (a fill says it is full when asked for
 * memory instead: the pause before the receive); one it refuses that is longer than the engine's
 * buffer is held in a copy of its own (held_copy) until the transfer goes on. */
#define LEAN_PAUSABLE_RECV (128 * 1024)

enum lc_state { LC_IDLE, LC_RESOLVE, LC_CONNECT, LC_SEND, LC_HEAD, LC_BODY, LC_DONE };

struct lconn {
	uv_poll_t poll; /* first: the handle is freed as struct lconn */
	int fd;		/* -1: no socket (and no poll handle) yet: LC_RESOLVE */
	struct backend_io *io;
	struct lconn *next;	/* io->lean_idle while idle */
	struct lconn *prev_all; /* io->lean_all */
	struct lconn *next_all;
	struct xfer *x; /* the attempt on it, or NULL: idle */
	enum lc_state state;
	int events;   /* polled now */
	int keep;     /* LC_DONE: the answer was read whole, may carry the next */
	int served;   /* answers read on it: a kept connection */
	unsigned gen; /* the tick's pass that saw it last */
	struct sockaddr_storage sa;
	socklen_t salen;
	/* a host name's (else name ""): its port, its lookup's addresses (each tried in turn by a
	 * connect that fails) and the wait for it */
	char name[BACKEND_H1_NAME_MAX + 1];
	unsigned port;
	struct sockaddr_storage addrs[IO_RESOLVE_ADDRS];
	socklen_t alens[IO_RESOLVE_ADDRS];
	unsigned naddr, iaddr;
	struct io_rwait rw;
	uint64_t t0_ns; /* lookup or connect began, or idle since */
	size_t req_len, req_off;
	size_t have;	    /* head bytes in buf */
	uint64_t body_left; /* body bytes still to come */
	const char *held;   /* a paused piece (in buf or held_copy), or NULL */
	int lowat;	    /* its SO_RCVLOWAT now, 0: 1 (backend__io_lowat) */
	size_t held_len;
	char *held_copy; /* a held piece longer than buf (malloc'd), or NULL */
	char req[LEAN_REQ_MAX];
	char buf[IO_BUFFER_BYTES];
};

static void lc_free_cb(uv_handle_t *h)
{
	free(h->data);
}

static void lc_poll(struct lconn *c, int events);

static void held_drop(struct lconn *c) /* c holds no piece: a copy of one freed */
{
	c->held = NULL;
	free(c->held_copy);
	c->held_copy = NULL;
}

static void lc_close(struct lconn *c)
{
	struct backend_io *io = c->io;

	held_drop(c);
	if (c->prev_all)
		c->prev_all->next_all = c->next_all;
	else
		io->lean_all = c->next_all;
	if (c->next_all)
		c->next_all->prev_all = c->prev_all;
	backend__io_resolve_forget(&c->rw);
	if (c->fd < 0) { /* no socket, no handle */
		free(c);
		return;
	}
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, lc_free_cb);
	close(c->fd); /* libuv leaves the fd to its owner */
}

/* *pp, an idle connection, leaves io->lean_idle (its mark, if not 1 yet, leaves
 * io->lean_stale's count) */
static struct lconn *idle_take(struct backend_io *io, struct lconn **pp)
{
	struct lconn *c = *pp;

	*pp = c->next;
	io->nlean_idle--;
	if (c->lowat > 1)
		io->lean_stale--;
	c->next = NULL;
	return c;
}

static void idle_remove(struct backend_io *io, struct lconn *c)
{
	struct lconn **pp = &io->lean_idle;

	while (*pp && *pp != c)
		pp = &(*pp)->next;
	if (*pp)
		idle_take(io, pp);
	c->next = NULL;
}

static void tick_cb(uv_timer_t *t);

static void active_inc(struct backend_io *io)
{
	if (io->lean_active++ == 0) {
		uint64_t ms = 1000, s = (uint64_t)(io->stall_ns / 2000000u),
			 cms = (uint64_t)io->connect_ms / 2;

		if (io->stall_ns != UINT64_MAX && s < ms)
			ms = s;
		if (io->connect_ms > 0 && cms < ms)
			ms = cms;
		if (ms < 5)
			ms = 5;
		uv_timer_start(&io->lean_tick, tick_cb, ms, ms);
	}
}

static void active_dec(struct backend_io *io)
{
	if (--io->lean_active == 0)
		uv_timer_stop(&io->lean_tick);
}

/* The attempt ends with curl code c; the connection's fate is decided
 * by its state (backend__io_lean_detach, which xfer_done reaches). */
static void attempt_end(struct lconn *c, CURLcode code)
{
	struct xfer *x = c->x;
	struct backend_io *io = c->io;

	backend__io_xfer_done(x, code);
	backend__io_kick(io);
}

/* The attempt failed on the way: what (and errno e's words, when e). */
static void fail(struct lconn *c, CURLcode code, const char *what, int e)
{
	if (e)
		snprintf(c->x->lerr, sizeof(c->x->lerr), "%s: %s", what, strerror(e));
	else
		snprintf(c->x->lerr, sizeof(c->x->lerr), "%s", what);
	c->state = LC_DONE;
	c->keep = 0;
	attempt_end(c, code);
}

static void on_poll(uv_poll_t *h, int status, int events);

static void lc_poll(struct lconn *c, int events)
{
	if (events == c->events)
		return;
	if (events)
		uv_poll_start(&c->poll, events, on_poll);
	else
		uv_poll_stop(&c->poll);
	c->events = events;
}

/* A new connection, no socket yet (fd -1), in io->lean_all. NULL: out of
 * memory. */
static struct lconn *lc_new(struct backend_io *io)
{
	struct lconn *c = malloc(sizeof(*c));

	if (!c)
		return NULL;
	memset(c, 0, offsetof(struct lconn, req));
	c->fd = -1;
	c->io = io;
	c->next_all = io->lean_all;
	if (io->lean_all)
		io->lean_all->prev_all = c;
	io->lean_all = c;
	c->t0_ns = uv_hrtime();
	return c;
}

/* c's socket to sa, its connect under way. < 0: errno says why (c is then
 * still to be closed by the caller). */
static int lc_connect(struct lconn *c, const struct sockaddr_storage *sa, socklen_t salen)
{
	struct backend_io *io = c->io;
	int one = 1, fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	if (uv_poll_init_socket(&io->loop, &c->poll, fd) < 0) {
		close(fd);
		errno = ENOMEM;
		return -1;
	}
	c->fd = fd;
	c->poll.data = c;
	c->events = 0;
	c->sa = *sa;
	c->salen = salen;
	atomic_fetch_add_explicit(&io->n_connects, 1, memory_order_relaxed);
	c->t0_ns = uv_hrtime();
	c->state = LC_CONNECT;
	if (connect(fd, (const struct sockaddr *)sa, salen) < 0 && errno != EINPROGRESS)
		return -1;
	return 0;
}

/* A new connection to sa, its connect under way. NULL: errno says why. */
static struct lconn *lc_open(struct backend_io *io, const struct sockaddr_storage *sa,
			     socklen_t salen)
{
	struct lconn *c = lc_new(io);
	int e;

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (lc_connect(c, sa, salen) < 0) {
		e = errno;
		lc_close(c);
		errno = e;
		return NULL;
	}
	return c;
}

static void send_req(struct lconn *c, int sync);

/* Start c's request (in c->req) for x: send it now when connected (a
 * failure then is seen by the poll: the attempt never ends inside
 * backend__io_lean_start, which backend__io_kick calls). */
static void lc_begin(struct lconn *c, struct xfer *x)
{
	c->x = x;
	x->lc = c;
	c->req_off = 0;
	c->have = 0;
	held_drop(c);
	c->keep = 0;
	active_inc(c->io);
	if (c->state == LC_RESOLVE)
		return; /* backend__io_lean_resolved goes on */
	if (c->state == LC_CONNECT) {
		lc_poll(c, UV_WRITABLE | UV_READABLE);
		return;
	}
	c->state = LC_SEND;
	send_req(c, 1);
}

/* c's attempt goes on on n, a new connection (its connect under way): c's
 * request, name and port go to n, and c is closed. */
static void hand_off(struct lconn *c, struct lconn *n)
{
	struct xfer *x = c->x;

	memcpy(n->req, c->req, c->req_len);
	n->req_len = c->req_len;
	memcpy(n->name, c->name, sizeof(n->name));
	n->port = c->port;
	x->lc = NULL;
	c->x = NULL;
	active_dec(c->io);
	lc_close(c);
	lc_begin(n, x);
}

/* The request went on a kept connection the server had closed: once more on
 * a new one (curl's rule: no answer at all on a reused connection). */
static void resend_fresh(struct lconn *c)
{
	struct lconn *n = lc_open(c->io, &c->sa, c->salen);
	int e = errno;

	if (!n) {
		fail(c, CURLE_COULDNT_CONNECT, "Failed to connect", e);
		return;
	}
	hand_off(c, n);
}

static void send_req(struct lconn *c, int sync)
{
	while (c->req_off < c->req_len) {
		ssize_t n = send(c->fd, c->req + c->req_off, c->req_len - c->req_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || sync)) {
			lc_poll(c, UV_WRITABLE | UV_READABLE);
			return;
		}
		if (n < 0) {
			if (c->served && c->req_off == 0) {
				resend_fresh(c);
				return;
			}
			fail(c, CURLE_SEND_ERROR, "Send failure", errno);
			return;
		}
		c->req_off += (size_t)n;
	}
	c->state = LC_HEAD;
	/* a sink that offers memory and never pauses (the stage's) takes the whole answer in two
	 * receives: the loop is woken once its bytes reach the range's rest (up to
	 * IO_LOWAT_MAX), not for its head and again for its body; a shorter answer (an
	 * error, a shorter range) is read by the tick (tick_cb) */
	if (c->x->r->on_mem && !c->x->r->pausable && c->x->r->range_len > c->x->r->delivered)
		backend__io_lowat(c->io, c->fd, &c->lowat, c->x->r->range_len - c->x->r->delivered,
				  IO_LOWAT_MAX);
	else /* a kept connection's last mark (lean_detach leaves it): its head wakes the loop */
		backend__io_lowat(c->io, c->fd, &c->lowat, 1, 1);
	lc_poll(c, UV_READABLE);
}

/* One piece of body to the shared checks and the sink: in c->buf, or (inplace) in memory the sink
 * offered. Returns 1 when the attempt ended (c may be gone) or paused, 0 to read on. */
static int deliver(struct lconn *c, const char *p, size_t n, int inplace)
{
	struct xfer *x = c->x;
	uint64_t d0 = x->r->delivered;
	size_t k = backend__io_body(x, p, n);

	if (k == CURL_WRITEFUNC_PAUSE) {
		/* the sink's memory is its own again once it answered: the piece is held in the
		 * connection's buffer, or in a copy of its own when longer (held_copy: none yet) */
		if (inplace && n > sizeof(c->buf) && !(c->held_copy = malloc(n))) {
			x->paused = 0; /* it ends instead */
			fail(c, CURLE_OUT_OF_MEMORY, "Out of memory", ENOMEM);
			return 1;
		}
		if (inplace)
			p = memcpy(c->held_copy ? c->held_copy : c->buf, p, n);
		c->held = p;
		c->held_len = n;
		lc_poll(c, 0); /* TCP holds the sender back */
		return 1;
	}
	if (x->r->delivered != d0)
		atomic_fetch_add_explicit(inplace ? &c->io->n_recv_inplace : &c->io->n_recv_copied,
					  x->r->delivered - d0, memory_order_relaxed);
	if (k != n) { /* stopped: an error, or enough of a 200 to a range */
		c->body_left -= n;
		c->state = LC_DONE;
		c->keep = c->keep && c->body_left == 0 && x->stop_ok;
		attempt_end(c, CURLE_WRITE_ERROR);
		return 1;
	}
	c->body_left -= n;
	if (c->body_left == 0) {
		c->state = LC_DONE;
		attempt_end(c, CURLE_OK);
		return 1;
	}
	return 0;
}

static int feed_line(void *arg, const char *l, size_t n)
{
	return backend__io_header_line(arg, l, n) < 0;
}

/* The head is complete in buf: its framing, its lines to the shared checks,
 * and the body bytes that came with it. Returns as deliver. */
static int head_done(struct lconn *c, const struct backend_h1_head *h)
{
	struct xfer *x = c->x;
	size_t extra = c->have - h->head_len;

	if (h->status == 301 || h->status == 302 || h->status == 303 || h->status == 307 ||
	    h->status == 308) {
		const char *l = backend__h1_location(c->buf, h->head_len);
		size_t n = l ? strcspn(l, "\r") : 0;

		while (n && (l[n - 1] == ' ' || l[n - 1] == '\t'))
			n--;
		if (n) /* backend_io_xfer.c follows it (or not) when the answer ends */
			x->lean_loc = backend__url_join(x->url, l, n);
	}
	x->io->lean_unsup = 0; /* an answer it reads */
	c->body_left = h->body_len;
	c->keep = h->keep;
	c->state = LC_BODY;
	if (backend__h1_lines(c->buf, h->head_len, feed_line, x) != 0) {
		c->keep = 0;
		c->state = LC_DONE;
		attempt_end(c, x->abort_err ? CURLE_WRITE_ERROR : CURLE_WEIRD_SERVER_REPLY);
		return 1;
	}
	if (extra > c->body_left) { /* more than the answer: never reused */
		c->keep = 0;
		extra = (size_t)c->body_left;
	}
	if (c->body_left == 0) {
		c->state = LC_DONE;
		attempt_end(c, CURLE_OK);
		return 1;
	}
	if (extra)
		return deliver(c, c->buf + h->head_len, extra, 0);
	return 0;
}

/* The server closed c inside an answer's head: its status line, when that
 * is whole, goes to the shared checks (x->status), as curl reads it. 1
 * when it was whole. */
static int head_cut(struct lconn *c)
{
	const char *nl = c->have ? memchr(c->buf, '\n', c->have) : NULL;

	return nl && backend__io_header_line(c->x, c->buf, (size_t)(nl + 1 - c->buf)) == 0 &&
	       c->x->status > 0;
}

/* Where c's next receive goes and how much it asks for (*want): the head
 * buffer, or the sink's memory when it offers some (*inplace); NULL: a
 * sink that may pause is full (no memory and *len 0): pause, no receive. */
static char *recv_dst(struct lconn *c, size_t *want, int *inplace)
{
	struct xfer *x = c->x;
	void *m;
	size_t w;

	*inplace = 0;
	if (c->state == LC_HEAD) { /* the head and the body's first bytes: one
				    * request is out, so nothing of another answer */
		*want = sizeof(c->buf) - c->have;
		if (x->r->on_mem && c->have < LEAN_HEAD_RECV)
			*want = LEAN_HEAD_RECV - c->have;
		return c->buf + c->have;
	}
	*want = c->body_left < sizeof(c->buf) ? (size_t)c->body_left : sizeof(c->buf);
	/* into the sink's memory when it offers some: the bytes it takes whole (a 2xx body,
	 * nothing to skip), at most LEAN_PAUSABLE_RECV when the sink may pause, else all of the
	 * body's rest in one receive */
	if (!x->r->on_mem || !x->accept_body || x->skip)
		return c->buf;
	w = c->body_left < (uint64_t)SSIZE_MAX ? (size_t)c->body_left : (size_t)SSIZE_MAX;
	if (x->r->pausable && w > LEAN_PAUSABLE_RECV)
		w = LEAN_PAUSABLE_RECV;
	if (x->status == 200 && w > x->limit)
		w = (size_t)x->limit;
	if (w && (m = x->r->on_mem(x->r->arg, &w)) != NULL) {
		*want = w;
		*inplace = 1;
		return m;
	}
	if (x->r->pausable && w == 0)
		return NULL; /* full: it would refuse any piece now */
	if (x->r->pausable && *want > LEAN_NOMEM_RECV)
		*want = LEAN_NOMEM_RECV; /* a piece about to be held */
	return c->buf;
}

/* c's receive ended the connection (e: its errno, 0 at a close): a kept connection closed before a
 * byte of its answer is asked again on a fresh one; otherwise c fails as curl would fail it. */
static void recv_closed(struct lconn *c, int e)
{
	if (c->state == LC_HEAD && c->have == 0 && c->served) {
		resend_fresh(c);
		return;
	}
	if (c->state == LC_BODY) {
		fail(c, CURLE_PARTIAL_FILE, "transfer closed with bytes remaining", 0);
		return;
	}
	if (!e && !head_cut(c)) {
		fail(c, CURLE_GOT_NOTHING, "Empty reply from server", 0);
		return;
	}
	if (!e) { /* after the status line: as curl ends it */
		fail(c, CURLE_PARTIAL_FILE, "the connection closed inside the answer's headers", 0);
		return;
	}
	fail(c, CURLE_RECV_ERROR, "Recv failure", e ? e : ECONNRESET);
}

/* n more bytes of c's head are in: -1 when c is done with this round (the answer went to curl, or
 * head_done says so), 1 when the head was whole (receive again), 0 when it is not yet. */
static int recv_head(struct lconn *c, size_t n)
{
	struct backend_h1_head h;
	ssize_t hl;

	c->have += n;
	hl = backend__h1_head(c->buf, c->have, &h);
	if (hl < 0) {
		c->state = LC_DONE;
		backend__io_xfer_to_curl(c->x);
		return -1;
	}
	if (hl > 0 && head_done(c, &h))
		return -1;
	return hl > 0;
}

static void recv_some(struct lconn *c)
{
	for (int round = 0; round < 8; round++) {
		size_t want;
		ssize_t n;
		int inplace, r;
		char *dst = recv_dst(c, &want, &inplace);

		if (!dst) { /* nothing held, nothing copied out and back */
			backend__io_paused(c->x);
			lc_poll(c, 0); /* TCP holds the sender back */
			return;
		}
		n = recv(c->fd, dst, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			recv_closed(c, n < 0 ? errno : 0);
			return;
		}
		if (c->state == LC_BODY) {
			atomic_fetch_add_explicit(&c->io->n_recvs, 1, memory_order_relaxed);
			if (deliver(c, dst, (size_t)n, inplace))
				return;
		} else if ((r = recv_head(c, (size_t)n)) != 0) {
			if (r < 0)
				return;
			continue;
		}
		if ((size_t)n < want)
			return; /* drained for now: epoll says when more comes */
	}
}

/* c's socket is readable. Past the head, the loop is woken again only
 * when the body's rest (up to IO_LOWAT_MAX) is in, not for each segment
 * (the stall bound: tick_cb); a paused or ended answer is left alone. */
static void on_readable(struct lconn *c)
{
	recv_some(c);
	if (c->state == LC_BODY && !c->held)
		backend__io_lowat(c->io, c->fd, &c->lowat, c->body_left, IO_LOWAT_MAX);
}

/* c's connect (to a name's address) failed: its attempt goes on with a new
 * connection to the name's next address, as curl tries each. 0: it does;
 * -1: none is left (or that one failed too), c is as it was. */
static int connect_next(struct lconn *c)
{
	struct lconn *n;

	while (c->name[0] && c->iaddr + 1 < c->naddr) {
		c->iaddr++;
		n = lc_new(c->io);
		if (!n)
			return -1;
		memcpy(n->addrs, c->addrs, sizeof(n->addrs));
		memcpy(n->alens, c->alens, sizeof(n->alens));
		n->naddr = c->naddr;
		n->iaddr = c->iaddr;
		if (lc_connect(n, &n->addrs[n->iaddr], n->alens[n->iaddr]) < 0) {
			lc_close(n);
			continue;
		}
		hand_off(c, n);
		return 0;
	}
	return -1;
}

/* c's name's addresses (n of them), with c's port */
static void set_addrs(struct lconn *c, const struct sockaddr_storage *sa, const socklen_t *salen,
		      unsigned n)
{
	c->naddr = n < IO_RESOLVE_ADDRS ? n : IO_RESOLVE_ADDRS;
	c->iaddr = 0;
	for (unsigned i = 0; i < c->naddr; i++) {
		c->addrs[i] = sa[i];
		c->alens[i] = salen[i];
		if (sa[i].ss_family == AF_INET)
			((struct sockaddr_in *)&c->addrs[i])->sin_port = htons((uint16_t)c->port);
		else
			((struct sockaddr_in6 *)&c->addrs[i])->sin6_port = htons((uint16_t)c->port);
	}
}

/* c's name has its addresses (naddr of them in c->addrs, the port set):
 * connect to the first (the next ones when that fails at once), as
 * lc_begin would have. */
static void connect_named(struct lconn *c)
{
	int e;

	c->iaddr = 0;
	if (lc_connect(c, &c->addrs[0], c->alens[0]) == 0) {
		lc_poll(c, UV_WRITABLE | UV_READABLE);
		return;
	}
	e = errno;
	if (connect_next(c) == 0)
		return;
	fail(c, CURLE_COULDNT_CONNECT, "Failed to connect", e);
}

void backend__io_lean_resolved(struct io_rwait *w, const struct sockaddr_storage *sa,
			       const socklen_t *salen, unsigned n)
{
	struct lconn *c = (struct lconn *)((char *)w - offsetof(struct lconn, rw));

	if (!c->x) /* not reached: a connection that waits has its attempt */
		return;
	if (!sa || !n) {
		char what[sizeof(c->x->lerr)];

		snprintf(what, sizeof(what), "Could not resolve host: %.100s", c->name);
		fail(c, CURLE_COULDNT_RESOLVE_HOST, what, 0); /* curl's words */
		return;
	}
	set_addrs(c, sa, salen, n);
	connect_named(c);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct lconn *c = h->data;

	if (!c->x) { /* idle: the server closed it, or says something unasked */
		idle_remove(c->io, c);
		lc_close(c);
		return;
	}
	if (c->state == LC_CONNECT) {
		int err = 0;
		socklen_t l = sizeof(err);

		if (status < 0 || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err) {
			char host[128];

			if (connect_next(c) == 0)
				return; /* a name's next address */
			backend__url_host(c->x->url, host, sizeof(host));
			snprintf(c->x->lerr, sizeof(c->x->lerr), "Failed to connect to %.80s: %s",
				 host, strerror(err ? err : ECONNREFUSED));
			c->state = LC_DONE;
			attempt_end(c, CURLE_COULDNT_CONNECT);
			return;
		}
		if (!(events & UV_WRITABLE))
			return;
		if (c->iaddr) /* the name's first addresses failed: this one first now */
			backend__io_resolve_prefer(c->io, c->name, &c->sa, c->salen);
		c->state = LC_SEND;
	}
	/* an error event too: the send or recv says which error (and a kept
	 * connection the server had closed is asked again on a new one) */
	if (c->state == LC_SEND) {
		send_req(c, 0);
		return;
	}
	if (c->state == LC_HEAD || c->state == LC_BODY)
		on_readable(c);
}

int backend__io_lean_start(struct xfer *x, const char *range)
{
	struct backend_io *io = x->io;
	struct backend_h1_url u;
	const char *hv[LEAN_HDRS_MAX];
	size_t nh = 0;
	char req[LEAN_REQ_MAX];
	ssize_t n;
	struct lconn *c, **pp;
	uint64_t now;

	if (backend__h1_url_name(x->url, &u) < 0)
		return 1;
	for (struct curl_slist *l = x->hdrs; l; l = l->next) {
		if (nh == LEAN_HDRS_MAX)
			return 1;
		hv[nh++] = l->data;
	}
	n = backend__h1_request(req, sizeof(req), &u, range, hv, nh);
	if (n < 0)
		return 1;
	/* a kept connection to the same address, the newest first */
	now = uv_hrtime();
	for (pp = &io->lean_idle; (c = *pp);) {
		if (now - c->t0_ns > (uint64_t)LEAN_IDLE_MS * 1000000u) {
			lc_close(idle_take(io, pp));
			continue;
		}
		if (u.name[0] ? strcmp(c->name, u.name) == 0 && c->port == u.port
			      : !c->name[0] && c->salen == u.salen &&
				    memcmp(&c->sa, &u.sa, u.salen) == 0) {
			idle_take(io, pp);
			break;
		}
		pp = &c->next;
	}
	if (!c && u.name[0]) { /* a name: its kept answer, or a wait for its lookup */
		const struct sockaddr_storage *sa;
		const socklen_t *salen;
		unsigned na;
		int rc;

		c = lc_new(io);
		if (!c)
			return -ENOMEM;
		memcpy(c->name, u.name, sizeof(c->name));
		c->port = u.port;
		rc = backend__io_resolve(io, u.name, &c->rw, &sa, &salen, &na);
		if (rc < 0) {
			lc_close(c);
			return rc == -ENOMEM ? -ENOMEM : 1;
		}
		c->state = LC_RESOLVE;
		if (rc == 0) { /* its connect now (one that fails at once: curl's, as a
				* literal address's: the attempt never ends in here) */
			set_addrs(c, sa, salen, na);
			if (lc_connect(c, &c->addrs[0], c->alens[0]) < 0) {
				lc_close(c);
				return 1;
			}
		}
		memcpy(c->req, req, (size_t)n);
		c->req_len = (size_t)n;
		atomic_fetch_add_explicit(&io->n_lean_attempts, 1, memory_order_relaxed);
		lc_begin(c, x);
		return 0;
	}
	if (!c) {
		c = lc_open(io, &u.sa, u.salen);
		if (!c) {
			snprintf(x->lerr, sizeof(x->lerr), "Failed to connect: %s",
				 strerror(errno));
			return errno == ENOMEM ? -ENOMEM : 1;
		}
	}
	memcpy(c->req, req, (size_t)n);
	c->req_len = (size_t)n;
	atomic_fetch_add_explicit(&io->n_lean_attempts, 1, memory_order_relaxed);
	lc_begin(c, x);
	return 0;
}

/* Before the loop waits: the idle connections' marks back to 1, so a close or bytes the
 * server sends unasked wake it (on_poll closes the connection); one not so watched is closed. */
static void prep_cb(uv_prepare_t *p)
{
	struct backend_io *io = p->data;

	for (struct lconn **pp = &io->lean_idle, *c; io->lean_stale && (c = *pp);) {
		if (c->lowat > 1) {
			io->lean_stale--;
			backend__io_lowat(io, c->fd, &c->lowat, 1, 1);
			if (c->lowat > 1) {
				c->lowat = 1; /* its count went */
				lc_close(idle_take(io, pp));
				continue;
			}
		}
		pp = &c->next;
	}
	io->lean_stale = 0; /* not reached: each one counted is idle */
	uv_prepare_stop(p);
}

void backend__io_lean_detach(struct xfer *x)
{
	struct lconn *c = x->lc;
	struct backend_io *io;

	if (!c)
		return;
	io = c->io;
	x->lc = NULL;
	c->x = NULL;
	held_drop(c);
	active_dec(io);
	if (c->state != LC_DONE || !c->keep || io->halted ||
	    io->nlean_idle >= io->max_total * 2 + 2) {
		lc_close(c);
		return;
	}
	c->served++;
	c->state = LC_IDLE;
	c->t0_ns = uv_hrtime();
	lc_poll(c, UV_READABLE);
	c->next = io->lean_idle;
	io->lean_idle = c;
	io->nlean_idle++;
	/* its mark back to 1 (the next head, a close, bytes the server sends unasked) before the
	 * loop waits again (prep_cb), unless a request that waited for a slot starts on it in
	 * this turn (backend__io_kick, next): its send sets the mark it needs, one system call */
	if (c->lowat > 1 && io->lean_stale++ == 0)
		uv_prepare_start(&io->lean_prep, prep_cb);
}

/* x goes on: its held piece offered again, its socket polled with the mark
 * on_readable keeps (set only if the held piece moved the body's rest under
 * it: no system call a pause else); bytes short of it wait for the tick. */
void backend__io_lean_resume(struct xfer *x)
{
	struct lconn *c = x->lc;
	const char *p;

	if (!c || (!c->held && c->state != LC_BODY))
		return;
	if ((p = c->held) != NULL) {
		c->held = NULL;
		/* paused again: held again (a copy stays c's); ended: dropped */
		if (deliver(c, p, c->held_len, 0))
			return;
		held_drop(c);
	}
	backend__io_lowat(c->io, c->fd, &c->lowat, c->state == LC_BODY ? c->body_left : 1,
			  IO_LOWAT_MAX);
	lc_poll(c, UV_READABLE);
}

/* The bounds of the running attempts: a connect past connect_timeout_s, a
 * silence past stall_timeout_s (backend__io_progress, as curl's progress
 * calls ask it; it asks the sink with nothing too). A connection that ends
 * an attempt changes the list: the pass starts again, and each connection
 * is seen once a tick (gen). */
static void tick_cb(uv_timer_t *t)
{
	struct backend_io *io = t->data;
	uint64_t now = uv_hrtime();
	unsigned gen = ++io->lean_gen;

again:
	for (struct lconn *c = io->lean_all; c; c = c->next_all) {
		struct xfer *x = c->x;

		if (c->gen == gen || !x)
			continue;
		c->gen = gen;
		if (c->state == LC_RESOLVE &&
		    now - c->t0_ns >= (uint64_t)(io->connect_ms > 0 ? io->connect_ms : 300000) *
					  1000000u) { /* curl's words: its bound covers it */
			snprintf(x->lerr, sizeof(x->lerr),
				 "Resolving timed out after %" PRIu64 " milliseconds",
				 (now - c->t0_ns) / 1000000u);
			c->state = LC_DONE;
			attempt_end(c, CURLE_OPERATION_TIMEDOUT);
			goto again;
		}
		if (c->state == LC_CONNECT &&
		    now - c->t0_ns >= (uint64_t)(io->connect_ms > 0 ? io->connect_ms : 300000) *
					  1000000u) { /* 0: curl's 300 s */
			snprintf(x->lerr, sizeof(x->lerr),
				 "Connection timed out after %" PRIu64 " milliseconds",
				 (now - c->t0_ns) / 1000000u);
			c->state = LC_DONE;
			attempt_end(c, CURLE_OPERATION_TIMEDOUT);
			goto again;
		}
		/* bytes short of the mark are progress too: each tick asks
		 * for what is in (on_readable sets the mark again), so a slow
		 * body, or an answer shorter than the mark set at its
		 * request's send, is never silent for more than a tick (at
		 * most half the stall bound) */
		if ((c->state == LC_BODY || c->state == LC_HEAD) && !c->held)
			backend__io_lowat(io, c->fd, &c->lowat, 1, 1);
		if (backend__io_progress(x)) {
			c->state = LC_DONE;
			c->keep = 0;
			attempt_end(c, CURLE_ABORTED_BY_CALLBACK);
			goto again;
		}
	}
}

void backend__io_lean_init(struct backend_io *io)
{
	uv_timer_init(&io->loop, &io->lean_tick);
	io->lean_tick.data = io;
	uv_prepare_init(&io->loop, &io->lean_prep);
	io->lean_prep.data = io;
}

void backend__io_lean_shutdown(struct backend_io *io)
{
	while (io->lean_all) {
		struct lconn *c = io->lean_all;

		if (c->x)
			backend__io_lean_detach(c->x); /* not reached: cancel_all ran */
		else {
			idle_remove(io, c);
			lc_close(c);
		}
	}
	backend__io_resolve_shutdown(io);
	uv_timer_stop(&io->lean_tick);
	uv_close((uv_handle_t *)&io->lean_tick, NULL);
	uv_prepare_stop(&io->lean_prep);
	uv_close((uv_handle_t *)&io->lean_prep, NULL);
}
