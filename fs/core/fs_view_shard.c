/*
 * fs_view_shard.c — a shard as a directory of its members (fs_view.h):
 * the member directory (FS_K_SHARD: the shard's root) and every member
 * (FS_K_MEMBER: files, directories, symlinks; a hard link is its target's
 * inode). Everything is answered from the shard's index, loaded on first
 * use (fs_shard.c) and immutable afterwards. The member operations are
 * also the imagefolder view's files (fs_if_view.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_view.h"

/* Extents answered with one fd extent; more (sparse members) are copied. */
#define FS_SPLICE_EXTENTS 8

/* What an operation on shard's members answers when the index does not
 * have what it read (an entry that does not decode, or not of the kind
 * asked for): ESTALE when the index's file changed meanwhile (a mapped
 * index cut or written after the operation's fs_shard_index checked it:
 * its reads got the guard's zeros, cachetier_guard.c), else err. Every such
 * answer asks, as an answer found in the index does, so that a member
 * that exists is never ENOENT because its index was cut mid-operation. */
static int index_miss(struct fs *fs, uint32_t shard, int err)
{
	int changed = fs_shard_index_unchanged(fs, shard);

	return changed < 0 ? changed : err;
}

/* The prologue of every operation on shard's members and member
 * directories: the shard in range, else none (the operation's own answer
 * for a member that is not there); with check, its object looked at first
 * (fs_obj_check: lookups and reads); its index, loaded on first use
 * (fs_shard_index; *stream too when stream is not NULL). 0 or a negative
 * errno. */
static int member_index(struct fs *fs, uint32_t shard, int none, int check, struct shardidx **ix,
			struct cachetier_obj **stream)
{
	int err;

	if (shard >= fs->nshards)
		return none;
	if (check) {
		err = fs_obj_check(fs, fs_shard(fs, shard)->obj);
		if (err < 0)
			return err;
	}
	return fs_shard_index(fs, shard, ix, stream);
}

/* member_index, then member ino's entry into *e when its type is type
 * (0: any), else index_miss with none, or with other when the entry is of
 * another type. */
static int member_entry(struct fs *fs, uint64_t ino, int none, int check, int type, int other,
			struct shardidx **ix, struct cachetier_obj **stream,
			struct shardidx_entry *e)
{
	uint32_t shard = fs_ino_a(ino);
	int err = member_index(fs, shard, none, check, ix, stream);

	if (err < 0)
		return err;
	if (shardidx_entry_get(*ix, fs_ino_b(ino), e) < 0)
		return index_miss(fs, shard, none);
	if (type && (int)e->type != type)
		return index_miss(fs, shard, other);
	return 0;
}

/* The attributes of shard's entry e, its canonical one (a hard link's
 * target): a member's getattr, and a listing's entries (members_entry). */
static void member_attr(const struct fs *fs, uint32_t shard, const struct shardidx_entry *e,
			struct stat *st)
{
	fs_attr_base(fs, st, fs_ino(FS_K_MEMBER, shard, e->canon));
	st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec = e->mtime;
	st->st_nlink = e->nlink;
	st->st_size = (off_t)e->size;
	switch (e->type) {
	case SHARDIDX_DIR:
		st->st_mode = S_IFDIR | (e->mode & 07777);
		st->st_size = 4096;
		break;
	case SHARDIDX_SYMLINK:
		st->st_mode = S_IFLNK | 0777;
		break;
	default:
		st->st_mode = S_IFREG | (e->mode & 07777);
		st->st_blocks = (blkcnt_t)((e->size + 511) / 512);
		break;
	}
}

/* ---- the member directory ------------------------------------------------ */

static int shard_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino);
	const struct fs_obj *o;
	int err;

	if (a >= fs->nshards || fs_ino_b(ino) != 0)
		return -ENOENT;
	o = fs_obj(fs, fs_shard(fs, a)->obj);
	if (!fs_obj_live(o))
		return -ESTALE;
	err = fs_obj_learn(fs, fs_shard(fs, a)->obj);
	if (err < 0)
		return err;
	/* nlink 1: "unknown", so tools never infer the subdirectory count
	 * and we need not read the shard to answer. Its members are the
	 * shard's bytes: whoever cannot read the shard's file cannot search
	 * this directory either (a local shard's read bits, each r as r-x;
	 * a store's objects are readable: 0555) */
	fs_attr_dir(fs, st, ino,
		    backend_is_local(fs->be) ? (o->info.mode & 0444) | (o->info.mode & 0444) >> 2
					     : 0555,
		    1, o->info.mtime);
	return 0;
}

