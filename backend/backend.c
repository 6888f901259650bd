/*
 * backend.c — SOURCE dispatch to the store that serves it, what every store
 * shares (key checks, the last error), and the public entry points.
 *
 * The SOURCE grammar is docs/design.md section 1: a scheme of remote_stores
 * below, a file:// URL (backend_url.c) or a local path. Any other
 * "scheme://" is -EPROTONOSUPPORT, so that the error is precise rather
 * than "no such directory". The test store fault:// is in remote_stores
 * only in test builds (-Dtest_backends=true, the default; what is shipped
 * is built without it, and refuses it saying so).
 *
 * Errors: a store records why something failed with backend__set_error
 * (a request: backend__req_failed, which adds its status and the code and
 * message of its error body); before backend_open hands be out, that goes
 * to a per-thread slot read with backend_last_error(NULL), afterwards to
 * the calling thread's record of be (struct failure): one per thread, so
 * requests of other threads at the same time never mix into it.
 * backend_log_failure logs a record once per object and cause.
 *
 * backend_version_same is the one rule that tells two versions of an
 * object apart (backend.h says it); every layer above asks it.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend_i.h"
#include "disk.h"
#include "backend_io_i.h"
#include "shardfs_config.h"

static const struct {
	const char *scheme;
	int (*open)(struct backend *be, const char *source, const struct backend_config *cfg);
} remote_stores[] = {
    {"http://", backend__http_open},   {"https://", backend__http_open},
    {"s3://", backend__s3_open},       {"gs://", backend__gs_open},
    {"ais://", backend__ais_open},
#if SHARDFS_TEST_BACKENDS
    {"fault://", backend__fault_open},
#endif
};

static __thread char open_error[512]; /* why this thread's last backend_open failed */
static __thread char error_copy[512]; /* what backend_last_error returns */

/* The calling thread's last failed request (backend__req_failed) or other
 * failure (backend__set_error) on the backend whose id is be_id. Each
 * thread makes one request at a time (the API blocks), so this is the
 * record of that request: requests of other threads never overwrite it. */
struct failure {
	unsigned long be_id; /* 0: none */
	int err;	     /* the errno returned (0: not known) */
	long status;	     /* the HTTP status, 0: none */
	int fast;	     /* failed at once: the store is down */
	char code[64];	     /* the error body's code, or "" */
	char text[512];	     /* the one line (backend_last_error) */
};
static __thread struct failure last_fail;
static atomic_ulong next_id = 1;

/* A new request of this thread on be: the last one's record goes. */
void backend__failure_clear(const struct backend *be)
{
	if (last_fail.be_id == be->id)
		last_fail.be_id = 0;
}

void backend__set_error(struct backend *be, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (be) {
		last_fail.be_id = be->id;
		last_fail.err = 0;
		last_fail.status = 0;
		last_fail.fast = 0;
		last_fail.code[0] = '\0';
		vsnprintf(last_fail.text, sizeof(last_fail.text), fmt, ap);
	} else {
		vsnprintf(open_error, sizeof(open_error), fmt, ap);
	}
	va_end(ap);
}

/* Drop every occurrence of secret (the URL's query: a token, perhaps) from
 * s, in place. */
static void scrub(char *s, const char *secret)
{
	size_t n = strlen(secret);
	char *p;

	if (n < 4)
		return;
	while ((p = strstr(s, secret)))
		memmove(p, p + n, strlen(p + n) + 1);
}

void backend__req_failed(struct backend *be, const char *method, const char *key,
			 const struct backend_req *r, int err)
{
	char shown[512], code[64], msg[360];
	const char *q = r->url ? strchr(r->url, '?') : NULL;

	(void)key; /* the URL names it */
	backend__url_display(r->url ? r->url : "", shown, sizeof(shown));
	backend__errbody_parse(r->errbody, r->errbody_len, code, sizeof(code), msg, sizeof(msg));
	if (q) {
		scrub(code, q + 1);
		scrub(msg, q + 1);
	}
	if (r->error[0] || r->status < 300)
		backend__set_error(be, "%s %s: %s", method, shown,
				   r->error[0] ? r->error : strerror(-err));
	else
		backend__set_error(be, "%s %s: HTTP %ld%s%s%s%s", method, shown, r->status,
				   code[0] ? " " : "", code, msg[0] ? ": " : "", msg);
	last_fail.err = err;
	last_fail.status = r->error[0] ? 0 : r->status;
	last_fail.fast = r->fast_failed;
	snprintf(last_fail.code, sizeof(last_fail.code), "%s", code);
}

