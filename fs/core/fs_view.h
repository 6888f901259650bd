/*
 * fs_view.h — what each kind of inode does: one table of operations per
 * kind (struct fs_view), and what each layout shows (struct
 * fs_layout_ops), so a new layout is one new file plus its row of
 * fs_layouts[] (fs_ops.c) and its --layout name (fs_opt.c).
 *
 * fs_ops.c decodes an inode number into its view (fs_view_of) and calls
 * the view's operation; a NULL operation answers what that kind cannot do
 * (no lookup: -ENOTDIR, no read: -EISDIR, no xattrs: -ENODATA, ...). The
 * kinds FS_K_LAYOUT + i (fs_i.h) are the mounted layout's own: their views
 * are its kinds[i]. The generic code (namespace, notifier, plans, control
 * files) asks the layout (fs_layout_of) and the views, never which layout
 * is mounted. The views:
 *   fs_view_source.c      the source's directories (the root of the shards
 *                         layout) and its objects as plain files (a shard's
 *                         raw .tar among them); the shards layout
 *   fs_view_shard.c       a shard's member directory and its members
 *   fs_view_ctl.c         .shardfs and its control files
 *   fs_if_view.c          --layout imagefolder: the root, class directories
 *                         and image files (the view: fs_if_*.c); the layout
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
	char *namebuf;	 /* the caller's, FS_NAME_BUF bytes: a list_entry whose names are
			  * decoded (a compact index) returns them here */
	mode_t *type;	 /* the caller's, 0 before each list_entry: one that knows the
			  * entry's file type (S_IFMT, what its getattr would say) puts it
			  * here, and a listing without attributes gives a file (not a
			  * directory) by name and type without asking its getattr */
	int attrs;	 /* the listing gives every entry's attributes (else only
			  * directories') */
	/* The caller's, st_ino 0 before each list_entry: one that read the
	 * entry's attributes in what it lists from (what its getattr would
	 * answer; list_check covers them as it covers the names) may fill it,
	 * st_ino set, and the listing asks no getattr of that entry. It need
	 * not for a file when attrs is 0. */
	struct stat *attr;
};

#define FS_NAME_BUF 256

/* A lookup's note for the getattr of what it found (fs_view's named_keep). */
struct fs_view_named {
	const void *v; /* the view's own (NULL: none) */
	uint32_t kind;
};

struct fs_view {
	const char *name;   /* for reading the code and the log, e.g. "member" */
	int volatile_attrs; /* attributes change all the time (control files):
			     * timeouts 0, and a read's failure is no data's */
	int list_type_only; /* a regular file whose directory's listing, when it
			     * gives no attributes, gives its name and type without
			     * asking its getattr (the name's view vouches for it) */
	/* Attributes (required). */
	int (*getattr)(struct fs *fs, uint64_t ino, struct stat *st);
	/* name[0..len) (NUL-terminated too) in directory parent: 0 with *ino
	 * (0: no such name, a negative entry), or a negative errno. The caller
	 * (fs_lookup_entry) asks *ino's getattr next, before it answers: a
	 * view may leave the checks of what it read for a name found to it. */
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
	/* After the entries were taken (NULL: nothing to check): 0, or an
	 * error that replaces the listing (a mapped index whose file changed
	 * while this listed from it: ESTALE, not names read from the change). */
	int (*list_check)(const struct fs_listing *l);
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
	/* A file that shows a member under an inode of its own (an imagefolder
	 * file): that member's inode, FS_K_MEMBER(shard, canonical entry), by
	 * which plans know its bytes (fs_plan.c). NULL: ino is its own (an
	 * object, a member) or no data of the dataset. Never blocks. */
	uint64_t (*member_of)(uint64_t ino);
	/* What a lookup that found file ino left on its thread for the
	 * getattr asked next (the imagefolder view's check of the name it
	 * found, against the member's): named_keep copies it into *k (k->v
	 * NULL: nothing left for ino), named_put gives it back with the name
	 * looked up, name[0..len), for a getattr of ino asked later on the
	 * same thread (a plan's publication asks its paths' attributes in
	 * their members' order, after all of its batch's lookups). NULL:
	 * a getattr checks nothing a lookup left. Never block. */
	void (*named_keep)(uint64_t ino, struct fs_view_named *k);
	void (*named_put)(uint64_t ino, const struct fs_view_named *k, const char *name,
			  size_t len);
};

/* A layout (--layout): what the mount shows from its root. One per layout,
 * in the file of its views; fs_layouts[] (fs_ops.c) has a row for each at
 * the position of its name in --layout's list (fs_opt.c: enum fs_layout).
 * A NULL hook: nothing to do. */
struct fs_layout_ops {
	const char *name;	    /* its --layout name; stats' "layout" */
	const struct fs_view *root; /* the root directory, inode 1 */
	/* The views of its own inode kinds FS_K_LAYOUT + i (NULL: unused). */
	const struct fs_view *kinds[FS_LAYOUT_KINDS];
	/* .shardfs offers samples.tsv, wids.json and dali/ (fs_loaderidx.c),
	 * whose paths are those of this layout's members */
	int loader_indexes;
	/* The inode by which the layout also shows member (shard, entry): the
	 * notifier invalidates it with the member's when the shard changes
	 * (fs_notify_shard). The notifier thread; never blocks. */
	uint64_t (*member_alias)(uint32_t shard, uint32_t entry);
	/* Shards were added, replaced or removed (a refresh, or a lookup that
	 * replaced a shard's object, fs_ns_replace): drop what was built from
	 * them and tell the kernel (fs_notify_*). The changing thread, holding
	 * refresh_lock but not ns_lock; may take the layout's own locks. */
	void (*shards_changed)(struct fs *fs);
	/* Once the namespace is built, before the mount answers (the
	 * daemon's mount): build what the first request would need (blocking),
	 * and say on stderr what the user should know of it. 0, or a
	 * negative errno that fails the mount, said on stderr. */
	int (*prepare)(struct fs *fs);
	/* At unmount, after every thread that uses the layout stopped: free
	 * what it built. */
	void (*free)(struct fs *fs);
};

extern const struct fs_view fs_view_dir, fs_view_obj;	   /* fs_view_source.c */
extern const struct fs_view fs_view_shard, fs_view_member; /* fs_view_shard.c */
extern const struct fs_view fs_view_ctl;		   /* fs_view_ctl.c */
extern const struct fs_view fs_view_lidx;		   /* fs_loaderidx.c */
extern const struct fs_layout_ops fs_layout_shards;	   /* fs_view_source.c */
extern const struct fs_layout_ops fs_layout_imagefolder;   /* fs_if_view.c */

/* The mounted layout (fs->cfg.layout's row of fs_layouts[]). */
const struct fs_layout_ops *fs_layout_of(const struct fs *fs);
/* The view of inode ino (the root's and FS_K_LAYOUT + i's are the
 * layout's), or NULL for a number that is no inode. */
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
