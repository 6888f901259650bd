/*
 * backend_io.c — the I/O thread of the remote stores (contract:
 * backend_io_i.h).
 *
 * One thread runs a libuv loop; the loop drives a libcurl multi handle with
 * the multi_socket API as in curl's docs/examples/multi-uv.c: curl tells us
 * which sockets to watch (CURLMOPT_SOCKETFUNCTION, one uv_poll_t each) and
 * when to call it back (CURLMOPT_TIMERFUNCTION, one uv_timer_t). Other
 * threads hand requests over through a mutex-protected queue and
 * uv_async_send.
 *
 * Each submitted request becomes one struct xfer (loop thread only). An
 * xfer is in exactly one state:
 *   WAIT     in io->wait (FIFO), waiting for one of the 'connections' slots
 *   RUN      its easy handle is in the multi handle, holding a slot
 *   BACKOFF  its retry timer runs; it holds no slot
 * and leaves through xfer_finish, the one place that calls on_done.
 *
 * The store's health is shared by all requests (a circuit breaker): the
 * first request that runs out of its retry budget marks the store down
 * (store_down), which fails every WAIT and BACKOFF xfer at once, makes
 * on_async fail new requests at once and xfer_retry fail running ones
 * instead of retrying, and starts the probe timer. Whatever answers — a
 * request or the probe — marks it up again (store_up, from xfer_finish).
 * backend_io_cancel sets 'halted': everything completes with -ECANCELED
 * (cancel_all) and nothing starts any more; close does the same first.
 *
 * Redirects are followed here, not by curl (CURLOPT_FOLLOWLOCATION is off):
 * a 3xx answer ends the attempt, CURLINFO_REDIRECT_URL gives the absolute
 * target, and the next attempt goes there. The sign callback runs — and
 * URL userinfo is kept — only while the target has the scheme, host and
 * port of the URL the caller submitted; so headers made by 'sign' can never
 * reach another host, whatever curl's own redirect rules are.
 *
 * Ranges: "bytes=A-B" or, to resume a whole-object GET, "bytes=A-"; never a
 * suffix or a multi-range. A 206 must start exactly at A and end at B or at
 * the object's end; a 200 to a ranged request is consumed by skipping A
 * bytes and stopping after the wanted length.
 *
 * Non-goals: request bodies (no PUT/POST), HTTP caching, cookies.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>
#include <uv.h>

#include "backend_i.h"
#include "backend_io_i.h"

/* Backoff: full jitter over base * 2^attempt, capped (AWS architecture
 * blog "Exponential Backoff and Jitter"). 100 ms gives a quick second try
 * for a one-off reset; 5 s keeps a broken server from being hammered. */
#define IO_BACKOFF_BASE_MS 100.0
#define IO_BACKOFF_CAP_MS  5000.0
#define IO_MAX_REDIRECTS   5
/* Probes of a store that is down: the first soon after it went down (a
 * restart is often quick), then backing off to one every 5 s, so that a
 * dead store costs one small request every few seconds and a recovered
 * one is used again within 5 s. */
#define IO_PROBE_FIRST_MS 250.0
#define IO_PROBE_CAP_MS	  5000.0
/* Bigger receive buffer than curl's 16 KiB (fewer callbacks per MB), small
 * enough to stay in the CPU's cache between the recv that fills it and the
 * copy out of it: with 32 connections, 512 KiB buffers (16 MiB in all)
 * cost 9 % more CPU per GB filled than 64 KiB ones (median of 10 fresh
 * 1 GB prefetches each on the bench's link emulator). */
#define IO_BUFFER_BYTES (64 * 1024)

enum xfer_state { X_WAIT, X_RUN, X_BACKOFF };

struct xfer {
	struct backend_io *io;
	struct backend_req *r;
	enum xfer_state state;
	struct xfer *prev, *next; /* io->all */
	struct xfer *wnext;	  /* io->wait, state X_WAIT */
	uv_timer_t backoff;	  /* the memory is freed in its close callback */
	CURL *easy;
	struct curl_slist *hdrs; /* of the running attempt */
	char *url;		 /* target of the next/running attempt */
	char *origin;		 /* "scheme://host:port" of r->url */
	int signable;		 /* url has r->url's origin: sign, keep userinfo */
	int hops;		 /* redirects followed */
	uint64_t t0_ns;		 /* first attempt started (the budget's clock) */
	int last_err;		 /* why the last attempt failed, for -EIO */
	char range[64];
	char ifmatch[96];
	char first_etag[80]; /* ETag of the first body answer; "" before */
	int have_first;
	int probe; /* io->probe_req: one attempt, never failed fast */
	char errbuf[CURL_ERROR_SIZE];

	/* ---- the current attempt, reset by attempt_reset ---- */
	long status;
	int hdr_done; /* the final response's headers are complete */
	int have_clen, have_crange, crange_star;
	uint64_t clen, cr_start, cr_end, cr_total;
	char etag[80];
	int64_t mtime;
	uint64_t want_start;  /* first object offset this attempt asks for */
	uint64_t skip;	      /* body bytes to drop first (200 to a range) */
	uint64_t limit;	      /* most body bytes to deliver (UINT64_MAX: all) */
	int accept_body;      /* 2xx GET whose body goes to on_data */
	int abort_err;	      /* set by a callback: finish with it, no retry */
	int stop_ok;	      /* we stopped the body ourselves: success */
	int stalled;	      /* on_progress aborted a silent transfer */
	uint64_t progress_ns; /* when bytes last arrived (or the attempt began) */
};

struct sock {
	uv_poll_t poll; /* first: the handle is freed as struct sock */
	curl_socket_t fd;
	struct backend_io *io;
	struct sock *prev, *next; /* io->socks */
};

struct backend_io {
	pthread_t thread;
	pthread_mutex_t lock;	    /* protects queue, closing; leaf lock */
	struct backend_req *q_head; /* protected by lock */
	struct backend_req *q_tail; /* protected by lock */
	int closing;		    /* protected by lock */
	int cancelled;		    /* protected by lock: backend_io_cancel was called */

