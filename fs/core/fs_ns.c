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
 * Directories keep their index by path; one without any object below is
 * marked gone. Every directory's entries are computed again from the live
 * objects and swapped in under the write lock of fs->ns_lock; what changed
 * is then invalidated in the kernel (entries, directory listings, the
 * inodes and page caches of stale objects and their members) through the
 * notifier thread (fs_notify.c).
 *
 * Objects, shards, their keys and names are never freed before unmount: a
 * FUSE thread may be using any of them (old shard indexes and streams
 * too); entry arrays are only used under the read lock, so the old ones
 * are freed right after the swap.
 *
 * Name conflicts (a real directory "x", a file "x" and shards "x.tar" and
 * "x.tar.gz" all want the name "x"): a directory wins over a file, a file
 * over a shard's member directory, and among shards the first key in sorted
 * order wins. The loser stays reachable by its own file name where it has
 * one; the log says what was hidden. ".shardfs" at the root is reserved for
 * the control directory.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

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

void fs_ns_rdlock(struct fs *fs)
{
	pthread_rwlock_rdlock(&fs->ns_lock);
}

void fs_ns_unlock(struct fs *fs)
{
	pthread_rwlock_unlock(&fs->ns_lock);
}

/* ---- one listing of the source ------------------------------------------- */

struct lent {
	char *key;
	struct backend_objinfo info; /* info.key == key */
};

struct listing {
	struct lent *v;
	uint32_t n, cap;
};

static int list_cb(void *arg, const struct backend_objinfo *info)
{
	struct listing *l = arg;
	struct lent *e;

	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 256;
		struct lent *p = realloc(l->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	e = &l->v[l->n];
	e->key = strdup(info->key);
	if (!e->key)
		return -ENOMEM;
	e->info = *info;
	e->info.key = e->key;
	l->n++;
	return 0;
}

static void listing_free(struct listing *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		free(l->v[i].key);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static int lent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct lent *)a)->key, ((const struct lent *)b)->key);
}

/* ---- the listing kept in the cache directory ------------------------------
 * A remote source's listing is saved after every successful listing, so a
 * mount can start while the store is unreachable and serve what the cache
 * holds. It is a blob of the cache tier (cachetier_meta_put/get): fs/ never
 * writes into the cache directory itself. Format: the disk.h envelope
 * (magic, u32 version, u32 count, u64 FNV-1a of the entries), then per
 * object {u32 keylen, key, u64 size, i64 mtime, u32 mode, u32 etaglen,
 * etag}; all little-endian. */
#define LISTING_MAGIC	"SHLIST\0\0"
#define LISTING_VERSION 1u
#define LISTING_BLOB	"listing"

static int listing_save(struct fs *fs, const struct listing *l)
{
	size_t len = DISK_BLOB_HDR, off;
	unsigned char *b;
	int err;

	for (uint32_t i = 0; i < l->n; i++)
		len += 4 + strlen(l->v[i].key) + 8 + 8 + 4 + 4 + strlen(l->v[i].info.etag);
	b = malloc(len);
	if (!b)
		return -ENOMEM;
	disk_le32_put(b + 12, l->n);
	off = DISK_BLOB_HDR;
	for (uint32_t i = 0; i < l->n; i++) {
		const struct lent *o = &l->v[i];
		size_t kl = strlen(o->key), el = strlen(o->info.etag);

		disk_le32_put(b + off, (uint32_t)kl);
		memcpy(b + off + 4, o->key, kl);
		off += 4 + kl;
		disk_le64_put(b + off, o->info.size);
		disk_le64_put(b + off + 8, (uint64_t)o->info.mtime);
		disk_le32_put(b + off + 16, o->info.mode);
		disk_le32_put(b + off + 20, (uint32_t)el);
		memcpy(b + off + 24, o->info.etag, el);
		off += 24 + el;
	}
	disk_blob_seal(b, len, LISTING_MAGIC, LISTING_VERSION);
	err = cachetier_meta_put(fs->ct, LISTING_BLOB, b, len);
	free(b);
	return err;
}

/* Append the entries of a checked listing blob b[0..len) to l; -EBADMSG
 * for anything malformed. */
