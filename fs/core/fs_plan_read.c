/*
 * fs_plan_read.c — a plan file read and its lines resolved into a plan's
 * extents (fs_plan__read, for fs_plan.c's fs_plan_publish): each path
 * looked up as a lookup would (every layout; a path of a member indexes
 * its shard) to the bytes behind it, an extent of one object as stored.
 *
 * A plan names few directories many times (an ImageFolder's classes, a
 * shard's members), so a directory part is walked about once a publish
 * (struct plan_dir). Lines are resolved a batch at a time (PLAN_BATCH):
 * the names looked up in the file's order, their attributes and extents
 * in inode order, so that the members of a shard have their index
 * entries decoded walking forward; the extents, the missing and failed
 * counts and the log's line numbers come out in the file's order, the same
 * as resolving one line after another (a test's fs_plan__batch 1).
 * Memory: a piece of the file, a batch of lines and the extents found,
 * never the whole file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "fs_ctl.h"
#include "fs_plan_i.h"

/* ---- resolving paths ----------------------------------------------------- */

/* The bytes behind file ino (a lookup's answer, attributes st) as x: an
 * object's, or a member's (also under the layout's other inode of it, the
 * view's member_of). */
static int extent_of(struct fs *fs, uint64_t ino, const struct stat *st, struct fs_plan_extent *x)
{
	const struct fs_view *v = fs_view_of(fs, ino);
	enum fs_kind k;
	uint32_t shard, idx;
	struct shardidx *ix;
	struct cachetier_obj *stream;
	struct shardidx_entry se;
	struct shardidx_extent ext[16];
	const struct fs_shard *sh;
	uint64_t lo = UINT64_MAX, hi = 0, pos = 0;
	int n = 0, err, pieces = 0, holes = 0;

	memset(x, 0, sizeof(*x));
	if (!S_ISREG(st->st_mode))
		return -EISDIR;
	if (v && v->member_of)
		ino = v->member_of(ino);
	k = fs_ino_kind(ino);
	shard = fs_ino_a(ino);
	idx = fs_ino_b(ino);
	if (k == FS_K_OBJ) {
		x->key = ino;
		x->obj = shard;
		x->len = fs_obj(fs, shard)->info.size;
		return 0;
	}
	if (k != FS_K_MEMBER)
		return -EINVAL; /* control files and loader indexes */
	x->key = ino;
	err = fs_shard_index(fs, shard, &ix, &stream);
	if (err == 0 && shardidx_entry_get(ix, idx, &se) < 0)
		err = -ENOENT;
	if (err < 0)
		return err;
	sh = fs_shard(fs, shard);
	x->obj = sh->obj;
	while (pos < se.size && (n = shardidx_map(ix, idx, pos, se.size - pos, ext, 16)) > 0) {
		for (int i = 0; i < n; i++) {
			if (ext[i].hole) {
				holes++;
			} else {
				pieces++;
				lo = ext[i].stream_off < lo ? ext[i].stream_off : lo;
				if (ext[i].stream_off + ext[i].len > hi)
					hi = ext[i].stream_off + ext[i].len;
			}
			pos = ext[i].logical + ext[i].len;
		}
	}
	if (n < 0)
		return n; /* past the end of a truncated shard */
	if (lo == UINT64_MAX)
		lo = hi = se.data_off; /* empty, or nothing but holes */
	if (pieces > 1 || holes)
		x->flags |= FS_PLAN_SPARSE;
	if (sh->codec != CACHETIER_RAW) {
		/* the decoded stream is made from the raw object's start:
		 * fetching the member means fetching the whole object */
		x->flags |= FS_PLAN_DECODED;
		x->stream_off = lo;
		x->len = fs_obj(fs, sh->obj)->info.size;
		return 0;
	}
	/* a member of a sidecar's index that no read checked yet is read with
	 * its tar header, the 512 bytes just before its data (fs_member_read
	 * checks it): the fetcher fetches them too, or that read would miss */
	if (lo == se.data_off && lo >= 512 && !(se.flags & SHARDIDX_F_SPARSE) &&
	    fs_shard_unchecked(fs, shard, idx))
		x->flags |= FS_PLAN_HEADER;
	x->off = lo;
	x->len = hi - lo;
	return 0;
}

