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
 * Errors: a store records why something failed with backend__set_error;
 * before backend_open hands be out, that goes to a per-thread slot (read
 * with backend_last_error(NULL)), afterwards to be->error under
 * be->error_lock.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend_i.h"
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

void backend__set_error(struct backend *be, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (be) {
		pthread_mutex_lock(&be->error_lock);
		vsnprintf(be->error, sizeof(be->error), fmt, ap);
		pthread_mutex_unlock(&be->error_lock);
	} else {
		vsnprintf(open_error, sizeof(open_error), fmt, ap);
	}
	va_end(ap);
}

const char *backend_last_error(const struct backend *be)
{
	struct backend *m = (struct backend *)be; /* the lock, not the state, changes */

	if (!be) {
		snprintf(error_copy, sizeof(error_copy), "%s", open_error);
	} else {
		pthread_mutex_lock(&m->error_lock);
		snprintf(error_copy, sizeof(error_copy), "%s", be->error);
		pthread_mutex_unlock(&m->error_lock);
	}
	return error_copy;
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
		pthread_mutex_init(&be->error_lock, NULL);
		be->log.fn = cfg->log;
		be->log.arg = cfg->log_arg;
	}
	return be;
}

static void backend_free(struct backend *be)
{
	pthread_mutex_destroy(&be->error_lock);
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
	return be->ops->list(be, cb, arg);
}

int backend_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	int err = backend__key_check(key);

	if (err < 0)
		return err;
	return be->ops->stat(be, key, info);
}

int backend_stat_many(struct backend *be, const char *const *keys, size_t n,
		      struct backend_objinfo *info, int *err)
{
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

ssize_t backend_pread_version(struct backend *be, const char *key, const char *etag, void *buf,
			      size_t len, uint64_t off)
{
	int err = backend__key_check(key);

	if (err < 0)
		return err;
	return be->ops->pread(be, key, etag, buf, len, off);
}

#define READ_CB_BUF_MAX ((size_t)1 << 20)

ssize_t backend__read_cb_pread(struct backend *be, const char *key, const char *etag, uint64_t off,
			       size_t len, backend_sink_cb cb, void *arg)
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
		ssize_t n = be->ops->pread(be, key, etag, buf, want, off + done);
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

ssize_t backend_read_version_cb(struct backend *be, const char *key, const char *etag, uint64_t off,
				size_t len, backend_sink_cb cb, void *arg)
{
	int err = backend__key_check(key);

	if (err < 0)
		return err;
	if (len > SSIZE_MAX)
		return -EINVAL;
	if (be->ops->read_cb)
		return be->ops->read_cb(be, key, etag, off, len, cb, arg);
	return backend__read_cb_pread(be, key, etag, off, len, cb, arg);
}

void backend_cancel(struct backend *be)
{
	if (be)
		backend_io_cancel(be->io);
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