static int listing_parse(const unsigned char *b, size_t len, struct listing *l)
{
	uint32_t n = disk_le32_get(b + 12);
	size_t off = DISK_BLOB_HDR;

	for (uint32_t i = 0; i < n; i++) {
		struct backend_objinfo info;
		char key[4096];
		uint64_t kl, el;

		memset(&info, 0, sizeof(info));
		if (len - off < 4 || (kl = disk_le32_get(b + off)) >= sizeof(key) ||
		    len - off - 4 < kl + 24)
			return -EBADMSG;
		memcpy(key, b + off + 4, kl);
		key[kl] = '\0';
		off += 4 + kl;
		info.key = key;
		info.size = disk_le64_get(b + off);
		info.mtime = (int64_t)disk_le64_get(b + off + 8);
		info.mode = disk_le32_get(b + off + 16);
		el = disk_le32_get(b + off + 20);
		if (el >= sizeof(info.etag) || len - off - 24 < el)
			return -EBADMSG;
		memcpy(info.etag, b + off + 24, el);
		off += 24 + el;
		if (memchr(key, '\0', kl) || list_cb(l, &info) != 0)
			return -EBADMSG;
	}
	return off == len ? 0 : -EBADMSG;
}

/* Load the saved listing into l: 0, -ENOENT (none), -EPROTO (another
 * version), -EBADMSG (torn or corrupt). A listing that is not used is
 * logged (unless quiet); the next successful listing of the source
 * replaces it. */
static int listing_load(struct fs *fs, struct listing *l, int quiet)
{
	size_t len;
	void *buf;
	int err = cachetier_meta_get(fs->ct, LISTING_BLOB, &buf, &len);

	if (err < 0)
		return err;
	err = disk_blob_check(buf, len, LISTING_MAGIC, LISTING_VERSION);
	if (err == 0)
		err = listing_parse(buf, len, l);
	if (err == -EPROTO && !quiet)
		fs_log(FS_LOG_WARN,
		       "the listing kept in the cache is of another version (not %u): "
		       "not used; the next listing of the source replaces it",
		       LISTING_VERSION);
	else if (err < 0 && err != -EPROTO && !quiet)
		fs_log(FS_LOG_WARN,
		       "the listing kept in the cache is damaged (%s): not used; the "
		       "next listing of the source replaces it",
		       strerror(-err));
	free(buf);
	return err;
}

/* ---- objects, shards and directories ------------------------------------- */

static int ns_init(struct fs *fs)
{
	pthread_rwlockattr_t ra;

	if (fs->objs)
		return 0;
	fs->objs = calloc(FS_NBLOCKS, sizeof(*fs->objs));
	fs->shards = calloc(FS_NBLOCKS, sizeof(*fs->shards));
	if (!fs->objs || !fs->shards)
		return -ENOMEM;
	pthread_mutex_init(&fs->refresh_lock, NULL);
	/* readers may take it twice (readdirplus asks attributes of
	 * directories while listing one): a waiting writer must not block
	 * them */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_READER_NP);
	pthread_rwlock_init(&fs->ns_lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&fs->nq_lock, NULL);
	pthread_cond_init(&fs->nq_cond, NULL);
	pthread_cond_init(&fs->nq_idle, NULL);
	fs->nq_tail = &fs->nq_head;
	return 0;
}

/* A new object for listing entry e (not yet in any directory), at index
 * fs->nobjs; the count is published by the caller. refresh_lock held. */
static int obj_append(struct fs *fs, const struct lent *e, uint32_t n, uint32_t *idx)
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
	pthread_mutex_init(&o->lock, NULL);
	*idx = n;
	return 0;
}

/* Make object obj a shard at index n (the caller publishes the count). */
static int shard_append(struct fs *fs, uint32_t obj, uint32_t n)
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
	pthread_mutex_init(&s->lock, NULL);
	o->shard = n;
	return 1;
}

/* Order of a directory's entries: by name; on a tie the lower kind wins
 * (DIR < OBJ < SHARD), then the object's key (x.tar before x.tar.gz). */