/* Walk path[0..len) from directory *ino, a lookup a component ('.' and
 * empty components skipped): *ino and *e the last one's. */
static int walk(struct fs *fs, const char *path, size_t len, uint64_t *ino, struct fs_entry *e)
{
	char comp[NAME_MAX + 1];
	size_t i = 0;

	for (size_t clen; (clen = fs_path_comp(path, len, &i)) > 0; i += clen + 1) {
		size_t j = i + clen;
		int err;

		if (j - i > NAME_MAX || (j - i == 2 && path[i] == '.' && path[i + 1] == '.'))
			return -ENOENT;
		memcpy(comp, path + i, j - i);
		comp[j - i] = '\0';
		err = fs_lookup_entry(fs, *ino, comp, e);
		if (err < 0)
			return err;
		if (!e->ino)
			return -ENOENT;
		*ino = e->ino;
	}
	return 0;
}

/* A slot of a publish's directories (plan_dir_slot): the text of the
 * directory part of a path (up to its last '/') and the inode it walks to.
 * A plan's paths name few directories many times (an ImageFolder's
 * classes, a shard's members: a class's lookup searches the class names),
 * so each is walked about once a publish, not once a path. A publish is
 * short and a directory's inode is computed from what it is, so a slot
 * stays true for it (a directory a refresh removes meanwhile: its files'
 * lookups fail, as a walk of the path would). */
#define PLAN_DIRS     64
#define PLAN_DIR_NAME 256
struct plan_dir {
	uint64_t ino; /* 0: empty */
	size_t len;
	char name[PLAN_DIR_NAME];
};

static struct plan_dir *plan_dir_slot(struct plan_dir *dirs, const char *dir, size_t len)
{
	return &dirs[disk_fnv64(dir, len) % PLAN_DIRS];
}

/* Walk the directory part path[0..dl) of a path from the root into *ino
 * (1 at the call), from its slot in dirs (the publish's, or NULL) when it
 * was walked before, else walked and kept there. */
static int walk_dir(struct fs *fs, const char *path, size_t dl, uint64_t *ino,
		    struct plan_dir *dirs)
{
	struct fs_entry e;
	struct plan_dir *d;
	int err;

	memset(&e, 0, sizeof(e));
	if (!dirs || dl == 0 || dl >= PLAN_DIR_NAME)
		return walk(fs, path, dl, ino, &e);
	d = plan_dir_slot(dirs, path, dl);
	if (d->ino && d->len == dl && memcmp(d->name, path, dl) == 0) {
		*ino = d->ino;
		return 0;
	}
	err = walk(fs, path, dl, ino, &e);
	if (err < 0)
		return err;
	d->ino = *ino;
	d->len = dl;
	memcpy(d->name, path, dl);
	return 0;
}

/* Is name[0..len) a last component that is a name (not '.', '..' or
 * empty)? */
static int is_name(const char *name, size_t len)
{
	return len > 0 && !(len == 1 && name[0] == '.') &&
	       !(len == 2 && name[0] == '.' && name[1] == '.');
}

/* Mount-relative path[0..len) as a lookup of each component would find it
 * ('.' and empty components skipped); its directory part from dirs (the
 * publish's, or NULL) when it was walked before. */
static int resolve(struct fs *fs, const char *path, size_t len, struct fs_plan_extent *x,
		   struct plan_dir *dirs)
{
	/* path is never NULL; said for GCC 12's -Wnonnull under
	 * -fsanitize=address,undefined -O2, which found a NULL there */
	const char *sl = path && len ? memrchr(path, '/', len) : NULL;
	size_t dl = sl ? (size_t)(sl - path) : 0, ll = len - dl - 1;
	uint64_t ino = 1;
	struct fs_entry e;
	int err;

