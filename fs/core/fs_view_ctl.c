/*
 * fs_view_ctl.c — .shardfs and its control files (fs_view.h; what they say:
 * fs_ctl.c), and the control files' state (fs_ctl.h, struct fs_ctl_state): their
 * snapshots and the latest prefetch run.
 *
 * A control file is read as a snapshot: one rendered at open, kept under
 * the open's generation number (struct fs_ctl_state, snaps: a READ may still be
 * in flight when RELEASE frees it), or, without OPEN requests, the one the
 * last GETATTR rendered (cur). Timeouts are 0 (fs_op_timeout).
 * .shardfs/control reads as empty and takes commands (fs_ops.c: ioctl,
 * write).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_view.h"

/* Snapshots of control files, one per open. A READ may still be in flight
 * when RELEASE frees its snapshot (the kernel issues direct-I/O reads
 * asynchronously and returns on the first short one), so the file handle
 * is a generation number looked up under the lock, never a pointer. */
#define CTL_SNAPS 1024
struct ctl_snap {
	uint64_t gen; /* 0: free */
	char *buf;
	size_t len;
};

/* The control files' state (fs_ctl.h): fs->ctl, from fs_open to fs_close. */
struct fs_ctl_state {
	struct disk_mutex lock; /* DISK_LOCK_CTL: protects everything below; held for no I/O */
	struct ctl_snap snaps[CTL_SNAPS];
	uint64_t gen;
	/* Without OPEN requests (zero-cost opens) a control file is read through
	 * the page cache: every GETATTR renders a new snapshot here and reports
	 * its size and a new mtime, so the kernel drops the old pages, and the
	 * READ that follows serves this snapshot. */
	struct ctl_snap cur[FS_CTL_COUNT];
	/* The latest prefetch run (fs_ctl.h, fs_ctl_run_of) */
	int run;	      /* its id, 1, 2, ...; 0: none yet */
	pid_t run_pid;	      /* the process that began it */
	uint64_t run_before;  /* bytes of its objects cached when it named them */
	int64_t notice_until; /* 'umount-notice': CLOCK_MONOTONIC ns it holds until */
};

int fs_ctl_new(struct fs_ctl_state **out)
{
	struct fs_ctl_state *c = calloc(1, sizeof(*c));

	*out = c;
	if (!c)
		return -ENOMEM;
	disk_mutex_init(&c->lock, DISK_LOCK_CTL);
	return 0;
}

void fs_ctl_free(struct fs_ctl_state *c)
{
	if (!c)
		return;
	disk_mutex_destroy(&c->lock);
	free(c);
}

int fs_ctl_run_of(struct fs *fs, pid_t pid, int start)
{
	struct fs_ctl_state *c = fs->ctl;
	int run;

	disk_mutex_lock(&c->lock);
	if (start || c->run == 0 || c->run_pid != pid) {
		c->run = c->run == INT_MAX ? 1 : c->run + 1;
		c->run_pid = pid;
		c->run_before = 0;
	}
	run = c->run;
	disk_mutex_unlock(&c->lock);
	return run;
}

void fs_ctl_run_cached(struct fs *fs, int run, uint64_t cached)
{
	struct fs_ctl_state *c = fs->ctl;

	disk_mutex_lock(&c->lock);
	if (c->run == run)
		c->run_before += cached;
	disk_mutex_unlock(&c->lock);
}

int fs_ctl_run(struct fs *fs, uint64_t *before)
{
	struct fs_ctl_state *c = fs->ctl;
	int run;

	disk_mutex_lock(&c->lock);
	run = c->run;
	*before = c->run_before;
	disk_mutex_unlock(&c->lock);
	return run;
}

void fs_ctl_notice_set(struct fs *fs, int64_t until_ns)
{
	struct fs_ctl_state *c = fs->ctl;

	disk_mutex_lock(&c->lock);
	c->notice_until = until_ns;
	disk_mutex_unlock(&c->lock);
}

int64_t fs_ctl_notice(struct fs *fs)
{
	struct fs_ctl_state *c = fs->ctl;
	int64_t until;

	disk_mutex_lock(&c->lock);
	until = c->notice_until;
	disk_mutex_unlock(&c->lock);
	return until;
}

/* A control file's attributes: render the current snapshot (see
 * struct fs_ctl_state, cur) and report its size, with a new mtime every time. */
static int ctl_snap_attr(struct fs *fs, uint64_t ino, enum fs_ctl which, struct stat *st)
{
	struct fs_ctl_state *c = fs->ctl;
	struct ctl_snap *cur = &c->cur[which];
	struct timespec now;
	char *buf;
	size_t len;
	int err = fs_ctl_render(fs, which, &buf, &len);

	if (err < 0)
		return err;
	clock_gettime(CLOCK_REALTIME, &now);
	disk_mutex_lock(&c->lock);
	free(cur->buf);
	*cur = (struct ctl_snap){++c->gen, buf, len};
	disk_mutex_unlock(&c->lock);
	fs_attr_file(fs, st, ino, S_IFREG | 0444, len, now.tv_sec);
	st->st_mtim = st->st_ctim = now;
	return 0;
}

