/*
 * fs_plan.c — reading plans (fs_plan.h): the order in which a reader will
 * read files, published with 'plan [NAME] FILE' on .shardfs/control,
 * resolved once to the extents of objects that hold the bytes, and marked
 * read as reads land on planned paths.
 *
 * A plan is immutable once published but for its read marks, read count
 * and position (atomics), and is referenced: the array of struct fs_plans
 * (fs->plans) holds one reference, fs_plan_list hands out more. Publishing
 * a name replaces the plan of that name in the array; the old plan lives on
 * until its last reference goes. Reads take its lock shared (and skip it
 * while no plan is published); publish and clear take it exclusively,
 * never while resolving paths (which may index shards).
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

static void plan_changed(struct fs *fs);
static void plans_drop_exited(struct fs *fs);

int fs_plans_new(struct fs_plans **pl)
{
	*pl = calloc(1, sizeof(**pl));
	if (!*pl)
		return -ENOMEM;
	disk_rwlock_init(&(*pl)->lock, DISK_LOCK_PLANS);
	disk_rwlock_init(&(*pl)->use_lock, DISK_LOCK_PLAN_USE);
	disk_mutex_init(&(*pl)->reading_lock, DISK_LOCK_PLAN_READING);
	return 0;
}

void fs_plans_free(struct fs_plans *pl)
{
	if (!pl)
		return;
	disk_rwlock_destroy(&pl->lock);
	disk_rwlock_destroy(&pl->use_lock);
	disk_mutex_destroy(&pl->reading_lock);
	free(pl);
}

static uint32_t key_slot(uint64_t key, uint32_t nslots)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (nslots - 1);
}

/* The first extent of p with key, or PLAN_NONE. */
static uint32_t plan_find(const struct fs_plan *p, uint64_t key)
{
	for (uint32_t s = key_slot(key, p->nslots);; s = (s + 1) & (p->nslots - 1)) {
		uint32_t v = p->slots[s];

		if (v == 0)
			return PLAN_NONE;
		if (p->ext[v - 1].key == key)
			return v - 1;
	}
}

static void plan_free(struct fs_plan *p)
{
	if (!p)
		return;
	free(p->ext);
	free(p->slots);
	free(p->next);
	free((void *)p->done);
	free(p->cum);
	free(p->byoff);
	free(p->rank);
	free(p);
}

void fs_plan_put(struct fs_plan *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1)
		plan_free(p);
}

/* The index of extents by key (slots, next) and the read marks. */
static int plan_index(struct fs_plan *p)
{
	uint32_t *last;

	p->nslots = 16;
	while (p->nslots < 2 * (uint64_t)p->n + 1)
		p->nslots *= 2;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	p->next = malloc((p->n ? p->n : 1) * sizeof(*p->next));
	p->done = calloc(p->n ? p->n : 1, sizeof(*p->done));
	p->cum = malloc(((size_t)p->n + 1) * sizeof(*p->cum));
	/* last[s]: the last extent seen so far of the key in slot s */
	last = malloc(p->nslots * sizeof(*last));
	if (!p->slots || !p->next || !p->done || !p->cum || !last) {
		free(last);
		return -ENOMEM;
	}
	p->cum[0] = 0;
	for (uint32_t i = 0; i < p->n; i++)
		p->cum[i + 1] = p->cum[i] + p->ext[i].len;
	for (uint32_t i = 0; i < p->n; i++) {
		uint32_t s = key_slot(p->ext[i].key, p->nslots);

		p->next[i] = PLAN_NONE;
		while (p->slots[s] && p->ext[p->slots[s] - 1].key != p->ext[i].key)
			s = (s + 1) & (p->nslots - 1);
		if (!p->slots[s])
			p->slots[s] = i + 1;
		else
			p->next[last[s]] = i;
		last[s] = i;
	}
	free(last);
	return fs_plan__use_index(p);
}

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
	/* a directory part, then a last component that is a name (not '.',
	 * '..' or empty): the directory's inode from its slot, or walked and
	 * kept there */
	if (dirs && sl && dl > 0 && dl < PLAN_DIR_NAME && ll > 0 && !(ll == 1 && sl[1] == '.') &&
	    !(ll == 2 && sl[1] == '.' && sl[2] == '.')) {
		struct plan_dir *d = plan_dir_slot(dirs, path, dl);

		if (d->ino && d->len == dl && memcmp(d->name, path, dl) == 0) {
			ino = d->ino;
		} else {
			err = walk(fs, path, dl, &ino, &e);
			if (err < 0)
				return err;
			d->ino = ino;
			d->len = dl;
			memcpy(d->name, path, dl);
		}
		path += dl + 1;
		len = ll;
	}
	err = walk(fs, path, len, &ino, &e);
	if (err < 0)
		return err;
	return extent_of(fs, ino, &e.attr, x);
}