	/* ---- loop thread only (after open returned) ---- */
	uv_loop_t loop;
	uv_async_t async;
	uv_timer_t timer; /* curl's timeout */
	CURLM *multi;
	struct xfer *all;
	struct xfer *wait_head, *wait_tail;
	struct sock *socks;
	unsigned running;
	uint64_t rng;
	int halted; /* cancelled: everything completes with -ECANCELED */
	/* the circuit breaker (see "store down" below) */
	int down;	 /* a request spent its budget; no answer since */
	char *probe_url; /* what the probe asks for: the failed request's URL */
	struct backend_req probe_req;
	int probe_busy;	       /* probe_req is submitted */
	double probe_delay_ms; /* until the next probe */
	uv_timer_t probe_timer;

	/* ---- any thread: counters for backend_io_stats ---- */
	atomic_ullong n_requests, n_attempts, n_failures, n_fast_fails, n_probes, n_cancels;
	atomic_int down_now;

	/* ---- read-only after open ---- */
	unsigned max_running;
	double budget_ms;
	long connect_ms;
	long stall_s;
	uint64_t stall_ns;
	char *ca_file;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void)
{
	curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int backend__http_errno(long status)
{
	switch (status) {
	case 404:
	case 410:
		return -ENOENT;
	case 401:
	case 403:
		return -EACCES;
	case 412:
		return -ESTALE;
	case 416:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* curl result to errno, and whether another attempt may help: the one place
 * where curl codes are mapped. */
static int curl_errno(CURLcode c, int *retry)
{
	switch (c) {
	case CURLE_OK:
		*retry = 0;
		return 0;
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_BAD_FUNCTION_ARGUMENT:
		*retry = 0;
		return -EINVAL;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
		/* the store is there but cannot be trusted: its own errno, so
		 * that nothing mistakes it for "unreachable" */
		*retry = 0;
		return -EKEYREJECTED;
	case CURLE_TOO_MANY_REDIRECTS:
	case CURLE_WRITE_ERROR:
		*retry = 0;
		return -EIO;
	case CURLE_OUT_OF_MEMORY:
		*retry = 0;
		return -ENOMEM;
	default:
		/* connect/resolve failures, resets, timeouts (stalls), short
		 * bodies (PARTIAL_FILE), GOT_NOTHING, TLS handshake errors */
		*retry = 1;
		return -EIO;
	}
}

/* ------------------------------------------------------------------------ */
/* small helpers                                                              */

/* A failed attempt's curl result in words, into r->error: the one place
 * where curl codes become messages. curl's error buffer is used only for
 * codes whose text names at most a host and port (never a URL, so never
 * userinfo or a query). */
static void curl_describe(CURLcode c, const char *url, const char *errbuf, struct backend_req *r)
{
	char host[128];
	const char *detail = errbuf && *errbuf ? errbuf : curl_easy_strerror(c);

	backend__url_host(url, host, sizeof(host));
	switch (c) {
	case CURLE_PEER_FAILED_VERIFICATION:
		snprintf(r->error, sizeof(r->error),
			 "TLS certificate of %.100s not trusted: %.180s", host, detail);
		break;
	case CURLE_SSL_CACERT_BADFILE:
		snprintf(r->error, sizeof(r->error), "cannot use the CA file: %s", detail);
		break;
	case CURLE_SSL_CONNECT_ERROR:
		snprintf(r->error, sizeof(r->error), "TLS handshake with %.100s failed: %.180s",
			 host, detail);
		break;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
		snprintf(r->error, sizeof(r->error), "%s", detail);
		break;
	default:
		snprintf(r->error, sizeof(r->error), "%s", curl_easy_strerror(c));
		break;
	}
}

static uint64_t rng_next(struct backend_io *io)
{
	/* xorshift64*: jitter only, not security */
	uint64_t x = io->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	io->rng = x;
	return x * 2685821657736338717ull;
}

static int parse_u64(const char *s, const char *end, uint64_t *v, const char **stop)
{
	uint64_t x = 0;
	const char *p = s;

	while (p < end && *p >= '0' && *p <= '9') {
		if (x > (UINT64_MAX - 9) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*p - '0');
		p++;
	}
	if (p == s)
		return -1;
	*v = x;
	*stop = p;
	return 0;
}

static const char *skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

/* ------------------------------------------------------------------------ */
/* curl callbacks of one attempt (loop thread)                                */

static void attempt_reset(struct xfer *x)
{
	x->status = 0;
	x->hdr_done = 0;
	x->have_clen = x->have_crange = x->crange_star = 0;
	x->clen = x->cr_start = x->cr_end = x->cr_total = 0;
	x->etag[0] = '\0';
	x->mtime = 0;
	x->skip = 0;
	x->limit = UINT64_MAX;
	x->accept_body = 0;
	x->abort_err = 0;
	x->stop_ok = 0;
	x->stalled = 0;
	x->errbuf[0] = '\0';
}

/* The path of an absolute URL (up to '?' or '#'; "" for none) and its length. */
static const char *url_path(const char *u, size_t *len)
{
	const char *p = strstr(u, "://");

	p = p ? strchr(p + 3, '/') : NULL;
	if (!p)
		p = "";
	*len = strcspn(p, "?#");
	return p;
}

/* Does a redirect from 'from' to 'to' go from a path that does not end in
 * '/' to one that does (to the same path with a '/' added, or to another
 * directory)? Servers answer so for a directory named without its slash. */
static int redirect_to_dir(const char *from, const char *to)
{
	size_t fl, tl;
	const char *f = url_path(from, &fl), *t = url_path(to, &tl);

	return tl > 0 && t[tl - 1] == '/' && (fl == 0 || f[fl - 1] != '/');
}

static int is_redirect(long s)
{
	return s == 301 || s == 302 || s == 303 || s == 307 || s == 308;
}

/* The final response's headers are in: decide what its body is. Returns 0,
 * or a negative errno that fails the request. */
static int headers_complete(struct xfer *x)
{
	struct backend_req *r = x->r;
	int get = strcmp(r->method, "HEAD") != 0;
	int ranged = r->range_len > 0 || r->delivered > 0;
	uint64_t remain = r->range_len ? r->range_len - r->delivered : UINT64_MAX;

	if (x->status < 200 || x->status > 299)
		return 0; /* body discarded; decided at the end */
	if (x->have_first && x->first_etag[0] && x->etag[0] && strcmp(x->etag, x->first_etag) != 0)
		return -ESTALE; /* resumed on a different object */
	/* the caller's version, also against servers that ignore If-Match */
	if (r->if_match && *r->if_match && x->etag[0] && strcmp(x->etag, r->if_match) != 0)
		return -ESTALE;
	if (!get)
		return 0;
	if (x->status == 206) {
		if (!ranged || !x->have_crange || x->crange_star || x->cr_start != x->want_start ||
		    x->cr_end < x->cr_start || x->cr_end >= x->cr_total)
			return -EIO;
		/* may end early only at the object's end */
		if (r->range_len && x->cr_end - x->cr_start + 1 < remain &&
		    x->cr_end + 1 != x->cr_total)
			return -EIO;
		if (x->have_clen && x->clen != x->cr_end - x->cr_start + 1)
			return -EIO;
	} else if (x->status == 200 && ranged) {
		/* the server ignored Range: read the whole body from offset 0 */
		x->skip = x->want_start;
	} else if (x->status != 200) {
		return -EIO; /* 204 and friends: not an object body */
	}
	x->limit = remain;
	x->accept_body = 1;
	if (!x->have_first) {
		x->have_first = 1;
		snprintf(x->first_etag, sizeof(x->first_etag), "%s", x->etag);
	}
	return 0;
}

static size_t on_header(char *buf, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n;
	const char *end = buf + len, *v;
	const char *stop;
	int err;

	x->progress_ns = uv_hrtime();
	while (end > buf && (end[-1] == '\r' || end[-1] == '\n'))
		end--;
	if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		const char *p = memchr(buf, ' ', (size_t)(end - buf));
		uint64_t st = 0;

		attempt_reset(x); /* each response (1xx too) starts afresh */
		if (!p || parse_u64(skip_ws(p, end), end, &st, &stop) < 0 || st > 999)
			return 0;
		x->status = (long)st;
		return len;
	}
	if (end == buf) { /* the blank line: end of one response's headers */
		if (x->status >= 100 && x->status < 200)
			return len;
		x->hdr_done = 1;
		err = headers_complete(x);
		if (err < 0) {
			x->abort_err = err;
			return 0;
		}
		return len;
	}
	v = memchr(buf, ':', (size_t)(end - buf));
	if (!v)
		return len;
#define HDR(name)                                                                                  \
	((size_t)(v - buf) == sizeof(name) - 1 && strncasecmp(buf, name, sizeof(name) - 1) == 0)
	if (HDR("etag")) {
		const char *s = skip_ws(v + 1, end);
		size_t l = (size_t)(end - s);

		if (l >= sizeof(x->etag))
			l = 0; /* absurd: treat as absent */
		memcpy(x->etag, s, l);
		x->etag[l] = '\0';
	} else if (HDR("content-length")) {
		const char *s = skip_ws(v + 1, end);

		if (parse_u64(s, end, &x->clen, &stop) == 0 && skip_ws(stop, end) == end)
			x->have_clen = 1;
	} else if (HDR("content-range")) {
		const char *s = skip_ws(v + 1, end);

		/* "bytes A-B/T" or "bytes STAR/T" (416); an unknown total is refused */
		if ((size_t)(end - s) > 6 && strncasecmp(s, "bytes ", 6) == 0) {
			s = skip_ws(s + 6, end);
			if (s < end && *s == '*') {
				if (s + 1 < end && s[1] == '/' &&
				    parse_u64(s + 2, end, &x->cr_total, &stop) == 0 && stop == end)
					x->crange_star = x->have_crange = 1;
			} else if (parse_u64(s, end, &x->cr_start, &stop) == 0 && stop < end &&
				   *stop == '-' &&
				   parse_u64(stop + 1, end, &x->cr_end, &stop) == 0 && stop < end &&
				   *stop == '/' &&
				   parse_u64(stop + 1, end, &x->cr_total, &stop) == 0 &&
				   stop == end) {
				x->have_crange = 1;
			}
		}
	} else if (HDR("last-modified")) {
		char tmp[64];
		const char *s = skip_ws(v + 1, end);
		size_t l = (size_t)(end - s);
		time_t t;

		if (l < sizeof(tmp)) {
			memcpy(tmp, s, l);
			tmp[l] = '\0';
			t = curl_getdate(tmp, NULL);
			if (t > 0)
				x->mtime = (int64_t)t;
		}
	}
#undef HDR
	return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	struct backend_req *r = x->r;
	size_t len = size * n;
	int err;

	x->progress_ns = uv_hrtime();
	if (!x->accept_body)
		return len; /* error pages, redirect bodies: dropped */
	if (x->skip) {
		size_t k = x->skip < len ? (size_t)x->skip : len;

		x->skip -= k;
		buf += k;
		len -= k;
		if (!len)
			return size * n;
	}
	if ((uint64_t)len > x->limit) {
		if (x->status == 206) { /* more than Content-Range said */
			x->abort_err = -EIO;
			return 0;
		}
		len = (size_t)x->limit; /* 200 to a range: stop after it */
	}
	if (len && r->on_data) {
		err = r->on_data(r->arg, buf, len);
		if (err < 0) {
			x->abort_err = err;
			return 0;
		}
	}
	r->delivered += len;
	x->limit -= len;
	if (x->limit == 0 && x->status == 200 && r->range_len) {
		x->stop_ok = 1;
		return 0; /* the rest of a full body is not wanted */
	}
	return size * n;
}

/* Stall detection. curl's LOW_SPEED_TIME averages the speed over about five
 * seconds, so a few bytes followed by silence are noticed up to five seconds
 * late; this is exact to curl's once-a-second progress calls (which the
 * LOW_SPEED settings keep coming while the transfer is silent). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct xfer *x = arg;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	if (x->r->on_poll) {
		int err = x->r->on_poll(x->r->arg);

		if (err < 0) {
			x->abort_err = err;
			return 1;
		}
	}
	if (uv_hrtime() - x->progress_ns > x->io->stall_ns) {
		x->stalled = 1;
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* xfer lifecycle (loop thread)                                               */

static void store_up(struct backend_io *io);
static void store_down(struct backend_io *io, struct xfer *failed);
static void fail_fast(struct backend_io *io, struct xfer *x);

static void xfer_free_cb(uv_handle_t *h)
{
	struct xfer *x = h->data;

	free(x->url);
	free(x->origin);
	free(x);
}

static void xfer_detach_easy(struct xfer *x)
{
	if (x->easy) {
		if (x->state == X_RUN) {
			curl_multi_remove_handle(x->io->multi, x->easy);
			x->io->running--;
		}
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
	}
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
}

static void wait_remove(struct backend_io *io, struct xfer *x)
{
	struct xfer **pp = &io->wait_head, *prev = NULL;

	while (*pp && *pp != x) {
		prev = *pp;
		pp = &(*pp)->wnext;
	}
	if (*pp) {
		*pp = x->wnext;
		if (io->wait_tail == x)
			io->wait_tail = prev;
	}
	x->wnext = NULL;
}

/* The one exit of a request: on_done runs here, exactly once. */
static void xfer_finish(struct xfer *x, int err)
{
	struct backend_io *io = x->io;
	struct backend_req *r = x->r;
	backend_req_done_cb done = r->on_done;
	void *arg = r->arg;

	if (x->state == X_WAIT)
		wait_remove(io, x);
	else if (x->state == X_BACKOFF)
		uv_timer_stop(&x->backoff);
	xfer_detach_easy(x);
	if (x->prev)
		x->prev->next = x->next;
	else
		io->all = x->next;
	if (x->next)
		x->next->prev = x->prev;
	if (r->etag[0] == '\0' && x->first_etag[0])
		snprintf(r->etag, sizeof(r->etag), "%s", x->first_etag);
	/* the store answered: a success, or an answer that is not a failure
	 * of the store (404, 403, 412, ...) */
	if (err == 0 || (err != -EIO && err != -ECANCELED && r->status > 0))
		store_up(io);
	r->priv = NULL;
	x->r = NULL;
	uv_close((uv_handle_t *)&x->backoff, xfer_free_cb);
	done(arg, r, err); /* r may be gone after this */
}

static void io_kick(struct backend_io *io);

static void wait_push(struct backend_io *io, struct xfer *x, int front)
{
	x->state = X_WAIT;
	if (front) {
		x->wnext = io->wait_head;
		io->wait_head = x;
		if (!io->wait_tail)
			io->wait_tail = x;
	} else {
		x->wnext = NULL;
		if (io->wait_tail)
			io->wait_tail->wnext = x;
		else
			io->wait_head = x;
		io->wait_tail = x;
	}
}

static void backoff_cb(uv_timer_t *t)
{
	struct xfer *x = t->data;
	struct backend_io *io = x->io;

	wait_push(io, x, 1); /* a retry goes before new work */
	io_kick(io);
}

/* The attempt failed with err; try again later if the budget allows. */
static void xfer_retry(struct xfer *x, int err)
{
	struct backend_io *io = x->io;
	double elapsed = (double)(uv_hrtime() - x->t0_ns) / 1e6;
	double cap = IO_BACKOFF_BASE_MS;
	double delay;

	x->last_err = err;
	if (x->probe) { /* one attempt: the next probe is the retry */
		xfer_finish(x, err);
		return;
	}
	if (io->down) { /* another request found the store down meanwhile */
		fail_fast(io, x);
		return;
	}
	for (int i = 1; i < x->r->attempts && cap < IO_BACKOFF_CAP_MS; i++)
		cap *= 2;
	if (cap > IO_BACKOFF_CAP_MS)
		cap = IO_BACKOFF_CAP_MS;
	delay = cap * (double)(rng_next(io) >> 11) / (double)(1ull << 53);
	xfer_detach_easy(x);
	if (elapsed + delay >= io->budget_ms) {
		atomic_fetch_add(&io->n_failures, 1);
		store_down(io, x);
		xfer_finish(x, -EIO);
		return;
	}
	x->state = X_BACKOFF;
	uv_timer_start(&x->backoff, backoff_cb, (uint64_t)delay, 0);
}

/* Start one attempt: a new easy handle in the multi handle. Returns 0 or a
 * negative errno (the caller finishes the xfer with it). */
static int xfer_start(struct xfer *x)
{
	struct backend_io *io = x->io;
	struct backend_req *r = x->r;
	int head = strcmp(r->method, "HEAD") == 0;
	CURL *e;
	int err;

	if (!x->t0_ns)
		x->t0_ns = uv_hrtime();
	r->attempts++;
	if (!x->probe)
		atomic_fetch_add(&io->n_attempts, 1);
	r->error[0] = '\0';
	attempt_reset(x);
	x->progress_ns = uv_hrtime();
	e = curl_easy_init();
	if (!e)
		return -ENOMEM;
	x->easy = e;
	x->want_start = 0;
	x->range[0] = '\0';
	if (!head && (r->range_len || r->delivered)) {
		x->want_start = r->range_off + r->delivered;
		if (r->range_len)
			snprintf(x->range, sizeof(x->range), "%" PRIu64 "-%" PRIu64, x->want_start,
				 r->range_off + r->range_len - 1);
		else
			snprintf(x->range, sizeof(x->range), "%" PRIu64 "-", x->want_start);
	}
	/* If-Match: the caller's, else the first answer's when resuming. A
	 * weak ETag can never match under If-Match's strong comparison, so it
	 * is only compared by us (headers_complete). */
	x->ifmatch[0] = '\0';
	if (r->if_match && *r->if_match && strncmp(r->if_match, "W/", 2) != 0)
		snprintf(x->ifmatch, sizeof(x->ifmatch), "If-Match: %s", r->if_match);
	else if (r->if_match && *r->if_match)
		; /* weak: compared by us only (headers_complete) */
	else if (r->delivered && x->first_etag[0] && strncmp(x->first_etag, "W/", 2) != 0)
		snprintf(x->ifmatch, sizeof(x->ifmatch), "If-Match: %s", x->first_etag);
	if (x->ifmatch[0]) {
		struct curl_slist *l = curl_slist_append(x->hdrs, x->ifmatch);

		if (!l)
			return -ENOMEM;
		x->hdrs = l;
	}
	if (r->sign && x->signable) {
		err = r->sign(r->sign_arg, r, &x->hdrs);
		if (err < 0)
			return err;
	}
	curl_easy_setopt(e, CURLOPT_URL, x->url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	backend__curl_harden(e, io->ca_file);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, io->connect_ms);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, io->stall_s);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)IO_BUFFER_BYTES);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
	if (head)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	if (x->range[0])
		curl_easy_setopt(e, CURLOPT_RANGE, x->range);
	if (curl_multi_add_handle(io->multi, e) != CURLM_OK)
		return -ENOMEM;
	x->state = X_RUN;
	io->running++;
	return 0;
}

