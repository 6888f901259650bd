/*
 * fs_if_view.c — the --layout imagefolder view as the filesystem shows it:
 * MOUNTPOINT/<class>/<name>.<ext>, one file per WebDataset sample, so that
 * torchvision's datasets.ImageFolder(MOUNTPOINT) works on shards unchanged.
 *
 * The view is built (or mapped) on first use (fs_if_get, under the lock of
 * struct fs_imagefolder),
 * then immutable and published with release semantics; readers take no
 * lock. A refresh retires it (fs_if_reset): it stays valid until unmount
 * for readers that hold it. Lookups are binary searches over the blob's
 * records (a class by name, a file by the heads of its class's blocks of
 * names, then one block), listings walk them, no name is copied to the
 * heap. Names and inodes are the view's: a listing or a lookup reads no
 * shard's index, and a listing without attributes (find) makes no getattr
 * of its files (list_type_only: fs_op_readdir). A file's attributes are
 * its image member's, read from the shard's index (mapped in place,
 * fs_shard.c) by its getattr, which checks that the index is the one the
 * view was built from (its file's checksum), and, for a getattr made for a
 * name (a lookup, a listing with attributes), that the member's name makes
 * that name; a view that does not match is retired and built again. Whether the index's (and the
 * view's) file changed in place is asked once, after the reads an answer is made of (if_index,
 * view_peek): a lookup and a listing ask about the view, a getattr about
 * the index.
 *
 * Contract: any FUSE thread; the first use blocks while the view is built.
 * Non-goals: writes; a class inode that keeps its meaning across a refresh
 * (the kernel is told to look the classes up again).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_if_i.h"

/* The view's state (fs_if.h): fs->imagefolder, from fs_open to fs_close. */
struct fs_imagefolder {
	struct disk_mutex
	    lock; /* DISK_LOCK_IMAGEFOLDER: serialises building (fs_if_get) and fs_if_reset */
	struct fs_ifview *_Atomic ifv; /* built on first use, then immutable */
	struct fs_ifview *retired;     /* views a refresh replaced; freed at unmount */
};

int fs_if_new(struct fs_imagefolder **out)
{
	struct fs_imagefolder *f = calloc(1, sizeof(*f));

	*out = f;
	if (!f)
		return -ENOMEM;
	disk_mutex_init(&f->lock, DISK_LOCK_IMAGEFOLDER);
	return 0;
}

void fs_if_free(struct fs_imagefolder *f)
{
	if (!f)
		return;
	disk_mutex_destroy(&f->lock);
	free(f);
}

int fs_if_ready(const struct fs *fs)
{
	return atomic_load_explicit(&fs->imagefolder->ifv, memory_order_acquire) != NULL;
}

static void view_free(struct fs_ifview *v)
{
	if (!v)
		return;
	cachetier_meta_unmap(v->map);
	free(v->heap);
	free(v);
}

/* Builds that may meet a sidecar index a .cls member's tar header
 * disproves (-ESTALE from fs__if_view) before one gives up with ESTALE.
 * Each such build rejects a sidecar that the shard's replacement does not
 * use (fs_obj.sidecar_rejected), so only a source that keeps changing
 * under the mount needs more than a second. */
#define IF_STALE_BUILDS 4

/* The file view p is mapped from changed in place (cachetier_meta_changed:
 * p reads zeros now): p is retired as a refresh retires a view, without
 * telling the kernel to look the classes up again (the names in p are
 * gone; the view built again from the same shards has the same classes in
 * the same order, so the inodes the kernel holds keep their meaning). */
/* Retire p unless it was already: 1 when this call did; unsave: its saved
 * blob is removed too (under the lock, so no build maps it again). */
