/*
 * fs_ops.c — the filesystem's operations, without FUSE (fs_ops.h).
 *
 * Every operation decodes the computed inode number (fs_i.h) and asks the
 * namespace, a shard index, the imagefolder view, the control files or the
 * cache tier. Inodes are computed, so nothing is allocated per inode.
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
 * fs->ns_lock. A local object is stat'ed on every read and lookup
 * (fs_obj_check), so a file changed under the mount gives ESTALE for its
 * old inodes; kernel caches are invalidated by the notifier (fs_notify.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs_ops.h"

/* Extents answered with one fd extent; more (sparse members) are copied. */
#define FS_SPLICE_EXTENTS 8

/* ---- attributes ---------------------------------------------------------- */

static void attr_base(const struct fs *fs, struct stat *st, uint64_t ino)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 65536;
}

static void attr_dir(const struct fs *fs, struct stat *st, uint64_t ino, mode_t perm,
		     nlink_t nlink, int64_t mtime)
{
	attr_base(fs, st, ino);
	st->st_mode = S_IFDIR | perm;
	st->st_nlink = nlink;
	st->st_size = 4096;
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

static void attr_file(const struct fs *fs, struct stat *st, uint64_t ino, mode_t mode,
		      uint64_t size, int64_t mtime)
{
	attr_base(fs, st, ino);
	st->st_mode = mode;
	st->st_nlink = 1;
	st->st_size = (off_t)size;
	st->st_blocks = (blkcnt_t)((size + 511) / 512);
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

static int attr_member(struct fs *fs, uint32_t shard, uint32_t idx, struct stat *st)
{
	struct shardidx *ix;
	struct shardidx_entry e;
	int err = fs_shard_index(fs, shard, &ix, NULL);

	if (err < 0)
		return err;
	if (shardidx_entry_get(ix, idx, &e) < 0)
		return -ENOENT;
	if (e.canon != idx && shardidx_entry_get(ix, e.canon, &e) < 0)
		return -ENOENT;
	attr_base(fs, st, fs_ino(FS_K_MEMBER, shard, e.canon));
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = e.mtime;
	st->st_nlink = e.nlink;
	st->st_size = (off_t)e.size;
	switch (e.type) {
	case SHARDIDX_DIR:
		st->st_mode = S_IFDIR | (e.mode & 07777);
		st->st_size = 4096;
		break;
	case SHARDIDX_SYMLINK:
		st->st_mode = S_IFLNK | 0777;
		break;
	default:
		st->st_mode = S_IFREG | (e.mode & 07777);
		st->st_blocks = (blkcnt_t)((e.size + 511) / 512);
		break;
	}
	return 0;
}

/* A control file's attributes: render the current snapshot (see
 * fs->ctl_cur) and report its size, with a new mtime every time. */
static int ctl_attr(struct fs *fs, uint64_t ino, enum fs_ctl which, struct stat *st)
{
	struct fs_ctl_snap *cur = &fs->ctl_cur[which];
	struct timespec now;
	char *buf;
	size_t len;
	int err = fs_ctl_render(fs, which, &buf, &len);

	if (err < 0)
		return err;
	clock_gettime(CLOCK_REALTIME, &now);
	pthread_mutex_lock(&fs->ctl_lock);
	free(cur->buf);
	*cur = (struct fs_ctl_snap){++fs->ctl_gen, buf, len};
	pthread_mutex_unlock(&fs->ctl_lock);
	attr_file(fs, st, ino, S_IFREG | 0444, len, now.tv_sec);
	st->st_mtim = st->st_ctim = now;
	return 0;
}

int fs_op_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino), b = fs_ino_b(ino);
	nlink_t nlink;

	switch (fs_ino_kind(ino)) {
	case FS_K_DIR: {
		int64_t mtime;
		int gone;

		fs_ns_rdlock(fs);
		if (a >= fs->ndirs || (ino != 1 && b != 0)) {
			fs_ns_unlock(fs);
			return -ENOENT;
		}
		/* the imagefolder root: nlink 1 ("unknown"), no view needed */
		nlink = 2 + fs->dirs[a].nsubdirs;
		mtime = fs->dirs[a].mtime;
		gone = fs->dirs[a].gone;
		fs_ns_unlock(fs);
		if (gone)
			return -ESTALE; /* nothing below it any more */
		if (ino == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER)
			nlink = 1;
		attr_dir(fs, st, ino, 0555, nlink, mtime);
		return 0;
	}
	case FS_K_IFCLASS: {
		const struct fs_ifview *v;
		int err = fs_if_get(fs, &v);

		if (err < 0)
			return err;
		if (a >= v->nclasses || b != 0)
			return -ENOENT;
		attr_dir(fs, st, ino, 0555, 2, v->classes[a].mtime);
		return 0;
	}
	case FS_K_IFFILE: {
		int err;

		if (a >= fs->nshards)
			return -ENOENT;
		err = attr_member(fs, a, b, st);
		if (err == 0 && !S_ISREG(st->st_mode))
			err = -ENOENT;
		st->st_ino = ino;
		st->st_nlink = 1;
		return err;
	}
	case FS_K_OBJ: {
		const struct fs_obj *o;

		if (a >= fs->nobjs || b != 0)
			return -ENOENT;
		o = fs_obj(fs, a);
		if (!fs_obj_live(o))
			return -ESTALE; /* an old version: a refresh or lookup replaced it */
		/* read-only: strip write bits, keep the rest */
		attr_file(fs, st, ino, S_IFREG | (o->info.mode & 07555), o->info.size,
			  o->info.mtime);
		return 0;
	}
	case FS_K_SHARD: {
		const struct fs_obj *o;

		if (a >= fs->nshards || b != 0)
			return -ENOENT;
		o = fs_obj(fs, fs_shard(fs, a)->obj);
		if (!fs_obj_live(o))
			return -ESTALE;
		/* nlink 1: "unknown", so tools never infer the subdirectory count
		 * and we need not read the shard to answer */
		attr_dir(fs, st, ino, 0555, 1, o->info.mtime);
		return 0;
	}
	case FS_K_MEMBER:
		if (a >= fs->nshards)
			return -ENOENT;
		return attr_member(fs, a, b, st);
	case FS_K_CTL:
		if (a >= FS_CTL_COUNT || b != 0)
			return -ENOENT;
		if (a == FS_CTL_DIR)
			attr_dir(fs, st, ino, 0555, 2, fs->mount_time);
		else if (a == FS_CTL_CONTROL)
			/* read-write for the owner: commands are an ioctl on
			 * a read-only open (the mount is read-only) */
			attr_file(fs, st, ino, S_IFREG | 0600, 0, fs->mount_time);
		else
			return ctl_attr(fs, ino, (enum fs_ctl)a, st);
		return 0;
	}
	return -ENOENT;
}


