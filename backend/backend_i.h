/*
 * backend_i.h — private to backend/: the operations table every store
 * implements, and the constructor of each store.
 */
#ifndef BACKEND_I_H
#define BACKEND_I_H

#include "backend.h"

struct backend_ops {
	void (*close)(struct backend *be);
	int (*list)(struct backend *be, backend_list_cb cb, void *arg);
	int (*stat)(struct backend *be, const char *key, struct backend_objinfo *info);
	ssize_t (*pread)(struct backend *be, const char *key, void *buf, size_t len, uint64_t off);
	int (*open_fd)(struct backend *be, const char *key);
};

struct backend {
	const struct backend_ops *ops;
	char *desc;  /* for logs; never holds credentials */
	int local;   /* 1: objects are local files */
	void *impl;  /* the store's own state */
};

/* Local directory store: root is an absolute or relative directory path. */
int backend__local_open(struct backend *be, const char *root);

/* Remote stores. Each parses its SOURCE, fills be (ops, desc without
 * credentials, impl) and returns 0, or a negative errno after writing a
 * one-line reason to stderr-free storage: the caller prints strerror. */
int backend__http_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__s3_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__gs_open(struct backend *be, const char *source, const struct backend_config *cfg);
int backend__ais_open(struct backend *be, const char *source, const struct backend_config *cfg);

/* Join root and key into buf; -ENAMETOOLONG when it does not fit, -EINVAL
 * for keys that could escape the root ('..' components, absolute). */
int backend__key_check(const char *key);

#endif
