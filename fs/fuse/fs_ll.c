/*
 * fs_ll.c — the FUSE adapter: the only file of shardfs that speaks FUSE
 * (besides the daemon's main, which starts it).
 *
 * Thin by intent, in the manner of squashfuse's ll.c: every request decodes
 * its arguments, calls one operation of the core (fs/core/include/fs_core_ops.h), and
 * ends in exactly one reply. Errors come back as negative errnos and go
 * through one reply helper (reply_fail) that counts and logs them. What the
 * filesystem answers (attributes, entries, timeouts, reads, xattrs, EROFS)
 * is decided in the core; what is FUSE's is here: the reply formats, fd
 * buffers so the kernel can splice, zero-cost opens and opendirs, the
 * session's capabilities, the invalidation callbacks; stopping (the signals
 * and the stop thread) is fs_ll_stop.c's.
 */
#define FUSE_USE_VERSION 312

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs_ll.h"
#include "fs_ll_i.h"
#include "fs_core_ctl.h"
#include "fs_core_ops.h"
#include "disk_lock.h"

/* Largest read the kernel sends (FUSE_MAX_MAX_PAGES * 4 KiB is 1 MiB). */
#define FS_MAX_READ (1u << 20)

/* Every request's first call (a request's checks of the cache's change
 * watch read it once: fs_op_begin) */
static struct fs *ll_fs(fuse_req_t req)
{
	fs_op_begin();
	return fuse_req_userdata(req);
}

static int ll_interrupted(void *req);

/* ll_fs for a request whose waits end with -EINTR once the kernel
 * interrupts it (its sender got a signal or was killed: fs_op_stop_on):
 * a lookup's, getattr's, open's or listing's wait for another request's
 * build of a shard's index. *stop is the caller's and lives until its
 * reply; the reply to an -EINTR goes to nobody. */
static struct fs *ll_fs_stop(fuse_req_t req, struct fs_op_stop *stop)
{
	struct fs *fs = ll_fs(req);

	stop->asked = ll_interrupted;
	stop->arg = req;
	fs_op_stop_on(stop);
	return fs;
}

/* ---- the one error reply --------------------------------------------------- */

/* What a request was, for the log line of its failure. */
enum ll_op {
	OP_LOOKUP,
	OP_GETATTR,
	OP_READLINK,
	OP_OPEN,
	OP_READ,
	OP_WRITE,
	OP_OPENDIR,
	OP_READDIR,
	OP_IOCTL,
	OP_SETATTR,
	OP_GETXATTR,
	OP_LISTXATTR,
	OP_ACCESS,
	OP_CHANGE, /* mknod, mkdir, unlink, rmdir, symlink, rename, link, create, set/removexattr */
};
static const char *const ll_op_names[] = {
    "lookup",  "getattr", "readlink", "open",	  "read",      "write",	 "opendir",
    "readdir", "ioctl",	  "setattr",  "getxattr", "listxattr", "access", "change",
};

/* Errors that answer a question (no such name, not a directory, read-only,
 * a changed file's old version, ...) rather than report a failure. */
static int ll_is_answer(int err)
{
	switch (err) {
	case ENOENT:
	case ENOTDIR:
	case EISDIR:
	case ENODATA:
	case ERANGE:
	case ENOSYS:
	case EROFS:
	case ENOTTY:
	case EINVAL:
	case EACCES:
	case ESTALE:
	case ENAMETOOLONG: /* a symlink target the kernel cannot take (fs_view_shard.c) */
	case EINTR:	   /* its sender gave up (ll_fs_stop): nobody reads it */
		return 1;
	default:
		return 0;
	}
}

/* Answer request req (op on inode ino; detail: what the log line adds, or
 * NULL) with error err (negative errno). Counts and logs what failed: every
 * failed read of a file (read_errors) and the other requests' failures that
 * are no answer (op_errors); the log says which request, which file, why.
 * At most FAIL_LOG_PER_S lines a second (a store that is down fails every
 * read); the rest are only counted. */
#define FAIL_LOG_PER_S 10
static _Atomic int64_t fail_sec;	      /* the second of the lines counted in fail_in_sec */
static atomic_uint fail_in_sec, fail_dropped; /* lines in it; not logged since the last */

