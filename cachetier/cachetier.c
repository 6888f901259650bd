/*
 * cachetier.c — the cache directory, and object handles that make a
 * stream's bytes readable from a file descriptor: a local source file, a
 * decoded copy (cachetier_decode.c) or, for remote objects, the chunk
 * store (cachetier_chunk.c, capacity in cachetier_evict.c).
 *
 * Open objects live in a small list keyed by codec, ETag and key, so that
 * concurrent openers of one compressed shard share a single decode: the
 * first caller decodes (outside the lock) while later ones wait on ct->cond.
 * The list is short (one entry per shard in use), so a list is enough.
 *
 * Configuration defaults (zero fields of struct cachetier_config):
 *  - cache_size_bytes 20 GiB: a few hundred shards of a typical dataset, a
 *    fraction of a training node's NVMe.
 *  - min_free_bytes 1 GiB: the cache must not be what fills the disk.
 *  - chunk_bytes 8 MiB: large enough that a range GET runs at the store's
 *    streaming rate, small enough that a random member read fetches little.
 *  - readahead_max_bytes 64 MiB: eight chunks in flight ahead of one
 *    sequential reader, matching the default fill_threads; never more
 *    than an eighth of cache_size_bytes (readahead that outruns the cache
 *    evicts what it fetched before the reader gets there).
 *  - fill_threads 8: as many as the backend's default connections (fs
 *    passes connections + 1, so one thread writes while all fetch).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachetier_i.h"

uint64_t cachetier__fnv64(const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

void cachetier__hash_hex(const void *data, size_t len, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)cachetier__fnv64(data, len));
}

/* mkdir -p with mode 0700 for every component we create. */
static int mkdirs(const char *path)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = path[i];
	}
	return 0;
}

static int open_subdir(int dirfd, const char *name, int *out)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	*out = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return *out < 0 ? -errno : 0;
}

int cachetier_open(struct cachetier **out, const struct cachetier_config *cfg, struct backend *be)
{
	struct cachetier *ct;
	char hash[17], path[PATH_MAX];
	const char *source = cfg->source ? cfg->source : backend_describe(be);
	int err, n;

	*out = NULL;
	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	ct->be = be;
	ct->dirfd = ct->metafd = ct->decfd = ct->datafd = -1;
	pthread_mutex_init(&ct->lock, NULL);
	pthread_cond_init(&ct->cond, NULL);
	pthread_cond_init(&ct->chunk_cond, NULL);
	pthread_cond_init(&ct->work_cond, NULL);
	pthread_cond_init(&ct->flush_cond, NULL);
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf_tail = &ct->pf;
	ct->cfg = *cfg;
	if (!ct->cfg.cache_size_bytes)
		ct->cfg.cache_size_bytes = 20ull << 30;
	if (!ct->cfg.min_free_bytes)
		ct->cfg.min_free_bytes = 1ull << 30;
	if (!ct->cfg.chunk_bytes)
		ct->cfg.chunk_bytes = 8u << 20;
	if (ct->cfg.chunk_bytes > 1u << 30) /* one fill buffer per thread */
		ct->cfg.chunk_bytes = 1u << 30;
	/* whole 4 KiB blocks, so punching a chunk frees exactly its blocks */
	ct->cfg.chunk_bytes = (ct->cfg.chunk_bytes + 4095u) & ~4095u;
	if (!ct->cfg.readahead_max_bytes)
		ct->cfg.readahead_max_bytes = 64ull << 20;
	/* Readahead into a small cache would evict what it fetched (or what
	 * the reader is about to reach) before the reader gets there: at most
	 * an eighth of the cache is ahead of a reader, and at least one chunk. */
	if (ct->cfg.readahead_max_bytes > ct->cfg.cache_size_bytes / 8)
		ct->cfg.readahead_max_bytes = ct->cfg.cache_size_bytes / 8;
	if (ct->cfg.readahead_max_bytes < ct->cfg.chunk_bytes)
		ct->cfg.readahead_max_bytes = ct->cfg.chunk_bytes;
	if (!ct->cfg.fill_threads)
		ct->cfg.fill_threads = 8;
	ct->cfg.cache_dir = NULL; /* not kept: the caller's strings */
	ct->cfg.source = NULL;

	cachetier__hash_hex(source, strlen(source), hash);
	n = snprintf(path, sizeof(path), "%s/v1/%s", cfg->cache_dir, hash);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	err = mkdirs(path);
	if (err < 0)
		goto fail;
	ct->dir = strdup(path);
	ct->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!ct->dir || ct->dirfd < 0) {
		err = ct->dir ? -errno : -ENOMEM;
		goto fail;
	}
	err = open_subdir(ct->dirfd, "meta", &ct->metafd);
	if (err < 0)
		goto fail;
	err = open_subdir(ct->dirfd, "decoded", &ct->decfd);
	if (err < 0)
		goto fail;
	err = open_subdir(ct->dirfd, "data", &ct->datafd);
	if (err < 0)
		goto fail;
	err = cachetier__scan(ct);
	if (err < 0)
		goto fail;
	err = cachetier__chunk_start(ct);
	if (err < 0)
		goto fail;
	/* For humans looking at the cache directory: which source is this. */
	err = cachetier__write_atomic(ct, ct->dirfd, "source", source, strlen(source));
	if (err < 0)
		goto fail;
	*out = ct;
	return 0;
