/*
 * backend_io_wait.c — the engine's blocking helpers (contract:
 * backend_io_i.h): backend_io_get, _read, _stream, _run and _head submit one
 * request and wait for its on_done on a condition variable;
 * backend_io_run_many keeps up to a window of requests in flight and hands
 * their answers to its caller's thread as they come (parallel HEADs); and
 * backend_io_stream_async, which waits for nothing (its done callback runs
 * on the I/O thread).
 *
 * They run on any thread but the I/O thread (which they wait for); the wait
 * is the request's: its wait for a connection slot, then its attempts
 * until one succeeds or the retry budget is spent (each attempt bounded by
 * the stall timeout; -EIO at once while the store is down). Bodies go to a
 * buffer of at most the caller's size (get grows its own up to max: -EFBIG past it) or,
 * for stream, straight from curl's buffer to the caller's sink.
 *
 * Non-goals: a timeout of their own (the engine's budget is the bound).
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

struct waiter {
	struct disk_mutex m; /* DISK_LOCK_BE_WAIT */
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
	disk_mutex_init(&w->m, DISK_LOCK_BE_WAIT);
	pthread_cond_init(&w->c, NULL);
}

static void waiter_done(void *arg, struct backend_req *r, int err)
{
	struct waiter *w = arg;

	(void)r;
	disk_mutex_lock(&w->m);
	w->err = err;
	w->done = 1;
	pthread_cond_signal(&w->c);
	disk_mutex_unlock(&w->m);
}

/* Wait until w is done, then free its lock and condition: its error. */
static int waiter_wait(struct waiter *w)
{
	int err;

	disk_mutex_lock(&w->m);
	while (!w->done)
		disk_cond_wait(&w->c, &w->m);
	err = w->err;
	disk_mutex_unlock(&w->m);
	pthread_cond_destroy(&w->c);
	disk_mutex_destroy(&w->m);
	return err;
}

