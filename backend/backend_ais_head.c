/*
 * backend_ais_head.c — backend_head_ahead (backend.h) for ais:// sources:
 * an object's HEAD in two halves. AIStore's proxy answers an object's S3
 * HEAD with a 307 to the object's target, which answers it (AIStore's
 * ais/prxs3.go headObjS3, by default). The redirect is chosen by the
 * object's name alone (the proxy reads nothing of the object: it says
 * nothing of its version), and holds no time limit and no one-time token:
 * when intra-cluster signing is on it is signed over the method, path,
 * proxy, cluster map version, length and a nonce (ais/signverify.go,
 * ais/prxred.go), so a target answers it whenever it is followed. A
 * GetBatch redirect is another matter: the proxy sets up a work item for
 * that one request before its 307 (ais/ml.go), so it is never reused.
 *
 * backend__ais_head_ahead sends the HEAD to the endpoint with
 * keep_redirect (the engine ends the request at the 3xx, its target in
 * location); backend__ais_head_follow sends the HEAD to that target (one
 * round trip: the answer is the object as it is then) or, when no
 * redirect was kept (the endpoint answered the HEAD itself, or failed),
 * the whole HEAD again (backend__os_stat): the early answer is dropped,
 * never given, and an endpoint seen answering HEADs itself gets none sent
 * ahead from then on (os->head_direct). AIStore's requests are never
 * signed (backend_s3.c, os_auth): none here either.
 *
 * backend__ais_head_follow_many follows several kept redirects at once
 * (backend_io_run_many, os->head_window in flight: the batch fills' HEAD
 * groups, cachetier_batchv.c), then sends the whole HEADs of those that
 * kept none together (backend_stat_many's way).
 *
 * backend__ais_head_follow_submit does what backend__ais_head_follow does
 * without a waiting thread: the follow (or the whole HEAD) is submitted by
 * the caller when the endpoint's answer is in, else by ahead_done when it
 * comes (h->state: whichever comes second sends it, exactly once), and its
 * answer is given by follow_done on the I/O thread. The staged windows'
 * HEADs (cachetier_batchm.c) go so: no thread per HEAD.
 * backend__ais_head_drop_nowait likewise frees h at the endpoint's answer.
 *
 * Every hop of these HEADs is a small request (backend_req.small): a
 * version HEAD some item waits for is no body and one round trip, so it
 * runs past 'connections' (up to 'max_connections'), as the reads a thread
 * waits for do, never queued behind the GetBatch requests that hold the
 * ordinary slots, and never holding one of them: sent as a request starts
 * (a batch fill's one a HEAD group, a staged window's one an object),
 * ordinary, they took the slots of the requests beside them, and at an
 * epoch's head its first window's requests queued behind them (tests/
 * bench/README.md, L9 batch10).
 *
 * Threads: the caller's (any but the I/O thread); the endpoint's answer
 * is noted on the I/O thread (ahead_done); follow and drop wait for it,
 * bounded by the engine's retry budget and stall bound; the _submit and
 * _nowait ones wait for nothing but ahead_done's post when it has ended.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend_i.h"
#include "backend_io_i.h"

/* Where a HEAD sent ahead is: its first half running, ended (done posted),
 * or running with its follow (backend__ais_head_follow_submit) or its drop
 * (backend__ais_head_drop_nowait) asked for, to be done by ahead_done. */
enum { AH_RUNNING, AH_ENDED, AH_FOLLOW, AH_DROP };

struct backend_head_ahead {
	struct backend_req req; /* the HEAD at the endpoint: url is ours */
	sem_t done;		/* posted on the I/O thread once it ended */
	int err;		/* its errno, written before done */
	atomic_int state;	/* AH_*: the caller's ask and ahead_done meet here */
	/* backend__ais_head_follow_submit's: its HEAD and what it answers */
	struct backend_req follow;
	struct backend *be;
	const char *key;
	struct backend_objinfo *info;
	backend_head_done_cb fdone;
	void *farg;
};

static void ahead_release(struct backend_head_ahead *h)
{
	free(h->req.location);
	free(h->req.url);
	sem_destroy(&h->done);
	free(h);
}

static void ahead_free(struct backend_head_ahead *h)
{
	while (sem_wait(&h->done) < 0 && errno == EINTR)
		; /* the engine ends every request */
	ahead_release(h);
}

static void follow_start(struct backend_head_ahead *h);