static void reply_fail(fuse_req_t req, struct fs *fs, enum ll_op op, fuse_ino_t ino,
		       const char *detail, int err)
{
	char what[1024];
	struct timespec ts;
	unsigned skipped;

	err = err < 0 ? -err : err;
	/* counted before the reply: a caller that sees the error and then
	 * reads the stats finds it counted */
	if (op == OP_READ) {
		/* a directory, a control file's late read, or a read whose
		 * sender gave up (fs_op_stop_on: nobody reads the answer) */
		if (!fs_op_is_data(fs, ino) || err == EINTR) {
			fuse_reply_err(req, err);
			return;
		}
		fs_count_read_error(fs);
	} else {
		if (ll_is_answer(err)) {
			fuse_reply_err(req, err);
			return;
		}
		fs_count_op_error(fs);
	}
	fuse_reply_err(req, err);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (atomic_exchange(&fail_sec, (int64_t)ts.tv_sec) != (int64_t)ts.tv_sec)
		atomic_store(&fail_in_sec, 0);
	if (atomic_fetch_add(&fail_in_sec, 1) >= FAIL_LOG_PER_S) {
		atomic_fetch_add(&fail_dropped, 1);
		return;
	}
	fs_op_describe(fs, ino, what, sizeof(what));
	skipped = atomic_exchange(&fail_dropped, 0);
	fs_log(FS_LOG_WARN, "%s of %s%s failed: %s%s", ll_op_names[op], what, detail ? detail : "",
	       strerror(err), skipped ? " (more failed requests not logged)" : "");
}

/* ---- requests: decode, call the core (fs_ops.h), reply once -------------- */

static void reply_entry(fuse_req_t req, const struct fs_entry *fe)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.ino = fe->ino;
	e.attr = fe->attr;
	e.entry_timeout = fe->timeout;
	if (fe->ino)
		e.attr_timeout = fe->timeout;
	fuse_reply_entry(req, &e);
}

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_op_stop stop;
	struct fs *fs = ll_fs_stop(req, &stop);
	struct fs_entry e;
	int err = fs_op_lookup(fs, parent, name, &e);

	if (err < 0) {
		char detail[NAME_MAX + 16];

		snprintf(detail, sizeof(detail), ": name %s", name);
		reply_fail(req, fs, OP_LOOKUP, parent, detail, err);
		return;
	}
	reply_entry(req, &e);
}

static void ll_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fs_count_forgets(ll_fs(req), 1); /* computed inodes: nothing to release */
	fuse_reply_none(req);
}

static void ll_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	(void)forgets;
	fs_count_forgets(ll_fs(req), count);
	fuse_reply_none(req);
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_op_stop stop;
	struct fs *fs = ll_fs_stop(req, &stop);
	struct stat st;
	int err;

	(void)fi;
	fs_count_getattr(fs);
	err = fs_op_getattr(fs, ino, &st);
	if (err < 0)
		reply_fail(req, fs, OP_GETATTR, ino, NULL, err);
	else
		fuse_reply_attr(req, &st, fs_op_timeout(fs, ino));
}

static void ll_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = ll_fs(req);
	const char *target;
	int err = fs_op_readlink(fs, ino, &target);

	if (err < 0)
		reply_fail(req, fs, OP_READLINK, ino, NULL, err);
	else
		fuse_reply_readlink(req, target);
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_op_stop stop;
	struct fs *fs = ll_fs_stop(req, &stop);
	struct fs_open o;
	int err;

	fs_count_request(fs, FS_REQ_OPEN);
	/* Zero-cost opens: the kernel stops sending OPEN and RELEASE for good and
	 * keeps page caches (as with keep_cache); a second epoch never leaves
	 * the kernel. Writes still fail: at write, setattr or create. */
	if (fs_no_open(fs)) {
		reply_fail(req, fs, OP_OPEN, ino, NULL, -ENOSYS);
		return;
	}
	err = fs_op_open(fs, ino, fi->flags, &o);
	if (err < 0) {
		reply_fail(req, fs, OP_OPEN, ino, NULL, err);
		return;
	}
	fi->fh = o.fh;
	fi->direct_io = o.direct_io;
	fi->keep_cache = o.keep_cache;
	fi->noflush = o.noflush;
	fuse_reply_open(req, fi);
}

static void ll_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	int err;

	(void)off;
	(void)fi;
	err = fs_op_write(fs, ino, buf, size, fuse_req_ctx(req)->uid, fuse_req_ctx(req)->gid,
			  fuse_req_ctx(req)->pid);
	if (err < 0)
		reply_fail(req, fs, OP_WRITE, ino, NULL, err);
	else
		fuse_reply_write(req, size);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);

	fs_count_request(fs, FS_REQ_RELEASE);
	fs_op_release(fs, ino, fi->fh);
	fuse_reply_err(req, 0);
}

