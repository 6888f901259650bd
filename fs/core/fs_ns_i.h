/*
 * fs_ns_i.h — private to fs_ns*.c, the files of the namespace (fs_ns.c
 * lists them): a listing of the source, the directories of a refresh and
 * the functions one file calls in another (prefix fs__ns_). Nothing else
 * includes it; the namespace's interface for the rest of the core is
 * fs_ns.h.
 */
#ifndef FS_NS_I_H
#define FS_NS_I_H

#include <pthread.h>
#include <stdint.h>

#include "disk_lock.h"
#include "fs_view.h"

/* The namespace's locks (fs_ns.h; lock order there): fs->ns, from fs_open
 * to fs_close. */
struct fs_ns {
	struct disk_mutex refresh_lock; /* DISK_LOCK_NS_REFRESH */
	/* Objects a lookup dropped (removed) since the last refresh
	 * (fs_ns_replace): the next refresh counts them, as it would have had
	 * they still been named (replaced ones: changed_since_refresh). Under
	 * refresh_lock. */
	uint32_t replaced_removed;
	struct disk_rwlock ns_lock; /* DISK_LOCK_NS */
};

/* One listing of the source (fs_ns_list.c). */

struct lent {
	char *key;
	struct backend_objinfo info; /* info.key == key */
};

/* A local source's empty directory (backend_objinfo.dir): shown, with
 * its own mtime; d is the directory fs__ns_ap_place made of it. */
struct ldir {
	char *path;
	int64_t mtime;
	uint32_t d;
};

struct listing {
	struct lent *v;
	uint32_t n, cap;
	struct ldir *dirs; /* empty directories (a local source's only) */
	uint32_t ndirs, dircap;
};

/* A directory as a refresh computes it. */
struct ndir {
	char *name; /* new directories only (owned until published) */
	uint32_t parent;
	struct fs_dirent *ents;
	uint32_t nents, cap, nsubdirs;
	int64_t mtime;
	int live;
	mode_t perm; /* permission bits shown (fs__ns_ap_perms) */
};

struct apply {
	struct fs *fs;
	struct ndir *d; /* [0, old_ndirs) existing, then new ones */
	uint32_t nd, cap, old_ndirs;
	uint32_t *live; /* live objects in key order */
	uint32_t nlive;
	uint32_t *stale; /* objects this refresh replaced or removed */
	uint8_t *stale_why;
	uint32_t nstale;
	uint32_t added, removed, changed, shards_changed;
	uint32_t hidden;   /* entries hidden by a name conflict */
	struct listing *l; /* the listing applied (its empty directories) */
};

/* fs_ns_list.c */
int fs__ns_list_cb(void *arg, const struct backend_objinfo *info);
void fs__ns_listing_free(struct listing *l);
int fs__ns_listing_save(struct fs *fs, const struct listing *l);
int fs__ns_listing_load(struct fs *fs, struct listing *l, int quiet);
void fs__ns_listing_sort(struct listing *l);
int fs__ns_list(struct fs *fs, struct listing *l, int initial);

/* fs_ns_apply.c */
int fs__ns_init(struct fs *fs);
int fs__ns_obj_append(struct fs *fs, const struct lent *e, uint32_t n, uint32_t *idx);
int fs__ns_shard_append(struct fs *fs, uint32_t obj, uint32_t n);
int fs__ns_apply(struct fs *fs, struct listing *l, int initial);

/* fs_ns_dir.c */
uint64_t fs__ns_dir_ino(uint32_t d);
int fs__ns_obj_key_cmp(const void *a, const void *b, void *arg);
int fs__ns_ap_place(struct apply *ap);
int fs__ns_ap_entries(struct apply *ap);
void fs__ns_ap_perms(struct apply *ap);
void fs__ns_notify_dir_diff(struct fs *fs, uint32_t d, const struct fs_dirent *a, uint32_t na,
			    const struct fs_dirent *b, uint32_t nb);

/* fs_ns_obj.c */
/* New version no of an object whose ETag is new at every answer (a real
 * change of it): unusable still, its ETag emptied under --weak-etag trust. */
void fs__ns_obj_etag_unusable(struct fs *fs, struct fs_obj *no);
/* 1 when info (a listing's entry, a HEAD's answer) names the version object
 * o is: o's info is known and backend_version_same says so, o's ETag and
 * info's taken as none when o's ETag is new at every answer (etag_unusable:
 * its version is then its size and mtime, as a store's without ETags). The
 * refresh (listing_same), a lookup's replace and the check of a local file
 * ask this and nothing else. */
int fs__ns_obj_same(const struct fs_obj *o, const struct backend_objinfo *info);
int64_t fs__ns_dir_entry_of(const struct fs_dir *d, const char *name, uint8_t kind, uint32_t idx);

#endif
