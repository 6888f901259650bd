/*
 * backend_io_i.h — private to backend/: the I/O thread shared by every
 * remote store. One thread runs a libuv loop that drives a libcurl multi
 * handle (curl's documented multi_socket + libuv pattern: uv_poll per
 * socket, one uv_timer for curl's timeout). Other threads hand requests
 * over through a mutex-protected queue and uv_async_send; the loop never
 * blocks (but for a streamed read's pwrite of each piece to a local file:
 * backend_io_stream; that is where a fill's bytes go, with no copy in
 * between, and a disk slower than the network then paces every
 * transfer, as it paces the fills anyway). Connections are reused (keep-alive). Two classes
 * share them: up to 'connections' transfers of ordinary requests run at once, and small
 * ones (backend_req.small: a planned range of at most a chunk) may take more, up to
 * 'max_connections' transfers of both classes in all; the rest wait in the queue (FIFO
 * within a class: a small request is not held up by a large one that waits for its class).
 *
 * A request is an HTTP GET or HEAD of one URL, optionally of a byte range
 * (or a GET with a JSON body: backend_req.body).
 * The engine owns retrying: connection errors, 5xx, 429, stalls (no bytes
 * for stall_timeout_s) and short bodies are retried with exponential
 * backoff and full jitter until retry_budget_s has passed since submit,
 * then the request fails with -EIO. The backoff grows with the attempts in
 * a row that delivered nothing: an attempt that brought bytes (a cut, a
 * short body) is resumed after at most 100 ms. A short body (the answer
 * ended before its Content-Length or Content-Range said; a Content-Length
 * short of the Content-Range) is counted (short_bodies) and said as "HTTP
 * S: short body: got N of M bytes"; a 200 to a ranged GET (the server
 * ignored Range) is counted (range_ignored), read up to the range's end,
 * and logged once per URL with what it cost; every body byte that reached
 * us is counted (bytes_received). A ranged GET that already delivered
 * bytes resumes after them, with If-Match on the ETag of the first answer
 * (a changed object gives -ESTALE, never mixed bytes). One whose retry
 * would send no If-Match on a strong ETag (no ETag, a weak one: a listing,
 * a body of a store that sends none) is not resumed but restarted from its
 * first byte, within the same budget: its sink drops what it had
 * (backend_req.on_restart; counted: restarts), or, when the sink cannot,
 * the request fails with -EIO ("not resumed: ..."), never splicing two
 * copies. Redirects (301,
 * 302, 303, 307, 308) are followed up to 5 hops; headers made by 'sign' are
 * dropped when a redirect leaves the original host (curl's own rule for
 * Authorization, which we apply to every signed header).
 *
 * A store failure is shared: once a request has spent its whole budget
 * on failures of the store (no answer, 5xx, 408, 429, stalls, cut bodies),
 * the store is "down" — requests that wait for a slot or a retry fail at
 * once with -EIO, new ones too, running ones when their attempt fails —
 * while one probe (a 1-byte GET of the failed request's URL, unsigned)
 * asks the store every 0.25 s, backing off to every 5 s. Any answer of
 * the store (a success, or a status that is not a store failure: any but
 * 408, 429 and 5xx, so 400, 404, 403, 412, ... — also from the probe)
 * makes it "up" again. 404, 403 and a changed ETag are answers, never
 * failures. A solo request (GetBatch) spending its budget fails alone:
 * it never marks the store down. A request with past_breaker
 * (a listing: the mount's, an explicit refresh's) is never failed at once:
 * it asks the store itself, with its own retry budget, and its answer
 * makes the store up. The breaker logs each change ("store down: ..." with
 * the request and its last answer, "store up again").
 *
 * Lifecycle: every submitted request completes exactly once through
 * on_done, on the I/O thread; after backend_io_cancel and at
 * backend_io_close, queued and running ones complete with -ECANCELED (a
 * running transfer is aborted). The caller owns struct backend_req and
 * must keep it alive until on_done has run.
 */
#ifndef BACKEND_IO_I_H
#define BACKEND_IO_I_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <curl/curl.h>
#include <uv.h>

#include "backend.h"
#include "backend_i.h"

struct backend_io;
struct backend_req;
struct curl_slist;

