/*
 * fs_ll.c — the FUSE low-level operations.
 *
 * Thin by intent: every op decodes the computed inode number, asks the
 * namespace, a shard index or the cache tier, and ends in exactly one reply.
 * Inodes are computed (fs_i.h), so forget needs no bookkeeping.
 *
 * Caching: shard contents never change for one ETag (a changed object is a
 * new version at new inode numbers), so entries, attributes and negative
 * lookups get long timeouts, files open with keep_cache and
 * directories with cache_readdir. Member and object reads are answered with
 * fd buffers (fuse_reply_data) so the kernel can splice from the source file
 * or the decoded copy without a copy through this process. Control files are
 * the exception: timeouts 0, direct_io, a snapshot rendered at open.
 *
 * Everything is read-only: every modifying op answers EROFS.
 *
 * Threads: ops run on the multithreaded FUSE session; they may block
 * (index loading, decoding). Shared state is immutable, atomic, or (the
 * source directories' entries) read under fs->ns_lock. A local object is
 * stat'ed on every read and lookup that reaches us (fs_obj_check), so a
 * file changed under the mount gives ESTALE for its old inodes; kernel
 * caches are invalidated by the notifier thread below, never by a request
 * handler.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs_i.h"

/* Largest read the kernel sends (FUSE_MAX_MAX_PAGES * 4 KiB is 1 MiB). */
#define FS_MAX_READ (1u << 20)
/* Extents answered by splicing; more (sparse members) are copied. */
#define FS_SPLICE_EXTENTS 8

static struct fs *ll_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void reply_err(fuse_req_t req, int err)
{
	fuse_reply_err(req, err < 0 ? -err : err);
}

/* ---- attributes ---------------------------------------------------------- */

static void attr_base(const struct fs *fs, struct stat *st, fuse_ino_t ino)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 65536;
}

static void attr_dir(const struct fs *fs, struct stat *st, fuse_ino_t ino, mode_t perm,
		     nlink_t nlink, int64_t mtime)
{
	attr_base(fs, st, ino);
	st->st_mode = S_IFDIR | perm;
	st->st_nlink = nlink;
	st->st_size = 4096;
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = mtime;
}

static void attr_file(const struct fs *fs, struct stat *st, fuse_ino_t ino, mode_t mode,
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
static int ctl_attr(struct fs *fs, fuse_ino_t ino, enum fs_ctl which, struct stat *st)
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

static int ll_attr(struct fs *fs, fuse_ino_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino), b = fs_ino_b(ino);
	nlink_t nlink; /* issue 5 */

	switch (fs_ino_kind(ino)) {
	case FS_K_DIR: {
		int64_t mtime;
		int gone;

		fs_ns_rdlock(fs);
		if (a >= fs->ndirs || (ino != 1 && b != 0)) {
			fs_ns_unlock(fs);
			return -ENOENT;
		}
		/* issue 5: imagefolder root: nlink 1 ("unknown"), no view needed */
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
	/* ---- issue 5: imagefolder view ---- */
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
	/* ---- end issue 5 ---- */
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

static double ll_timeout(const struct fs *fs, fuse_ino_t ino)
{
	return fs_ino_kind(ino) == FS_K_CTL ? 0.0 : fs->cfg.entry_timeout_s;
}

static void reply_entry(fuse_req_t req, struct fs *fs, fuse_ino_t ino)
{
	struct fuse_entry_param e;
	int err;

	memset(&e, 0, sizeof(e));
	err = ll_attr(fs, ino, &e.attr);
	if (err < 0) {
		reply_err(req, err);
		return;
	}
	e.ino = e.attr.st_ino; /* a hardlink resolves to its target's inode */
	e.attr_timeout = e.entry_timeout = ll_timeout(fs, ino);
	fuse_reply_entry(req, &e);
}

static void reply_negative(fuse_req_t req, struct fs *fs, double timeout)
{
	struct fuse_entry_param e;

	(void)fs;
	memset(&e, 0, sizeof(e));
	e.ino = 0; /* cached "no such entry" */
	e.entry_timeout = timeout;
	fuse_reply_entry(req, &e);
}

/* ---- lookup -------------------------------------------------------------- */

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = ll_fs(req);
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

		if (parent == 1 && strcmp(name, fs_ctl_names[FS_CTL_DIR]) == 0) {
			reply_entry(req, fs, fs_ino(FS_K_CTL, FS_CTL_DIR, 0));
			return;
		}
		if (parent == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER) { /* issue 5 */
			const struct fs_ifview *v;

			err = fs_if_get(fs, &v);
			if (err == 0 && (idx = fs_if_class_lookup(v, name, len)) >= 0)
				reply_entry(req, fs, fs_ino(FS_K_IFCLASS, (uint32_t)idx, 0));
			else if (err == 0)
				reply_negative(req, fs, fs->cfg.entry_timeout_s);
			else
				reply_err(req, err);
			return;
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
				reply_err(req, err);
				return;
			}
			d = fs_ns_lookup(fs, a, name, len);
			if (d) {
				kind = d->kind;
				di = d->idx;
			}
			fs_ns_unlock(fs);
			if (!d) {
				reply_negative(req, fs, fs->cfg.entry_timeout_s);
				return;
			}
			if (kind == FS_K_DIR)
				break;
			obj = kind == FS_K_OBJ ? di : fs_shard(fs, di)->obj;
			if (tries == 2 || fs_obj_check(fs, obj) != -ESTALE)
				break;
			err = fs_ns_replace(fs, obj);
			if (err < 0) {
				reply_err(req, err);
				return;
			}
		}
		reply_entry(req, fs, fs_ino((enum fs_kind)kind, di, 0));
		return;
	}
	case FS_K_SHARD:
	case FS_K_MEMBER: {
		uint32_t dir = fs_ino_kind(parent) == FS_K_SHARD ? SHARDIDX_NONE : b;

		if (a >= fs->nshards)
			break;
		err = fs_obj_check(fs, fs_shard(fs, a)->obj);
		if (err == 0)
			err = fs_shard_index(fs, a, &ix, NULL);
		if (err < 0) {
			reply_err(req, err);
			return;
		}
		idx = shardidx_lookup(ix, dir, name, len);
		if (idx < 0) {
			reply_negative(req, fs, fs->cfg.entry_timeout_s);
			return;
		}
		reply_entry(req, fs, fs_ino(FS_K_MEMBER, a, (uint32_t)idx));
		return;
	}
	case FS_K_CTL:
		if (a == FS_CTL_DIR) {
			for (uint32_t i = 1; i < FS_CTL_COUNT; i++) {
				if (strcmp(name, fs_ctl_names[i]) == 0) {
					reply_entry(req, fs, fs_ino(FS_K_CTL, i, 0));
					return;
				}
			}
			reply_negative(req, fs, 0);
			return;
		}
		reply_err(req, ENOTDIR);
		return;
	case FS_K_IFCLASS: { /* issue 5 */
		const struct fs_ifview *v;

		err = fs_if_get(fs, &v);
		if (err < 0) {
			reply_err(req, err);
			return;
		}
		idx = fs_if_file_lookup(v, a, name, len);
		if (idx < 0) {
			reply_negative(req, fs, fs->cfg.entry_timeout_s);
			return;
		}
		reply_entry(req, fs, fs_ino(FS_K_IFFILE, v->files[idx].shard, v->files[idx].entry));
		return;
	}
	case FS_K_OBJ:
	case FS_K_IFFILE: /* issue 5 */
		reply_err(req, ENOTDIR);
		return;
	}
	reply_err(req, ENOENT);
}

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req); /* computed inodes: nothing to release */
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	(void)count;
	(void)forgets;
	fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	struct stat st;
	int err;

	(void)fi;
	fs->c.getattrs++;
	err = ll_attr(fs, ino, &st);
	if (err < 0)
		reply_err(req, err);
	else
		fuse_reply_attr(req, &st, ll_timeout(fs, ino));
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = ll_fs(req);
	struct shardidx *ix;
	struct shardidx_entry e;
	int err;

	if (fs_ino_kind(ino) != FS_K_MEMBER || fs_ino_a(ino) >= fs->nshards) {
		reply_err(req, EINVAL);
		return;
	}
	err = fs_shard_index(fs, fs_ino_a(ino), &ix, NULL);
	if (err < 0) {
		reply_err(req, err);
		return;
	}
	if (shardidx_entry_get(ix, fs_ino_b(ino), &e) < 0 || e.type != SHARDIDX_SYMLINK) {
		reply_err(req, EINVAL);
		return;
	}
	fuse_reply_readlink(req, e.link);
}

