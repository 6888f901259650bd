/*
 * backend.c — SOURCE parsing and dispatch to the store that serves it.
 *
 * The SOURCE grammar is DESIGN.md section 1. Only local directories are
 * served today; remote schemes are recognised so that the error is precise
 * ("not supported yet") rather than "no such directory".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend_i.h"
#include "backend_io_i.h"

static const struct {
	const char *scheme;
	int (*open)(struct backend *be, const char *source, const struct backend_config *cfg);
} remote_stores[] = {
	{"http://", backend__http_open}, {"https://", backend__http_open},
	{"s3://", backend__s3_open},     {"gs://", backend__gs_open},
	{"ais://", backend__ais_open},   {"fault://", backend__fault_open},
};

int backend_open(struct backend **out, const char *source, const struct backend_config *cfg)
{
	static const struct backend_config defaults;
	struct backend *be;
	const char *path = source;
	char *decoded = NULL;
	int err;

	*out = NULL;
	if (!source || !*source)
		return -EINVAL;
	if (!cfg)
		cfg = &defaults;
	/* Whatever the source, secrets in the environment leave it (and core
	 * dumps) now; the object stores still find them (backend_creds.c). */
	if (backend__creds_scrub_env() < 0)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(remote_stores) / sizeof(remote_stores[0]); i++) {
		if (strncmp(source, remote_stores[i].scheme, strlen(remote_stores[i].scheme)) == 0) {
			be = calloc(1, sizeof(*be));
			if (!be)
				return -ENOMEM;
			err = remote_stores[i].open(be, source, cfg);
			if (err < 0) {
				free(be->desc);
				free(be);
				return err;
			}
			*out = be;
			return 0;
		}
	}
	if (strncasecmp(source, "file://", 7) == 0) {
		err = backend__file_url_path(source, &decoded);
		if (err < 0)
			return err;
		path = decoded;
	} else if (strstr(source, "://")) {
		return -EPROTONOSUPPORT;
	}

	be = calloc(1, sizeof(*be));
	if (!be) {
		free(decoded);
		return -ENOMEM;
	}
	err = backend__local_open(be, path);
	free(decoded);
	if (err < 0) {
		free(be);
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
	free(be->desc);
	free(be);
}

const char *backend_describe(const struct backend *be)
{
	return be->desc;
}

int backend_is_local(const struct backend *be)
{
	return be->local;
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

ssize_t backend_pread(struct backend *be, const char *key, void *buf, size_t len, uint64_t off)
{
	return backend_pread_version(be, key, NULL, buf, len, off);
}

ssize_t backend_pread_version(struct backend *be, const char *key, const char *etag, void *buf,
			      size_t len, uint64_t off)
{
	int err = backend__key_check(key);

	if (err < 0)
		return err;
	return be->ops->pread(be, key, etag, buf, len, off);
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