/* name in the member directory dir (SHARDIDX_NONE: the shard's root). */
static int lookup_in(struct fs *fs, uint32_t shard, uint32_t dir, const char *name, size_t len,
		     uint64_t *ino)
{
	struct shardidx *ix;
	int64_t idx;
	int err;

	err = member_index(fs, shard, -ENOENT, 1, &ix, NULL);
	if (err < 0)
		return err;
	idx = shardidx_lookup(ix, dir, name, len);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_MEMBER, shard, (uint32_t)idx);
	/* The answer came from the index: ESTALE, not a name found or missed
	 * in a file that changed while this looked. A name found is checked by
	 * its entry's getattr, which the lookup asks next, on this thread,
	 * before it answers (fs_lookup_entry: fs_member_getattr checks after
	 * its own read of the same index, never skipped), so one check follows
	 * every read of the request; a name missed, here. */
	return idx < 0 ? fs_shard_index_unchanged(fs, shard) : 0;
}

static int shard_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len, uint64_t *ino)
{
	return lookup_in(fs, fs_ino_a(parent), SHARDIDX_NONE, name, len, ino);
}

static int shard_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	struct shardidx *ix;
	int err;

	(void)ino;
	err = member_index(fs, l->a, -ENOENT, 0, &ix, NULL);
	if (err < 0)
		return err;
	l->p = ix;
	shardidx_root(ix, &l->first, &l->n);
	l->parent = fs_ino(FS_K_DIR, fs_obj(fs, fs_shard(fs, l->a)->obj)->dir, 0);
	return 0;
}

_Static_assert(sizeof(((struct shardidx_entry *)0)->name) <= FS_NAME_BUF,
	       "a member's name fits the listing's namebuf");

/* Entry i of a member directory: the children [first, first + n) of the
 * index. Its type and, when the listing gives them (every directory's,
 * every file's with l->attrs), its attributes too, from the entry just
 * decoded: what fs_member_getattr would answer from the same index, whose
 * file the listing checks at its start (list_open: fs_shard_index) and at
 * its end (members_check) as that getattr would before and after its own
 * read, so a change during the listing is ESTALE for the whole request,
 * never a mix. A hard link gives neither (its inode is its canonical
 * entry's, whose getattr answers). So a listing without attributes (find)
 * asks no getattr of its files, and one with them (ls -lR) none at all:
 * each entry is decoded once and its index's file checked twice a request,
 * not twice more an entry. */
static const char *members_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	struct shardidx_entry e;

	if (shardidx_entry_get(l->p, l->first + i, &e) < 0)
		return NULL;
	*ino = fs_ino(FS_K_MEMBER, l->a, e.canon);
	if (e.canon == l->first + i) {
		*l->type = e.type == SHARDIDX_DIR	? S_IFDIR
			   : e.type == SHARDIDX_SYMLINK ? S_IFLNK
							: S_IFREG;
		if (l->attr && (l->attrs || e.type == SHARDIDX_DIR))
			member_attr(l->fs, l->a, &e, l->attr);
	}
	memcpy(l->namebuf, e.name, strlen(e.name) + 1);
	return l->namebuf;
}

/* The names and inodes listed came from the index: ESTALE, not a listing
 * read from its file while it changed (as lookup_in). */
static int members_check(const struct fs_listing *l)
{
	return fs_shard_index_unchanged(l->fs, l->a);
}

static void shard_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino);

	snprintf(buf, size, "%s", a < fs->nshards ? fs_obj(fs, fs_shard(fs, a)->obj)->key : "?");
}

const struct fs_view fs_view_shard = {
    .name = "shard",
    .getattr = shard_getattr,
    .lookup = shard_lookup,
    .list_open = shard_list_open,
    .list_entry = members_entry,
    .list_check = members_check,
    .describe = shard_describe,
};

/* ---- members ----------------------------------------------------------------- */

int fs_member_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t shard = fs_ino_a(ino), idx = fs_ino_b(ino);
	struct shardidx *ix;
	struct shardidx_entry e;
	int err;

	err = member_entry(fs, ino, -ENOENT, 0, 0, 0, &ix, NULL, &e);
	if (err < 0)
		return err;
	if (e.canon != idx && shardidx_entry_get(ix, e.canon, &e) < 0)
		return index_miss(fs, shard, -ENOENT);
	member_attr(fs, shard, &e, st);
	return fs_shard_index_unchanged(fs, shard); /* as lookup_in */
}

static int member_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			 uint64_t *ino)
{
	return lookup_in(fs, fs_ino_a(parent), fs_ino_b(parent), name, len, ino);
}