static int view_retire(struct fs *fs, struct fs_ifview *p, int unsave)
{
	struct fs_imagefolder *f = fs->imagefolder;
	struct fs_ifview *want = p;
	int done;

	disk_mutex_lock(&f->lock);
	done = atomic_compare_exchange_strong(&f->ifv, &want, NULL);
	if (done) {
		p->retired_next = f->retired;
		f->retired = p;
		if (unsave)
			fs__if_unsave(fs, p);
	}
	disk_mutex_unlock(&f->lock);
	return done;
}

static void view_changed(struct fs *fs, struct fs_ifview *p)
{
	if (!view_retire(fs, p, 0))
		return;
	fs->c.if_view_changed++;
	fs_log(FS_LOG_WARN,
	       "imagefolder: the saved view in the cache directory was changed in place "
	       "under the mount (written, truncated or punched); it is dropped and built "
	       "again");
}

/* 0, or -ESTALE when the file view v is mapped from changed in place (v
 * is then retired): asked once an answer was taken from v, before it is
 * given, as fs_shard_index_unchanged is for an index. */
static int view_unchanged(struct fs *fs, const struct fs_ifview *v)
{
	if (!v->map || cachetier_meta_changed(v->map) == 0)
		return 0;
	view_changed(fs, (struct fs_ifview *)v);
	return -ESTALE;
}

/* A record of v out of its bounds: only a view whose file changed since
 * its load has one (ESTALE, v retired); -EIO if v says it did not. */
static int view_bad(struct fs *fs, const struct fs_ifview *v)
{
	int err = view_unchanged(fs, v);

	return err < 0 ? err : -EIO;
}

static void gaps_log(const struct fs *fs, const struct fs_ifview *v);

int fs_if_get(struct fs *fs, const struct fs_ifview **v)
{
	struct fs_imagefolder *f = fs->imagefolder;
	struct fs_ifview *p = atomic_load_explicit(&f->ifv, memory_order_acquire);
	int err = 0;

	if (p && p->map && cachetier_meta_changed(p->map) != 0) {
		view_changed(fs, p);
		p = NULL;
	}

	for (int round = 0; !p && round < IF_STALE_BUILDS; round++) {
		disk_mutex_lock(&f->lock);
		err = 0;
		p = atomic_load_explicit(&f->ifv, memory_order_acquire);
		if (!p) {
			err = fs__if_view(fs, &p);
			if (err == 0) {
				atomic_store_explicit(&f->ifv, p, memory_order_release);
				gaps_log(fs, p);
			}
		}
		disk_mutex_unlock(&f->lock);
		if (err != -ESTALE)
			break;
		/* outside the lock: a replacement resets the view under it */
		fs_shards_replace_rejected(fs);
	}

	*v = p;
	return err;
}

/* The view, for an operation that asks view_unchanged before it answers:
 * a published view is taken without fs_if_get's check (an inotify read;
 * the one after the read is what makes the answer right), so a file's
 * lookup checks the view once, as a getattr does. Its reads stay inside
 * the mapping: they are bounded by the counts load validated, which are in
 * the heap (fs_if_file_lookup, fs_if_name_at). */
static int view_peek(struct fs *fs, const struct fs_ifview **v)
{
	*v = atomic_load_explicit(&fs->imagefolder->ifv, memory_order_acquire);
	return *v ? 0 : fs_if_get(fs, v);
}

void fs_if_clear(struct fs *fs)
{
	struct fs_imagefolder *f = fs->imagefolder;

	view_free(f->ifv);
	f->ifv = NULL;
	while (f->retired) {
		struct fs_ifview *v = f->retired;

		f->retired = v->retired_next;
		view_free(v);
	}
}

