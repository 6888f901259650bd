/*
 * cachetier.c — the cache directory, and object handles that make a
 * stream's bytes readable from a file descriptor: a local source file, a
 * decoded copy (cachetier_decode.c) or, for remote objects, the chunk
 * store (cachetier_chunk.c, capacity in cachetier_evict.c).
 *
 * Open objects live in a hash table keyed by codec, ETag and key, so that
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
 *
 * Configuration: every field is the caller's (the mount's defaults, with
 * the reasons for them, are in fs/fs_opt.c's option table). cachetier_open
 * only clamps what cannot work, as cachetier.h says for each field.
 *
 * Derived at open, not configured: local_fds_max 0 means the soft
 * RLIMIT_NOFILE (fs raises it to the hard limit before opening the cache
 * tier) less a reserve for every other fd the process holds: /dev/fuse and
 * two splice-pipe fds per FUSE thread, curl's connections and libuv,
 * decoded copies and chunk files, the log, directories while listing. The
 * reserve is a quarter of the limit, at least 128 and at most 4096 fds.
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

int cachetier_codec_sniff(const void *buf, size_t len)
{
	const unsigned char *p = buf;

	if (len >= 2 && p[0] == 0x1f && p[1] == 0x8b)
		return CACHETIER_GZIP;
	if (len >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd)
		return CACHETIER_ZSTD;
	/* a skippable frame (pzstd starts with one); the decoder skips it */
	if (len >= 4 && (p[0] & 0xf0) == 0x50 && p[1] == 0x2a && p[2] == 0x4d && p[3] == 0x18)
		return CACHETIER_ZSTD;
	return -1;
}

void cachetier__note_version(struct cachetier *ct, enum ct_format kind, const char *name)
{
	static const char *const what[CT_FMT_COUNT] = {
	    [CT_FMT_MAP] = "chunk map",
	    [CT_FMT_REC] = "decode record",
	};
	static const char *const redo[CT_FMT_COUNT] = {
	    [CT_FMT_MAP] = "its chunks are fetched again",
	    [CT_FMT_REC] = "the shard is decoded again",
	};

	if (atomic_exchange(&ct->version_noted[kind], 1))
		return;
	backend_log(ct->be, BACKEND_LOG_WARN,
		    "cache %s: %s %s is of another version: not used, %s (others like it are not "
		    "logged)",
		    ct->dir, what[kind], name, redo[kind]);
}

void cachetier__note_corrupt(struct cachetier *ct, const char *file, const char *key, uint32_t n,
			     const char *why, const char *then)
{
	atomic_fetch_add(&ct->units_corrupt, n);
	if (atomic_exchange(&ct->corrupt_noted, 1))
		return;
	backend_log(ct->be, BACKEND_LOG_WARN,
		    "cache %s: %u unit(s) of %s (%s): %s: %s (cache_units_corrupt counts them; "
		    "others like it are not logged)",
		    ct->dir, n, file, key ? key : "?", why, then);
}

void cachetier__hash_hex(const void *data, size_t len, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)disk_fnv64(data, len));
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

#define OBJ_TAB_MIN 256

static void obj_free(struct cachetier *ct, struct cachetier_obj *o);

static unsigned local_fds_default(void)
{
	struct rlimit rl;
	uint64_t lim = 1u << 20, reserve;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		lim = (uint64_t)rl.rlim_cur;
	reserve = lim / 4;
	if (reserve < 128)
		reserve = 128;
	if (reserve > 4096)
		reserve = 4096;
	if (lim < reserve + 16)
		return 16; /* a tiny limit: a few local fds, and hope */
	lim -= reserve;
	return lim > (1u << 30) ? 1u << 30 : (unsigned)lim;
}

static int open_subdir(int dirfd, const char *name, int *out)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	*out = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return *out < 0 ? -errno : 0;
}

/* Sanity clamps of ct->cfg (the defaults are the caller's) and what
 * follows from it: the unit of random fills (ct->upc, ct->unit). */