/* ---- open / read ----------------------------------------------------------- */

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	enum fs_kind k = fs_ino_kind(ino);

	/* Zero-cost opens: the kernel stops sending OPEN and RELEASE for good and
	 * keeps page caches (as with keep_cache); a second epoch never leaves
	 * the kernel. Writes still fail: at write, setattr or create. */
	if (fs->no_open) {
		reply_err(req, ENOSYS);
		return;
	}
	if (k == FS_K_CTL && fs_ino_a(ino) == FS_CTL_CONTROL) {
		/* commands are ioctls on a read-only open (or writes, where a
		 * mount is writable); reading gives nothing */
		fi->direct_io = 1;
		fi->fh = 0;
		fuse_reply_open(req, fi);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		reply_err(req, EROFS);
		return;
	}
	if (k == FS_K_CTL) {
		struct fs_ctl_snap *slot;
		char *buf;
		size_t len;
		int err = fs_ctl_render(fs, (enum fs_ctl)fs_ino_a(ino), &buf, &len);

		if (err < 0) {
			reply_err(req, err);
			return;
		}
		pthread_mutex_lock(&fs->ctl_lock);
		fi->fh = ++fs->ctl_gen;
		slot = &fs->ctl_snaps[fi->fh % FS_CTL_SNAPS];
		free(slot->buf); /* a snapshot 1024 opens old: its reader is gone */
		*slot = (struct fs_ctl_snap){fi->fh, buf, len};
		pthread_mutex_unlock(&fs->ctl_lock);
		fi->direct_io = 1;
		fuse_reply_open(req, fi);
		return;
	}
	if (k != FS_K_OBJ && k != FS_K_MEMBER && k != FS_K_IFFILE /* issue 5 */) {
		reply_err(req, EISDIR);
		return;
	}
	fi->keep_cache = 1;
	fi->noflush = 1;
	fuse_reply_open(req, fi);
}