double fs_op_timeout(const struct fs *fs, uint64_t ino)
{
	return fs_ino_kind(ino) == FS_K_CTL ? 0.0 : fs->cfg.entry_timeout_s;
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

/* A cached "no such entry". */
static int entry_negative(struct fs_entry *e, double timeout)
{
	memset(e, 0, sizeof(*e));
	e->timeout = timeout;
	return 0;
}

/* ---- lookup -------------------------------------------------------------- */

int fs_op_lookup(struct fs *fs, uint64_t parent, const char *name, struct fs_entry *e)
{
	uint32_t a = fs_ino_a(parent), b = fs_ino_b(parent);
	size_t len = strlen(name);
	struct shardidx *ix;
	int64_t idx;
	int err;

	fs->c.lookups++;
	switch (fs_ino_kind(parent)) {
	case FS_K_DIR: {
		const struct fs_dirent *d;
		uint32_t kind = 0, di = 0;

		if (parent == 1 && strcmp(name, fs_ctl_names[FS_CTL_DIR]) == 0)
			return entry_of(fs, fs_ino(FS_K_CTL, FS_CTL_DIR, 0), e);
		if (parent == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER) {
			const struct fs_ifview *v;

			err = fs_if_get(fs, &v);
			if (err < 0)
				return err;
			idx = fs_if_class_lookup(v, name, len);
			if (idx < 0)
				return entry_negative(e, fs->cfg.entry_timeout_s);
			return entry_of(fs, fs_ino(FS_K_IFCLASS, (uint32_t)idx, 0), e);
		}
		/* A lookup that reaches us revalidates: a local file that
		 * changed (or a remote object a read found changed) is replaced
		 * by its new version here, at new inode numbers. */
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
			if (!d)
				return entry_negative(e, fs->cfg.entry_timeout_s);
			if (kind == FS_K_DIR)
				break;
			obj = kind == FS_K_OBJ ? di : fs_shard(fs, di)->obj;
			if (tries == 2 || fs_obj_check(fs, obj) != -ESTALE)
				break;
			err = fs_ns_replace(fs, obj);
			if (err < 0)
				return err;
		}
		return entry_of(fs, fs_ino((enum fs_kind)kind, di, 0), e);
	}
	case FS_K_SHARD:
	case FS_K_MEMBER: {
		uint32_t dir = fs_ino_kind(parent) == FS_K_SHARD ? SHARDIDX_NONE : b;

		if (a >= fs->nshards)
			break;
		err = fs_obj_check(fs, fs_shard(fs, a)->obj);
		if (err == 0)
			err = fs_shard_index(fs, a, &ix, NULL);
		if (err < 0)
			return err;
		idx = shardidx_lookup(ix, dir, name, len);
		if (idx < 0)
			return entry_negative(e, fs->cfg.entry_timeout_s);
		return entry_of(fs, fs_ino(FS_K_MEMBER, a, (uint32_t)idx), e);
	}
	case FS_K_CTL:
		if (a != FS_CTL_DIR)
			return -ENOTDIR;
		for (uint32_t i = 1; i < FS_CTL_COUNT; i++)
			if (strcmp(name, fs_ctl_names[i]) == 0)
				return entry_of(fs, fs_ino(FS_K_CTL, i, 0), e);
		return entry_negative(e, 0);
	case FS_K_IFCLASS: {
		const struct fs_ifview *v;

		err = fs_if_get(fs, &v);
		if (err < 0)
			return err;
		idx = fs_if_file_lookup(v, a, name, len);
		if (idx < 0)
			return entry_negative(e, fs->cfg.entry_timeout_s);
		return entry_of(fs, fs_ino(FS_K_IFFILE, v->files[idx].shard, v->files[idx].entry), e);
	}
	case FS_K_OBJ:
	case FS_K_IFFILE:
		return -ENOTDIR;
	}
	return -ENOENT;
}

