/*
 * fs_ns_list.c — one listing of the source: listing it through the backend,
 * sorting it (one object per key), and the listing kept in the cache
 * directory so that a mount can start while the store is unreachable,
 * and the shards it had that a mount's first listing lacks (their saved
 * indexes forgotten).
 *
 * Contract: a struct listing is owned by its caller (fs_ns.c, fs_ns_apply.c)
 * and freed with fs__ns_listing_free; nothing here takes ns_lock.
 *
 * Non-goals: applying a listing to the namespace (fs_ns_apply.c); the
 * cache directory itself (the kept listing is a cache tier blob).
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_ns_i.h"
#include "fs_plan.h"

/* v (n of *cap elements of size sz used) with room for one more: v, or v
 * reallocated with *cap doubled (first at first); NULL when out of memory
 * (v unchanged, still the caller's). */
static void *list_grow(void *v, uint32_t n, uint32_t *cap, size_t sz, uint32_t first)
{
	uint32_t c = *cap ? *cap * 2 : first;
	void *p;

	if (n < *cap)
		return v;
	p = realloc(v, c * sz);
	if (p)
		*cap = c;
	return p;
}

int fs__ns_list_cb(void *arg, const struct backend_objinfo *info)
{
	struct listing *l = arg;
	struct lent *e;

	if (info->dir) {
		struct ldir *dirs = list_grow(l->dirs, l->ndirs, &l->dircap, sizeof(*dirs), 16);

		if (!dirs)
			return -ENOMEM;
		l->dirs = dirs;
		l->dirs[l->ndirs].path = strdup(info->key);
		if (!l->dirs[l->ndirs].path)
			return -ENOMEM;
		l->dirs[l->ndirs].mtime = info->mtime;
		l->dirs[l->ndirs++].d = 0;
		return 0;
	}
	e = list_grow(l->v, l->n, &l->cap, sizeof(*e), 256);
	if (!e)
		return -ENOMEM;
	l->v = e;
	e = &l->v[l->n];
	e->key = strdup(info->key);
	if (!e->key)
		return -ENOMEM;
	e->info = *info;
	e->info.key = e->key;
	l->n++;
	return 0;
}

void fs__ns_listing_free(struct listing *l)
{
	for (uint32_t i = 0; i < l->n; i++)
		free(l->v[i].key);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
	for (uint32_t i = 0; i < l->ndirs; i++)
		free(l->dirs[i].path);
	free(l->dirs);
	l->dirs = NULL;
	l->ndirs = l->dircap = 0;
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

int fs__ns_listing_save(struct fs *fs, const struct listing *l)
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
		if (memchr(key, '\0', kl) || fs__ns_list_cb(l, &info) != 0)
			return -EBADMSG;
	}
	return off == len ? 0 : -EBADMSG;
}

/* Load the saved listing into l: 0, -ENOENT (none), -EPROTO (another
 * version), -EBADMSG (torn or corrupt). A listing that is not used is
 * logged (unless quiet); the next successful listing of the source
 * replaces it. */
int fs__ns_listing_load(struct fs *fs, struct listing *l, int quiet)
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

/* Sort listing l by key, one object per key. */
void fs__ns_listing_sort(struct listing *l)
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

/* The shards of the listing kept in the cache that listing l no longer has
 * were removed while no mount ran: their saved indexes and class maps go
 * (fs_shard_forget; a running mount forgets the removals it notices,
 * fs_obj_mark_stale). Sorts l. */
static void ns_forget_removed(struct fs *fs, struct listing *l)
{
	struct listing old = {0};
	uint32_t j = 0;

	if (fs__ns_listing_load(fs, &old, 1) < 0) {
		fs__ns_listing_free(&old);
		return; /* none kept, or unusable (said when it is used) */
	}
	fs__ns_listing_sort(&old);
	fs__ns_listing_sort(l);
	for (uint32_t i = 0; i < old.n; i++) {
		int c = 1;

		while (j < l->n && (c = strcmp(l->v[j].key, old.v[i].key)) < 0)
			j++;
		if (c != 0)
			fs_shard_forget(fs, old.v[i].key);
	}
	fs__ns_listing_free(&old);
}

/* A local source whose listing would walk into this mount (the daemon
 * waiting on its own requests: it hangs, and so does whoever waits on it):
 * the source is the mount point, lies inside it (a symlink or a bind mount
 * of it too), or holds the mount point. The paths are resolved as a plan
 * file's are (fs_plan_path_inside: a component at a time, never asking the
 * mount). 0, or -ELOOP after saying which. */
static int ns_loop_check(struct fs *fs)
{
	const char *src = backend_local_source(fs->be), *mp = fs->cfg.mountpoint;
	char *real;
	int r;

	if (!src || !mp)
		return 0;
	r = fs_plan_path_inside(mp, src);
	if (r == 1) {
		fs_log(FS_LOG_ERR,
		       "source %s is the mount point %s or lies inside it: listing it would read "
		       "the mount itself; mount a directory outside the mount point",
		       src, mp);
		return -ELOOP;
	}
	real = r == 0 ? realpath(src, NULL) : NULL;
	r = real ? fs_plan_path_inside(real, mp) : 0;
	if (r == 1)
		fs_log(FS_LOG_ERR,
		       "source %s holds the mount point %s: listing it would read the mount "
		       "itself; choose a mount point outside the source",
		       src, mp);
	free(real);
	return r == 1 ? -ELOOP : 0;
}

/* List the source into l. A remote store that cannot be reached at mount
 * (initial) gives the listing kept in the cache instead. */
int fs__ns_list(struct fs *fs, struct listing *l, int initial)
{
	int err = ns_loop_check(fs);

	if (err == 0)
		err = backend_list(fs->be, fs__ns_list_cb, l);
	if (err == 0 && backend_is_local(fs->be)) {
		int nofollow;

		atomic_store(&fs->c.source_links_refused, backend_local_refused(fs->be, &nofollow));
	}

	if (initial && !backend_is_local(fs->be) && err == -EIO) {
		/* the store is unreachable or failing (refusals, bad certificates
		 * and bad URLs have their own errors): serve what the cache holds */
		int lerr;

		fs__ns_listing_free(l);
		lerr = fs__ns_listing_load(fs, l, 0);
		if (lerr == 0) {
			fs_log(FS_LOG_WARN,
			       "source %s unreachable (%s); serving the listing kept in the cache "
			       "(%u %s)",
			       backend_describe(fs->be), strerror(-err), l->n,
			       fs_plural(l->n, "object", "objects"));
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
		serr = fs__ns_listing_save(fs, l);

		if (serr < 0)
			fs_log(FS_LOG_WARN, "listing not kept in the cache: %s", strerror(-serr));
	}
	return err;
}