/* Only .shardfs/control takes writes: each write is a whole command line. */
static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	int err;

	(void)off;
	(void)fi;
	if (fs_ino_kind(ino) != FS_K_CTL || fs_ino_a(ino) != FS_CTL_CONTROL) {
		reply_err(req, EROFS);
		return;
	}
	err = fs_ctl_command(fs, buf, size);
	if (err < 0)
		reply_err(req, err);
	else
		fuse_reply_write(req, size);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);

	if (fs_ino_kind(ino) == FS_K_CTL && fi->fh) {
		struct fs_ctl_snap *slot = &fs->ctl_snaps[fi->fh % FS_CTL_SNAPS];

		pthread_mutex_lock(&fs->ctl_lock);
		if (slot->gen == fi->fh) {
			free(slot->buf);
			*slot = (struct fs_ctl_snap){0, NULL, 0};
		}
		pthread_mutex_unlock(&fs->ctl_lock);
	}
	fuse_reply_err(req, 0);
}

/* The read this FUSE thread is answering, for read_fail's log line. */
static _Thread_local struct {
	fuse_ino_t ino;
	uint64_t off;
	size_t size;
} rd_cur;

/* Answer the current read with err, count it, and log it: which file,
 * which range, why. At most READ_FAIL_LOG_PER_S lines a second (a store that
 * is down fails every read); the rest are counted in read_errors only. */
#define READ_FAIL_LOG_PER_S 10
static void read_fail(fuse_req_t req, struct fs *fs, int err)
{
	static _Atomic int64_t sec;
	static atomic_uint in_sec, dropped;
	struct timespec ts;
	uint32_t a = fs_ino_a(rd_cur.ino);
	const char *what = "?", *member = "";
	struct shardidx *ix;
	struct shardidx_entry e;
	unsigned skipped;

	fs->c.read_errors++;
	reply_err(req, err);
	/* a remote object that changed under a read: the next lookup of its
	 * name gets the new version */
	if (err == -ESTALE && fs_ino_kind(rd_cur.ino) == FS_K_OBJ && a < fs->nobjs)
		fs_obj_mark_stale(fs, a, FS_OBJ_STALE);
	else if (err == -ESTALE && fs_ino_kind(rd_cur.ino) != FS_K_OBJ && a < fs->nshards)
		fs_obj_mark_stale(fs, fs_shard(fs, a)->obj, FS_OBJ_STALE);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (atomic_exchange(&sec, (int64_t)ts.tv_sec) != (int64_t)ts.tv_sec)
		atomic_store(&in_sec, 0);
	if (atomic_fetch_add(&in_sec, 1) >= READ_FAIL_LOG_PER_S) {
		atomic_fetch_add(&dropped, 1);
		return;
	}
	if (fs_ino_kind(rd_cur.ino) == FS_K_OBJ && a < fs->nobjs) {
		what = fs_obj(fs, a)->key;
	} else if (a < fs->nshards) {
		what = fs_obj(fs, fs_shard(fs, a)->obj)->key;
		ix = atomic_load(&fs_shard(fs, a)->ix);
		if (ix && shardidx_entry_get(ix, fs_ino_b(rd_cur.ino), &e) == 0)
			member = e.name;
	}
	skipped = atomic_exchange(&dropped, 0);
	fs_log(FS_LOG_WARN, "read of %s%s%s [%" PRIu64 ", +%zu) failed: %s%s", what,
	       *member ? " member " : "", member, rd_cur.off, rd_cur.size,
	       strerror(err < 0 ? -err : err), skipped ? " (more failed reads not logged)" : "");
}

/* Answer a read of [off, off+size) of stream 'o' with one fd buffer. */
static void reply_fd_range(fuse_req_t req, struct fs *fs, struct cachetier_obj *o, uint64_t off,
			   size_t size)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
	uint64_t fd_off;
	int fd, err;

	err = cachetier_obj_read_begin(o, off, size, &fd, &fd_off);
	if (err < 0) {
		read_fail(req, fs, err);
		return;
	}
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
	bv.buf[0].fd = fd;
	bv.buf[0].pos = (off_t)fd_off;
	fs->c.read_bytes += size;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	cachetier_obj_read_end(o);
}

static void read_obj(fuse_req_t req, struct fs *fs, uint32_t obj, size_t size, off_t off)
{
	struct cachetier_obj *raw;
	uint64_t osize = fs_obj(fs, obj)->info.size;
	/* local sources: one stat, so a file rewritten in place is ESTALE,
	 * never bytes of another version (pages the kernel cached before the
	 * change never reach us) */
	int err = fs_obj_check(fs, obj);

	if (err == 0)
		err = fs_obj_raw(fs, obj, &raw);

	if (err < 0) {
		read_fail(req, fs, err);
		return;
	}
	if ((uint64_t)off >= osize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > osize - (uint64_t)off)
		size = (size_t)(osize - (uint64_t)off);
	reply_fd_range(req, fs, raw, (uint64_t)off, size);
}

/* Sparse members and reads spanning many extents: copy into memory. */
static void read_member_copy(fuse_req_t req, struct fs *fs, const struct shardidx *ix,
			     struct cachetier_obj *stream, uint32_t idx, uint64_t off, size_t size)
{
	struct shardidx_extent ext[FS_SPLICE_EXTENTS];
	char *buf = malloc(size ? size : 1);
	size_t done = 0;
	int n, err = 0;

	if (!buf) {
		reply_err(req, ENOMEM);
		return;
	}
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
				ssize_t r = cachetier_obj_pread(stream, dst, ext[i].len,
								ext[i].stream_off);

				if (r != (ssize_t)ext[i].len)
					err = r < 0 ? (int)r : -EIO;
			}
			done = ext[i].logical + ext[i].len - off;
		}
		if (err)
			break;
	}
	if (err) {
		read_fail(req, fs, err);
	} else {
		fs->c.read_bytes += size;
		fuse_reply_buf(req, buf, size);
	}
	free(buf);
}