/* Opening and listing a member directory read its directory row, not its
 * entry (shardidx_dir_get: nothing decoded). */
static int member_opendir(struct fs *fs, uint64_t ino)
{
	uint32_t shard = fs_ino_a(ino), first, n, parent;
	struct shardidx *ix;
	int err;

	err = member_index(fs, shard, -ENOENT, 0, &ix, NULL);
	if (err < 0)
		return err;
	err = shardidx_dir_get(ix, fs_ino_b(ino), &first, &n, &parent);
	if (err < 0)
		return index_miss(fs, shard, err == -ENOTDIR ? -ENOTDIR : -ENOENT);
	return fs_shard_index_unchanged(fs, shard); /* as lookup_in */
}

static int member_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	struct shardidx *ix;
	uint32_t parent;
	int err;

	err = member_index(fs, l->a, -ENOENT, 0, &ix, NULL);
	if (err < 0)
		return err;
	if (shardidx_dir_get(ix, fs_ino_b(ino), &l->first, &l->n, &parent) < 0)
		return index_miss(fs, l->a, -ENOTDIR);
	l->p = ix;
	l->parent = parent == SHARDIDX_NONE ? fs_ino(FS_K_SHARD, l->a, 0)
					    : fs_ino(FS_K_MEMBER, l->a, parent);
	return 0;
}

/* Sparse members and reads spanning many extents: copy into memory. */
static int read_copy(struct fs *fs, const struct shardidx *ix, struct cachetier_obj *stream,
		     uint32_t idx, uint64_t off, size_t size, struct fs_read *r)
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
				ssize_t got = fetch_pread(fs->fetch, r->reader, stream, dst,
							  ext[i].len, ext[i].stream_off);

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

/* The first read of member idx (entry e) of a sidecar's index: fetch the
 * tar header before its data with the data (the bytes are adjacent, one
 * read of the stream; a read from further in fetches the header alone)
 * and check it describes e (shardidx_check_header). A header that does
 * not rejects the index (fs_shard_reject): -ESTALE, never the bytes the
 * index points to. 1: checked, read on; 0: checked and answered in *r. */
static int read_checked(struct fs *fs, uint32_t shard, uint32_t idx, const struct shardidx_entry *e,
			struct cachetier_obj *stream, uint64_t off, size_t size, struct fs_read *r)
{
	/* whole when the read starts at 0 and the data is all there */
	int whole = off == 0 && !(e->flags & SHARDIDX_F_TRUNCATED);
	size_t want = 512 + (whole ? size : 0);
	char *buf;
	ssize_t n;
	int err;

	if (e->data_off < 512 || (e->flags & SHARDIDX_F_SPARSE))
		return fs_shard_reject(fs, shard, e, "is not there");
	buf = malloc(want);
	if (!buf)
		return -ENOMEM;
	n = fetch_pread(fs->fetch, r->reader, stream, buf, want, e->data_off - 512);
	if (n != (ssize_t)want) {
		free(buf);
		if (n < 0)
			return (int)n;
		/* the stream ends before the bytes the index says it has */
		return fs_shard_reject(fs, shard, e, "is past the end of the shard");
	}
	err = shardidx_check_header(buf, e);
	if (err < 0) {
		free(buf);
		return fs_shard_reject(fs, shard, e,
				       err == -EBADMSG ? "is no tar header"
						       : "describes another member");
	}
	fs_shard_mark_checked(fs, shard, idx);
	if (!whole) {
		free(buf);
		return 1;
	}
	memmove(buf, buf + 512, size);
	fs->c.read_bytes += size;
	r->buf = buf;
	r->len = size;
	return 0;
}