static void config_clamp(struct cachetier *ct)
{
	if (!ct->cfg.max_decode_ratio) /* 0: no ratio bound */
		ct->cfg.max_decode_ratio = UINT_MAX;
	if (!ct->cfg.max_decoded_bytes) /* 0: no size bound */
		ct->cfg.max_decoded_bytes = UINT64_MAX;
	if (!ct->cfg.min_free_percent || ct->cfg.min_free_percent > 100) /* 0: no cap */
		ct->cfg.min_free_percent = 100;
	if (ct->cfg.chunk_bytes > 1u << 30) /* one request each, refetched whole */
		ct->cfg.chunk_bytes = 1u << 30;
	/* whole 4 KiB blocks (at least one), so punching a chunk frees exactly
	 * its blocks */
	ct->cfg.chunk_bytes = ct->cfg.chunk_bytes ? (ct->cfg.chunk_bytes + 4095u) & ~4095u : 4096u;
	/* a random miss that does not fit fills only the units it reads
	 * (cachetier_chunk.c): 64 KiB (at most 128 a chunk, in whole 4 KiB
	 * blocks), so a random read of a 100 KB sample fetches about 1.6x its
	 * bytes; chunks under 512 KiB: an eighth of the chunk (or all of it) */
	ct->upc = ct->cfg.chunk_bytes % (8u * 4096u) == 0 ? 8u : 1u;
	if (ct->cfg.chunk_bytes >= 8u * 65536u) {
		uint32_t blocks = ct->cfg.chunk_bytes / 4096u;

		ct->upc = ct->cfg.chunk_bytes / 65536u > 128u ? 128u : ct->cfg.chunk_bytes / 65536u;
		while (blocks % ct->upc) /* whole blocks a unit */
			ct->upc--;
	}
	ct->unit = ct->cfg.chunk_bytes / ct->upc;
	/* Readahead into a small cache would evict what it fetched (or what
	 * the reader is about to reach) before the reader gets there: at most
	 * an eighth of the cache is ahead of a reader, and at least one chunk. */
	if (ct->cfg.readahead_max_bytes > ct->cfg.cache_size_bytes / 8)
		ct->cfg.readahead_max_bytes = ct->cfg.cache_size_bytes / 8;
	if (ct->cfg.readahead_max_bytes < ct->cfg.chunk_bytes)
		ct->cfg.readahead_max_bytes = ct->cfg.chunk_bytes;
	if (!ct->cfg.fill_threads) /* fills must run somewhere */
		ct->cfg.fill_threads = 1;
}

int cachetier_open(struct cachetier **out, const struct cachetier_config *cfg, struct backend *be)
{
	struct cachetier *ct;
	struct statvfs sv;
	char hash[17], path[PATH_MAX];
	const char *source = cfg->source ? cfg->source : backend_describe(be);
	int err, n;

	*out = NULL;
	ct = calloc(1, sizeof(*ct));
	if (!ct)
		return -ENOMEM;
	ct->be = be;
	ct->dirfd = ct->metafd = ct->decfd = ct->datafd = ct->v1fd = ct->usagefd = -1;
	pthread_mutex_init(&ct->lock, NULL);
	pthread_mutex_init(&ct->fd_lock, NULL);
	pthread_cond_init(&ct->cond, NULL);
	pthread_cond_init(&ct->chunk_cond, NULL);
	pthread_cond_init(&ct->room_cond, NULL);
	pthread_cond_init(&ct->work_cond, NULL);
	pthread_cond_init(&ct->flush_cond, NULL);
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf_tail = &ct->pf;
	ct->pr_tail = &ct->pr;
	ct->cfg = *cfg;
	config_clamp(ct);
	if (!ct->cfg.local_fds_max)
		ct->cfg.local_fds_max = local_fds_default();
	ct->fd_max = ct->cfg.local_fds_max;
	ct->obj_tab_size = OBJ_TAB_MIN;
	ct->obj_tab = calloc(ct->obj_tab_size, sizeof(*ct->obj_tab));
	if (!ct->obj_tab) {
		err = -ENOMEM;
		goto fail;
	}
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
	path[n - 17] = '\0'; /* CACHE_DIR/v1 */
	ct->v1fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ct->v1fd < 0) {
		err = -errno;
		goto fail;
	}
	path[n - 17] = '/';
	ct->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (!ct->dir || ct->dirfd < 0) {
		err = ct->dir ? -errno : -ENOMEM;
		goto fail;
	}
	/* the reserve scales with the filesystem (defaults above) */
	if (fstatvfs(ct->dirfd, &sv) == 0) {
		uint64_t pct = (uint64_t)sv.f_blocks * sv.f_frsize / 100 * ct->cfg.min_free_percent;

		if (pct < ct->cfg.min_free_bytes)
			ct->cfg.min_free_bytes = pct;
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
	err = disk_write_atomic(ct->dirfd, "source", source, strlen(source), 0600);
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
	__atomic_store_n(&ct->stopping, 1, __ATOMIC_RELEASE); /* fill_claim reads it unlocked */
	pthread_cond_broadcast(&ct->work_cond);
	pthread_cond_broadcast(&ct->chunk_cond);
	pthread_cond_broadcast(&ct->room_cond);
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
	for (size_t i = 0; ct->obj_tab && i < ct->obj_tab_size; i++) {
		while (ct->obj_tab[i]) {
			struct cachetier_obj *o = ct->obj_tab[i];

			ct->obj_tab[i] = o->next;
			obj_free(ct, o);
		}
	}
	free(ct->obj_tab);
	while (ct->decs) {
		struct ct_dec *d = ct->decs;

		ct->decs = d->next;
		free(d);
	}
	cachetier__usage_close(ct);
	for (unsigned i = 0; i < ct->nsrcfds; i++)
		close(ct->srcfds[i]);
	free(ct->srcfds);
	if (ct->v1fd >= 0)
		close(ct->v1fd);
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
	pthread_cond_destroy(&ct->room_cond);
	pthread_cond_destroy(&ct->cond);
	pthread_mutex_destroy(&ct->fd_lock);
	pthread_mutex_destroy(&ct->lock);
	free(ct->dir);
	free(ct);
}

