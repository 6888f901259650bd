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
 * An index is not kept in the heap: its cache file is mapped read-only
 * (cachetier_meta_map), validated once and read in place
 * (shardidx_load_in_place) — one built from the shard is saved, then mapped
 * the same way and its heap copy freed — so a shard costs the heap about
 * 200 bytes however many members it has, and the kernel may drop the pages
 * under memory pressure. The mapped file is watched (cachetier_meta_changed):
 * fs_shard_index asks before it hands a mapped index out (once in a row
 * per shard on a request's thread: fs_shard_index), and one whose
 * file was changed in place is dropped (index_changed; shard_changed). Where
 * no mapping can be made (vm.max_map_count), no watch had (index_unwatched)
 * or the index cannot be saved (a full cache disk: index_unsaved, one log
 * line for the mount), it stays in the heap and is served from there. Sidecar indexes are read
 * from the source into the heap (a file beside the shard may change in
 * place: it is never mapped).
 *
 * The codec is decided by the shard's bytes, as GNU tar and bsdtar do: gzip
 * and zstd by their magic, a plain tar by its first header; the name's
 * suffix only decides that an object is a shard, and the codec only when
 * the bytes are none of these. A saved index under the codec the name
 * suggests is proof enough (it was saved after the bytes were looked at),
 * so a later mount reads nothing; otherwise the first 512 bytes are read
 * through the cache tier (for a remote shard the chunk that indexing or
 * decoding reads next anyway).
 *
 * Threads: any FUSE thread may ask; s->lock serialises loading of one
 * shard; once published with release semantics, s->ix and s->stream never
 * change until unmount, so readers take no lock. A shard the cache tier
 * refuses whole (-EFBIG, -ENOSPC) keeps that error in s->err the same way:
 * never a partial member list that looks complete (docs/design.md section 3).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_i.h"

/* Index building reads the stream in chunks of INDEX_READ_BYTES. When the
 * parser's next header lies less than INDEX_SKIP_GAP past the end of the
 * last read, reading on sequentially is cheaper than a seek (the kernel's
 * readahead keeps streaming, as for cat); over larger gaps (big members) it
 * seeks, and reads only headers. */
#define INDEX_READ_BYTES (256u * 1024)
#define INDEX_SKIP_GAP	 (1024u * 1024)

const char *const fs_codec_names[3] = {"raw", "gzip", "zstd"};

/* The "2" marks indexes whose codec was decided by the shard's bytes; older
 * ones took it from the name and may hold a misnamed shard's index built
 * with the wrong codec, so they are never loaded. The version is
 * backend_version_tag's (the ETag, else size and mtime): a saved index of
 * one version of a store without ETags is never taken for another of the
 * same size; those of versions with an ETag keep their identity. */
static int shard_ident(const struct fs_obj *o, int codec, char *buf, size_t size, size_t *len)
{
	char tag[BACKEND_VERSION_TAG];
	int n;

	backend_version_tag(o->info.etag, o->info.size, o->info.mtime, tag);
	n = snprintf(buf, size, "shardfs-index|2|%s|%s|%" PRIu64 "|%s", fs_codec_names[codec], tag,
		     o->info.size, o->key);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	*len = (size_t)n;
	return 0;
}

/* Fields of the shard's tar headers the parser read past as GNU tar does
 * (a malformed pax mtime): one log line for the shard, when its index is
 * built (a saved index is not logged again), naming the first such member
 * and what was ignored. Not damage: the members' bytes are not in doubt.
 * Members left out are logged by shard_account at every load, the first
 * one named with why (the index keeps it: shardidx_skipped_first). */
static void shard_build_note(const struct fs_obj *o, const struct shardidx_builder *b)
{
	uint32_t n;
	const char *note = shardidx_builder_note(b, &n);

	if (!note[0])
		return;
	if (n > 1)
		fs_log(FS_LOG_WARN, "shard %s: %s (and %u more %s read past)", o->key, note, n - 1,
		       fs_plural(n - 1, "field", "fields"));
	else
		fs_log(FS_LOG_WARN, "shard %s: %s", o->key, note);
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
		n = fetch_pread(fs->fetch, FETCH_READER_SELF, stream, buf, INDEX_READ_BYTES, at);
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
			err =
			    err < 0 && err != -ENOMEM ? 0 : err; /* damage: keep what came before */
			break;
		}
	}
	free(buf);
	if (err < 0) {
		shardidx_builder_free(b);
		return err;
	}
	shard_build_note(o, b);
	return shardidx_builder_finish(b, size, out);
}