static void read_member(fuse_req_t req, struct fs *fs, uint32_t shard, uint32_t idx, size_t size,
			off_t off)
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
	if (err < 0) {
		read_fail(req, fs, err);
		return;
	}
	if ((uint64_t)off >= e.size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (size > e.size - (uint64_t)off)
		size = (size_t)(e.size - (uint64_t)off);
	fs_shard_touch(fs, shard);
	n = shardidx_map(ix, idx, (uint64_t)off, size, ext, FS_SPLICE_EXTENTS);
	if (n < 0) {
		read_fail(req, fs, n);
		return;
	}
	if (n == 1 && !ext[0].hole && ext[0].len == size) {
		reply_fd_range(req, fs, stream, ext[0].stream_off, size);
		return;
	}
	read_member_copy(req, fs, ix, stream, idx, (uint64_t)off, size);
}

static void read_ctl(fuse_req_t req, struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi,
		     size_t size, off_t off)
{
	/* opened: the open's own snapshot; not opened: the current one */
	struct fs_ctl_snap *slot = fi && fi->fh ? &fs->ctl_snaps[fi->fh % FS_CTL_SNAPS]
						: &fs->ctl_cur[fs_ino_a(ino)];

	pthread_mutex_lock(&fs->ctl_lock);
	if (fi && fi->fh && slot->gen != fi->fh) {
		/* released already: a late async read nobody waits for */
		pthread_mutex_unlock(&fs->ctl_lock);
		reply_err(req, EIO);
		return;
	}
	if ((uint64_t)off >= slot->len)
		size = 0;
	else if (size > slot->len - (size_t)off)
		size = slot->len - (size_t)off;
	/* the reply copies the bytes to the kernel before the lock is dropped */
	fuse_reply_buf(req, size ? slot->buf + off : NULL, size);
	pthread_mutex_unlock(&fs->ctl_lock);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	uint32_t a = fs_ino_a(ino);

	fs->c.reads++;
	rd_cur.ino = ino;
	rd_cur.off = (uint64_t)off;
	rd_cur.size = size;
	switch (fs_ino_kind(ino)) {
	case FS_K_OBJ:
		if (a < fs->nobjs) {
			read_obj(req, fs, a, size, off);
			return;
		}
		break;
	case FS_K_MEMBER:
	case FS_K_IFFILE: /* issue 5: a view file is its image member */
		if (a < fs->nshards) {
			read_member(req, fs, a, fs_ino_b(ino), size, off);
			return;
		}
		break;
	case FS_K_CTL:
		if (a == FS_CTL_STATS || a == FS_CTL_METRICS) {
			read_ctl(req, fs, ino, fi, size, off);
			return;
		}
		reply_err(req, EISDIR);
		return;
	default:
		reply_err(req, EISDIR);
		return;
	}
	reply_err(req, ENOENT);
}