const char *cachetier_dir(const struct cachetier *ct)
{
	return ct->dir;
}

int cachetier_disk(struct cachetier *ct, uint64_t *avail_bytes, uint64_t *reserve_bytes)
{
	struct statvfs sv;

	*reserve_bytes = ct->cfg.min_free_bytes;
	*avail_bytes = 0;
	if (fstatvfs(ct->dirfd, &sv) < 0)
		return -errno;
	*avail_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	return 0;
}

/* The object table's key, "<codec>:<etag>:<key>" (malloc'd); a decoded
 * copy's file name is its hash. */
static char *obj_name(const struct backend_objinfo *info, enum cachetier_codec codec)
{
	size_t n = strlen(info->key) + strlen(info->etag) + 8;
	char *name = malloc(n);

	if (name)
		snprintf(name, n, "%d:%s:%s", (int)codec, info->etag, info->key);
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
	st->unfit_bytes = ct->unfit_bytes;
	st->evictions = ct->evictions;
	st->evicted_bytes = ct->evicted_bytes;
	st->decoded_evictions = ct->decoded_evictions;
	st->peer_chunks = ct->peer_chunks;
	st->peer_waits = ct->peer_waits;
	st->prefetch_withdrawn = ct->pf_withdrawn;
	st->units_corrupt = atomic_load(&ct->units_corrupt);
	st->bypass_reads = atomic_load(&ct->bypass_reads);
	st->bypass_bytes = atomic_load(&ct->bypass_bytes);
	/* the whole directory: every process and source sharing it */
	st->bytes_used = cachetier__usage_get(ct);
	st->bytes_limit = ct->cfg.cache_size_bytes;
	pthread_mutex_unlock(&ct->lock);
	pthread_mutex_lock(&ct->fd_lock);
	st->local_fds_open = ct->fd_open;
	st->local_fd_reopens = ct->fd_reopens;
	pthread_mutex_unlock(&ct->fd_lock);
}

/* ---- the bounded set of open local source fds (ct->fd_lock) ------------- */

static void fd_unlink(struct cachetier *ct, struct cachetier_obj *o)
{
	if (o->fd_prev)
		o->fd_prev->fd_next = o->fd_next;
	else
		ct->fd_mru = o->fd_next;
	if (o->fd_next)
		o->fd_next->fd_prev = o->fd_prev;
	else
		ct->fd_lru = o->fd_prev;
	o->fd_prev = o->fd_next = NULL;
}

static void fd_push(struct cachetier *ct, struct cachetier_obj *o)
{
	o->fd_prev = NULL;
	o->fd_next = ct->fd_mru;
	if (ct->fd_mru)
		ct->fd_mru->fd_prev = o;
	else
		ct->fd_lru = o;
	ct->fd_mru = o;
}

