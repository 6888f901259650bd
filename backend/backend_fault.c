/*
 * backend_fault.c — a test store: a local directory served as if it were
 * remote (no file descriptors, every read a copy), with faults on demand.
 *
 *   fault:///abs/dir?fail_every=N&delay_ms=M&fail_after_bytes=B
 *
 * fail_every=N   every Nth read (counted across threads) fails with -EIO
 * delay_ms=M     every read first sleeps M milliseconds (a slow network)
 * fail_after_bytes=B  reads fail with -EIO once B bytes were served (the
 *                store "goes away"); list and stat keep working
 * fail_list=1    listing fails with -EIO (the store is unreachable at mount)
 * cut_every=N    every Nth read (the same count) is cut: a streamed read
 *                (backend_read_version_cb) first hands over the first half
 *                of its range, then fails with -EIO; a pread just fails
 * names_only=1   listing gives names only (name_only), as a brace
 *                pattern's does; stat says the rest
 * piece=P        a streamed read hands its bytes to the sink in pieces of
 *                at most P bytes (a network delivers what has arrived)
 * hold_at=B      a streamed read hands over its bytes before object offset
 *                B, then waits while the file DIR.hold (beside the store's
 *                directory, out of its listing) exists: a test makes it
 *                before the read and removes it to let the read go on
 *                (polled every millisecond, at most 30 s: then the read
 *                fails with -EIO)
 * log=1          every read (pread, streamed read, batch item) appends
 *                "read KEY OFF LEN" and a newline to DIR.log (beside the
 *                store's directory) as it begins (reads of several threads
 *                at once may log in either order); a hold_at hold appends
 *                "hold KEY OFF" as its read starts to wait: a test learns
 *                from the store itself in which order the fills came and
 *                that a read is held
 * heads=1        every stat (a HEAD) appends its key and a newline to
 *                DIR.heads (beside the store's directory): a test counts
 *                them; then, its answer known, waits while DIR.hold exists
 *                (polled every millisecond, at most 30 s: then -EIO), so a
 *                test holds a HEAD in flight and may change the object
 *                meanwhile (the answer says the version before the change)
 * batch_hold=I   a batch answer (batch=1) hands over its first I items,
 *                then waits while the file DIR.bhold exists (polled every
 *                millisecond, at most 30 s: then its other items fail
 *                with -EIO), so a test sees what is done with items that
 *                arrived before the answer ended
 * batch=1        the store answers backend_batch_read as AIStore's GetBatch
 *                does (each item in order, whole, or failed with its bytes
 *                to be dropped); each item is one read for the faults
 *                above (fail_every fails it with no bytes, cut_every hands
 *                over its first half, then fails it); without it the store
 *                refuses the batch read (-EOPNOTSUPP) as S3 would
 * weak_etag=1    a stat answers the ETag as weak (W/"..."), as a store whose
 *                ETag stays the same through a rewrite of the same size
 *                does: the cache tier then probes its anchor unit
 *                (cachetier_weak.c); reads ignore the ETag, so a test that
 *                rewrites a file under a tier meets the weak ETag's case
 * async=1        reads asked with backend_read_version_async run on a
 *                thread of their own each, not in the caller (as a remote
 *                store's I/O thread runs them: backend_reads_async says 1,
 *                the cache tier's fills end on its fill writer); a piece
 *                the sink refuses (BACKEND_SINK_FULL) is offered again
 *                every millisecond, at most 30 s (then the read fails with
 *                -EIO); a read that holds (hold_at) first calls its sink
 *                with no bytes, as the I/O thread's poll of a transfer
 *                no bytes arrive for does; backend_close waits for every
 *                such thread
 *
 * The description (which also selects the cache subdirectory) leaves the
 * fault parameters out, so mounts with and without faults share a cache.
 *
 * For unit tests of the cache tier and the filesystem without servers
 * (a fault-injecting backend is an extra, never instead of real
 * servers). Not listed in --help, and built only with -Dtest_backends=true
 * (the default; the Debian package is built without it: backend.c then
 * refuses fault://).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_i.h"

struct fault {
	struct backend inner; /* the local store doing the work */
	unsigned long long fail_every, delay_ms, fail_after_bytes, fail_list, cut_every, names_only;
	unsigned long long piece, batch, hold_at, heads, batch_hold, log, async, weak_etag;
	char *hold_path;  /* hold_at: DIR.hold */
	char *bhold_path; /* batch_hold: DIR.bhold */
	char *log_path;	  /* log: DIR.log */
	char *heads_path; /* heads: DIR.heads */
	char *heads_hold; /* heads: DIR.hold */
	atomic_ullong reads, bytes;
	atomic_uint async_running; /* async=1: read threads not yet ended */
};