/* Counters and log lines of a loaded index; mapped: ix reads a mapping of
 * its cache file in place (else what it reads in place is heap). */
static void shard_account(struct fs *fs, const struct fs_obj *o, struct shardidx *ix, int mapped,
			  struct cachetier_obj *stream)
{
	struct shardidx_info info;
	uint64_t doff;
	int derr;

	shardidx_get_info(ix, &info);
	fs->c.members += info.nentries;
	fs->c.skipped_members += info.skipped;
	fs->c.index_mem_bytes += info.mem_bytes + (mapped ? 0 : info.in_place_bytes);
	if (mapped)
		fs->c.index_mapped_bytes += info.in_place_bytes;
	derr = cachetier_obj_damage(stream, &doff);
	if (derr < 0)
		fs_log(FS_LOG_WARN,
		       "shard %s: compressed stream damaged at offset %" PRIu64
		       " (%s); serving the %" PRIu64 " bytes decoded before it",
		       o->key, doff, strerror(-derr), cachetier_obj_size(stream));
	if (info.damage < 0)
		fs_log(FS_LOG_WARN,
		       "shard %s: tar damaged at offset %" PRIu64
		       " (%s); members before it are served",
		       o->key, info.damage_off, strerror(-info.damage));
	if (info.damage < 0 || derr < 0)
		fs->c.damaged_shards++;
	if (shardidx_skipped_first(ix)[0])
		fs_log(FS_LOG_WARN, "shard %s: the first member left out: %s", o->key,
		       shardidx_skipped_first(ix));
	if (info.skipped)
		fs_log(FS_LOG_WARN,
		       "shard %s: %u %s left out (unsafe names, special files, or a file or "
		       "symlink whose name a later member's path needs as a directory)",
		       o->key, info.skipped, fs_plural(info.skipped, "member", "members"));
}

/* A compressed shard refused whole by the cache tier: -EFBIG (a
 * decompression-bomb bound) or -ENOSPC (no room on the cache disk). Logs
 * which, and what to change; the caller makes the error stick. */
static void shard_refused(struct fs *fs, const struct fs_obj *o, int codec, int err)
{
	struct cachetier_refusal r;
	uint64_t avail, reserve;

	if (err == -ENOSPC) {
		cachetier_disk(fs->ct, &avail, &reserve);
		fs_log(FS_LOG_ERR,
		       "shard %s: not served (ENOSPC): its decoded copy does not fit on the cache "
		       "disk of %s (%" PRIu64 " MiB free, %" PRIu64
		       " MiB of it kept free by --min-free/--min-free-percent); free space on that "
		       "disk or use another --cache-dir, then remount",
		       o->key, cachetier_dir(fs->ct), avail >> 20, reserve >> 20);
	} else if (cachetier_obj_refusal(fs->ct, &o->info, (enum cachetier_codec)codec, &r) < 0) {
		fs_log(FS_LOG_ERR,
		       "shard %s: not served (EFBIG): it decodes past a decompression-bomb bound "
		       "(--max-decode-ratio or --max-decoded-size)",
		       o->key);
	} else if (r.bound == CACHETIER_BOUND_RATIO) {
		fs_log(FS_LOG_ERR,
		       "shard %s: not served (EFBIG): a decompression bomb? its first %" PRIu64
		       " compressed bytes decode to %" PRIu64
		       " bytes, more than --max-decode-ratio (%u) times as many; raise it if the "
		       "shard is genuine",
		       o->key, r.compressed_bytes, r.decoded_bytes, r.max_decode_ratio);
	} else {
		fs_log(FS_LOG_ERR,
		       "shard %s: not served (EFBIG): it decodes to more than %" PRIu64
		       " bytes; raise --max-decoded-size if the shard is genuine",
		       o->key, r.max_decoded_bytes);
	}
}

/* err, the cache tier's failure to open one of o's cache files: -ENOENT
 * there means the file's directory is gone, and a reader told ENOENT of a
 * file 'ls' shows (or ESTALE, of a source that did not change) has no way
 * to know the cause. When the cache directory itself was removed under the
 * mount (rm -rf of the cache, a temp cleaner): counted (cache_dir_removed),
 * said once in the log (which, by default, was in that directory: hence
 * the counter) and -EIO; anything else unchanged. */