	memset(&e, 0, sizeof(e));
	e.attr.st_mode = S_IFDIR;
	if (memchr(path, '\0', len))
		return -ENOENT;
	/* a directory part, then a last component that is a name: the
	 * directory's inode from its slot, or walked and kept there */
	if (dirs && sl && dl > 0 && dl < PLAN_DIR_NAME && is_name(sl + 1, ll)) {
		err = walk_dir(fs, path, dl, &ino, dirs);
		if (err < 0)
			return err;
		path += dl + 1;
		len = ll;
	}
	err = walk(fs, path, len, &ino, &e);
	if (err < 0)
		return err;
	return extent_of(fs, ino, &e.attr, x);
}

/* resolve's first half, for a path whose last component is a name: its
 * directory part walked (from dirs) and the name looked up without its
 * attributes, 1 with *parent, *ino and *at (where the name starts in
 * path) set (fs_lookup_attr and extent_of
 * are the second half, which plan_flush calls later, in inode
 * order); a path without such a name resolved whole by resolve (0
 * with x set); or the error resolve would answer. */
static int resolve_name(struct fs *fs, const char *path, size_t len, struct plan_dir *dirs,
			uint64_t *parent, uint64_t *ino, size_t *at, struct fs_plan_extent *x)
{
	const char *sl = path && len ? memrchr(path, '/', len) : NULL;
	const char *name = sl ? sl + 1 : path;
	size_t nl = len - (size_t)(name - path);
	char comp[NAME_MAX + 1];
	uint64_t dir = 1;
	int err;

	if (!len || memchr(path, '\0', len) || !is_name(name, nl))
		return resolve(fs, path, len, x, dirs);
	if (sl && (err = walk_dir(fs, path, (size_t)(sl - path), &dir, dirs)) < 0)
		return err;
	if (nl > NAME_MAX)
		return -ENOENT; /* after the directories' errors, as walk */
	memcpy(comp, name, nl);
	comp[nl] = '\0';
	err = fs_lookup_ino(fs, dir, comp, ino);
	if (err < 0)
		return err;
	if (!*ino)
		return -ENOENT;
	*parent = dir;
	*at = (size_t)(name - path);
	return 1;
}

/* A plan file is read in pieces of this size: the memory of a publish is
 * this, a batch of lines (below) and the extents found, whatever the
 * file. */
#define PLAN_CHUNK (64u << 10)
/* Lines resolved at once at most (plan_flush), and the bytes of their
 * text: their names are looked up in the file's order, then their
 * attributes and extents asked in inode order (a shard's members by their
 * index entries: its index's cursor walks forward, an entry or two
 * decoded a path, not half a block of them as in a shuffled order), then
 * the extents kept in the file's order. Some 100 bytes a line and its
 * text: at most some 2.6 MiB. */
#define PLAN_BATCH	(16u << 10)
#define PLAN_BATCH_TEXT (1u << 20)

_Atomic uint32_t fs_plan__batch = PLAN_BATCH;

/* A line of the batch (plan_flush). */
struct plan_pending {
	uint64_t lineno;
	uint64_t parent, ino;	    /* the last name's directory and inode, once looked up */
	struct fs_plan_extent x;    /* err 0: its extent */
	uint32_t text, len;	    /* its text: r->text[text, text + len) */
	uint32_t skip;		    /* the mount point's prefix tried first (mount_prefix) */
	uint32_t name;		    /* where its last name starts in its text (looked up) */
	struct fs_view_named named; /* what the lookup left for the getattr (deferred) */
	int err;
	unsigned char overlong;
};

/* A named line's place in the batch by its inode (plan_flush's order). */
struct plan_order {
	uint64_t key;
	uint32_t i;
};

/* Reading a plan file into a plan, a piece at a time. */
struct plan_reader {
	struct fs *fs;
	struct fs_plan *p;
	size_t cap;		       /* of p->ext */
	char line[PATH_MAX + 1];       /* the line so far */
	size_t ll;		       /* its length */
	int overlong;		       /* longer than PATH_MAX: named nothing */
	uint64_t lineno;	       /* of the line being read, from 1 */
	struct fs_plan_skipped *sk;    /* the lines left out */
	const struct fs_op_stop *stop; /* or NULL */
	uid_t uid;		       /* the sender's: the file opened with its rights */
	gid_t gid;
	struct plan_dir dirs[PLAN_DIRS]; /* the directories of its paths (resolve) */
	uint32_t batch;			 /* lines a batch holds at most (fs_plan__batch) */
	struct plan_pending *pend;	 /* the batch: lines read, not resolved yet */
	struct plan_order *order;	 /* of the named ones, by inode (and as much to sort) */
	uint32_t npend, pcap;
	char *text; /* their text */
	size_t ntext, tcap;
};

