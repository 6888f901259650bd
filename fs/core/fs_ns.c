/*
 * fs_ns.c — the namespace of the source: directories, objects, shards.
 *
 * Built at mount from the backend's listing; a refresh lists the source
 * again and applies the difference by versions, so an inode number never
 * changes its meaning (inodes are computed from object and shard indexes):
 *  - an object whose key and ETag are unchanged keeps its index;
 *  - a new key gets a new object (and shard) index at the end;
 *  - a changed object (another ETag; for local files size, mtime, ctime or
 *    inode) is marked stale and its key gets a new object at the end, with
 *    a new shard index, so its old inodes answer ESTALE and the new ones
 *    are indexed again from the new bytes;
 *  - a removed key's object is marked gone (ESTALE for its old inodes, its
 *    name is no longer listed: ENOENT).
 *
 * Objects, shards, their keys and names are never freed before unmount: a
 * FUSE thread may be using any of them (old shard indexes and streams
 * too); entry arrays are only used under the read lock, so the old ones
 * are freed right after the swap.
 *
 * This file: the shard suffixes, the lock, building at mount, refresh, the
 * kept listing of a brace pattern's mount, unmount, and lookups by name.
 * The rest, one concern a file (sharing through fs_ns_i.h):
 *   fs_ns_list.c   one listing of the source, its sorting, the listing kept
 *                  in the cache directory for offline mounts
 *   fs_ns_apply.c  applying a listing: objects and shards, merge, publish,
 *                  settle
 *   fs_ns_dir.c    the directories a listing makes and their entries (name
 *                  conflicts)
 *   fs_ns_obj.c    object versions: stale marks, checks, fs_ns_replace
 *
 * Non-goals: no I/O of its own beyond the backend's listing and the cache
 * tier's blobs; shard indexes are fs_shard.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_ns_i.h"

static const struct {
	const char *suffix;
	int codec;
} shard_suffixes[] = {
    {".tar", CACHETIER_RAW},
    {".tar.gz", CACHETIER_GZIP},
    {".tgz", CACHETIER_GZIP},
    {".tar.zst", CACHETIER_ZSTD},
};

int fs_ns_shard_suffix(const char *name, size_t *dirlen)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(shard_suffixes) / sizeof(shard_suffixes[0]); i++) {
		size_t s = strlen(shard_suffixes[i].suffix);

		if (n > s && strcmp(name + n - s, shard_suffixes[i].suffix) == 0) {
			*dirlen = n - s;
			return shard_suffixes[i].codec;
		}
	}
	return -1;
}

int fs_ns_new(struct fs_ns **out)
{
	struct fs_ns *ns = calloc(1, sizeof(*ns));

	*out = ns;
	if (!ns)
		return -ENOMEM;
	disk_mutex_init(&ns->refresh_lock, DISK_LOCK_NS_REFRESH);
	/* readers may take it twice (readdirplus asks attributes of
	 * directories while listing one): a ranked rwlock prefers readers, so a
	 * waiting writer does not block them */
	disk_rwlock_init(&ns->ns_lock, DISK_LOCK_NS);
	return 0;
}

void fs_ns_free(struct fs_ns *ns)
{
	if (!ns)
		return;
	disk_rwlock_destroy(&ns->ns_lock);
	disk_mutex_destroy(&ns->refresh_lock);
	free(ns);
}

void fs_ns_rdlock(struct fs *fs)
{
	disk_rwlock_rdlock(&fs->ns->ns_lock);
}

void fs_ns_unlock(struct fs *fs)
{
	disk_rwlock_unlock(&fs->ns->ns_lock);
}

/* The kept listing of a brace pattern's mount: every live object whose
 * info it learned, and for the names it did not ask for, what the listing
 * kept before had (so that mounts that learn different shards add up). */
int fs_ns_keep_learned(struct fs *fs)
{
	struct listing old = {0}, l = {0};
	uint32_t n = fs->nobjs, ncur = 0, j = 0, learned = 0;
	uint32_t *cur;
	int err = 0;

	if (!fs->lazy || fs->offline || backend_is_local(fs->be))
		return 0;
	cur = malloc(((size_t)n + 1) * sizeof(*cur));
	if (!cur)
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++)
		if (fs_obj_live(fs_obj(fs, k)))
			cur[ncur++] = k;
	qsort_r(cur, ncur, sizeof(*cur), fs__ns_obj_key_cmp, fs);
	if (fs__ns_listing_load(fs, &old, 0) == 0)
		fs__ns_listing_sort(&old);
	for (uint32_t k = 0; k < ncur && err == 0; k++) {
		const struct fs_obj *o = fs_obj(fs, cur[k]);
		int known = atomic_load_explicit(&o->known, memory_order_acquire);
		int c = 1;

		while (j < old.n && (c = strcmp(old.v[j].key, o->key)) < 0)
			j++;
		if (known == FS_INFO_KNOWN) {
			err = fs__ns_list_cb(&l, &o->info);
			learned++;
		} else if (known == FS_INFO_LAZY && j < old.n && c == 0) {
			err = fs__ns_list_cb(&l, &old.v[j].info);
		}
	}
	if (err == 0 && learned)
		err = fs__ns_listing_save(fs, &l);
	fs__ns_listing_free(&old);
	fs__ns_listing_free(&l);
	free(cur);
	return err;
}