fail:
	cachetier_close(ct);
	return err;
}

void cachetier_cancel(struct cachetier *ct)
{
	if (!ct)
		return;
	/* the flag that cachetier__chunk_stop sets: workers leave their loop,
	 * waiting readers leave read_begin with -ECANCELED */
	pthread_mutex_lock(&ct->lock);
	ct->stopping = 1;
	pthread_cond_broadcast(&ct->work_cond);
	pthread_cond_broadcast(&ct->chunk_cond);
	pthread_cond_broadcast(&ct->flush_cond);
	pthread_mutex_unlock(&ct->lock);
}

void cachetier_close(struct cachetier *ct)
{
	if (!ct)
		return;
	/* joins the fill workers, records every filled chunk in its map */
	cachetier__chunk_stop(ct);
	/* Objects still referenced are the caller's bug; release their fds. */
	while (ct->objs) {
		struct cachetier_obj *o = ct->objs;

		ct->objs = o->next;
		if (o->fd >= 0)
			close(o->fd);
		free(o->name);
		free(o);
	}
	if (ct->datafd >= 0)
		close(ct->datafd);
	if (ct->decfd >= 0)
		close(ct->decfd);
	if (ct->metafd >= 0)
		close(ct->metafd);
	if (ct->dirfd >= 0)
		close(ct->dirfd);
	pthread_cond_destroy(&ct->work_cond);
	pthread_cond_destroy(&ct->flush_cond);
	pthread_cond_destroy(&ct->chunk_cond);
	pthread_cond_destroy(&ct->cond);
	pthread_mutex_destroy(&ct->lock);
	free(ct->dir);
	free(ct);
}

const char *cachetier_dir(const struct cachetier *ct)
{
	return ct->dir;
}

void cachetier_get_stats(struct cachetier *ct, struct cachetier_stats *st)
{
	st->decoded_streams = ct->decoded_streams;
	st->decoded_bytes = ct->decoded_bytes;
	st->decoded_reused = ct->decoded_reused;
	st->meta_reads = ct->meta_reads;
	st->meta_writes = ct->meta_writes;
	pthread_mutex_lock(&ct->lock);
	st->hits = ct->hits;
	st->misses = ct->misses;
	st->bytes_fetched = ct->bytes_fetched;
	st->fills = ct->fills;
	st->fills_inflight = ct->fills_inflight;
	st->fill_errors = ct->fill_errors;
	st->readahead_fills = ct->readahead_fills;
	st->evictions = ct->evictions;
	st->evicted_bytes = ct->evicted_bytes;
	st->bytes_used = ct->used + atomic_load(&ct->decoded_used);
	st->bytes_limit = ct->cfg.cache_size_bytes;
	pthread_mutex_unlock(&ct->lock);
}

/* Make o readable: the source file itself, or a decoded copy. Runs
 * without ct->lock; only the thread that created o calls it. */
static int obj_fill(struct cachetier *ct, const struct backend_objinfo *info,
		    enum cachetier_codec codec, struct cachetier_obj *o)
{
	struct stat st;
	char hash[17];
	int fd;

	if (codec != CACHETIER_RAW) {
		cachetier__hash_hex(o->name, strlen(o->name), hash);
		return cachetier__decode(ct, info, codec, hash, o);
	}
	if (!backend_is_local(ct->be)) {
		/* the chunk store: fetched on demand, served from data/<hash> */
		o->size = info->size;
		return cachetier__file_open(ct, info, &o->file);
	}
	fd = backend_open_fd(ct->be, info->key);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -errno;
	}
	o->fd = fd;
	o->size = (uint64_t)st.st_size;
	return 0;
}

int cachetier_obj_open(struct cachetier *ct, const struct backend_objinfo *info,
		       enum cachetier_codec codec, struct cachetier_obj **out)
{
	struct cachetier_obj *o;
	size_t n = strlen(info->key) + strlen(info->etag) + 8;
	char *name = malloc(n);
	int err;

