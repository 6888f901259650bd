/*
 * fs_ops.c — the filesystem's operations, without FUSE (fs_ops.h).
 *
 * Every operation decodes the computed inode number (fs_i.h) into its view
 * (fs_view.h: the source's directories and objects, shards and members,
 * control files, the imagefolder view) and calls the view's operation; what
 * is the same for every kind (entries, timeouts, listings' "." and "..",
 * failures' bookkeeping, control commands) is here. Inodes are computed, so
 * nothing is allocated per inode.
 *
 * Caching: shard contents never change for one ETag (a changed object is a
 * new version at new inode numbers), so entries, attributes and negative
 * lookups get long timeouts, files open with keep_cache. Member and object
 * reads answer with an extent of a file descriptor, so the adapter can
 * splice from the source file or the decoded copy. Control files are the
 * exception: timeouts 0, direct_io, a snapshot rendered at open (or, without
 * opens, at getattr).
 *
 * Everything is read-only: every modifying operation answers -EROFS, except
 * commands to .shardfs/control.
 *
 * Threads: operations may block (index loading, decoding). Shared state is
 * immutable, atomic, or (the source directories' entries) read under
 * ns_lock. A local object is stat'ed on every read and lookup
 * (fs_obj_check), so a file changed under the mount gives ESTALE for its
 * old inodes; kernel caches are invalidated by the notifier (fs_notify.c).
 *
 * Listings: an entry with attributes makes the kernel create an inode and a
 * dentry for it (readdirplus), about 1 KB and 2-3 us of the lister's time,
 * used or not; without them it passes the name and type on, as a plain
 * readdir. A walk that only lists (find, os.walk) needs the types alone;
 * one that stats or opens what it lists needs attributes, else it sends a
 * LOOKUP per file. With --listing-attrs looked a listing gives attributes
 * to directories (a walk descends into them) and to every entry of a
 * directory in which a file was looked up (fs->looked_dirs): the first
 * stat or open of a file of a directory listed without them makes its
 * later listings (the next batch of an ls -l, the next walk) carry them.
 * auto is looked in the shards layout and all in the imagefolder layout,
 * whose lister, ImageFolder, opens every file it listed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs_view.h"

/* ---- views and attributes ------------------------------------------------ */

/* The layouts: one row each, at the position of its name in --layout's
 * list (fs_opt.c), which is its enum fs_layout value. */
static const struct fs_layout_ops *const fs_layouts[] = {
    [FS_LAYOUT_SHARDS] = &fs_layout_shards,
    [FS_LAYOUT_IMAGEFOLDER] = &fs_layout_imagefolder,
};

const struct fs_layout_ops *fs_layout_of(const struct fs *fs)
{
	return fs_layouts[fs->cfg.layout];
}

const struct fs_view *fs_view_of(const struct fs *fs, uint64_t ino)
{
	/* the kinds every layout has */
	static const struct fs_view *const by_kind[16] = {
	    [FS_K_DIR] = &fs_view_dir,	   [FS_K_OBJ] = &fs_view_obj,
	    [FS_K_SHARD] = &fs_view_shard, [FS_K_MEMBER] = &fs_view_member,
	    [FS_K_CTL] = &fs_view_ctl,	   [FS_K_LIDX] = &fs_view_lidx,
	};
	const struct fs_layout_ops *l = fs_layout_of(fs);
	unsigned k = fs_ino_kind(ino);

	if (ino == 1)
		return l->root;
	if (k - FS_K_LAYOUT < FS_LAYOUT_KINDS)
		return l->kinds[k - FS_K_LAYOUT];
	return by_kind[k];
}

void fs_attr_base(const struct fs *fs, struct stat *st, uint64_t ino)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 65536;
}