void fs_if_reset(struct fs *fs)
{
	struct fs_imagefolder *f = fs->imagefolder;
	struct fs_ifview *v;

	disk_mutex_lock(&f->lock);
	v = atomic_exchange(&f->ifv, NULL);
	if (v) {
		/* a view whose file changed in place has no names left to tell
		 * (view_changed): its class inodes only */
		int named = !v->map || cachetier_meta_changed(v->map) == 0;

		/* class inodes are indexes into this view: the kernel must look
		 * every class name up again in the next one, and drop the
		 * listing it cached (cache_readdir) of each class inode, which
		 * the next view may give to another class or other files (a
		 * reader in the directory keeps the inode alive across the
		 * lookup) */
		for (uint32_t i = 0; i < v->nclasses; i++) {
			const char *name = named ? fs_if_class(v, i, NULL, NULL, NULL) : NULL;

			if (name)
				fs_notify_entry(fs, 1, name, strlen(name));
			fs_notify_inode(fs, fs_ino(FS_K_IFCLASS, i, 0));
		}
		fs_notify_inode(fs, 1);
		v->retired_next = f->retired;
		f->retired = v;
	}
	disk_mutex_unlock(&f->lock);
}

/* A shard's index the view reads answered err: when the index's file changed
 * in place (the shard is rejected, fs_shard_index_unchanged), the shard is
 * replaced now, as a lookup of its name does in the shards layout, since
 * nothing in this layout looks it up: its replacement resets the view under
 * it, and the next lookup builds both again. Outside the imagefolder lock. */
static int index_stale(struct fs *fs, int err)
{
	if (err == -ESTALE)
		fs_shards_replace_rejected(fs);
	return err;
}

/* The view does not match a shard's index (another index than the one it
 * was built from): retired like a view whose file changed, counted as
 * rejected, built again on the next use. Asked first: whether the index's
 * file changed since it was validated (cut or written under the operation:
 * its reads got the guard's zeros); that is ESTALE for this operation
 * alone, and says nothing against the view. Then whether the view's own
 * file changed (read before its check: view_peek): retired as changed. */
static int view_mismatch(struct fs *fs, const struct fs_ifview *v, uint32_t shard)
{
	int changed = fs_shard_index_unchanged(fs, shard);

	if (changed < 0)
		return index_stale(fs, changed);
	if (view_unchanged(fs, v) < 0)
		return -ESTALE; /* the view's own file changed: retired as that */
	if (view_retire(fs, (struct fs_ifview *)v, 1)) {
		fs->c.if_view_rejected++;
		fs_log(FS_LOG_WARN,
		       "imagefolder: the view does not match the index of shard %s; it is "
		       "dropped and built again",
		       fs_obj(fs, fs_shard(fs, shard)->obj)->key);
	}
	return -ESTALE;
}

/* Shard's index, for a read whose answer is checked afterwards
 * (fs_shard_index_unchanged): a loaded index is taken as it is, without
 * fs_shard_index's check before it is handed out (each check is a read of
 * the cache's inotify descriptor under its lock, the largest cost of a
 * getattr here). That is safe: a changed mapping reads the guard's zeros or
 * stale bytes, never past its end (every decode is bounded by the sizes
 * the load validated, which live in the heap), and the check after the
 * read turns any answer taken from it into ESTALE. An index not loaded
 * yet is loaded (fs_shard_index). */
static int if_index(struct fs *fs, uint32_t shard, struct shardidx **ix)
{
	struct fs_shard *s = fs_shard(fs, shard);

	*ix = atomic_load_explicit(&s->ix, memory_order_acquire);
	if (*ix && fs_obj_live(fs_obj(fs, s->obj)))
		return 0;
	return fs_shard_index(fs, shard, ix, NULL);
}

/* What the binary search over the classes seeks (disk_bsearch). */
struct ifv_key {
	const struct fs_ifview *v;
	const char *name;
	size_t len;
};

static int ifv_class_cmp(const void *ctx, size_t i)
{
	const struct ifv_key *k = ctx;

	return fs_name_cmp(k->v->strtab + disk_le64_get(k->v->classes + i * IFV_CLASS_REC), k->name,
			   k->len);
}

int64_t fs_if_class_lookup(const struct fs_ifview *v, const char *name, size_t len)
{
	struct ifv_key k = {.v = v, .name = name, .len = len};
	int found;
	size_t i = disk_bsearch(0, v->nclasses, ifv_class_cmp, &k, &found);

	return found ? (int64_t)i : -ENOENT;
}