/* Start waiting xfers while slots are free. */
static void io_kick(struct backend_io *io)
{
	while (io->running < io->max_running && io->wait_head) {
		struct xfer *x = io->wait_head;
		int err;

		io->wait_head = x->wnext;
		if (!io->wait_head)
			io->wait_tail = NULL;
		x->wnext = NULL;
		x->state = X_BACKOFF; /* neither waiting nor running yet */
		err = xfer_start(x);
		if (err < 0)
			xfer_finish(x, err);
	}
}

/* One attempt ended (curl says done with result c). */
static void xfer_done(struct xfer *x, CURLcode c)
{
	struct backend_req *r = x->r;
	int retry = 0;
	int err;

	r->status = x->status;
	if (x->hdr_done && x->status >= 200 && x->status < 300) {
		if (x->have_crange && !x->crange_star)
			r->size = x->cr_total;
		else if (x->have_clen && x->status == 200)
			r->size = x->clen;
		if (x->etag[0])
			snprintf(r->etag, sizeof(r->etag), "%s", x->etag);
		if (x->mtime)
			r->mtime = x->mtime;
	}
	if (x->abort_err) {
		xfer_finish(x, x->abort_err);
		return;
	}
	if (x->stop_ok) {
		xfer_finish(x, 0);
		return;
	}
	if (x->stalled) {
		xfer_retry(x, -EIO);
		return;
	}
	if (c != CURLE_OK) {
		curl_describe(c, x->url, x->errbuf, r);
		err = curl_errno(c, &retry);
		if (retry)
			xfer_retry(x, err);
		else
			xfer_finish(x, err);
		return;
	}
	if (is_redirect(x->status)) {
		char *loc = NULL, *next, *origin;

		curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &loc);
		if (!loc || ++x->hops > IO_MAX_REDIRECTS ||
		    (strncasecmp(loc, "http://", 7) != 0 && strncasecmp(loc, "https://", 8) != 0)) {
			xfer_finish(x, -EIO);
			return;
		}
		r->dir_redirect |= redirect_to_dir(x->url, loc);
		origin = backend__url_origin(loc);
		if (!origin) {
			xfer_finish(x, -EIO);
			return;
		}
		x->signable = x->origin && strcmp(origin, x->origin) == 0;
		free(origin);
		next = x->signable ? strdup(loc) : backend__url_without_userinfo(loc);
		if (!next) {
			xfer_finish(x, -ENOMEM);
			return;
		}
		free(x->url);
		x->url = next;
		xfer_detach_easy(x);
		r->attempts--; /* a hop is not a retry */
		wait_push(x->io, x, 1);
		return;
	}
	if (x->status >= 200 && x->status < 300) {
		if (strcmp(r->method, "HEAD") == 0) {
			xfer_finish(x, 0);
			return;
		}
		if (r->range_len) {
			/* short: neither all of it nor the object's end */
			uint64_t end = r->range_off + r->delivered;

			if (r->delivered < r->range_len && !(r->size && end >= r->size)) {
				xfer_retry(x, -EIO);
				return;
			}
		} else if (r->size && r->delivered < r->size) {
			xfer_retry(x, -EIO);
			return;
		}
		xfer_finish(x, 0);
		return;
	}
	if (x->status == 416 && x->crange_star && x->want_start >= x->cr_total &&
	    (r->range_len || r->delivered)) {
		r->size = x->cr_total; /* asked at or past the end: nothing left */
		xfer_finish(x, 0);
		return;
	}
	if (x->status == 0 || x->status == 408 || x->status == 429 || x->status >= 500) {
		xfer_retry(x, -EIO);
		return;
	}
	xfer_finish(x, backend__http_errno(x->status));
}