int fs_ns_build(struct fs *fs)
{
	struct listing l = {0};
	int err = fs__ns_init(fs);

	if (err < 0)
		return err;
	err = fs__ns_list(fs, &l, 1);
	if (err == 0) {
		disk_mutex_lock(&fs->ns->refresh_lock);
		err = fs__ns_apply(fs, &l, 1);
		disk_mutex_unlock(&fs->ns->refresh_lock);
	}
	fs__ns_listing_free(&l);
	return err;
}

int fs_ns_refresh(struct fs *fs)
{
	struct listing l = {0};
	int err;

	/* one refresh at a time: a second one waits and lists again */
	disk_mutex_lock(&fs->ns->refresh_lock);
	err = fs__ns_list(fs, &l, 0);
	if (err == 0) {
		err = fs__ns_apply(fs, &l, 0);
		if (err == 0)
			fs->offline = 0;
	} else if (backend_local_source(fs->be) &&
		   (err == -ENOENT || err == -ENOTDIR || err == -EACCES)) {
		/* the path each listing opens again (backend_local.c) */
		fs_log(FS_LOG_WARN,
		       "refresh of %s failed: the source directory %s %s (%s); the mount shows "
		       "what it showed, read from the directory its last listing found (moved "
		       "away: still read; removed: only what the cache holds)",
		       backend_describe(fs->be), backend_local_source(fs->be),
		       err == -ENOENT	 ? "is gone"
		       : err == -ENOTDIR ? "is no longer a directory"
					 : "cannot be opened",
		       strerror(-err));
	} else {
		fs_log(FS_LOG_WARN, "refresh of %s failed: %s; the mount shows what it showed",
		       backend_describe(fs->be), strerror(-err));
	}
	disk_mutex_unlock(&fs->ns->refresh_lock);
	fs__ns_listing_free(&l);
	return err;
}

void fs_ns_clear(struct fs *fs)
{
	uint32_t nobjs = fs->nobjs, nshards = fs->nshards;

	for (uint32_t i = 0; i < fs->ndirs; i++) {
		free(fs->dirs[i].name);
		free(fs->dirs[i].ents);
	}
	free(fs->dirs);
	for (uint32_t i = 0; i < nshards; i++) {
		free(fs_shard(fs, i)->dirname);
		disk_mutex_destroy(&fs_shard(fs, i)->lock);
	}
	for (uint32_t i = 0; i < nobjs; i++) {
		free(fs_obj(fs, i)->key);
		disk_mutex_destroy(&fs_obj(fs, i)->lock);
	}
	for (uint32_t b = 0; fs->objs && b < FS_NBLOCKS; b++) {
		free(fs->objs[b]);
		free(fs->shards[b]);
	}
	free(fs->objs);
	free(fs->shards);
	fs->dirs = NULL;
	fs->shards = NULL;
	fs->objs = NULL;
	fs->ndirs = fs->nshards = fs->nobjs = 0;
}

/* What fs__bsearch_name seeks, for disk_bsearch. */
struct name_key {
	const char *base;
	size_t stride, name_off;
	const char *name;
	size_t len;
};

static int name_key_cmp(const void *ctx, size_t i)
{
	const struct name_key *k = ctx;
	const char *m;

	memcpy(&m, k->base + i * k->stride + k->name_off, sizeof(m));
	return fs_name_cmp(m, k->name, k->len);
}

int64_t fs__bsearch_name(const void *base, size_t stride, size_t name_off, uint32_t lo, uint32_t hi,
			 const char *name, size_t len)
{
	struct name_key k = {base, stride, name_off, name, len};
	int found;
	size_t i = disk_bsearch(lo, hi, name_key_cmp, &k, &found);

	return found ? (int64_t)i : -1;
}

const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len)
{
	const struct fs_dir *d = &fs->dirs[dir];
	int64_t i = fs__bsearch_name(d->ents, sizeof(d->ents[0]), offsetof(struct fs_dirent, name),
				     0, d->nents, name, len);

	return i < 0 ? NULL : &d->ents[i];
}