void fs_attr_dir(const struct fs *fs, struct stat *st, uint64_t ino, mode_t perm, nlink_t nlink,
		 int64_t mtime)
{
	fs_attr_base(fs, st, ino);
	st->st_mode = S_IFDIR | perm;
	st->st_nlink = nlink;
	st->st_size = 4096;
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

void fs_attr_file(const struct fs *fs, struct stat *st, uint64_t ino, mode_t mode, uint64_t size,
		  int64_t mtime)
{
	fs_attr_base(fs, st, ino);
	st->st_mode = mode;
	st->st_nlink = 1;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

void fs_op_begin(void)
{
	cachetier_request_begin();
	fs_shard_request_begin();
}

/* fs_op_stop_on's stop, as the cache tier takes it */
static _Thread_local struct cachetier_stop op_stop;

void fs_op_stop_on(const struct fs_op_stop *stop)
{
	op_stop.asked = stop->asked;
	op_stop.arg = stop->arg;
	cachetier_request_stop(&op_stop);
}

int fs_op_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	return v ? v->getattr(fs, ino, st) : -ENOENT;
}

double fs_op_timeout(const struct fs *fs, uint64_t ino)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	return v && v->volatile_attrs ? 0.0 : fs->cfg.entry_timeout_s;
}

int fs_op_is_data(const struct fs *fs, uint64_t ino)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	return v && v->read && !v->volatile_attrs;
}

/* e for inode ino: its attributes (a hardlink resolves to its target's
 * inode) and timeouts. */
static int entry_of(struct fs *fs, uint64_t ino, struct fs_entry *e)
{
	int err;

	memset(e, 0, sizeof(*e));
	err = fs_op_getattr(fs, ino, &e->attr);
	if (err < 0)
		return err;
	e->ino = e->attr.st_ino;
	e->timeout = fs_op_timeout(fs, ino);
	return 0;
}

/* ---- directories whose files are looked up -------------------------------- */

static _Atomic uint64_t *looked_slot(struct fs *fs, uint64_t dir)
{
	return &fs->looked_dirs[(dir * 0x9E3779B97F4A7C15ull) >> (64 - FS_LOOKED_BITS)];
}

/* A file of directory dir was looked up: its listings give attributes. */
static void dir_mark_looked(struct fs *fs, uint64_t dir)
{
	_Atomic uint64_t *slot = looked_slot(fs, dir);

	if (atomic_load_explicit(slot, memory_order_relaxed) != dir)
		atomic_store_explicit(slot, dir, memory_order_relaxed);
}

/* Whether a listing of dir gives every entry's attributes: with all; with
 * auto in the imagefolder layout, whose listings are ImageFolder's (it
 * opens every file it listed: attributes now spare a LOOKUP round trip per
 * file, the FUSE threads' largest cost after the READ); else (looked, and
 * auto in the shards layout) once a file of dir was looked up. */
static int dir_lists_attrs(struct fs *fs, uint64_t dir)
{
	return fs->cfg.listing_attrs == FS_LISTING_ALL ||
	       (fs->cfg.listing_attrs == FS_LISTING_AUTO &&
		fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER) ||
	       atomic_load_explicit(looked_slot(fs, dir), memory_order_relaxed) == dir;
}

/* ---- lookup -------------------------------------------------------------- */

int fs_op_lookup(struct fs *fs, uint64_t parent, const char *name, struct fs_entry *e)
{
	fs->c.lookups++;
	return fs_lookup_entry(fs, parent, name, e);
}

int fs_lookup_ino(struct fs *fs, uint64_t parent, const char *name, uint64_t *ino)
{
	const struct fs_view *v = fs_view_of(fs, parent);

	*ino = 0;
	/* .shardfs is in the root of every layout (and never listed) */
	if (parent == 1 && strcmp(name, fs_ctl_names[FS_CTL_DIR]) == 0) {
		*ino = fs_ino(FS_K_CTL, FS_CTL_DIR, 0);
		return 0;
	}
	if (!v)
		return -ENOENT;
	if (!v->lookup)
		return -ENOTDIR;
	return v->lookup(fs, parent, name, strlen(name), ino);
}

int fs_lookup_attr(struct fs *fs, uint64_t parent, uint64_t ino, struct fs_entry *e)
{
	int err = entry_of(fs, ino, e);

	if (err == 0 && !S_ISDIR(e->attr.st_mode))
		dir_mark_looked(fs, parent);
	return err;
}