/* ---- the view's operations (fs_view.h) ------------------------------------
 * The root lists the classes (FS_K_IFCLASS), a class its files
 * (FS_K_IFFILE). A file is its image member: read, xattrs and log lines are
 * the member's; its attributes too, with its own inode and nlink 1. */

static int ifroot_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	int err = fs_view_dir.getattr(fs, ino, st);

	if (err == 0)
		st->st_nlink = 1; /* "unknown": no view needed to answer */
	return err;
}

static int ifroot_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			 uint64_t *ino)
{
	const struct fs_ifview *v;
	int64_t idx;
	int err = fs_if_get(fs, &v);

	(void)parent;
	if (err < 0)
		return err;
	idx = fs_if_class_lookup(v, name, len);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_IFCLASS, (uint32_t)idx, 0);
	return view_unchanged(fs, v);
}

static int ifroot_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	const struct fs_ifview *v;
	int err = fs_if_get(fs, &v);

	(void)ino;
	if (err < 0)
		return err;
	l->p = v;
	l->n = v->nclasses;
	l->parent = 1;
	return 0;
}

static const char *ifroot_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	const struct fs_ifview *v = l->p;

	*ino = fs_ino(FS_K_IFCLASS, i, 0);
	return fs_if_class(v, i, NULL, NULL, NULL);
}

static const struct fs_view fs_view_ifroot = {
    .name = "imagefolder root",
    .getattr = ifroot_getattr,
    .lookup = ifroot_lookup,
    .list_open = ifroot_list_open,
    .list_entry = ifroot_list_entry,
};

static int ifclass_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct fs_ifview *v;
	uint32_t a = fs_ino_a(ino);
	int64_t mtime;
	int err = fs_if_get(fs, &v);

	if (err < 0)
		return err;
	if (a >= v->nclasses || fs_ino_b(ino) != 0)
		return -ENOENT;
	fs_if_class(v, a, NULL, NULL, &mtime);
	fs_attr_dir(fs, st, ino, 0555, 2, mtime);
	return view_unchanged(fs, v);
}

/* The name a lookup or a listing with attributes found file ino under (in
 * view v, its kind of name), for the getattr fs_op_lookup or
 * fs_op_readdir makes of it next on the same thread: that getattr checks
 * the name against the member's (if_name_check) and clears it. */
static _Thread_local struct {
	const struct fs_ifview *v;
	uint64_t ino;
	uint32_t kind;
	size_t len;
	char name[SHARDIDX_NAME_MAX + 1];
} iffile_named;

static void iffile_name(const struct fs_ifview *v, uint64_t ino, uint32_t i, const char *name,
			size_t len)
{
	iffile_named.v = v;
	iffile_named.ino = ino;
	iffile_named.kind = fs_if_file_kind(v, i);
	iffile_named.len = len;
	memcpy(iffile_named.name, name, len);
}

static int ifclass_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			  uint64_t *ino)
{
	const struct fs_ifview *v;
	uint32_t shard, entry;
	int64_t idx;
	int err = view_peek(fs, &v);

	if (err < 0)
		return err;
	/* the name is the view's: no shard's index is read (the getattr that
	 * fs_op_lookup makes next reads the member's attributes) */
	idx = fs_if_file_lookup(v, fs_ino_a(parent), name, len, &shard, &entry);
	if (idx == -EBADMSG)
		return view_bad(fs, v);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_IFFILE, shard, entry);
	if (idx >= 0)
		iffile_name(v, *ino, (uint32_t)idx, name, len);
	return view_unchanged(fs, v);
}

/* A listing's place in the view's names, per thread (list_entry runs on
 * the thread of its request): the next name of a listing that asks for
 * its entries in order is decoded from the one before, in place in its
 * namebuf, instead of from its block's first name. */