/* Most bytes of an error answer's body kept with its request. */
#define BACKEND_ERRBODY_MAX 1024
/* A running attempt whose body brings fewer bytes a second than this over
 * a window of the stall bound (--stall-timeout) trickles: it is retried as a
 * stall is (backend_io_attempt.c, io_trickle). A store's connection brings
 * megabytes a second; a byte a second (a slowloris answer) would hold a
 * 64 KiB unit's reader for 18 hours. */
#define IO_TRICKLE_RATE 256

/* Return 0 to go on, a negative errno to abort the transfer (it completes
 * with that error, no retry). Runs on the I/O thread: must not block (a
 * backend_sink_cb's pwrite to a local file is the one wait allowed). */
typedef int (*backend_req_data_cb)(void *arg, const void *buf, size_t len);
/* Runs on the I/O thread, exactly once per submitted request. */
typedef void (*backend_req_done_cb)(void *arg, struct backend_req *r, int err);
/* Add authentication headers for this attempt (SigV4 needs a fresh date on
 * every attempt). Runs on the I/O thread; must not block. Returns 0 or a
 * negative errno (the request then fails with it). */
typedef int (*backend_req_sign_cb)(void *arg, struct backend_req *r, struct curl_slist **headers);

struct backend_req {
	/* ---- set by the caller before submit ---- */
	const char *method;   /* "GET" or "HEAD" */
	char *url;	      /* absolute URL, owned by the caller */
	uint64_t range_off;   /* with range_len > 0: "Range: bytes=off-(off+len-1)" */
	uint64_t range_len;   /* 0: the whole object (never a suffix range) */
	const char *if_match; /* ETag the object must still have, or NULL */
	/* the size the object must still have (its version's, as listed or
	 * stat'ed), or 0: not known. An answer that gives the object another
	 * size (a 206's Content-Range total, a whole 200's Content-Length) is
	 * -ESTALE: the object changed, also on a store that sends no ETag.
	 * Without it a request still holds its answers to the first one's size
	 * (a resume never mixes two sizes). */
	uint64_t if_size;
	backend_req_sign_cb sign; /* or NULL */
	void *sign_arg;
	backend_req_data_cb on_data; /* body bytes, in order, each byte once; or NULL */
	/* or NULL: asked while an attempt runs and nothing arrives (on curl's
	 * progress calls that find no header line or body bytes since the one
	 * before: about once a second while none come, and while paused; not
	 * after each piece, which on_data has just had); a negative errno
	 * stops the request with it, without a retry. I/O thread. */
	int (*on_poll)(void *arg);
	/* or NULL: memory for the next body bytes on_data will get (at most
	 * *len; *len lowered to what fits), or NULL: backend_sink_mem_cb's
	 * contract. Asked by the lean engine only. I/O thread. */
	void *(*on_mem)(void *arg, size_t *len);
	int pausable; /* on_data may answer BACKEND_SINK_FULL (backend.h) */
	/* or NULL: the body starts again at its first byte: drop what on_data
	 * had (0), or a negative errno when that cannot be. Asked when an
	 * attempt that delivered bytes failed and no strong ETag pins the
	 * answer's bytes (no If-Match the retry sends): resuming after them
	 * could splice two versions of the body (a listing, which has no ETag
	 * and may change between attempts); without it (or when it fails) the
	 * request fails instead. I/O thread. */
	int (*on_restart)(void *arg);
	backend_req_done_cb on_done;
	void *arg;
	/* 1: sent even while the store is down (a listing, which a user asked
	 * for: mount, refresh), with its own retry budget, instead of failing
	 * at once; its answer brings the store up, as the probe's does */
	int past_breaker;
	/* 1: its failures say nothing of the store's objects (a request to an
	 * endpoint of its own: AIStore's GetBatch, whose caller fetches the
	 * same bytes another way when it fails): spending its retry budget
	 * fails it alone and never marks the store down */
	int solo;
	/* 1: a small request (a planned range): it may run while 'connections' ordinary
	 * transfers run, up to 'max_connections' in all (backend_config) */
	int small;
	/* or NULL: a request body (with method "GET": AIStore's GetBatch,
	 * backend_ais_batch.c), sent with Content-Type: application/json on
	 * every attempt and every redirect hop (as curl -L does for a 307).
	 * The caller keeps it alive until on_done. Such a request is never
	 * resumed: once body bytes were delivered, a failed attempt completes
	 * the request with -EIO instead of a retry. */
	const char *body;
	size_t body_len;
	/* 1: a ranged read of an object's bytes (set by backend__io_get and
	 * backend__async_start): the lean engine may carry it (--http-engine
	 * auto); probes, listings and HEADs stay curl's */
	int object;
	/* 1: a redirect (3xx with a Location) is not followed: the request ends
	 * there (on_done's err 0, status the 3xx) with its target in location
	 * (the caller's to free), for the caller to send when it chooses
	 * (backend_head_ahead: AIStore's proxy's 307 of a HEAD, followed only
	 * once the answer it asks for may be given) */
	int keep_redirect;