const char *backend_last_error(const struct backend *be)
{
	if (!be)
		snprintf(error_copy, sizeof(error_copy), "%s", open_error);
	else
		snprintf(error_copy, sizeof(error_copy), "%s",
			 last_fail.be_id == be->id ? last_fail.text : "");
	return error_copy;
}

/* Logged failures: 64-bit hashes of (key, cause) in an open-addressing set
 * of LOGGED_CAP slots, emptied when half full (a store failing for that
 * many objects and causes logs each again, once per LOGGED_CAP / 2). */
#define LOGGED_CAP 4096u

/* 1 when h was in the set, else 0 (now it is). be->error_lock held. */
static int logged_before(struct backend *be, uint64_t h)
{
	size_t i;

	h |= 1; /* 0 marks a free slot */
	if (!be->logged) {
		be->logged = calloc(LOGGED_CAP, sizeof(*be->logged));
		if (!be->logged)
			return 0; /* log it: better twice than never */
	}
	for (i = (size_t)h & (LOGGED_CAP - 1); be->logged[i]; i = (i + 1) & (LOGGED_CAP - 1))
		if (be->logged[i] == h)
			return 1;
	if (be->nlogged + 1 > LOGGED_CAP / 2) {
		memset(be->logged, 0, LOGGED_CAP * sizeof(*be->logged));
		be->nlogged = 0;
		i = (size_t)h & (LOGGED_CAP - 1);
	}
	be->logged[i] = h;
	be->nlogged++;
	return 0;
}

void backend_log_failure(struct backend *be, const char *key, int err, const char *what)
{
	const struct failure *f = be && last_fail.be_id == be->id ? &last_fail : NULL;
	char cause[128];
	uint64_t h;
	int seen;

	if (!be || err >= 0 || err == -ECANCELED || (f && f->fast))
		return; /* a shutdown; an outage, which the breaker logs once */
	snprintf(cause, sizeof(cause), "%d %ld %.63s", err, f ? f->status : 0L, f ? f->code : "");
	h = disk_fnv64(key, strlen(key)) ^ (disk_fnv64(cause, strlen(cause)) * 31);
	disk_mutex_lock(&be->error_lock);
	seen = logged_before(be, h);
	disk_mutex_unlock(&be->error_lock);
	if (seen)
		return;
	backend__log(&be->log, BACKEND_LOG_ERROR,
		     "%s: %s failed: %s (logged once per object and cause)", key, what,
		     f && f->text[0] ? f->text : strerror(-err));
}

void backend__log(const struct backend_logger *lg, enum backend_log_level level, const char *fmt,
		  ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (lg && lg->fn)
		lg->fn(lg->arg, level, msg);
	else
		fprintf(stderr, "shardfs: %s\n", msg);
}

void backend_log(struct backend *be, enum backend_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	backend__log(be ? &be->log : NULL, level, "%s", msg);
}

static struct backend *backend_new(const struct backend_config *cfg)
{
	struct backend *be = calloc(1, sizeof(*be));

	if (be) {
		disk_mutex_init(&be->error_lock, DISK_LOCK_BE_ERROR);
		be->id = atomic_fetch_add(&next_id, 1);
		be->log.fn = cfg->log;
		be->log.arg = cfg->log_arg;
	}
	return be;
}

static void backend_free(struct backend *be)
{
	disk_mutex_destroy(&be->error_lock);
	free(be->logged);
	free(be->desc);
	free(be);
}