/* ---- directories ----------------------------------------------------------- */

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	enum fs_kind k = fs_ino_kind(ino);

	if (k == FS_K_OBJ || k == FS_K_IFFILE /* issue 5 */) {
		reply_err(req, ENOTDIR);
		return;
	}
	if (k == FS_K_MEMBER) {
		struct stat st;
		int err = ll_attr(fs, ino, &st);

		if (err < 0 || !S_ISDIR(st.st_mode)) {
			reply_err(req, err < 0 ? err : -ENOTDIR);
			return;
		}
	}
	/* Directories never change: where the kernel can do without OPENDIR
	 * (and RELEASEDIR) it caches listings as if we had set cache_readdir
	 * and keep_cache, and a second walk of the tree never asks us again. */
	if (fs->no_opendir) {
		reply_err(req, ENOSYS);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* One directory listing as (name, inode) pairs produced by index. */
struct listing {
	struct fs *fs;
	fuse_ino_t ino, parent;
	uint32_t n; /* entries after "." and ".." */
	enum fs_kind kind;
	uint32_t a;
	const struct fs_dir *dir;        /* FS_K_DIR */
	const struct shardidx *ix;       /* FS_K_SHARD, FS_K_MEMBER */
	uint32_t first;                  /* first child in ix */
	const struct fs_ifview *ifv;     /* issue 5: FS_K_IFCLASS, or the imagefolder root */
};

static int listing_open(struct fs *fs, fuse_ino_t ino, struct listing *l)
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
	/* ---- issue 5: imagefolder root lists classes, a class its files ---- */
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
		/* ---- end issue 5 ---- */
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
static const char *listing_entry(const struct listing *l, uint32_t i, fuse_ino_t *ino)
{
	switch (l->kind) {
	case FS_K_IFCLASS: { /* issue 5 */
		const struct fs_if_file *f = &l->ifv->files[l->first + i];

		*ino = fs_ino(FS_K_IFFILE, f->shard, f->entry);
		return f->name;
	}
	case FS_K_DIR: {
		const struct fs_dirent *d;

		if (l->ifv) { /* issue 5: the imagefolder root */
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

static void ll_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct fs *fs = ll_fs(req);
	struct listing l;
	char *buf;
	size_t used = 0;
	int err, locked;

	fs->c.readdirs++;
	/* a source directory's entries may change at a refresh: read them
	 * under the namespace lock (the imagefolder root is a view instead) */
	locked = fs_ino_kind(ino) == FS_K_DIR &&
		 !(ino == 1 && fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER);
	if (locked)
		fs_ns_rdlock(fs);
	err = listing_open(fs, ino, &l);
	buf = err < 0 ? NULL : malloc(size);
	if (err < 0 || !buf) {
		if (locked)
			fs_ns_unlock(fs);
		reply_err(req, err < 0 ? err : -ENOMEM);
		return;
	}
	/* offsets: 0 "." , 1 "..", 2+i entry i; each entry carries the next */
	for (uint64_t pos = (uint64_t)off; pos < (uint64_t)l.n + 2; pos++) {
		struct fuse_entry_param e;
		const char *name;
		fuse_ino_t eino;
		size_t n;

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
		err = pos >= 2 ? ll_attr(fs, eino, &e.attr) : 0;
		if (err == -ESTALE && l.kind == FS_K_DIR) {
			/* a file that changed and was not looked up since: list its
			 * name without attributes (ino 0: the kernel makes no entry),
			 * so a lookup gets the new version */
			memset(&e, 0, sizeof(e));
			e.attr.st_ino = eino;
			e.attr.st_mode = fs_ino_kind(eino) == FS_K_OBJ ? S_IFREG : S_IFDIR;
		} else if (err < 0) {
			continue;
		} else if (plus && pos >= 2) {
			e.ino = e.attr.st_ino;
			e.attr_timeout = e.entry_timeout = ll_timeout(fs, eino);
		} else if (pos < 2) {
			e.attr.st_ino = eino;
			e.attr.st_mode = S_IFDIR;
		}
		if (plus)
			n = fuse_add_direntry_plus(req, buf + used, size - used, name, &e,
						   (off_t)(pos + 1));
		else
			n = fuse_add_direntry(req, buf + used, size - used, name, &e.attr,
					      (off_t)(pos + 1));
		if (n > size - used)
			break;
		used += n;
	}
	if (locked)
		fs_ns_unlock(fs);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ll_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	ll_readdir_common(req, ino, size, off, 0);
}

static void ll_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)fi;
	ll_readdir_common(req, ino, size, off, 1);
}

static void ll_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void ll_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = ll_fs(req);
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = (fs->total_bytes + 4095) / 4096;
	sv.f_files = fs->nobjs + fs->ndirs + fs->c.members;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

/* Python's open() asks isatty() of every file; answer at once. */
/* Everything but the control command answers ENOTTY at once (Python's
 * open() asks isatty() on every file). */
static void ll_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = ll_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	int err;

	(void)arg;
	(void)fi;
	(void)flags;
	(void)out_bufsz;
	if (cmd != FS_CTL_IOC || fs_ino_kind(ino) != FS_K_CTL || fs_ino_a(ino) != FS_CTL_CONTROL) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (ctx->uid != 0 && ctx->uid != fs->uid) {
		reply_err(req, EACCES);
		return;
	}
	if (in_bufsz != FS_CTL_IOC_LEN) {
		reply_err(req, EINVAL);
		return;
	}
	err = fs_ctl_command(fs, in_buf, strnlen(in_buf, in_bufsz));
	if (err < 0)
		reply_err(req, -err);
	else
		fuse_reply_ioctl(req, err, NULL, 0);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	int control = fs_ino_kind(ino) == FS_K_CTL && fs_ino_a(ino) == FS_CTL_CONTROL;

	fuse_reply_err(req, (mask & W_OK) && !control ? EROFS : 0);
}

/* ---- everything that would modify: EROFS ------------------------------------ */

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	struct stat st;

	(void)fi;
	/* 'echo prefetch > .shardfs/control' opens with O_TRUNC: let it */
	if (fs_ino_kind(ino) == FS_K_CTL && fs_ino_a(ino) == FS_CTL_CONTROL &&
	    (to_set & ~FUSE_SET_ATTR_SIZE) == 0 && attr->st_size == 0 &&
	    ll_attr(fs, ino, &st) == 0) {
		fuse_reply_attr(req, &st, 0);
		return;
	}
	fuse_reply_err(req, EROFS);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	fuse_reply_err(req, EROFS);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent;
	(void)name;
	(void)mode;
	fuse_reply_err(req, EROFS);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link;
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	(void)parent;
	(void)name;
	(void)newparent;
	(void)newname;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino;
	(void)newparent;
	(void)newname;
	fuse_reply_err(req, EROFS);
}

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	(void)ino;
	(void)name;
	(void)value;
	(void)size;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

/* ---- issue 5: extended attributes of members: where a sample lives -------------
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
static int xattr_value(struct fs *fs, fuse_ino_t ino, size_t i, char *buf, size_t size)
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

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char buf[4096 + 64];
	int n = -ENODATA;

	/* ENOSYS: the kernel stops sending getxattr for the whole mount, so
	 * `ls -l`'s security.selinux and ACL probes cost no round trip */
	if (ll_fs(req)->cfg.no_xattr) {
		reply_err(req, -ENOSYS);
		return;
	}
	for (size_t i = 0; i < NXATTR; i++)
		if (strcmp(name, xattr_names[i]) == 0)
			n = xattr_value(ll_fs(req), ino, i, buf, sizeof(buf));
	if (n < 0)
		reply_err(req, n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if (size < (size_t)n)
		reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char buf[256], val[4096 + 64];
	size_t len = 0;
	int err;

	if (ll_fs(req)->cfg.no_xattr) {
		reply_err(req, -ENOSYS);
		return;
	}
	err = xattr_value(ll_fs(req), ino, 1, val, sizeof(val));
	if (err >= 0) {
		for (size_t i = 0; i < NXATTR; i++) {
			size_t l = strlen(xattr_names[i]) + 1;

			memcpy(buf + len, xattr_names[i], l);
			len += l;
		}
	} else if (err != -ENODATA) {
		reply_err(req, err);
		return;
	}
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, len);
}
/* ---- end issue 5 ---- */