/* ---- publishing -------------------------------------------------------- */

/* name, or "pid-PID" without one, checked into out. */
static int plan_name(const char *name, pid_t pid, char out[FS_PLAN_NAME_MAX + 1])
{
	size_t n;

	if (!name) {
		snprintf(out, FS_PLAN_NAME_MAX + 1, "pid-%ld", (long)pid);
		return 0;
	}
	n = strlen(name);
	if (n == 0 || n > FS_PLAN_NAME_MAX ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") != n)
		return -EINVAL;
	memcpy(out, name, n + 1);
	return 0;
}

/* Line numbers of missing paths a log line names (the first ones). */
#define PLAN_LOG_LINES 8
/* A plan file is read in pieces of this size: the memory of a publish is
 * this, one line (PATH_MAX) and the extents found, whatever the file. */
#define PLAN_CHUNK (64u << 10)

/* Reading a plan file into a plan, a piece at a time. */
struct plan_reader {
	struct fs *fs;
	struct fs_plan *p;
	size_t cap;			/* of p->ext */
	char line[PATH_MAX + 1];	/* the line so far */
	size_t ll;			/* its length */
	int overlong;			/* longer than PATH_MAX: named nothing */
	uint64_t lineno;		/* of the line being read, from 1 */
	uint64_t lines[PLAN_LOG_LINES]; /* line numbers of the first paths not found */
	uint32_t not_found;		/* paths that name nothing (of p->missing) */
	uint32_t failed;		/* paths whose lookup failed (p->failed) */
	int failed_err;			/* the first one's errno */
	const struct fs_op_stop *stop;	/* or NULL */
	uid_t uid;			/* the sender's: the file opened with its rights */
	gid_t gid;
	struct plan_dir dirs[PLAN_DIRS]; /* the directories of its paths (resolve) */
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

/* The line just read: resolve its path into the next extent, or count it
 * missing (its number kept for the log, never its text). A line that
 * begins with the mount point is the path below it (else, if that names
 * nothing, the line as it is: a path of the source that repeats it). */
static int plan_line(struct plan_reader *r)
{
	struct fs_plan *p = r->p;
	struct fs_plan_extent x;
	size_t skip;
	int err = 0;

	/* a line is a path as it is: a '\r' at its end is part of it (a
	 * member's name may end in one); an empty line is no path */
	if (r->ll == 0 && !r->overlong)
		return 0;
	skip = r->overlong ? 0 : mount_prefix(r->fs, r->line, r->ll);
	if (skip && (err = resolve(r->fs, r->line + skip, r->ll - skip, &x, r->dirs)) < 0)
		skip = 0;
	if (r->overlong || (!skip && (err = resolve(r->fs, r->line, r->ll, &x, r->dirs)) < 0)) {
		if (!r->overlong && lookup_failed(err)) {
			if (!r->failed++)
				r->failed_err = -err;
			p->failed++;
			return 0;
		}
		if (r->not_found++ < PLAN_LOG_LINES)
			r->lines[r->not_found - 1] = r->lineno;
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
	p->ext[p->n++] = x;
	p->bytes += x.len;
	p->fnv = disk_fnv64_update(p->fnv, r->line + skip, r->ll - skip);
	p->fnv = disk_fnv64_update(p->fnv, "\n", 1);
	return 0;
}

/* Read plan file path a piece at a time (PLAN_CHUNK) and resolve each
 * line into r->p's extents, then index them. The file is never held
 * whole: memory is bounded by the extents found, not by the file. 0, or
 * open's error, -EISDIR, -EINVAL (not a regular file: a FIFO is never
 * waited on), -EFBIG (past FS_PLAN_FILE_MAX, read so far), -ENOMEM, a
 * read error. */
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
		err = plan_index(r->p);
out:
	free(buf);
	close(fd);
	return err;
}

/* A plan file the daemon may read: an absolute path, not inside this
 * mount (reading a file of this very mount from a request handler could
 * wait for a handler thread forever: also through a symlink or a bind
 * mount; fs_plan_path_inside never asks the mount; resolved with the
 * sender's rights, uid and gid). 0, or -errno after
 * saying why. */
static int plan_file_ok(const char *mp, const char *nm, const char *file, uid_t uid, gid_t gid)
{
	int err;

	if (file[0] != '/') {
		fs_log(FS_LOG_WARN, "plan '%s': the plan file '%s' is not an absolute path", nm,
		       file);
		return -EINVAL;
	}
	err = fs_plan_path_inside_as(mp, file, uid, gid);
	if (err > 0)
		fs_log(FS_LOG_WARN, "plan '%s': the plan file '%s' is inside the mount", nm, file);
	else if (err < 0)
		fs_log(FS_LOG_WARN, "plan '%s': cannot resolve the plan file '%s': %s", nm, file,
		       strerror(-err));
	return err > 0 ? -EINVAL : err;
}

/* Put plan p in the table: in the slot of the plan of its name, else a
 * free one, else the one published longest ago. Returns the plan it
 * replaced (the caller puts it), or NULL. */
static struct fs_plan *plan_install(struct fs *fs, struct fs_plan *p)
{
	struct fs_plan *old;
	int slot = -1;

	disk_rwlock_wrlock(&fs->plans->lock);
	p->seq = ++fs->plans->seq;
	p->base = atomic_load(&fs->plans->clock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		struct fs_plan *q = fs->plans->v[i];

		if (q && strcmp(q->name, p->name) == 0) {
			slot = i;
			break;
		}
		if (!q && slot < 0)
			slot = i;
	}
	if (slot < 0) { /* full: the plan published longest ago goes */
		slot = 0;
		for (int i = 1; i < FS_PLAN_MAX; i++)
			if (fs->plans->v[i]->seq < fs->plans->v[slot]->seq)
				slot = i;
	}
	old = fs->plans->v[slot];
	fs->plans->v[slot] = p;
	if (!old)
		atomic_fetch_add(&fs->plans->n, 1);
	fs->c.plans_published++;
	disk_rwlock_unlock(&fs->plans->lock);
	return old;
}

int fs_plan_publish(struct fs *fs, const char *name, pid_t pid, const char *file,
		    const struct fs_op_stop *stop, uid_t uid, gid_t gid)
{
	char nm[FS_PLAN_NAME_MAX + 1], human[32], lines[PLAN_LOG_LINES * 22 + 8];
	const char *mp = fs->cfg.mountpoint;
	struct fs_plan *p, *old = NULL;
	struct plan_reader *r;
	uint32_t nf, failed;
	size_t ln = 0;
	int err, failed_err;

	plans_drop_exited(fs);
	err = plan_name(name, pid, nm);
	if (err < 0) {
		fs_log(FS_LOG_WARN, "plan: bad name '%s' (1 to %d of A-Z a-z 0-9 . _ : -)", name,
		       FS_PLAN_NAME_MAX);
		return err;
	}
	err = plan_file_ok(mp, nm, file, uid, gid);
	if (err < 0)
		return err;
	p = calloc(1, sizeof(*p));
	r = calloc(1, sizeof(*r));
	if (!p || !r) {
		free(p);
		free(r);
		return -ENOMEM;
	}
	memcpy(p->name, nm, sizeof(nm));
	p->pid = pid;
	p->fs = fs;
	atomic_init(&p->refs, 1);
	r->fs = fs;
	r->p = p;
	r->stop = stop;
	r->uid = uid;
	r->gid = gid;
	err = plan_read(r, file);
	if (err < 0) {
		fs_log(FS_LOG_WARN, "plan '%s': cannot read the plan file '%s': %s", nm, file,
		       strerror(-err));
		free(r);
		plan_free(p);
		return err;
	}
	/* the numbers of the lines that named nothing, never their text: a
	 * plan file may be anything its sender could name (the daemon's user
	 * may read more than the sender) */
	for (uint32_t i = 0; i < r->not_found && i < PLAN_LOG_LINES; i++)
		ln += (size_t)snprintf(lines + ln, sizeof(lines) - ln, "%s%" PRIu64, i ? ", " : "",
				       r->lines[i]);
	if (r->not_found > PLAN_LOG_LINES)
		snprintf(lines + ln, sizeof(lines) - ln, ", ...");
	nf = r->not_found;
	failed = r->failed;
	failed_err = r->failed_err;
	free(r);
	old = plan_install(fs, p);
	fs_human_bytes(p->bytes, human, sizeof(human));
	fs_log(FS_LOG_INFO, "plan '%s' (pid %ld) from '%s': %" PRIu32 " %s, %s%s%s", nm, (long)pid,
	       file, p->n, fs_plural(p->n, "path", "paths"), human,
	       old && strcmp(old->name, nm) == 0 ? ", replacing the earlier one" : "",
	       old && strcmp(old->name, nm) != 0 ? ", dropping the oldest plan" : "");
	if (nf)
		fs_log(FS_LOG_WARN,
		       "plan '%s': %" PRIu32 " %s not found in the mount %s skipped "
		       "(line%s %s of the plan file)",
		       nm, nf, fs_plural(nf, "path", "paths"), fs_plural(nf, "was", "were"),
		       nf == 1 ? "" : "s", lines);
	if (failed)
		fs_log(FS_LOG_WARN,
		       "plan '%s': %" PRIu32 " %s could not be looked up and %s skipped: %s "
		       "could not be read or indexed (%s; see above)",
		       nm, failed, fs_plural(failed, "path", "paths"),
		       fs_plural(failed, "was", "were"),
		       fs_plural(failed, "its shard", "their shards"), strerror(failed_err));
	if (old && strcmp(old->name, nm) != 0)
		fs_log(FS_LOG_WARN,
		       "plan: the mount holds at most FS_PLAN_MAX (%d) plans: dropped '%s'",
		       FS_PLAN_MAX, old->name);
	fs_plan_put(old);
	fs_plan__use_all(fs);
	plan_changed(fs);
	return 0;
}

int fs_plan_clear(struct fs *fs, const char *name, pid_t pid)
{
	char nm[FS_PLAN_NAME_MAX + 1];
	struct fs_plan *old = NULL;
	int err = plan_name(name, pid, nm);

	if (err < 0)
		return err;
	disk_rwlock_wrlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		if (fs->plans->v[i] && strcmp(fs->plans->v[i]->name, nm) == 0) {
			old = fs->plans->v[i];
			fs->plans->v[i] = NULL;
			atomic_fetch_sub(&fs->plans->n, 1);
			break;
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	if (!old)
		return -ENOENT;
	fs_log(FS_LOG_INFO, "plan '%s' cleared", nm);
	fs_plan_put(old);
	fs_plan__use_all(fs);
	plan_changed(fs);
	return 0;
}

/* ---- reads --------------------------------------------------------------- */

static void plan_mark(struct fs *fs, struct fs_plan *p, uint32_t i, int *marked)
{
	unsigned pos = atomic_load_explicit(&p->position, memory_order_relaxed);

	atomic_fetch_add_explicit(&p->nread, 1, memory_order_relaxed);
	fs->c.plan_hits++;
	while (pos < i + 1 && !atomic_compare_exchange_weak(&p->position, &pos, i + 1))
		;
	/* the fetcher has nothing to do before its wake point (a batch is due
	 * once the reader is half-way through the last): waking it for every
	 * read cost a context switch a sample */
	if ((pos > i + 1 ? pos : i + 1) >= atomic_load_explicit(&p->wake_at, memory_order_relaxed))
		*marked = 1;
	fs_plan__use_moved(fs, p);
}

int fs_plan_note_read(struct fs *fs, uint64_t ino, uint64_t off, uint64_t size)
{
	enum fs_kind k = fs_ino_kind(ino);
	uint64_t key = ino;
	struct fs_plan_extent x = {0}; /* set when planned */
	struct fs_plan_hit hits[FS_PLAN_MAX];
	uint32_t nhits = 0;
	int marked = 0;

	if (!atomic_load_explicit(&fs->plans->n, memory_order_relaxed))
		return 0;
	if (k != FS_K_OBJ && k != FS_K_MEMBER)
		return 0;
	disk_rwlock_rdlock(&fs->plans->lock);
	/* the slots up to the last plan (n counts v[]'s plans, both changed
	 * under the lock held exclusive) */
	for (unsigned s = 0, left = atomic_load(&fs->plans->n); s < FS_PLAN_MAX && left; s++) {
		struct fs_plan *p = fs->plans->v[s];
		uint32_t first;

		if (!p)
			continue;
		left--;
		first = plan_find(p, key);
		if (first == PLAN_NONE)
			continue;
		/* one key: the same bytes in every plan */
		x = p->ext[first];
		hits[nhits++] = (struct fs_plan_hit){p->seq, s, first};
		if (off == 0) { /* a new read of the file: its next occurrence */
			for (uint32_t i = first; i != PLAN_NONE; i = p->next[i]) {
				if (atomic_exchange(&p->done[i], 1) == 0) {
					plan_mark(fs, p, i, &marked);
					break;
				}
			}
		} else { /* a read that continues one: counted when none is */
			uint32_t i = first;

			while (i != PLAN_NONE && !atomic_load(&p->done[i]))
				i = p->next[i];
			if (i == PLAN_NONE && atomic_exchange(&p->done[first], 1) == 0)
				plan_mark(fs, p, first, &marked);
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	if (nhits)
		fs_plan__use_read(fs, &x, off, size, hits, nhits);
	return marked;
}

void fs_plan_wake(struct fs *fs)
{
	plan_changed(fs);
}

/* ---- the fetcher's side and stats ------------------------------------------ */

void fs_plan_set_listener(struct fs *fs, void (*fn)(void *ctx), void *ctx)
{
	fs->plans->listener = fn;
	fs->plans->listener_ctx = ctx;
}

void fs_plan_wake_at(struct fs_plan *p, uint32_t position)
{
	atomic_store_explicit(&p->wake_at, position, memory_order_relaxed);
}

static void plan_changed(struct fs *fs)
{
	if (fs->plans->listener)
		fs->plans->listener(fs->plans->listener_ctx);
}

size_t fs_plan_list(struct fs *fs, struct fs_plan **out, size_t max)
{
	size_t n = 0;

	disk_rwlock_rdlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX && n < max; i++) {
		if (fs->plans->v[i]) {
			atomic_fetch_add(&fs->plans->v[i]->refs, 1);
			out[n++] = fs->plans->v[i];
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	return n;
}

/* Extents of p whose object the source removed (FS_OBJ_GONE: a refresh,
 * or a lookup that found it gone): a path of the plan that names nothing
 * any more is missing, as one that named nothing at publish is. Counted
 * again only when an object was marked stale or gone since the last count
 * (fs_obj_mark_stale moves fs->c.stale_noticed after the object's state),
 * so a read of the counters costs one load while nothing changes, and a
 * count that raced a mark is made again at the next read. Any thread. */
static uint32_t plan_gone(const struct fs_plan *p)
{
	atomic_ullong *cache = (atomic_ullong *)&p->gone; /* a cache, not the plan */
	uint64_t g = atomic_load(&p->fs->c.stale_noticed), tag = (uint64_t)(uint32_t)(g + 1) << 32,
		 v = atomic_load_explicit(cache, memory_order_acquire);
	uint32_t n = 0;

	if (tag && (v & ~(uint64_t)UINT32_MAX) == tag)
		return (uint32_t)v;
	for (uint32_t k = 0; k < p->n; k++)
		n += atomic_load_explicit(&fs_obj(p->fs, p->ext[k].obj)->state,
					  memory_order_acquire) == FS_OBJ_GONE;
	atomic_store_explicit(cache, tag | n, memory_order_release);
	return n;
}

void fs_plan_get_info(const struct fs_plan *p, struct fs_plan_info *i)
{
	i->name = p->name;
	i->pid = p->pid;
	i->paths = p->n;
	i->missing = p->missing + plan_gone(p);
	i->failed = p->failed;
	i->read = atomic_load_explicit(&p->nread, memory_order_relaxed);
	i->position = atomic_load_explicit(&p->position, memory_order_relaxed);
	i->bytes = p->bytes;
	i->fnv = p->fnv;
}

uint32_t fs_plan_ahead(const struct fs_plan *p, uint32_t *from, struct fs_plan_extent *out,
		       uint32_t *idx, uint32_t max)
{
	uint32_t n = 0, i = *from;

	for (; i < p->n && n < max; i++) {
		if (atomic_load_explicit(&p->done[i], memory_order_relaxed))
			continue;
		if (idx)
			idx[n] = i;
		out[n++] = p->ext[i];
	}
	*from = i;
	return n;
}

uint64_t fs_plan_bytes_before(const struct fs_plan *p, uint32_t i)
{
	return p->cum[i < p->n ? i : p->n];
}

void fs_plan_totals(struct fs *fs, struct fs_plan_totals *t)
{
	struct fs_plan *ps[FS_PLAN_MAX];
	size_t n = fs_plan_list(fs, ps, FS_PLAN_MAX);

	memset(t, 0, sizeof(*t));
	for (size_t k = 0; k < n; k++) {
		struct fs_plan_info i;

		fs_plan_get_info(ps[k], &i);
		t->plans++;
		t->paths += i.paths;
		t->missing += i.missing;
		t->failed += i.failed;
		t->read += i.read;
		t->position += i.position;
		t->bytes += i.bytes;
		fs_plan_put(ps[k]);
	}
}

/* A plan named "pid-PID" (the daemon's name for one published without a
 * name, and the Python module's) is that process's (or thread's): once it
 * has ended nobody reads along the plan any more, and it would stay listed
 * (and hold its marks) for ever. Such plans are dropped here, at each
 * publish and each read of .shardfs/plans; other names are kept ('shardfs
 * plan' publishes and exits). */
static void plans_drop_exited(struct fs *fs)
{
	char gone[FS_PLAN_MAX][FS_PLAN_NAME_MAX + 1];
	pid_t pids[FS_PLAN_MAX];
	int n = 0;

	disk_rwlock_rdlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		const struct fs_plan *p = fs->plans->v[i];
		char *end;
		long who;

		if (!p || strncmp(p->name, "pid-", 4) != 0 || p->name[4] < '1' || p->name[4] > '9')
			continue;
		errno = 0;
		who = strtol(p->name + 4, &end, 10);
		if (errno || *end || who > INT_MAX || !disk_pid_gone((pid_t)who))
			continue;
		snprintf(gone[n], sizeof(gone[n]), "%s", p->name);
		pids[n++] = (pid_t)who;
	}
	disk_rwlock_unlock(&fs->plans->lock);
	for (int k = 0; k < n; k++)
		if (fs_plan_clear(fs, gone[k], pids[k]) == 0)
			fs_log(FS_LOG_INFO, "plan '%s' dropped: process %ld has ended", gone[k],
			       (long)pids[k]);
}

int fs_plan_render(struct fs *fs, char **buf, size_t *len)
{
	plans_drop_exited(fs);
	struct fs_plan *ps[FS_PLAN_MAX];
	size_t n = fs_plan_list(fs, ps, FS_PLAN_MAX), cap = 128 + n * 256, l;
	char *b = malloc(cap);

	if (!b) {
		for (size_t k = 0; k < n; k++)
			fs_plan_put(ps[k]);
		return -ENOMEM;
	}
	l = (size_t)snprintf(b, cap,
			     "name\tpid\tpaths\tmissing\tfailed\tread\tposition\tbytes\tfnv\n");
	for (size_t k = 0; k < n; k++) {
		struct fs_plan_info i;

		fs_plan_get_info(ps[k], &i);
		l += (size_t)snprintf(b + l, cap - l,
				      "%s\t%ld\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu32
				      "\t%" PRIu32 "\t%" PRIu64 "\t%016" PRIx64 "\n",
				      i.name, (long)i.pid, i.paths, i.missing, i.failed, i.read,
				      i.position, i.bytes, i.fnv);
		fs_plan_put(ps[k]);
	}
	*buf = b;
	*len = l;
	return 0;
}

void fs_plan_free_all(struct fs *fs)
{
	if (!fs->plans)
		return;
	disk_rwlock_wrlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		fs_plan_put(fs->plans->v[i]);
		fs->plans->v[i] = NULL;
	}
	atomic_store(&fs->plans->n, 0);
	disk_rwlock_unlock(&fs->plans->lock);
}
