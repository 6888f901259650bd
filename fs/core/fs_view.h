/*
 * fs_view.h — what each kind of inode does: one table of operations per
 * kind (struct fs_view), so a new layout is one new file.
 *
 * fs_ops.c decodes an inode number into its view (fs_view_of) and calls
 * the view's operation; a NULL operation answers what that kind cannot do
 * (no lookup: -ENOTDIR, no read: -EISDIR, no xattrs: -ENODATA, ...). The
 * views:
 *   fs_view_source.c      the source's directories (the root of the shards
 *                         layout) and its objects as plain files (a shard's
 *                         raw .tar among them)
 *   fs_view_shard.c       a shard's member directory and its members
 *   fs_view_ctl.c         .shardfs and its control files
 *   fs_if_view.c          --layout imagefolder: the root, class directories
 *                         and image files (the view: fs_if_*.c)
 *   fs_loaderidx.c        .shardfs/samples.tsv, wids.json and the DALI
 *                         indexes under .shardfs/dali
 * Every operation returns 0 (or a length) or a negative errno.
 */
#ifndef FS_VIEW_H
#define FS_VIEW_H

#include "fs_ops.h"

/* A directory being listed: the view's list_open fills n, parent and what
 * its list_entry needs. */
struct fs_listing {
	struct fs *fs;
	uint64_t ino, parent;
	uint32_t n;	 /* entries after "." and ".." */
	uint32_t a;	 /* fs_ino_a(ino) */
	uint32_t first;	 /* the view's: first entry */
	int locked;	 /* list_open took the namespace's read lock: fs_ops.c drops it */
	int stale_names; /* an entry whose attributes say ESTALE is listed by name
			  * (a changed object, not looked up since) */
	const void *p;	 /* the view's: the directory, index or view listed */
};

struct fs_view {
	const char *name;   /* for reading the code and the log, e.g. "member" */
	int volatile_attrs; /* attributes change all the time (control files):
			     * timeouts 0, and a read's failure is no data's */
	/* Attributes (required). */
	int (*getattr)(struct fs *fs, uint64_t ino, struct stat *st);
	/* name[0..len) (NUL-terminated too) in directory parent: 0 with *ino
	 * (0: no such name, a negative entry), or a negative errno. */
	int (*lookup)(struct fs *fs, uint64_t parent, const char *name, size_t len, uint64_t *ino);
	/* opendir's extra check (a member that is no directory); NULL: none. */
	int (*opendir)(struct fs *fs, uint64_t ino);
	/* A listing: list_prepare (NULL: none) runs first, without locks, for
	 * what the listing from offset off will need; list_open fills l;
	 * list_entry gives entry i's name and inode (NULL: stop). NULL
	 * list_open: not a directory. */
	void (*list_prepare)(struct fs *fs, uint64_t ino, uint64_t off);
	int (*list_open)(struct fs *fs, uint64_t ino, struct fs_listing *l);
	const char *(*list_entry)(const struct fs_listing *l, uint32_t i, uint64_t *ino);
	/* A file: open (NULL: the data default, keep_cache), release, read. */
	int (*open)(struct fs *fs, uint64_t ino, int flags, struct fs_open *o);
	void (*release)(struct fs *fs, uint64_t ino, uint64_t fh);
	int (*read)(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		    struct fs_read *r);
	int (*readlink)(struct fs *fs, uint64_t ino, const char **target);
	/* Extended attribute i of fs_xattr_names into buf (NUL-terminated):
	 * its length, or -ENODATA where ino has none. */
	int (*xattr)(struct fs *fs, uint64_t ino, size_t i, char *buf, size_t size);
	/* What ino is, for a log line (NULL: "?"). */
	void (*describe)(struct fs *fs, uint64_t ino, char *buf, size_t size);
	/* The remote object a read of ino found changed (-ESTALE): mark it so.
	 * NULL: nothing to mark. */
	void (*mark_stale)(struct fs *fs, uint64_t ino);
};

extern const struct fs_view fs_view_dir, fs_view_obj;			     /* fs_view_source.c */
extern const struct fs_view fs_view_shard, fs_view_member;		     /* fs_view_shard.c */
extern const struct fs_view fs_view_ctl;				     /* fs_view_ctl.c */
extern const struct fs_view fs_view_ifroot, fs_view_ifclass, fs_view_iffile; /* fs_if_view.c */
extern const struct fs_view fs_view_lidx;				     /* fs_loaderidx.c */

/* The view of inode ino (the root's depends on the layout), or NULL for a
 * number that is no inode. */
const struct fs_view *fs_view_of(const struct fs *fs, uint64_t ino);

/* Helpers shared by the views (fs_ops.c): attributes with the mount's
 * owner, and a read answered with [off, off + size) of stream o as one fd
 * extent (counts read_bytes). */
void fs_attr_base(const struct fs *fs, struct stat *st, uint64_t ino);
void fs_attr_dir(const struct fs *fs, struct stat *st, uint64_t ino, mode_t perm, nlink_t nlink,
		 int64_t mtime);
void fs_attr_file(const struct fs *fs, struct stat *st, uint64_t ino, mode_t mode, uint64_t size,
		  int64_t mtime);
int fs_read_fd_range(struct fs *fs, struct cachetier_obj *o, uint64_t off, size_t size,
		     struct fs_read *r);

/* The extended attributes regular members (and imagefolder files) have:
 * user.shardfs.shard (the shard's key), .offset (of the member's data in the
 * decoded tar stream), .size, .key (the WebDataset sample key). */
#define FS_NXATTR 4
extern const char *const fs_xattr_names[FS_NXATTR];

/* A member's operations, which the imagefolder view's files share
 * (fs_view_shard.c). */
int fs_member_getattr(struct fs *fs, uint64_t ino, struct stat *st);
int fs_member_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		   struct fs_read *r);
int fs_member_xattr(struct fs *fs, uint64_t ino, size_t i, char *buf, size_t size);
void fs_member_describe(struct fs *fs, uint64_t ino, char *buf, size_t size);
void fs_member_mark_stale(struct fs *fs, uint64_t ino);

#endif