struct names_only {
	backend_list_cb cb;
	void *arg;
};

static int names_only_cb(void *arg, const struct backend_objinfo *info)
{
	struct names_only *no = arg;
	struct backend_objinfo name;

	if (info->dir)
		return no->cb(no->arg, info); /* an empty directory: no name to learn */
	memset(&name, 0, sizeof(name));
	name.key = info->key;
	name.name_only = 1;
	return no->cb(no->arg, &name);
}

static int fault_list(struct backend *be, backend_list_cb cb, void *arg)
{
	struct fault *f = be->impl;
	struct names_only no = {cb, arg};

	if (f->fail_list)
		return -EIO;
	if (f->names_only)
		return f->inner.ops->list(&f->inner, names_only_cb, &no);
	return f->inner.ops->list(&f->inner, cb, arg);
}

/* Append line (len bytes) to the file path: 0 or -EIO. */
static int log_line(const char *path, const char *line, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644), err = 0;

	if (fd < 0 || write(fd, line, len) != (ssize_t)len)
		err = -EIO;
	if (fd >= 0)
		close(fd);
	return err;
}

/* log=1: "WHAT KEY OFF[ LEN]" appended to DIR.log (len UINT64_MAX: none) */
static int fault_log(const struct fault *f, const char *what, const char *key, uint64_t off,
		     uint64_t len)
{
	char *line = NULL;
	int n, err;

	if (!f->log_path)
		return 0;
	n = len == UINT64_MAX ? asprintf(&line, "%s %s %llu\n", what, key, (unsigned long long)off)
			      : asprintf(&line, "%s %s %llu %llu\n", what, key,
					 (unsigned long long)off, (unsigned long long)len);
	if (n < 0)
		return -ENOMEM;
	err = log_line(f->log_path, line, (size_t)n);
	free(line);
	return err;
}

/* heads=1: a stat logged, its answer held while DIR.hold exists */
static int fault_head(struct fault *f, const char *key, int err)
{
	struct timespec ms = {0, 1000000L};
	size_t len = strlen(key);
	char *line = malloc(len + 1);

	if (!line)
		return -ENOMEM;
	memcpy(line, key, len);
	line[len] = '\n';
	if (log_line(f->heads_path, line, len + 1) < 0)
		err = -EIO;
	free(line);
	for (int i = 0; access(f->heads_hold, F_OK) == 0; i++) {
		if (i >= 30000)
			return -EIO; /* never released */
		nanosleep(&ms, NULL);
	}
	return err;
}

static int fault_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	struct fault *f = be->impl;
	int err = f->inner.ops->stat(&f->inner, key, info);
	size_t n = err == 0 ? strlen(info->etag) : 0;

	if (err == 0 && f->weak_etag && n + 5 <= sizeof(info->etag)) { /* W/"ETAG" */
		memmove(info->etag + 3, info->etag, n);
		memcpy(info->etag, "W/\"", 3);
		memcpy(info->etag + 3 + n, "\"", 2);
	}
	return f->heads ? fault_head(f, key, err) : err;
}

/* One read's faults, decided once per read (pread or streamed): 0, -EIO,
 * or 1 when the read is to be cut. log=1: the read logged first (its line
 * failing to be written fails the read). */
static int fault_read_begin(struct fault *f, const char *key, uint64_t off, uint64_t len)
{
	unsigned long long n;

	if (fault_log(f, "read", key, off, len) < 0)
		return -EIO;
	n = atomic_fetch_add(&f->reads, 1) + 1;

	if (f->delay_ms) {
		struct timespec ts = {(time_t)(f->delay_ms / 1000),
				      (long)(f->delay_ms % 1000) * 1000000L};

		nanosleep(&ts, NULL);
	}
	if (f->fail_every && n % f->fail_every == 0)
		return -EIO;
	if (f->fail_after_bytes && atomic_load(&f->bytes) >= f->fail_after_bytes)
		return -EIO;
	return f->cut_every && n % f->cut_every == 0;
}