static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	(void)ino;
	(void)name;
	fuse_reply_err(req, EROFS);
}

/* ---- kernel cache invalidations ---------------------------------------------
 * One notifier thread sends them, never a request handler: invalidating an
 * inode waits for its locked pages and an entry for its directory's lock,
 * which the kernel may hold while it waits for the very request that
 * noticed the change (libfuse: "don't call this function from a
 * filesystem operation"). Sends to inodes the kernel does not know fail
 * with ENOENT, which is fine. */
struct fs_notify {
	struct fs_notify *next;
	enum { NQ_INODE, NQ_ENTRY, NQ_SHARD } kind;
	uint64_t ino;  /* the inode; NQ_ENTRY: the parent; NQ_SHARD: the shard */
	uint32_t n;    /* NQ_SHARD: members */
	size_t len;
	char name[];   /* NQ_ENTRY */
};

static void nq_push(struct fs *fs, int kind, uint64_t ino, uint32_t n, const char *name,
		    size_t len)
{
	struct fs_notify *q;

	pthread_mutex_lock(&fs->nq_lock);
	if (!fs->nq_run) { /* no session (shardfs index) or shutting down */
		pthread_mutex_unlock(&fs->nq_lock);
		return;
	}
	q = malloc(sizeof(*q) + len + 1);
	if (q) {
		q->next = NULL;
		q->kind = kind;
		q->ino = ino;
		q->n = n;
		q->len = len;
		memcpy(q->name, name, len);
		q->name[len] = '\0';
		*fs->nq_tail = q;
		fs->nq_tail = &q->next;
		pthread_cond_signal(&fs->nq_cond);
	}
	pthread_mutex_unlock(&fs->nq_lock);
}

void fs_notify_inode(struct fs *fs, uint64_t ino)
{
	nq_push(fs, NQ_INODE, ino, 0, "", 0);
}

void fs_notify_entry(struct fs *fs, uint64_t parent, const char *name, size_t len)
{
	nq_push(fs, NQ_ENTRY, parent, 0, name, len);
}

void fs_notify_shard(struct fs *fs, uint32_t shard, uint32_t n)
{
	nq_push(fs, NQ_SHARD, shard, n, "", 0);
}

void fs_notify_drain(struct fs *fs, double timeout_s)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)timeout_s;
	pthread_mutex_lock(&fs->nq_lock);
	while (fs->nq_run && (fs->nq_head || fs->nq_busy)) {
		if (pthread_cond_timedwait(&fs->nq_idle, &fs->nq_lock, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&fs->nq_lock);
}

static void nq_send(struct fs *fs, const struct fs_notify *q)
{
	switch (q->kind) {
	case NQ_INODE:
		fuse_lowlevel_notify_inval_inode(fs->se, q->ino, 0, 0);
		break;
	case NQ_ENTRY:
		fuse_lowlevel_notify_inval_entry(fs->se, q->ino, q->name, q->len);
		break;
	case NQ_SHARD:
		for (uint32_t i = 0; i < q->n; i++) {
			fuse_lowlevel_notify_inval_inode(fs->se, fs_ino(FS_K_MEMBER, (uint32_t)q->ino, i),
							 0, 0);
			if (fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER)
				fuse_lowlevel_notify_inval_inode(
					fs->se, fs_ino(FS_K_IFFILE, (uint32_t)q->ino, i), 0, 0);
		}
		break;
	}
}

static void *nq_thread(void *arg)
{
	struct fs *fs = arg;

	pthread_mutex_lock(&fs->nq_lock);
	for (;;) {
		struct fs_notify *q = fs->nq_head;

		if (!q) {
			pthread_cond_broadcast(&fs->nq_idle);
			if (!fs->nq_run)
				break;
			pthread_cond_wait(&fs->nq_cond, &fs->nq_lock);
			continue;
		}
		fs->nq_head = q->next;
		if (!fs->nq_head)
			fs->nq_tail = &fs->nq_head;
		fs->nq_busy = 1;
		pthread_mutex_unlock(&fs->nq_lock);
		nq_send(fs, q);
		free(q);
		pthread_mutex_lock(&fs->nq_lock);
		fs->nq_busy = 0;
	}
	pthread_mutex_unlock(&fs->nq_lock);
	return NULL;
}

static int nq_start(struct fs *fs)
{
	int err;

	pthread_mutex_lock(&fs->nq_lock);
	fs->nq_run = 1;
	pthread_mutex_unlock(&fs->nq_lock);
	err = pthread_create(&fs->nq_thread, NULL, nq_thread, fs);
	if (err) {
		fs->nq_run = 0;
		return -err;
	}
	return 0;
}

/* Stop the notifier; what is still queued is dropped (the kernel's caches
 * go with the mount). */
static void nq_stop(struct fs *fs)
{
	struct fs_notify *q;

	pthread_mutex_lock(&fs->nq_lock);
	if (!fs->nq_run) {
		pthread_mutex_unlock(&fs->nq_lock);
		return;
	}
	fs->nq_run = 0;
	while ((q = fs->nq_head) != NULL) {
		fs->nq_head = q->next;
		free(q);
	}
	fs->nq_tail = &fs->nq_head;
	pthread_cond_broadcast(&fs->nq_cond);
	pthread_cond_broadcast(&fs->nq_idle);
	pthread_mutex_unlock(&fs->nq_lock);
	pthread_join(fs->nq_thread, NULL);
}

/* ---- session ----------------------------------------------------------------- */

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = userdata;

	fs->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	fs->no_open = !fs->cfg.strict_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0;
	/* control files change: a new mtime at GETATTR must drop their pages
	 * (data files have day-long attribute timeouts: no GETATTR, no cost) */
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* O_TRUNC must reach us as a SETATTR (refused: EROFS). With atomic
	 * O_TRUNC the kernel leaves truncation to OPEN, and without OPEN
	 * requests it would just zero its own view of the file. */
	conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
	/* immutable data: splice replies, readdirplus, parallel lookups */
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	conn->max_readahead = FS_MAX_READ;
}