int fs_op_readlink(struct fs *fs, uint64_t ino, const char **target)
{
	struct shardidx *ix;
	struct shardidx_entry e;
	int err;

	if (fs_ino_kind(ino) != FS_K_MEMBER || fs_ino_a(ino) >= fs->nshards)
		return -EINVAL;
	err = fs_shard_index(fs, fs_ino_a(ino), &ix, NULL);
	if (err < 0)
		return err;
	if (shardidx_entry_get(ix, fs_ino_b(ino), &e) < 0 || e.type != SHARDIDX_SYMLINK)
		return -EINVAL;
	*target = e.link;
	return 0;
}

/* ---- open / read ----------------------------------------------------------- */

static int is_control(uint64_t ino)
{
	return fs_ino_kind(ino) == FS_K_CTL && fs_ino_a(ino) == FS_CTL_CONTROL;
}

int fs_op_open(struct fs *fs, uint64_t ino, int flags, struct fs_open *o)
{
	enum fs_kind k = fs_ino_kind(ino);

	memset(o, 0, sizeof(*o));
	if (is_control(ino)) {
		/* commands are ioctls on a read-only open (or writes, where a
		 * mount is writable); reading gives nothing */
		o->direct_io = 1;
		return 0;
	}
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))
		return -EROFS;
	if (k == FS_K_CTL) {
		struct fs_ctl_snap *slot;
		char *buf;
		size_t len;
		int err = fs_ctl_render(fs, (enum fs_ctl)fs_ino_a(ino), &buf, &len);

		if (err < 0)
			return err;
		pthread_mutex_lock(&fs->ctl_lock);
		o->fh = ++fs->ctl_gen;
		slot = &fs->ctl_snaps[o->fh % FS_CTL_SNAPS];
		free(slot->buf); /* a snapshot 1024 opens old: its reader is gone */
		*slot = (struct fs_ctl_snap){o->fh, buf, len};
		pthread_mutex_unlock(&fs->ctl_lock);
		o->direct_io = 1;
		return 0;
	}
	if (k != FS_K_OBJ && k != FS_K_MEMBER && k != FS_K_IFFILE)
		return -EISDIR;
	o->keep_cache = 1;
	o->noflush = 1;
	return 0;
}