static int dirent_cmp(const void *a, const void *b, void *arg)
{
	const struct fs *fs = arg;
	const struct fs_dirent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->kind == FS_K_OBJ)
		return strcmp(fs_obj(fs, x->idx)->key, fs_obj(fs, y->idx)->key);
	if (x->kind == FS_K_SHARD)
		return strcmp(fs_obj(fs, fs_shard(fs, x->idx)->obj)->key,
			      fs_obj(fs, fs_shard(fs, y->idx)->obj)->key);
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* A directory as a refresh computes it. */
struct ndir {
	char *name; /* new directories only (owned until published) */
	uint32_t parent;
	struct fs_dirent *ents;
	uint32_t nents, cap, nsubdirs;
	int64_t mtime;
	int live;
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
	uint32_t hidden; /* entries hidden by a name conflict */
};

static const char *ap_dir_name(const struct apply *ap, uint32_t d)
{
	return d < ap->old_ndirs ? ap->fs->dirs[d].name : ap->d[d].name;
}

static uint32_t ap_dir_parent(const struct apply *ap, uint32_t d)
{
	return d < ap->old_ndirs ? ap->fs->dirs[d].parent : ap->d[d].parent;
}

static uint64_t dir_hash(uint32_t parent, const char *name, size_t len)
{
	return disk_fnv64_update(DISK_FNV64_INIT ^ parent, name, len);
}

/* (parent, name) -> directory index: open addressing, slots hold index+1. */
struct dir_table {
	uint32_t *slot;
	uint32_t mask, n;
};

static int64_t dt_find(const struct apply *ap, const struct dir_table *t, uint32_t parent,
		       const char *name, size_t len)
{
	for (uint64_t h = dir_hash(parent, name, len);; h++) {
		uint32_t v = t->slot[h & t->mask];
		const char *dn;

		if (!v)
			return -1;
		dn = ap_dir_name(ap, v - 1);
		if (ap_dir_parent(ap, v - 1) == parent && strncmp(dn, name, len) == 0 &&
		    dn[len] == '\0')
			return v - 1;
	}
}

static int dt_add(const struct apply *ap, struct dir_table *t, uint32_t d)
{
	const char *name;

	if ((t->n + 1) * 2 > t->mask + 1) {
		struct dir_table g = {calloc((size_t)(t->mask + 1) * 2, sizeof(uint32_t)),
				      (t->mask + 1) * 2 - 1, 0};

		if (!g.slot)
			return -ENOMEM;
		for (uint32_t i = 0; i <= t->mask; i++)
			if (t->slot[i])
				dt_add(ap, &g, t->slot[i] - 1);
		free(t->slot);
		*t = g;
	}
	name = ap_dir_name(ap, d);
	for (uint64_t h = dir_hash(ap_dir_parent(ap, d), name, strlen(name));; h++) {
		if (!t->slot[h & t->mask]) {
			t->slot[h & t->mask] = d + 1;
			t->n++;
			return 0;
		}
	}
}

static uint64_t dir_ino(uint32_t d)
{
	return fs_ino(FS_K_DIR, d, 0);
}

static int obj_key_cmp(const void *a, const void *b, void *arg)
{
	const struct fs *fs = arg;

	return strcmp(fs_obj(fs, *(const uint32_t *)a)->key, fs_obj(fs, *(const uint32_t *)b)->key);
}

