/*
 * backend_io_attempt.c — one attempt's HTTP exchange (contract:
 * backend_io_i.h): curl's header, body and progress callbacks of an
 * attempt, and what its result means (curl codes and HTTP statuses to
 * errno and to words).
 *
 * The callbacks run on the I/O thread inside curl and never block (but for
 * on_data's pwrite of a streamed read). They parse the status line, ETag,
 * Content-Length, Content-Range, Content-Encoding and Last-Modified; an
 * encoded body (any Content-Encoding but identity) is refused; a 206 must start
 * exactly at the asked offset and end at the range's end or at the
 * object's; a 200 to a ranged request is consumed by skipping to the
 * offset and stopping after the wanted length; a resumed answer with
 * another ETag is -ESTALE, never mixed bytes. A transfer silent for the
 * stall timeout is stopped (on_progress) and retried by the caller.
 *
 * Non-goals: chunked trailers, multi-range answers, any body but a GET's.
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>
#include <uv.h>

#include "backend_i.h"
#include "backend_io_i.h"

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
int backend__io_curl_errno(CURLcode c, int *retry)
{
	switch (c) {
	case CURLE_OK:
		*retry = 0;
		return 0;
	case CURLE_URL_MALFORMAT:
	case CURLE_BAD_FUNCTION_ARGUMENT:
		*retry = 0;
		return -EINVAL;
	case CURLE_UNSUPPORTED_PROTOCOL:
		/* the URL's scheme was checked when the store opened: this is
		 * the answer's (a status line that is not HTTP/1.x, as when a
		 * server sent more body than its Content-Length on a reused
		 * connection), or a redirect's target: the server's fault, not
		 * the source's (-EINVAL would say "not a valid source") */
		*retry = 0;
		return -EIO;
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

/* A failed attempt's curl result in words, into r->error: the one place
 * where curl codes become messages. curl's error buffer is used only for
 * codes whose text names at most a host and port (never a URL, so never
 * userinfo or a query). */
void backend__io_curl_describe(CURLcode c, const char *url, const char *errbuf,
			       struct backend_req *r)
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
	case CURLE_UNSUPPORTED_PROTOCOL: /* the answer's status line, or a redirect's scheme */
	case CURLE_WEIRD_SERVER_REPLY:
		snprintf(r->error, sizeof(r->error), "not an HTTP answer from %.100s: %.180s", host,
			 detail);
		break;
	default:
		snprintf(r->error, sizeof(r->error), "%s", curl_easy_strerror(c));
		break;
	}
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

void backend__io_attempt_reset(struct xfer *x)
{
	x->status = 0;
	x->hdr_done = 0;
	x->have_clen = x->have_crange = x->crange_star = x->coded = 0;
	x->clen = x->cr_start = x->cr_end = x->cr_total = 0;
	x->etag[0] = '\0';
	x->encoding[0] = '\0';
	x->mtime = 0;
	x->ra_ms = -1;
	x->skip = 0;
	x->limit = UINT64_MAX;
	x->accept_body = 0;
	x->range_ignored = 0;
	x->abort_err = 0;
	x->stop_ok = 0;
	x->stalled = 0;
	x->paused = 0;
}

/* An answer refused by headers_complete (or total_check): err, with why in r->error (the
 * request's failure in words, logged by the caller), so that no refusal
 * is only "Input/output error". */
__attribute__((format(printf, 3, 4))) static int refuse(struct xfer *x, int err, const char *fmt,
							...)
{
	struct backend_req *r = x->r;
	int n = snprintf(r->error, sizeof(r->error), "HTTP %ld: ", x->status);
	va_list ap;

	if (n < 0 || (size_t)n >= sizeof(r->error))
		return err;
	va_start(ap, fmt);
	vsnprintf(r->error + n, sizeof(r->error) - (size_t)n, fmt, ap);
	va_end(ap);
	return err;
}

/* The object's size an answer gives: a 206's Content-Range total, a 200's
 * Content-Length (the whole object, also to a ranged GET); 0: none. */
static uint64_t answer_total(const struct xfer *x)
{
	if (x->status == 206 && x->have_crange && !x->crange_star)
		return x->cr_total;
	if (x->status == 200 && x->have_clen)
		return x->clen;
	return 0;
}

/* An answer that gives the object another size than the caller's version
 * (or, without one, than the request's first answer) is another object:
 * -ESTALE, with the sizes in r->error. An ETag cannot be relied on to say
 * so: a store may send none. */
