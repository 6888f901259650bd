/*
 * fs_sidecar.c — sidecar indexes (NAME.tar.idx beside a shard): their
 * identity, and the checks a mount makes before it trusts one
 * (fs_sidecar_load, for fs_shard.c's shard_load).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"

/* ---- sidecar indexes -------------------------------------------------------
 * NAME.tar.idx beside a shard (written by 'shardfs index --sidecar' and
 * 'shardfs pack') is a shardidx_save file whose identity names the shard
 * it was made from: "shardfs-sidecar|3|CODEC|SIZE|TAIL|MTIME_NS|INO|CTIME_NS", TAIL
 * being an FNV-1a 64 of the shard file's last FS_SIDECAR_TAIL bytes (an
 * appended member, `tar -rf`, changes them even when the size stays within
 * the record padding). A mount trusts a sidecar only when:
 *  - local source: every field matches the shard file as it is now, so a
 *    rewrite (even one that puts the old mtime back: ctime cannot be set),
 *    an append, a `touch`, a `chmod` or a copy (a new inode; `cp -p` keeps
 *    the mtime, not the inode) rejects it and the index is built from the
 *    shard: safe, at the cost of one read of its headers;
 *  - remote source: codec, size and TAIL match (a store's ETag is not
 *    something the local tool that wrote the sidecar can know; the tail is
 *    read with If-Match on the listed ETag).
 * Then the index must cover exactly the stream's size, it must have no
 * sparse member, and the tar headers of the first and the last regular
 * member (two 512-byte reads) must agree: header checksum, size and base
 * name. A sidecar that fails any check (an older format too) is logged,
 * counted and ignored. None of this proves the middle of the shard: a
 * sidecar's index is trusted per member (fs_shard.checked), each member's
 * first read checking its own tar header (fs_member_read), and it is never
 * saved in the cache dir (an index saved there was built from the shard). */
int fs_sidecar_ident(const struct fs_sidecar_id *id, char *buf, size_t bufsize, size_t *len)
{
	int n = snprintf(buf, bufsize,
			 "shardfs-sidecar|3|%s|%" PRIu64 "|%016" PRIx64 "|%" PRIu64 "|%" PRIu64
			 "|%" PRIu64,
			 id->codec >= 0 && id->codec <= 2 ? fs_codec_names[id->codec] : "?",
			 id->size, id->tail_fnv, id->mtime_ns, id->ino, id->ctime_ns);

	if (n < 0 || (size_t)n >= bufsize)
		return -ENAMETOOLONG;
	*len = (size_t)n;
	return 0;
}

int fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id)
{
	unsigned char *buf = malloc(FS_SIDECAR_TAIL);
	struct stat st;
	size_t want, done = 0;

	if (!buf)
		return -ENOMEM;
	if (fstat(fd, &st) < 0) {
		free(buf);
		return -errno;
	}
	id->codec = codec;
	id->size = (uint64_t)st.st_size;
	id->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
	id->ino = (uint64_t)st.st_ino;
	id->ctime_ns = (uint64_t)st.st_ctim.tv_sec * 1000000000u + (uint64_t)st.st_ctim.tv_nsec;
	want = id->size < FS_SIDECAR_TAIL ? (size_t)id->size : FS_SIDECAR_TAIL;
	while (done < want) {
		ssize_t n = pread(fd, buf + done, want - done, (off_t)(id->size - want + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			free(buf);
			return n < 0 ? -errno : -EIO; /* shorter than it said: it changes */
		}
		done += (size_t)n;
	}
	id->tail_fnv = disk_fnv64(buf, want);
	free(buf);
	return 0;
}

/* ---- the store's reads, given up with their request -----------------------
 * The sidecar and its shard's tail are read from the store for the request
 * that builds the shard's index (fs_shard_index), which its sender may give
 * up (fs_op_stop_on): the read then ends with -EINTR within
 * CACHETIER_STOP_TICK_MS, as the build's reads of the shard do. It runs as
 * backend_read_version_async (a small read, as backend_pread_version's) and
 * the request waits for it with cachetier_request_wait; given up, the
 * request leaves, its buffer is no longer written (the sink's next piece, or
 * its len-0 call at least about once a second, stops the transfer), and the
 * read's done frees what is left. A thread without a stop (a mount's
 * imagefolder build) reads with backend_pread_version. */
struct sc_get {
	struct disk_mutex lock; /* DISK_LOCK_SIDECAR_GET: everything below (a leaf) */
	pthread_cond_t cond;
	unsigned char *buf; /* the caller's; NULL once it gave up */
	size_t len;
	uint64_t off;
	uint64_t bytes;
	int err, done, refs; /* refs: the caller's and the read's */
};

static void sc_get_put(struct sc_get *g)
{
	int last;

	disk_mutex_lock(&g->lock);
	last = --g->refs == 0;
	disk_mutex_unlock(&g->lock);
	if (!last)
		return;
	pthread_cond_destroy(&g->cond);
	disk_mutex_destroy(&g->lock);
	free(g);
}

static int sc_get_sink(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct sc_get *g = arg;
	int err = 0;

	disk_mutex_lock(&g->lock);
	if (!g->buf)
		err = -EINTR; /* the request gave up: stop the transfer */
	else if (off < g->off || off - g->off > g->len || len > g->len - (off - g->off))
		err = -EIO; /* not the range asked for */
	else if (len)
		memcpy(g->buf + (off - g->off), buf, len);
	disk_mutex_unlock(&g->lock);
	return err;
}

static void sc_get_done(void *arg, int err, uint64_t bytes)
{
	struct sc_get *g = arg;

	disk_mutex_lock(&g->lock);
	g->err = err;
	g->bytes = bytes;
	g->done = 1;
	pthread_cond_broadcast(&g->cond);
	disk_mutex_unlock(&g->lock);
	sc_get_put(g);
}

static int sc_get_ended(void *arg)
{
	return ((struct sc_get *)arg)->done;
}

/* backend_pread_version of key, given up with the calling thread's request
 * (-EINTR within CACHETIER_STOP_TICK_MS of its stop). */
static ssize_t sidecar_pread(struct fs *fs, const char *key, const char *etag, uint64_t size,
			     void *buf, size_t len, uint64_t off)
{
	struct sc_get *g;
	ssize_t n;
	int err;

	if (!cachetier_request_stoppable())
		return backend_pread_version(fs->be, key, etag, size, buf, len, off);
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	disk_mutex_init(&g->lock, DISK_LOCK_SIDECAR_GET);
	pthread_cond_init(&g->cond, NULL);
	g->buf = buf;
	g->len = len;
	g->off = off;
	g->refs = 2;
	backend_read_version_async(fs->be, key, etag, size, off, len, BACKEND_READ_SMALL,
				   sc_get_sink, g, sc_get_done, g);
	disk_mutex_lock(&g->lock);
	err = cachetier_request_wait(&g->cond, &g->lock, NULL, sc_get_ended, g);
	if (err < 0)
		g->buf = NULL; /* the read's sink writes it no more */
	n = err < 0 ? err : g->err < 0 ? g->err : (ssize_t)g->bytes;
	disk_mutex_unlock(&g->lock);
	sc_get_put(g);
	return n;
}

/* ---- the HEAD of a brace pattern's sidecar name, given up with its request ----
 * A name a brace pattern gave without its size (fs_learn.c) is learned by a
 * HEAD before its sidecar can be read. For a request with a stop that HEAD
 * runs on a thread of its own (fs_obj_learn there, detached) and the request
 * waits for it with cachetier_request_wait: given up, it leaves within
 * CACHETIER_STOP_TICK_MS and the HEAD goes on; its answer is learned as any
 * other's. fs_close waits for these threads first (fs_sidecar_drain). */
struct sc_head {
	struct disk_mutex lock; /* DISK_LOCK_SIDECAR_GET: err, done, refs (a leaf) */
	pthread_cond_t cond;
	struct fs *fs;
	uint32_t obj;
	int err, done, refs; /* refs: the caller's and the thread's */
};

static void sc_head_put(struct sc_head *h)
{
	int last;

	disk_mutex_lock(&h->lock);
	last = --h->refs == 0;
	disk_mutex_unlock(&h->lock);
	if (!last)
		return;
	pthread_cond_destroy(&h->cond);
	disk_mutex_destroy(&h->lock);
	free(h);
}

static void *sc_head_run(void *arg)
{
	struct sc_head *h = arg;
	struct fs *fs = h->fs;
	int err = fs_obj_learn(fs, h->obj);

	disk_mutex_lock(&h->lock);
	h->err = err;
	h->done = 1;
	pthread_cond_broadcast(&h->cond);
	disk_mutex_unlock(&h->lock);
	sc_head_put(h);				 /* h may be freed: fs kept from it */
	atomic_fetch_sub(&fs->sidecar_heads, 1); /* the last touch: fs_sidecar_drain */
	return NULL;
}

static int sc_head_ended(void *arg)
{
	return ((struct sc_head *)arg)->done;
}

/* fs_obj_learn of obj, given up with the calling thread's request (-EINTR
 * within CACHETIER_STOP_TICK_MS of its stop). */
static int sidecar_learn(struct fs *fs, uint32_t obj)
{
	struct sc_head *h;
	pthread_attr_t at;
	pthread_t th;
	int err;

	if (!cachetier_request_stoppable() ||
	    atomic_load_explicit(&fs_obj(fs, obj)->known, memory_order_acquire) != FS_INFO_LAZY)
		return fs_obj_learn(fs, obj);
	h = calloc(1, sizeof(*h));
	if (!h)
		return fs_obj_learn(fs, obj);
	disk_mutex_init(&h->lock, DISK_LOCK_SIDECAR_GET);
	pthread_cond_init(&h->cond, NULL);
	h->fs = fs;
	h->obj = obj;
	h->refs = 2;
	atomic_fetch_add(&fs->sidecar_heads, 1);
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&th, &at, sc_head_run, h);
	pthread_attr_destroy(&at);
	if (err) { /* no thread: asked here, as without a stop */
		atomic_fetch_sub(&fs->sidecar_heads, 1);
		h->refs = 1;
		sc_head_put(h);
		return fs_obj_learn(fs, obj);
	}
	disk_mutex_lock(&h->lock);
	err = cachetier_request_wait(&h->cond, &h->lock, NULL, sc_head_ended, h);
	if (err == 0)
		err = h->err;
	disk_mutex_unlock(&h->lock);
	sc_head_put(h);
	return err;
}