	*out = NULL;
	if (!name)
		return -ENOMEM;
	snprintf(name, n, "%d:%s:%s", (int)codec, info->etag, info->key);

	pthread_mutex_lock(&ct->lock);
	for (o = ct->objs; o; o = o->next) {
		if (strcmp(o->name, name) == 0)
			break;
	}
	if (o) {
		free(name);
		o->refs++;
		while (o->state == OBJ_OPENING)
			pthread_cond_wait(&ct->cond, &ct->lock);
		err = o->state == OBJ_READY ? 0 : o->err;
		pthread_mutex_unlock(&ct->lock);
		if (err < 0) {
			cachetier_obj_unref(o);
			return err;
		}
		*out = o;
		return 0;
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		pthread_mutex_unlock(&ct->lock);
		free(name);
		return -ENOMEM;
	}
	o->ct = ct;
	o->name = name;
	o->refs = 1;
	o->fd = -1;
	o->state = OBJ_OPENING;
	o->next = ct->objs;
	ct->objs = o;
	pthread_mutex_unlock(&ct->lock);

	err = obj_fill(ct, info, codec, o);

	pthread_mutex_lock(&ct->lock);
	o->state = err < 0 ? OBJ_FAILED : OBJ_READY;
	o->err = err;
	pthread_cond_broadcast(&ct->cond);
	pthread_mutex_unlock(&ct->lock);
	if (err < 0) {
		cachetier_obj_unref(o);
		return err;
	}
	*out = o;
	return 0;
}

void cachetier_obj_ref(struct cachetier_obj *o)
{
	pthread_mutex_lock(&o->ct->lock);
	o->refs++;
	pthread_mutex_unlock(&o->ct->lock);
}

void cachetier_obj_unref(struct cachetier_obj *o)
{
	struct cachetier *ct;
	struct cachetier_obj **pp;

	if (!o)
		return;
	ct = o->ct;
	pthread_mutex_lock(&ct->lock);
	if (--o->refs > 0) {
		pthread_mutex_unlock(&ct->lock);
		return;
	}
	for (pp = &ct->objs; *pp; pp = &(*pp)->next) {
		if (*pp == o) {
			*pp = o->next;
			break;
		}
	}
	pthread_mutex_unlock(&ct->lock);
	if (o->file) /* record what was filled; the entry itself lives on */
		cachetier__file_flush(ct, o->file);
	if (o->fd >= 0)
		close(o->fd);
	free(o->name);
	free(o);
}

uint64_t cachetier_obj_size(const struct cachetier_obj *o)
{
	return o->size;
}

int cachetier_obj_damage(const struct cachetier_obj *o, uint64_t *off)
{
	if (off)
		*off = o->damage_off;
	return o->damage;
}

int cachetier_obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			     uint64_t *fd_off)
{
	int err;

	if (off > o->size || len > o->size - off)
		return -EIO;
	if (o->file) {
		err = cachetier__file_read_begin(o->ct, o->file, off, len);
		if (err < 0)
			return err;
		*fd = o->file->datafd;
	} else {
		*fd = o->fd;
	}
	*fd_off = off;
	return 0;
}

void cachetier_obj_read_end(struct cachetier_obj *o)
{
	if (o->file)
		cachetier__file_read_end(o->ct, o->file);
}

int cachetier_obj_prefetch(struct cachetier_obj *o)
{
	/* local files and decoded copies are all there already */
	return o->file ? cachetier__file_prefetch(o->ct, o->file) : 0;
}

uint64_t cachetier_obj_cached_bytes(const struct cachetier_obj *o)
{
	uint64_t n;

	if (!o->file)
		return o->size;
	pthread_mutex_lock(&o->ct->lock);
	n = o->file->bytes;
	pthread_mutex_unlock(&o->ct->lock);
	return n;
}

ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	uint64_t fd_off;
	size_t done = 0;
	ssize_t ret;
	int fd, err;

	if (off >= o->size)
		return 0;
	if (len > o->size - off)
		len = (size_t)(o->size - off);
	/* remote objects: fetch and pin the chunks, then copy from the file */
	err = cachetier_obj_read_begin(o, off, len, &fd, &fd_off);
	if (err < 0)
		return err;
	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(fd_off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* n == 0: the file shrank under us: never return zeros */
			ret = n < 0 ? -errno : -EIO;
			goto out;
		}
		done += (size_t)n;
	}
	ret = (ssize_t)done;
out:
	cachetier_obj_read_end(o);
	return ret;
}
