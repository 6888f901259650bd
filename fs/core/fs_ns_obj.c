/*
 * fs_ns_obj.c — object versions: marking an object stale (changed or
 * removed under the mount) and queueing the invalidations of its inodes,
 * checking a local object against the source (a stat), and fs_ns_replace,
 * which a lookup calls to put a new version of one object in place of a
 * stale one (or to remove it) without a whole refresh; it notices a store
 * whose ETag is new at every answer (etag_flips), whose objects' reads then
 * fail with EPROTO unless --weak-etag trust. Whether a listing's entry or
 * a HEAD is the version an object is: fs__ns_obj_same, the one rule
 * (backend_version_same) that the refresh and the lookups ask.
 *
 * Non-goals: a whole refresh (fs_ns.c, fs_ns_apply.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_ns_i.h"

/* Mark obj (fs_obj_mark_stale, fs_obj_mark_reindex); source: the source
 * changed it (logged and counted as a change), else its index was dropped
 * (its caller logged why). */
static void obj_mark(struct fs *fs, uint32_t obj, enum fs_obj_state why, int source)
{
	struct fs_obj *o = fs_obj(fs, obj);
	int live = FS_OBJ_LIVE;
	uint64_t dino = fs__ns_dir_ino(o->dir);

	if (!atomic_compare_exchange_strong(&o->state, &live, (int)why))
		return; /* marked already */
	fs->c.stale_noticed++;
	if (source) {
		fs->c.source_changes++;
		fs_log(FS_LOG_INFO, "%s %s under the mount: ESTALE for the old version", o->key,
		       why == FS_OBJ_GONE ? "was removed" : "changed");
	}
	fs_notify_inode(fs, fs_ino(FS_K_OBJ, obj, 0));
	fs_notify_entry(fs, dino, o->base, strlen(o->base));
	if (o->codec >= 0 && why == FS_OBJ_GONE)
		fs_shard_forget(fs, o->key); /* nothing would ever sweep its blobs */
	if (o->codec >= 0) {
		const struct fs_shard *s = fs_shard(fs, o->shard);
		struct shardidx *ix = atomic_load(&s->ix);
		struct shardidx_info info = {0};

		if (ix)
			shardidx_get_info(ix, &info);
		fs_notify_inode(fs, fs_ino(FS_K_SHARD, o->shard, 0));
		fs_notify_entry(fs, dino, s->dirname, strlen(s->dirname));
		/* members the kernel may hold pages of: only a loaded index
		 * ever handed out member inodes */
		if (info.nentries)
			fs_notify_shard(fs, o->shard, info.nentries);
	}
}

void fs_obj_mark_stale(struct fs *fs, uint32_t obj, enum fs_obj_state why)
{
	obj_mark(fs, obj, why, 1);
}

void fs_obj_mark_reindex(struct fs *fs, uint32_t obj)
{
	obj_mark(fs, obj, FS_OBJ_STALE, 0);
}

int fs_obj_check(struct fs *fs, uint32_t obj)
{
	struct fs_obj *o = fs_obj(fs, obj);
	struct backend_objinfo info;
	int err;

	if (!fs_obj_live(o))
		return -ESTALE;
	if (!backend_is_local(fs->be))
		return 0;
	err = backend_stat(fs->be, o->key, &info);
	if (err == -ENOENT || err == -EISDIR) {
		fs_obj_mark_stale(fs, obj, FS_OBJ_GONE);
		return -ESTALE;
	}
	if (err < 0)
		return err;
	if (!fs__ns_obj_same(o, &info)) {
		fs_obj_mark_stale(fs, obj, FS_OBJ_STALE);
		return -ESTALE;
	}
	return 0;
}

/* Entry of directory d named name with kind and index idx: its position,
 * or -1. ns_lock held. */
int64_t fs__ns_dir_entry_of(const struct fs_dir *d, const char *name, uint8_t kind, uint32_t idx)
{
	int64_t i = fs__bsearch_name(d->ents, sizeof(d->ents[0]), offsetof(struct fs_dirent, name),
				     0, d->nents, name, strlen(name));

	return i >= 0 && d->ents[i].kind == kind && d->ents[i].idx == idx ? i : -1;
}

/* fs__ns_obj_same, with o's ETag also taken as unusable when unusable is
 * set (a HEAD that just found it so: etag_flips). */
static int obj_same(const struct fs_obj *o, const struct backend_objinfo *info, int unusable)
{
	unusable = unusable || o->etag_unusable;
	if (atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_KNOWN)
		return 0;
	return backend_version_same(unusable ? "" : o->info.etag, o->info.size, o->info.mtime,
				    unusable ? "" : info->etag, info->size, info->mtime);
}

int fs__ns_obj_same(const struct fs_obj *o, const struct backend_objinfo *info)
{
	return obj_same(o, info, 0);
}