int fs_sidecar_drain(struct fs *fs)
{
	/* each HEAD is bounded by the store's retry budget; past the bound
	 * the caller keeps what the thread may still touch; another mount's
	 * HEADs (one process, two fs) are not waited for */
	for (int i = 0; i < FS_THREAD_JOIN_S * 100 && atomic_load(&fs->sidecar_heads) > 0; i++) {
		struct timespec t = {0, 10 * 1000 * 1000};

		nanosleep(&t, NULL);
	}
	return atomic_load(&fs->sidecar_heads) > 0 ? -ETIMEDOUT : 0;
}

/* The identity sidecar buf says it was made for, and whether shard object
 * o is that shard now: 0, -ESTALE (another shard or version), or an error
 * reading the shard. */
static int sidecar_ident_check(struct fs *fs, const struct fs_obj *o, int codec, const void *buf,
			       size_t len, char *ident, size_t identsize, size_t *identlen)
{
	struct fs_sidecar_id id = {0};
	const void *stored;
	size_t slen;
	int err = shardidx_ident(buf, len, &stored, &slen);

	if (err < 0)
		return err;
	if (slen < 18 || memcmp(stored, "shardfs-sidecar|3|", 18) != 0)
		return slen >= 16 && memcmp(stored, "shardfs-sidecar|", 16) == 0 ? -EPROTO
										 : -ESTALE;
	if (backend_is_local(fs->be)) {
		int fd = backend_open_fd(fs->be, o->key);

		if (fd < 0)
			return fd;
		err = fs_sidecar_id_fd(fd, codec, &id);
		close(fd);
		if (err < 0)
			return err;
		if (id.size != o->info.size)
			return -ESTALE; /* not the version listed: a read will say so */
	} else {
		unsigned char *tail = malloc(FS_SIDECAR_TAIL);
		size_t want =
		    o->info.size < FS_SIDECAR_TAIL ? (size_t)o->info.size : FS_SIDECAR_TAIL;
		ssize_t n;
		unsigned long long sz, ino, mt, ct;
		unsigned long long tf;
		char cname[8];

		if (!tail)
			return -ENOMEM;
		n = sidecar_pread(fs, o->key, o->info.etag, o->info.size, tail, want,
				  o->info.size - want);
		if (n == (ssize_t)want)
			id.tail_fnv = disk_fnv64(tail, want);
		free(tail);
		if (n != (ssize_t)want)
			return n < 0 ? (int)n : -EIO;
		/* the local fields are the writer's: take them as stored */
		if (slen >= identsize)
			return -ESTALE;
		memcpy(ident, stored, slen);
		ident[slen] = '\0';
		if (sscanf(ident, "shardfs-sidecar|3|%7[a-z?]|%llu|%16llx|%llu|%llu|%llu", cname,
			   &sz, &tf, &mt, &ino, &ct) != 6)
			return -ESTALE;
		id.codec = codec;
		id.size = o->info.size;
		id.mtime_ns = mt;
		id.ino = ino;
		id.ctime_ns = ct;
	}
	err = fs_sidecar_ident(&id, ident, identsize, identlen);
	if (err < 0)
		return err;
	return *identlen == slen && memcmp(ident, stored, slen) == 0 ? 0 : -ESTALE;
}

/* Does the tar header before entry e's data describe e? 1, 0, or -EINTR
 * (the request gave up: sidecar_pread). */