/* The endpoint's answer, on the I/O thread: told to a waiting follow or
 * drop (done posted: the last touch of h), or the asynchronous follow or
 * drop asked for meanwhile done here. */
static void ahead_done(void *arg, struct backend_req *r, int err)
{
	struct backend_head_ahead *h = arg;

	(void)r;
	h->err = err;
	switch (atomic_exchange_explicit(&h->state, AH_ENDED, memory_order_acq_rel)) {
	case AH_FOLLOW:
		follow_start(h);
		break;
	case AH_DROP:
		ahead_release(h);
		break;
	default:
		sem_post(&h->done);
		break;
	}
}

struct backend_head_ahead *backend__ais_head_ahead(struct backend *be, const char *key)
{
	struct backend_objstore *os = be->impl;
	struct backend_head_ahead *h;

	if (os->kind != OS_AIS || atomic_load_explicit(&os->head_direct, memory_order_relaxed))
		return NULL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	h->req.url = backend__os_head_url(os, key);
	if (!h->req.url || sem_init(&h->done, 0, 0) < 0) {
		free(h->req.url);
		free(h);
		return NULL;
	}
	atomic_init(&h->state, AH_RUNNING);
	h->req.method = "HEAD";
	h->req.small = 1; /* no ordinary slot taken or waited for (above) */
	h->req.keep_redirect = 1;
	h->req.on_done = ahead_done;
	h->req.arg = h;
	backend_io_submit(os->io, &h->req);
	return h;
}

void backend__ais_head_drop(struct backend *be, struct backend_head_ahead *h)
{
	(void)be;
	ahead_free(h);
}

/* h's first half ended (it is waited for): the target of its kept
 * redirect, or NULL when the endpoint kept none (failed, or answered the
 * HEAD itself: then that answer is older than the follow's call, and the
 * endpoint gets no more sent ahead). h stays the caller's. */
static char *ahead_wait(struct backend_objstore *os, struct backend_head_ahead *h)
{
	while (sem_wait(&h->done) < 0 && errno == EINTR)
		;
	sem_post(&h->done); /* for ahead_free's wait */
	if (h->err == 0 && h->req.location)
		return h->req.location;
	if (h->err == 0)
		atomic_store_explicit(&os->head_direct, 1, memory_order_relaxed);
	return NULL;
}

int backend__ais_head_follow(struct backend *be, struct backend_head_ahead *h, const char *key,
			     struct backend_objinfo *info)
{
	struct backend_objstore *os = be->impl;
	struct backend_req r;
	int err;

	memset(&r, 0, sizeof(r));
	r.url = ahead_wait(os, h); /* the target's, as the engine's hop would send it */
	if (!r.url) {
		ahead_free(h);
		return backend__os_stat(be, key, info);
	}
	r.small = 1;
	err = backend_io_head(os->io, &r);
	if (err == 0)
		backend_io_head_info(info, key, &r);
	else
		backend__req_failed(be, "HEAD", key, &r, err);
	ahead_free(h);
	return err;
}

/* The asynchronous follow's HEAD ended (the I/O thread, or the caller's
 * when the engine refused it at once): its answer, h freed, then the
 * caller told (after which nothing of the caller's is touched). */
static void follow_done(void *arg, struct backend_req *r, int err)
{
	struct backend_head_ahead *h = arg;
	backend_head_done_cb done = h->fdone;
	void *darg = h->farg;

	if (err == 0)
		backend_io_head_info(h->info, h->key, r);
	else
		backend__req_failed(h->be, "HEAD", h->key, r, err);
	ahead_release(h);
	done(darg, err);
}

/* h's first half ended: the HEAD to its kept redirect's target, or (none
 * kept) the whole HEAD again, as backend__ais_head_follow sends them, with
 * follow_done at its end. Any thread, the I/O thread too. */
static void follow_start(struct backend_head_ahead *h)
{
	struct backend_objstore *os = h->be->impl;

	memset(&h->follow, 0, sizeof(h->follow));
	h->follow.method = "HEAD";
	h->follow.small = 1;
	if (h->err == 0 && h->req.location) {
		h->follow.url = h->req.location;
	} else {
		if (h->err == 0) /* answered at the endpoint: older than this call */
			atomic_store_explicit(&os->head_direct, 1, memory_order_relaxed);
		h->follow.url = h->req.url; /* the whole HEAD: backend__os_stat's URL */
	}
	h->follow.on_done = follow_done;
	h->follow.arg = h;
	backend_io_submit(os->io, &h->follow);
}

