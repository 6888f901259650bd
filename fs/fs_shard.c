/*
 * fs_shard.c — joins shardidx and cachetier: a shard's index is loaded on
 * first use, from the cache directory when a valid saved copy exists, else
 * built by reading the shard's (decoded) tar stream.
 *
 * Building reads headers only: the parser says which offset it needs next
 * and member data is skipped, so an index of a local 1 GB shard of 100 KB
 * members costs about 10,000 small reads. The built index is saved to the
 * cache directory (crash-safe) under an identity of key, ETag and codec,
 * so a changed object never gets an old index.
 *
 * Threads: any FUSE thread may ask; s->lock serialises loading of one
 * shard; once published with release semantics, s->ix and s->stream never
 * change until unmount, so readers take no lock.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

/* Index building reads the stream in chunks of INDEX_READ_BYTES. When the
 * parser's next header lies less than INDEX_SKIP_GAP past the end of the
 * last read, reading on sequentially is cheaper than a seek (the kernel's
 * readahead keeps streaming, as for cat); over larger gaps (big members) it
 * seeks, and reads only headers. */
#define INDEX_READ_BYTES (256u * 1024)
#define INDEX_SKIP_GAP (1024u * 1024)

static const char *const codec_names[] = {"raw", "gzip", "zstd"};

static int shard_ident(const struct fs_obj *o, char *buf, size_t size, size_t *len)
{
	int n = snprintf(buf, size, "shardfs-index|%s|%s|%" PRIu64 "|%s", codec_names[o->codec],
			 o->info.etag, o->info.size, o->key);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	*len = (size_t)n;
	return 0;
}

static int shard_build(struct fs *fs, const struct fs_obj *o, struct cachetier_obj *stream,
		       struct shardidx **out)
{
	struct shardidx_builder *b = shardidx_builder_new();
	uint64_t size = cachetier_obj_size(stream);
	uint64_t end = 0; /* stream offset just past the last chunk read */
	char *buf = malloc(INDEX_READ_BYTES);
	int err = 0;

	if (!b || !buf) {
		shardidx_builder_free(b);
		free(buf);
		return -ENOMEM;
	}
	for (;;) {
		/* feeding consumes a whole chunk, so want() never lies before end */
		uint64_t want = shardidx_builder_want(b);
		uint64_t at = want - end < INDEX_SKIP_GAP ? end : want;
		ssize_t n;

		if (want >= size)
			break;
		n = cachetier_obj_pread(stream, buf, INDEX_READ_BYTES, at);
		if (n <= 0) {
			err = (int)n;
			break;
		}
		fs->c.index_bytes_scanned += (uint64_t)n;
		end = at + (uint64_t)n;
		if (want >= end)
			continue; /* all member data: read on */
		err = shardidx_builder_feed(b, buf + (want - at), (size_t)(end - want));
		if (err != 0) {
			if (err < 0)
				fs_log(FS_LOG_WARN, "shard %s: damaged at offset %" PRIu64 ": %s",
				       o->key, shardidx_builder_want(b),
				       shardidx_builder_message(b));
			err = err < 0 && err != -ENOMEM ? 0 : err; /* damage: keep what came before */
			break;
		}
	}
	free(buf);
	if (err < 0) {
		shardidx_builder_free(b);
		return err;
	}
	return shardidx_builder_finish(b, size, out);
}

static void shard_account(struct fs *fs, const struct fs_obj *o, struct shardidx *ix,
			  struct cachetier_obj *stream)
{
	struct shardidx_info info;
	uint64_t doff;
	int derr;

	shardidx_get_info(ix, &info);
	fs->c.members += info.nentries;
	fs->c.skipped_members += info.skipped;
	fs->c.index_mem_bytes += info.mem_bytes;
	derr = cachetier_obj_damage(stream, &doff);
	if (derr < 0)
		fs_log(FS_LOG_WARN, "shard %s: compressed stream damaged at offset %" PRIu64 " (%s); serving the %" PRIu64 " bytes decoded before it",
		       o->key, doff, strerror(-derr), cachetier_obj_size(stream));
	if (info.damage < 0)
		fs_log(FS_LOG_WARN, "shard %s: tar damaged at offset %" PRIu64 " (%s); members before it are served",
		       o->key, info.damage_off, strerror(-info.damage));
	if (info.damage < 0 || derr < 0)
		fs->c.damaged_shards++;
	if (info.skipped)
		fs_log(FS_LOG_WARN, "shard %s: %u members left out (unsafe names or special files)",
		       o->key, info.skipped);
}