static int sidecar_header_ok(struct cachetier_obj *stream, const struct shardidx_entry *e)
{
	unsigned char h[512];
	ssize_t n;

	/* a probe: the first member's header is at the shard's start, where
	 * a read would start a whole readahead window */
	if (e->data_off < 512)
		return 0;
	n = fetch_pread_probe(stream, h, 512, e->data_off - 512);
	if (n == -EINTR)
		return -EINTR;
	return n == 512 && shardidx_header_describes(h, e);
}

/* Check the first and the last regular, non-sparse member against the
 * shard: 1, 0, or -EINTR. An index with sparse members is not used: their
 * headers are not just before their data, so a read could not check them
 * (fs_member_read). */
static int sidecar_matches(const struct shardidx *ix, struct cachetier_obj *stream)
{
	struct shardidx_info info;
	struct shardidx_entry e;
	uint32_t first = SHARDIDX_NONE, last = SHARDIDX_NONE;
	int ok;

	shardidx_get_info(ix, &info);
	for (uint32_t i = 0; i < info.nentries; i++) {
		if (shardidx_entry_get(ix, i, &e) < 0)
			return 0;
		if (e.type == SHARDIDX_REG && (e.flags & SHARDIDX_F_SPARSE))
			return 0;
		if (e.type != SHARDIDX_REG || e.canon != i || (e.flags & SHARDIDX_F_TRUNCATED))
			continue;
		if (first == SHARDIDX_NONE)
			first = i;
		last = i;
	}
	if (first == SHARDIDX_NONE)
		return 1; /* nothing to compare; the size matched */
	shardidx_entry_get(ix, first, &e);
	ok = sidecar_header_ok(stream, &e);
	if (ok <= 0)
		return ok;
	shardidx_entry_get(ix, last, &e);
	return sidecar_header_ok(stream, &e);
}

int fs_sidecar_load(struct fs *fs, const struct fs_obj *o, int codec, struct cachetier_obj *stream,
		    struct shardidx **out, uint32_t *sobj)
{
	char name[512], ident[256];
	const struct fs_dirent *d;
	const struct fs_obj *so;
	uint32_t sidx;
	struct shardidx *ix = NULL;
	struct shardidx_info info;
	size_t identlen;
	ssize_t n;
	void *buf;
	int len = snprintf(name, sizeof(name), "%s.idx", o->base), err;

	*out = NULL;
	if (len < 0 || (size_t)len >= sizeof(name))
		return 0;
	fs_ns_rdlock(fs);
	d = fs_ns_lookup(fs, o->dir, name, (size_t)len);
	so = d && d->kind == FS_K_OBJ ? fs_obj(fs, d->idx) : NULL;
	sidx = so ? d->idx : 0;
	fs_ns_unlock(fs);
	if (so) {
		err = sidecar_learn(fs, sidx);
		if (err == -EINTR)
			return err; /* its request gave up during the HEAD */
		if (err < 0)
			so = NULL; /* a brace pattern's name the store does not have */
	}
	if (so && atomic_load(&o->sidecar_rejected))
		return 0; /* a read proved it wrong (fs_shard_reject): build */
	if (!so || so->info.size == 0 || so->info.size > (1ull << 31))
		return 0;
	buf = malloc(so->info.size);
	if (!buf)
		return 0;
	n = sidecar_pread(fs, so->key, so->info.etag, so->info.size, buf, so->info.size, 0);
	if (n != (ssize_t)so->info.size) {
		free(buf);
		err = n < 0 ? (int)n : -EIO;
	} else {
		err = sidecar_ident_check(fs, o, codec, buf, (size_t)n, ident, sizeof(ident),
					  &identlen);
		if (err == 0)
			err = shardidx_load(buf, (size_t)n, ident, identlen, &ix);
		else
			free(buf);
	}
	if (err == 0) {
		shardidx_get_info(ix, &info);
		err = info.stream_size != cachetier_obj_size(stream) ? -ESTALE
								     : sidecar_matches(ix, stream);
		err = err == 1 ? 0 : err == 0 ? -ESTALE : err;
		if (err < 0) {
			shardidx_free(ix);
			ix = NULL;
		}
	}
	if (err == -EINTR)
		return err; /* its request gave up: nothing said of the sidecar */
	if (err < 0) {
		fs->c.index_sidecar_rejected++;
		fs_log(FS_LOG_WARN, "shard %s: sidecar index %s ignored (%s); building the index",
		       o->key, so->key,
		       err == -ESTALE	? "stale: made for another shard or version"
		       : err == -EPROTO ? "an older format"
					: strerror(-err));
		return 0;
	}
	fs->c.index_sidecar++;
	*sobj = sidx;
	*out = ix;
	return 0;
}