static _Thread_local struct {
	const struct fs_ifview *v;
	const char *buf; /* the listing's namebuf, holding name i - 1 */
	uint32_t c, i;	 /* class, the next name's place in it */
	uint64_t pos;	 /* where that name starts */
	int len;	 /* the length of name i - 1 */
} ifclass_cur;

/* A listing's first error decoding a name or in the getattr fs_op_readdir
 * makes of a listed file (which leaves out a file it cannot stat), for
 * list_check: list_entry, those getattrs and list_check run on the thread
 * of the request. */
static _Thread_local int ifclass_list_err;

static int ifclass_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	const struct fs_ifview *v;
	int err = fs_if_get(fs, &v);

	(void)ino;
	ifclass_list_err = 0;
	ifclass_cur.v = NULL;
	if (err < 0)
		return err;
	if (l->a >= v->nclasses)
		return -ENOENT;
	l->p = v;
	fs_if_class(v, l->a, &l->first, &l->n, NULL);
	l->parent = 1;
	return 0;
}

/* Names and inodes from the view alone: no shard's index is read (its
 * attributes, where the listing gives them, are the getattr's). */
static const char *ifclass_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	const struct fs_ifview *v = l->p;
	uint32_t shard, entry;
	int len;

	if (ifclass_cur.v == v && ifclass_cur.buf == l->namebuf && ifclass_cur.c == l->a &&
	    ifclass_cur.i == i && i % IFV_BLOCK != 0)
		len = fs_if_name_next(v, &ifclass_cur.pos, l->namebuf, ifclass_cur.len);
	else
		len = fs_if_name_at(v, l->a, i, l->namebuf, &ifclass_cur.pos);
	/* load validated every record; one read from a view whose file
	 * changed since (before its check: list_check) may not be */
	if (len < 0 || l->first + i >= v->nfiles) {
		ifclass_cur.v = NULL;
		ifclass_list_err = view_bad(l->fs, v); /* the listing ends here, and says why */
		return NULL;
	}
	ifclass_cur.v = v;
	ifclass_cur.buf = l->namebuf;
	ifclass_cur.c = l->a;
	ifclass_cur.i = i + 1;
	ifclass_cur.len = len;
	fs_if_file(v, l->first + i, &shard, &entry);
	*ino = fs_ino(FS_K_IFFILE, shard, entry);
	iffile_name(v, *ino, l->first + i, l->namebuf, (size_t)len);
	return l->namebuf;
}

/* A listing that ended at a name it could not decode fails with why (never
 * a short listing that looks whole); so does one whose view changed while
 * it was read. */
static int ifclass_list_check(const struct fs_listing *l)
{
	int err = ifclass_list_err;

	ifclass_list_err = 0;
	ifclass_cur.v = NULL;
	return err ? err : view_unchanged(l->fs, l->p);
}

static const struct fs_view fs_view_ifclass = {
    .name = "imagefolder class",
    .getattr = ifclass_getattr,
    .lookup = ifclass_lookup,
    .list_open = ifclass_list_open,
    .list_entry = ifclass_list_entry,
    .list_check = ifclass_list_check,
};

/* Does entry e (canonical, of shard) make the name the view gave file ino
 * (iffile_named, of kind kind)? The name fs_if_name makes from the member's,
 * as the build did; a file named after a hard link to e (IFV_NAME_LINK)
 * only needs e to be linked to. */
static int if_name_check(struct fs *fs, uint32_t shard, uint32_t idx,
			 const struct shardidx_entry *e, uint32_t kind)
{
	char made[SHARDIDX_NAME_MAX + 1];
	int n;

	if (e->canon != idx)
		return 0; /* the build names canonical entries only */
	if (kind == IFV_NAME_LINK)
		return e->nlink > 1;
	n = fs_if_name(e->name, kind, fs_shard(fs, shard)->dirname, idx, made, sizeof(made));
	return n >= 0 && (size_t)n == iffile_named.len &&
	       memcmp(made, iffile_named.name, (size_t)n) == 0;
}