static int ctl_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino);

	if (a >= FS_CTL_COUNT || fs_ino_b(ino) != 0)
		return -ENOENT;
	if (a == FS_CTL_DIR)
		fs_attr_dir(fs, st, ino, 0555, 2, fs->mount_time);
	else if (a == FS_CTL_CONTROL)
		/* read-write for the owner: commands are an ioctl on a
		 * read-only open (the mount is read-only) */
		fs_attr_file(fs, st, ino, S_IFREG | 0600, 0, fs->mount_time);
	else
		return ctl_snap_attr(fs, ino, (enum fs_ctl)a, st);
	return 0;
}

static int ctl_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len, uint64_t *ino)
{
	(void)len;
	if (fs_ino_a(parent) != FS_CTL_DIR)
		return -ENOTDIR;
	*ino = 0;
	for (uint32_t i = 1; i < FS_CTL_COUNT; i++)
		if (strcmp(name, fs_ctl_names[i]) == 0)
			*ino = fs_ino(FS_K_CTL, i, 0);
	/* the loader indexes (fs_loaderidx.c): by name only, never listed */
	return *ino ? 0 : fs_lidx_lookup_ctl(fs, name, ino);
}

static int ctl_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	(void)fs;
	(void)ino;
	l->n = FS_CTL_LISTED - 1;
	l->parent = 1;
	return 0;
}

static const char *ctl_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	(void)l;
	*ino = fs_ino(FS_K_CTL, i + 1, 0);
	return fs_ctl_names[i + 1];
}

static int ctl_open(struct fs *fs, uint64_t ino, int flags, struct fs_open *o)
{
	struct fs_ctl_state *c = fs->ctl;
	struct ctl_snap *slot;
	char *buf;
	size_t len;
	int err;

	if (fs_ino_a(ino) == FS_CTL_CONTROL) {
		/* commands are ioctls on a read-only open (or writes, where a
		 * mount is writable); reading gives nothing */
		o->direct_io = 1;
		return 0;
	}
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))
		return -EROFS;
	err = fs_ctl_render(fs, (enum fs_ctl)fs_ino_a(ino), &buf, &len);
	if (err < 0)
		return err;
	disk_mutex_lock(&c->lock);
	o->fh = ++c->gen;
	slot = &c->snaps[o->fh % CTL_SNAPS];
	free(slot->buf); /* a snapshot 1024 opens old: its reader is gone */
	*slot = (struct ctl_snap){o->fh, buf, len};
	disk_mutex_unlock(&c->lock);
	o->direct_io = 1;
	return 0;
}

static void ctl_release(struct fs *fs, uint64_t ino, uint64_t fh)
{
	struct fs_ctl_state *c = fs->ctl;
	struct ctl_snap *slot = &c->snaps[fh % CTL_SNAPS];

	(void)ino;
	if (!fh)
		return;
	disk_mutex_lock(&c->lock);
	if (slot->gen == fh) {
		free(slot->buf);
		*slot = (struct ctl_snap){0, NULL, 0};
	}
	disk_mutex_unlock(&c->lock);
}

/* The open's own snapshot (fh), or without an open the current one; copied. */
static int ctl_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		    struct fs_read *r)
{
	uint32_t a = fs_ino_a(ino);
	struct fs_ctl_state *c = fs->ctl;
	struct ctl_snap *slot;
	int err = 0;

	if (a != FS_CTL_STATS && a != FS_CTL_METRICS && a != FS_CTL_PLANS)
		return -EISDIR;
	slot = fh ? &c->snaps[fh % CTL_SNAPS] : &c->cur[a];
	disk_mutex_lock(&c->lock);
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
	disk_mutex_unlock(&c->lock);
	return err;
}

const struct fs_view fs_view_ctl = {
    .name = "control",
    .volatile_attrs = 1,
    .getattr = ctl_getattr,
    .lookup = ctl_lookup,
    .list_open = ctl_list_open,
    .list_entry = ctl_list_entry,
    .open = ctl_open,
    .release = ctl_release,
    .read = ctl_read,
};

void fs_ctl_clear(struct fs *fs)
{
	struct fs_ctl_state *c = fs->ctl;

	if (c) { /* NULL: fs_open failed before making it */
		for (int i = 0; i < CTL_SNAPS; i++)
			free(c->snaps[i].buf);
		for (int i = 0; i < FS_CTL_COUNT; i++)
			free(c->cur[i].buf);
		memset(c->snaps, 0, sizeof(c->snaps));
		memset(c->cur, 0, sizeof(c->cur));
	}
	fs_plan_free_all(fs);
	fs_lidx_clear(fs);
}