int backend_open(struct backend **out, const char *source, const struct backend_config *cfg)
{
	static const struct backend_config defaults;
	struct backend *be;
	const char *path = source;
	char *decoded = NULL;
	int err;

	*out = NULL;
	open_error[0] = '\0';
	if (!source || !*source)
		return -EINVAL;
	if (!cfg)
		cfg = &defaults;
	/* Whatever the source, secrets in the environment leave it (and core
	 * dumps) now; the object stores still find them (backend_creds_secret.c). */
	if (backend__creds_scrub_env() < 0)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(remote_stores) / sizeof(remote_stores[0]); i++) {
		if (strncmp(source, remote_stores[i].scheme, strlen(remote_stores[i].scheme)) ==
		    0) {
			be = backend_new(cfg);
			if (!be)
				return -ENOMEM;
			err = remote_stores[i].open(be, source, cfg);
			if (err < 0) {
				backend_free(be);
				return err;
			}
			*out = be;
			return 0;
		}
	}
	if (strncasecmp(source, "file://", 7) == 0) {
		const char *why;

		err = backend__file_url_path(source, &decoded, &why);
		if (err < 0) {
			backend__set_error(NULL, "%s", why);
			return err;
		}
		path = decoded;
	} else if (strncmp(source, "fault://", 8) == 0) {
		/* the test store is not in this build (-Dtest_backends=false) */
		backend__set_error(NULL, "fault:// is a test store, built only for tests "
					 "(meson -Dtest_backends=true); this build has none");
		return -EPROTONOSUPPORT;
	} else if (strstr(source, "://")) {
		return -EPROTONOSUPPORT;
	}

	be = backend_new(cfg);
	if (!be) {
		free(decoded);
		return -ENOMEM;
	}
	err = backend__local_open(be, path);
	free(decoded);
	if (err < 0) {
		backend_free(be);
		return err;
	}
	*out = be;
	return 0;
}

void backend_close(struct backend *be)
{
	if (!be)
		return;
	be->ops->close(be);
	backend_free(be);
}

const char *backend_describe(const struct backend *be)
{
	return be->desc;
}

/* An ETag fits a tag as it is; the longest ":<size>:<mtime>" is 42 bytes. */
_Static_assert(sizeof(((struct backend_objinfo *)0)->etag) == BACKEND_VERSION_TAG,
	       "an ETag is its own tag");

void backend_version_tag(const char *etag, uint64_t size, int64_t mtime,
			 char tag[BACKEND_VERSION_TAG])
{
	if (etag[0])
		snprintf(tag, BACKEND_VERSION_TAG, "%s", etag);
	else
		snprintf(tag, BACKEND_VERSION_TAG, ":%llu:%lld", (unsigned long long)size,
			 (long long)mtime);
}

int backend_version_same(const char *etag_a, uint64_t size_a, int64_t mtime_a, const char *etag_b,
			 uint64_t size_b, int64_t mtime_b)
{
	char a[BACKEND_VERSION_TAG], b[BACKEND_VERSION_TAG];

	if (size_a != size_b)
		return 0;
	backend_version_tag(etag_a, size_a, mtime_a, a);
	backend_version_tag(etag_b, size_b, mtime_b, b);
	return strcmp(a, b) == 0;
}

int backend_is_local(const struct backend *be)
{
	return be->local;
}

const char *backend_credentials_source(const struct backend *be)
{
	return be && be->ops->credentials ? be->ops->credentials(be) : NULL;
}

const char *backend_local_path(const struct backend *be)
{
	return be->local ? be->desc : NULL;
}

int backend_list(struct backend *be, backend_list_cb cb, void *arg)
{
	backend__failure_clear(be);
	return be->ops->list(be, cb, arg);
}

int backend_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	int err = backend__key_check(key);

	backend__failure_clear(be);
	if (err < 0)
		return err;
	return be->ops->stat(be, key, info);
}