/* Nothing to flush (read-only): ENOSYS, as libfuse answers without a
 * handler, so that the kernel sends no FLUSH again for the mount's life
 * (its no_flush); here only to be counted (flushes). */
static void ll_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fs_count_request(ll_fs(req), FS_REQ_FLUSH);
	fuse_reply_err(req, ENOSYS);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	struct fs_op_stop stop = {ll_interrupted, req};
	struct fs_read r;
	int err;

	/* its waits for the store end once the kernel interrupts it (the
	 * sender killed): -EINTR, answered to nobody */
	fs_op_stop_on(&stop);
	/* the sender's pid: its readahead stream (fs_op_read_by) */
	err = fs_op_read_by(fs, ino, fi ? fi->fh : 0, (uint64_t)off, size,
			    (uint32_t)fuse_req_ctx(req)->pid, &r);
	if (err < 0) {
		char detail[64];

		snprintf(detail, sizeof(detail), " [%" PRIu64 ", +%zu)", (uint64_t)off, size);
		reply_fail(req, fs, OP_READ, ino, detail, err);
		return;
	}
	if (r.pin) { /* one fd buffer: the kernel can splice from it */
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(r.len);

		bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
		bv.buf[0].fd = r.fd;
		bv.buf[0].pos = (off_t)r.fd_off;
		fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
	} else {
		fuse_reply_buf(req, r.buf, r.len);
	}
	fs_op_read_done(&r);
}

static void ll_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_op_stop stop;
	struct fs *fs = ll_fs_stop(req, &stop);
	int err = fs_op_opendir(fs, ino);

	if (err < 0) {
		reply_fail(req, fs, OP_OPENDIR, ino, NULL, err);
		return;
	}
	/* Directories never change: where the kernel can do without OPENDIR
	 * (and RELEASEDIR) it caches listings as if we had set cache_readdir
	 * and keep_cache, and a second walk of the tree never asks us again. */
	if (fs_no_opendir(fs)) {
		reply_fail(req, fs, OP_OPENDIR, ino, NULL, -ENOSYS);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* A readdir reply being filled. */
struct ll_dirbuf {
	fuse_req_t req;
	char *buf;
	size_t size, used;
	int plus;
};

static int ll_dirent(void *ctx, const char *name, const struct fs_entry *fe, uint64_t next)
{
	struct ll_dirbuf *d = ctx;
	size_t n;

	if (d->plus) {
		struct fuse_entry_param e;

		memset(&e, 0, sizeof(e));
		e.ino = fe->ino;
		e.attr = fe->attr;
		e.attr_timeout = e.entry_timeout = fe->timeout;
		n = fuse_add_direntry_plus(d->req, d->buf + d->used, d->size - d->used, name, &e,
					   (off_t)next);
	} else {
		n = fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &fe->attr,
				      (off_t)next);
	}
	if (n > d->size - d->used)
		return 1;
	d->used += n;
	return 0;
}

static void ll_readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct fs_op_stop stop;
	struct fs *fs = ll_fs_stop(req, &stop);
	struct ll_dirbuf d = {req, malloc(size), size, 0, plus};
	int err = d.buf ? fs_op_readdir(fs, ino, (uint64_t)off, ll_dirent, &d) : -ENOMEM;

	if (err < 0)
		reply_fail(req, fs, OP_READDIR, ino, NULL, err);
	else
		fuse_reply_buf(req, d.buf, d.used);
	free(d.buf);
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
	struct statvfs sv;

	(void)ino;
	fs_op_statfs(ll_fs(req), &sv);
	fuse_reply_statfs(req, &sv);
}

/* fs_op_stop for req: the kernel interrupted it (the sender got a
 * signal or was killed; another handler thread reads the interrupt). */
static int ll_interrupted(void *req)
{
	return fuse_req_interrupted(req);
}

/* Everything but the control command answers ENOTTY at once (Python's
 * open() asks isatty() on every file). */
static void ll_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		     size_t out_bufsz)
{
	struct fs *fs = ll_fs(req);
	struct fs_op_stop stop = {ll_interrupted, req};
	int err;

	(void)arg;
	(void)fi;
	(void)flags;
	(void)out_bufsz;
	fs_count_request(fs, FS_REQ_IOCTL);
	err = fs_op_ioctl(fs, ino, cmd, fuse_req_ctx(req)->uid, fuse_req_ctx(req)->gid,
			  fuse_req_ctx(req)->pid, in_buf, in_bufsz, &stop);
	if (err < 0)
		reply_fail(req, fs, OP_IOCTL, ino, NULL, err);
	else
		fuse_reply_ioctl(req, err, NULL, 0);
}