static void check_multi_info(struct backend_io *io)
{
	CURLMsg *m;
	int pending;

	while ((m = curl_multi_info_read(io->multi, &pending))) {
		struct xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
		if (!x)
			continue;
		xfer_done(x, m->data.result);
	}
	io_kick(io);
}

/* ------------------------------------------------------------------------ */
/* the store is down: a circuit breaker (loop thread)                         */

/* A new xfer for r, queued (a probe goes first: it decides for everybody).
 * Returns 0 or -ENOMEM (r not taken). */
static int xfer_add(struct backend_io *io, struct backend_req *r, int probe)
{
	struct xfer *x = calloc(1, sizeof(*x));

	if (x) {
		x->url = strdup(r->url);
		x->origin = backend__url_origin(r->url);
	}
	if (!x || !x->url) {
		if (x) {
			free(x->origin);
			free(x);
		}
		return -ENOMEM;
	}
	x->io = io;
	x->r = r;
	x->probe = probe;
	x->signable = x->origin != NULL;
	r->priv = x;
	uv_timer_init(&io->loop, &x->backoff);
	x->backoff.data = x;
	x->next = io->all;
	if (io->all)
		io->all->prev = x;
	io->all = x;
	wait_push(io, x, probe);
	return 0;
}

static void fast_fail_words(struct backend_req *r)
{
	snprintf(r->error, sizeof(r->error),
		 "the store is down (a request ran out of its retry budget); failing at once "
		 "until it answers again");
}