int backend_stat_many(struct backend *be, const char *const *keys, size_t n,
		      struct backend_objinfo *info, int *err)
{
	backend__failure_clear(be);
	for (size_t i = 0; i < n; i++) {
		memset(&info[i], 0, sizeof(info[i]));
		info[i].key = keys[i];
		err[i] = backend__key_check(keys[i]);
	}
	if (be->ops->stat_many)
		return be->ops->stat_many(be, keys, n, info, err);
	for (size_t i = 0; i < n; i++)
		if (err[i] == 0)
			err[i] = be->ops->stat(be, keys[i], &info[i]);
	return 0;
}

struct backend_head_ahead *backend_head_ahead(struct backend *be, const char *key)
{
	if (!be->ops->head_ahead || backend__key_check(key) < 0)
		return NULL;
	return be->ops->head_ahead(be, key);
}

int backend_head_follow(struct backend *be, struct backend_head_ahead *h, const char *key,
			struct backend_objinfo *info)
{
	if (!h)
		return backend_stat(be, key, info);
	backend__failure_clear(be);
	return be->ops->head_follow(be, h, key, info);
}

void backend_head_drop(struct backend *be, struct backend_head_ahead *h)
{
	if (h)
		be->ops->head_drop(be, h);
}

int backend_head_follow_submit(struct backend *be, struct backend_head_ahead *h, const char *key,
			       struct backend_objinfo *info, backend_head_done_cb done, void *arg)
{
	if (!h || !be->ops->head_follow_submit)
		return -EOPNOTSUPP;
	memset(info, 0, sizeof(*info));
	info->key = key;
	return be->ops->head_follow_submit(be, h, key, info, done, arg);
}

void backend_head_drop_nowait(struct backend *be, struct backend_head_ahead *h)
{
	if (!h)
		return;
	if (be->ops->head_drop_nowait)
		be->ops->head_drop_nowait(be, h);
	else
		be->ops->head_drop(be, h);
}

int backend_head_follow_many(struct backend *be, struct backend_head_ahead *const *h,
			     const char *const *keys, size_t n, struct backend_objinfo *info,
			     int *err)
{
	int any = 0;

	for (size_t i = 0; i < n; i++)
		any |= h[i] != NULL;
	if (!any || !be->ops->head_follow_many) {
		for (size_t i = 0; i < n; i++) /* (a store that sends none ahead has none) */
			backend_head_drop(be, h[i]);
		return backend_stat_many(be, keys, n, info, err);
	}
	backend__failure_clear(be);
	for (size_t i = 0; i < n; i++) {
		memset(&info[i], 0, sizeof(info[i]));
		info[i].key = keys[i];
		err[i] = backend__key_check(keys[i]);
	}
	return be->ops->head_follow_many(be, h, keys, n, info, err);
}

ssize_t backend_pread_version(struct backend *be, const char *key, const char *etag, uint64_t size,
			      void *buf, size_t len, uint64_t off)
{
	int err = backend__key_check(key);

	backend__failure_clear(be);
	if (err < 0)
		return err;
	return be->ops->pread(be, key, etag, size, buf, len, off);
}

#define READ_CB_BUF_MAX ((size_t)1 << 20)

ssize_t backend__read_cb_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			       uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	size_t cap = len < READ_CB_BUF_MAX ? len : READ_CB_BUF_MAX, done = 0;
	char *buf;
	ssize_t ret = 0;

	if (len == 0)
		return 0;
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	while (done < len) {
		size_t want = len - done < cap ? len - done : cap;
		ssize_t n = be->ops->pread(be, key, etag, size, buf, want, off + done);
		int err;

		if (n < 0) {
			ret = n;
			goto out;
		}
		if (n == 0)
			break; /* the end of the object */
		err = cb(arg, off + done, buf, (size_t)n);
		if (err < 0) {
			ret = err;
			goto out;
		}
		done += (size_t)n;
	}
	ret = (ssize_t)done;
out:
	free(buf);
	return ret;
}

/* The items of a batch, checked alike for the blocking and the submitted form: each key a valid
 * one, each span non-empty and within an off_t. 0 or the first item's error. */