static int shard_load(struct fs *fs, struct fs_shard *s)
{
	const struct fs_obj *o = &fs->objs[s->obj];
	struct cachetier_obj *stream = NULL;
	struct shardidx *ix = NULL;
	char ident[4096 + 256], name[4096 + 300];
	size_t identlen, len;
	void *buf;
	int err;

	err = shard_ident(o, ident, sizeof(ident), &identlen);
	if (err < 0)
		return err;
	snprintf(name, sizeof(name), "index|%s", ident);
	err = cachetier_obj_open(fs->ct, &o->info, (enum cachetier_codec)o->codec, &stream);
	if (err < 0) {
		fs_log(FS_LOG_ERR, "shard %s: cannot open: %s", o->key, strerror(-err));
		return err;
	}
	err = cachetier_meta_get(fs->ct, name, &buf, &len);
	if (err == 0) {
		err = shardidx_load(buf, len, ident, identlen, &ix);
		if (err == 0)
			fs->c.index_loaded++;
		else
			fs_log(FS_LOG_WARN, "shard %s: saved index unusable (%s); rebuilding",
			       o->key, strerror(-err));
	}
	if (!ix) {
		err = shard_build(fs, o, stream, &ix);
		if (err < 0) {
			fs->c.index_errors++;
			fs_log(FS_LOG_ERR, "shard %s: cannot index: %s", o->key, strerror(-err));
			cachetier_obj_unref(stream);
			return err;
		}
		fs->c.index_built++;
		err = shardidx_save(ix, ident, identlen, &buf, &len);
		if (err == 0) {
			err = cachetier_meta_put(fs->ct, name, buf, len);
			free(buf);
		}
		if (err < 0) {
			fs->c.index_save_errors++;
			fs_log(FS_LOG_WARN, "shard %s: index not saved: %s", o->key, strerror(-err));
		}
	}
	shard_account(fs, o, ix, stream);
	atomic_store_explicit(&s->stream, stream, memory_order_release);
	atomic_store_explicit(&s->ix, ix, memory_order_release);
	return 0;
}

int fs_shard_index(struct fs *fs, uint32_t shard, struct shardidx **ix,
		   struct cachetier_obj **stream)
{
	struct fs_shard *s = &fs->shards[shard];
	int err = 0;

	*ix = atomic_load_explicit(&s->ix, memory_order_acquire);
	if (!*ix) {
		pthread_mutex_lock(&s->lock);
		if (!atomic_load_explicit(&s->ix, memory_order_acquire))
			err = shard_load(fs, s);
		pthread_mutex_unlock(&s->lock);
		if (err < 0)
			return err;
		*ix = atomic_load_explicit(&s->ix, memory_order_acquire);
	}
	if (stream)
		*stream = atomic_load_explicit(&s->stream, memory_order_acquire);
	return 0;
}

int fs_obj_raw(struct fs *fs, uint32_t obj, struct cachetier_obj **raw)
{
	struct fs_obj *o = &fs->objs[obj];
	int err = 0;

	pthread_mutex_lock(&o->lock);
	if (!o->raw)
		err = cachetier_obj_open(fs->ct, &o->info, CACHETIER_RAW, &o->raw);
	*raw = o->raw;
	pthread_mutex_unlock(&o->lock);
	if (err < 0)
		fs_log(FS_LOG_ERR, "%s: cannot open: %s", o->key, strerror(-err));
	return err;
}

void fs_shards_release(struct fs *fs)
{
	for (uint32_t i = 0; i < fs->nshards; i++) {
		shardidx_free(fs->shards[i].ix);
		cachetier_obj_unref(fs->shards[i].stream);
		fs->shards[i].ix = NULL;
		fs->shards[i].stream = NULL;
	}
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		cachetier_obj_unref(fs->objs[i].raw);
		fs->objs[i].raw = NULL;
	}
}

int fs_obj_prefetch(struct fs *fs, uint32_t obj)
{
	struct cachetier_obj *raw;
	int err = fs_obj_raw(fs, obj, &raw);

	atomic_store(&fs->objs[obj].prefetch, 1);
	fs->c.prefetch_requests++;
	if (err == 0)
		err = cachetier_obj_prefetch(raw);
	if (err < 0) {
		fs->c.prefetch_errors++;
		fs_log(FS_LOG_WARN, "%s: prefetch failed: %s", fs->objs[obj].key, strerror(-err));
	}
	return err;
}

void fs_shard_touch(struct fs *fs, uint32_t shard)
{
	unsigned prev = atomic_exchange(&fs->last_shard, shard + 1);
	uint32_t obj, dir;

	/* only a move to the next shard counts as reading in order */
	if (prev == shard + 1 || prev != shard || fs->cfg.prefetch_shards == 0)
		return;
	obj = fs->shards[shard].obj;
	dir = fs->objs[obj].dir;
	for (uint32_t i = 1; i <= fs->cfg.prefetch_shards && shard + i < fs->nshards; i++) {
		uint32_t next = fs->shards[shard + i].obj;

		if (fs->objs[next].dir != dir)
			break; /* shards of one directory are consecutive */
		if (atomic_load(&fs->objs[next].prefetch))
			continue;
		fs->c.shard_prefetches++;
		fs_obj_prefetch(fs, next);
	}
}