void fs_op_release(struct fs *fs, uint64_t ino, uint64_t fh)
{
	struct fs_ctl_snap *slot = &fs->ctl_snaps[fh % FS_CTL_SNAPS];

	if (fs_ino_kind(ino) != FS_K_CTL || !fh)
		return;
	pthread_mutex_lock(&fs->ctl_lock);
	if (slot->gen == fh) {
		free(slot->buf);
		*slot = (struct fs_ctl_snap){0, NULL, 0};
	}
	pthread_mutex_unlock(&fs->ctl_lock);
}

int fs_op_write(struct fs *fs, uint64_t ino, const char *buf, size_t size)
{
	if (!is_control(ino))
		return -EROFS;
	return fs_ctl_command(fs, buf, size);
}

int fs_op_ioctl(struct fs *fs, uint64_t ino, unsigned cmd, uid_t uid, const void *in_buf,
		size_t in_len)
{
	if (cmd != FS_CTL_IOC || !is_control(ino))
		return -ENOTTY;
	if (uid != 0 && uid != fs->uid)
		return -EACCES;
	if (in_len != FS_CTL_IOC_LEN)
		return -EINVAL;
	return fs_ctl_command(fs, in_buf, strnlen(in_buf, in_len));
}

/* [off, off+size) of stream o as one fd extent. */
static int read_fd_range(struct fs *fs, struct cachetier_obj *o, uint64_t off, size_t size,
			 struct fs_read *r)
{
	int err = cachetier_obj_read_begin(o, off, size, &r->fd, &r->fd_off);

	if (err < 0)
		return err;
	r->pin = o;
	r->len = size;
	fs->c.read_bytes += size;
	return 0;
}

static int read_obj(struct fs *fs, uint32_t obj, uint64_t off, size_t size, struct fs_read *r)
{
	struct cachetier_obj *raw;
	uint64_t osize = fs_obj(fs, obj)->info.size;
	/* local sources: one stat, so a file rewritten in place is ESTALE,
	 * never bytes of another version (pages the kernel cached before the
	 * change never reach us) */
	int err = fs_obj_check(fs, obj);

	if (err == 0)
		err = fs_obj_raw(fs, obj, &raw);
	if (err < 0)
		return err;
	if (off >= osize)
		return 0;
	if (size > osize - off)
		size = (size_t)(osize - off);
	return read_fd_range(fs, raw, off, size, r);
}

/* Sparse members and reads spanning many extents: copy into memory. */
static int read_member_copy(struct fs *fs, const struct shardidx *ix,
			    struct cachetier_obj *stream, uint32_t idx, uint64_t off, size_t size,
			    struct fs_read *r)
{
	struct shardidx_extent ext[FS_SPLICE_EXTENTS];
	char *buf = malloc(size ? size : 1);
	size_t done = 0;
	int n, err = 0;