int fs_member_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		   struct fs_read *r)
{
	uint32_t shard = fs_ino_a(ino), idx = fs_ino_b(ino);
	struct shardidx *ix;
	struct cachetier_obj *stream;
	struct shardidx_entry e;
	struct shardidx_extent ext[FS_SPLICE_EXTENTS];
	int n, err;

	(void)fh;
	err = member_entry(fs, ino, -ENOENT, 1, SHARDIDX_REG, -EISDIR, &ix, &stream, &e);
	if (err < 0)
		return err;
	size = off >= e.size ? 0 : size > e.size - off ? (size_t)(e.size - off) : size;
	/* an empty member, or a read at its end, checked too: the member is
	 * there, as the sidecar says, or ESTALE */
	if (fs_shard_unchecked(fs, shard, idx)) {
		err = read_checked(fs, shard, idx, &e, stream, off, size, r);
		if (err <= 0)
			return err;
	}
	if (size == 0)
		return 0;
	fs_shard_touch(fs, r->reader, shard);
	n = shardidx_map(ix, idx, off, size, ext, FS_SPLICE_EXTENTS);
	if (n < 0) /* -EBADMSG: its file rewritten since load, as entry_get */
		return n == -EBADMSG ? index_miss(fs, shard, -EIO) : n;
	/* where the bytes are came from the index: a change of its file while
	 * this read looked is caught before a byte is answered */
	err = fs_shard_index_unchanged(fs, shard);
	if (err < 0)
		return err;
	if (n == 1 && !ext[0].hole && ext[0].len == size)
		return fs_read_fd_range(fs, stream, ext[0].stream_off, size, r);
	err = read_copy(fs, ix, stream, idx, off, size, r);
	return err == -EBADMSG ? index_miss(fs, shard, -EIO) : err;
}

/* A symlink target handed to the FUSE reply (one per thread: the reply is
 * made on the thread that asked, before it asks again). A target of 4,096
 * bytes or more (PATH_MAX with its NUL; a tar's PAX linkpath can be any
 * length, no symlink(2) makes one) is ENAMETOOLONG: the kernel refuses a
 * reply longer than a 4 KiB page less its NUL, and its reader would get
 * EIO. Its lstat size stays the target's true length. */
static __thread char link_copy[4096];

static int member_readlink(struct fs *fs, uint64_t ino, const char **target)
{
	struct shardidx *ix;
	struct shardidx_entry e;
	size_t tl;
	int err;

	err = member_entry(fs, ino, -EINVAL, 0, SHARDIDX_SYMLINK, -EINVAL, &ix, NULL, &e);
	if (err < 0)
		return err;
	/* copied out of the mapped index before it is checked, so the reply
	 * carries the bytes the check covered */
	tl = strnlen(e.link, (size_t)e.size); /* the file may change under it: never past size */
	if (tl >= sizeof(link_copy)) {
		err = fs_shard_index_unchanged(fs, fs_ino_a(ino));
		return err < 0 ? err : -ENAMETOOLONG;
	}
	memcpy(link_copy, e.link, tl);
	link_copy[tl] = 0;
	*target = link_copy;
	return fs_shard_index_unchanged(fs, fs_ino_a(ino)); /* as lookup_in */
}

/* Where a sample lives (fs_xattr_names): the shard's key, the member's data
 * offset in the (decoded) tar stream, its size, its WebDataset key (the base
 * name up to its first '.'). Regular members only. */
int fs_member_xattr(struct fs *fs, uint64_t ino, size_t i, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino);
	struct shardidx *ix;
	struct shardidx_entry e;
	const char *dot;
	int n, err;

	err = member_entry(fs, ino, -ENODATA, 0, SHARDIDX_REG, -ENODATA, &ix, NULL, &e);
	if (err < 0)
		return err;
	if (e.flags & SHARDIDX_F_SPARSE)
		return index_miss(fs, a, -ENODATA);
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
	err = fs_shard_index_unchanged(fs, a); /* the values came from the index */
	if (err < 0)
		return err;
	return n < 0 || (size_t)n >= size ? -ERANGE : n;
}

void fs_member_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino);
	struct shardidx *ix;
	struct shardidx_entry e;

	if (a >= fs->nshards) {
		snprintf(buf, size, "?");
		return;
	}
	ix = atomic_load(&fs_shard(fs, a)->ix);
	if (ix && shardidx_entry_get(ix, fs_ino_b(ino), &e) == 0)
		snprintf(buf, size, "%s member %s", fs_obj(fs, fs_shard(fs, a)->obj)->key, e.name);
	else
		snprintf(buf, size, "%s", fs_obj(fs, fs_shard(fs, a)->obj)->key);
}

void fs_member_mark_stale(struct fs *fs, uint64_t ino)
{
	if (fs_ino_a(ino) < fs->nshards)
		fs_obj_mark_stale(fs, fs_shard(fs, fs_ino_a(ino))->obj, FS_OBJ_STALE);
}

const struct fs_view fs_view_member = {
    .name = "member",
    .getattr = fs_member_getattr,
    .lookup = member_lookup,
    .opendir = member_opendir,
    .list_open = member_list_open,
    .list_entry = members_entry,
    .list_check = members_check,
    .read = fs_member_read,
    .readlink = member_readlink,
    .xattr = fs_member_xattr,
    .describe = fs_member_describe,
    .mark_stale = fs_member_mark_stale,
};