static int ap_new_dir(struct apply *ap, struct dir_table *t, uint32_t parent, const char *name,
		      size_t len, uint32_t *out)
{
	if (ap->nd == ap->cap) {
		uint32_t cap = ap->cap * 2;
		struct ndir *p = realloc(ap->d, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ap->d = p;
		ap->cap = cap;
	}
	memset(&ap->d[ap->nd], 0, sizeof(ap->d[0]));
	ap->d[ap->nd].name = strndup(name, len);
	if (!ap->d[ap->nd].name)
		return -ENOMEM;
	ap->d[ap->nd].parent = parent;
	*out = ap->nd++;
	return dt_add(ap, t, *out);
}

/* The directory of every live object, creating directories on the way.
 * Keys are sorted, so the keys below one directory are contiguous and a
 * stack of the current chain finds most directories without a lookup. */
static int ap_place(struct apply *ap)
{
	struct fs *fs = ap->fs;
	uint32_t stack[256];
	const char *stack_name[256];
	size_t stack_len[256];
	uint32_t depth = 0;
	struct dir_table t = {NULL, 0, 0};
	int err = 0;

	t.mask = 1023;
	while (t.mask + 1 < ap->old_ndirs * 2u + 2)
		t.mask = t.mask * 2 + 1;
	t.slot = calloc((size_t)t.mask + 1, sizeof(uint32_t));
	if (!t.slot)
		return -ENOMEM;
	for (uint32_t i = 1; i < ap->nd && !err; i++)
		err = dt_add(ap, &t, i);
	for (uint32_t k = 0; k < ap->nlive && !err; k++) {
		struct fs_obj *o = fs_obj(fs, ap->live[k]);
		const char *p = o->key, *slash;
		uint32_t d = 0, level = 0;

		while ((slash = strchr(p, '/')) != NULL) {
			size_t len = (size_t)(slash - p);
			int64_t f;

			if (level >= 256)
				break; /* deeper than any real tree; keep it at this level */
			if (level < depth && stack_len[level] == len &&
			    memcmp(stack_name[level], p, len) == 0) {
				d = stack[level];
			} else {
				f = dt_find(ap, &t, d, p, len);
				if (f >= 0) {
					d = (uint32_t)f;
				} else {
					err = ap_new_dir(ap, &t, d, p, len, &d);
					if (err)
						break;
				}
				stack[level] = d;
				stack_name[level] = p;
				stack_len[level] = len;
				depth = level + 1;
			}
			level++;
			p = slash + 1;
		}
		if (level < depth)
			depth = level;
		/* an existing object keeps its directory (directories keep their
		 * index by path): only new ones, not yet visible, are written */
		if (o->dir != d)
			o->dir = d;
	}
	free(t.slot);
	return err;
}

/* Every directory's entries from the live objects. */
static int ap_entries(struct apply *ap)
{
	struct fs *fs = ap->fs;

	ap->d[0].live = 1;
	for (uint32_t k = 0; k < ap->nlive; k++) {
		const struct fs_obj *o = fs_obj(fs, ap->live[k]);

		/* an object not known yet has no mtime: a directory of nothing
		 * else shows the mount's time (fs_view_source.c) */
		int64_t mtime =
		    atomic_load_explicit(&o->known, memory_order_acquire) == FS_INFO_KNOWN
			? o->info.mtime
			: 0;

		for (uint32_t x = o->dir;; x = ap->d[x].parent) {
			ap->d[x].live = 1;
			if (ap->d[x].mtime < mtime)
				ap->d[x].mtime = mtime;
			if (x == 0)
				break;
		}
		ap->d[o->dir].cap += o->codec >= 0 ? 2 : 1;
	}
	for (uint32_t i = 1; i < ap->nd; i++)
		if (ap->d[i].live)
			ap->d[ap->d[i].parent].cap++;
	for (uint32_t i = 0; i < ap->nd; i++) {
		ap->d[i].ents = calloc(ap->d[i].cap ? ap->d[i].cap : 1, sizeof(struct fs_dirent));
		if (!ap->d[i].ents)
			return -ENOMEM;
	}
	for (uint32_t i = 1; i < ap->nd; i++) {
		struct ndir *p = &ap->d[ap->d[i].parent];

		if (ap->d[i].live)
			p->ents[p->nents++] = (struct fs_dirent){ap_dir_name(ap, i), FS_K_DIR, i};
	}
	for (uint32_t k = 0; k < ap->nlive; k++) {
		const struct fs_obj *o = fs_obj(fs, ap->live[k]);
		struct ndir *p = &ap->d[o->dir];

		p->ents[p->nents++] = (struct fs_dirent){o->base, FS_K_OBJ, ap->live[k]};
		if (o->codec >= 0)
			p->ents[p->nents++] = (struct fs_dirent){fs_shard(fs, o->shard)->dirname,
								 FS_K_SHARD, o->shard};
	}
	for (uint32_t i = 0; i < ap->nd; i++) {
		struct ndir *d = &ap->d[i];
		uint32_t w = 0;

		qsort_r(d->ents, d->nents, sizeof(*d->ents), dirent_cmp, fs);
		for (uint32_t r = 0; r < d->nents; r++) {
			const struct fs_dirent *e = &d->ents[r];

			if ((w > 0 && strcmp(d->ents[w - 1].name, e->name) == 0) ||
			    (i == 0 && strcmp(e->name, ".shardfs") == 0)) {
				fs_log(FS_LOG_WARN,
				       "name conflict: '%s' in directory '%s' is hidden", e->name,
				       ap_dir_name(ap, i));
				ap->hidden++;
				continue;
			}
			d->ents[w++] = *e;
			if (e->kind == FS_K_DIR || e->kind == FS_K_SHARD)
				d->nsubdirs++;
		}
		d->nents = w;
	}
	return 0;
}

/* Queue kernel invalidations for what differs between a directory's old
 * and new entries (both sorted by name, names unique). */
static void notify_dir_diff(struct fs *fs, uint32_t d, const struct fs_dirent *a, uint32_t na,
			    const struct fs_dirent *b, uint32_t nb)
{
	uint32_t i = 0, j = 0;
	int changed = 0;

	while (i < na || j < nb) {
		int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i].name, b[j].name);
		const char *name;

		if (c == 0 && a[i].kind == b[j].kind && a[i].idx == b[j].idx) {
			i++;
			j++;
			continue;
		}
		name = c <= 0 ? a[i].name : b[j].name;
		fs_notify_entry(fs, dir_ino(d), name, strlen(name));
		changed = 1;
		if (c <= 0)
			i++;
		if (c >= 0)
			j++;
	}
	if (changed)
		fs_notify_inode(fs, dir_ino(d));
}

