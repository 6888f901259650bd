/*
 * fs_ns_apply.c — applying a listing to the namespace: new objects and
 * shards, the merge of the new listing with the current objects by
 * versions (fs_ns.c says the rules), publishing the new directories and
 * entries, and settling (kernel invalidations, freeing the old entries).
 *
 * Directories keep their index by path; one without any object below is
 * marked gone. Every directory's entries are computed again from the live
 * objects and swapped in under the write lock of ns_lock; what changed
 * is then invalidated in the kernel (entries, directory listings, the
 * inodes and page caches of stale objects and their members) through the
 * notifier thread (fs_notify.c).
 *
 * Non-goals: listing the source (fs_ns_list.c); computing a directory's
 * entries (fs_ns_dir.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_ns_i.h"

int fs__ns_init(struct fs *fs)
{
	/* the locks are fs_open's (fs_core.c) */
	if (fs->objs)
		return 0;
	fs->objs = calloc(FS_NBLOCKS, sizeof(*fs->objs));
	fs->shards = calloc(FS_NBLOCKS, sizeof(*fs->shards));
	if (!fs->objs || !fs->shards)
		return -ENOMEM;
	return 0;
}

/* A new object for listing entry e (not yet in any directory), at index
 * fs->nobjs; the count is published by the caller. refresh_lock held. */
int fs__ns_obj_append(struct fs *fs, const struct lent *e, uint32_t n, uint32_t *idx)
{
	struct fs_obj *o;

	if (n >= FS_MAX_SHARDS)
		return -EFBIG;
	if (!fs->objs[n >> FS_BLOCK_SHIFT]) {
		fs->objs[n >> FS_BLOCK_SHIFT] = calloc(FS_BLOCK, sizeof(struct fs_obj));
		if (!fs->objs[n >> FS_BLOCK_SHIFT])
			return -ENOMEM;
	}
	o = fs_obj(fs, n);
	memset(o, 0, sizeof(*o));
	o->key = strdup(e->key);
	if (!o->key)
		return -ENOMEM;
	o->info = e->info;
	o->info.key = o->key;
	o->base = strrchr(o->key, '/');
	o->base = o->base ? o->base + 1 : o->key;
	o->codec = -1;
	atomic_init(&o->known, e->info.name_only ? FS_INFO_LAZY : FS_INFO_KNOWN);
	disk_mutex_init(&o->lock, DISK_LOCK_OBJ);
	*idx = n;
	return 0;
}

/* Make object obj a shard at index n (the caller publishes the count). */
int fs__ns_shard_append(struct fs *fs, uint32_t obj, uint32_t n)
{
	struct fs_obj *o = fs_obj(fs, obj);
	struct fs_shard *s;
	size_t dl;

	o->codec = fs_ns_shard_suffix(o->base, &dl);
	if (o->codec < 0)
		return 0;
	if (n >= FS_MAX_SHARDS)
		return -EFBIG;
	if (!fs->shards[n >> FS_BLOCK_SHIFT]) {
		fs->shards[n >> FS_BLOCK_SHIFT] = calloc(FS_BLOCK, sizeof(struct fs_shard));
		if (!fs->shards[n >> FS_BLOCK_SHIFT])
			return -ENOMEM;
	}
	s = fs_shard(fs, n);
	memset(s, 0, sizeof(*s));
	s->obj = obj;
	s->dirname = strndup(o->base, dl);
	if (!s->dirname)
		return -ENOMEM;
	disk_mutex_init(&s->lock, DISK_LOCK_SHARD);
	o->shard = n;
	return 1;
}

/* The objects the mount shows, in key order: the live ones, and old
 * versions that a read or lookup found changed or removed while their name
 * still leads to them (nothing looked the name up since), so that the
 * refresh reports them as changed or removed, not as new or not at all.
 * cur has room for fs->nobjs; returns how many. */