static int waiter_run(struct backend_io *io, struct backend_req *r, struct waiter *w)
{
	r->on_done = waiter_done;
	r->arg = w;
	backend_io_submit(io, r);
	return waiter_wait(w);
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

/* The body starts again (a cut answer no strong ETag pins): what it had is
 * dropped, the buffer kept. */
static int waiter_restart(void *arg)
{
	((struct waiter *)arg)->len = 0;
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
	r->on_restart = waiter_restart;
	r->on_poll = NULL;
	r->on_mem = NULL;
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
	r->on_restart = waiter_restart;
	r->on_poll = NULL;
	r->on_mem = NULL;
	err = waiter_run(io, r, &w);
	if (err < 0)
		return err;
	return (ssize_t)w.len;
}

static int astream_poll(void *arg)
{
	struct backend_io_astream *a = arg;

	return a->cb(a->arg, a->pos, NULL, 0);
}

static int astream_data(void *arg, const void *buf, size_t len)
{
	struct backend_io_astream *a = arg;
	int err = a->cb(a->arg, a->pos, buf, len);

	if (err < 0 || err == BACKEND_SINK_FULL)
		return err;
	a->pos += len;
	a->bytes += len;
	return 0;
}

static void *astream_mem(void *arg, size_t *len)
{
	struct backend_io_astream *a = arg;

	return a->mem(a->arg, a->pos, len);
}

static void astream_done(void *arg, struct backend_req *r, int err)
{
	struct backend_io_astream *a = arg;
	backend_io_stream_done_cb done = a->done;
	void *darg = a->darg;
	uint64_t bytes = a->bytes;

	done(darg, r, err, bytes); /* r and a may be gone after this */
}

void backend_io_stream_async(struct backend_io *io, struct backend_req *r,
			     struct backend_io_astream *a, backend_sink_cb cb,
			     backend_sink_mem_cb mem, void *arg, backend_io_stream_done_cb done,
			     void *darg)
{
	if (r->range_len == 0 || r->range_len > SSIZE_MAX) {
		done(darg, r, r->range_len ? -EINVAL : 0, 0);
		return;
	}
	a->bytes = 0;
	a->cb = cb;
	a->mem = mem;
	a->arg = arg;
	a->pos = r->range_off;
	a->done = done;
	a->darg = darg;
	r->on_data = astream_data;
	r->on_restart = NULL; /* its bytes were passed on */
	r->on_poll = astream_poll;
	r->on_mem = mem ? astream_mem : NULL;
	r->on_done = astream_done;
	r->arg = a;
	backend_io_submit(io, r);
}

void *backend__async_new(size_t size, size_t extra, struct backend *be, const char *key,
			 const char *etag, uint64_t osize, backend_done_cb done, void *darg)
{
	size_t kl = strlen(key) + 1, el = etag ? strlen(etag) + 1 : 0;
	struct backend_async *a = malloc(size + kl + el + extra);
	char *text = (char *)a + size;

	if (!a)
		return NULL;
	memset(a, 0, size);
	a->be = be;
	a->done = done;
	a->darg = darg;
	a->key = memcpy(text, key, kl);
	a->etag = etag ? memcpy(text + kl, etag, el) : NULL;
	a->size = osize;
	a->extra = text + kl + el;
	a->failed = backend__req_failed;
	return a;
}

/* I/O thread: record a failure in this thread's record, then done. */
static void async_done(void *arg, struct backend_req *r, int err, uint64_t bytes)
{
	struct backend_async *a = arg;

	if (err == -EINVAL && r->status == 416 && a->eof416)
		err = 0;
	if (err < 0)
		a->failed(a->be, "GET", a->key, r, err);
	else
		backend__failure_clear(a->be);
	a->done(a->darg, err, bytes);
	if (a->release)
		a->release(a);
	else
		free(a);
}

void backend__async_start(struct backend_io *io, struct backend_async *a, struct backend_req *r,
			  uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			  backend_sink_mem_cb mem, void *arg)
{
	r->method = "GET";
	r->range_off = off;
	r->range_len = len;
	r->if_match = a->etag;
	r->if_size = a->size;
	r->small = (flags & BACKEND_READ_SMALL) != 0;
	r->pausable = (flags & BACKEND_READ_PAUSABLE) != 0;
	r->object = 1;
	backend_io_stream_async(io, r, &a->st, cb, mem, arg, async_done, a);
}

ssize_t backend__io_get(struct backend_io *io, struct backend_req *r, const char *etag,
			uint64_t size, uint64_t off, size_t len, void *buf, backend_sink_cb cb,
			void *arg)
{
	r->method = "GET";
	r->range_off = off;
	r->range_len = len;
	r->if_match = etag;
	r->if_size = size;
	r->object = 1;
	/* a thread waits for it (backend_pread_version, backend_read_version_cb:
	 * a weak ETag's probe, a read past a full cache, a sidecar): it may run
	 * past 'connections' (up to 'max_connections'), not behind the fills
	 * that hold them */
	r->small = 1;
	return buf ? backend_io_read(io, r, buf) : backend_io_stream(io, r, cb, arg);
}

/* backend_io_stream: the asynchronous stream, waited for. */
struct stream_wait {
	struct waiter w;
	struct backend_io_astream a;
	uint64_t bytes; /* set on the loop thread before w is done */
};

static void stream_waited(void *arg, struct backend_req *r, int err, uint64_t bytes)
{
	struct stream_wait *s = arg;

	s->bytes = bytes;
	waiter_done(&s->w, r, err);
}

ssize_t backend_io_stream(struct backend_io *io, struct backend_req *r, backend_sink_cb cb,
			  void *arg)
{
	struct stream_wait s;
	int err;

	if (r->range_len == 0 || r->range_len > SSIZE_MAX)
		return r->range_len ? -EINVAL : 0;
	waiter_init(&s.w);
	s.bytes = 0;
	backend_io_stream_async(io, r, &s.a, cb, NULL, arg, stream_waited, &s);
	err = waiter_wait(&s.w);
	if (err < 0)
		return err;
	return (ssize_t)s.bytes;
}

int backend_io_head(struct backend_io *io, struct backend_req *r)
{
	struct waiter w;

	waiter_init(&w);
	r->method = "HEAD";
	r->on_data = NULL;
	r->on_restart = NULL;
	r->on_poll = NULL;
	r->on_mem = NULL;
	r->range_len = 0;
	return waiter_run(io, r, &w);
}

void backend_io_head_info(struct backend_objinfo *info, const char *key,
			  const struct backend_req *r)
{
	memset(info, 0, sizeof(*info));
	info->key = key;
	info->size = r->size;
	info->mtime = r->mtime;
	info->mode = 0644;
	snprintf(info->etag, sizeof(info->etag), "%s", r->etag);
}

/* backend_io_run_many's requests in flight: one job a slot. */
struct many_job {
	struct backend_req req;
	struct many *m;
	unsigned slot;
	size_t idx;
	int err;
	struct many_job *next; /* the free list, or the done list */
};

struct many {
	struct disk_mutex lock; /* DISK_LOCK_BE_WAIT */
	pthread_cond_t cond;
	struct many_job *done; /* protected by lock */
};

static void many_done(void *arg, struct backend_req *r, int err)
{
	struct many_job *j = arg;
	struct many *m = j->m;

	(void)r;
	disk_mutex_lock(&m->lock);
	j->err = err;
	j->next = m->done;
	m->done = j;
	pthread_cond_signal(&m->cond);
	disk_mutex_unlock(&m->lock);
}

int backend_io_run_many(struct backend_io *io, size_t n, unsigned window,
			int (*make)(void *arg, size_t i, unsigned slot, struct backend_req *r),
			int (*done)(void *arg, size_t i, unsigned slot, struct backend_req *r,
				    int err),
			void *arg)
{
	struct many m;
	struct many_job *jobs, *free_jobs = NULL;
	size_t next = 0, inflight = 0;
	int ret = 0;

	if (n == 0)
		return 0;
	if (window == 0)
		window = 1;
	if (window > n)
		window = (unsigned)n;
	jobs = calloc(window, sizeof(*jobs));
	if (!jobs)
		return -ENOMEM;
	for (unsigned s = window; s-- > 0;) {
		jobs[s].slot = s;
		jobs[s].next = free_jobs;
		free_jobs = &jobs[s];
	}
	disk_mutex_init(&m.lock, DISK_LOCK_BE_WAIT);
	pthread_cond_init(&m.cond, NULL);
	m.done = NULL;
	for (;;) {
		struct many_job *j;

		while (!ret && next < n && free_jobs) {
			j = free_jobs;
			memset(&j->req, 0, sizeof(j->req));
			ret = make(arg, next, j->slot, &j->req);
			if (ret)
				break;
			free_jobs = j->next;
			j->req.on_done = many_done;
			j->req.arg = j;
			j->m = &m;
			j->idx = next++;
			inflight++;
			backend_io_submit(io, &j->req);
		}
		if (inflight == 0)
			break;
		disk_mutex_lock(&m.lock);
		while (!m.done)
			disk_cond_wait(&m.cond, &m.lock);
		j = m.done;
		m.done = j->next;
		disk_mutex_unlock(&m.lock);
		inflight--;
		{
			int err = done(arg, j->idx, j->slot, &j->req, j->err);

			if (!ret)
				ret = err;
		}
		j->next = free_jobs;
		free_jobs = j;
	}
	pthread_cond_destroy(&m.cond);
	disk_mutex_destroy(&m.lock);
	free(jobs);
	return ret;
}
