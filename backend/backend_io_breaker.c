/*
 * backend_io_breaker.c — the circuit breaker of a store (contract:
 * backend_io_i.h), on the I/O thread.
 *
 * The store's health is shared by all requests: the first request that
 * runs out of its retry budget marks the store down
 * (backend__io_store_down), which fails every WAIT and BACKOFF xfer at
 * once, makes on_async fail new requests at once and xfer_retry fail
 * running ones instead of retrying, and starts the probe timer. Whatever
 * answers — a request or the probe — marks it up again
 * (backend__io_store_up, from backend__io_xfer_finish).
 *
 * Non-goals: a per-host breaker behind redirects (one store, one breaker);
 * a half-open state that lets some requests through (the probe decides).
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

/* Probes of a store that is down: the first soon after it went down (a
 * restart is often quick), then backing off to one every 5 s, so that a
 * dead store costs one small request every few seconds and a recovered
 * one is used again within 5 s. */
#define IO_PROBE_FIRST_MS 250.0
#define IO_PROBE_CAP_MS	  5000.0

void backend__io_fast_fail_words(struct backend_req *r)
{
	r->fast_failed = 1;
	snprintf(r->error, sizeof(r->error),
		 "the store is down (a request ran out of its retry budget); failing at once "
		 "until it answers again");
}

/* Fail x at once with -EIO: the store is down. */
void backend__io_fail_fast(struct backend_io *io, struct xfer *x)
{
	atomic_fetch_add(&io->n_fast_fails, 1);
	backend__io_fast_fail_words(x->r);
	backend__io_xfer_finish(x, -EIO);
}

static void probe_cb(uv_timer_t *t);

/* The probe completed (backend__io_xfer_finish already called
 * backend__io_store_up if the store answered): while the store is still
 * down, probe again later. */
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
	if (backend__io_xfer_add(io, r, 1) < 0) {
		probe_done(io, r, -ENOMEM);
		return;
	}
	backend__io_kick(io);
}

/* failed ran out of its retry budget: the store is down. What waits for a
 * slot or a retry fails now; new requests fail at once (on_async) and
 * running ones when their attempt fails (xfer_retry), until a request or
 * the probe gets an answer (backend__io_store_up). So an outage costs one budget, not
 * one per queued request. */
void backend__io_store_down(struct backend_io *io, struct xfer *failed)
{
	struct xfer *x, *next;
	struct backend_req *fr = failed->r;
	char shown[512], last[360];

	if (io->down)
		return;
	io->down = 1;
	atomic_store(&io->down_now, 1);
	backend__url_display(fr->url, shown, sizeof(shown));
	if (fr->error[0])
		snprintf(last, sizeof(last), "%s", fr->error);
	else if (fr->status)
		snprintf(last, sizeof(last), "HTTP %ld", fr->status);
	else
		snprintf(last, sizeof(last), "no answer");
	backend__log(&io->log, BACKEND_LOG_ERROR,
		     "store down: %s %s spent its retry budget (last: %s); requests fail at once "
		     "until the store answers again (a probe every 0.25 s, backing off to 5 s)",
		     fr->method, shown, last);
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
		/* backend__io_xfer_finish unlinks x only; on_done never runs xfers */
		next = x->next;
		if (x != failed && !x->probe && !x->r->past_breaker && x->state != X_RUN)
			backend__io_fail_fast(io, x);
	}
}

/* The store answered: requests go to it again. */
void backend__io_store_up(struct backend_io *io)
{
	if (!io->down)
		return;
	io->down = 0;
	atomic_store(&io->down_now, 0);
	uv_timer_stop(&io->probe_timer);
	backend__log(&io->log, BACKEND_LOG_INFO, "store up again: it answered");
}