/* The length of the mount point (as resolved at mount) that the line
 * path[0..len) begins with, followed by '/': an absolute path into the
 * mount, as a reader opens it ('shardfs prefetch' and the Python module
 * take those too); 0 for any other line, and under a mount at '/'. */
static size_t mount_prefix(const struct fs *fs, const char *path, size_t len)
{
	const char *mp = fs->cfg.mountpoint;
	size_t ml = mp ? strlen(mp) : 0;

	if (ml < 2 || len <= ml + 1 || memcmp(path, mp, ml) != 0 || path[ml] != '/')
		return 0;
	return ml + 1;
}

/* A lookup's error that says the path could not be looked up, not that
 * it names nothing: its shard could not be read or indexed (a store down,
 * a cache directory removed, a shard too large to decode). Such a path is
 * skipped as one that names nothing is, but counted apart (.shardfs/plans'
 * failed, not missing) and the log says which. */
static int lookup_failed(int err)
{
	return err == -EIO || err == -EFBIG || err == -EPROTO || err == -ESTALE ||
	       err == -ETIMEDOUT || err == -EBADMSG || err == -ENOMEM;
}

/* A resolved line of the batch, in the file's order: its extent the
 * plan's next, or the line counted missing (its number kept for the log,
 * never its text) or failed. A line that begins with the mount point is
 * the path below it (else, if that names nothing, the line as it is: a
 * path of the source that repeats it, resolved here). */