static ssize_t fault_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			   void *buf, size_t len, uint64_t off)
{
	struct fault *f = be->impl;
	ssize_t r = fault_read_begin(f, key, off, len);

	if (r != 0)
		return -EIO;
	r = f->inner.ops->pread(&f->inner, key, etag, size, buf, len, off);
	if (r > 0)
		atomic_fetch_add(&f->bytes, (unsigned long long)r);
	return r;
}

/* piece=P: the sink gets the bytes in pieces of at most P bytes. */
struct piece_relay {
	backend_sink_cb cb;
	void *arg;
	size_t piece;
};

static int piece_cb(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct piece_relay *pr = arg;

	for (size_t at = 0; at < len;) {
		size_t n = len - at < pr->piece ? len - at : pr->piece;
		int err = pr->cb(pr->arg, off + at, (const char *)buf + at, n);

		if (err < 0)
			return err;
		at += n;
	}
	return 0;
}

/* hold_at=B: the bytes before B, then a wait while DIR.hold exists */
struct hold_relay {
	backend_sink_cb cb;
	void *arg;
	uint64_t at; /* UINT64_MAX once passed */
	const char *path;
	const struct fault *f; /* log=1: the hold logged */
	const char *key;
	int poll; /* async=1: the sink is polled (no bytes) before the wait */
};

static int hold_cb(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct hold_relay *h = arg;

	if (off < h->at && off + len > h->at) {
		size_t n = (size_t)(h->at - off);
		int err = h->cb(h->arg, off, buf, n);

		if (err < 0)
			return err;
		off += n;
		buf = (const char *)buf + n;
		len -= n;
	}
	if (len && off == h->at) {
		struct timespec ms = {0, 1000000L};

		/* as a remote store's I/O thread polls a transfer no bytes
		 * arrive for: the sink hands over units it has whole */
		if (h->poll && h->cb(h->arg, off, NULL, 0) < 0)
			return -EIO;
		if (access(h->path, F_OK) == 0 &&
		    fault_log(h->f, "hold", h->key, off, UINT64_MAX) < 0)
			return -EIO;
		for (int i = 0; access(h->path, F_OK) == 0; i++) {
			if (i >= 30000)
				return -EIO; /* never released */
			nanosleep(&ms, NULL);
		}
		h->at = UINT64_MAX;
	}
	return h->cb(h->arg, off, buf, len);
}

/* A streamed read is one read of the store, as a pread of the same range:
 * the faults count alike through either */
static ssize_t fault_read_cb(struct backend *be, const char *key, const char *etag, uint64_t size,
			     uint64_t off, size_t len, backend_sink_cb cb, void *arg)
{
	struct fault *f = be->impl;
	int cut = fault_read_begin(f, key, off, len);
	struct piece_relay pr = {cb, arg, (size_t)f->piece};
	struct hold_relay hr = {cb, arg, f->hold_at, f->hold_path, f, key, f->async != 0};
	ssize_t r;

	if (cut < 0)
		return cut;
	if (f->piece) {
		cb = piece_cb;
		arg = &pr;
	}
	if (f->hold_path) {
		hr.cb = cb;
		hr.arg = arg;
		cb = hold_cb;
		arg = &hr;
	}
	r = backend__read_cb_pread(&f->inner, key, etag, size, off, cut ? len / 2 : len, cb, arg);
	if (r > 0)
		atomic_fetch_add(&f->bytes, (unsigned long long)r);
	return cut && r >= 0 ? -EIO : r;
}

/* batch=1: an item's bytes to the batch sink (item i of the request); the
 * sink's errno is kept: the request ends with it */
struct batch_item {
	backend_batch_sink_cb cb;
	void *arg;
	size_t i;
	int sink_err;
};

static int batch_item_cb(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct batch_item *bi = arg;
	int err = bi->cb(bi->arg, bi->i, off, buf, len);

	if (err < 0)
		bi->sink_err = err;
	return err;
}

/* batch_hold=I: the answer waits while DIR.bhold exists (at most 30 s:
 * then -EIO) */
static int batch_held(struct fault *f)
{
	struct timespec ms = {0, 1000000L};

	for (int i = 0; access(f->bhold_path, F_OK) == 0; i++) {
		if (i >= 30000)
			return -EIO; /* never released */
		nanosleep(&ms, NULL);
	}
	return 0;
}