	/* ---- results, valid in on_done ---- */
	long status;	    /* last HTTP status (0: no answer) */
	char etag[80];	    /* ETag of the answer, quotes kept, or "" */
	uint64_t size;	    /* object size: Content-Length, or the total of Content-Range */
	int64_t mtime;	    /* Last-Modified as seconds since the epoch, or 0 (HEAD and
			     * whole-object GETs: a ranged GET does not parse it) */
	uint64_t delivered; /* body bytes handed to on_data */
	int attempts;
	int dir_redirect; /* 1: a redirect went from a path without a trailing
			   * '/' to one with it (the server's way to say "a
			   * directory": the same path's, or another's) */
	char error[320];  /* the last attempt's transport failure in words
			   * ("TLS certificate of HOST not trusted: ...", a
			   * stall, an answer that ended early), or "" (then
			   * status says why); never credentials */
	/* the first bytes of the last attempt's error answer (status 400 and
	 * up: S3's <Error>, GCS's and AIStore's JSON), as received; the rest
	 * is dropped (backend__errbody_parse reads it) */
	char errbody[BACKEND_ERRBODY_MAX];
	size_t errbody_len;
	/* the last attempt's x-amz-bucket-region of an answer of 300 and up
	 * (S3 names the bucket's region so with a 301 PermanentRedirect,
	 * whose body is dropped, and with a refused HEAD, which has none), as
	 * sent; "" when absent or longer than this holds */
	char bucket_region[64];
	int fast_failed; /* failed at once: the store is down (breaker) */
	/* with keep_redirect: the redirect's target, absolute, malloc'd (the
	 * caller frees it), without userinfo when it leaves the submitted
	 * URL's origin; NULL when the answer was not a redirect */
	char *location;
	int location_same_origin; /* 1: location is on the submitted URL's origin */

	/* ---- private to the engine ---- */
	struct backend_req *next;
	void *priv;
};

int backend_io_open(struct backend_io **out, const struct backend_config *cfg);
/* Cancels what is queued or running (on_done with -ECANCELED), then stops
 * the thread. Accepts NULL. Must not be called on the I/O thread. */
void backend_io_close(struct backend_io *io);
void backend_io_submit(struct backend_io *io, struct backend_req *r);
/* Complete everything queued or running with -ECANCELED, and every later
 * submit at once with -ECANCELED; returns without waiting. Any thread
 * but the I/O thread; accepts NULL. */
void backend_io_cancel(struct backend_io *io);
void backend_io_stats(struct backend_io *io, struct backend_stats *st);
/* backend_sink_ready: the loop asks the paused transfers' sinks again */
void backend_io_sink_ready(struct backend_io *io);

/* Blocking helpers for callers that are not on the I/O thread. */
/* Fetch the body into a malloc'd buffer of at most max bytes (-EFBIG if
 * larger: a hostile server cannot make us allocate without bound). */
int backend_io_get(struct backend_io *io, struct backend_req *r, void **body, size_t *len,
		   size_t max);
/* Read the range into buf (range_off/range_len set by the caller). Returns
 * bytes read (less than range_len only at the end of the object) or a
 * negative errno. */
ssize_t backend_io_read(struct backend_io *io, struct backend_req *r, void *buf);
/* The same, the body going to cb (with its object offset, from range_off
 * on) straight from curl's receive buffer, on the I/O thread. Returns the
 * bytes delivered or a negative errno (cb's own, when it stopped). */
ssize_t backend_io_stream(struct backend_io *io, struct backend_req *r, backend_sink_cb cb,
			  void *arg);
/* backend_io_stream without waiting: r's body goes to cb as there; when r
 * ends, done(darg, r, err, bytes) runs once (err: the engine's errno or
 * cb's own; bytes: those cb accepted), on the I/O thread, or in the
 * calling thread before this returns when nothing was asked (range_len 0:
 * 0 bytes; -ENOMEM; -EINVAL). r (and its url) stay the caller's and alive
 * until done has run. Any thread, the I/O thread too (a done callback may
 * submit the next request). */