/* Fail x at once with -EIO: the store is down. */
static void fail_fast(struct backend_io *io, struct xfer *x)
{
	atomic_fetch_add(&io->n_fast_fails, 1);
	fast_fail_words(x->r);
	xfer_finish(x, -EIO);
}

static void probe_cb(uv_timer_t *t);

/* The probe completed (xfer_finish already called store_up if the store
 * answered): while the store is still down, probe again later. */
static void probe_done(void *arg, struct backend_req *r, int err)
{
	struct backend_io *io = arg;

	(void)r;
	(void)err;
	io->probe_busy = 0;
	if (!io->down || io->halted)
		return;
	io->probe_delay_ms *= 2;
	if (io->probe_delay_ms > IO_PROBE_CAP_MS)
		io->probe_delay_ms = IO_PROBE_CAP_MS;
	uv_timer_start(&io->probe_timer, probe_cb, (uint64_t)io->probe_delay_ms, 0);
}

/* Ask the store one small question: the first byte of the object whose
 * request tripped the breaker, unsigned (a 403 is an answer too). One
 * attempt; any HTTP answer but 408, 429 and 5xx means the store is back. */
static void probe_cb(uv_timer_t *t)
{
	struct backend_io *io = t->data;
	struct backend_req *r = &io->probe_req;

	if (!io->down || io->probe_busy || io->halted || !io->probe_url)
		return;
	memset(r, 0, sizeof(*r));
	r->method = "GET";
	r->url = io->probe_url;
	r->range_off = 0;
	r->range_len = 1;
	r->on_done = probe_done;
	r->arg = io;
	io->probe_busy = 1;
	atomic_fetch_add(&io->n_probes, 1);
	if (xfer_add(io, r, 1) < 0) {
		probe_done(io, r, -ENOMEM);
		return;
	}
	io_kick(io);
}