	if (!buf)
		return -ENOMEM;
	while (done < size) {
		n = shardidx_map(ix, idx, off + done, size - done, ext, FS_SPLICE_EXTENTS);
		if (n <= 0) {
			err = n < 0 ? n : -EIO;
			break;
		}
		for (int i = 0; i < n && !err; i++) {
			char *dst = buf + (ext[i].logical - off);

			if (ext[i].hole) {
				memset(dst, 0, ext[i].len);
			} else {
				ssize_t got = cachetier_obj_pread(stream, dst, ext[i].len,
								  ext[i].stream_off);

				if (got != (ssize_t)ext[i].len)
					err = got < 0 ? (int)got : -EIO;
			}
			done = ext[i].logical + ext[i].len - off;
		}
		if (err)
			break;
	}
	if (err) {
		free(buf);
		return err;
	}
	fs->c.read_bytes += size;
	r->buf = buf;
	r->len = size;
	return 0;
}

static int read_member(struct fs *fs, uint32_t shard, uint32_t idx, uint64_t off, size_t size,
		       struct fs_read *r)
{
	struct shardidx *ix;
	struct cachetier_obj *stream;
	struct shardidx_entry e;
	struct shardidx_extent ext[FS_SPLICE_EXTENTS];
	int n, err;

	err = fs_obj_check(fs, fs_shard(fs, shard)->obj);
	if (err == 0)
		err = fs_shard_index(fs, shard, &ix, &stream);
	if (err == 0 && shardidx_entry_get(ix, idx, &e) < 0)
		err = -ENOENT;
	if (err == 0 && e.type != SHARDIDX_REG)
		err = -EISDIR;
	if (err < 0)
		return err;
	if (off >= e.size)
		return 0;
	if (size > e.size - off)
		size = (size_t)(e.size - off);
	fs_shard_touch(fs, shard);
	n = shardidx_map(ix, idx, off, size, ext, FS_SPLICE_EXTENTS);
	if (n < 0)
		return n;
	if (n == 1 && !ext[0].hole && ext[0].len == size)
		return read_fd_range(fs, stream, ext[0].stream_off, size, r);
	return read_member_copy(fs, ix, stream, idx, off, size, r);
}

/* A control file: the open's own snapshot (fh), or without an open the
 * current one (fs->ctl_cur, rendered at getattr); copied. */
static int read_ctl(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		    struct fs_read *r)
{
	struct fs_ctl_snap *slot = fh ? &fs->ctl_snaps[fh % FS_CTL_SNAPS]
				      : &fs->ctl_cur[fs_ino_a(ino)];
	int err = 0;

	pthread_mutex_lock(&fs->ctl_lock);
	if (fh && slot->gen != fh) {
		/* released already: a late async read nobody waits for */
		err = -EIO;
		goto out;
	}
	if (off >= slot->len)
		size = 0;
	else if (size > slot->len - (size_t)off)
		size = slot->len - (size_t)off;
	if (size) {
		r->buf = malloc(size);
		if (!r->buf) {
			err = -ENOMEM;
			goto out;
		}
		memcpy(r->buf, slot->buf + off, size);
		r->len = size;
	}
out:
	pthread_mutex_unlock(&fs->ctl_lock);
	return err;
}

static int read_ino(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		    struct fs_read *r)
{
	uint32_t a = fs_ino_a(ino);

	switch (fs_ino_kind(ino)) {
	case FS_K_OBJ:
		return a < fs->nobjs ? read_obj(fs, a, off, size, r) : -ENOENT;
	case FS_K_MEMBER:
	case FS_K_IFFILE: /* a view file is its image member */
		return a < fs->nshards ? read_member(fs, a, fs_ino_b(ino), off, size, r) : -ENOENT;
	case FS_K_CTL:
		if (a == FS_CTL_STATS || a == FS_CTL_METRICS)
			return read_ctl(fs, ino, fh, off, size, r);
		return -EISDIR;
	default:
		return -EISDIR;
	}
}