typedef void (*backend_io_stream_done_cb)(void *darg, struct backend_req *r, int err,
					  uint64_t bytes);
/* its state, the caller's (in the allocation that holds r: no allocation
 * of its own); untouched once done runs */
struct backend_io_astream {
	backend_sink_cb cb;
	backend_sink_mem_cb mem; /* or NULL */
	void *arg;
	uint64_t pos;	/* object offset of the next byte */
	uint64_t bytes; /* bytes cb accepted */
	backend_io_stream_done_cb done;
	void *darg;
};
void backend_io_stream_async(struct backend_io *io, struct backend_req *r,
			     struct backend_io_astream *a, backend_sink_cb cb,
			     backend_sink_mem_cb mem, void *arg, backend_io_stream_done_cb done,
			     void *darg);
/* The asynchronous ranged GET of a remote store (its read_async op): the
 * store's struct begins with a struct backend_async, in one allocation with
 * key, etag and extra bytes after it (backend__async_new: NULL when out of
 * memory). backend__async_start submits r (the store's, set up but for the
 * range) with backend_io_stream_async; when it ends, a failure is recorded
 * by 'failed' (a 416 is the object's end with eof416: S3 answers so for a
 * range at or past the end), done runs, then release (or free). */
struct backend_async {
	struct backend_io_astream st;
	struct backend *be;
	backend_done_cb done;
	void *darg;
	char *key; /* for the failure record */
	char *etag;
	uint64_t size; /* the version's size (backend_req.if_size) */
	char *extra;
	int eof416;
	void (*failed)(struct backend *be, const char *method, const char *key,
		       const struct backend_req *r, int err);
	void (*release)(struct backend_async *a); /* NULL: free(a) */
};
void *backend__async_new(size_t size, size_t extra, struct backend *be, const char *key,
			 const char *etag, uint64_t osize, backend_done_cb done, void *darg);
void backend__async_start(struct backend_io *io, struct backend_async *a, struct backend_req *r,
			  uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			  backend_sink_mem_cb mem, void *arg);
/* The ranged GET of [off, off + len) by r (its url, sign, ... set), only of
 * version etag when given: into buf when it is not NULL (backend_io_read),
 * else to cb (backend_io_stream). Bytes read or a negative errno. */
ssize_t backend__io_get(struct backend_io *io, struct backend_req *r, const char *etag,
			uint64_t size, uint64_t off, size_t len, void *buf, backend_sink_cb cb,
			void *arg);
/* HEAD; fills the result fields. */
int backend_io_head(struct backend_io *io, struct backend_req *r);
/* info of key (a regular file, mode 0644) from a HEAD's answer r. */
void backend_io_head_info(struct backend_objinfo *info, const char *key,
			  const struct backend_req *r);
/* Requests i < n, at most window of them in flight, and wait for them:
 * make(arg, i, slot, r) sets up request i in r (zeroed; method, url, ...;
 * slot < window is the one it runs in, for what the caller keeps per
 * request in flight); done(arg, i, slot, r, err) runs on this thread for
 * each answer, in completion order, and frees what make allocated (r and
 * the slot are then reused). A non-zero return of either stops new
 * requests and becomes the result once those in flight are done. Bound:
 * each request's own (its retry budget). */
int backend_io_run_many(struct backend_io *io, size_t n, unsigned window,
			int (*make)(void *arg, size_t i, unsigned slot, struct backend_req *r),
			int (*done)(void *arg, size_t i, unsigned slot, struct backend_req *r,
				    int err),
			void *arg);

/* HTTP status to errno: the one place where that mapping lives. */
int backend__http_errno(long status);

/* Record why r (method of key, on store be) failed with err, for the
 * calling thread's backend_last_error and backend_log_failure: r's URL
 * as shown (no userinfo, query), its status, the code and message of its
 * error body, or the transport's reason. Calling thread (the one that
 * made the request); never blocks. */
void backend__req_failed(struct backend *be, const char *method, const char *key,
			 const struct backend_req *r, int err);