/* failed ran out of its retry budget: the store is down. What waits for a
 * slot or a retry fails now; new requests fail at once (on_async) and
 * running ones when their attempt fails (xfer_retry), until a request or
 * the probe gets an answer (store_up). So an outage costs one budget, not
 * one per queued request. */
static void store_down(struct backend_io *io, struct xfer *failed)
{
	struct xfer *x, *next;

	if (io->down)
		return;
	io->down = 1;
	atomic_store(&io->down_now, 1);
	if (!io->probe_busy) {
		char *url = strdup(failed->r->url);

		if (url) { /* else the last probe's URL stays */
			free(io->probe_url);
			io->probe_url = url;
		}
		io->probe_delay_ms = IO_PROBE_FIRST_MS;
		uv_timer_start(&io->probe_timer, probe_cb, (uint64_t)io->probe_delay_ms, 0);
	}
	for (x = io->all; x; x = next) {
		next = x->next; /* xfer_finish unlinks x only; on_done never runs xfers */
		if (x != failed && !x->probe && x->state != X_RUN)
			fail_fast(io, x);
	}
}

/* The store answered: requests go to it again. */
static void store_up(struct backend_io *io)
{
	if (!io->down)
		return;
	io->down = 0;
	atomic_store(&io->down_now, 0);
	uv_timer_stop(&io->probe_timer);
}

/* ------------------------------------------------------------------------ */
/* curl <-> libuv glue (multi-uv.c pattern)                                   */

static void sock_free_cb(uv_handle_t *h)
{
	free(h->data);
}

static void sock_close(struct backend_io *io, struct sock *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		io->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	uv_poll_stop(&s->poll);
	uv_close((uv_handle_t *)&s->poll, sock_free_cb);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct sock *s = h->data;
	struct backend_io *io = s->io;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (!status && (events & UV_READABLE))
		flags |= CURL_CSELECT_IN;
	if (!status && (events & UV_WRITABLE))
		flags |= CURL_CSELECT_OUT;
	curl_multi_socket_action(io->multi, s->fd, flags, &running);
	check_multi_info(io);
}

static int on_socket(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct backend_io *io = userp;
	struct sock *s = socketp;
	int events = 0;

	(void)e;
	if (what == CURL_POLL_REMOVE) {
		if (s) {
			sock_close(io, s);
			curl_multi_assign(io->multi, fd, NULL);
		}
		return 0;
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -1;
		if (uv_poll_init_socket(&io->loop, &s->poll, fd) < 0) {
			free(s);
			return -1;
		}
		s->poll.data = s;
		s->fd = fd;
		s->io = io;
		s->next = io->socks;
		if (io->socks)
			io->socks->prev = s;
		io->socks = s;
		curl_multi_assign(io->multi, fd, s);
	}
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	uv_poll_start(&s->poll, events, on_poll);
	return 0;
}

