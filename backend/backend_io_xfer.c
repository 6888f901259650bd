/*
 * backend_io_xfer.c — a request's life on the I/O thread (contract:
 * backend_io_i.h): from its queue to its one on_done.
 *
 * Each submitted request becomes one struct xfer (loop thread only). An
 * xfer is in exactly one state:
 *   WAIT     in io->wait (FIFO), waiting for a slot of its class (backend__io_kick)
 *   RUN      its easy handle is in the multi handle, holding a slot
 *   BACKOFF  its retry timer runs; it holds no slot
 * and leaves through backend__io_xfer_finish, the one place that calls
 * on_done.
 *
 * Redirects are followed here, not by curl (CURLOPT_FOLLOWLOCATION is off):
 * a 3xx answer ends the attempt, CURLINFO_REDIRECT_URL gives the absolute
 * target, and the next attempt goes there. The sign callback runs — and
 * URL userinfo is kept — only while the target has the scheme, host and
 * port of the URL the caller submitted; so headers made by 'sign' can never
 * reach another host, whatever curl's own redirect rules are.
 *
 * Ranges: "bytes=A-B" or, to resume a whole-object GET, "bytes=A-"; never a
 * suffix or a multi-range (what an answer must be: backend_io_attempt.c).
 * A failed attempt is retried with full jitter until the budget is spent;
 * then the store is down (backend_io_breaker.c).
 *
 * A request with a body (backend_req.body: a GET with a JSON body) sends
 * it again on every attempt and hop, and is not resumed after a cut: its
 * answer is a stream the caller parses (GetBatch), with no range to resume.
 *
 * Non-goals: PUT/POST, HTTP caching, cookies.
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

/* Bigger receive buffer than curl's 16 KiB (fewer callbacks per MB), small
 * enough to stay in the CPU's cache between the recv that fills it and the
 * copy out of it: with 32 connections, 512 KiB buffers (16 MiB in all)
 * cost 9 % more CPU per GB filled than 64 KiB ones (median of 10 fresh
 * 1 GB prefetches each on the bench's link emulator). */
#define IO_BUFFER_BYTES (64 * 1024)

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
			if (!x->r->small)
				x->io->running_large--;
		}
		if (x->io->neasy < IO_EASY_POOL && x->io->multi) {
			curl_easy_reset(x->easy); /* every option is set again */
			x->io->easy_pool[x->io->neasy++] = x->easy;
		} else {
			curl_easy_cleanup(x->easy);
		}
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

/* Did an attempt that ended with err and HTTP status get an answer of the
 * store, not a failure of it? Every status but 408, 429 and 5xx is one
 * (a 4xx maps to -EIO as often as not: a 400, a 405, a 409); a 2xx or 3xx
 * that ended in -EIO was cut or wrong on the way, not an answer. */
static int store_answered(long status, int err)
{
	if (status <= 0 || status == 408 || status == 429 || status >= 500)
		return 0;
	return err != -EIO || status >= 400;
}

/* The one exit of a request: on_done runs here, exactly once. */
void backend__io_xfer_finish(struct xfer *x, int err)
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
	 * of the store (404, 403, 412, a 400 to a probe, ...) */
	if (err == 0 || (err != -ECANCELED && store_answered(r->status, err)))
		backend__io_store_up(io);
	r->priv = NULL;
	x->r = NULL;
	uv_close((uv_handle_t *)&x->backoff, xfer_free_cb);
	done(arg, r, err); /* r may be gone after this */
}

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
	backend__io_kick(io);
}

/* The attempt failed with err; try again later if the budget allows. */
static void xfer_retry(struct xfer *x, int err)
{
	struct backend_io *io = x->io;
	double elapsed = (double)(uv_hrtime() - x->t0_ns) / 1e6;
	double cap = IO_BACKOFF_BASE_MS;
	double delay;

	x->last_err = err;
	if (x->r->body && x->r->delivered) { /* a body request is never resumed */
		backend__io_xfer_finish(x, -EIO);
		return;
	}
	if (x->probe) { /* one attempt: the next probe is the retry */
		backend__io_xfer_finish(x, err);
		return;
	}
	if (io->down && !x->r->past_breaker) { /* another request found the store down */
		backend__io_fail_fast(io, x);
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
		if (!x->r->solo)
			backend__io_store_down(io, x);
		backend__io_xfer_finish(x, -EIO);
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
	r->errbody_len = 0;
	backend__io_attempt_reset(x);
	x->progress_ns = uv_hrtime();
	e = io->neasy ? io->easy_pool[--io->neasy] : curl_easy_init();
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
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, backend__io_on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, backend__io_on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, backend__io_on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
	if (head)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	if (r->body) {
		struct curl_slist *l = curl_slist_append(x->hdrs, "Content-Type: application/json");

		if (l)
			l = curl_slist_append(x->hdrs = l, "Expect:"); /* no 100-continue wait */
		if (!l)
			return -ENOMEM;
		x->hdrs = l;
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "GET");
	}
	if (x->range[0])
		curl_easy_setopt(e, CURLOPT_RANGE, x->range);
	if (curl_multi_add_handle(io->multi, e) != CURLM_OK)
		return -ENOMEM;
	x->state = X_RUN;
	io->running++;
	if (!r->small)
		io->running_large++;
	return 0;
}