static int cache_gone(struct fs *fs, const struct fs_obj *o, int err)
{
	const char *dir = cachetier_dir(fs->ct);
	struct stat st;

	if (err != -ENOENT || !dir || stat(dir, &st) == 0 || errno != ENOENT)
		return err;
	fs->c.cache_dir_gone++;
	if (!atomic_exchange(&fs->cache_gone_said, 1))
		fs_log(FS_LOG_ERR,
		       "%s: cannot open its cache file: the cache directory %s was removed under "
		       "the mount; what is not cached fails with EIO: unmount and mount again",
		       o->key, dir);
	return -EIO;
}

/* The codec of shard s's bytes: gzip or zstd by their magic, a plain tar by
 * its first header, else (unknown bytes, fewer than 512) what the name says. */
static int shard_sniff(struct fs *fs, struct fs_shard *s, int *codec)
{
	const struct fs_obj *o = fs_obj(fs, s->obj);
	struct cachetier_obj *raw;
	unsigned char buf[512];
	ssize_t n;
	int err = fs_obj_raw(fs, s->obj, &raw);

	if (err < 0) {
		fs_log(FS_LOG_ERR, "shard %s: cannot open: %s", o->key, strerror(-err));
		return err;
	}
	/* a probe: a shard with a sidecar index is not read further now; an
	 * index build's own first read starts the readahead */
	n = fetch_pread_probe(raw, buf, sizeof(buf), 0);
	if (n == -EINTR)
		return -EINTR; /* its request gave up (fs_shard_index) */
	if (n < 0) {
		fs_log(FS_LOG_ERR, "shard %s: cannot read its first bytes: %s", o->key,
		       strerror((int)-n));
		return (int)n;
	}
	*codec = cachetier_codec_sniff(buf, (size_t)n);
	if (*codec < 0)
		*codec = shardidx_looks_like_tar(buf, (size_t)n) ? CACHETIER_RAW : o->codec;
	if (*codec != o->codec)
		fs_log(FS_LOG_INFO,
		       "shard %s: its bytes are %s, not %s as its name says; read as %s", o->key,
		       *codec == CACHETIER_RAW ? "a plain tar" : fs_codec_names[*codec],
		       fs_codec_names[o->codec], fs_codec_names[*codec]);
	return 0;
}

/* cachetier_meta_unmap as the release of an index read in place. */
static void index_unmap(void *m)
{
	cachetier_meta_unmap(m);
}