static int batch_items_check(const struct backend_batch_item *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int e = backend__key_check(items[i].key);

		if (e < 0)
			return e;
		if (items[i].len == 0 || items[i].len > INT64_MAX || items[i].off > INT64_MAX)
			return -EINVAL;
	}
	return 0;
}

int backend_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
		       backend_batch_sink_cb cb, void *arg, int *err)
{
	int e;

	if (!be->ops->batch_read)
		return -EOPNOTSUPP;
	e = batch_items_check(items, n);
	if (e < 0)
		return e;
	return n ? be->ops->batch_read(be, items, n, cb, arg, err) : 0;
}

int backend_batch_read_submit(struct backend *be, const struct backend_batch_item *items, size_t n,
			      backend_batch_sink_cb cb, void *arg, int *err,
			      backend_batch_done_cb done, void *darg)
{
	int e;

	if (!be->ops->batch_submit || n == 0)
		return -EOPNOTSUPP;
	e = batch_items_check(items, n);
	if (e < 0)
		return e;
	return be->ops->batch_submit(be, items, n, cb, arg, err, done, darg);
}

ssize_t backend_read_version_cb(struct backend *be, const char *key, const char *etag,
				uint64_t size, uint64_t off, size_t len, backend_sink_cb cb,
				void *arg)
{
	int err = backend__key_check(key);

	backend__failure_clear(be);
	if (err < 0)
		return err;
	if (len > SSIZE_MAX)
		return -EINVAL;
	if (be->ops->read_cb)
		return be->ops->read_cb(be, key, etag, size, off, len, cb, arg);
	return backend__read_cb_pread(be, key, etag, size, off, len, cb, arg);
}

int backend_reads_async(const struct backend *be)
{
	return be->ops->read_async != NULL;
}

void backend_read_version_async(struct backend *be, const char *key, const char *etag,
				uint64_t size, uint64_t off, size_t len, unsigned flags,
				backend_sink_cb cb, void *arg, backend_done_cb done, void *darg)
{
	backend_read_version_async_mem(be, key, etag, size, off, len, flags, cb, NULL, arg, done,
				       darg);
}

void backend_read_version_async_mem(struct backend *be, const char *key, const char *etag,
				    uint64_t size, uint64_t off, size_t len, unsigned flags,
				    backend_sink_cb cb, backend_sink_mem_cb mem, void *arg,
				    backend_done_cb done, void *darg)
{
	int err = backend__key_check(key);
	ssize_t n;

	if (err == 0 && len > SSIZE_MAX)
		err = -EINVAL;
	if (err < 0 || len == 0) {
		done(darg, err, 0);
		return;
	}
	if (be->ops->read_async) {
		be->ops->read_async(be, key, etag, size, off, len, flags, cb, mem, arg, done, darg);
		return;
	}
	/* a local store: the read runs here */
	backend__failure_clear(be);
	n = be->ops->read_cb ? be->ops->read_cb(be, key, etag, size, off, len, cb, arg)
			     : backend__read_cb_pread(be, key, etag, size, off, len, cb, arg);
	done(darg, n < 0 ? (int)n : 0, n < 0 ? 0 : (uint64_t)n);
}

void backend_cancel(struct backend *be)
{
	if (be)
		backend_io_cancel(be->io);
}

void backend_sink_ready(struct backend *be)
{
	if (be && be->io)
		backend_io_sink_ready(be->io);
}

void backend_get_stats(struct backend *be, struct backend_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (be && be->io)
		backend_io_stats(be->io, st);
	if (be)
		st->list_requests = atomic_load(&be->list_requests);
}

int backend_open_fd(struct backend *be, const char *key)
{
	int err = backend__key_check(key);

	if (err < 0)
		return err;
	if (!be->ops->open_fd)
		return -ENOTSUP;
	return be->ops->open_fd(be, key);
}

int backend__key_check(const char *key)
{
	const char *p = key;

	if (!key || !*key || key[0] == '/')
		return -EINVAL;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return -EINVAL;
		p += n;
		if (*p == '/')
			p++;
	}
	return 0;
}
