/*
 * cachetier_obj.c — the object table of the cache tier (cachetier.c) and
 * the bounded set of open local source fds.
 *
 * Open objects live in a hash table keyed by codec, version and key, so that
 * concurrent openers of one compressed shard share a single decode: the
 * first caller decodes (outside the lock) while later ones wait on ct->cond.
 * A mount keeps one object per shard it has indexed, so the table holds
 * up to every shard of the dataset (hundreds of thousands).
 *
 * Local source files are read through their own fds, but a process has
 * only RLIMIT_NOFILE of those and a dataset may have more shards: at most
 * local_fds_max stay open, in least-recently-used order. A read pins its
 * object's fd from read_begin to read_end (the FUSE reply splices from it
 * in between), so only unpinned fds are closed; read_begin reopens a
 * closed one and checks that it is still the file first opened (device,
 * inode, size, mtime), else -ESTALE: the index and the sizes were made
 * from that file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cachetier_i.h"

/* The object table's key, "<codec>:<tag>:<key>" (malloc'd), tag the
 * version's (backend_version_tag: the ETag, else ":<size>:<mtime>", so a
 * version without one, from a server that sends none or under --weak-etag
 * trust on an object whose ETag flips, is "<codec>::<size>:<mtime>:<key>");
 * a decoded copy's file name is its hash. With the ETag's place alone,
 * every version of a key without one would meet the first one's object
 * (its size, its decoded bytes). Names with an ETag are the ETag's. */
static char *obj_name(const struct backend_objinfo *info, enum cachetier_codec codec)
{
	char tag[BACKEND_VERSION_TAG];
	size_t n;
	char *name;

	backend_version_tag(info->etag, info->size, info->mtime, tag);
	n = strlen(info->key) + strlen(tag) + 16;
	name = malloc(n);
	if (!name)
		return NULL;
	snprintf(name, n, "%d:%s:%s", (int)codec, tag, info->key);
	return name;
}

int cachetier_obj_refusal(struct cachetier *ct, const struct backend_objinfo *info,
			  enum cachetier_codec codec, struct cachetier_refusal *r)
{
	char *name = obj_name(info, codec), hash[17];

	if (!name)
		return -ENOMEM;
	cachetier__hash_hex(name, strlen(name), hash);
	free(name);
	return cachetier__decode_refusal(ct, hash, r);
}

/* ---- the bounded set of open local source fds (ct->fds.fd_lock) ------------- */

static void fd_unlink(struct cachetier *ct, struct cachetier_obj *o)
{
	if (o->fd_prev)
		o->fd_prev->fd_next = o->fd_next;
	else
		ct->fds.fd_mru = o->fd_next;
	if (o->fd_next)
		o->fd_next->fd_prev = o->fd_prev;
	else
		ct->fds.fd_lru = o->fd_prev;
	o->fd_prev = o->fd_next = NULL;
}

static void fd_push(struct cachetier *ct, struct cachetier_obj *o)
{
	o->fd_prev = NULL;
	o->fd_next = ct->fds.fd_mru;
	if (ct->fds.fd_mru)
		ct->fds.fd_mru->fd_prev = o;
	else
		ct->fds.fd_lru = o;
	ct->fds.fd_mru = o;
}

/* Close least recently used unpinned fds until at most fd_max are open.
 * Pinned ones are skipped: they are at most the reads in flight. */
static void fd_trim(struct cachetier *ct)
{
	struct cachetier_obj *o = ct->fds.fd_lru;

	while (ct->fds.fd_open > ct->fds.fd_max && o) {
		struct cachetier_obj *prev = o->fd_prev;

		if (!o->fd_pins) {
			fd_unlink(ct, o);
			close(o->fd);
			o->fd = -1;
			ct->fds.fd_open--;
		}
		o = prev;
	}
}

/* Open o's source file; no lock held. The first open records the file's
 * identity (and o->size); later ones must find the same file: -ESTALE
 * when it was replaced or rewritten since. */