static int fault_batch_read(struct backend *be, const struct backend_batch_item *items, size_t n,
			    backend_batch_sink_cb cb, void *arg, int *err)
{
	struct fault *f = be->impl;
	struct batch_item bi = {cb, arg, 0, 0};
	struct piece_relay pr = {batch_item_cb, &bi, (size_t)f->piece};

	if (!f->batch)
		return -EOPNOTSUPP;
	for (size_t i = 0; i < n; i++) {
		int cut;
		size_t len = (size_t)items[i].len;
		ssize_t r;

		if (f->bhold_path && i == f->batch_hold && batch_held(f) < 0) {
			for (; i < n; i++)
				err[i] = -EIO;
			return 0;
		}
		cut = fault_read_begin(f, items[i].key, items[i].off, items[i].len);
		if (cut < 0) {
			err[i] = cut;
			continue;
		}
		bi.i = i;
		/* pieces of at most piece= bytes, as a streamed read's */
		r = backend__read_cb_pread(&f->inner, items[i].key, NULL, 0, items[i].off,
					   cut ? len / 2 : len, f->piece ? piece_cb : batch_item_cb,
					   f->piece ? (void *)&pr : (void *)&bi);
		if (bi.sink_err < 0) {
			for (size_t j = i; j < n; j++)
				err[j] = bi.sink_err;
			return bi.sink_err;
		}
		if (r > 0)
			atomic_fetch_add(&f->bytes, (unsigned long long)r);
		/* an object shorter than the item: cut as a GetBatch answer is */
		err[i] = r == -ENOENT ? -ENOENT : r < 0 || cut || (size_t)r != len ? -EIO : 0;
	}
	return 0;
}

/* async=1: one read on its own thread, then its done callback */
struct async_read {
	struct backend *be;
	char *key, *etag;
	uint64_t size;
	uint64_t off;
	size_t len;
	backend_sink_cb cb;
	void *arg;
	backend_done_cb done;
	void *darg;
};

/* A refused piece (BACKEND_SINK_FULL) offered again every millisecond, at
 * most 30 s. */
static int async_sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct async_read *r = arg;
	struct timespec ms = {0, 1000000L};

	for (int i = 0; i < 30000; i++) {
		int err = r->cb(r->arg, off, buf, len);

		if (err != BACKEND_SINK_FULL)
			return err;
		nanosleep(&ms, NULL);
	}
	return -EIO;
}

static void *async_main(void *arg)
{
	struct async_read *r = arg;
	struct fault *f = r->be->impl;
	ssize_t n = fault_read_cb(r->be, r->key, r->etag, r->size, r->off, r->len, async_sink, r);

	r->done(r->darg, n < 0 ? (int)n : 0, n < 0 ? 0 : (uint64_t)n);
	free(r->key);
	free(r->etag);
	free(r);
	atomic_fetch_sub(&f->async_running, 1);
	return NULL;
}

static void fault_read_async(struct backend *be, const char *key, const char *etag, uint64_t size,
			     uint64_t off, size_t len, unsigned flags, backend_sink_cb cb,
			     backend_sink_mem_cb mem, void *arg, backend_done_cb done, void *darg)
{
	struct fault *f = be->impl;
	struct async_read *r = calloc(1, sizeof(*r));
	pthread_attr_t at;
	pthread_t t;

	(void)flags;
	(void)mem; /* it reads into its own buffer */
	if (!r || !(r->key = strdup(key)) || (etag && !(r->etag = strdup(etag)))) {
		if (r)
			free(r->key);
		free(r);
		done(darg, -ENOMEM, 0);
		return;
	}
	*r = (struct async_read){be, r->key, r->etag, size, off, len, cb, arg, done, darg};
	atomic_fetch_add(&f->async_running, 1);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, async_main, r) != 0) {
		atomic_fetch_sub(&f->async_running, 1);
		free(r->key);
		free(r->etag);
		free(r);
		done(darg, -EAGAIN, 0);
	}
	pthread_attr_destroy(&at);
}

static void fault_close(struct backend *be)
{
	struct fault *f = be->impl;

	if (f) {
		struct timespec ms = {0, 1000000L};

		/* a read thread ends right after its done callback */
		while (atomic_load(&f->async_running) > 0)
			nanosleep(&ms, NULL);
		f->inner.ops->close(&f->inner);
		free(f->inner.desc);
		free(f->hold_path);
		free(f->bhold_path);
		free(f->log_path);
		free(f->heads_path);
		free(f->heads_hold);
		free(f);
	}
}