/* The member's attributes (its shard's index), with the file's own inode
 * and nlink 1: fs_member_getattr's answer for a file, with one check of
 * the index, after the read (if_index); an index whose file changed
 * replaces its shard now (index_stale: nothing else in this layout reads
 * it, not even a lookup). The shard's index must be the one the published
 * view was built from (its file's checksum, and its entry count: another
 * index numbers other members), and for a getattr made for a name (iffile_named) the member's
 * name must make that name (a view whose record names another member, or
 * whose name is of another kind); else the view is retired, rejected and
 * built again. */
static int iffile_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct fs_ifview *v =
	    atomic_load_explicit(&fs->imagefolder->ifv, memory_order_acquire);
	uint32_t shard = fs_ino_a(ino), idx = fs_ino_b(ino), kind = 0;
	struct shardidx *ix;
	struct shardidx_entry e;
	int err, found, named = v && iffile_named.v == v && iffile_named.ino == ino;

	if (named)
		kind = iffile_named.kind;
	iffile_named.v = NULL;
	if (shard >= fs->nshards)
		return -ENOENT;
	err = if_index(fs, shard, &ix);
	if (err < 0)
		err = index_stale(fs, err);
	else if (v && shard < v->nshards &&
		 (shardidx_file_sum(ix) != disk_le64_get(v->sums + (size_t)shard * 8) ||
		  shardidx_count(ix) != disk_le32_get(v->counts + (size_t)shard * 4)))
		err = view_mismatch(fs, v, shard);
	if (err < 0) {
		if (ifclass_list_err == 0)
			ifclass_list_err = err;
		return err;
	}
	found = shardidx_entry_get(ix, idx, &e) == 0;
	if (found && named && !if_name_check(fs, shard, idx, &e, kind)) {
		err = view_mismatch(fs, v, shard);
		if (ifclass_list_err == 0)
			ifclass_list_err = err;
		return err;
	}
	found = found && (e.canon == idx || shardidx_entry_get(ix, e.canon, &e) == 0) &&
		e.type == SHARDIDX_REG;
	if (found)
		fs_attr_file(fs, st, ino, S_IFREG | (e.mode & 07777), e.size, e.mtime);
	err = fs_shard_index_unchanged(fs, shard);
	err = err < 0 ? index_stale(fs, err) : found ? 0 : -ENOENT;
	/* a listing's (list_check): never one short of it, and never ENOENT,
	 * which glibc's readdir takes for the end of the directory */
	if (err < 0 && ifclass_list_err == 0)
		ifclass_list_err = err == -ENOENT ? -ESTALE : err;
	return err;
}

static uint64_t iffile_member_of(uint64_t ino)
{
	return fs_ino(FS_K_MEMBER, fs_ino_a(ino), fs_ino_b(ino));
}

/* iffile_named for file ino, kept for a getattr asked later (fs_view.h:
 * named_keep, named_put). */
static void iffile_named_keep(uint64_t ino, struct fs_view_named *k)
{
	k->v = iffile_named.v && iffile_named.ino == ino ? iffile_named.v : NULL;
	k->kind = iffile_named.kind;
}

static void iffile_named_put(uint64_t ino, const struct fs_view_named *k, const char *name,
			     size_t len)
{
	iffile_named.v = NULL;
	if (!k->v || len > SHARDIDX_NAME_MAX)
		return;
	iffile_named.v = k->v;
	iffile_named.ino = ino;
	iffile_named.kind = k->kind;
	iffile_named.len = len;
	memcpy(iffile_named.name, name, len);
}

static const struct fs_view fs_view_iffile = {
    .name = "imagefolder file",
    .getattr = iffile_getattr,
    .read = fs_member_read,
    .xattr = fs_member_xattr,
    .describe = fs_member_describe,
    .mark_stale = fs_member_mark_stale,
    .member_of = iffile_member_of,
    .named_keep = iffile_named_keep,
    .named_put = iffile_named_put,
    .list_type_only = 1,
};