int fs_shard_family(const char *key, const char *kind, char *buf, size_t size)
{
	int n = snprintf(buf, size, "%s|%s", kind, key);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* A shard's index blobs are a family (fs_shard_family): saving the index
 * of a new version removes the older versions' (index_sweep) instead of
 * keeping them for good, since blobs are not in the cache's usage and are
 * never evicted. */
static int index_family(const struct fs_obj *o, char *buf, size_t size)
{
	return fs_shard_family(o->key, FS_SAVED_INDEX, buf, size);
}

void fs_shard_forget(struct fs *fs, const char *key)
{
	char family[4096 + 32];
	unsigned n = 0;

	if (fs_shard_family(key, FS_SAVED_INDEX, family, sizeof(family)) == 0 &&
	    cachetier_meta_sweep(fs->ct, family, NULL, &n) == 0)
		fs->c.index_removed += n;
	n = 0;
	if (fs_shard_family(key, FS_SAVED_CLASSES, family, sizeof(family)) == 0 &&
	    cachetier_meta_sweep(fs->ct, family, NULL, &n) == 0)
		fs->c.if_cls_removed += n;
}

/* The index blob name of family, validated against ident once and then
 * read in place from a read-only mapping (*mapped = 1): its records and
 * names stay in the page cache, the heap holds a few hundred bytes. When no
 * mapping can be made (vm.max_map_count reached...) it is read into the
 * heap (*mapped = 0). 0, -ENOENT (none saved), or why the blob is unusable
 * (shardidx_load's errors); *mapped is set only on 0. */
static int index_cached(struct fs *fs, const char *family, const char *name, const char *ident,
			size_t identlen, struct shardidx **ix, int *mapped)
{
	struct cachetier_meta *m;
	const void *data;
	size_t len;
	void *buf;
	int err = cachetier_meta_map_in(fs->ct, family, name, &m, &data, &len);

	*ix = NULL;
	if (err == 0 && !cachetier_meta_watched(m)) {
		/* a change of the file in place could not be seen: a copy */
		cachetier_meta_unmap(m);
		if (atomic_fetch_add(&fs->c.index_unwatched, 1) == 0)
			fs_log(FS_LOG_WARN,
			       "saved index %s: its file cannot be watched for changes (no "
			       "inotify instance or watch left: fs.inotify.max_user_instances, "
			       "max_user_watches); it and the next ones are read into memory "
			       "(index_unwatched counts them)",
			       name);
		err = -ENOSYS;
	}
	if (err == 0) {
		err = shardidx_load_in_place(data, len, ident, identlen, index_unmap, m, ix);
		*mapped = err == 0;
		return err;
	}
	if (err == -ENOENT || err == -EBADMSG)
		return err;
	err = cachetier_meta_get_in(fs->ct, family, name, &buf, &len);
	if (err == 0)
		err = shardidx_load(buf, len, ident, identlen, ix);
	*mapped = 0;
	return err;
}

/* The index saved in the cache directory under ident, or NULL. An index
 * an earlier release saved outside the family is moved into it first. */
static struct shardidx *shard_saved(struct fs *fs, const struct fs_obj *o, const char *ident,
				    size_t identlen, int *mapped)
{
	struct shardidx *ix;
	char name[4096 + 300], family[4096 + 32];
	int err;

	if (index_family(o, family, sizeof(family)) < 0)
		return NULL;
	snprintf(name, sizeof(name), "index|%s", ident);
	err = index_cached(fs, family, name, ident, identlen, &ix, mapped);
	if (err == -ENOENT && cachetier_meta_adopt(fs->ct, family, name) == 0)
		err = index_cached(fs, family, name, ident, identlen, &ix, mapped);
	if (err == 0) {
		fs->c.index_loaded++;
	} else if (err != -ENOENT) {
		fs->c.index_saved_rejected++;
		fs_log(FS_LOG_WARN, "shard %s: saved index unusable (%s); rebuilding", o->key,
		       err == -EPROTO ? "another version" : strerror(-err));
	}
	return ix;
}

/* Remove the indexes of the shard's other versions (and codecs) from its
 * family, keeping name, the one just saved. Daemons that map a removed
 * blob keep its bytes (an unlink); one that needs that version again
 * builds it again. */
static void index_sweep(struct fs *fs, const struct fs_obj *o, const char *family, const char *name)
{
	unsigned n = 0;
	int err = cachetier_meta_sweep(fs->ct, family, name, &n);

	fs->c.index_removed += n;
	if (err < 0)
		fs_log(FS_LOG_WARN, "shard %s: cannot remove the indexes of older versions: %s",
		       o->key, strerror(-err));
}

/* Tries of a save whose blob was changed between its put and its mapping
 * (a file cut or written in place in that moment): after them the heap copy
 * is served and the damaged file is built again by a later mount. */
#define SHARD_SAVE_TRIES 3

/* Save the index built from the shard in the cache directory, then read
 * it from there in place: the heap copy the build made is freed. When
 * either fails, *ix stays the heap copy. A blob found damaged when mapped
 * right after its put (changed in place in between) is put again, at most
 * SHARD_SAVE_TRIES times, so that what the cache directory holds does not
 * stay damaged while the mount serves the heap copy. */
static void shard_save(struct fs *fs, const struct fs_obj *o, const char *name, const char *ident,
		       size_t identlen, struct shardidx **ix, int *mapped)
{
	char family[4096 + 32];
	struct shardidx *mix;
	size_t len;
	void *buf = NULL;
	int err = index_family(o, family, sizeof(family));

	if (err == 0)
		err = shardidx_save(*ix, ident, identlen, &buf, &len);
	for (int t = 0; err == 0 && t < SHARD_SAVE_TRIES; t++) {
		err = cachetier_meta_put_in(fs->ct, family, name, buf, len);
		if (err < 0)
			break;
		index_sweep(fs, o, family, name);
		err = index_cached(fs, family, name, ident, identlen, &mix, mapped);
		if (err == 0) {
			free(buf);
			shardidx_free(*ix);
			*ix = mix;
			return;
		}
		err = 0; /* unusable as mapped (changed in place, swept): put again */
	}
	free(buf);
	if (err == -ENOSPC || err == -EDQUOT) {
		/* a full cache disk: the index is served from the heap; one line
		 * for the mount, however many shards meet it */
		if (atomic_fetch_add(&fs->c.index_unsaved, 1) == 0)
			fs_log(FS_LOG_WARN,
			       "shard %s: index not saved: the cache disk of %s is full (%s); it "
			       "and the next shards' indexes are kept in memory and served "
			       "(index_unsaved counts them), built again by a later mount",
			       o->key, cachetier_dir(fs->ct), strerror(-err));
		return;
	}
	if (err < 0) {
		fs->c.index_save_errors++;
		fs_log(FS_LOG_WARN, "shard %s: index not saved: %s", o->key, strerror(-err));
	}
}

static int shard_load(struct fs *fs, struct fs_shard *s)
{
	const struct fs_obj *o = fs_obj(fs, s->obj);
	struct cachetier_obj *stream = NULL;
	struct shardidx *ix = NULL;
	char ident[4096 + 256], name[4096 + 300];
	size_t identlen;
	int codec = o->codec, mapped = 0, err;

	err = shard_ident(o, codec, ident, sizeof(ident), &identlen);
	if (err < 0)
		return err;
	ix = shard_saved(fs, o, ident, identlen, &mapped);
	if (!ix) {
		err = shard_sniff(fs, s, &codec);
		if (err == 0 && codec != o->codec) {
			err = shard_ident(o, codec, ident, sizeof(ident), &identlen);
			if (err == 0)
				ix = shard_saved(fs, o, ident, identlen, &mapped);
		}
		if (err < 0) {
			/* logged by shard_sniff; counted, so that a view or a
			 * listing that goes on without the shard says so (not
			 * when its request gave up: fs_shard_index) */
			if (err != -EINTR)
				fs->c.index_errors++;
			return err;
		}
	}
	snprintf(name, sizeof(name), "index|%s", ident);
	err = cachetier_obj_open(fs->ct, &o->info, (enum cachetier_codec)codec, &stream);
	if (err < 0 && codec != CACHETIER_RAW && (err == -EFBIG || err == -ENOSPC)) {
		/* whole or error: every lookup, readdir and read of the shard's
		 * members fails with this errno from now on */
		shardidx_free(ix);
		fs->c.index_errors++;
		shard_refused(fs, o, codec, err);
		atomic_store_explicit(&s->err, err, memory_order_release);
		return err;
	}
	if (err < 0) {
		shardidx_free(ix);
		fs->c.index_errors++;
		err = cache_gone(fs, o, err);
		fs_log(FS_LOG_ERR, "shard %s: cannot open: %s", o->key, strerror(-err));
		return err;
	}
	if (!ix) {
		err = fs_sidecar_load(fs, o, codec, stream, &ix, &s->sidecar_obj);
		if (err == -EINTR) { /* its request gave up (fs_shard_index) */
			cachetier_obj_unref(stream);
			return err;
		}
		if (ix) {
			/* trusted per member only once its tar header checks out */
			struct shardidx_info info;
			_Atomic uint64_t *checked;

			shardidx_get_info(ix, &info);
			checked = calloc(((size_t)info.nentries + 63) / 64 + 1, sizeof(*checked));
			if (!checked) {
				shardidx_free(ix);
				ix = NULL;
			}
			atomic_store_explicit(&s->checked, checked, memory_order_release);
		}
	}
	if (!ix) {
		err = shard_build(fs, o, stream, &ix);
		if (err == -EINTR) { /* its request gave up (fs_shard_index) */
			cachetier_obj_unref(stream);
			return err;
		}
		if (err < 0) {
			fs->c.index_errors++;
			fs_log(FS_LOG_ERR, "shard %s: cannot index: %s", o->key, strerror(-err));
			cachetier_obj_unref(stream);
			return err;
		}
		fs->c.index_built++;
		shard_save(fs, o, name, ident, identlen, &ix, &mapped);
	}
	shard_account(fs, o, ix, mapped, stream);
	s->meta = mapped ? shardidx_release_arg(ix) : NULL;
	s->codec = codec;
	atomic_store_explicit(&s->stream, stream, memory_order_release);
	atomic_store_explicit(&s->ix, ix, memory_order_release);
	return 0;
}

/* The file of shard's mapped index changed in place (cachetier_meta_changed):
 * the index is dropped as a disproved sidecar is (the object's version is
 * marked stale; the next lookup, or fs_shards_replace_rejected, puts a
 * version in its place whose index is built from the shard), without
 * replacing the object here: a caller may hold the imagefolder lock.
 * Returns -ESTALE. */
static int shard_changed(struct fs *fs, uint32_t shard)
{
	struct fs_shard *s = fs_shard(fs, shard);

	if (atomic_exchange(&s->rejected, 1))
		return -ESTALE; /* another request did it */
	fs->c.index_changed++;
	fs_log(FS_LOG_WARN,
	       "shard %s: its saved index in the cache directory was changed in place under "
	       "the mount (written, truncated or punched); it is dropped and built again from "
	       "the shard, files opened through it get ESTALE",
	       fs_obj(fs, s->obj)->key);
	fs_obj_mark_reindex(fs, s->obj);
	return -ESTALE;
}

/* The calling thread's FUSE request (fs_shard_request_begin; 0: not a
 * request thread) and the last index check it made: of which shard, in
 * which request, and that it passed (req 0: none to go by). */
static _Thread_local uint64_t shard_req;
static _Thread_local struct {
	uint64_t req;
	const struct fs *fs;
	uint32_t shard;
} last_check;

void fs_shard_request_begin(void)
{
	shard_req++;
	last_check.req = 0;
}

int fs_shard_index_unchanged(struct fs *fs, uint32_t shard)
{
	struct fs_shard *s = fs_shard(fs, shard);

	if (!s->meta)
		return 0;
	fs->c.index_checks++;
	if (cachetier_meta_changed(s->meta) != 0) {
		last_check.req = 0;
		return shard_changed(fs, shard);
	}
	last_check.req = shard_req;
	last_check.fs = fs;
	last_check.shard = shard;
	return 0;
}

static int shard_built(void *arg)
{
	return !atomic_load_explicit(&((struct fs_shard *)arg)->building, memory_order_acquire);
}

/* A request with a stop (fs_op_stop_on: a FUSE lookup, open, listing or
 * read) that finds another thread building s's index waits for the build's
 * end here, looking at its stop every CACHETIER_STOP_TICK_MS, rather than
 * on s->lock, which the builder holds across the store: -EINTR once its
 * sender gave up (the build goes on for the others), else 0 when no build
 * is under way (or the builder's own request gave it up: this one then
 * builds). A request without a stop waits on s->lock as before. */
static int shard_build_wait(struct fs *fs, struct fs_shard *s)
{
	int err;

	if (shard_built(s) || !cachetier_request_stoppable())
		return 0;
	disk_mutex_lock(&fs->built_lock);
	err = cachetier_request_wait(&fs->built_cond, &fs->built_lock, NULL, shard_built, s);
	disk_mutex_unlock(&fs->built_lock);
	if (err)
		fs->c.index_waits_interrupted++;
	return err;
}

int fs_shard_index(struct fs *fs, uint32_t shard, struct shardidx **ix,
		   struct cachetier_obj **stream)
{
	struct fs_shard *s = fs_shard(fs, shard);
	int err = 0;

	/* an old version: its index may be loaded, but its bytes are gone */
	if (!fs_obj_live(fs_obj(fs, s->obj)))
		return -ESTALE;
	*ix = atomic_load_explicit(&s->ix, memory_order_acquire);
	if (!*ix) {
		/* a brace pattern's shard: its size and ETag first */
		err = fs_obj_learn(fs, s->obj);
		if (err < 0)
			return err;
		err = atomic_load_explicit(&s->err, memory_order_acquire);
		if (err < 0)
			return err;
		err = shard_build_wait(fs, s);
		if (err < 0)
			return err;
		disk_mutex_lock(&s->lock);
		err = atomic_load_explicit(&s->err, memory_order_acquire);
		if (err == 0 && !atomic_load_explicit(&s->ix, memory_order_acquire)) {
			/* The build is the request's: given up with it
			 * (fs_op_stop_on: its reads of the shard end with
			 * -EINTR within CACHETIER_STOP_TICK_MS; the fills
			 * they started go on into the cache). What it parsed
			 * is dropped, nothing is recorded (s->err stays 0),
			 * and a waiter woken below, or the next request,
			 * builds again from the cached bytes: a build handed
			 * to a thread of its own would outlive every request
			 * that wanted it, and one that no one waits for is
			 * not worth its store's bytes. */
			atomic_store_explicit(&s->building, 1, memory_order_release);
			err = shard_load(fs, s);
			if (err == -EINTR)
				fs->c.index_builds_interrupted++;
			disk_mutex_lock(&fs->built_lock);
			atomic_store_explicit(&s->building, 0, memory_order_release);
			pthread_cond_broadcast(&fs->built_cond);
			disk_mutex_unlock(&fs->built_lock);
		}
		disk_mutex_unlock(&s->lock);
		if (err < 0)
			return err;
		*ix = atomic_load_explicit(&s->ix, memory_order_acquire);
	}
	/* A mapped index's file changed in place since it was validated:
	 * nothing more is read from it. This check serves "a change made
	 * before a request's first check is seen by that request" (the
	 * watch's fds are read at the request's first check) and keeps a
	 * known-changed file from being read. It is skipped when the last
	 * check this thread made was of this shard, in this FUSE request, and
	 * passed (a listing's getattrs: each one's closing check is followed
	 * by the next one's opening): it would ask the same watch, whose fds
	 * are not read again in the request, so the request's first check
	 * was made and nothing new can be learnt but a guard hit or another
	 * thread's read, which the operation's own check after it read the
	 * index (fs_shard_index_unchanged, before it answers) sees; that
	 * closing check serves "a change during the request gives ESTALE or
	 * the old answer, never a mix" and is never skipped. Threads outside
	 * a request (shard_req 0) always check. */
	if (!shard_req || last_check.req != shard_req || last_check.fs != fs ||
	    last_check.shard != shard) {
		err = fs_shard_index_unchanged(fs, shard);
		if (err < 0)
			return err;
	}
	if (stream)
		*stream = atomic_load_explicit(&s->stream, memory_order_acquire);
	return 0;
}

int fs_obj_raw(struct fs *fs, uint32_t obj, struct cachetier_obj **raw)
{
	struct fs_obj *o = fs_obj(fs, obj);
	int err = fs_obj_learn(fs, obj);

	if (err < 0) {
		if (err != -ENOENT)
			fs_log(FS_LOG_ERR, "%s: cannot open: %s", o->key, strerror(-err));
		return err;
	}
	/* its ETag changes at every answer (fs_ns_replace said so once) */
	if (o->etag_unusable && !fs->cfg.ct.weak_etag_trust)
		return -EPROTO;
	disk_mutex_lock(&o->lock);
	if (!o->raw)
		err = cachetier_obj_open(fs->ct, &o->info, CACHETIER_RAW, &o->raw);
	*raw = o->raw;
	disk_mutex_unlock(&o->lock);
	if (err < 0)
		err = cache_gone(fs, o, err);
	if (err < 0)
		fs_log(FS_LOG_ERR, "%s: cannot open: %s", o->key, strerror(-err));
	return err;
}

int fs_shard_unchecked(struct fs *fs, uint32_t shard, uint32_t idx)
{
	_Atomic uint64_t *checked =
	    atomic_load_explicit(&fs_shard(fs, shard)->checked, memory_order_acquire);

	return checked && !(atomic_load_explicit(&checked[idx / 64], memory_order_relaxed) &
			    (1ull << (idx % 64)));
}

void fs_shard_mark_checked(struct fs *fs, uint32_t shard, uint32_t idx)
{
	_Atomic uint64_t *checked =
	    atomic_load_explicit(&fs_shard(fs, shard)->checked, memory_order_acquire);

	if (checked)
		atomic_fetch_or_explicit(&checked[idx / 64], 1ull << (idx % 64),
					 memory_order_relaxed);
}

/* Reject shard's sidecar index (fs_shard_reject): 1 when this call did,
 * 0 when another had. */
static int shard_reject(struct fs *fs, uint32_t shard, const struct shardidx_entry *e,
			const char *why)
{
	struct fs_shard *s = fs_shard(fs, shard);
	struct fs_obj *o = fs_obj(fs, s->obj);

	if (atomic_exchange(&s->rejected, 1))
		return 0; /* another read did it */
	atomic_store(&o->sidecar_rejected, 1);
	fs->c.index_rejected_on_read++;
	fs_log(FS_LOG_WARN,
	       "shard %s: its sidecar index is wrong: the tar header before member %s's data at "
	       "offset %" PRIu64 " %s; the index is rejected and built from the shard, files "
	       "opened through it get ESTALE",
	       o->key, e->name, e->data_off, why);
	fs_obj_mark_reindex(fs, s->obj);
	return 1;
}

/* Replace shard's object by a version whose index is built from the shard. */
static void shard_replace(struct fs *fs, uint32_t shard)
{
	const struct fs_obj *o = fs_obj(fs, fs_shard(fs, shard)->obj);
	int err = fs_ns_replace(fs, fs_shard(fs, shard)->obj);

	if (err < 0)
		fs_log(FS_LOG_WARN,
		       "shard %s: cannot look at its new version now (%s); the next "
		       "lookup does",
		       o->key, strerror(-err));
}

int fs_shard_reject(struct fs *fs, uint32_t shard, const struct shardidx_entry *e, const char *why)
{
	if (shard_reject(fs, shard, e, why))
		shard_replace(fs, shard);
	return -ESTALE;
}

int fs_shard_reject_deferred(struct fs *fs, uint32_t shard, const struct shardidx_entry *e,
			     const char *why)
{
	shard_reject(fs, shard, e, why);
	return -ESTALE;
}

void fs_shards_replace_rejected(struct fs *fs)
{
	uint32_t n = atomic_load_explicit(&fs->nshards, memory_order_acquire);

	for (uint32_t i = 0; i < n; i++)
		if (atomic_load(&fs_shard(fs, i)->rejected))
			shard_replace(fs, i); /* no-op once replaced (not listed) */
}

void fs_shards_release(struct fs *fs)
{
	for (uint32_t i = 0; i < fs->nshards; i++) {
		struct fs_shard *s = fs_shard(fs, i);

		free((void *)s->checked);
		s->checked = NULL;
		shardidx_free(s->ix);
		cachetier_obj_unref(s->stream);
		s->ix = NULL;
		s->stream = NULL;
	}
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		cachetier_obj_unref(fs_obj(fs, i)->raw);
		fs_obj(fs, i)->raw = NULL;
	}
}