/* Start waiting xfers, in their order, while slots of their class are free:
 * any request while fewer than max_total run, one that is not small only
 * while fewer than max_running of those run (it waits, and the small ones
 * behind it may pass it). */
void backend__io_kick(struct backend_io *io)
{
	struct xfer **pp = &io->wait_head, *prev = NULL;

	while (io->running < io->max_total && *pp) {
		struct xfer *x = *pp;
		int err;

		if (!x->r->small && io->running_large >= io->max_running) {
			prev = x;
			pp = &x->wnext;
			continue;
		}
		*pp = x->wnext;
		if (io->wait_tail == x)
			io->wait_tail = prev;
		x->wnext = NULL;
		x->state = X_BACKOFF; /* neither waiting nor running yet */
		err = xfer_start(x);
		if (err < 0)
			backend__io_xfer_finish(x, err);
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
		backend__io_xfer_finish(x, x->abort_err);
		return;
	}
	if (x->stop_ok) {
		backend__io_xfer_finish(x, 0);
		return;
	}
	if (x->stalled) {
		snprintf(r->error, sizeof(r->error), "the transfer stalled (no bytes for %ld s)",
			 x->io->stall_s);
		xfer_retry(x, -EIO);
		return;
	}
	if (c != CURLE_OK) {
		backend__io_curl_describe(c, x->url, x->errbuf, r);
		err = backend__io_curl_errno(c, &retry);
		if (retry)
			xfer_retry(x, err);
		else
			backend__io_xfer_finish(x, err);
		return;
	}
	if (is_redirect(x->status)) {
		char *loc = NULL, *next, *origin;

		curl_easy_getinfo(x->easy, CURLINFO_REDIRECT_URL, &loc);
		if (!loc || ++x->hops > IO_MAX_REDIRECTS ||
		    (strncasecmp(loc, "http://", 7) != 0 && strncasecmp(loc, "https://", 8) != 0)) {
			backend__io_xfer_finish(x, -EIO);
			return;
		}
		r->dir_redirect |= redirect_to_dir(x->url, loc);
		origin = backend__url_origin(loc);
		if (!origin) {
			backend__io_xfer_finish(x, -EIO);
			return;
		}
		x->signable = x->origin && strcmp(origin, x->origin) == 0;
		free(origin);
		next = x->signable ? strdup(loc) : backend__url_without_userinfo(loc);
		if (!next) {
			backend__io_xfer_finish(x, -ENOMEM);
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
			backend__io_xfer_finish(x, 0);
			return;
		}
		if (r->range_len) {
			/* short: neither all of it nor the object's end */
			uint64_t end = r->range_off + r->delivered;

			if (r->delivered < r->range_len && !(r->size && end >= r->size)) {
				snprintf(r->error, sizeof(r->error), "the answer ended early");
				xfer_retry(x, -EIO);
				return;
			}
		} else if (r->size && r->delivered < r->size) {
			snprintf(r->error, sizeof(r->error), "the answer ended early");
			xfer_retry(x, -EIO);
			return;
		}
		backend__io_xfer_finish(x, 0);
		return;
	}
	if (x->status == 416 && x->crange_star && x->want_start >= x->cr_total &&
	    (r->range_len || r->delivered)) {
		r->size = x->cr_total; /* asked at or past the end: nothing left */
		backend__io_xfer_finish(x, 0);
		return;
	}
	if (x->status == 0 || x->status == 408 || x->status == 429 || x->status >= 500) {
		xfer_retry(x, -EIO);
		return;
	}
	backend__io_xfer_finish(x, backend__http_errno(x->status));
}

void backend__io_check_multi_info(struct backend_io *io)
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
	backend__io_kick(io);
}

/* A new xfer for r, queued (a probe goes first: it decides for everybody).
 * Returns 0 or -ENOMEM (r not taken). */
int backend__io_xfer_add(struct backend_io *io, struct backend_req *r, int probe)
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