int backend__ais_head_follow_submit(struct backend *be, struct backend_head_ahead *h,
				    const char *key, struct backend_objinfo *info,
				    backend_head_done_cb done, void *arg)
{
	int s = AH_RUNNING;

	h->be = be;
	h->key = key;
	h->info = info;
	h->fdone = done;
	h->farg = arg;
	if (atomic_compare_exchange_strong_explicit(&h->state, &s, AH_FOLLOW, memory_order_acq_rel,
						    memory_order_acquire))
		return 0; /* ahead_done sends it */
	/* it ended: its post is all ahead_done still does with h */
	while (sem_wait(&h->done) < 0 && errno == EINTR)
		;
	follow_start(h);
	return 0;
}

void backend__ais_head_drop_nowait(struct backend *be, struct backend_head_ahead *h)
{
	int s = AH_RUNNING;

	(void)be;
	if (!atomic_compare_exchange_strong_explicit(&h->state, &s, AH_DROP, memory_order_acq_rel,
						     memory_order_acquire))
		ahead_free(h); /* it ended (else ahead_done frees it) */
}

/* backend__ais_head_follow_many's HEADs to kept redirects: the i-th of
 * keys[at[i]], sent to h[at[i]]'s target. */
struct follow_many {
	struct backend *be;
	struct backend_head_ahead *const *h;
	const char *const *keys;
	struct backend_objinfo *info;
	int *err;
	size_t *at;
};

static int follow_make(void *arg, size_t i, unsigned slot, struct backend_req *r)
{
	struct follow_many *x = arg;

	(void)slot;
	r->method = "HEAD";
	r->small = 1;
	r->url = x->h[x->at[i]]->req.location; /* as backend__ais_head_follow sends it */
	return 0;
}

static int follow_answer(void *arg, size_t i, unsigned slot, struct backend_req *r, int err)
{
	struct follow_many *x = arg;
	size_t k = x->at[i];

	(void)slot;
	x->err[k] = err;
	if (err == 0)
		backend_io_head_info(&x->info[k], x->keys[k], r);
	else
		backend__req_failed(x->be, "HEAD", x->keys[k], r, err);
	r->url = NULL; /* the redirect's: freed with its h */
	return 0;
}

int backend__ais_head_follow_many(struct backend *be, struct backend_head_ahead *const *h,
				  const char *const *keys, size_t n, struct backend_objinfo *info,
				  int *err)
{
	struct backend_objstore *os = be->impl;
	struct follow_many x = {be, h, keys, info, err, malloc((n ? n : 1) * sizeof(size_t))};
	const char **wkeys = malloc((n ? n : 1) * sizeof(*wkeys));
	struct backend_objinfo *winfo = calloc(n ? n : 1, sizeof(*winfo));
	int *werr = calloc(n ? n : 1, sizeof(*werr));
	size_t m = 0, nw = 0, *wat = malloc((n ? n : 1) * sizeof(size_t));
	int ret = 0;

	if (!x.at || !wkeys || !winfo || !werr || !wat) {
		for (size_t i = 0; i < n; i++)
			err[i] = err[i] < 0 ? err[i] : -ENOMEM;
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct backend_head_ahead *a = h[i];

		if (err[i] < 0)
			continue; /* a bad key: asked for nothing */
		if (a && ahead_wait(os, a)) {
			x.at[m++] = i;
		} else {
			wat[nw] = i;
			wkeys[nw++] = keys[i];
		}
		err[i] = -EIO; /* until its answer (a batch stopped early answers none) */
	}
	if (m > 0) {
		unsigned w = os->head_window && os->head_window < m ? os->head_window : (unsigned)m;

		ret = backend_io_run_many(os->io, m, w, follow_make, follow_answer, &x);
	}
	if (nw > 0 && ret == 0) { /* the whole HEADs, together */
		for (size_t k = 0; k < nw; k++)
			winfo[k].key = wkeys[k];
		ret = be->ops->stat_many(be, wkeys, nw, winfo, werr);
		for (size_t k = 0; ret == 0 && k < nw; k++) {
			info[wat[k]] = winfo[k];
			err[wat[k]] = werr[k];
		}
	}
out:
	for (size_t i = 0; i < n; i++)
		if (h[i])
			ahead_free(h[i]);
	free(x.at);
	free(wkeys);
	free(winfo);
	free(werr);
	free(wat);
	return ret;
}