static const struct fuse_lowlevel_ops ll_ops = {
	.init = ll_init,
	.lookup = ll_lookup,
	.forget = ll_forget,
	.forget_multi = ll_forget_multi,
	.getattr = ll_getattr,
	.readlink = ll_readlink,
	.open = ll_open,
	.read = ll_read,
	.write = ll_write,
	.release = ll_release,
	.opendir = ll_opendir,
	.readdir = ll_readdir,
	.readdirplus = ll_readdirplus,
	.releasedir = ll_releasedir,
	.statfs = ll_statfs,
	.ioctl = ll_ioctl,
	.access = ll_access,
	.setattr = ll_setattr,
	.mknod = ll_mknod,
	.mkdir = ll_mkdir,
	.unlink = ll_unlink,
	.rmdir = ll_unlink,
	.symlink = ll_symlink,
	.rename = ll_rename,
	.link = ll_link,
	.create = ll_create,
	.setxattr = ll_setxattr,
	.getxattr = ll_getxattr,   /* issue 5 */
	.listxattr = ll_listxattr, /* issue 5 */
	.removexattr = ll_removexattr,
};

/* ---- stopping -----------------------------------------------------------------
 * SIGTERM, SIGINT, SIGHUP, and the end of the session (an unmount: the
 * kernel ends the connection and libfuse marks the session exited) stop the
 * daemon at once, whatever is in flight. fuse_session_loop_mt only returns
 * once every worker finished its request, and a request may wait for the
 * store; so the stop thread first cancels the backend (running transfers
 * end with -ECANCELED) and the cache tier (waiting readers get
 * -ECANCELED), then marks the session exited and wakes the main thread out
 * of the loop's sem_wait with STOP_WAKE_SIG (the loop looks at the exit flag
 * only when a worker ends or a signal interrupts it; it is sent again until
 * the loop returned, as it may arrive just before sem_wait). The signal
 * handlers only write the signal number to a pipe. Unmounting, closing the
 * cache (its maps) and the backend then follow in fs_ll_run and cmd_mount.
 */
#define STOP_WAKE_SIG SIGRTMIN
#define STOP_POLL_MS 250 /* how soon the end of the session is noticed */

static int stop_pipe_w = -1; /* for the handler: the write end of stop->pipe */

struct ll_stop {
	struct fs *fs;
	int pipe[2];      /* a byte per signal; 0 from fs_ll_run: stop waiting */
	pthread_t main;   /* runs fuse_session_loop_mt */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int loop_done;    /* protected by lock: the loop returned, send no wake */
	struct sigaction old[4];
};

static const int stop_sigs[3] = {SIGTERM, SIGINT, SIGHUP};

static void stop_signal(int sig)
{
	int saved = errno;
	char c = (char)sig;

	if (write(stop_pipe_w, &c, 1) < 0) {
		/* the pipe is full: a stop is on its way already */
	}
	errno = saved;
}

static void stop_wake(int sig)
{
	(void)sig; /* only interrupts the main thread's sem_wait */
}

static const char *stop_sig_name(int sig)
{
	return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "?";
}