int fs_lookup_entry(struct fs *fs, uint64_t parent, const char *name, struct fs_entry *e)
{
	uint64_t ino;
	int err = fs_lookup_ino(fs, parent, name, &ino);

	if (err < 0)
		return err;
	if (ino)
		return fs_lookup_attr(fs, parent, ino, e);
	/* a cached "no such entry", as long as the directory's entries */
	memset(e, 0, sizeof(*e));
	e->timeout = fs_op_timeout(fs, parent);
	return 0;
}

int fs_op_readlink(struct fs *fs, uint64_t ino, const char **target)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	return v && v->readlink ? v->readlink(fs, ino, target) : -EINVAL;
}

/* ---- open / read ----------------------------------------------------------- */

static int is_control(uint64_t ino)
{
	return fs_ino_kind(ino) == FS_K_CTL && fs_ino_a(ino) == FS_CTL_CONTROL;
}

int fs_op_open(struct fs *fs, uint64_t ino, int flags, struct fs_open *o)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	memset(o, 0, sizeof(*o));
	if (v && v->open)
		return v->open(fs, ino, flags, o);
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))
		return -EROFS;
	if (!v || !v->read)
		return -EISDIR;
	/* immutable data: the kernel keeps its pages */
	o->keep_cache = 1;
	o->noflush = 1;
	return 0;
}

void fs_op_release(struct fs *fs, uint64_t ino, uint64_t fh)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	if (v && v->release)
		v->release(fs, ino, fh);
}

int fs_op_write(struct fs *fs, uint64_t ino, const char *buf, size_t size, uid_t uid, gid_t gid,
		pid_t pid)
{
	if (!is_control(ino))
		return -EROFS;
	(void)pid; /* a write's commands are no process's own: as before, pid 0 */
	return fs_ctl_command_as(fs, buf, size, uid, gid, 0, NULL);
}

int fs_op_ioctl(struct fs *fs, uint64_t ino, unsigned cmd, uid_t uid, gid_t gid, pid_t pid,
		const void *in_buf, size_t in_len, const struct fs_op_stop *stop)
{
	if (cmd != FS_CTL_IOC || !is_control(ino))
		return -ENOTTY;
	if (uid != 0 && uid != fs->uid)
		return -EACCES;
	if (in_len != FS_CTL_IOC_LEN)
		return -EINVAL;
	return fs_ctl_command_as(fs, in_buf, strnlen(in_buf, in_len), uid, gid, pid, stop);
}

int fs_read_fd_range(struct fs *fs, struct cachetier_obj *o, uint64_t off, size_t size,
		     struct fs_read *r)
{
	int err = fetch_stage_hold(fs->fetch, o, size, off, &r->buf, &r->stage);

	if (err < 0)
		return err; /* given up while the span came (fs_op_stop_on) */
	/* a planned read of staged bytes: answered from the stage's memory, held
	 * until the reply is sent (fs_op_read_done) */
	if (err) {
		r->len = size;
		fs->c.read_bytes += size;
		return 0;
	}
	err = fetch_read_begin(fs->fetch, r->reader, o, off, size, &r->fd, &r->fd_off, &r->pin);
	if (err < 0)
		return err;
	r->len = size;
	fs->c.read_bytes += size;
	return 0;
}

int fs_op_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
	       struct fs_read *r)
{
	return fs_op_read_by(fs, ino, fh, off, size, 0, r);
}

int fs_op_read_by(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		  uint32_t reader, struct fs_read *r)
{
	const struct fs_view *v = fs_view_of(fs, ino);
	int err;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->reader = reader;
	fs->c.reads++;
	if (!v || !v->read)
		return -EISDIR;
	if (!v->volatile_attrs) /* control files: rendered, not counted */
		fs->c.reads_inflight++;
	err = v->read(fs, ino, fh, off, size, r);
	if (!v->volatile_attrs) {
		if (err < 0) {
			fs->c.reads_inflight--;
			if (err == -EINTR) /* its sender gave up (fs_op_stop_on) */
				fs->c.reads_interrupted++;
		} else {
			r->fs = fs; /* counted until fs_op_read_done */
			r->plan_wake = fs_plan_note_read(fs, v->member_of ? v->member_of(ino) : ino,
							 off, size);
		}
	}
	/* a remote object that changed under a read: the next lookup of its
	 * name gets the new version */
	if (err == -ESTALE && v->mark_stale)
		v->mark_stale(fs, ino);
	return err;
}