static int total_check(struct xfer *x)
{
	const struct backend_req *r = x->r;
	uint64_t total = answer_total(x);
	uint64_t want = r->if_size ? r->if_size : x->have_first ? x->first_total : 0;

	if (!total || !want || total == want)
		return 0;
	return refuse(x, -ESTALE,
		      "the object is %" PRIu64 " bytes now, not %" PRIu64 ": it changed", total,
		      want);
}

/* The answer's ETag is the version read so far (the first answer's) and
 * the caller's (also against servers that ignore If-Match). 0, or -ESTALE
 * (why: in r->error). */
static int etag_check(struct xfer *x)
{
	const struct backend_req *r = x->r;

	if (x->have_first && x->first_etag[0] && x->etag[0] && strcmp(x->etag, x->first_etag) != 0)
		return refuse(x, -ESTALE, "ETag %s after %s: the object changed during the read",
			      x->etag, x->first_etag);
	if (r->if_match && *r->if_match && x->etag[0] && strcmp(x->etag, r->if_match) != 0)
		return refuse(x, -ESTALE, "ETag %s, not %s: the object changed", x->etag,
			      r->if_match);
	return 0;
}

/* A 206 is the range asked for: its one Content-Range starts where the
 * request does (ranged: it asked for a range), lies in the object, ends at
 * the range's end or the object's (remain: the bytes the range has left),
 * and its Content-Length is no longer than it. 0, or -EIO (why: in
 * r->error). */
static int partial_check(struct xfer *x, int ranged, uint64_t remain)
{
	const struct backend_req *r = x->r;
	uint64_t span = x->cr_end - x->cr_start + 1;

	if (!ranged)
		return refuse(x, -EIO, "a 206 to a request for the whole object");
	if (!x->have_crange || x->crange_star)
		return refuse(x, -EIO,
			      "a 206 without a Content-Range of one range (a multipart "
			      "answer?): asked for bytes %" PRIu64 "-",
			      x->want_start);
	if (x->cr_end < x->cr_start || x->cr_end >= x->cr_total)
		return refuse(x, -EIO,
			      "Content-Range bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
			      " is not a range of the object",
			      x->cr_start, x->cr_end, x->cr_total);
	if (x->cr_start != x->want_start)
		return refuse(x, -EIO,
			      "a 206 of bytes %" PRIu64 "-%" PRIu64 ", asked from %" PRIu64,
			      x->cr_start, x->cr_end, x->want_start);
	/* may end early only at the object's end */
	if (r->range_len && span < remain && x->cr_end + 1 != x->cr_total)
		return refuse(x, -EIO,
			      "a 206 of bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
			      " ends before the range asked for (%" PRIu64 " bytes) and the "
			      "object",
			      x->cr_start, x->cr_end, x->cr_total, remain);
	/* a Content-Length short of the range is a short body: its bytes
	 * are the range's first ones (as a cut connection's are), kept,
	 * and the rest asked for again (xfer_done); a longer one is not
	 * an answer to the range */
	if (x->have_clen && x->clen > span)
		return refuse(x, -EIO,
			      "Content-Length %" PRIu64 " is longer than its Content-Range "
			      "(%" PRIu64 " bytes)",
			      x->clen, span);
	return 0;
}

/* The final response's headers are in: decide what its body is. Returns 0,
 * or a negative errno that fails the request (why: in r->error). */