/* ---- the layout (fs_view.h) ----------------------------------------------- */

static uint64_t if_member_alias(uint32_t shard, uint32_t entry)
{
	return fs_ino(FS_K_IFFILE, shard, entry);
}

/* Build the view now, before the mount is ready, and say on the caller's
 * stderr what it left out and why (an empty view that mounts silently
 * looks like a bug in the data loader). */
/* --class-from cls: the .cls values below the largest that no class has:
 * how many, the largest value, the first 8 in list. */
static uint64_t gaps_find(const struct fs *fs, const struct fs_ifview *v, uint64_t *last,
			  char *list, size_t size)
{
	uint64_t expect = 0, missing = 0;
	size_t ll = 0;

	list[0] = '\0';
	*last = 0;
	if (fs->cfg.class_from != FS_CLASS_CLS)
		return 0;
	for (uint32_t c = 0; c < v->nclasses; c++) {
		const char *name = fs_if_class(v, c, NULL, NULL, NULL);
		char *end;
		uint64_t val = strtoull(name, &end, 10);

		if (end == name || *end || val < expect)
			continue; /* not a .cls class name */
		for (uint64_t m = expect; m < val && missing + (m - expect) < 8; m++) {
			int n = snprintf(list + ll, size - ll, "%s%" PRIu64, ll ? ", " : "", m);

			if (n > 0 && (size_t)n < size - ll)
				ll += (size_t)n;
		}
		missing += val - expect;
		expect = val + 1;
		*last = val;
	}
	return missing;
}

/* A view just built or loaded (at mount, or after a refresh: the mount is
 * not refused then, the log says it). */
static void gaps_log(const struct fs *fs, const struct fs_ifview *v)
{
	char list[160];
	uint64_t last, missing = gaps_find(fs, v, &last, list, sizeof(list));

	if (missing)
		fs_log(FS_LOG_WARN,
		       "imagefolder: .cls values missing below %" PRIu64 ": %" PRIu64 " (%s%s)%s",
		       last, missing, list, missing > 8 ? ", ..." : "",
		       fs->cfg.class_gaps == FS_GAPS_EMPTY
			   ? ": empty class directories stand for them (--class-gaps empty)"
			   : ": torchvision's labels above them are shifted");
}

/* torchvision's ImageFolder numbers the class directories in name order,
 * so a missing .cls value shifts the label of every class above it: the
 * mount is refused (-EINVAL, said on stderr with the values) unless
 * --class-gaps empty, whose view has an empty class for each. Checked on
 * the view, built or loaded, so a remount from a saved view says it too. */
static int check_gaps(struct fs *fs, const struct fs_ifview *v)
{
	char list[160];
	uint64_t last, missing = gaps_find(fs, v, &last, list, sizeof(list));

	if (!missing || fs->cfg.class_gaps == FS_GAPS_EMPTY)
		return 0;
	fprintf(stderr,
		"shardfs: imagefolder: the .cls values are not 0..%" PRIu64 ": %" PRIu64
		" missing (%s%s). torchvision's ImageFolder numbers the class directories in "
		"order, so every sample of a class above a missing value would train under "
		"another label. Fix the .cls members, or mount with --class-gaps empty to show "
		"an empty class directory for each missing value (the labels then equal the .cls "
		"integers; see docs/mount.md)\n",
		last, missing, list, missing > 8 ? ", ..." : "");
	return -EINVAL;
}