void fs_op_read_done(struct fs_read *r)
{
	if (r->pin)
		cachetier_obj_read_end(r->pin);
	if (r->stage) { /* buf is the stage's */
		fetch_stage_release(r->stage);
		r->buf = NULL;
	}
	if (r->plan_wake) /* after the unpin: a fetcher may evict what it read */
		fs_plan_wake(r->fs);
	if (r->fs)
		r->fs->c.reads_inflight--;
	free(r->buf);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
}

/* ---- directories ----------------------------------------------------------- */

int fs_op_opendir(struct fs *fs, uint64_t ino)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	if (!v || !v->list_open)
		return -ENOTDIR;
	return v->opendir ? v->opendir(fs, ino) : 0;
}

/* The attributes a listing gives entry eino of l (type: what the listing
 * said of it, or 0), into e: its own (with its name, or a getattr), its name
 * and type only (e->ino 0: the kernel makes no entry), or none (a getattr
 * failed: its error, and the entry is left out). */
static int list_attrs(struct fs *fs, const struct fs_listing *l, uint64_t eino, int attrs,
		      mode_t type, struct fs_entry *e)
{
	int aerr;

	if (e->attr.st_ino) {
		/* its attributes came with its name, from what the
		 * listing read (a shard's index): list_check covers
		 * them as it covers the names */
		e->ino = e->attr.st_ino;
		e->timeout = fs_op_timeout(fs, eino);
		aerr = 0;
	} else if (!attrs && ((type && !S_ISDIR(type)) || fs_view_of(fs, eino)->list_type_only)) {
		/* its name and type, no getattr (find of an imagefolder view,
		 * or of a shard's members: the type came with the name) */
		memset(e, 0, sizeof(*e));
		e->attr.st_ino = eino;
		e->attr.st_mode = type ? type : S_IFREG;
		aerr = 1;
	} else {
		/* a brace pattern's name that list_prepare could not learn
		 * (the store is down): its name only, a lookup asks again */
		aerr = fs_ino_unlearned(fs, eino) ? -EAGAIN : entry_of(fs, eino, e);
	}
	if (aerr == 1) {
		/* listed as it is */
	} else if ((aerr == -ESTALE && l->stale_names) || aerr == -EAGAIN) {
		/* a file that changed and was not looked up since: list its
		 * name without attributes (ino 0: the kernel makes no entry),
		 * so a lookup gets the new version */
		memset(e, 0, sizeof(*e));
		e->attr.st_ino = eino;
		e->attr.st_mode = fs_view_of(fs, eino)->read ? S_IFREG : S_IFDIR;
	} else if (aerr < 0) {
		return aerr;
	} else if (!attrs && !S_ISDIR(e->attr.st_mode)) {
		e->ino = 0; /* its name and type (e->attr's st_ino, S_IFMT) */
	}
	return 0;
}

int fs_op_readdir(struct fs *fs, uint64_t ino, uint64_t off, fs_dirent_fn fn, void *ctx)
{
	const struct fs_view *v = fs_view_of(fs, ino);
	struct fs_listing l;
	struct fs_entry e;
	char namebuf[FS_NAME_BUF];
	mode_t type;
	int err, attrs;

	fs->c.readdirs++;
	if (!v || !v->list_open)
		return -ENOTDIR;
	memset(&l, 0, sizeof(l));
	l.fs = fs;
	l.ino = ino;
	l.a = fs_ino_a(ino);
	l.namebuf = namebuf;
	l.type = &type;
	if (v->list_prepare)
		v->list_prepare(fs, ino, off);
	err = v->list_open(fs, ino, &l);
	/* glibc's readdir takes ENOENT from getdents for the end of a directory
	 * removed while it was read: a shard whose index cannot be built because
	 * it is gone from the store would list as an empty directory. The
	 * directory opened is stale. */
	if (err == -ENOENT)
		err = -ESTALE;
	if (err < 0)
		return err;
	attrs = dir_lists_attrs(fs, ino);
	l.attrs = attrs;
	l.attr = &e.attr;
	/* offsets: 0 "." , 1 "..", 2+i entry i; each entry carries the next */
	for (uint64_t pos = off; pos < (uint64_t)l.n + 2; pos++) {
		const char *name;
		uint64_t eino;

		if (pos < 2) {
			/* no inode: the kernel makes no entry for these */
			memset(&e, 0, sizeof(e));
			e.attr.st_ino = pos == 0 ? ino : l.parent;
			e.attr.st_mode = S_IFDIR;
			if (fn(ctx, pos == 0 ? "." : "..", &e, pos + 1))
				break;
			continue;
		}
		type = 0;
		e.attr.st_ino = 0;
		name = v->list_entry(&l, (uint32_t)(pos - 2), &eino);
		if (!name)
			break;
		if (list_attrs(fs, &l, eino, attrs, type, &e) < 0)
			continue;
		if (fn(ctx, name, &e, pos + 1))
			break;
		if (e.ino == 0)
			fs->c.listed_names_only++;
	}
	if (l.locked)
		fs_ns_unlock(fs);
	return v->list_check ? v->list_check(&l) : 0;
}