/* ---- the engine's internals: for backend_io_*.c only -----------------------
 * The engine is six files (and backend_h1.c, pure); they share the structs below and the functions
 * named backend__io_*, which all run on the loop thread:
 *   backend_io_loop.c     the I/O thread: its libuv loop driving curl's multi
 *                         handle, the queue from other threads, open, close,
 *                         cancel, stats
 *   backend_io_xfer.c     a request's life: waiting for a slot, each attempt
 *                         started, its outcome (finish, retry with backoff,
 *                         follow a redirect, resume)
 *   backend_io_attempt.c  one attempt's HTTP: curl's header, body and
 *                         progress callbacks; curl results and statuses to
 *                         errno and words
 *   backend_io_breaker.c  the circuit breaker: the store down, the probe
 *   backend_io_wait.c     the blocking helpers (get, read, stream, head)
 *   backend_io_lean.c     the lean engine: a plain ranged GET's attempt without
 *                         curl (--http-engine auto)
 *   backend_io_resolve.c  the lean engine's host names: lookups off the loop,
 *                         their answers kept
 */
enum xfer_state { X_WAIT, X_RUN, X_BACKOFF };

/* An easy handle with its fixed options, set once when it is made: the
 * callbacks (their data is this struct: x says which transfer runs), the
 * hardening, timeouts, buffer size, keep-alive, the socket callbacks. Per
 * attempt only the URL, the header list and, when they change, the range
 * and the method are set (no curl_easy_reset). */
struct io_easy {
	CURL *e;
	struct xfer *x; /* the transfer it runs, or NULL */
	unsigned set;	/* the per-request options set now: EASY_* */
	char errbuf[CURL_ERROR_SIZE];
};
#define EASY_RANGE 1u /* CURLOPT_RANGE */
#define EASY_HEAD  2u /* CURLOPT_NOBODY */
#define EASY_BODY  4u /* CURLOPT_POSTFIELDS, CUSTOMREQUEST "GET" */

struct xfer {
	struct backend_io *io;
	struct backend_req *r;
	enum xfer_state state;
	struct xfer *prev, *next; /* io->all */
	struct xfer *wnext;	  /* io->wait, state X_WAIT */
	uv_timer_t backoff;	  /* the memory is freed in its close callback */
	struct io_easy *easy;
	struct curl_slist *hdrs;    /* of the running attempt (may start with ifm_node) */
	struct curl_slist ifm_node; /* If-Match: ifmatch, not allocated */
	const char *url;	    /* target of the next/running attempt: r->url or url_own */
	char *url_own;		    /* a redirect's target, or NULL */
	int signable;		    /* url has r->url's origin: sign, keep userinfo */
	int hops;		    /* redirects followed */
	uint64_t t0_ns;		    /* first attempt started (the budget's clock) */
	int last_err;		    /* why the last attempt failed, for -EIO */
	char range[64];
	char ifmatch[96];
	char first_etag[80];  /* ETag of the first body answer; "" before */
	uint64_t first_total; /* the object size the first body answer gave (0: none) */
	int have_first;
	int probe;	     /* io->probe_req: one attempt, never failed fast */
	int want_mtime;	     /* parse Last-Modified: a HEAD, a whole-object GET */
	int stuck;	     /* failed attempts in a row that delivered nothing: the backoff */
	uint64_t delivered0; /* r->delivered when the attempt began */
	struct xfer *fnext;  /* io->xfer_free */

	/* ---- the current attempt, reset by backend__io_attempt_reset ---- */
	long status;
	int hdr_done; /* the final response's headers are complete */
	int have_clen, have_crange, crange_star;
	int coded; /* a Transfer-Encoding: it frames the body, Content-Length says nothing */
	uint64_t clen, cr_start, cr_end, cr_total;
	char etag[80];
	char encoding[24]; /* a Content-Encoding other than identity ("": none) */
	int64_t mtime;
	/* a 503's or 429's Retry-After, in ms from its arrival
	 * (backend__io_retry_after_ms); -1: none */
	int64_t ra_ms;
	uint64_t want_start;  /* first object offset this attempt asks for */
	uint64_t skip;	      /* body bytes to drop first (200 to a range) */
	uint64_t limit;	      /* most body bytes to deliver (UINT64_MAX: all) */
	int accept_body;      /* 2xx GET whose body goes to on_data */
	int range_ignored;    /* a 200 to a ranged GET: the whole object comes */
	int abort_err;	      /* set by a callback: finish with it, no retry */
	int stop_ok;	      /* we stopped the body ourselves: success */
	int stalled;	      /* on_progress aborted a silent (1) or trickling (2) transfer */
	int paused;	      /* on_data answered BACKEND_SINK_FULL: a backend_sink_ready (or
			       * io->pause_timer, the bound) resumes it */
	uint64_t paused_ns;   /* ... since when */
	uint64_t progress_ns; /* when bytes last arrived (or the attempt began), as the
			       * first progress call after them saw it */
	uint64_t arrivals;    /* header lines and body pieces curl handed over */
	uint64_t seen;	      /* ... as the last progress call found them */
	uint64_t rx;	      /* body bytes curl handed over (counted at the attempt's end) */
	uint64_t win_ns;      /* the trickle check's window began (0: at the next arrival) */
	uint64_t win_rx;      /* ... with rx this */
	uint64_t trickled;    /* stalled 2: the body bytes of the window that stopped it */