static void *stop_main(void *arg)
{
	struct ll_stop *st = arg;
	struct fs *fs = st->fs;
	int sig = 0;

	for (;;) {
		struct pollfd p = {.fd = st->pipe[0], .events = POLLIN};
		char c;

		if (poll(&p, 1, STOP_POLL_MS) > 0 && read(st->pipe[0], &c, 1) == 1) {
			if (c == 0)
				return NULL; /* the loop ended and nothing asked to stop */
			sig = c;
			break;
		}
		if (fuse_session_exited(fs->se))
			break;
	}
	if (sig)
		fs_log(FS_LOG_INFO, "%s: stopping; requests in flight are cancelled",
		       stop_sig_name(sig));
	else
		fs_log(FS_LOG_INFO, "the session ended: requests in flight are cancelled");
	backend_cancel(fs->be);
	cachetier_cancel(fs->ct);
	fuse_session_exit(fs->se);
	pthread_mutex_lock(&st->lock);
	while (!st->loop_done) {
		struct timespec ts;

		pthread_kill(st->main, STOP_WAKE_SIG);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&st->cond, &st->lock, &ts);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

/* Install the handlers and start the stop thread. Returns 0 or a negative
 * errno (nothing installed). */
static int stop_start(struct ll_stop *st, struct fs *fs)
{
	struct sigaction sa;
	int err;

	memset(st, 0, sizeof(*st));
	st->fs = fs;
	st->main = pthread_self();
	if (pipe2(st->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	/* the reader blocks in poll, not in read */
	fcntl(st->pipe[0], F_SETFL, 0);
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	stop_pipe_w = st->pipe[1];
	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	/* restart what the handler interrupts in the other threads */
	sa.sa_flags = SA_RESTART;
	sa.sa_handler = stop_signal;
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &sa, &st->old[i]);
	/* no SA_RESTART: the main thread's sem_wait must return */
	sa.sa_flags = 0;
	sa.sa_handler = stop_wake;
	sigaction(STOP_WAKE_SIG, &sa, &st->old[3]);
	signal(SIGPIPE, SIG_IGN);
	err = pthread_create(&st->thread, NULL, stop_main, st);
	if (err) {
		for (int i = 0; i < 3; i++)
			sigaction(stop_sigs[i], &st->old[i], NULL);
		sigaction(STOP_WAKE_SIG, &st->old[3], NULL);
		stop_pipe_w = -1;
		close(st->pipe[0]);
		close(st->pipe[1]);
		pthread_cond_destroy(&st->cond);
		pthread_mutex_destroy(&st->lock);
		return -err;
	}
	return 0;
}

/* After fuse_session_loop_mt returned: end the stop thread (it may still be
 * cancelling), restore the handlers. */
static void stop_finish(struct ll_stop *st)
{
	char zero = 0;

	pthread_mutex_lock(&st->lock);
	st->loop_done = 1;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	if (write(st->pipe[1], &zero, 1) < 0) {
		/* full of signal bytes: the thread is stopping anyway */
	}
	pthread_join(st->thread, NULL);
	for (int i = 0; i < 3; i++)
		sigaction(stop_sigs[i], &st->old[i], NULL);
	sigaction(STOP_WAKE_SIG, &st->old[3], NULL);
	stop_pipe_w = -1;
	close(st->pipe[0]);
	close(st->pipe[1]);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
}

int fs_ll_run(struct fs *fs, int ready_fd)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lc = NULL;
	struct ll_stop stop;
	char opts[4096];
	const char *uopts = fs->cfg.fuse_opts ? fs->cfg.fuse_opts : "";
	int err = -EIO, n, stopping = 0;

	/* other users only ever see what the modes allow: with allow_other the
	 * kernel checks permissions (default_permissions), always */
	/* the mount is read-only (ro last, so an -o rw cannot undo it): the
	 * mount table says so and the kernel refuses writes before asking */
	n = snprintf(opts, sizeof(opts), "-ofsname=shardfs:%s,subtype=shardfs,nosuid,nodev%s%s,ro%s",
		     backend_describe(fs->be), uopts[0] ? "," : "", uopts,
		     strstr(uopts, "allow_other") ? ",default_permissions" : "");
	if (n < 0 || (size_t)n >= sizeof(opts))
		return -E2BIG;
	/* fsname may not contain commas: the option parser would split it */
	for (char *p = opts + strlen("-ofsname=shardfs:"); *p && strncmp(p, ",subtype=", 9); p++) {
		if (*p == ',')
			*p = '_';
	}
	if (fuse_opt_add_arg(&args, "shardfs") || fuse_opt_add_arg(&args, opts) ||
	    (fs->cfg.debug && fuse_opt_add_arg(&args, "-d")))
		goto out;
	fs->se = fuse_session_new(&args, &ll_ops, sizeof(ll_ops), fs);
	if (!fs->se) {
		err = -EINVAL;
		goto out;
	}
	/* before the mount: a signal never finds the mount without its daemon */
	err = stop_start(&stop, fs);
	if (err < 0)
		goto out_destroy;
	stopping = 1;
	err = -EIO;
	if (fuse_session_mount(fs->se, fs->cfg.mountpoint) != 0)
		goto out_stop;
	fs_log(FS_LOG_INFO, "mounted %s at %s: %u objects, %u shards, %u directories",
	       backend_describe(fs->be), fs->cfg.mountpoint, fs->nobjs, fs->nshards, fs->ndirs);
	if (ready_fd >= 0) {
		char ok = 0;
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (write(ready_fd, &ok, 1) < 0) {
			/* the parent went away; keep serving */
		}
		close(ready_fd);
		/* a daemon must not hold the caller's terminal or pipes open:
		 * '$(shardfs mount ...)' would never see end of file */
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			/* whatever still writes to stderr (sanitizers, libraries)
			 * lands in the log file */
			dup2(fs_log_fd() != STDERR_FILENO ? fs_log_fd() : null, STDERR_FILENO);
			close(null);
		}
		if (chdir("/") < 0) {
			/* every path we use is absolute or an open fd */
		}
	}
	lc = fuse_loop_cfg_create();
	if (!lc || nq_start(fs) < 0)
		goto out_unmount;
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, fs->cfg.max_threads);
	fuse_loop_cfg_set_idle_threads(lc, fs->cfg.max_threads);
	err = fuse_session_loop_mt(fs->se, lc) < 0 ? -EIO : 0;
	stop_finish(&stop); /* no wake signal interrupts the unmount */
	stopping = 0;
out_unmount:
	nq_stop(fs);
	fuse_loop_cfg_destroy(lc);
	fuse_session_unmount(fs->se);
out_stop:
	if (stopping)
		stop_finish(&stop);
out_destroy:
	fuse_session_destroy(fs->se);
	fs->se = NULL;
out:
	fuse_opt_free_args(&args);
	return err;
}
