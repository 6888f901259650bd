/*
 * fs_view_source.c — the source as it is: its directories (the root of the
 * shards layout among them) and its objects as plain files, a shard's raw
 * bytes (x.tar, x.tar.zst) among them (fs_view.h), and the shards layout
 * (fs_layout_shards).
 *
 * A source directory's entries may change at a refresh: they are read under
 * the namespace's read lock (ns_lock), which a listing holds until it
 * is done. A lookup that reaches us revalidates the object it finds.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs_view.h"

static int dir_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino), b = fs_ino_b(ino);
	nlink_t nlink;
	int64_t mtime;
	mode_t perm;
	int gone;

	fs_ns_rdlock(fs);
	if (a >= fs->ndirs || (ino != 1 && b != 0)) {
		fs_ns_unlock(fs);
		return -ENOENT;
	}
	nlink = 2 + fs->dirs[a].nsubdirs;
	mtime = fs->dirs[a].mtime;
	perm = fs->dirs[a].perm;
	gone = fs->dirs[a].gone;
	fs_ns_unlock(fs);
	if (gone)
		return -ESTALE; /* nothing below it any more */
	/* no mtime known below it (a brace pattern's shards not asked for
	 * yet): the mount's time */
	fs_attr_dir(fs, st, ino, perm, nlink, mtime || !fs->lazy ? mtime : fs->mount_time);
	return 0;
}

/* A lookup that reaches us revalidates: a local file that changed (or a
 * remote object a read found changed) is replaced by its new version here,
 * at new inode numbers. */
static int dir_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len, uint64_t *ino)
{
	uint32_t a = fs_ino_a(parent), kind = 0, di = 0;
	const struct fs_dirent *d;
	int err;

	for (int tries = 0;; tries++) {
		uint32_t obj;

		fs_ns_rdlock(fs);
		if (a >= fs->ndirs || fs->dirs[a].gone) {
			err = a >= fs->ndirs ? -ENOENT : -ESTALE;
			fs_ns_unlock(fs);
			return err;
		}
		d = fs_ns_lookup(fs, a, name, len);
		if (d) {
			kind = d->kind;
			di = d->idx;
		}
		fs_ns_unlock(fs);
		if (!d) {
			*ino = 0;
			return 0;
		}
		if (kind == FS_K_DIR)
			break;
		obj = kind == FS_K_OBJ ? di : fs_shard(fs, di)->obj;
		/* a brace pattern's name: ask the store on first need; one it
		 * does not have is no entry (a negative one) */
		err = fs_obj_learn(fs, obj);
		if (err == -ENOENT) {
			*ino = 0;
			return 0;
		}
		if (err < 0)
			return err;
		if (tries == 2 || fs_obj_check(fs, obj) != -ESTALE)
			break;
		err = fs_ns_replace(fs, obj);
		if (err < 0)
			return err;
	}
	*ino = fs_ino((enum fs_kind)kind, di, 0);
	return 0;
}

/* What a listing from offset off is about to show (readdirplus gives
 * attributes): the sizes of a brace pattern's shards there, asked for many
 * at once, before the listing takes ns_lock. */
static void dir_list_prepare(struct fs *fs, uint64_t ino, uint64_t off)
{
	fs_dir_learn(fs, fs_ino_a(ino), off < 2 ? 0 : (uint32_t)(off - 2));
}

/* Holds ns_lock (read) until fs_ops.c ends the listing. */
static int dir_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	const struct fs_dir *dir;

	fs_ns_rdlock(fs);
	if (l->a >= fs->ndirs || fs->dirs[l->a].gone) {
		fs_ns_unlock(fs);
		return l->a >= fs->ndirs ? -ENOENT : -ESTALE;
	}
	dir = &fs->dirs[l->a];
	l->locked = 1;
	l->stale_names = 1;
	l->p = dir;
	l->n = dir->nents;
	l->parent = fs_ino(FS_K_DIR, dir->parent, 0);
	return 0;
}

static const char *dir_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	const struct fs_dirent *d = &((const struct fs_dir *)l->p)->ents[i];

	*ino = fs_ino((enum fs_kind)d->kind, d->idx, 0);
	return d->name;
}

const struct fs_view fs_view_dir = {
    .name = "directory",
    .getattr = dir_getattr,
    .lookup = dir_lookup,
    .list_prepare = dir_list_prepare,
    .list_open = dir_list_open,
    .list_entry = dir_list_entry,
};

/* ---- objects ------------------------------------------------------------- */

static int obj_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino);
	const struct fs_obj *o;
	int err;

	if (a >= fs->nobjs || fs_ino_b(ino) != 0)
		return -ENOENT;
	o = fs_obj(fs, a);
	if (!fs_obj_live(o))
		return -ESTALE; /* an old version: a refresh or lookup replaced it */
	err = fs_obj_learn(fs, a);
	if (err < 0)
		return err;
	/* read-only: strip write bits, keep the rest */
	fs_attr_file(fs, st, ino, S_IFREG | (o->info.mode & 07555), o->info.size, o->info.mtime);
	return 0;
}

static int obj_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		    struct fs_read *r)
{
	uint32_t obj = fs_ino_a(ino);
	struct cachetier_obj *raw;
	uint64_t osize;
	int err;

	(void)fh;
	if (obj >= fs->nobjs)
		return -ENOENT;
	err = fs_obj_learn(fs, obj);
	if (err < 0)
		return err;
	osize = fs_obj(fs, obj)->info.size;
	/* local sources: one stat, so a file rewritten in place is ESTALE,
	 * never bytes of another version (pages the kernel cached before the
	 * change never reach us) */
	err = fs_obj_check(fs, obj);
	if (err == 0)
		err = fs_obj_raw(fs, obj, &raw);
	if (err < 0)
		return err;
	if (off >= osize)
		return 0;
	if (size > osize - off)
		size = (size_t)(osize - off);
	return fs_read_fd_range(fs, raw, off, size, r);
}

static void obj_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino);

	snprintf(buf, size, "%s", a < fs->nobjs ? fs_obj(fs, a)->key : "?");
}

static void obj_mark_stale(struct fs *fs, uint64_t ino)
{
	if (fs_ino_a(ino) < fs->nobjs)
		fs_obj_mark_stale(fs, fs_ino_a(ino), FS_OBJ_STALE);
}

const struct fs_view fs_view_obj = {
    .name = "object",
    .getattr = obj_getattr,
    .read = obj_read,
    .describe = obj_describe,
    .mark_stale = obj_mark_stale,
};

/* ---- the shards layout ------------------------------------------------------
 * The source as it is from the root: its directories, objects and shards
 * (each a directory of its members, fs_view_shard.c), all of them kinds
 * every layout has; nothing built from the shards as a whole. */
const struct fs_layout_ops fs_layout_shards = {
    .name = "shards",
    .root = &fs_view_dir,
    .loader_indexes = 1,
};