	/* ---- the lean engine (backend_io_lean.c) ---- */
	struct lconn *lc; /* the connection the running attempt uses, or NULL (curl's) */
	int no_lean;	  /* the lean engine left this request to curl */
	char *lean_loc;	  /* its redirect's absolute target (malloc'd), or NULL */
	char lerr[128];	  /* its transport failure in curl's words, or "" */
};

struct sock;
struct lconn;
struct io_rent;

/* A lean connection waiting for its host name's lookup
 * (backend_io_resolve.c), in the lookup's list */
struct io_rwait {
	struct io_rwait *next;
	struct io_rent *ent; /* the lookup waited for, or NULL */
};
#define IO_RESOLVE_MAX	  16	/* names kept (and lookups under way) at once */
#define IO_RESOLVE_TTL_MS 60000 /* an answer kept: curl's CURLOPT_DNS_CACHE_TIMEOUT default */
#define IO_RESOLVE_ADDRS  4	/* addresses kept of an answer: a connect tries each in turn */

/* Bigger receive buffer than curl's 16 KiB (fewer callbacks per MB), small
 * enough to stay in the CPU's cache between the recv that fills it and the
 * copy out of it: with 32 connections, 512 KiB buffers (16 MiB in all)
 * cost 9 % more CPU per GB filled than 64 KiB ones (median of 10 fresh
 * 1 GB prefetches each on the bench's link emulator). */
#define IO_BUFFER_BYTES (64 * 1024)
#define IO_EASY_POOL	64 /* easy handles (and ended xfers) kept for reuse */
/* The most a socket's receive low-water mark asks (backend__io_lowat): a
 * body's rest up to this size wakes the loop once, not once per segment the
 * sender's pacing sends (60 MB/s paces about 58 KB a millisecond) */
#define IO_LOWAT_MAX (128 * 1024)
struct backend_io {
	pthread_t thread;
	struct disk_mutex lock;	    /* DISK_LOCK_BE_QUEUE: protects queue, closing */
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
	/* easy handles of ended transfers, kept with their fixed options for
	 * the next (an easy handle is tens of KiB of allocations: one per
	 * request was about 3 % of the loop's CPU in a planned epoch of small
	 * ranges), and ended xfers (their backoff timer kept initialised) */
	struct io_easy *easy_pool[IO_EASY_POOL];
	unsigned neasy;
	struct xfer *xfer_free;
	unsigned nxfer_free;
	/* the sockets of curl's connections by fd, made when curl opens one
	 * (CURLOPT_OPENSOCKETFUNCTION) and closed when it closes it: a
	 * connection's poll handle lives as long as the connection */
	struct sock **sockv;
	size_t nsockv;
	unsigned running;	/* transfers running, both classes */
	unsigned running_large; /* ... of them not small (backend_req.small) */
	uint64_t rng;
	/* URLs (FNV-1a 64 of their path) whose server ignored Range, logged
	 * once each: open addressing, emptied when half full */
	uint64_t range_logged[256];
	unsigned nrange_logged;
	int halted; /* cancelled: everything completes with -ECANCELED */
	/* the circuit breaker (see "store down" below) */
	int down;	 /* a request spent its budget; no answer since */
	char *probe_url; /* what the probe asks for: the failed request's URL */
	struct backend_req probe_req;
	int probe_busy;	       /* probe_req is submitted */
	double probe_delay_ms; /* until the next probe */
	uv_timer_t probe_timer;
	/* runs while a transfer is paused (BACKEND_SINK_FULL): the bound of a
	 * pause no backend_sink_ready ended (BACKEND_PAUSE_BACKSTOP_MS) */
	uv_timer_t pause_timer;
	/* the lean engine (backend_io_lean.c): on (--http-engine auto, no
	 * proxy in the environment), its idle connections (kept alive), all
	 * of them, the attempts running on them, and the tick that bounds
	 * their connects and stalls while any runs */
	int lean;
	unsigned lean_unsup; /* answers in a row the lean engine left to curl (LEAN_UNSUP_MAX) */
	struct lconn *lean_idle;
	unsigned nlean_idle;
	struct lconn *lean_all;
	unsigned lean_active;
	uv_timer_t lean_tick;
	unsigned lean_gen;
	/* idle connections whose receive mark is not 1 yet (their last answer's): it goes back
	 * to 1 just before the loop waits again (lean_prep), unless a request started on the
	 * connection in this turn of the loop set its own (one system call a request, not two) */
	unsigned lean_stale;
	uv_prepare_t lean_prep;
	/* its host names (backend_io_resolve.c): IO_RESOLVE_MAX entries, made
	 * at the first name; res_closed: the loop is ending */
	struct io_rent *rtab;
	int res_closed;