static int headers_complete(struct xfer *x)
{
	struct backend_req *r = x->r;
	int get = strcmp(r->method, "HEAD") != 0;
	int ranged = r->range_len > 0 || r->delivered > 0;
	uint64_t remain = r->range_len ? r->range_len - r->delivered : UINT64_MAX;

	if (x->status < 200 || x->status > 299)
		return 0; /* body discarded; decided at the end */
	if (etag_check(x) < 0)
		return -ESTALE;
	if (!get)
		return 0;
	/* shardfs asks for no encoding: bytes encoded on the way (nginx's
	 * gzip_static serving X.gz for X, a store transcoding) are not the
	 * object's, whatever their length; refused, not retried */
	if (x->encoding[0])
		return refuse(x, -EIO,
			      "Content-Encoding: %s: not the object's bytes as stored "
			      "(the server encodes answers; turn that off for this path)",
			      x->encoding);
	/* a 200 is the whole object: one that says it holds a range is the
	 * server's mistake (a 206's answer labelled 200?), not another object */
	if (x->status == 200 && x->have_crange && !x->crange_star &&
	    (x->cr_start != 0 || !x->have_clen || x->cr_end + 1 != x->clen))
		return refuse(x, -EIO,
			      "a 200 with Content-Range bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64
			      ": not the whole object (the server answers ranges wrongly)",
			      x->cr_start, x->cr_end, x->cr_total);
	if (total_check(x) < 0)
		return -ESTALE;
	if (x->status == 206) {
		if (partial_check(x, ranged, remain) < 0)
			return -EIO;
	} else if (x->status == 200 && ranged) {
		/* the server ignored Range: read the whole body from offset 0 */
		x->skip = x->want_start;
		x->range_ignored = 1;
		atomic_fetch_add_explicit(&x->io->n_range_ignored, 1, memory_order_relaxed);
	} else if (x->status != 200) {
		return refuse(x, -EIO, "not an object's bytes (a GET is answered 200 or 206)");
	}
	x->limit = remain;
	x->accept_body = 1;
	if (!x->have_first) {
		x->have_first = 1;
		snprintf(x->first_etag, sizeof(x->first_etag), "%s", x->etag);
		x->first_total = answer_total(x);
	}
	return 0;
}

/* ETag: the value as sent; one too long for x->etag is taken as absent. */
static void hdr_etag(struct xfer *x, const char *s, const char *end)
{
	size_t l = (size_t)(end - s);

	if (l >= sizeof(x->etag))
		l = 0; /* absurd: treat as absent */
	memcpy(x->etag, s, l);
	x->etag[l] = '\0';
}

/* Content-Range: "bytes A-B/T" or "bytes STAR/T" (416); an unknown total
 * (or anything else) is no Content-Range. */
static void hdr_content_range(struct xfer *x, const char *s, const char *end)
{
	const char *stop;

	if ((size_t)(end - s) <= 6 || strncasecmp(s, "bytes ", 6) != 0)
		return;
	s = skip_ws(s + 6, end);
	if (s < end && *s == '*') {
		if (s + 1 < end && s[1] == '/' && parse_u64(s + 2, end, &x->cr_total, &stop) == 0 &&
		    stop == end)
			x->crange_star = x->have_crange = 1;
	} else if (parse_u64(s, end, &x->cr_start, &stop) == 0 && stop < end && *stop == '-' &&
		   parse_u64(stop + 1, end, &x->cr_end, &stop) == 0 && stop < end && *stop == '/' &&
		   parse_u64(stop + 1, end, &x->cr_total, &stop) == 0 && stop == end) {
		x->have_crange = 1;
	}
}

/* Content-Encoding: kept (cut to x->encoding) unless empty or identity. */
static void hdr_content_encoding(struct xfer *x, const char *s, const char *end)
{
	size_t l = (size_t)(end - s);

	while (l > 0 && (s[l - 1] == ' ' || s[l - 1] == '\t'))
		l--;
	if (!(l == 8 && strncasecmp(s, "identity", 8) == 0) && l > 0) {
		if (l >= sizeof(x->encoding))
			l = sizeof(x->encoding) - 1;
		memcpy(x->encoding, s, l);
		x->encoding[l] = '\0';
	}
}