static int if_prepare(struct fs *fs)
{
	static const char *const why_class[] = {
	    "no .cls member, or one that is not an integer (--class-from cls)",
	    "the image is not in a directory inside its shard (--class-from dir)",
	    "the key has no '_' (--class-from key-prefix)",
	};
	const struct fs_ifview *v;
	unsigned long long no_image, no_class, dup, bad_shards, left;
	int err = fs_if_get(fs, &v);

	if (err < 0) {
		fprintf(stderr, "shardfs: imagefolder: cannot build the view: %s\n",
			strerror(-err));
		_Static_assert(IF_GAPS_MAX == 1000000u, "the message below says IF_GAPS_MAX");
		/* the build's only E2BIG (gaps_put): said as what it is, not as
		 * "Argument list too long" alone (the log, which names the
		 * value, is in the cache directory by now) */
		if (err == -E2BIG && fs->cfg.class_gaps == FS_GAPS_EMPTY)
			fprintf(stderr,
				"shardfs: imagefolder: --class-gaps empty: a .cls value lies more "
				"than 1000000 past the values below it, and that many empty class "
				"directories are not shown (the mount's log names the value); fix "
				"the .cls members, or mount without --class-gaps empty to be told "
				"the missing values\n");
		if (err == -ENOSPC)
			fprintf(
			    stderr,
			    "shardfs: imagefolder: its cache directory %s is full: a dataset "
			    "larger than --imagefolder-build-memory is sorted in runs there and "
			    "its view written there; free space there, use another --cache-dir, "
			    "or raise --imagefolder-build-memory to build it in memory\n",
			    fs->cfg.ct.cache_dir);
		return err;
	}
	err = check_gaps(fs, v);
	if (err < 0)
		return err;
	no_image = fs->c.if_no_image;
	no_class = fs->c.if_no_class;
	dup = fs->c.if_dup_dropped;
	bad_shards = fs->c.index_errors;
	left = no_image + no_class + dup;
	if (left == 0 && bad_shards == 0 && v->nfiles > 0)
		return 0;
	fprintf(stderr, "shardfs: imagefolder: %u %s in %u %s from %u %s", v->nfiles,
		fs_plural(v->nfiles, "image", "images"), v->nclasses,
		fs_plural(v->nclasses, "class", "classes"), fs->nshards,
		fs_plural(fs->nshards, "shard", "shards"));
	if (left)
		fprintf(stderr, "; %llu of %llu %s left out", left, left + v->nfiles,
			fs_plural(left + v->nfiles, "sample", "samples"));
	fprintf(stderr, "\n");
	if (no_class)
		fprintf(stderr, "shardfs: imagefolder: %llu %s without a class: %s\n", no_class,
			fs_plural(no_class, "sample", "samples"), why_class[fs->cfg.class_from]);
	if (no_image)
		fprintf(stderr,
			"shardfs: imagefolder: %llu %s without an image member (jpg, jpeg, "
			"png, webp, bmp, ppm, pgm, tif, tiff)\n",
			no_image, fs_plural(no_image, "sample", "samples"));
	if (dup)
		fprintf(stderr, "shardfs: imagefolder: %llu %s whose name was taken\n", dup,
			fs_plural(dup, "sample", "samples"));
	if (bad_shards)
		fprintf(stderr, "shardfs: imagefolder: %llu %s not be indexed (see the log)\n",
			bad_shards, fs_plural(bad_shards, "shard could", "shards could"));
	if (fs->nshards == 0)
		fprintf(stderr, "shardfs: imagefolder: the source has no shards\n");
	return 0;
}

/* Files are the members, under inodes of their own; a changed shard
 * retires the view (fs_if_reset). Loader indexes name the shards layout's
 * paths, which this mount does not show. */
const struct fs_layout_ops fs_layout_imagefolder = {
    .name = "imagefolder",
    .root = &fs_view_ifroot,
    .kinds = {[FS_K_IFCLASS - FS_K_LAYOUT] = &fs_view_ifclass,
	      [FS_K_IFFILE - FS_K_LAYOUT] = &fs_view_iffile},
    .member_alias = if_member_alias,
    .shards_changed = fs_if_reset,
    .prepare = if_prepare,
    .free = fs_if_clear,
};