int fs_op_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
	       struct fs_read *r)
{
	uint32_t a = fs_ino_a(ino);
	int err;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	fs->c.reads++;
	err = read_ino(fs, ino, fh, off, size, r);
	/* a remote object that changed under a read: the next lookup of its
	 * name gets the new version */
	if (err == -ESTALE && fs_ino_kind(ino) == FS_K_OBJ && a < fs->nobjs)
		fs_obj_mark_stale(fs, a, FS_OBJ_STALE);
	else if (err == -ESTALE && fs_ino_kind(ino) != FS_K_OBJ && a < fs->nshards)
		fs_obj_mark_stale(fs, fs_shard(fs, a)->obj, FS_OBJ_STALE);
	return err;
}

void fs_op_read_done(struct fs_read *r)
{
	if (r->pin)
		cachetier_obj_read_end(r->pin);
	free(r->buf);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
}

/* ---- directories ----------------------------------------------------------- */

int fs_op_opendir(struct fs *fs, uint64_t ino)
{
	enum fs_kind k = fs_ino_kind(ino);

	if (k == FS_K_OBJ || k == FS_K_IFFILE)
		return -ENOTDIR;
	if (k == FS_K_MEMBER) {
		struct stat st;
		int err = fs_op_getattr(fs, ino, &st);

		if (err < 0 || !S_ISDIR(st.st_mode))
			return err < 0 ? err : -ENOTDIR;
	}
	return 0;
}

/* One directory listing as (name, inode) pairs produced by index. */
struct listing {
	struct fs *fs;
	uint64_t ino, parent;
	uint32_t n; /* entries after "." and ".." */
	enum fs_kind kind;
	uint32_t a;
	const struct fs_dir *dir;        /* FS_K_DIR */
	const struct shardidx *ix;       /* FS_K_SHARD, FS_K_MEMBER */
	uint32_t first;                  /* first child in ix */
	const struct fs_ifview *ifv;     /* FS_K_IFCLASS, or the imagefolder root */
};

static int listing_open(struct fs *fs, uint64_t ino, struct listing *l)
{
	uint32_t a = fs_ino_a(ino);
	struct shardidx *ix;
	int err;

	memset(l, 0, sizeof(*l));
	l->fs = fs;
	l->ino = ino;
	l->kind = fs_ino_kind(ino);
	l->a = a;
	switch (l->kind) {
	/* the imagefolder root lists classes, a class its files */
	case FS_K_IFCLASS:
		err = fs_if_get(fs, &l->ifv);
		if (err < 0)
			return err;
		if (a >= l->ifv->nclasses)
			return -ENOENT;
		l->first = l->ifv->classes[a].first;
		l->n = l->ifv->classes[a].n;
		l->parent = 1;
		return 0;
	case FS_K_DIR:
		if (ino == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER) {
			err = fs_if_get(fs, &l->ifv);
			if (err < 0)
				return err;
			l->n = l->ifv->nclasses;
			l->parent = 1;
			return 0;
		}
			/* the caller holds fs->ns_lock (read) until the listing is done */
		if (a >= fs->ndirs)
			return -ENOENT;
		if (fs->dirs[a].gone)
			return -ESTALE;
		l->dir = &fs->dirs[a];
		l->n = l->dir->nents;
		l->parent = fs_ino(FS_K_DIR, l->dir->parent, 0);
		return 0;
	case FS_K_SHARD:
	case FS_K_MEMBER:
		if (a >= fs->nshards)
			return -ENOENT;
		err = fs_shard_index(fs, a, &ix, NULL);
		if (err < 0)
			return err;
		l->ix = ix;
		if (l->kind == FS_K_SHARD) {
			shardidx_root(ix, &l->first, &l->n);
			l->parent = fs_ino(FS_K_DIR, fs_obj(fs, fs_shard(fs, a)->obj)->dir, 0);
		} else {
			struct shardidx_entry e;

			if (shardidx_entry_get(ix, fs_ino_b(ino), &e) < 0 || e.type != SHARDIDX_DIR)
				return -ENOTDIR;
			l->first = e.first_child;
			l->n = e.nchild;
			l->parent = e.parent == SHARDIDX_NONE ? fs_ino(FS_K_SHARD, a, 0)
							      : fs_ino(FS_K_MEMBER, a, e.parent);
		}
		return 0;
	case FS_K_CTL:
		l->n = FS_CTL_COUNT - 1;
		l->parent = 1;
		return 0;
	default:
		return -ENOTDIR;
	}
}