static uint32_t ap_current(struct fs *fs, uint32_t *cur)
{
	uint32_t ncur = 0;

	for (uint32_t k = 0; k < fs->nobjs; k++) {
		const struct fs_obj *o = fs_obj(fs, k);

		if (fs_obj_live(o) ||
		    (o->dir < fs->ndirs &&
		     fs__ns_dir_entry_of(&fs->dirs[o->dir], o->base, FS_K_OBJ, k) >= 0))
			cur[ncur++] = k;
	}
	qsort_r(cur, ncur, sizeof(*cur), fs__ns_obj_key_cmp, fs);
	return ncur;
}

/* Does listing entry e show the version object o is? A name-only entry
 * (a brace pattern's) does while o is not known to be missing: what a
 * mount learned stays (its changes are noticed through If-Match), and a
 * refresh asks again for a name the store did not have. Any other entry
 * does when fs__ns_obj_same says so (the one version identity: ETag and
 * size, or size and mtime without a usable ETag). So an object whose ETag
 * is new at every answer (etag_unusable) is the same version while its
 * size and mtime are: the listing's new ETag says nothing (else each
 * refresh made a new version, which its next read found changed again:
 * ESTALE and three HEADs a refresh). */
static int listing_same(const struct lent *e, const struct fs_obj *o)
{
	if (e->info.name_only)
		return atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_MISSING;
	return fs__ns_obj_same(o, &e->info);
}

static int lent_key_cmp(const void *key, const void *e)
{
	return strcmp(key, ((const struct lent *)e)->key);
}

/* Did shard object o's index come from a remote sidecar (NAME.idx) that
 * listing l shows changed or removed? Its object is then replaced as a
 * changed one's is, so the next lookup loads the new sidecar (or builds
 * the index) and files opened through the old index get ESTALE. A local
 * sidecar is used only for exactly the file it was made from (its mtime,
 * ctime and inode: fs_shard.c), so an unchanged local shard keeps its
 * index, inodes and all; a remote one's identity (codec, size, tail) may
 * fit another version's sidecar. */
static int sidecar_changed(struct fs *fs, const struct listing *l, const struct fs_obj *o)
{
	const struct fs_shard *s;
	const struct fs_obj *so;
	const struct lent *e;

	if (o->codec < 0 || backend_is_local(fs->be))
		return 0;
	s = fs_shard(fs, o->shard);
	if (!atomic_load_explicit(&s->checked, memory_order_acquire))
		return 0; /* no index yet, or one trusted whole */
	so = fs_obj(fs, s->sidecar_obj);
	e = bsearch(so->key, l->v, l->n, sizeof(*l->v), lent_key_cmp);
	return !e || !listing_same(e, so);
}

/* Merge listing l with the objects the mount shows (cur, ncur), both in
 * key order: unchanged objects stay live, removed and changed ones go to
 * ap->stale, new versions are appended at *nobjs and *nshards (not yet
 * published). */