/* The new version (info) of object o, appended as object *nidx (with its
 * shard), in o's directory: 0 or -errno. refresh_lock held. */
static int ns_replace_append(struct fs *fs, const struct fs_obj *o,
			     const struct backend_objinfo *info, int etag_unusable, uint32_t *nidx)
{
	uint32_t n = fs->nobjs, ns = fs->nshards;
	/* an ETag new at every answer is no change (etag_flips) */
	int same = obj_same(o, info, etag_unusable);
	struct fs_obj *no;
	struct lent e;
	int err;

	e.key = o->key;
	e.info = *info;
	e.info.key = o->key;
	err = fs__ns_obj_append(fs, &e, n, nidx);
	if (err)
		return err;
	no = fs_obj(fs, *nidx);
	no->dir = o->dir;
	/* the same version whose sidecar a read proved wrong: build */
	if (same)
		no->sidecar_rejected = atomic_load(&o->sidecar_rejected);
	/* changed since the last refresh, unless this is the same version
	 * again (a sidecar a read proved wrong) */
	no->changed_since_refresh = o->changed_since_refresh || !same;
	no->etag_unusable = etag_unusable;
	err = fs__ns_shard_append(fs, *nidx, ns);
	if (err < 0)
		return err;
	atomic_store_explicit(&fs->nobjs, n + 1, memory_order_release);
	atomic_store_explicit(&fs->nshards, ns + (err > 0 ? 1u : 0u), memory_order_release);
	return 0;
}

/* Object obj's entries in its directory (its name, and its shard's
 * directory sdname or NULL) name the new version no (index nidx), or are
 * dropped when no is NULL (removed). Takes ns_lock. */
static void ns_replace_entries(struct fs *fs, uint32_t obj, const char *sdname,
			       const struct fs_obj *no, uint32_t nidx)
{
	const struct fs_obj *o = fs_obj(fs, obj);
	struct fs_dir *d;
	int64_t oi, si;

	disk_rwlock_wrlock(&fs->ns->ns_lock);
	d = &fs->dirs[o->dir];
	oi = fs__ns_dir_entry_of(d, o->base, FS_K_OBJ, obj);
	si = sdname ? fs__ns_dir_entry_of(d, sdname, FS_K_SHARD, o->shard) : -1;
	if (no) { /* the same names, the new version's indexes */
		if (oi >= 0)
			d->ents[oi] = (struct fs_dirent){no->base, FS_K_OBJ, nidx};
		if (si >= 0)
			d->ents[si] = (struct fs_dirent){fs_shard(fs, no->shard)->dirname,
							 FS_K_SHARD, no->shard};
		for (uint32_t x = o->dir;; x = fs->dirs[x].parent) {
			if (fs->dirs[x].mtime < no->info.mtime)
				fs->dirs[x].mtime = no->info.mtime;
			if (x == 0)
				break;
		}
	} else { /* removed: drop its entries, the later one first */
		int64_t hi = si > oi ? si : oi, lo = si > oi ? oi : si;

		for (int k = 0; k < 2; k++) {
			int64_t at = k == 0 ? hi : lo;

			if (at < 0)
				continue;
			memmove(&d->ents[at], &d->ents[at + 1],
				(d->nents - (uint32_t)at - 1) * sizeof(d->ents[0]));
			d->nents--;
		}
		if (si >= 0)
			d->nsubdirs--;
	}
	disk_rwlock_unlock(&fs->ns->ns_lock);
}

/* HEADs in a row that must each answer a new ETag at the same size and
 * mtime before an object's ETag is taken as unusable (etag_flips): the
 * first is the one that replaces a version a read found changed; a real
 * rewrite that keeps the size and mtime would have to land between each
 * two of these back-to-back requests too, while a server whose ETag is new
 * at every answer (a counter, a request id) otherwise loops for ever: read,
 * ESTALE, relearn, read, ESTALE. Three costs two more HEADs, once. */
#define FS_ETAG_PROBES 3

/* 1 when the store's ETag of o cannot tell a version: o was found so
 * (etag_unusable belongs to the object's name, not to one version: a real
 * change of size or mtime keeps it, with no more HEADs), or info, the HEAD
 * that replaces o (a version a read found changed), has o's size and mtime
 * and another ETag, and FS_ETAG_PROBES - 1 more HEADs each answer yet
 * another ETag at that size and mtime. info is the last answer. 0: a
 * change as any other. refresh_lock held (not ns_lock): the HEADs wait
 * for the store under it, each bounded as any request (docs/architecture.md,
 * the lock order, says the bound). */