static void on_timeout(uv_timer_t *t)
{
	struct backend_io *io = t->data;
	int running;

	curl_multi_socket_action(io->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_multi_info(io);
}

static int on_timer(CURLM *m, long timeout_ms, void *userp)
{
	struct backend_io *io = userp;

	(void)m;
	if (timeout_ms < 0)
		uv_timer_stop(&io->timer);
	else /* 0 means "now": a 0 ms timer fires on the loop's next turn, outside
	      * curl's callbacks (multi-uv.c's 1 ms would cost 1 ms per request) */
		uv_timer_start(&io->timer, on_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* the queue from other threads, shutdown                                     */

/* Complete the queue q and every xfer with -ECANCELED; from now on the
 * loop starts nothing (halted). The handles stay open. */
static void cancel_all(struct backend_io *io, struct backend_req *q)
{
	io->halted = 1;
	uv_timer_stop(&io->probe_timer);
	while (q) {
		struct backend_req *next = q->next;

		q->next = NULL;
		atomic_fetch_add(&io->n_cancels, 1);
		q->on_done(q->arg, q, -ECANCELED);
		q = next;
	}
	while (io->all) {
		if (!io->all->probe)
			atomic_fetch_add(&io->n_cancels, 1);
		xfer_finish(io->all, -ECANCELED);
	}
}

static void shutdown_loop(struct backend_io *io, struct backend_req *q)
{
	cancel_all(io, q);
	/* closes cached connections; their sockets come back as POLL_REMOVE */
	curl_multi_cleanup(io->multi);
	io->multi = NULL;
	while (io->socks)
		sock_close(io, io->socks);
	uv_close((uv_handle_t *)&io->timer, NULL);
	uv_close((uv_handle_t *)&io->probe_timer, NULL);
	uv_close((uv_handle_t *)&io->async, NULL);
}

static void on_async(uv_async_t *a)
{
	struct backend_io *io = a->data;
	struct backend_req *q;
	int closing, cancelled;

	pthread_mutex_lock(&io->lock);
	q = io->q_head;
	io->q_head = io->q_tail = NULL;
	closing = io->closing;
	cancelled = io->cancelled;
	pthread_mutex_unlock(&io->lock);
	if (closing) {
		shutdown_loop(io, q);
		return;
	}
	if (cancelled) {
		cancel_all(io, q);
		return;
	}
	while (q) {
		struct backend_req *r = q, *next = q->next;

		r->next = NULL;
		q = next;
		if (io->down) {
			atomic_fetch_add(&io->n_fast_fails, 1);
			fast_fail_words(r);
			r->on_done(r->arg, r, -EIO);
		} else if (xfer_add(io, r, 0) < 0) {
			r->on_done(r->arg, r, -ENOMEM);
		}
	}
	io_kick(io);
}

static void *io_thread(void *arg)
{
	struct backend_io *io = arg;

	uv_run(&io->loop, UV_RUN_DEFAULT);
	return NULL;
}

int backend_io_open(struct backend_io **out, const struct backend_config *cfg)
{
	static const struct backend_config defaults;
	struct backend_io *io;
	int err = -ENOMEM;

	*out = NULL;
	if (!cfg)
		cfg = &defaults;
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_result != CURLE_OK)
		return -ENOMEM;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	/* The caller's values (fs/fs_opt.c holds the defaults); only what
	 * cannot work is clamped, as backend.h says. */
	io->max_running = cfg->connections ? cfg->connections : 1;
	io->budget_ms = (cfg->retry_budget_s > 0 ? cfg->retry_budget_s : 0) * 1000.0;
	/* rounded up: a timeout below 1 ms must not become curl's 0 (its
	 * default of 300 s) */
	io->connect_ms = (long)((cfg->connect_timeout_s > 0 ? cfg->connect_timeout_s : 0) * 1000.0);
	if (cfg->connect_timeout_s > 0 && (double)io->connect_ms < cfg->connect_timeout_s * 1000.0)
		io->connect_ms++;
	io->stall_s = (long)(cfg->stall_timeout_s > 0 ? cfg->stall_timeout_s + 0.999 : 0);
	io->stall_ns =
	    cfg->stall_timeout_s > 0 ? (uint64_t)(cfg->stall_timeout_s * 1e9) : UINT64_MAX;
	io->rng = uv_hrtime() ^ (uint64_t)(uintptr_t)io ^ 0x9e3779b97f4a7c15ull;
	if (!io->rng)
		io->rng = 1;
	if (cfg->ca_file && !(io->ca_file = strdup(cfg->ca_file)))
		goto fail_free;
	if (pthread_mutex_init(&io->lock, NULL) != 0)
		goto fail_free;
	if (uv_loop_init(&io->loop) < 0)
		goto fail_mutex;
	io->multi = curl_multi_init();
	if (!io->multi)
		goto fail_loop;
	curl_multi_setopt(io->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(io->multi, CURLMOPT_SOCKETDATA, io);
	curl_multi_setopt(io->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(io->multi, CURLMOPT_TIMERDATA, io);
	/* keep-alive: enough idle connections for the store and, behind a
	 * redirecting proxy (AIStore), its targets */
	curl_multi_setopt(io->multi, CURLMOPT_MAXCONNECTS, (long)io->max_running * 2 + 2);
	curl_multi_setopt(io->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)io->max_running);
	uv_async_init(&io->loop, &io->async, on_async);
	io->async.data = io;
	uv_timer_init(&io->loop, &io->timer);
	io->timer.data = io;
	uv_timer_init(&io->loop, &io->probe_timer);
	io->probe_timer.data = io;
	err = pthread_create(&io->thread, NULL, io_thread, io);
	if (err) {
		err = -err;
		uv_close((uv_handle_t *)&io->async, NULL);
		uv_close((uv_handle_t *)&io->timer, NULL);
		uv_close((uv_handle_t *)&io->probe_timer, NULL);
		uv_run(&io->loop, UV_RUN_DEFAULT);
		curl_multi_cleanup(io->multi);
		goto fail_loop;
	}
	*out = io;
	return 0;
fail_loop:
	uv_loop_close(&io->loop);
fail_mutex:
	pthread_mutex_destroy(&io->lock);
fail_free:
	free(io->ca_file);
	free(io);
	return err;
}

void backend_io_close(struct backend_io *io)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	io->closing = 1;
	pthread_mutex_unlock(&io->lock);
	uv_async_send(&io->async);
	pthread_join(io->thread, NULL);
	uv_loop_close(&io->loop);
	pthread_mutex_destroy(&io->lock);
	free(io->probe_url);
	free(io->ca_file);
	free(io);
}

void backend_io_cancel(struct backend_io *io)
{
	if (!io)
		return;
	pthread_mutex_lock(&io->lock);
	io->cancelled = 1;
	pthread_mutex_unlock(&io->lock);
	uv_async_send(&io->async);
}

void backend_io_stats(struct backend_io *io, struct backend_stats *st)
{
	st->requests = atomic_load(&io->n_requests);
	st->attempts = atomic_load(&io->n_attempts);
	st->failures = atomic_load(&io->n_failures);
	st->fast_fails = atomic_load(&io->n_fast_fails);
	st->probes = atomic_load(&io->n_probes);
	st->cancels = atomic_load(&io->n_cancels);
	st->down = (uint64_t)atomic_load(&io->down_now);
}

void backend_io_submit(struct backend_io *io, struct backend_req *r)
{
	int closing;

	r->next = NULL;
	r->priv = NULL;
	r->status = 0;
	r->etag[0] = '\0';
	r->size = 0;
	r->mtime = 0;
	r->delivered = 0;
	r->attempts = 0;
	r->error[0] = '\0';
	atomic_fetch_add(&io->n_requests, 1);
	pthread_mutex_lock(&io->lock);
	closing = io->closing || io->cancelled;
	if (!closing) {
		if (io->q_tail)
			io->q_tail->next = r;
		else
			io->q_head = r;
		io->q_tail = r;
	}
	pthread_mutex_unlock(&io->lock);
	if (closing) { /* cancelled, or racing with close: never queued */
		atomic_fetch_add(&io->n_cancels, 1);
		r->on_done(r->arg, r, -ECANCELED);
	} else
		uv_async_send(&io->async);
}

/* ------------------------------------------------------------------------ */
/* blocking helpers                                                           */

struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done; /* protected by m */
	int err;  /* protected by m */
	/* written on the loop thread only before done is set */
	char *buf;
	size_t len, cap, max;
	int grow; /* buf is ours to realloc (backend_io_get) */
};

static void waiter_init(struct waiter *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->c, NULL);
}