/* Last-Modified: the object's mtime where curl reads the date. */
static void hdr_last_modified(struct xfer *x, const char *s, const char *end)
{
	char tmp[64];
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

int backend__io_retry_after_ms(const char *s, size_t len, int64_t now, int64_t *ms)
{
	const char *end = s + len;
	char tmp[64];
	uint64_t secs = 0;
	time_t t;

	s = skip_ws(s, end);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	if (s < end && *s >= '0' && *s <= '9') { /* delta-seconds: 1*DIGIT */
		for (const char *p = s; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -EINVAL;
			if (secs < (uint64_t)INT64_MAX / 1000)
				secs = secs * 10 + (uint64_t)(*p - '0');
		}
		if (secs > (uint64_t)INT64_MAX / 1000)
			secs = (uint64_t)INT64_MAX / 1000;
		*ms = (int64_t)secs * 1000;
		return 0;
	}
	/* an HTTP-date ("Sun, 06 Nov 1994 08:49:37 GMT", and the two obsolete
	 * forms RFC 9110 5.6.7 has recipients accept): as curl reads dates */
	if (s >= end || (size_t)(end - s) >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, (size_t)(end - s));
	tmp[end - s] = '\0';
	t = curl_getdate(tmp, NULL);
	if (t < 0)
		return -EINVAL;
	*ms = (int64_t)t > now ? ((int64_t)t - now) * 1000 : 0;
	return 0;
}

/* Retry-After of a 503 or a 429: the wait it asks for (anything unread is
 * none: the backoff's own wait). */
/* x-amz-bucket-region of an answer of 300 and up: the value as sent
 * (backend_s3_refused.c reads it); one too long is taken as absent. */
static void hdr_bucket_region(struct xfer *x, const char *s, const char *end)
{
	size_t l = (size_t)(end - s);

	while (l && (s[l - 1] == ' ' || s[l - 1] == '\t'))
		l--;
	if (l >= sizeof(x->r->bucket_region))
		return;
	memcpy(x->r->bucket_region, s, l);
	x->r->bucket_region[l] = '\0';
}

static void hdr_retry_after(struct xfer *x, const char *s, const char *end)
{
	int64_t ms;

	if (backend__io_retry_after_ms(s, (size_t)(end - s), (int64_t)time(NULL), &ms) == 0)
		x->ra_ms = ms;
}

/* One header line, "Name: value" (v: its colon), of the names that
 * matter: each told by its length and first letter before it is
 * compared. */
static void header_field(struct xfer *x, const char *buf, const char *v, const char *end)
{
	const char *s = skip_ws(v + 1, end);
	const char *stop;

#define HDR(name)                                                                                  \
	((size_t)(v - buf) == sizeof(name) - 1 && (buf[0] | 0x20) == name[0] &&                    \
	 strncasecmp(buf, name, sizeof(name) - 1) == 0)
	if (HDR("etag")) {
		hdr_etag(x, s, end);
	} else if (HDR("content-length")) {
		if (!x->coded && parse_u64(s, end, &x->clen, &stop) == 0 &&
		    skip_ws(stop, end) == end)
			x->have_clen = 1;
	} else if (HDR("transfer-encoding")) {
		/* the coding frames the body (curl decodes chunked): a
		 * Content-Length beside it, before or after, is not the body's
		 * length and not the object's size (RFC 9112 6.3) */
		x->coded = 1;
		x->have_clen = 0;
		x->clen = 0;
	} else if (HDR("content-range")) {
		hdr_content_range(x, s, end);
	} else if (HDR("content-encoding")) {
		hdr_content_encoding(x, s, end);
	} else if (x->want_mtime && HDR("last-modified")) { /* HEADs, whole GETs */
		hdr_last_modified(x, s, end);
	} else if ((x->status == 503 || x->status == 429) && HDR("retry-after")) {
		hdr_retry_after(x, s, end);
	} else if (x->status >= 300 && HDR("x-amz-bucket-region")) {
		hdr_bucket_region(x, s, end);
	}
#undef HDR
}

int backend__io_header_line(struct xfer *x, const char *buf, size_t len)
{
	const char *end = buf + len, *v;
	const char *stop;
	int err;

	x->arrivals++;
	while (end > buf && (end[-1] == '\r' || end[-1] == '\n'))
		end--;
	if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		const char *p = memchr(buf, ' ', (size_t)(end - buf));
		uint64_t st = 0;

		backend__io_attempt_reset(x); /* each response (1xx too) starts afresh */
		x->r->bucket_region[0] = '\0';
		if (!p || parse_u64(skip_ws(p, end), end, &st, &stop) < 0 || st > 999)
			return -1;
		x->status = (long)st;
		return 0;
	}
	if (end == buf) { /* the blank line: end of one response's headers */
		if (x->status >= 100 && x->status < 200)
			return 0;
		x->hdr_done = 1;
		err = headers_complete(x);
		if (err < 0) {
			x->abort_err = err;
			return err;
		}
		return 0;
	}
	/* only the names header_field knows matter, none longer than 19 */
	v = memchr(buf, ':', (size_t)(end - buf) < 20 ? (size_t)(end - buf) : 20);
	if (v)
		header_field(x, buf, v, end);
	return 0;
}

size_t backend__io_on_header(char *buf, size_t size, size_t n, void *arg)
{
	struct xfer *x = ((struct io_easy *)arg)->x;

	return backend__io_header_line(x, buf, size * n) < 0 ? 0 : size * n;
}

void backend__io_paused(struct xfer *x)
{
	x->paused = 1;
	x->paused_ns = uv_hrtime();
	atomic_fetch_add_explicit(&x->io->n_pauses, 1, memory_order_relaxed);
	backend__io_pause_note(x->io);
}