static int etag_flips(struct fs *fs, const struct fs_obj *o, struct backend_objinfo *info)
{
	if (o->etag_unusable)
		return 1;
	if (backend_is_local(fs->be) ||
	    atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_KNOWN ||
	    info->size != o->info.size || info->mtime != o->info.mtime ||
	    strcmp(info->etag, o->info.etag) == 0)
		return 0;
	for (int k = 1; k < FS_ETAG_PROBES; k++) {
		struct backend_objinfo again;
		int flipped;

		if (backend_stat(fs->be, o->key, &again) < 0)
			return 0;
		flipped = again.size == info->size && again.mtime == info->mtime &&
			  strcmp(again.etag, info->etag) != 0;
		*info = again;
		if (!flipped)
			return 0;
	}
	return 1;
}

/* o's new version (info) has an ETag that changes at every answer
 * (etag_flips): counted and said once per mount, the first object named.
 * Under --weak-etag trust its version is its size and mtime (info->etag
 * emptied: fills send no If-Match and compare no ETag), else reads fail with
 * EPROTO (fs_obj_raw). */
static void etag_unusable(struct fs *fs, const struct fs_obj *o, struct backend_objinfo *info)
{
	int trust = fs->cfg.ct.weak_etag_trust;

	if (!o->etag_unusable) {
		fs->c.etag_unusable++;
		if (!atomic_exchange(&fs->etag_unusable_said, 1))
			fs_log(FS_LOG_WARN,
			       "%s: the server answered %d %s in a row with a new ETag (the "
			       "last %s) at the same size (%" PRIu64 " bytes) and Last-Modified: "
			       "its ETag cannot tell one version of the object from another, %s "
			       "(objects found so are counted in etag_unusable)",
			       o->key, FS_ETAG_PROBES,
			       fs_plural(FS_ETAG_PROBES, "request", "requests"), info->etag,
			       info->size,
			       trust ? "so --weak-etag trust takes its size and Last-Modified as "
				       "its version"
				     : "so its bytes cannot be checked and reads of it fail with "
				       "EPROTO; mount with --weak-etag trust to take its size and "
				       "Last-Modified as its version");
	}
	if (trust)
		info->etag[0] = '\0';
}

void fs__ns_obj_etag_unusable(struct fs *fs, struct fs_obj *no)
{
	no->etag_unusable = 1;
	if (fs->cfg.ct.weak_etag_trust)
		no->info.etag[0] = '\0';
}

int fs_ns_replace(struct fs *fs, uint32_t obj)
{
	struct fs_obj *o = fs_obj(fs, obj), *no = NULL;
	const char *sdname = o->codec >= 0 ? fs_shard(fs, o->shard)->dirname : NULL;
	struct backend_objinfo info;
	uint32_t nidx = 0;
	int err, listed, gone, flips = 0;

	disk_mutex_lock(&fs->ns->refresh_lock);
	fs_ns_rdlock(fs);
	listed =
	    fs__ns_dir_entry_of(&fs->dirs[o->dir], o->base, FS_K_OBJ, obj) >= 0 ||
	    (sdname && fs__ns_dir_entry_of(&fs->dirs[o->dir], sdname, FS_K_SHARD, o->shard) >= 0);
	fs_ns_unlock(fs);
	if (!listed) { /* replaced or removed already: look again */
		disk_mutex_unlock(&fs->ns->refresh_lock);
		return 0;
	}
	err = backend_stat(fs->be, o->key, &info);
	gone = err == -ENOENT || err == -EISDIR;
	if (err < 0 && !gone)
		goto out;
	if (!gone && fs_obj_live(o) && fs__ns_obj_same(o, &info)) {
		err = 0; /* unchanged after all */
		goto out;
	}
	/* a remote object read as stale that the store lists as the same
	 * version: its bytes changed under its ETag (a weak or mtime-derived
	 * one, cachetier_read.c), so the index saved for that ETag is of the
	 * old bytes: built again (a sidecar a read proved wrong: below) */
	if (!gone && o->codec >= 0 && !backend_is_local(fs->be) && fs__ns_obj_same(o, &info) &&
	    !atomic_load(&o->sidecar_rejected))
		fs_shard_forget(fs, o->key);
	if (!gone && (flips = etag_flips(fs, o, &info)) != 0)
		etag_unusable(fs, o, &info);
	if (!gone) {
		err = ns_replace_append(fs, o, &info, flips, &nidx);
		if (err < 0)
			goto out;
		no = fs_obj(fs, nidx);
	}
	ns_replace_entries(fs, obj, sdname, no, nidx);
	if (!no)
		fs->ns->replaced_removed++; /* counted by the next refresh */
	atomic_fetch_add(&fs->total_bytes, (no ? no->info.size : 0) - fs_obj_size(o));
	fs_obj_mark_stale(fs, obj, no ? FS_OBJ_STALE : FS_OBJ_GONE);
	fs_notify_inode(fs, fs__ns_dir_ino(o->dir));
	if (o->codec >= 0 && fs_layout_of(fs)->shards_changed)
		fs_layout_of(fs)->shards_changed(fs);
	err = 0;
out:
	disk_mutex_unlock(&fs->ns->refresh_lock);
	return err;
}
