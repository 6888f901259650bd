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
 * then the store is down (backend_io_breaker.c). A retry resumes after the
 * delivered bytes only when it sends If-Match on a strong ETag; any other
 * body (a listing: no ETag) is restarted from its first byte, its sink
 * told to drop what it had (xfer_restart), or fails when it cannot.
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
#include "disk.h"

/* Backoff: full jitter over base * 2^attempt, capped (AWS architecture
 * blog "Exponential Backoff and Jitter"). 100 ms gives a quick second try
 * for a one-off reset; 5 s keeps a broken server from being hammered. */
#define IO_BACKOFF_BASE_MS 100.0
#define IO_BACKOFF_CAP_MS  5000.0
#define IO_MAX_REDIRECTS   5

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
	free(h->data);
}

void backend__io_xfer_release(struct xfer *x)
{
	uv_close((uv_handle_t *)&x->backoff, xfer_free_cb);
}

static void xfer_detach_easy(struct xfer *x)
{
	struct backend_io *io = x->io;

	if (x->easy || x->lc) {
		if (x->state == X_RUN) {
			if (x->easy)
				curl_multi_remove_handle(io->multi, x->easy->e);
			io->running--;
			if (!x->r->small)
				io->running_large--;
		}
		if (x->easy)
			backend__io_easy_put(io, x->easy);
		else
			backend__io_lean_detach(x);
		x->easy = NULL;
	}
	if (x->rx) {
		atomic_fetch_add_explicit(&io->n_bytes_received, x->rx, memory_order_relaxed);
		x->rx = 0;
	}
	/* the If-Match node is the xfer's own: the rest was allocated */
	curl_slist_free_all(x->hdrs == &x->ifm_node ? x->ifm_node.next : x->hdrs);
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
	free(x->url_own);
	x->url_own = NULL;
	free(x->lean_loc);
	x->lean_loc = NULL;
	if (io->nxfer_free < IO_EASY_POOL && !io->halted) {
		x->fnext = io->xfer_free; /* its timer stays initialised */
		io->xfer_free = x;
		io->nxfer_free++;
	} else {
		backend__io_xfer_release(x);
	}
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

/* The strong ETag x's next attempt sends in If-Match: the caller's, else
 * (resuming) the first answer's; NULL when none. A weak ETag can never
 * match under If-Match's strong comparison, so it is only compared by us
 * (headers_complete), and a caller's weak one is not replaced by the first
 * answer's. Only a pinned attempt may resume after the delivered bytes and
 * get the same bytes (xfer_retry). */
static const char *pin_etag(const struct xfer *x)
{
	const struct backend_req *r = x->r;

	if (r->if_match && *r->if_match)
		return strncmp(r->if_match, "W/", 2) != 0 ? r->if_match : NULL;
	if (r->delivered && x->first_etag[0] && strncmp(x->first_etag, "W/", 2) != 0)
		return x->first_etag;
	return NULL;
}

/* x's next attempt asks for the body from its first byte: the sink drops
 * what it had, and the answer is a first one again (its ETag and size are
 * not held to the cut copy's). 0, or -EIO when the sink cannot (why: in
 * r->error, after the attempt's own failure). */
static int xfer_restart(struct xfer *x)
{
	struct backend_req *r = x->r;
	size_t n = strlen(r->error);

	if (!r->on_restart || r->on_restart(r->arg) < 0) {
		snprintf(r->error + n, sizeof(r->error) - n,
			 "%snot resumed: no strong ETag pins the answer's bytes, and its "
			 "%" PRIu64 " bytes were passed on",
			 n ? "; " : "", r->delivered);
		return -EIO;
	}
	r->delivered = 0;
	x->have_first = 0;
	x->first_etag[0] = '\0';
	x->first_total = 0;
	atomic_fetch_add_explicit(&x->io->n_restarts, 1, memory_order_relaxed);
	return 0;
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
	/* the backoff grows with the attempts in a row that got nothing: one
	 * that delivered bytes (a cut or short body) resumes soon */
	x->stuck = x->r->delivered > x->delivered0 ? 0 : x->stuck + 1;
	for (int i = 1; i < x->stuck && cap < IO_BACKOFF_CAP_MS; i++)
		cap *= 2;
	if (cap > IO_BACKOFF_CAP_MS)
		cap = IO_BACKOFF_CAP_MS;
	delay = cap * (double)(rng_next(io) >> 11) / (double)(1ull << 53);
	/* a 503's or 429's Retry-After: the next attempt no sooner (the
	 * backoff's wait when that is longer: a server that always says 0 is
	 * not asked again at once), at most IO_RETRY_AFTER_MAX_MS; one past
	 * what is left of the budget ends the request now, saying so */
	if (x->ra_ms >= 0 && (x->status == 503 || x->status == 429)) {
		if (elapsed + (double)x->ra_ms >= io->budget_ms) {
			snprintf(x->r->error, sizeof(x->r->error),
				 "HTTP %ld: the server asks to be asked again in %" PRId64
				 " s (Retry-After), past the %.1f s left of the retry budget",
				 x->status, x->ra_ms / 1000, (io->budget_ms - elapsed) / 1000.0);
			delay = io->budget_ms; /* ends it below */
		} else {
			double ra =
			    (double)(x->ra_ms < IO_RETRY_AFTER_MAX_MS ? x->ra_ms
								      : IO_RETRY_AFTER_MAX_MS);

			if (ra > delay)
				delay = ra;
			atomic_fetch_add_explicit(&io->n_retry_after, 1, memory_order_relaxed);
		}
	}
	xfer_detach_easy(x);
	if (elapsed + delay >= io->budget_ms) {
		atomic_fetch_add(&io->n_failures, 1);
		if (!x->r->solo)
			backend__io_store_down(io, x);
		backend__io_xfer_finish(x, -EIO);
		return;
	}
	/* bytes delivered that no If-Match pins: asked for again from the
	 * first byte, never resumed after them (two copies spliced) */
	if (x->r->delivered && !pin_etag(x) && xfer_restart(x) < 0) {
		backend__io_xfer_finish(x, -EIO);
		return;
	}
	x->state = X_BACKOFF;
	uv_timer_start(&x->backoff, backoff_cb, (uint64_t)delay, 0);
}

/* An attempt's own state set afresh, and the range it asks for in
 * x->range ("A-B", "A-" to resume a whole-object GET, "" for none). */
static void attempt_prepare(struct xfer *x, int head)
{
	struct backend_io *io = x->io;
	struct backend_req *r = x->r;

	if (!x->t0_ns)
		x->t0_ns = uv_hrtime();
	r->attempts++;
	if (!x->probe)
		atomic_fetch_add(&io->n_attempts, 1);
	r->error[0] = '\0';
	r->errbody_len = 0;
	backend__io_attempt_reset(x);
	x->want_mtime = head || !r->range_len;
	x->delivered0 = r->delivered;
	x->progress_ns = uv_hrtime();
	x->win_ns = 0;
	x->lerr[0] = '\0';
	free(x->lean_loc);
	x->lean_loc = NULL;
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
}

/* The attempt's own headers in x->hdrs: If-Match on a pinned ETag, then
 * the sign callback's (only while the target is the submitted host). 0 or
 * the sign callback's negative errno. */
static int attempt_headers(struct xfer *x)
{
	struct backend_req *r = x->r;
	const char *pin = pin_etag(x);

	x->ifmatch[0] = '\0';
	if (pin)
		snprintf(x->ifmatch, sizeof(x->ifmatch), "If-Match: %s", pin);
	if (x->ifmatch[0]) {
		x->ifm_node.data = x->ifmatch;
		x->ifm_node.next = NULL;
		x->hdrs = &x->ifm_node;
	}
	if (r->sign && x->signable)
		return r->sign(r->sign_arg, r, &x->hdrs);
	return 0;
}

/* The xfer holds a slot of its class now. */
static void xfer_running(struct xfer *x)
{
	x->state = X_RUN;
	x->io->running++;
	if (!x->r->small)
		x->io->running_large++;
}

/* A reused easy handle told this attempt's URL, method, headers, body and
 * range; options the handle's last request set and this one does not want
 * are undone (es->set says which). 0 or -ENOMEM. */
static int easy_setup(struct xfer *x, struct io_easy *es, int head)
{
	struct backend_req *r = x->r;
	unsigned want = (head ? EASY_HEAD : 0) | (r->body ? EASY_BODY : 0);
	CURL *e = es->e;

	curl_easy_setopt(e, CURLOPT_URL, x->url);
	/* the method: back to a plain GET from another, then this one's */
	if ((es->set & (EASY_HEAD | EASY_BODY)) != want) {
		if (es->set & (EASY_HEAD | EASY_BODY)) {
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, NULL);
			curl_easy_setopt(e, CURLOPT_POSTFIELDS, NULL);
			curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		}
		if (head)
			curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		es->set = (es->set & ~(EASY_HEAD | EASY_BODY)) | want;
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs);
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
	if (x->range[0] || (es->set & EASY_RANGE))
		curl_easy_setopt(e, CURLOPT_RANGE, x->range[0] ? x->range : NULL);
	es->set = x->range[0] ? es->set | EASY_RANGE : es->set & ~EASY_RANGE;
	return 0;
}