static int64_t dir_entry_of(const struct fs_dir *d, const char *name, uint8_t kind, uint32_t idx);

/* Sort listing l by key, one object per key. */
static void listing_sort(struct listing *l)
{
	uint32_t w = 0;

	if (l->n < 2)
		return; /* an empty listing's v may be NULL, which qsort must not get */
	qsort(l->v, l->n, sizeof(*l->v), lent_cmp);
	for (uint32_t r = 0; r < l->n; r++) {
		if (w > 0 && strcmp(l->v[w - 1].key, l->v[r].key) == 0) {
			free(l->v[r].key);
			continue;
		}
		l->v[w++] = l->v[r];
	}
	l->n = w;
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

		if (fs_obj_live(o) || (o->dir < fs->ndirs &&
				       dir_entry_of(&fs->dirs[o->dir], o->base, FS_K_OBJ, k) >= 0))
			cur[ncur++] = k;
	}
	qsort_r(cur, ncur, sizeof(*cur), obj_key_cmp, fs);
	return ncur;
}

/* Does listing entry e show the version object o is? A name-only entry
 * (a brace pattern's) does while o is not known to be missing: what a
 * mount learned stays (its changes are noticed through If-Match), and a
 * refresh asks again for a name the store did not have. */
static int listing_same(const struct lent *e, const struct fs_obj *o)
{
	int k = atomic_load_explicit(&o->known, memory_order_acquire);

	if (e->info.name_only)
		return k != FS_INFO_MISSING;
	return k == FS_INFO_KNOWN && strcmp(e->info.etag, o->info.etag) == 0 &&
	       e->info.size == o->info.size;
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
		uint32_t idx;

		if (c == 0 && fs_obj_live(o) && listing_same(&l->v[i], o)) {
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
			if (c == 0)
				ap->changed++;
			else
				ap->removed++;
			if (o->codec >= 0)
				ap->shards_changed++;
			j++;
			if (c > 0)
				continue;
		} else {
			ap->added++;
		}
		err = obj_append(fs, &l->v[i], *nobjs, &idx);
		if (err)
			return err;
		(*nobjs)++;
		err = shard_append(fs, idx, *nshards);
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
	pthread_rwlock_wrlock(&fs->ns_lock);
	if (ap->nd > fs->ndirs) {
		struct fs_dir *p = realloc(fs->dirs, ap->nd * sizeof(*p));

		if (!p) {
			pthread_rwlock_unlock(&fs->ns_lock);
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
		d->gone = !ap->d[k].live;
		ap->d[k].ents = NULL;
	}
	atomic_store(&fs->ndirs, ap->nd);
	pthread_rwlock_unlock(&fs->ns_lock);
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
			notify_dir_diff(fs, k, old_ents[k], old_n[k], fs->dirs[k].ents,
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
	ap->removed += fs->replaced_removed;
	fs->replaced_removed = 0;
	fs->c.refresh_added += ap->added;
	fs->c.refresh_removed += ap->removed;
	fs->c.refresh_changed += ap->changed;
	fs_log(FS_LOG_INFO,
	       "refresh of %s: %u new, %u removed, %u changed objects; %u objects, %u directories",
	       backend_describe(fs->be), ap->added, ap->removed, ap->changed, ap->nlive, ap->nd);
	if (ap->shards_changed && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER)
		fs_if_reset(fs);
}

/* Apply listing l (sorted here) to the namespace. refresh_lock held (so
 * no one else changes the directories). */
static int ns_apply(struct fs *fs, struct listing *l, int initial)
{
	struct apply ap = {.fs = fs};
	uint32_t nobjs = fs->nobjs, nshards = fs->nshards, ncur;
	uint32_t *cur = NULL;
	struct fs_dirent **old_ents = NULL;
	uint32_t *old_n = NULL;
	int err = -ENOMEM;

	listing_sort(l);
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
		err = ap_place(&ap);
	if (err == 0)
		err = ap_entries(&ap);
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

/* The shards of the listing kept in the cache that listing l no longer has
 * were removed while no mount ran: their saved indexes and class maps go
 * (fs_shard_forget; a running mount forgets the removals it notices,
 * fs_obj_mark_stale). Sorts l. */
static void ns_forget_removed(struct fs *fs, struct listing *l)
{
	struct listing old = {0};
	uint32_t j = 0;

	if (listing_load(fs, &old, 1) < 0) {
		listing_free(&old);
		return; /* none kept, or unusable (said when it is used) */
	}
	listing_sort(&old);
	listing_sort(l);
	for (uint32_t i = 0; i < old.n; i++) {
		int c = 1;

		while (j < l->n && (c = strcmp(l->v[j].key, old.v[i].key)) < 0)
			j++;
		if (c != 0)
			fs_shard_forget(fs, old.v[i].key);
	}
	listing_free(&old);
}

/* List the source into l. A remote store that cannot be reached at mount
 * (initial) gives the listing kept in the cache instead. */
static int ns_list(struct fs *fs, struct listing *l, int initial)
{
	int err = backend_list(fs->be, list_cb, l);

	if (initial && !backend_is_local(fs->be) && err == -EIO) {
		/* the store is unreachable or failing (refusals, bad certificates
		 * and bad URLs have their own errors): serve what the cache holds */
		int lerr;

		listing_free(l);
		lerr = listing_load(fs, l, 0);
		if (lerr == 0) {
			fs_log(FS_LOG_WARN,
			       "source %s unreachable (%s); serving the listing kept in the cache "
			       "(%u objects)",
			       backend_describe(fs->be), strerror(-err), l->n);
			fs->offline = 1;
			return 0;
		}
	}
	for (uint32_t i = 0; err == 0 && !fs->lazy && i < l->n; i++)
		if (l->v[i].info.name_only)
			fs->lazy = 1; /* a brace pattern lists names only, always */
	/* a brace pattern's names say nothing worth keeping: the listing kept
	 * is what the mount learned (fs_ns_keep_learned) */
	if (err == 0 && !backend_is_local(fs->be) && !fs->lazy) {
		int serr;

		if (initial)
			ns_forget_removed(fs, l);
		serr = listing_save(fs, l);

		if (serr < 0)
			fs_log(FS_LOG_WARN, "listing not kept in the cache: %s", strerror(-serr));
	}
	return err;
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
	qsort_r(cur, ncur, sizeof(*cur), obj_key_cmp, fs);
	if (listing_load(fs, &old, 0) == 0)
		listing_sort(&old);
	for (uint32_t k = 0; k < ncur && err == 0; k++) {
		const struct fs_obj *o = fs_obj(fs, cur[k]);
		int known = atomic_load_explicit(&o->known, memory_order_acquire);
		int c = 1;

		while (j < old.n && (c = strcmp(old.v[j].key, o->key)) < 0)
			j++;
		if (known == FS_INFO_KNOWN) {
			err = list_cb(&l, &o->info);
			learned++;
		} else if (known == FS_INFO_LAZY && j < old.n && c == 0) {
			err = list_cb(&l, &old.v[j].info);
		}
	}
	if (err == 0 && learned)
		err = listing_save(fs, &l);
	listing_free(&old);
	listing_free(&l);
	free(cur);
	return err;
}

int fs_ns_build(struct fs *fs)
{
	struct listing l = {0};
	int err = ns_init(fs);

	if (err < 0)
		return err;
	err = ns_list(fs, &l, 1);
	if (err == 0) {
		pthread_mutex_lock(&fs->refresh_lock);
		err = ns_apply(fs, &l, 1);
		pthread_mutex_unlock(&fs->refresh_lock);
	}
	listing_free(&l);
	return err;
}

int fs_ns_refresh(struct fs *fs)
{
	struct listing l = {0};
	int err;

	/* one refresh at a time: a second one waits and lists again */
	pthread_mutex_lock(&fs->refresh_lock);
	err = ns_list(fs, &l, 0);
	if (err == 0) {
		err = ns_apply(fs, &l, 0);
		if (err == 0)
			fs->offline = 0;
	} else {
		fs_log(FS_LOG_WARN, "refresh of %s failed: %s; the mount shows what it showed",
		       backend_describe(fs->be), strerror(-err));
	}
	pthread_mutex_unlock(&fs->refresh_lock);
	listing_free(&l);
	return err;
}

void fs_obj_mark_stale(struct fs *fs, uint32_t obj, enum fs_obj_state why)
{
	struct fs_obj *o = fs_obj(fs, obj);
	int live = FS_OBJ_LIVE;
	uint64_t dino = dir_ino(o->dir);

	if (!atomic_compare_exchange_strong(&o->state, &live, (int)why))
		return; /* marked already */
	fs->c.stale_noticed++;
	fs_log(FS_LOG_INFO, "%s %s under the mount: ESTALE for the old version", o->key,
	       why == FS_OBJ_GONE ? "was removed" : "changed");
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
	if (strcmp(info.etag, o->info.etag) != 0 || info.size != o->info.size) {
		fs_obj_mark_stale(fs, obj, FS_OBJ_STALE);
		return -ESTALE;
	}
	return 0;
}

/* Entry of directory d named name with kind and index idx: its position,
 * or -1. ns_lock held. */
static int64_t dir_entry_of(const struct fs_dir *d, const char *name, uint8_t kind, uint32_t idx)
{
	int64_t i = fs__bsearch_name(d->ents, sizeof(d->ents[0]), offsetof(struct fs_dirent, name),
				     0, d->nents, name, strlen(name));

	return i >= 0 && d->ents[i].kind == kind && d->ents[i].idx == idx ? i : -1;
}

int fs_ns_replace(struct fs *fs, uint32_t obj)
{
	struct fs_obj *o = fs_obj(fs, obj), *no = NULL;
	const char *sdname = o->codec >= 0 ? fs_shard(fs, o->shard)->dirname : NULL;
	struct backend_objinfo info;
	struct lent e;
	uint32_t nidx = 0;
	int64_t oi, si;
	int err, listed, gone;

	pthread_mutex_lock(&fs->refresh_lock);
	fs_ns_rdlock(fs);
	listed = dir_entry_of(&fs->dirs[o->dir], o->base, FS_K_OBJ, obj) >= 0 ||
		 (sdname && dir_entry_of(&fs->dirs[o->dir], sdname, FS_K_SHARD, o->shard) >= 0);
	fs_ns_unlock(fs);
	if (!listed) { /* replaced or removed already: look again */
		pthread_mutex_unlock(&fs->refresh_lock);
		return 0;
	}
	err = backend_stat(fs->be, o->key, &info);
	gone = err == -ENOENT || err == -EISDIR;
	if (err < 0 && !gone)
		goto out;
	if (!gone && fs_obj_live(o) &&
	    atomic_load_explicit(&o->known, memory_order_acquire) == FS_INFO_KNOWN &&
	    strcmp(info.etag, o->info.etag) == 0 && info.size == o->info.size) {
		err = 0; /* unchanged after all */
		goto out;
	}
	if (!gone) {
		uint32_t n = fs->nobjs, ns = fs->nshards;

		e.key = o->key;
		e.info = info;
		e.info.key = o->key;
		err = obj_append(fs, &e, n, &nidx);
		if (err)
			goto out;
		no = fs_obj(fs, nidx);
		no->dir = o->dir;
		/* the same version whose sidecar a read proved wrong: build */
		if (strcmp(info.etag, o->info.etag) == 0)
			no->sidecar_rejected = atomic_load(&o->sidecar_rejected);
		/* changed since the last refresh, unless this is the same
		 * version again (a sidecar a read proved wrong) */
		no->changed_since_refresh =
		    o->changed_since_refresh ||
		    !(strcmp(info.etag, o->info.etag) == 0 && info.size == o->info.size);
		err = shard_append(fs, nidx, ns);
		if (err < 0)
			goto out;
		atomic_store_explicit(&fs->nobjs, n + 1, memory_order_release);
		atomic_store_explicit(&fs->nshards, ns + (err > 0 ? 1u : 0u), memory_order_release);
	}
	pthread_rwlock_wrlock(&fs->ns_lock);
	{
		struct fs_dir *d = &fs->dirs[o->dir];

		oi = dir_entry_of(d, o->base, FS_K_OBJ, obj);
		si = sdname ? dir_entry_of(d, sdname, FS_K_SHARD, o->shard) : -1;
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
	}
	pthread_rwlock_unlock(&fs->ns_lock);
	if (!no)
		fs->replaced_removed++; /* counted by the next refresh */
	atomic_fetch_add(&fs->total_bytes, (no ? no->info.size : 0) - fs_obj_size(o));
	fs_obj_mark_stale(fs, obj, no ? FS_OBJ_STALE : FS_OBJ_GONE);
	fs_notify_inode(fs, dir_ino(o->dir));
	if (o->codec >= 0 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER)
		fs_if_reset(fs);
	err = 0;
out:
	pthread_mutex_unlock(&fs->refresh_lock);
	return err;
}

void fs_ns_free(struct fs *fs)
{
	uint32_t nobjs = fs->nobjs, nshards = fs->nshards;

	for (uint32_t i = 0; i < fs->ndirs; i++) {
		free(fs->dirs[i].name);
		free(fs->dirs[i].ents);
	}
	free(fs->dirs);
	for (uint32_t i = 0; i < nshards; i++) {
		free(fs_shard(fs, i)->dirname);
		pthread_mutex_destroy(&fs_shard(fs, i)->lock);
	}
	for (uint32_t i = 0; i < nobjs; i++) {
		free(fs_obj(fs, i)->key);
		pthread_mutex_destroy(&fs_obj(fs, i)->lock);
	}
	for (uint32_t b = 0; fs->objs && b < FS_NBLOCKS; b++) {
		free(fs->objs[b]);
		free(fs->shards[b]);
	}
	if (fs->objs) {
		pthread_rwlock_destroy(&fs->ns_lock);
		pthread_mutex_destroy(&fs->refresh_lock);
		pthread_mutex_destroy(&fs->nq_lock);
		pthread_cond_destroy(&fs->nq_cond);
		pthread_cond_destroy(&fs->nq_idle);
	}
	free(fs->objs);
	free(fs->shards);
	fs->dirs = NULL;
	fs->shards = NULL;
	fs->objs = NULL;
	fs->ndirs = fs->nshards = fs->nobjs = 0;
}

int64_t fs__bsearch_name(const void *base, size_t stride, size_t name_off, uint32_t lo, uint32_t hi,
			 const char *name, size_t len)
{
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const char *m;
		int c;

		memcpy(&m, (const char *)base + (size_t)mid * stride + name_off, sizeof(m));
		c = fs_name_cmp(m, name, len);
		if (c < 0)
			lo = mid + 1;
		else if (c > 0)
			hi = mid;
		else
			return mid;
	}
	return -1;
}

const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len)
{
	const struct fs_dir *d = &fs->dirs[dir];
	int64_t i = fs__bsearch_name(d->ents, sizeof(d->ents[0]), offsetof(struct fs_dirent, name),
				     0, d->nents, name, len);

	return i < 0 ? NULL : &d->ents[i];
}