static int ap_merge(struct apply *ap, const struct listing *l, const uint32_t *cur, uint32_t ncur,
		    uint32_t *nobjs, uint32_t *nshards)
{
	struct fs *fs = ap->fs;
	uint32_t i = 0, j = 0;

	while (i < l->n || j < ncur) {
		struct fs_obj *o = j < ncur ? fs_obj(fs, cur[j]) : NULL;
		int c = i == l->n ? 1 : j == ncur ? -1 : strcmp(l->v[i].key, o->key), err;
		int same = c == 0 && fs_obj_live(o) && listing_same(&l->v[i], o);
		/* the same version, replaced for its sidecar's change (counted
		 * as that sidecar's, unless a lookup replaced it before) */
		int sc = same && sidecar_changed(fs, l, o);
		uint32_t idx;

		if (same && !sc) {
			/* a version a lookup put in place since the last refresh */
			if (o->changed_since_refresh)
				ap->changed++;
			o->changed_since_refresh = 0;
			ap->live[ap->nlive++] = cur[j];
			i++;
			j++;
			continue;
		}
		if (c >= 0) { /* removed, or changed (replaced below) */
			ap->stale[ap->nstale] = cur[j];
			ap->stale_why[ap->nstale++] = c == 0 ? FS_OBJ_STALE : FS_OBJ_GONE;
			if (c > 0)
				ap->removed++;
			else if (!sc || o->changed_since_refresh)
				ap->changed++;
			if (o->codec >= 0)
				ap->shards_changed++;
			j++;
			if (c > 0)
				continue;
		} else {
			ap->added++;
		}
		err = fs__ns_obj_append(fs, &l->v[i], *nobjs, &idx);
		if (err)
			return err;
		(*nobjs)++;
		if (c == 0 && o->etag_unusable) /* a real change: still unusable */
			fs__ns_obj_etag_unusable(fs, fs_obj(fs, idx));
		err = fs__ns_shard_append(fs, idx, *nshards);
		if (err < 0)
			return err;
		if (err > 0) {
			(*nshards)++;
			ap->shards_changed++;
		}
		ap->live[ap->nlive++] = idx;
		i++;
	}
	return 0;
}

/* Publish the new objects and shards, then the directories that name
 * them; the old entry lists of the existing directories go to old_ents
 * and old_n (the caller frees them). */
static int ap_publish(struct apply *ap, uint32_t nobjs, uint32_t nshards,
		      struct fs_dirent **old_ents, uint32_t *old_n)
{
	struct fs *fs = ap->fs;

	atomic_store_explicit(&fs->nobjs, nobjs, memory_order_release);
	atomic_store_explicit(&fs->nshards, nshards, memory_order_release);
	disk_rwlock_wrlock(&fs->ns->ns_lock);
	if (ap->nd > fs->ndirs) {
		struct fs_dir *p = realloc(fs->dirs, ap->nd * sizeof(*p));

		if (!p) {
			disk_rwlock_unlock(&fs->ns->ns_lock);
			return -ENOMEM;
		}
		fs->dirs = p;
		for (uint32_t k = ap->old_ndirs; k < ap->nd; k++) {
			memset(&p[k], 0, sizeof(p[k]));
			p[k].name = ap->d[k].name; /* owned by fs->dirs now */
			ap->d[k].name = NULL;
			p[k].parent = ap->d[k].parent;
		}
	}
	for (uint32_t k = 0; k < ap->nd; k++) {
		struct fs_dir *d = &fs->dirs[k];

		if (k < ap->old_ndirs) {
			old_ents[k] = d->ents;
			old_n[k] = d->nents;
		}
		d->ents = ap->d[k].ents;
		d->nents = ap->d[k].nents;
		d->nsubdirs = ap->d[k].nsubdirs;
		d->mtime = ap->d[k].mtime;
		d->perm = ap->d[k].perm;
		d->gone = !ap->d[k].live;
		ap->d[k].ents = NULL;
	}
	atomic_store(&fs->ndirs, ap->nd);
	disk_rwlock_unlock(&fs->ns->ns_lock);
	return 0;
}

/* After publishing: the old versions give ESTALE from now on and leave
 * the kernel's caches, the totals and (for a refresh) its counters. */
