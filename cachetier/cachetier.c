/*
 * cachetier.c — the cache directory, and object handles that make a
 * stream's bytes readable from a file descriptor.
 *
 * Open objects live in a small list keyed by codec, ETag and key, so that
 * concurrent openers of one compressed shard share a single decode: the
 * first caller decodes (outside the lock) while later ones wait on ct->cond.
 * The list is short (one entry per shard in use), so a list is enough.
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

void cachetier__hash_hex(const void *data, size_t len, char out[17])
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
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
	ct->dirfd = ct->metafd = ct->decfd = -1;
	pthread_mutex_init(&ct->lock, NULL);
	pthread_cond_init(&ct->cond, NULL);

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

void cachetier_close(struct cachetier *ct)
{
	if (!ct)
		return;
	/* Objects still referenced are the caller's bug; release their fds. */
	while (ct->objs) {
		struct cachetier_obj *o = ct->objs;

		ct->objs = o->next;
		if (o->fd >= 0)
			close(o->fd);
		free(o->key);
		free(o->name);
		free(o);
	}
	if (ct->decfd >= 0)
		close(ct->decfd);
	if (ct->metafd >= 0)
		close(ct->metafd);
	if (ct->dirfd >= 0)
		close(ct->dirfd);
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
		/* read-through: no file to splice from until the chunk store of
		 * issue 4; cachetier_obj_pread goes to the backend */
		o->key = strdup(info->key);
		if (!o->key)
			return -ENOMEM;
		snprintf(o->etag, sizeof(o->etag), "%s", info->etag);
		o->size = info->size;
		return 0;
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
	if (o->fd >= 0)
		close(o->fd);
	free(o->key);
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
	if (off > o->size || len > o->size - off)
		return -EIO;
	if (o->fd < 0)
		return -ENOTSUP; /* remote: the chunk store is not built yet */
	*fd = o->fd;
	*fd_off = off;
	return 0;
}

void cachetier_obj_read_end(struct cachetier_obj *o)
{
	(void)o;
}

int cachetier_obj_prefetch(struct cachetier_obj *o)
{
	return o->fd >= 0 ? 0 : -ENOTSUP;
}

uint64_t cachetier_obj_cached_bytes(const struct cachetier_obj *o)
{
	return o->fd >= 0 ? o->size : 0;
}

ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	if (off >= o->size)
		return 0;
	if (len > o->size - off)
		len = (size_t)(o->size - off);
	if (o->fd < 0) {
		ssize_t n = backend_pread(o->ct->be, o->key, buf, len, off);

		/* a short answer inside the known size: bytes are missing */
		return n >= 0 && (size_t)n != len ? -EIO : n;
	}
	while (done < len) {
		ssize_t n = pread(o->fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* the file shrank under us: never return zeros */
		done += (size_t)n;
	}
	return (ssize_t)done;
}