/* Name and inode of entry i (0-based, after "." and ".."). */
static const char *listing_entry(const struct listing *l, uint32_t i, uint64_t *ino)
{
	switch (l->kind) {
	case FS_K_IFCLASS: {
		const struct fs_if_file *f = &l->ifv->files[l->first + i];

		*ino = fs_ino(FS_K_IFFILE, f->shard, f->entry);
		return f->name;
	}
	case FS_K_DIR: {
		const struct fs_dirent *d;

		if (l->ifv) { /* the imagefolder root */
			*ino = fs_ino(FS_K_IFCLASS, i, 0);
			return l->ifv->classes[i].name;
		}
		d = &l->dir->ents[i];

		*ino = fs_ino((enum fs_kind)d->kind, d->idx, 0);
		return d->name;
	}
	case FS_K_SHARD:
	case FS_K_MEMBER: {
		struct shardidx_entry e;

		if (shardidx_entry_get(l->ix, l->first + i, &e) < 0)
			return NULL;
		*ino = fs_ino(FS_K_MEMBER, l->a, e.canon);
		return e.name;
	}
	case FS_K_CTL:
		*ino = fs_ino(FS_K_CTL, i + 1, 0);
		return fs_ctl_names[i + 1];
	default:
		return NULL;
	}
}