size_t backend__io_body(struct xfer *x, const char *buf, size_t n)
{
	struct backend_req *r = x->r;
	size_t size = 1, len = n, skipped = 0;
	int err;

	x->arrivals++;
	x->rx += len;
	if (!x->accept_body) {
		/* redirect bodies are dropped; an error answer's first bytes are
		 * kept: they say why (S3's <Error>, a JSON error) */
		if (x->status >= 400 && r->errbody_len < sizeof(r->errbody)) {
			size_t k = sizeof(r->errbody) - r->errbody_len;

			k = k < len ? k : len;
			memcpy(r->errbody + r->errbody_len, buf, k);
			r->errbody_len += k;
		}
		return len;
	}
	if (x->skip) {
		size_t k = x->skip < len ? (size_t)x->skip : len;

		buf += k;
		len -= k;
		if (!len) {
			x->skip -= k;
			return size * n;
		}
		skipped = k; /* dropped once the bytes after them are taken */
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
		if (err == BACKEND_SINK_FULL && r->pausable) {
			/* the same bytes come again when curl is told to go on */
			x->rx -= size * n;
			backend__io_paused(x);
			return CURL_WRITEFUNC_PAUSE;
		}
		if (err < 0) {
			x->abort_err = err;
			return 0;
		}
	}
	x->skip -= skipped;
	r->delivered += len;
	x->limit -= len;
	if (x->limit == 0 && x->status == 200 && r->range_len &&
	    !(x->have_clen && x->rx >= x->clen)) {
		x->stop_ok = 1;
		return 0; /* the rest of a full body is not wanted (at its end: the
			   * connection is kept) */
	}
	return size * n;
}

size_t backend__io_on_body(char *buf, size_t size, size_t n, void *arg)
{
	return backend__io_body(((struct io_easy *)arg)->x, buf, size * n);
}

/* A trickle is a stall too: a server that sends a byte now and then (a
 * slowloris answer, header lines without end, 1xx answers without end) is
 * never silent, and a reader would wait for its range at that rate (a
 * 64 KiB unit at a byte a second: 18 hours; a FUSE read that waits cannot be
 * killed). From the attempt's first arrival on, each window of the stall
 * bound must bring IO_TRICKLE_RATE body bytes a second on average; one that
 * does not stops the attempt (retried within the budget as a stall). */
static int io_trickle(struct xfer *x, uint64_t now)
{
	uint64_t got;

	if (!x->win_ns || x->paused) { /* the first arrival; a sink's pause is no trickle */
		x->win_ns = now;
		x->win_rx = x->rx;
		return 0;
	}
	if (now - x->win_ns <= x->io->stall_ns)
		return 0;
	got = x->rx >= x->win_rx ? x->rx - x->win_rx : 0;
	if ((double)got * 1e9 < (double)IO_TRICKLE_RATE * (double)(now - x->win_ns)) {
		x->stalled = 2;
		x->trickled = got;
		return 1;
	}
	x->win_ns = now;
	x->win_rx = x->rx;
	return 0;
}

/* Stall detection. curl's LOW_SPEED_TIME averages the speed over about five
 * seconds, so a few bytes followed by silence are noticed up to five seconds
 * late; this is exact to curl's once-a-second progress calls (which the
 * LOW_SPEED settings keep coming while the transfer is silent). */
int backend__io_progress(struct xfer *x)
{
	uint64_t now;

	if (x->arrivals != x->seen) {
		/* a header or body bytes came since the last call: progress, and
		 * the sink just had the bytes (curl calls this after each read, so
		 * the silence is timed from its end as before) */
		x->seen = x->arrivals;
		x->progress_ns = uv_hrtime();
		return io_trickle(x, x->progress_ns);
	}
	if (x->r->on_poll) {
		int err = x->r->on_poll(x->r->arg);

		if (err < 0) {
			x->abort_err = err;
			return 1;
		}
	}
	now = uv_hrtime();
	if (x->paused) { /* held back by its sink, not by the store */
		x->progress_ns = now;
		x->win_ns = 0;
	}
	if (now - x->progress_ns > x->io->stall_ns) {
		x->stalled = 1;
		return 1;
	}
	return 0;
}

int backend__io_on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			    curl_off_t ulnow)
{
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return backend__io_progress(((struct io_easy *)arg)->x);
}