static void ll_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	int err = fs_op_access(ll_fs(req), ino, mask);

	if (err < 0)
		reply_fail(req, ll_fs(req), OP_ACCESS, ino, NULL, err);
	else
		fuse_reply_err(req, 0); /* the success reply of access */
}

static void ll_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct fs *fs = ll_fs(req);
	struct stat st;
	int err;

	(void)fi;
	err =
	    fs_op_setattr(fs, ino, (to_set & ~FUSE_SET_ATTR_SIZE) == 0 && attr->st_size == 0, &st);
	if (err < 0)
		reply_fail(req, fs, OP_SETATTR, ino, NULL, err);
	else
		fuse_reply_attr(req, &st, 0);
}

/* ---- everything that would modify: EROFS ------------------------------------ */

/* A request that would change the tree (on inode ino): EROFS, counted and
 * logged as every failed request is. */
static void ll_readonly(fuse_req_t req, fuse_ino_t ino)
{
	reply_fail(req, ll_fs(req), OP_CHANGE, ino, NULL, -EROFS);
}

static void ll_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	ll_readonly(req, parent);
}

static void ll_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	ll_readonly(req, parent);
}

static void ll_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	ll_readonly(req, parent);
}

static void ll_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	ll_readonly(req, parent);
}

static void ll_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	ll_readonly(req, parent);
}

static void ll_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	ll_readonly(req, ino);
}

static void ll_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	ll_readonly(req, parent);
}

static void ll_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	ll_readonly(req, ino);
}

static void ll_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	ll_readonly(req, ino);
}

/* ---- extended attributes (fs_ops.c says which) -------------------------------- */

/* Answer an xattr request for size bytes with buf[0..n) (n from the core). */
static void reply_xattr(fuse_req_t req, enum ll_op op, fuse_ino_t ino, const char *buf, int n,
			size_t size)
{
	if (n < 0)
		reply_fail(req, ll_fs(req), op, ino, NULL, n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if (size < (size_t)n)
		reply_fail(req, ll_fs(req), op, ino, NULL, -ERANGE);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void ll_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	char buf[FS_XATTR_MAX];

	reply_xattr(req, OP_GETXATTR, ino, buf,
		    fs_op_getxattr(ll_fs(req), ino, name, buf, sizeof(buf)), size);
}

static void ll_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char buf[256];

	reply_xattr(req, OP_LISTXATTR, ino, buf, fs_op_listxattr(ll_fs(req), ino, buf, sizeof(buf)),
		    size);
}

/* ---- kernel cache invalidations, for the notifier (fs_notify.c) ------------- */

static void ll_inval_inode(void *ctx, uint64_t ino)
{
	fuse_lowlevel_notify_inval_inode(ctx, ino, 0, 0);
}

static void ll_inval_entry(void *ctx, uint64_t parent, const char *name, size_t len)
{
	fuse_lowlevel_notify_inval_entry(ctx, parent, name, len);
}

static const struct fs_notify_ops ll_notify_ops = {ll_inval_inode, ll_inval_entry};

/* ---- session ----------------------------------------------------------------- */

static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = userdata;

	fs_session_caps(fs, (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) != 0,
			(conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0);
	/* control files change: a new mtime at GETATTR must drop their pages
	 * (data files have day-long attribute timeouts: no GETATTR, no cost) */
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* O_TRUNC must reach us as a SETATTR (refused: EROFS). With atomic
	 * O_TRUNC the kernel leaves truncation to OPEN, and without OPEN
	 * requests it would just zero its own view of the file. */
	conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
	/* An O_DIRECT read is one READ request at a time that the kernel can
	 * interrupt: with async direct I/O its requests go in the background,
	 * where no FUSE_INTERRUPT reaches a read, and its killed sender waits
	 * in the kernel (state D) until the store answers; so a sender gone
	 * ends its read's wait (fs_op_stop_on). (A page cache reader waits on
	 * a page lock, killable: its readahead request runs on.) */
	conn->want &= ~(unsigned)FUSE_CAP_ASYNC_DIO;
	/* immutable data: splice replies, readdirplus, parallel lookups */
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	/* every readdir is a readdirplus, not only a directory's first batch
	 * (libfuse's default, "auto"): a walk that opens what it listed
	 * (ImageFolder) then finds every entry cached instead of sending a
	 * LOOKUP per file past the first batch */
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
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
    .flush = ll_flush,
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
    .getxattr = ll_getxattr,
    .listxattr = ll_listxattr,
    .removexattr = ll_removexattr,
};