/* Close least recently used unpinned fds until at most fd_max are open.
 * Pinned ones are skipped: they are at most the reads in flight. */
static void fd_trim(struct cachetier *ct)
{
	struct cachetier_obj *o = ct->fd_lru;

	while (ct->fd_open > ct->fd_max && o) {
		struct cachetier_obj *prev = o->fd_prev;

		if (!o->fd_pins) {
			fd_unlink(ct, o);
			close(o->fd);
			o->fd = -1;
			ct->fd_open--;
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
static int local_pin(struct cachetier_obj *o, int *fd)
{
	struct cachetier *ct = o->ct;
	int nfd = -1;

	pthread_mutex_lock(&ct->fd_lock);
	if (o->fd < 0) {
		pthread_mutex_unlock(&ct->fd_lock);
		nfd = local_open(ct, o, 0);
		if (nfd < 0)
			return nfd;
		pthread_mutex_lock(&ct->fd_lock);
	}
	if (o->fd >= 0) {
		fd_unlink(ct, o); /* to the front */
		if (nfd >= 0)
			close(nfd); /* another reader reopened it meanwhile */
	} else {
		o->fd = nfd;
		ct->fd_open++;
		ct->fd_reopens++;
	}
	fd_push(ct, o);
	o->fd_pins++;
	*fd = o->fd;
	fd_trim(ct);
	pthread_mutex_unlock(&ct->fd_lock);
	return 0;
}

static void local_unpin(struct cachetier_obj *o)
{
	struct cachetier *ct = o->ct;

	pthread_mutex_lock(&ct->fd_lock);
	o->fd_pins--;
	fd_trim(ct);
	pthread_mutex_unlock(&ct->fd_lock);
}

/* Release an object that left the table. */
static void obj_free(struct cachetier *ct, struct cachetier_obj *o)
{
	if (o->local) {
		pthread_mutex_lock(&ct->fd_lock);
		if (o->fd >= 0) {
			fd_unlink(ct, o);
			close(o->fd);
			ct->fd_open--;
		}
		pthread_mutex_unlock(&ct->fd_lock);
	} else if (o->fd >= 0) {
		close(o->fd);
	}
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
		err = cachetier__decode(ct, info, codec, hash, o);
		if (err == 0) {
			/* an evictable cache object from now on */
			pthread_mutex_lock(&ct->lock);
			o->dec = cachetier__dec_entry(ct, ct->decfd, hash);
			if (o->dec) {
				o->dec->bytes = o->size;
				o->dec->atime_ns = cachetier__now_ns();
				o->dnext = ct->dec_objs;
				ct->dec_objs = o;
			}
			pthread_mutex_unlock(&ct->lock);
		}
		return err;
	}
	if (!backend_is_local(ct->be)) {
		/* the chunk store: fetched on demand, served from data/<hash> */
		o->size = info->size;
		return cachetier__file_open(ct, info, &o->file);
	}
	o->local = 1;
	fd = local_open(ct, o, 1);
	if (fd < 0)
		return fd;
	pthread_mutex_lock(&ct->fd_lock);
	o->fd = fd;
	ct->fd_open++;
	fd_push(ct, o);
	fd_trim(ct);
	pthread_mutex_unlock(&ct->fd_lock);
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

	pthread_mutex_lock(&ct->lock);
	b = obj_bucket(ct, name);
	for (o = *b; o; o = o->next) {
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
	pthread_mutex_unlock(&ct->lock);
	if (o->file) /* record what was filled; the entry itself lives on */
		cachetier__file_flush(ct, o->file);
	obj_free(ct, o);
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

/* A decoded copy evicted (by this or another process) is decoded again:
 * from the same version of the object, to the same bytes. ct->lock held
 * on entry and return; dropped while decoding. */
static int obj_redecode(struct cachetier *ct, struct cachetier_obj *o)
{
	uint64_t size = o->size;
	int damage = o->damage, err;

	o->redecoding = 1;
	pthread_mutex_unlock(&ct->lock);
	err = 0;
	if (backend_is_local(ct->be)) {
		struct backend_objinfo now;

		/* a local file decodes from whatever is at its path now */
		err = backend_stat(ct->be, o->info.key, &now);
		if (err == 0 && strcmp(now.etag, o->info.etag) != 0)
			err = -ESTALE;
	}
	if (err == 0)
		err = cachetier__decode(ct, &o->info, o->codec, o->dec->name, o);
	if (err == 0 && (o->size != size || o->damage != damage)) {
		close(o->fd); /* never serve another version under one index */
		o->fd = -1;
		err = -ESTALE;
	}
	o->size = size;
	pthread_mutex_lock(&ct->lock);
	o->redecoding = 0;
	if (err == 0) {
		o->dbad = 0; /* a new copy: this process's, or checked as it is read */
		o->dec->bytes = size;
		o->dec->atime_ns = cachetier__now_ns();
	}
	pthread_cond_broadcast(&ct->cond);
	return err;
}

static void obj_dec_end(struct cachetier *ct, struct cachetier_obj *o)
{
	pthread_mutex_lock(&ct->lock);
	/* an eviction that found it in use, or a read that found it damaged,
	 * left the fd to the last reader (o->dbad: the copy's name may hold
	 * another process's new copy by now); reads waiting for a damaged
	 * copy to close decode it again */
	if (--o->dpins == 0 && (o->dec->bytes == 0 || o->dbad) && o->fd >= 0) {
		close(o->fd);
		o->fd = -1;
		pthread_cond_broadcast(&ct->cond);
	}
	pthread_mutex_unlock(&ct->lock);
}

/* A unit of o's decoded copy failed its CRC32C: the first reader to find
 * it (o->dbad) counts and logs it and drops the copy (record and file,
 * unless another decode's copy has replaced it under its name since: the
 * next read here, and any other process, decodes it again). The caller
 * holds a read's pin, so its obj_dec_end closes the fd (o->dbad) when no
 * other read uses it; reads that begin meanwhile wait for that
 * (obj_dec_begin). No lock held on entry; file I/O. */
static void obj_dec_damaged(struct cachetier *ct, struct cachetier_obj *o, uint64_t unit)
{
	char file[40], why[96];
	int first;

	pthread_mutex_lock(&ct->lock);
	first = !o->dbad;
	o->dbad = 1;
	pthread_mutex_unlock(&ct->lock);
	if (!first)
		return;
	snprintf(file, sizeof(file), "decoded/%s", o->dec->name);
	snprintf(why, sizeof(why), "unit %llu (%u bytes) of the decoded copy fails its CRC32C",
		 (unsigned long long)unit, CT_DEC_UNIT);
	cachetier__note_corrupt(ct, file, o->info.key, 1, why,
				"the read fails with EIO, the copy is removed and the next read "
				"decodes it again");
	if (cachetier__decode_drop(ct, o->dec->name, o->fd)) {
		pthread_mutex_lock(&ct->lock);
		o->dec->bytes = 0; /* not on the disk any more (eviction passes it over) */
		pthread_mutex_unlock(&ct->lock);
	}
}

/* Before a read serves [off, off + len) of o's decoded copy, which another
 * process or an earlier mount wrote (o->dcrc): each unit of the range not
 * checked here yet is read (a pread of CT_DEC_UNIT bytes) and its CRC32C
 * compared with the decode record's, once per unit and object. A hole
 * reads as zeros and fails (unless the unit was all zeros: then the bytes
 * are right). The caller holds the read's pin (o->fd and o->dcrc stay);
 * no lock held. 0, -EIO (a unit failed: obj_dec_damaged) or -ENOMEM. */
static int obj_dec_check(struct cachetier *ct, struct cachetier_obj *o, uint64_t off, uint64_t len)
{
	uint64_t u1 = (off + len - 1) / CT_DEC_UNIT + 1;
	unsigned char *buf = NULL;
	int err = 0;

	if (u1 > o->dunits)
		u1 = o->dunits;
	for (uint64_t u = off / CT_DEC_UNIT; u < u1 && err == 0; u++) {
		uint64_t at = u * CT_DEC_UNIT;
		size_t n = o->size - at < CT_DEC_UNIT ? (size_t)(o->size - at) : CT_DEC_UNIT;

		if (atomic_load_explicit(&o->dchecked[u], memory_order_relaxed))
			continue;
		if (!buf && !(buf = malloc(CT_DEC_UNIT)))
			err = -ENOMEM;
		if (err == 0)
			err = disk_pread_all(o->fd, buf, n, at); /* -EIO: cut short */
		if (err == 0 && disk_crc32c_update(0, buf, n) != o->dcrc[u])
			err = -EIO;
		if (err == 0)
			atomic_store_explicit(&o->dchecked[u], 1, memory_order_relaxed);
		else if (err == -EIO)
			obj_dec_damaged(ct, o, u);
	}
	free(buf);
	return err;
}

/* Pin o's decoded copy for a read of [off, off + len): decoded again
 * first when it was closed (evicted, found damaged); EIO when it is found
 * cut or damaged (then decoded again by a later read). May block: a
 * decode (another thread's too), the unit checks' preads, and, while a
 * copy found damaged is still used, until the reads using it end (each
 * one pin from read_begin to read_end: a FUSE reply). No lock held on
 * entry. */
static int obj_dec_begin(struct cachetier *ct, struct cachetier_obj *o, uint64_t off, uint64_t len,
			 int *fd)
{
	struct stat st;
	int err = 0;

	pthread_mutex_lock(&ct->lock);
	/* o->dbad with the fd open: reads in flight use the damaged copy
	 * (its pins); the last one's read_end closes it */
	while (o->redecoding || (o->dbad && o->fd >= 0))
		pthread_cond_wait(&ct->cond, &ct->lock);
	if (o->fd < 0)
		err = obj_redecode(ct, o);
	if (err == 0 && fstat(o->fd, &st) == 0 && (uint64_t)st.st_size < o->size) {
		/* the copy was cut under us: a read past its end would come
		 * back short. EIO, and the next read decodes it again (the
		 * decode record's size no longer matches the file) */
		char file[40];

		snprintf(file, sizeof(file), "decoded/%s", o->dec->name);
		cachetier__note_corrupt(ct, file, o->info.key, 1, "the decoded copy was cut",
					"the read fails with EIO, the next read decodes it again");
		if (o->dpins == 0) {
			close(o->fd);
			o->fd = -1;
		}
		err = -EIO;
	}
	if (err == 0) {
		o->dpins++;
		o->dec->atime_ns = cachetier__now_ns();
		*fd = o->fd;
	}
	pthread_mutex_unlock(&ct->lock);
	if (err == 0 && o->dcrc && len > 0) {
		err = obj_dec_check(ct, o, off, len);
		if (err < 0)
			obj_dec_end(ct, o);
	}
	return err;
}

/* Where a bypass read's bytes go: a memfd, at their offset less start. */
struct bypass_sink {
	int fd;
	uint64_t start, next, end;
};

/* backend_sink_cb: may run on the store's I/O thread; no locks. */
static int bypass_write(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct bypass_sink *s = arg;
	int err;

	if (len == 0)
		return 0;
	if (off != s->next || len > s->end - off)
		return -EIO;
	err = disk_pwrite_all(s->fd, buf, len, off - s->start);
	if (err == 0)
		s->next += len;
	return err;
}

/* A full disk degrades, it does not stop: the fill of units of
 * [off, off + len) of remote object o failed with no room on the disk
 * (eviction freed what it could; -ENOSPC or -EDQUOT), so the range is
 * fetched from the store (its listed version) into a memfd that read_end
 * closes, and served from there without caching it. Memory: len bytes
 * until read_end (FUSE reads are at most 1 MiB). Counted in bypass_reads
 * and bypass_bytes; the first is logged. Blocks for the fetch (the store's
 * retry budget bounds it); no lock held on entry. 0 or the store's error. */
static int obj_bypass(struct cachetier_obj *o, uint64_t off, uint64_t len, int nospc, int *fd,
		      uint64_t *fd_off)
{
	struct cachetier *ct = o->ct;
	struct bypass_sink s = {.start = off, .next = off, .end = off + len};
	struct ct_bypass *b = malloc(sizeof(*b));
	int err = 0;

	if (!b)
		return -ENOMEM;
	s.fd = memfd_create("shardfs-bypass", MFD_CLOEXEC);
	if (s.fd < 0) {
		err = -errno;
		free(b);
		return err;
	}
	while (s.next < s.end) {
		uint64_t from = s.next;
		ssize_t n = backend_read_version_cb(ct->be, o->file->key, o->file->etag, from,
						    (size_t)(s.end - from), bypass_write, &s);

		if (n < 0) {
			err = (int)n;
			break;
		}
		if (s.next == from) {
			err = -EIO; /* the object is shorter than its size said */
			break;
		}
	}
	if (err < 0) {
		close(s.fd);
		free(b);
		return err;
	}
	atomic_fetch_add(&ct->bypass_reads, 1);
	atomic_fetch_add(&ct->bypass_bytes, len);
	if (!atomic_exchange(&ct->bypass_noted, 1))
		backend_log(ct->be, BACKEND_LOG_WARN,
			    "cache %s: no room on the disk for %s (%s, nothing left to evict): "
			    "reads of bytes not cached are served from the store without caching "
			    "them (cache_bypass_reads counts them; not logged again)",
			    ct->dir, o->file->key, strerror(-nospc));
	b->tid = pthread_self();
	b->fd = s.fd;
	pthread_mutex_lock(&ct->lock);
	b->next = o->bypass;
	__atomic_store_n(&o->bypass, b, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&ct->lock);
	*fd = s.fd;
	*fd_off = 0;
	return 0;
}

/* The bypass read of this thread on o, taken off its list (NULL: none). */
static struct ct_bypass *bypass_take(struct cachetier_obj *o)
{
	pthread_t self = pthread_self();
	struct ct_bypass *b = NULL;

	/* only this thread adds its own entry: an empty list read without
	 * the lock is empty for it */
	if (!__atomic_load_n(&o->bypass, __ATOMIC_RELAXED))
		return NULL;
	pthread_mutex_lock(&o->ct->lock);
	for (struct ct_bypass **pp = &o->bypass; *pp; pp = &(*pp)->next) {
		if (pthread_equal((*pp)->tid, self)) {
			b = *pp;
			__atomic_store_n(pp, b->next, __ATOMIC_RELAXED);
			break;
		}
	}
	pthread_mutex_unlock(&o->ct->lock);
	return b;
}

static int obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			  uint64_t *fd_off, int probe)
{
	int err;

	if (off > o->size || len > o->size - off)
		return -EIO;
	if (o->dec) {
		err = obj_dec_begin(o->ct, o, off, len, fd);
		if (err < 0)
			return err;
	} else if (o->file) {
		err = cachetier__file_read_begin(o->ct, o->file, off, len, probe);
		if (err == -ENOSPC || err == -EDQUOT)
			return obj_bypass(o, off, len, err, fd, fd_off);
		if (err < 0)
			return err;
		*fd = o->file->datafd;
	} else if (o->local) {
		err = local_pin(o, fd);
		if (err < 0)
			return err;
	} else {
		*fd = o->fd;
	}
	*fd_off = off;
	return 0;
}

int cachetier_obj_read_begin(struct cachetier_obj *o, uint64_t off, uint64_t len, int *fd,
			     uint64_t *fd_off)
{
	return obj_read_begin(o, off, len, fd, fd_off, 0);
}

void cachetier_obj_read_end(struct cachetier_obj *o)
{
	struct ct_bypass *b;

	if (o->dec) {
		obj_dec_end(o->ct, o);
	} else if (o->file && (b = bypass_take(o))) {
		close(b->fd);
		free(b);
	} else if (o->file) {
		cachetier__file_read_end(o->ct, o->file);
	} else if (o->local) {
		local_unpin(o);
	}
}

int cachetier_obj_prefetch(struct cachetier_obj *o, enum cachetier_prefetch_mode mode)
{
	/* local files and decoded copies are all there already */
	return o->file ? cachetier__file_prefetch(o->ct, o->file, 0, o->file->nchunks, (int)mode)
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
	return cachetier__file_prefetch_range(o->ct, f, (uint32_t)(off / f->cb),
					      (uint32_t)((off + len - 1) / f->cb + 1), (int)mode);
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
	for (uint32_t c = 0; c < o->file->nchunks; c++) {
		if (cachetier__st_get(o->file, c))
			n += cachetier__chunk_len(o->file, c);
	}
	return n;
}

static ssize_t obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off, int probe)
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
	err = obj_read_begin(o, off, len, &fd, &fd_off, probe);
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

ssize_t cachetier_obj_pread(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	return obj_pread(o, buf, len, off, 0);
}

ssize_t cachetier_obj_pread_probe(struct cachetier_obj *o, void *buf, size_t len, uint64_t off)
{
	return obj_pread(o, buf, len, off, 1);
}