static void ap_settle(struct apply *ap, struct fs_dirent **old_ents, const uint32_t *old_n,
		      int initial)
{
	struct fs *fs = ap->fs;
	uint64_t total = 0;

	for (uint32_t k = 0; k < ap->nstale; k++)
		fs_obj_mark_stale(fs, ap->stale[k], (enum fs_obj_state)ap->stale_why[k]);
	for (uint32_t k = 0; k < ap->nlive; k++)
		total += fs_obj_size(fs_obj(fs, ap->live[k]));
	atomic_store(&fs->total_bytes, total);
	atomic_store(&fs->c.hidden_names, ap->hidden);
	for (uint32_t k = 0; k < ap->old_ndirs; k++) {
		if (!initial)
			fs__ns_notify_dir_diff(fs, k, old_ents[k], old_n[k], fs->dirs[k].ents,
					       fs->dirs[k].nents);
		free(old_ents[k]);
		old_ents[k] = NULL;
	}
	if (initial)
		return;
	fs->c.refreshes++;
	/* what lookups dropped since the last refresh was removed since then
	 * as much as what this one finds (refresh_lock held); what they
	 * replaced, ap_merge counted (changed_since_refresh) */
	ap->removed += fs->ns->replaced_removed;
	fs->ns->replaced_removed = 0;
	fs->c.refresh_added += ap->added;
	fs->c.refresh_removed += ap->removed;
	fs->c.refresh_changed += ap->changed;
	fs_log(FS_LOG_INFO, "refresh of %s: %u new, %u removed, %u changed %s; %u %s, %u %s",
	       backend_describe(fs->be), ap->added, ap->removed, ap->changed,
	       fs_plural(ap->changed, "object", "objects"), ap->nlive,
	       fs_plural(ap->nlive, "object", "objects"), ap->nd,
	       fs_plural(ap->nd, "directory", "directories"));
	if (ap->shards_changed && fs_layout_of(fs)->shards_changed)
		fs_layout_of(fs)->shards_changed(fs);
}

/* Apply listing l (sorted here) to the namespace. refresh_lock held (so
 * no one else changes the directories). */
int fs__ns_apply(struct fs *fs, struct listing *l, int initial)
{
	struct apply ap = {.fs = fs, .l = l};
	uint32_t nobjs = fs->nobjs, nshards = fs->nshards, ncur;
	uint32_t *cur = NULL;
	struct fs_dirent **old_ents = NULL;
	uint32_t *old_n = NULL;
	int err = -ENOMEM;

	fs__ns_listing_sort(l);
	cur = malloc(((size_t)nobjs + 1) * sizeof(*cur));
	ap.live = malloc(((size_t)l->n + 1) * sizeof(*ap.live));
	ap.stale = malloc(((size_t)nobjs + 1) * sizeof(*ap.stale));
	ap.stale_why = malloc((size_t)nobjs + 1);
	ap.old_ndirs = ap.nd = fs->ndirs ? fs->ndirs : 1;
	ap.cap = ap.nd * 2 + 16;
	ap.d = calloc(ap.cap, sizeof(*ap.d));
	old_ents = calloc(ap.old_ndirs + 1, sizeof(*old_ents));
	old_n = calloc(ap.old_ndirs + 1, sizeof(*old_n));
	if (!cur || !ap.live || !ap.stale || !ap.stale_why || !ap.d || !old_ents || !old_n)
		goto out;
	for (uint32_t k = 0; k < fs->ndirs; k++)
		ap.d[k].parent = fs->dirs[k].parent;
	if (!fs->ndirs) { /* the root */
		ap.old_ndirs = 0;
		ap.d[0].name = strdup("");
		if (!ap.d[0].name)
			goto out;
	}
	ncur = ap_current(fs, cur);
	err = ap_merge(&ap, l, cur, ncur, &nobjs, &nshards);
	if (err == 0)
		err = fs__ns_ap_place(&ap);
	if (err == 0)
		err = fs__ns_ap_entries(&ap);
	if (err == 0)
		fs__ns_ap_perms(&ap);
	if (err == 0)
		err = ap_publish(&ap, nobjs, nshards, old_ents, old_n);
	if (err == 0)
		ap_settle(&ap, old_ents, old_n, initial);
out:
	for (uint32_t k = 0; ap.d && k < ap.nd; k++) {
		free(ap.d[k].ents);
		if (k >= ap.old_ndirs)
			free(ap.d[k].name);
	}
	free(ap.d);
	free(ap.live);
	free(ap.stale);
	free(ap.stale_why);
	free(cur);
	free(old_ents);
	free(old_n);
	return err;
}
