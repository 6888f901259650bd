/*
 * fs_ns_dir.c — the directories of a refresh (struct apply): the
 * (parent, name) table, placing every live object's path, and each
 * directory's sorted entries; then which entries changed, for the kernel.
 *
 * Name conflicts (a real directory "x", a file "x" and shards "x.tar" and
 * "x.tar.gz" all want the name "x"): a directory wins over a file, a file
 * over a shard's member directory, and among shards the first key in sorted
 * order wins. The loser stays reachable by its own file name where it has
 * one; the log says what was hidden. ".shardfs" at the root is reserved for
 * the control directory.
 *
 * Non-goals: publishing what is computed here (fs_ns_apply.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs_ns_i.h"

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

static const char *ap_dir_name(const struct apply *ap, uint32_t d)
{
	return d < ap->old_ndirs ? ap->fs->dirs[d].name : ap->d[d].name;
}

static uint32_t ap_dir_parent(const struct apply *ap, uint32_t d)
{
	return d < ap->old_ndirs ? ap->fs->dirs[d].parent : ap->d[d].parent;
}

/* The path of directory d below the source's root into buf (n bytes,
 * "" for the root); 0, or -ENAMETOOLONG. */
static int ap_dir_path(const struct apply *ap, uint32_t d, char *buf, size_t n)
{
	size_t len = 0;

	buf[0] = '\0';
	for (uint32_t x = d; x != 0; x = ap_dir_parent(ap, x)) {
		const char *name = ap_dir_name(ap, x);
		size_t l = strlen(name);

		if (len + l + 2 > n)
			return -ENAMETOOLONG;
		/* prepend "/name" */
		memmove(buf + l + 1, buf, len + 1);
		buf[0] = '/';
		memcpy(buf + 1, name, l);
		len += l + 1;
	}
	return 0;
}

/* Directory d as a message names it: "the mount's root", or "directory
 * 'a/b'" (its path below the root; its name alone when that is too long). */
static void ap_dir_where(const struct apply *ap, uint32_t d, char *buf, size_t n)
{
	char path[PATH_MAX];

	if (d == 0)
		snprintf(buf, n, "the mount's root");
	else if (ap_dir_path(ap, d, path, sizeof(path)) == 0)
		snprintf(buf, n, "directory '%s'", path + 1);
	else
		snprintf(buf, n, "directory '.../%s'", ap_dir_name(ap, d));
}

static uint64_t dir_hash(uint32_t parent, const char *name, size_t len)
{
	return disk_fnv64_update(DISK_FNV64_INIT ^ parent, name, len);
}

/* What a listed entry e is, for a name conflict's log line: a directory
 * of the source, the object KEY, or the members of shard KEY. */
static void dirent_what(struct fs *fs, const struct fs_dirent *e, char *buf, size_t n)
{
	if (e->kind == FS_K_DIR)
		snprintf(buf, n, "a directory of the source");
	else if (e->kind == FS_K_OBJ)
		snprintf(buf, n, "the file %s", fs_obj(fs, e->idx)->key);
	else
		snprintf(buf, n, "the members of %s", fs_obj(fs, fs_shard(fs, e->idx)->obj)->key);
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

uint64_t fs__ns_dir_ino(uint32_t d)
{
	return fs_ino(FS_K_DIR, d, 0);
}

int fs__ns_obj_key_cmp(const void *a, const void *b, void *arg)
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

/* The directory of every live object, creating directories on the way, then
 * a local source's empty directories (the listing's dirs).
 * Keys are sorted, so the keys below one directory are contiguous and a
 * stack of the current chain finds most directories without a lookup. */
int fs__ns_ap_place(struct apply *ap)
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
	/* a local source's empty directories: every part of the path */
	for (uint32_t i = 0; ap->l && i < ap->l->ndirs && !err; i++) {
		const char *p = ap->l->dirs[i].path;
		uint32_t d = 0;

		while (*p && !err) {
			const char *slash = strchr(p, '/');
			size_t len = slash ? (size_t)(slash - p) : strlen(p);
			int64_t f = dt_find(ap, &t, d, p, len);

			if (f >= 0)
				d = (uint32_t)f;
			else
				err = ap_new_dir(ap, &t, d, p, len, &d);
			p += len + (slash ? 1 : 0);
		}
		ap->l->dirs[i].d = d;
	}
	free(t.slot);
	return err;
}

/* Every directory's entries from the live objects. */
int fs__ns_ap_entries(struct apply *ap)
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
	for (uint32_t i = 0; ap->l && i < ap->l->ndirs; i++) {
		uint32_t x = ap->l->dirs[i].d;

		if (x != 0 && ap->d[x].mtime < ap->l->dirs[i].mtime)
			ap->d[x].mtime = ap->l->dirs[i].mtime; /* its own: nothing in it */
		for (; x != 0 && !ap->d[x].live; x = ap->d[x].parent)
			ap->d[x].live = 1;
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
				char hid[320], won[320], where[PATH_MAX + 16];

				dirent_what(fs, e, hid, sizeof(hid));
				if (w > 0 && strcmp(d->ents[w - 1].name, e->name) == 0)
					dirent_what(fs, &d->ents[w - 1], won, sizeof(won));
				else
					snprintf(won, sizeof(won), "the mount's control directory");
				ap_dir_where(ap, i, where, sizeof(where));
				fs_log(FS_LOG_WARN,
				       "name conflict: '%s' in %s is hidden: %s, behind %s",
				       e->name, where, hid, won);
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

/* Every live directory's permission bits: a local source's directory
 * shows its own (read and search bits: the mount is read-only), so that
 * with allow_other (and so default_permissions) the kernel denies other
 * users what the source denies them; a directory that cannot be stat'ed,
 * and every directory of a remote store (which has none), shows 0555. */
void fs__ns_ap_perms(struct apply *ap)
{
	const char *root = backend_local_source(ap->fs->be);
	char path[PATH_MAX], rel[PATH_MAX];

	for (uint32_t i = 0; i < ap->nd; i++) {
		struct stat st;

		ap->d[i].perm = 0555;
		if (!root || !ap->d[i].live || ap_dir_path(ap, i, rel, sizeof(rel)) < 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s%s", root, rel) >= sizeof(path))
			continue;
		if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
			ap->d[i].perm = st.st_mode & 0555;
	}
}

/* Queue kernel invalidations for what differs between a directory's old
 * and new entries (both sorted by name, names unique). */
void fs__ns_notify_dir_diff(struct fs *fs, uint32_t d, const struct fs_dirent *a, uint32_t na,
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
		fs_notify_entry(fs, fs__ns_dir_ino(d), name, strlen(name));
		changed = 1;
		if (c <= 0)
			i++;
		if (c >= 0)
			j++;
	}
	if (changed)
		fs_notify_inode(fs, fs__ns_dir_ino(d));
}