static void waiter_done(void *arg, struct backend_req *r, int err)
{
	struct waiter *w = arg;

	(void)r;
	pthread_mutex_lock(&w->m);
	w->err = err;
	w->done = 1;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

static int waiter_run(struct backend_io *io, struct backend_req *r, struct waiter *w)
{
	int err;

	r->on_done = waiter_done;
	r->arg = w;
	backend_io_submit(io, r);
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->c, &w->m);
	err = w->err;
	pthread_mutex_unlock(&w->m);
	pthread_cond_destroy(&w->c);
	pthread_mutex_destroy(&w->m);
	return err;
}

static int waiter_data(void *arg, const void *buf, size_t len)
{
	struct waiter *w = arg;

	if (len > w->max - w->len)
		return w->grow ? -EFBIG : -EIO;
	if (w->grow && w->len + len > w->cap) {
		size_t cap = w->cap ? w->cap : 65536;
		char *p;

		while (cap < w->len + len)
			cap = cap > w->max / 2 ? w->max : cap * 2;
		p = realloc(w->buf, cap);
		if (!p)
			return -ENOMEM;
		w->buf = p;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, buf, len);
	w->len += len;
	return 0;
}

int backend_io_get(struct backend_io *io, struct backend_req *r, void **body, size_t *len,
		   size_t max)
{
	struct waiter w;
	int err;

	waiter_init(&w);
	w.max = max;
	w.grow = 1;
	r->on_data = waiter_data;
	r->on_poll = NULL;
	err = waiter_run(io, r, &w);
	if (err < 0) {
		free(w.buf);
		*body = NULL;
		*len = 0;
		return err;
	}
	if (!w.buf) /* empty body: still a valid buffer */
		w.buf = malloc(1);
	if (!w.buf)
		return -ENOMEM;
	*body = w.buf;
	*len = w.len;
	return 0;
}

ssize_t backend_io_read(struct backend_io *io, struct backend_req *r, void *buf)
{
	struct waiter w;
	int err;

	if (r->range_len == 0 || r->range_len > SSIZE_MAX)
		return r->range_len ? -EINVAL : 0;
	waiter_init(&w);
	w.buf = buf;
	w.cap = w.max = (size_t)r->range_len;
	r->on_data = waiter_data;
	r->on_poll = NULL;
	err = waiter_run(io, r, &w);
	if (err < 0)
		return err;
	return (ssize_t)w.len;
}

struct streamer {
	struct waiter w; /* first: on_done's arg is the waiter */
	backend_sink_cb cb;
	void *arg;
	uint64_t pos; /* object offset of the next byte */
};

/* The sink's poll: a call with no bytes (backend_sink_cb). */
static int streamer_poll(void *arg)
{
	struct streamer *s = arg;

	return s->cb(s->arg, s->pos, NULL, 0);
}

static int streamer_data(void *arg, const void *buf, size_t len)
{
	struct streamer *s = arg;
	int err = s->cb(s->arg, s->pos, buf, len);

	if (err < 0)
		return err;
	s->pos += len;
	s->w.len += len;
	return 0;
}

ssize_t backend_io_stream(struct backend_io *io, struct backend_req *r, backend_sink_cb cb,
			  void *arg)
{
	struct streamer s;
	int err;

	if (r->range_len == 0 || r->range_len > SSIZE_MAX)
		return r->range_len ? -EINVAL : 0;
	waiter_init(&s.w);
	s.cb = cb;
	s.arg = arg;
	s.pos = r->range_off;
	r->on_data = streamer_data;
	r->on_poll = streamer_poll;
	/* waiter_run sets r->arg = &s.w: on_data and on_done share it */
	err = waiter_run(io, r, &s.w);
	if (err < 0)
		return err;
	return (ssize_t)s.w.len;
}

int backend_io_head(struct backend_io *io, struct backend_req *r)
{
	struct waiter w;

	waiter_init(&w);
	r->method = "HEAD";
	r->on_data = NULL;
	r->on_poll = NULL;
	r->range_len = 0;
	return waiter_run(io, r, &w);
}