static int plan_account(struct plan_reader *r, struct plan_pending *q)
{
	struct fs_plan *p = r->p;
	const char *t = q->overlong ? NULL : r->text + q->text;
	size_t skip = q->skip;
	int err = q->err;

	if (t && skip && err < 0) {
		skip = 0;
		err = resolve(r->fs, t, q->len, &q->x, r->dirs);
	}
	if (q->overlong || err < 0) {
		if (!q->overlong && lookup_failed(err)) {
			if (!r->sk->failed++)
				r->sk->failed_err = -err;
			p->failed++;
			return 0;
		}
		if (r->sk->not_found++ < PLAN_LOG_LINES)
			r->sk->lines[r->sk->not_found - 1] = q->lineno;
		p->missing++;
		return 0;
	}
	if (p->n == UINT32_MAX - 1)
		return -EFBIG;
	if (p->n == r->cap) {
		size_t nc = r->cap ? r->cap * 2 : 256;
		struct fs_plan_extent *ne = realloc(p->ext, nc * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		p->ext = ne;
		r->cap = nc;
	}
	p->ext[p->n++] = q->x;
	p->bytes += q->x.len;
	p->fnv = disk_fnv64_update(p->fnv, t + skip, q->len - skip);
	p->fnv = disk_fnv64_update(p->fnv, "\n", 1);
	return 0;
}

/* Sort o[0..n) by key, ties in the order they come (the file's): a radix
 * sort a byte at a time from the lowest, a byte all the keys share
 * skipped (an inode's kind, a small shard number's high bytes), through
 * tmp (n more); some 5 passes of two loads and a store a line. */
static void order_sort(struct plan_order *o, struct plan_order *tmp, uint32_t n)
{
	struct plan_order *from = o, *to = tmp;

	if (n < 2)
		return;
	for (unsigned sh = 0; sh < 64; sh += 8) {
		uint32_t at[256] = {0}, sum = 0;

		for (uint32_t i = 0; i < n; i++)
			at[(from[i].key >> sh) & 255]++;
		if (at[(from[0].key >> sh) & 255] == n)
			continue;
		for (unsigned d = 0; d < 256; d++) {
			uint32_t c = at[d];

			at[d] = sum;
			sum += c;
		}
		for (uint32_t i = 0; i < n; i++)
			to[at[(from[i].key >> sh) & 255]++] = from[i];
		to = from;
		from = from == o ? tmp : o;
	}
	if (from != o)
		memcpy(o, from, n * sizeof(*o));
}

/* The sender gave up waiting (asked every 1024 lines resolved)? */
static int plan_stopped(const struct plan_reader *r, uint32_t k)
{
	return (k & 1023) == 1023 && r->stop && r->stop->asked(r->stop->arg);
}

/* resolve's last step for a line whose name was looked up (resolve_name):
 * its attributes and its extent. */
static int plan_attr(struct plan_reader *r, struct plan_pending *q)
{
	struct fs_entry e;
	int err = fs_lookup_attr(r->fs, q->parent, q->ino, &e);

	if (err == 0 && !e.ino)
		err = -ENOENT;
	return err < 0 ? err : extent_of(r->fs, e.ino, &e.attr, &q->x);
}

/* Resolve the batch's lines (PLAN_BATCH) and account them in the file's
 * order: 0, -EINTR (stop), or plan_account's error. */
static int plan_flush(struct plan_reader *r)
{
	uint32_t no = 0;
	int err = 0;

	/* the names, in the file's order (each directory walked once: dirs) */
	for (uint32_t k = 0; k < r->npend && err == 0; k++) {
		struct plan_pending *q = &r->pend[k];
		const struct fs_view *v;
		const char *t;
		size_t at;

		if (plan_stopped(r, k)) {
			err = -EINTR;
			break;
		}
		if (q->overlong)
			continue;
		t = r->text + q->text;
		q->skip = (uint32_t)mount_prefix(r->fs, t, q->len);
		q->err = resolve_name(r->fs, t + q->skip, q->len - q->skip, r->dirs, &q->parent,
				      &q->ino, &at, &q->x);
		if (q->err != 1)
			continue;
		q->name = q->skip + (uint32_t)at;
		/* a layout's other inode of a member (its view's member_of):
		 * its name came from the layout's names, no index was read, so
		 * its attributes wait for the batch's order (below), with
		 * what the lookup left for them (named_keep); any
		 * other's now, as a lookup asks them (a member's lookup left
		 * this thread's cursor of the index on its entry) */
		v = fs_view_of(r->fs, q->ino);
		if (v && v->member_of) {
			r->order[no++] = (struct plan_order){v->member_of(q->ino), k};
			if (v->named_keep)
				v->named_keep(q->ino, &q->named);
		} else {
			q->err = plan_attr(r, q);
		}
	}
	/* the others' attributes and extents in the order of their members
	 * (the same calls as resolve's last step, in another order: a
	 * lookup's answer is the same whichever path was looked up before) */
	if (err == 0)
		order_sort(r->order, r->order + r->pcap, no);
	for (uint32_t o = 0; o < no && err == 0; o++) {
		struct plan_pending *q = &r->pend[r->order[o].i];
		const struct fs_view *v = fs_view_of(r->fs, q->ino);

		if (plan_stopped(r, o)) {
			err = -EINTR;
			break;
		}
		if (v && v->named_put)
			v->named_put(q->ino, &q->named, r->text + q->text + q->name,
				     q->len - q->name);
		q->err = plan_attr(r, q);
	}
	for (uint32_t k = 0; k < r->npend && err == 0; k++)
		err = plan_account(r, &r->pend[k]);
	r->npend = 0;
	r->ntext = 0;
	return err;
}

/* The line just read (r->line) into the batch; the batch resolved first
 * when it is full. */
static int plan_line(struct plan_reader *r)
{
	struct plan_pending *q;
	int err;

	/* a line is a path as it is: a '\r' at its end is part of it (a
	 * member's name may end in one); an empty line is no path */
	if (r->ll == 0 && !r->overlong)
		return 0;
	if (r->npend && (r->npend >= r->batch || r->ntext + r->ll > PLAN_BATCH_TEXT) &&
	    (err = plan_flush(r)) < 0)
		return err;
	if (r->npend == r->pcap) {
		uint32_t nc = r->pcap ? r->pcap * 2 : 64;
		struct plan_pending *np;
		struct plan_order *no;

		nc = nc < r->batch ? nc : r->batch;
		np = realloc(r->pend, nc * sizeof(*np));
		if (np)
			r->pend = np;
		no = np ? realloc(r->order, 2 * (size_t)nc * sizeof(*no)) : NULL;
		if (no)
			r->order = no;
		if (!np || !no)
			return -ENOMEM;
		r->pcap = nc;
	}
	if (r->ntext + r->ll > r->tcap) {
		size_t nc = r->tcap ? r->tcap : 4096;
		char *nt;

		while (nc < r->ntext + r->ll)
			nc *= 2;
		nt = realloc(r->text, nc);
		if (!nt)
			return -ENOMEM;
		r->text = nt;
		r->tcap = nc;
	}
	q = &r->pend[r->npend++];
	memset(q, 0, sizeof(*q));
	q->lineno = r->lineno;
	q->overlong = (unsigned char)r->overlong;
	if (!r->overlong) {
		q->text = (uint32_t)r->ntext;
		q->len = (uint32_t)r->ll;
		memcpy(r->text + r->ntext, r->line, r->ll);
		r->ntext += r->ll;
	}
	return 0;
}

/* Read plan file path a piece at a time (PLAN_CHUNK) and resolve its
 * lines into r->p's extents (fs_plan__read). */
static int plan_read(struct plan_reader *r, const char *path)
{
	struct stat st;
	uint64_t total = 0;
	char *buf = NULL;
	int fd, err = 0;

	fd = fs_ctl_open_as(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, r->uid, r->gid);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		goto out;
	}
	if ((uint64_t)st.st_size > FS_PLAN_FILE_MAX) {
		err = -EFBIG;
		goto out;
	}
	/* the shards the lines name indexed several at once first: the
	 * lines below then find their indexes loaded */
	err = fs_plan__index_ahead(r->fs, fd, r->stop);
	if (err < 0)
		goto out;
	buf = malloc(PLAN_CHUNK);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	r->p->fnv = DISK_FNV64_INIT;
	r->lineno = 1;
	r->batch = atomic_load_explicit(&fs_plan__batch, memory_order_relaxed);
	r->batch = r->batch ? r->batch : 1;
	while (err == 0) {
		ssize_t n = disk_read_some(fd, buf, PLAN_CHUNK);
		size_t i = 0;

		if (n <= 0) {
			err = (int)n; /* 0: the end of the file */
			break;
		}
		if (r->stop && r->stop->asked(r->stop->arg)) {
			err = -EINTR; /* the sender gave up waiting */
			break;
		}
		total += (uint64_t)n;
		if (total > FS_PLAN_FILE_MAX) {
			err = -EFBIG; /* it grew while read */
			break;
		}
		while (i < (size_t)n && err == 0) {
			const char *nl = memchr(buf + i, '\n', (size_t)n - i);
			size_t j = nl ? (size_t)(nl - buf) : (size_t)n;

			if (!r->overlong && j - i <= PATH_MAX - r->ll) {
				memcpy(r->line + r->ll, buf + i, j - i);
				r->ll += j - i;
			} else {
				r->overlong = 1;
			}
			i = j;
			if (nl) {
				err = plan_line(r);
				r->ll = 0;
				r->overlong = 0;
				r->lineno++;
				i++;
			}
		}
	}
	if (err == 0 && (r->ll || r->overlong))
		err = plan_line(r); /* the last line has no newline */
	if (err == 0)
		err = plan_flush(r);
out:
	free(r->pend);
	free(r->order);
	free(r->text);
	free(buf);
	close(fd);
	return err;
}

int fs_plan__read(struct fs *fs, struct fs_plan *p, const char *path, const struct fs_op_stop *stop,
		  uid_t uid, gid_t gid, struct fs_plan_skipped *sk)
{
	struct plan_reader *r = calloc(1, sizeof(*r));
	int err;

	memset(sk, 0, sizeof(*sk));
	if (!r)
		return -ENOMEM;
	r->fs = fs;
	r->p = p;
	r->stop = stop;
	r->uid = uid;
	r->gid = gid;
	r->sk = sk;
	err = plan_read(r, path);
	free(r);
	return err;
}