	/* ---- any thread: counters for backend_io_stats ---- */
	atomic_ullong n_requests, n_attempts, n_failures, n_fast_fails, n_probes, n_cancels;
	atomic_ullong n_bytes_received, n_short_bodies, n_range_ignored, n_restarts;
	atomic_ullong n_retry_after; /* retries whose wait a Retry-After set */
	atomic_ullong n_pauses, n_resumes, n_pause_backstops;
	atomic_ullong n_connects, n_lean_attempts;
	atomic_ullong n_recv_inplace, n_recv_copied; /* backend_stats.recv_*_bytes */
	atomic_ullong n_recvs;			     /* backend_stats.recvs */
	atomic_ullong n_marks;			     /* backend_stats.marks */
	atomic_ullong n_resolves, n_resolve_hits, n_resolve_failures;
	atomic_int resume_asked; /* backend_io_sink_ready: on_async asks the paused sinks */
	atomic_int down_now;

	/* ---- read-only after open ---- */
	unsigned max_running; /* most transfers not small at once: 'connections' */
	unsigned max_total;   /* most transfers at once: 'max_connections', at least max_running */
	double budget_ms;
	long connect_ms;
	long stall_s;
	uint64_t stall_ns;
	char *ca_file;
	struct backend_logger log; /* the breaker's two lines: down, up again */
};

/* Wake the loop for socket fd only once want bytes (at most max: IO_LOWAT_MAX, or 1;
 * at least 1) wait in its receive queue (SO_RCVLOWAT: epoll says
 * readable then, or at the peer's end or an error; a non-blocking recv still returns what is
 * there). *cur: fd's mark now (0: the kernel's 1); no system call when it is already so
 * (each one made is counted: backend_stats.marks). Loop thread. */
void backend__io_lowat(struct backend_io *io, int fd, int *cur, uint64_t want, uint64_t max);

/* backend_io_xfer.c */
void backend__io_xfer_release(struct xfer *x); /* frees an ended xfer (its timer closed) */
int backend__io_xfer_add(struct backend_io *io, struct backend_req *r, int probe);
void backend__io_xfer_finish(struct xfer *x, int err);
/* curl ended x's attempt with c (a done message; or a curl_easy_pause that
 * resumed it and failed, which curl reports nowhere else) */
void backend__io_xfer_done(struct xfer *x, CURLcode c);
void backend__io_kick(struct backend_io *io);
void backend__io_pause_note(struct backend_io *io); /* a transfer paused: resume it later */
void backend__io_check_multi_info(struct backend_io *io);

/* backend_io_loop.c: an easy handle with its fixed options (the pool's, or
 * new: NULL when out of memory), and back to the pool */
struct io_easy *backend__io_easy_get(struct backend_io *io);
void backend__io_easy_put(struct backend_io *io, struct io_easy *es);

/* backend_io_attempt.c: the checks of an answer both engines share: a head's
 * line (CRLF included; the status line resets the attempt, the blank line
 * decides what the body is): 0, or < 0 to stop (abort_err says why when
 * set); body bytes (len, 0 to stop: abort_err or stop_ok set, or
 * CURL_WRITEFUNC_PAUSE: the sink is full, the same bytes come again); a
 * progress call (1: stop, stalled or abort_err set) */