/* ---- the kernel's readahead on the mount ----------------------------------------
 * The kernel reads a FUSE file ahead by at most its bdi's read_ahead_kb,
 * 128K unless raised (INIT's max_readahead can only lower it): a read of a
 * 1 MB sample is 8 READ requests, each a round trip through a FUSE thread.
 * A daemon run as root raises it to --kernel-readahead (at most 256K: a
 * sequential reader's READs reach twice the window, and a reply that does
 * not fit the splice pipe, 1 MiB at most, is copied twice by libfuse).
 * The bdi is the mount's device ("0:42"), found in /proc/self/mountinfo:
 * a stat of the mount point would wait for INIT, which the session loop
 * answers only later. */

/* The device ("MAJ:MIN") of the last mount at mountpoint, into dev; 0 or
 * -ENOENT. */
static int mount_dev(const char *mountpoint, char *dev, size_t size)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct fs_mountinfo mi;

		if (fs_mountinfo_split(line, &mi) < 0)
			continue;
		if (strcmp(mi.point, mountpoint) == 0 && strlen(mi.dev) < size) {
			strcpy(dev, mi.dev);
			err = 0; /* the last one is the mount on top */
		}
	}
	fclose(f);
	return err;
}

static void set_readahead(const char *mountpoint, uint64_t bytes)
{
	char dev[64], path[128], val[32];
	int fd, err, n;

	if (bytes == 0)
		return;
	err = mount_dev(mountpoint, dev, sizeof(dev));
	if (err == 0) {
		snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
		n = snprintf(val, sizeof(val), "%" PRIu64, bytes / 1024);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		err = fd < 0 ? -errno : write(fd, val, (size_t)n) == n ? 0 : -errno;
		if (fd >= 0)
			close(fd);
	}
	if (err < 0)
		fs_log(FS_LOG_INFO,
		       "the kernel's readahead on %s is its own (reads of files over 128K are "
		       "split into 128K READs): --kernel-readahead needs the daemon to run as "
		       "root (%s)",
		       mountpoint, strerror(-err));
}

/* The FUSE mount options into opts (size bytes): the user's uopts, then
 * ro, nosuid and nodev. Other users only ever see what the modes allow:
 * with allow_other the kernel checks permissions (default_permissions),
 * always (uopts is in the form libfuse reads: fs_mount.c unescaped it).
 * The mount is read-only, nosuid and nodev, after the user's options
 * (libfuse applies mount flags in order: the last wins), so that no -o rw,
 * suid or dev can undo them (fs_mount.c refuses suid and dev): the mount
 * table says so, the kernel refuses writes before asking and never
 * honours a setuid bit or a device file of a shard. 0 or -E2BIG. */
static int ll_mount_opts(struct fs *fs, const char *uopts, char *opts, size_t size)
{
	int n = snprintf(opts, size, "-ofsname=shardfs:%s,subtype=shardfs%s%s,nosuid,nodev,ro%s",
			 fs_describe(fs), uopts[0] ? "," : "", uopts,
			 strstr(uopts, "allow_other") ? ",default_permissions" : "");

	if (n < 0 || (size_t)n >= size)
		return -E2BIG;
	/* fsname may not contain commas: the option parser would split it */
	for (char *p = opts + strlen("-ofsname=shardfs:"); *p && strncmp(p, ",subtype=", 9); p++) {
		if (*p == ',')
			*p = '_';
	}
	return 0;
}

/* Mounted: tell 'shardfs mount' (its pipe ready_fd, closed here) and
 * become a daemon (no parent's death signal, no caller's terminal or
 * pipes, working directory /). -EINTR when a stop signal came first,
 * -EPIPE when 'shardfs mount' is gone: then the caller unmounts. */