static const struct backend_ops fault_ops = {
    .close = fault_close,
    .list = fault_list,
    .stat = fault_stat,
    .pread = fault_pread,
    .open_fd = NULL, /* remote-like: no descriptors */
    .read_cb = fault_read_cb,
    .batch_read = fault_batch_read,
};

/* async=1: reads on threads of their own */
static const struct backend_ops fault_async_ops = {
    .close = fault_close,
    .list = fault_list,
    .stat = fault_stat,
    .pread = fault_pread,
    .open_fd = NULL,
    .read_cb = fault_read_cb,
    .read_async = fault_read_async,
    .batch_read = fault_batch_read,
};

static int parse_param(const char *q, const char *name, unsigned long long *out)
{
	size_t n = strlen(name);

	while (q && *q) {
		if (strncmp(q, name, n) == 0 && q[n] == '=') {
			char *end;

			errno = 0;
			*out = strtoull(q + n + 1, &end, 10);
			if (errno || end == q + n + 1 || (*end && *end != '&'))
				return -EINVAL;
			return 0;
		}
		q = strchr(q, '&');
		if (q)
			q++;
	}
	return 0;
}

int backend__fault_open(struct backend *be, const char *source, const struct backend_config *cfg)
{
	const char *path = source + strlen("fault://"), *q = strchr(path, '?');
	struct fault *f;
	char *dir;
	int err;

	(void)cfg;
	if (path[0] != '/')
		return -EINVAL;
	dir = q ? strndup(path, (size_t)(q - path)) : strdup(path);
	f = calloc(1, sizeof(*f));
	if (!dir || !f) {
		free(dir);
		free(f);
		return -ENOMEM;
	}
	if (q && (parse_param(q + 1, "fail_every", &f->fail_every) < 0 ||
		  parse_param(q + 1, "delay_ms", &f->delay_ms) < 0 ||
		  parse_param(q + 1, "fail_after_bytes", &f->fail_after_bytes) < 0 ||
		  parse_param(q + 1, "fail_list", &f->fail_list) < 0 ||
		  parse_param(q + 1, "cut_every", &f->cut_every) < 0 ||
		  parse_param(q + 1, "names_only", &f->names_only) < 0 ||
		  parse_param(q + 1, "piece", &f->piece) < 0 ||
		  parse_param(q + 1, "batch", &f->batch) < 0 ||
		  parse_param(q + 1, "hold_at", &f->hold_at) < 0 ||
		  parse_param(q + 1, "heads", &f->heads) < 0 ||
		  parse_param(q + 1, "batch_hold", &f->batch_hold) < 0 ||
		  parse_param(q + 1, "log", &f->log) < 0 ||
		  parse_param(q + 1, "async", &f->async) < 0)) {
		free(dir);
		free(f);
		return -EINVAL;
	}
	if (q && strstr(q, "hold_at=") && asprintf(&f->hold_path, "%s.hold", dir) < 0)
		f->hold_path = NULL;
	err = q && strstr(q, "hold_at=") && !f->hold_path ? -ENOMEM : 0;
	if (f->log && asprintf(&f->log_path, "%s.log", dir) < 0) {
		f->log_path = NULL;
		err = -ENOMEM;
	}
	if (f->heads && asprintf(&f->heads_path, "%s.heads", dir) < 0)
		f->heads_path = NULL;
	if (f->heads && asprintf(&f->heads_hold, "%s.hold", dir) < 0)
		f->heads_hold = NULL;
	if (f->heads && (!f->heads_path || !f->heads_hold))
		err = -ENOMEM;
	if (f->batch_hold && asprintf(&f->bhold_path, "%s.bhold", dir) < 0) {
		f->bhold_path = NULL;
		err = -ENOMEM;
	}
	if (err == 0 && q && parse_param(q + 1, "weak_etag", &f->weak_etag) < 0)
		err = -EINVAL;
	if (err == 0)
		err = backend__local_open(&f->inner, dir);
	free(dir);
	if (err < 0) {
		free(f->hold_path);
		free(f->bhold_path);
		free(f->log_path);
		free(f->heads_path);
		free(f->heads_hold);
		free(f);
		return err;
	}
	be->ops = f->async ? &fault_async_ops : &fault_ops;
	be->impl = f;
	be->local = 0;
	be->desc = q ? strndup(source, (size_t)(q - source)) : strdup(source);
	return be->desc ? 0 : -ENOMEM;
}