int backend__io_header_line(struct xfer *x, const char *buf, size_t len);
/* A Retry-After value s[0..len) (RFC 9110 10.2.3: delta-seconds, or an
 * HTTP-date), read at now (seconds since the epoch): the wait it asks for
 * in *ms (a date in the past: 0; delta-seconds too large saturate at
 * INT64_MAX / 1000 s), 0; or -EINVAL (anything else: a sign, a fraction,
 * trailing bytes, no digits, a date curl cannot read). */
int backend__io_retry_after_ms(const char *s, size_t len, int64_t now, int64_t *ms);
/* Most a Retry-After is waited before the next attempt (when the retry
 * budget allows it at all): a server's word past this is an outage
 * the breaker's probes watch (backend_io_breaker.c), not a wait. */
#define IO_RETRY_AFTER_MAX_MS 60000
size_t backend__io_body(struct xfer *x, const char *buf, size_t len);
/* x's sink is full (BACKEND_SINK_FULL, or a pausable sink's memory offer
 * that says so): x paused, counted, its resume due (backend_sink_ready, or
 * the backstop's tick) */
void backend__io_paused(struct xfer *x);
int backend__io_progress(struct xfer *x);
void backend__io_attempt_reset(struct xfer *x);
size_t backend__io_on_header(char *buf, size_t size, size_t n, void *arg);
size_t backend__io_on_body(char *buf, size_t size, size_t n, void *arg);
int backend__io_on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
			    curl_off_t ulnow);
int backend__io_curl_errno(CURLcode c, int *retry);
void backend__io_curl_describe(CURLcode c, const char *url, const char *errbuf,
			       struct backend_req *r);

/* backend_io_lean.c: the lean engine. lean_start: 1 when x's attempt is
 * not one it takes (curl's then), 0 started, < 0 an errno; lean_detach:
 * the attempt's connection kept (its answer read whole) or closed;
 * lean_resume: a paused attempt's held bytes offered again (it may end);
 * lean_init/lean_shutdown: its handles at open (whether it runs at all, io->lean, is
 * backend_io_open's: --http-engine, no proxy in the environment) and at the loop's end */
int backend__io_lean_start(struct xfer *x, const char *range);
void backend__io_lean_detach(struct xfer *x);
void backend__io_lean_resume(struct xfer *x);
void backend__io_lean_init(struct backend_io *io);
void backend__io_lean_shutdown(struct backend_io *io);
/* backend_io_lean.c: the lookup w waited for ended: its n addresses (sa,
 * salen; NULL: it failed). Called by backend_io_resolve.c. */
void backend__io_lean_resolved(struct io_rwait *w, const struct sockaddr_storage *sa,
			       const socklen_t *salen, unsigned n);
/* backend_io_resolve.c: the lean engine's host names. resolve: 0 with a
 * kept answer (*sa, *salen: *naddr addresses, valid until the loop runs
 * again), 1 when w waits for a lookup (backend__io_lean_resolved ends its
 * wait), -EAGAIN (every slot waits for a lookup) or -ENOMEM: curl's then.
 * forget: w waits no more. prefer: a connection reached sa: it comes first
 * in name's answer from now on. shutdown: at the loop's end (a lookup
 * under way is left to end by itself); free: after the loop ended. */
int backend__io_resolve(struct backend_io *io, const char *name, struct io_rwait *w,
			const struct sockaddr_storage **sa, const socklen_t **salen,
			unsigned *naddr);
void backend__io_resolve_forget(struct io_rwait *w);
void backend__io_resolve_prefer(struct backend_io *io, const char *name,
				const struct sockaddr_storage *sa, socklen_t salen);
void backend__io_resolve_shutdown(struct backend_io *io);
void backend__io_resolve_free(struct backend_io *io);
/* backend_io_xfer.c: the lean engine cannot read x's answer: its attempt
 * goes again through curl (not counted as an attempt) */
void backend__io_xfer_to_curl(struct xfer *x);

/* backend_io_breaker.c */
void backend__io_store_up(struct backend_io *io);
void backend__io_store_down(struct backend_io *io, struct xfer *failed);
void backend__io_fail_fast(struct backend_io *io, struct xfer *x);
void backend__io_fast_fail_words(struct backend_req *r);

#endif