static int local_open(struct cachetier *ct, struct cachetier_obj *o, int first)
{
	struct stat st;
	int64_t mtime_ns;
	int fd = backend_open_fd(ct->be, o->key), err;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (first) {
		o->dev = st.st_dev;
		o->ino = st.st_ino;
		o->mtime_ns = mtime_ns;
		o->size = (uint64_t)st.st_size;
	} else if (st.st_dev != o->dev || st.st_ino != o->ino || mtime_ns != o->mtime_ns ||
		   (uint64_t)st.st_size != o->size) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

/* o's fd, reopened when the bound had closed it, pinned until local_unpin. */
int cachetier__local_pin(struct cachetier_obj *o, int *fd)
{
	struct cachetier *ct = o->ct;
	int nfd = -1;

	disk_mutex_lock(&ct->fds.fd_lock);
	if (o->fd < 0) {
		disk_mutex_unlock(&ct->fds.fd_lock);
		nfd = local_open(ct, o, 0);
		if (nfd < 0)
			return nfd;
		disk_mutex_lock(&ct->fds.fd_lock);
	}
	if (o->fd >= 0) {
		fd_unlink(ct, o); /* to the front */
		if (nfd >= 0)
			close(nfd); /* another reader reopened it meanwhile */
	} else {
		o->fd = nfd;
		ct->fds.fd_open++;
		ct->fds.fd_reopens++;
	}
	fd_push(ct, o);
	o->fd_pins++;
	*fd = o->fd;
	fd_trim(ct);
	disk_mutex_unlock(&ct->fds.fd_lock);
	return 0;
}

void cachetier__local_unpin(struct cachetier_obj *o)
{
	struct cachetier *ct = o->ct;

	disk_mutex_lock(&ct->fds.fd_lock);
	o->fd_pins--;
	fd_trim(ct);
	disk_mutex_unlock(&ct->fds.fd_lock);
}

/* Release an object that left the table. */
void cachetier__obj_free(struct cachetier *ct, struct cachetier_obj *o)
{
	if (o->local) {
		disk_mutex_lock(&ct->fds.fd_lock);
		if (o->fd >= 0) {
			fd_unlink(ct, o);
			close(o->fd);
			ct->fds.fd_open--;
		}
		disk_mutex_unlock(&ct->fds.fd_lock);
	} else if (o->fd >= 0) {
		close(o->fd);
	}
	if (o->dwrec)
		cachetier__watch_drop(ct->watch, o->dwrec);
	free(o->dcrc);
	free((void *)o->dchecked);
	free(o->name);
	free(o);
}

/* ---- the object table (ct->lock) ------------------------------------------ */

static struct cachetier_obj **obj_bucket(struct cachetier *ct, const char *name)
{
	return &ct->obj_tab[disk_fnv64(name, strlen(name)) & (ct->obj_tab_size - 1)];
}

/* Keep chains short: double the buckets past one object per bucket. Out of
 * memory, the chains just grow. */
static void obj_tab_grow(struct cachetier *ct)
{
	size_t old = ct->obj_tab_size;
	struct cachetier_obj **tab, **oldtab = ct->obj_tab;

	if (ct->nobjs < old || old > SIZE_MAX / 2 / sizeof(*tab))
		return;
	tab = calloc(old * 2, sizeof(*tab));
	if (!tab)
		return;
	ct->obj_tab = tab;
	ct->obj_tab_size = old * 2;
	for (size_t i = 0; i < old; i++) {
		while (oldtab[i]) {
			struct cachetier_obj *o = oldtab[i], **b;

			oldtab[i] = o->next;
			b = obj_bucket(ct, o->name);
			o->next = *b;
			*b = o;
		}
	}
	free(oldtab);
}

/* Make o readable: the source file itself, or a decoded copy. Runs
 * without ct->lock; only the thread that created o calls it. */
static int obj_fill(struct cachetier *ct, const struct backend_objinfo *info,
		    enum cachetier_codec codec, struct cachetier_obj *o)
{
	char hash[17];
	int fd;

	if (codec != CACHETIER_RAW) {
		int err;

		cachetier__hash_hex(o->name, strlen(o->name), hash);
		err = cachetier__decode(ct, info, codec, hash, o, &o->size);
		if (err == 0) {
			/* an evictable cache object from now on */
			cachetier__lock(ct);
			o->dec = cachetier__dec_entry(ct, ct->decfd, hash);
			if (o->dec) {
				o->dec->bytes = o->size;
				o->dec->atime_ns = cachetier__now_ns();
				o->dnext = ct->dec_objs;
				ct->dec_objs = o;
			}
			disk_mutex_unlock(&ct->lock);
		}
		return err;
	}
	if (!backend_is_local(ct->be)) {
		/* the unit store: fetched on demand, served from data/<hash> */
		o->size = info->size;
		return cachetier__file_open(ct, info, &o->file);
	}
	o->local = 1;
	fd = local_open(ct, o, 1);
	if (fd < 0)
		return fd;
	disk_mutex_lock(&ct->fds.fd_lock);
	o->fd = fd;
	ct->fds.fd_open++;
	fd_push(ct, o);
	fd_trim(ct);
	disk_mutex_unlock(&ct->fds.fd_lock);
	return 0;
}

int cachetier_obj_open(struct cachetier *ct, const struct backend_objinfo *info,
		       enum cachetier_codec codec, struct cachetier_obj **out)
{
	struct cachetier_obj *o, **b;
	char *name = obj_name(info, codec);
	size_t keyoff;
	int err;

	*out = NULL;
	if (!name)
		return -ENOMEM;
	keyoff = strlen(name) - strlen(info->key); /* obj_name ends with the key */

	cachetier__lock(ct);
	b = obj_bucket(ct, name);
	for (o = *b; o; o = o->next) {
		/* one whose bytes changed under its weak ETag serves only
		 * ESTALE: the new version gets an object of its own */
		if (strcmp(o->name, name) == 0 && !atomic_load(&o->collided))
			break;
	}
	if (o) {
		free(name);
		o->refs++;
		while (o->state == OBJ_OPENING)
			disk_cond_wait(&ct->cond, &ct->lock);
		err = o->state == OBJ_READY ? 0 : o->err;
		disk_mutex_unlock(&ct->lock);
		if (err < 0) {
			cachetier_obj_unref(o);
			return err;
		}
		*out = o;
		return 0;
	}
	o = calloc(1, sizeof(*o));
	if (!o) {
		disk_mutex_unlock(&ct->lock);
		free(name);
		return -ENOMEM;
	}
	o->ct = ct;
	o->name = name;
	o->key = name + keyoff;
	o->refs = 1;
	o->fd = -1;
	o->state = OBJ_OPENING;
	o->codec = codec;
	o->info = *info;
	o->info.key = o->key;
	o->next = *b;
	*b = o;
	ct->nobjs++;
	obj_tab_grow(ct);
	disk_mutex_unlock(&ct->lock);

	err = obj_fill(ct, info, codec, o);

	cachetier__lock(ct);
	o->state = err < 0 ? OBJ_FAILED : OBJ_READY;
	o->err = err;
	pthread_cond_broadcast(&ct->cond);
	disk_mutex_unlock(&ct->lock);
	if (err < 0) {
		cachetier_obj_unref(o);
		return err;
	}
	*out = o;
	return 0;
}

void cachetier_obj_unref(struct cachetier_obj *o)
{
	struct cachetier *ct;
	struct cachetier_obj **pp;

	if (!o)
		return;
	ct = o->ct;
	cachetier__lock(ct);
	if (--o->refs > 0) {
		disk_mutex_unlock(&ct->lock);
		return;
	}
	for (pp = obj_bucket(ct, o->name); *pp; pp = &(*pp)->next) {
		if (*pp == o) {
			*pp = o->next;
			ct->nobjs--;
			break;
		}
	}
	for (pp = &ct->dec_objs; o->dec && *pp; pp = &(*pp)->dnext) {
		if (*pp == o) {
			*pp = o->dnext;
			break;
		}
	}
	if (o->file) { /* its units' idle read locks (cachetier_read.c) */
		disk_mutex_lock(&o->file->lock);
		cachetier__lazy_drop(ct, o->file, 0, o->file->nunits);
		disk_mutex_unlock(&o->file->lock);
	}
	disk_mutex_unlock(&ct->lock);
	if (o->file) /* record what was filled; the entry itself lives on */
		cachetier__file_flush(ct, o->file);
	cachetier__obj_free(ct, o);
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

int cachetier_obj_prefetch(struct cachetier_obj *o, enum cachetier_prefetch_mode mode)
{
	/* local files and decoded copies are all there already */
	return o->file ? cachetier__file_prefetch(o->ct, o->file, 0, o->file->nunits, (int)mode)
		       : 0;
}

int cachetier_obj_prefetch_range(struct cachetier_obj *o, uint64_t off, uint64_t len,
				 enum cachetier_prefetch_mode mode)
{
	struct ct_file *f = o->file;

	if (off > o->size || len > o->size - off)
		return -EINVAL;
	if (!f || len == 0)
		return 0;
	return cachetier__file_prefetch_range(o->ct, f, (uint32_t)(off / f->unit_bytes),
					      (uint32_t)((off + len - 1) / f->unit_bytes + 1),
					      (int)mode);
}

int cachetier_obj_prefetch_state(struct cachetier_obj *o, uint64_t *unfit_bytes)
{
	uint64_t unfit = 0;
	int running = o->file ? cachetier__file_prefetch_state(o->ct, o->file, &unfit) : 0;

	if (unfit_bytes)
		*unfit_bytes = unfit;
	return running;
}

uint64_t cachetier_obj_cached_bytes(const struct cachetier_obj *o)
{
	uint64_t n;

	if (!o->file)
		return o->size;
	/* what any process sharing the directory has filled */
	n = 0;
	for (uint32_t c = 0; c < o->file->nunits; c++) {
		if (cachetier__st_get(o->file, c))
			n += cachetier__unit_len(o->file, c);
	}
	return n;
}