int fs_op_readdir(struct fs *fs, uint64_t ino, uint64_t off, fs_dirent_fn fn, void *ctx)
{
	struct listing l;
	int err, locked;

	fs->c.readdirs++;
	/* a source directory's entries may change at a refresh: read them
	 * under the namespace lock (the imagefolder root is a view instead) */
	locked = fs_ino_kind(ino) == FS_K_DIR &&
		 !(ino == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER);
	if (locked)
		fs_ns_rdlock(fs);
	err = listing_open(fs, ino, &l);
	if (err < 0)
		goto out;
	/* offsets: 0 "." , 1 "..", 2+i entry i; each entry carries the next */
	for (uint64_t pos = off; pos < (uint64_t)l.n + 2; pos++) {
		struct fs_entry e;
		const char *name;
		uint64_t eino;
		int aerr;

		if (pos == 0) {
			name = ".";
			eino = ino;
		} else if (pos == 1) {
			name = "..";
			eino = l.parent;
		} else {
			name = listing_entry(&l, (uint32_t)(pos - 2), &eino);
			if (!name)
				break;
		}
		memset(&e, 0, sizeof(e));
		aerr = pos >= 2 ? entry_of(fs, eino, &e) : 0;
		if (aerr == -ESTALE && l.kind == FS_K_DIR) {
			/* a file that changed and was not looked up since: list its
			 * name without attributes (ino 0: the kernel makes no entry),
			 * so a lookup gets the new version */
			memset(&e, 0, sizeof(e));
			e.attr.st_ino = eino;
			e.attr.st_mode = fs_ino_kind(eino) == FS_K_OBJ ? S_IFREG : S_IFDIR;
		} else if (aerr < 0) {
			continue;
		} else if (pos < 2) {
			e.attr.st_ino = eino;
			e.attr.st_mode = S_IFDIR;
		}
		if (fn(ctx, name, &e, pos + 1))
			break;
	}
out:
	if (locked)
		fs_ns_unlock(fs);
	return err;
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

/* ---- extended attributes of members: where a sample lives --------------------
 * user.shardfs.shard   the shard's key in the source
 * user.shardfs.offset  offset of the member's data in the (decoded) tar stream
 * user.shardfs.size    the member's size
 * user.shardfs.key     the WebDataset sample key (base name up to its first '.')
 * Regular members and imagefolder files have them; everything else none. */
static const char *const xattr_names[] = {"user.shardfs.shard", "user.shardfs.offset",
					  "user.shardfs.size", "user.shardfs.key"};
#define NXATTR (sizeof(xattr_names) / sizeof(xattr_names[0]))

/* Value of xattr i of ino into buf (NUL-terminated; length returned), or
 * a negative errno: -ENODATA where ino has no such attributes. */
static int xattr_value(struct fs *fs, uint64_t ino, size_t i, char *buf, size_t size)
{
	enum fs_kind k = fs_ino_kind(ino);
	uint32_t a = fs_ino_a(ino);
	struct shardidx *ix;
	struct shardidx_entry e;
	const char *dot;
	int n, err;

	if ((k != FS_K_MEMBER && k != FS_K_IFFILE) || a >= fs->nshards)
		return -ENODATA;
	err = fs_shard_index(fs, a, &ix, NULL);
	if (err < 0)
		return err;
	if (shardidx_entry_get(ix, fs_ino_b(ino), &e) < 0 || e.type != SHARDIDX_REG ||
	    (e.flags & SHARDIDX_F_SPARSE))
		return -ENODATA;
	switch (i) {
	case 0:
		n = snprintf(buf, size, "%s", fs_obj(fs, fs_shard(fs, a)->obj)->key);
		break;
	case 1:
		n = snprintf(buf, size, "%" PRIu64, e.data_off);
		break;
	case 2:
		n = snprintf(buf, size, "%" PRIu64, e.size);
		break;
	default:
		dot = strchr(e.name, '.');
		n = snprintf(buf, size, "%.*s", dot ? (int)(dot - e.name) : (int)strlen(e.name),
			     e.name);
		break;
	}
	return n < 0 || (size_t)n >= size ? -ERANGE : n;
}

int fs_op_getxattr(struct fs *fs, uint64_t ino, const char *name, char *buf, size_t size)
{
	int n = -ENODATA;

	/* ENOSYS: the kernel stops sending getxattr for the whole mount, so
	 * `ls -l`'s security.selinux and ACL probes cost no round trip */
	if (fs->cfg.no_xattr)
		return -ENOSYS;
	for (size_t i = 0; i < NXATTR; i++)
		if (strcmp(name, xattr_names[i]) == 0)
			n = xattr_value(fs, ino, i, buf, size);
	return n;
}

int fs_op_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	char val[FS_XATTR_MAX];
	size_t len = 0;
	int err;

	if (fs->cfg.no_xattr)
		return -ENOSYS;
	err = xattr_value(fs, ino, 1, val, sizeof(val));
	if (err == -ENODATA)
		return 0;
	if (err < 0)
		return err;
	for (size_t i = 0; i < NXATTR; i++) {
		size_t l = strlen(xattr_names[i]) + 1;

		if (len + l > size)
			return -ERANGE;
		memcpy(buf + len, xattr_names[i], l);
		len += l;
	}
	return (int)len;
}

void fs_op_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino);
	enum fs_kind k = fs_ino_kind(ino);
	const char *what = "?", *member = "";
	struct shardidx *ix;
	struct shardidx_entry e;

	if (k == FS_K_OBJ && a < fs->nobjs) {
		what = fs_obj(fs, a)->key;
	} else if ((k == FS_K_SHARD || k == FS_K_MEMBER || k == FS_K_IFFILE) && a < fs->nshards) {
		what = fs_obj(fs, fs_shard(fs, a)->obj)->key;
		ix = atomic_load(&fs_shard(fs, a)->ix);
		if (k != FS_K_SHARD && ix && shardidx_entry_get(ix, fs_ino_b(ino), &e) == 0)
			member = e.name;
	}
	snprintf(buf, size, "%s%s%s", what, *member ? " member " : "", member);
}