/* ---- the rest ---------------------------------------------------------------- */

void fs_op_statfs(struct fs *fs, struct statvfs *sv)
{
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = 4096;
	sv->f_frsize = 4096;
	sv->f_blocks = (fs->total_bytes + 4095) / 4096;
	sv->f_files = fs->nobjs + fs->ndirs + fs->c.members;
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
}

int fs_op_access(struct fs *fs, uint64_t ino, int mask)
{
	(void)fs;
	return (mask & W_OK) && !is_control(ino) ? -EROFS : 0;
}

int fs_op_setattr(struct fs *fs, uint64_t ino, int truncate_only, struct stat *st)
{
	/* 'echo prefetch > .shardfs/control' opens with O_TRUNC: let it */
	if (is_control(ino) && truncate_only && fs_op_getattr(fs, ino, st) == 0)
		return 0;
	return -EROFS;
}

/* ---- extended attributes: where a sample lives ------------------------------
 * Regular members and imagefolder files have them (fs_member_xattr);
 * everything else none. */
const char *const fs_xattr_names[FS_NXATTR] = {"user.shardfs.shard", "user.shardfs.offset",
					       "user.shardfs.size", "user.shardfs.key"};

int fs_op_getxattr(struct fs *fs, uint64_t ino, const char *name, char *buf, size_t size)
{
	const struct fs_view *v = fs_view_of(fs, ino);
	int n = -ENODATA;

	fs->c.xattr_requests++;
	/* ENOSYS: the kernel stops sending getxattr for the whole mount, so
	 * `ls -l`'s security.selinux and ACL probes cost no round trip */
	if (!fs->cfg.xattr || fs->cfg.no_xattr)
		return -ENOSYS;
	for (size_t i = 0; i < FS_NXATTR; i++)
		if (strcmp(name, fs_xattr_names[i]) == 0 && v && v->xattr)
			n = v->xattr(fs, ino, i, buf, size);
	return n;
}

int fs_op_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	const struct fs_view *v = fs_view_of(fs, ino);
	char val[FS_XATTR_MAX];
	size_t len = 0;
	int err;

	fs->c.xattr_requests++;
	if (!fs->cfg.xattr || fs->cfg.no_xattr)
		return -ENOSYS;
	/* all of them or none: ask for one */
	err = v && v->xattr ? v->xattr(fs, ino, 1, val, sizeof(val)) : -ENODATA;
	if (err == -ENODATA)
		return 0;
	if (err < 0)
		return err;
	for (size_t i = 0; i < FS_NXATTR; i++) {
		size_t l = strlen(fs_xattr_names[i]) + 1;

		if (len + l > size)
			return -ERANGE;
		memcpy(buf + len, fs_xattr_names[i], l);
		len += l;
	}
	return (int)len;
}

void fs_op_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	const struct fs_view *v = fs_view_of(fs, ino);

	if (v && v->describe)
		v->describe(fs, ino, buf, size);
	else
		snprintf(buf, size, "%s", v ? v->name : "?");
}