static int ll_ready(struct fuse_session *se, int ready_fd)
{
	char ok = 0;
	int null;
	ssize_t w;

	/* a stop signal (the parent's death: PR_SET_PDEATHSIG, fs_mount.c)
	 * before the mount was ready: nobody waits for it */
	if (fuse_session_exited(se)) {
		fs_log(FS_LOG_INFO, "stopped before the mount was ready: unmounting");
		return -EINTR;
	}
	do {
		w = write(ready_fd, &ok, 1);
	} while (w < 0 && errno == EINTR);
	close(ready_fd);
	/* EPIPE (SIGPIPE is ignored: fs_ll__stop_start): 'shardfs mount' was
	 * interrupted or killed while this mount was being made; its caller
	 * saw it fail, so no mount may appear */
	if (w != 1) {
		fs_log(FS_LOG_WARN, "'shardfs mount' is gone (interrupted or killed) before the "
				    "mount was ready: unmounting");
		return -EPIPE;
	}
	/* ready: the daemon outlives 'shardfs mount' from now on */
	prctl(PR_SET_PDEATHSIG, 0);
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	/* a daemon must not hold the caller's terminal or pipes open:
	 * '$(shardfs mount ...)' would never see end of file */
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		/* whatever still writes to stderr (sanitizers, libraries) lands
		 * in the log file */
		dup2(fs_log_fd() != STDERR_FILENO ? fs_log_fd() : null, STDERR_FILENO);
		close(null);
	}
	if (chdir("/") < 0) {
		/* every path we use is absolute or an open fd */
	}
	return 0;
}

int fs_ll_run(struct fs *fs, int ready_fd, int lock_fd)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *lc = NULL;
	struct fuse_session *se;
	struct ll_stop stop;
	char opts[4096];
	struct fs_mount_args ma;
	const char *uopts;
	uint32_t nobjs, nshards, ndirs;
	int err = -EIO, stopping = 0;

	fs_mount_args(fs, &ma);
	uopts = *ma.fuse_opts ? *ma.fuse_opts : "";

	err = ll_mount_opts(fs, uopts, opts, sizeof(opts));
	if (err < 0)
		return err;
	err = -EIO;
	if (fuse_opt_add_arg(&args, "shardfs") || fuse_opt_add_arg(&args, opts) ||
	    (ma.debug && fuse_opt_add_arg(&args, "-d")))
		goto out;
	se = fuse_session_new(&args, &ll_ops, sizeof(ll_ops), fs);
	if (!se) {
		err = -EINVAL;
		goto out;
	}
	/* before the mount: a signal never finds the mount without its daemon */
	err = fs_ll__stop_start(&stop, fs, se);
	if (err < 0)
		goto out_destroy;
	stopping = 1;
	err = -EIO;
	if (fuse_session_mount(se, ma.mountpoint) != 0)
		goto out_stop;
	/* mounted: a mount of this mount point now finds it mounted; the lock
	 * held longer would refuse one as "under way" after this mount is
	 * gone (a lazy unmount) while this daemon ends */
	if (lock_fd >= 0)
		close(lock_fd);
	lock_fd = -1;
	set_readahead(ma.mountpoint, ma.kernel_ra_bytes);
	fs_counts(fs, &nobjs, &nshards, &ndirs);
	fs_log(FS_LOG_INFO, "mounted %s at %s: %u %s, %u %s, %u %s", fs_describe(fs), ma.mountpoint,
	       nobjs, fs_plural(nobjs, "object", "objects"), nshards,
	       fs_plural(nshards, "shard", "shards"), ndirs,
	       fs_plural(ndirs, "directory", "directories"));
	if (ready_fd >= 0) {
		err = ll_ready(se, ready_fd);
		if (err < 0)
			goto out_unmount;
		err = -EIO;
	} else {
		fs_mount_notify_ready(ma.mountpoint); /* -f: systemd's Type=notify */
	}
	lc = fuse_loop_cfg_create();
	if (!lc || fs_notify_start(fs, &ll_notify_ops, se) < 0)
		goto out_unmount;
	fuse_loop_cfg_set_clone_fd(lc, 1);
	fuse_loop_cfg_set_max_threads(lc, ma.max_threads);
	fuse_loop_cfg_set_idle_threads(lc, ma.max_threads);
	err = fuse_session_loop_mt(se, lc) < 0 ? -EIO : 0;
	fs_ll__stop_finish(&stop); /* no wake signal interrupts the unmount */
	stopping = 0;
out_unmount:
	fs_ll__notify_stop(fs, fuse_session_fd(se)); /* answers what the kernel asks meanwhile */
	fuse_loop_cfg_destroy(lc);
	fuse_session_unmount(se);
out_stop:
	if (stopping)
		fs_ll__stop_finish(&stop);
out_destroy:
	fuse_session_destroy(se);
out:
	if (lock_fd >= 0)
		close(lock_fd);
	fuse_opt_free_args(&args);
	return err;
}