/* Start one attempt: on the lean engine where it may take it, else a
 * reused easy handle in the multi handle. Returns 0 or a negative errno
 * (the caller finishes the xfer with it). */
static int xfer_start(struct xfer *x)
{
	struct backend_io *io = x->io;
	struct backend_req *r = x->r;
	int head = r->method[0] == 'H';
	struct io_easy *es;
	int err;

	attempt_prepare(x, head);
	err = attempt_headers(x);
	if (err < 0)
		return err;
	/* the lean engine: not for signed requests (their headers hold secrets
	 * that only curl's wiping, undumped allocations may carry: backend_creds_secret.c) */
	if (io->lean && r->object && !x->no_lean && !head && !r->body &&
	    !(r->sign && x->signable)) {
		err = backend__io_lean_start(x, x->range);
		if (err <= 0) {
			if (err == 0)
				xfer_running(x);
			return err;
		}
	}
	es = backend__io_easy_get(io);
	if (!es)
		return -ENOMEM;
	es->x = x;
	es->errbuf[0] = '\0';
	x->easy = es;
	err = easy_setup(x, es, head);
	if (err < 0)
		return err;
	if (curl_multi_add_handle(io->multi, es->e) != CURLM_OK)
		return -ENOMEM;
	xfer_running(x);
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

/* Has the server of x's URL been logged as one that ignores Range? Marks it. */
static int range_logged(struct backend_io *io, const char *url)
{
	size_t plen;
	const char *path = url_path(url, &plen);
	uint64_t h = disk_fnv64_update(disk_fnv64(url, (size_t)(path - url)), path, plen) | 1;
	unsigned i = (unsigned)h & 255;

	for (; io->range_logged[i]; i = (i + 1) & 255)
		if (io->range_logged[i] == h)
			return 1;
	if (++io->nrange_logged > 128) {
		memset(io->range_logged, 0, sizeof(io->range_logged));
		io->nrange_logged = 1;
		i = (unsigned)h & 255;
	}
	io->range_logged[i] = h;
	return 0;
}

/* A ranged GET answered with the whole object: said once per object, with
 * what it cost. */
static void log_range_ignored(struct xfer *x)
{
	struct backend_req *r = x->r;
	char shown[512];

	if (range_logged(x->io, x->url))
		return;
	backend__url_display(x->url, shown, sizeof(shown));
	backend__log(&x->io->log, BACKEND_LOG_WARN,
		     "GET %s: the server ignored Range: it answered 200 with the whole object "
		     "(%" PRIu64 " bytes) to a request for %" PRIu64 " bytes at %" PRIu64
		     "; %" PRIu64 " bytes received for them, and every ranged read of this object "
		     "costs as much (logged once per object; counter bytes_received)",
		     shown, x->have_clen ? x->clen : 0,
		     r->range_len ? r->range_len - x->delivered0 : 0, x->want_start, x->rx);
}

/* A body that ended before its headers said: counted, in words. */
static void short_body(struct xfer *x, const char *why)
{
	struct backend_req *r = x->r;
	uint64_t want = x->have_crange && !x->crange_star ? x->cr_end - x->cr_start + 1
			: x->have_clen			  ? x->clen
			: r->range_len			  ? r->range_len - x->delivered0
							  : r->size - x->delivered0;

	atomic_fetch_add_explicit(&x->io->n_short_bodies, 1, memory_order_relaxed);
	snprintf(r->error, sizeof(r->error),
		 "HTTP %ld: short body: got %" PRIu64 " of %" PRIu64 " bytes%s", x->status,
		 r->delivered - x->delivered0, want, why);
}

/* What the answer's head said of the object (size, ETag, mtime) goes to
 * the request, from a 2xx head only. */
static void note_answer(struct xfer *x)
{
	struct backend_req *r = x->r;

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
}

/* An attempt that did not end with a whole answer's head and curl's OK: a
 * sink's abort or stop, a stall, a cut body or head, curl's own error.
 * 1: the xfer was finished or retried here; 0: its status decides. */
static int done_cut(struct xfer *x, CURLcode c)
{
	struct backend_req *r = x->r;
	int retry = 0;
	int err;

	if (x->abort_err) {
		backend__io_xfer_finish(x, x->abort_err);
		return 1;
	}
	if (x->stop_ok) {
		backend__io_xfer_finish(x, 0);
		return 1;
	}
	if (x->stalled == 2) {
		snprintf(r->error, sizeof(r->error),
			 "the transfer trickled (%" PRIu64
			 " body bytes in more than %ld s, under %d "
			 "a second: taken as stalled)",
			 x->trickled, x->io->stall_s, IO_TRICKLE_RATE);
		xfer_retry(x, -EIO);
		return 1;
	}
	if (x->stalled) {
		/* a head trickled a byte at a time is silence until a line ends */
		snprintf(r->error, sizeof(r->error),
			 "the transfer stalled (no whole header line nor body byte for %ld s)",
			 x->io->stall_s);
		xfer_retry(x, -EIO);
		return 1;
	}
	if (c == CURLE_PARTIAL_FILE && x->accept_body) {
		short_body(x, " (the connection closed)");
		xfer_retry(x, -EIO);
		return 1;
	}
	if (x->status && !x->hdr_done && (c == CURLE_OK || c == CURLE_PARTIAL_FILE)) {
		/* closed after the status line, inside the head (curl ends one cut
		 * before its Content-Length as if whole): no body began, so not a
		 * short body; both engines say it so */
		snprintf(r->error, sizeof(r->error),
			 "HTTP %ld: the connection closed inside the answer's headers", x->status);
		xfer_retry(x, -EIO);
		return 1;
	}
	if (c != CURLE_OK) {
		backend__io_curl_describe(c, x->url, x->easy ? x->easy->errbuf : x->lerr, r);
		err = backend__io_curl_errno(c, &retry);
		if (retry)
			xfer_retry(x, err);
		else
			backend__io_xfer_finish(x, err);
		return 1;
	}
	return 0;
}

/* A 3xx: the next hop queued first (to the target curl names, or the lean
 * engine's), signed and with its userinfo only on the submitted URL's
 * origin; more than IO_MAX_REDIRECTS hops, no target or one not http(s):
 * -EIO. A request with keep_redirect ends there instead, its target in
 * r->location (backend_head_ahead's first half). */
/* The length of url's scheme (letters, digits, "+-.", at most 16, before a
 * ':'), or 0. */
static int scheme_len(const char *url)
{
	size_t n = strspn(url, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");

	return n > 0 && n <= 16 && url[n] == ':' ? (int)n : 0;
}

static void follow_redirect(struct xfer *x)
{
	struct backend_req *r = x->r;
	char *loc = NULL, *next, *origin, *first;
	int same;

	if (x->easy)
		curl_easy_getinfo(x->easy->e, CURLINFO_REDIRECT_URL, &loc);
	else /* the lean engine's, as curl says it (backend__url_join) */
		loc = x->lean_loc;
	if (!loc || ++x->hops > IO_MAX_REDIRECTS ||
	    (strncasecmp(loc, "http://", 7) != 0 && strncasecmp(loc, "https://", 8) != 0)) {
		/* the log says which: a loop, no Location, another scheme */
		char shown[160];

		backend__url_display(loc ? loc : "", shown, sizeof(shown));
		if (!loc)
			snprintf(r->error, sizeof(r->error), "HTTP %ld without a Location",
				 x->status);
		else if (x->hops > IO_MAX_REDIRECTS)
			snprintf(
			    r->error, sizeof(r->error),
			    "HTTP %ld: more than %d redirects in a row (a loop?), the last to %s",
			    x->status, IO_MAX_REDIRECTS, shown);
		else /* its scheme only, when it is one (the server's bytes) */
			snprintf(
			    r->error, sizeof(r->error),
			    "HTTP %ld: a redirect to a URL of another scheme (%.*s), not http(s)",
			    x->status, scheme_len(loc) ? scheme_len(loc) : 1,
			    scheme_len(loc) ? loc : "?");
		backend__io_xfer_finish(x, -EIO);
		return;
	}
	r->dir_redirect |= redirect_to_dir(x->url, loc);
	origin = backend__url_origin(loc);
	if (!origin) {
		backend__io_xfer_finish(x, -EIO);
		return;
	}
	first = backend__url_origin(r->url);
	same = first && strcmp(origin, first) == 0;
	free(origin);
	free(first);
	next = same ? strdup(loc) : backend__url_without_userinfo(loc);
	if (!next) {
		backend__io_xfer_finish(x, -ENOMEM);
		return;
	}
	if (r->keep_redirect) { /* not followed: the caller sends it (its hop) */
		r->location = next;
		r->location_same_origin = same;
		backend__io_xfer_finish(x, 0);
		return;
	}
	x->signable = same;
	free(x->url_own);
	x->url = x->url_own = next;
	xfer_detach_easy(x);
	r->attempts--; /* a hop is not a retry */
	wait_push(x->io, x, 1);
}

/* A 2xx: done, unless the body is short (neither all that was asked nor
 * the object's end): then retried. */
static void done_2xx(struct xfer *x)
{
	struct backend_req *r = x->r;

	if (strcmp(r->method, "HEAD") == 0) {
		backend__io_xfer_finish(x, 0);
		return;
	}
	if (r->range_len) {
		/* short: neither all of it nor the object's end */
		uint64_t end = r->range_off + r->delivered;

		if (r->delivered < r->range_len && !(r->size && end >= r->size)) {
			short_body(x, "");
			xfer_retry(x, -EIO);
			return;
		}
	} else if (r->size && r->delivered < r->size) {
		short_body(x, "");
		xfer_retry(x, -EIO);
		return;
	}
	backend__io_xfer_finish(x, 0);
}

/* One attempt ended (curl says done with result c): finished, retried or
 * sent on to a redirect's target, by what ended it, then by its status. */
void backend__io_xfer_done(struct xfer *x, CURLcode c)
{
	struct backend_req *r = x->r;

	if (x->range_ignored)
		log_range_ignored(x);
	note_answer(x);
	if (done_cut(x, c))
		return;
	if (is_redirect(x->status)) {
		follow_redirect(x);
		return;
	}
	if (x->status >= 200 && x->status < 300) {
		done_2xx(x);
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

/* answers in a row that the lean engine cannot read (each then asked again through curl) before
 * the store's requests go to curl alone, logged once: a server that frames every answer so
 * (chunked, a 1xx) costs 2 requests a read otherwise */
#define LEAN_UNSUP_MAX 3u

void backend__io_xfer_to_curl(struct xfer *x)
{
	struct backend_io *io = x->io;

	if (++io->lean_unsup >= LEAN_UNSUP_MAX && io->lean) {
		io->lean = 0;
		backend__log(&io->log, BACKEND_LOG_WARN,
			     "the store's last %u answers were not plain HTTP/1.1 with a "
			     "Content-Length (chunked, a 1xx, ...): its reads go through curl from "
			     "now on",
			     LEAN_UNSUP_MAX);
	}
	x->no_lean = 1;
	xfer_detach_easy(x);
	x->r->attempts--; /* the same attempt, by the other engine */
	if (!x->probe)
		atomic_fetch_sub(&x->io->n_attempts, 1);
	wait_push(x->io, x, 1);
	backend__io_kick(x->io);
}

void backend__io_check_multi_info(struct backend_io *io)
{
	CURLMsg *m;
	int pending;

	while ((m = curl_multi_info_read(io->multi, &pending))) {
		struct io_easy *es = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&es);
		if (!es || !es->x)
			continue;
		backend__io_xfer_done(es->x, m->data.result);
	}
	backend__io_kick(io);
}

/* A new xfer for r, queued (a probe goes first: it decides for everybody).
 * Returns 0 or -ENOMEM (r not taken). */
int backend__io_xfer_add(struct backend_io *io, struct backend_req *r, int probe)
{
	struct xfer *x = io->xfer_free;

	if (x) { /* an ended one: its timer is initialised */
		uv_timer_t t = x->backoff;

		io->xfer_free = x->fnext;
		io->nxfer_free--;
		memset(x, 0, sizeof(*x));
		x->backoff = t;
	} else {
		x = calloc(1, sizeof(*x));
		if (!x)
			return -ENOMEM;
		uv_timer_init(&io->loop, &x->backoff);
		x->backoff.data = x;
	}
	x->io = io;
	x->r = r;
	x->probe = probe;
	x->url = r->url;
	x->signable = 1; /* r->url's origin, until a redirect leaves it */
	r->priv = x;
	x->next = io->all;
	if (io->all)
		io->all->prev = x;
	io->all = x;
	wait_push(io, x, probe);
	return 0;
}