int fs_obj_prefetch(struct fs *fs, uint32_t obj)
{
	struct cachetier_obj *raw;
	int err = fs_obj_raw(fs, obj, &raw), none = 0;

	/* a prefetch run's tag (fs_ctl.c) stays */
	atomic_compare_exchange_strong(&fs_obj(fs, obj)->prefetch, &none, 1);
	fs->c.prefetch_requests++;
	if (err == 0)
		err = fetch_obj_fill(fs->fetch, raw, 1);
	if (err < 0) {
		fs->c.prefetch_errors++;
		fs_log(FS_LOG_WARN, "%s: prefetch failed: %s", fs_obj(fs, obj)->key,
		       strerror(-err));
	}
	return err;
}

/* fs_shard_touch's answer to the scheduler: shard next of the directory
 * of the shard read (fetch_next_shard_fn). */
struct touch_ctx {
	struct fs *fs;
	uint32_t dir;
};

static int touch_next(void *arg, uint32_t next, struct cachetier_obj **raw)
{
	struct touch_ctx *t = arg;
	struct fs *fs = t->fs;
	uint32_t obj;

	if (next >= fs->nshards)
		return -1;
	obj = fs_shard(fs, next)->obj;
	/* shards of one directory are consecutive (those a refresh added
	 * come at the end) */
	if (fs_obj(fs, obj)->dir != t->dir)
		return -1;
	if (atomic_exchange(&fs_obj(fs, obj)->ahead, 1) || !fs_obj_live(fs_obj(fs, obj)))
		return 0;
	if (fs_obj_raw(fs, obj, raw) < 0)
		*raw = NULL;
	return 1;
}

void fs_shard_touch(struct fs *fs, uint32_t reader, uint32_t shard)
{
	struct touch_ctx t = {fs, fs_obj(fs, fs_shard(fs, shard)->obj)->dir};

	/* --prefetch-shards 0: the reader's cursor still moves, nothing is
	 * fetched */
	fs->c.shard_prefetches +=
	    fetch_shards_ahead(fs->fetch, reader, shard, fs->cfg.prefetch_shards, touch_next, &t);
}
