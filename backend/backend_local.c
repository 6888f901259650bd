/*
 * backend_local.c — a local directory as an object store.
 *
 * Keys are paths relative to the root directory. The root is opened
 * (O_PATH) and every object is reached with openat() relative to it. Each
 * listing (the mount's, every refresh's) opens the source path again as the
 * user gave it, so a directory renamed over it (mv d d.old && mkdir d) or a
 * symlink switched (ln -sfn v2 d) is seen as the changes it makes; between
 * listings the root stays the one the last listing saw.
 *
 * A source is its directory tree, and nothing outside it is read: every
 * path below the root (each directory a listing opens, each stat, each
 * open) goes through one function, local_beneath, which resolves it with
 * openat2(RESOLVE_BENEATH) relative to the root: a symlink that stays
 * inside the tree (a relative target) is followed, one that leads out of
 * it (an absolute target, or one with ".." past the root) is refused, so is
 * a directory swapped for such a link under a running mount, and the log
 * names it (once while it stays so). Where openat2 is missing (ENOSYS,
 * before Linux 5.6) each component is opened with O_NOFOLLOW instead: no
 * symlink below the root is followed at all. The root itself is the path
 * the user gave, a symlink or not. Special files (FIFOs, devices, sockets)
 * are never listed or opened.
 *
 * The "ETag" of a local file is its size, mtime and ctime in nanoseconds
 * and inode number: any rewrite of the file changes it (ctime too when the
 * writer puts the old mtime back), so cached indexes and decoded copies of
 * an older version are never used.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend_i.h"
#include "shardfs_config.h"

/* The warnings of a listing about the tree (local_walk): each is said at
 * the first listing that meets it, or when its errno changes, not again at
 * each refresh while the same directory stays unreadable (a source with a
 * 0700 directory of another user's logged the line at every refresh); one
 * said before and not met readable by this listing is said to be read
 * again. kind: 'd' a directory that cannot be opened, 'e' one whose entries
 * cannot be looked at, 'l' a link back to a directory on its own path, 'x'
 * a link that leads out of the tree (local_beneath). */
struct said {
	char kind;
	int err;
	char *path;
};

struct said_set {
	struct said *v; /* sorted by kind, then path (said_sort), once whole */
	size_t n, cap;
};

static int said_cmp(const void *a, const void *b)
{
	const struct said *x = a, *y = b;

	return x->kind != y->kind ? x->kind - y->kind : strcmp(x->path, y->path);
}

static void said_free(struct said_set *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->n; i++)
		free(set->v[i].path);
	free(set->v);
	free(set);
}

/* The warning of kind about path a sorted set holds, or NULL. */
static const struct said *said_find(const struct said_set *set, char kind, const char *path)
{
	struct said k = {kind, 0, (char *)path};

	if (!set || !set->n)
		return NULL;
	return bsearch(&k, set->v, set->n, sizeof(k), said_cmp);
}

struct local {
	/* O_PATH|O_DIRECTORY fd of the root the last listing found at path;
	 * any thread reads it (acquire), local_resolve replaces it */
	atomic_int rootfd;
	char *path; /* the source path as given, made absolute at open */
	/* roots replaced by a listing: other threads may still be in an
	 * openat() on one, so they are closed at backend close only (one per
	 * switch of the source path, not per listing) */
	struct disk_mutex
	    lock; /* DISK_LOCK_BE_LOCAL: serialises local_resolve; protects old, said */
	int *old;
	size_t nold;
	struct said_set *said; /* the warnings the last whole listing said (local_list) */
	/* the keys a stat or an open found leading out of the tree, said once
	 * each (unsorted: a source has few, and each is a refusal) */
	struct said_set *outside;
};

#ifndef RESOLVE_BENEATH
#define RESOLVE_BENEATH 0x08
#endif
#ifndef RESOLVE_NO_MAGICLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#endif

/* 1 once openat2 said ENOSYS (an older kernel): local_beneath's fallback */
static atomic_int no_openat2;

/* The fallback of local_beneath without openat2: key opened a component at
 * a time with O_NOFOLLOW, so no symlink below the root is followed (-EXDEV,
 * as openat2 says of one leading out), nor "..". */
static int beneath_nofollow(int rootfd, const char *key, int flags)
{
	char comp[NAME_MAX + 1];
	int dir = rootfd, fd;

	for (;;) {
		const char *slash = strchr(key, '/');
		size_t n = slash ? (size_t)(slash - key) : strlen(key);
		struct stat st;

		if (n == 0 || n > NAME_MAX) {
			fd = n ? -ENAMETOOLONG : -ENOENT;
			break;
		}
		memcpy(comp, key, n);
		comp[n] = '\0';
		if (strcmp(comp, "..") == 0) {
			fd = -EXDEV;
			break;
		}
		fd = openat(dir, comp,
			    (slash ? O_PATH | O_DIRECTORY : flags) | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			fd = -errno;
			/* ELOOP (O_NOFOLLOW of the last) or ENOTDIR (of one before):
			 * a link? then it is not followed here */
			if ((fd == -ELOOP || fd == -ENOTDIR) &&
			    fstatat(dir, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(st.st_mode))
				fd = -EXDEV;
			break;
		}
		if ((flags & O_PATH) && !slash && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
			close(fd); /* O_PATH|O_NOFOLLOW opens the link itself */
			fd = -EXDEV;
			break;
		}
		if (dir != rootfd)
			close(dir);
		if (!slash)
			return fd;
		dir = fd;
		key = slash + 1;
	}
	if (dir != rootfd)
		close(dir);
	return fd;
}

/* The one way below the root: key ("." the root) opened with flags
 * relative to rootfd, never resolved to a place outside the tree. The fd,
 * or -errno: -EXDEV when key, or a symlink on its way, leads out of it. */
static int local_beneath(int rootfd, const char *key, int flags)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	int fd;

	if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
		fd = (int)syscall(SYS_openat2, rootfd, key, &how, sizeof(how));
		if (fd >= 0)
			return fd;
		if (errno != ENOSYS)
			return -errno;
		atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
	}
	if (strcmp(key, ".") != 0)
		return beneath_nofollow(rootfd, key, flags);
	fd = openat(rootfd, ".", flags | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* stat of key below rootfd by local_beneath's rule: 0, or -errno (-EXDEV:
 * it leads out of the tree). A name in the root that is no symlink is
 * inside by itself: one fstatat, as before (each lookup stats its shard). */
static int local_beneath_stat(int rootfd, const char *key, struct stat *st)
{
	int fd;

	if (!strchr(key, '/') && fstatat(rootfd, key, st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISLNK(st->st_mode))
		return 0;
	fd = local_beneath(rootfd, key, O_PATH);
	if (fd < 0)
		return fd;
	if (fstat(fd, st) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	close(fd);
	return 0;
}

static int local_root(struct local *l)
{
	return atomic_load_explicit(&l->rootfd, memory_order_acquire);
}

/* Open the source path again; when it now names another directory (a
 * rename over it, a symlink switched), make that the root. 0, or -errno
 * of the open (the path is gone: the root stays; the listing fails). */
static int local_resolve(struct local *l)
{
	struct stat now, cur;
	int fd = open(l->path, O_PATH | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	disk_mutex_lock(&l->lock);
	if (fstat(fd, &now) < 0 || fstat(local_root(l), &cur) < 0) {
		err = -errno;
	} else if (now.st_dev != cur.st_dev || now.st_ino != cur.st_ino) {
		int *o = realloc(l->old, (l->nold + 1) * sizeof(*o));

		if (!o) {
			err = -ENOMEM;
		} else {
			l->old = o;
			l->old[l->nold++] = local_root(l);
			atomic_store_explicit(&l->rootfd, fd, memory_order_release);
			fd = -1;
		}
	}
	disk_mutex_unlock(&l->lock);
	if (fd >= 0)
		close(fd);
	return err;
}

/* Bound on directory nesting while listing, so a symlink loop ends. */
#define LOCAL_MAX_DEPTH 64

/* v in lowercase hex without leading zeros (as "%" PRIx64) at p; the end. */
static char *put_hex(char *p, uint64_t v)
{
	char t[16];
	int n = 0;

	do {
		t[n++] = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	while (n)
		*p++ = t[--n];
	return p;
}

static void local_fill(struct backend_objinfo *info, const char *key, const struct stat *st)
{
	const uint64_t v[4] = {
	    (uint64_t)st->st_size,
	    (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec,
	    (uint64_t)st->st_ino,
	    (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec};
	char *p;

	memset(info, 0, sizeof(*info)); /* every field: name_only among them */
	info->key = key;
	info->size = (uint64_t)st->st_size;
	info->mtime = st->st_mtim.tv_sec;
	info->mode = st->st_mode & 07777;
	/* "SIZE-MTIME_NS-INO-CTIME_NS" in hex: 4 * 16 + 3 bytes at most, within
	 * etag's 80; formatted by hand, not snprintf, which was a fifth of the
	 * daemon's instructions in ls -lR of a local source (each lookup checks
	 * the shard's file, fs_obj_check) */
	_Static_assert(sizeof(info->etag) > 4 * 16 + 3, "the etag fits");
	p = info->etag;
	for (int i = 0; i < 4; i++) {
		if (i)
			*p++ = '-';
		p = put_hex(p, v[i]);
	}
	*p = '\0';
}

/* One listing's walk: where it is, what it gives cb, the directories on
 * the path from the root to where it is (a symlink back to one of them
 * would repeat the tree below it up to LOCAL_MAX_DEPTH times). */
struct walk {
	struct backend *be;
	int rootfd;
	char *key; /* the path walked, below the root */
	size_t keycap;
	backend_list_cb cb;
	void *arg;
	uint64_t listed;       /* what cb was given, and what was skipped */
	struct said_set *last; /* what the last listing said (NULL: nothing) */
	struct said_set *now;  /* what this one meets (NULL: no memory left) */
	struct {
		dev_t dev;
		ino_t ino;
	} up[LOCAL_MAX_DEPTH + 1];
};

/* A warning of kind about path met by this listing: recorded, and 1 when
 * it is to be said (the last listing did not say it with that errno). */
static int walk_met(struct walk *w, char kind, int err, const char *path)
{
	const struct said *was = said_find(w->last, kind, path);
	struct said_set *set = w->now;

	if (set && set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : 16;
		struct said *v = realloc(set->v, cap * sizeof(*v));

		if (v) {
			set->v = v;
			set->cap = cap;
		}
	}
	if (set && set->n < set->cap) {
		set->v[set->n].path = strdup(path);
		if (set->v[set->n].path) {
			set->v[set->n].kind = kind;
			set->v[set->n].err = err;
			set->n++;
		}
	}
	return !was || was->err != err;
}

/* Directory path was read whole by this listing: a warning about it the
 * last one said is said to be over. */
static void walk_readable(struct walk *w, const char *path, int entries)
{
	if (said_find(w->last, 'd', path))
		backend_log(w->be, BACKEND_LOG_WARN,
			    "source: directory %s can be read again: listed", path);
	else if (entries && said_find(w->last, 'e', path))
		backend_log(w->be, BACKEND_LOG_WARN,
			    "source: the entries of directory %s can be read again: listed", path);
}

/* List the directory w->key (keylen bytes; "" the root) and below it
 * through w->cb. A directory that gives nothing (empty, or only files of
 * other kinds: fifos, sockets, dangling links) is given as one (info.dir),
 * so that the mount shows it as find(1) does; an unreadable one (the log
 * says so, once for the directory, naming it), a too deep one, or a symlink to a directory on its
 * own path (a loop: skipped with a warning, as find -L says), is skipped and keeps its parent from
 * being shown empty. */
static int local_walk(struct walk *w, size_t keylen, int depth)
{
	char *key = w->key;
	DIR *d;
	struct dirent *de;
	struct stat dst;
	uint64_t before;
	int fd, ret = 0, unstat = 0;

	/* skipped, too deep or unreadable: its parent is not empty either */
	w->listed++;
	if (depth > LOCAL_MAX_DEPTH)
		return 0;
	fd = local_beneath(w->rootfd, keylen ? key : ".", O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		if (depth == 0)
			return fd;
		/* an unreadable subdirectory is skipped, and the log says so
		 * (once while it stays so: walk_met) */
		ret = -fd;
		if (walk_met(w, 'd', ret, key))
			backend_log(w->be, BACKEND_LOG_WARN,
				    "source: cannot read directory %s (%s): skipped", key,
				    strerror(ret));
		return 0;
	}
	before = w->listed;
	d = fdopendir(fd);
	if (!d) {
		ret = -errno;
		close(fd);
		return ret;
	}
	if (fstat(dirfd(d), &dst) < 0) {
		ret = -errno;
		closedir(d);
		return ret;
	}
	w->up[depth].dev = dst.st_dev;
	w->up[depth].ino = dst.st_ino;
	while ((de = readdir(d)) != NULL) {
		struct stat st;
		size_t n = strlen(de->d_name);
		size_t len;
		int loop = 0;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		len = keylen + (keylen ? 1 : 0) + n;
		if (len + 1 > w->keycap)
			continue; /* deeper than PATH_MAX: cannot be opened anyway */
		if (keylen)
			key[keylen] = '/';
		memcpy(key + keylen + (keylen ? 1 : 0), de->d_name, n + 1);
		/* the entry itself, in the directory this walk opened; a
		 * symlink is followed by local_beneath's rule */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    (S_ISLNK(st.st_mode) && (errno = -local_beneath_stat(w->rootfd, key, &st)))) {
			/* dangling symlink or vanished: not an object; one leading
			 * out of the tree is said and skipped; anything else (a
			 * directory that can be listed, not searched: EACCES) is
			 * said, once for the directory */
			int e = errno;

			if (e == EXDEV) {
				if (walk_met(w, 'x', 0, key))
					backend_log(
					    w->be, BACKEND_LOG_WARN,
					    atomic_load_explicit(&no_openat2, memory_order_relaxed)
						? "source: %s is a symbolic link, not followed "
						  "where "
						  "openat2 is missing (this kernel): not listed"
						: "source: %s is a symbolic link that leads out of "
						  "the "
						  "source directory (an absolute target, or one "
						  "past its "
						  "top): not listed",
					    key);
				key[keylen] = '\0';
				continue; /* as a dangling link: its parent may show empty */
			}

			if (e != ENOENT && e != ENOTDIR && e != ELOOP && !unstat) {
				key[keylen] = '\0';
				if (walk_met(w, 'e', e, keylen ? key : "."))
					backend_log(w->be, BACKEND_LOG_WARN,
						    "source: cannot read the entries of directory "
						    "%s (%s; the first: %s): skipped",
						    keylen ? key : ".", strerror(e), de->d_name);
				unstat = 1;
			}
			key[keylen] = '\0';
			if (e == ENOENT || e == ENOTDIR || e == ELOOP)
				continue;
			w->listed++; /* skipped: its parent is not shown empty */
			continue;
		}
		for (int i = 0; S_ISDIR(st.st_mode) && i <= depth && !loop; i++)
			loop = w->up[i].dev == st.st_dev && w->up[i].ino == st.st_ino;
		/* a loop the last listing said, listed now: said over, once */
		if (!loop && (S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) &&
		    said_find(w->last, 'l', key))
			backend_log(w->be, BACKEND_LOG_WARN,
				    "source: %s is no longer a link back to a directory on its own "
				    "path: listed",
				    key);
		if (loop) {
			if (walk_met(w, 'l', 0, key))
				backend_log(w->be, BACKEND_LOG_WARN,
					    "source: %s is a link back to a directory on its own "
					    "path (a loop): not followed",
					    key);
			w->listed++;
		} else if (S_ISDIR(st.st_mode)) {
			ret = local_walk(w, len, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			struct backend_objinfo info;

			local_fill(&info, key, &st);
			ret = w->cb(w->arg, &info);
			w->listed++;
		}
		key[keylen] = '\0';
		if (ret != 0)
			break;
	}
	if (ret == 0 && w->last)
		walk_readable(w, keylen ? key : ".", !unstat);
	if (ret == 0 && keylen && w->listed == before) {
		struct backend_objinfo info;

		memset(&info, 0, sizeof(info));
		info.key = key;
		info.mtime = dst.st_mtim.tv_sec;
		info.mode = dst.st_mode & 07777;
		info.dir = 1;
		ret = w->cb(w->arg, &info);
		w->listed++;
	}
	closedir(d);
	return ret;
}

static int local_list(struct backend *be, backend_list_cb cb, void *arg)
{
	struct local *l = be->impl;
	char key[PATH_MAX];
	struct walk *w;
	int err = local_resolve(l);

	if (err < 0)
		return err;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	key[0] = '\0';
	*w = (struct walk){.be = be,
			   .rootfd = local_root(l),
			   .key = key,
			   .keycap = sizeof(key),
			   .cb = cb,
			   .arg = arg};
	disk_mutex_lock(&l->lock); /* what the last listing said: this one's until it ends */
	w->last = l->said;
	l->said = NULL;
	disk_mutex_unlock(&l->lock);
	w->now = calloc(1, sizeof(*w->now));
	err = local_walk(w, 0, 0);
	if (err == 0 && w->now) {  /* a whole listing: what it said is the last */
		if (w->now->n > 1) /* an empty set has no array (v NULL) */
			qsort(w->now->v, w->now->n, sizeof(*w->now->v), said_cmp);
		said_free(w->last);
		w->last = w->now;
		w->now = NULL;
	}
	disk_mutex_lock(&l->lock);
	if (!l->said) { /* else another listing ended meanwhile: its */
		l->said = w->last;
		w->last = NULL;
	}
	disk_mutex_unlock(&l->lock);
	said_free(w->last);
	said_free(w->now);
	free(w);
	return err;
}

/* key leads out of the tree (-EXDEV of a stat or an open under a running
 * mount: a shard or a directory on its path swapped for such a link): the
 * log says so, once per key while the backend lives; the caller sees
 * -ENOENT, as for a dangling link (no object), never the bytes there. */
static int local_outside(struct backend *be, const char *key)
{
	struct local *l = be->impl;
	struct said_set *set;
	int said = 0;

	disk_mutex_lock(&l->lock);
	if (!l->outside)
		l->outside = calloc(1, sizeof(*l->outside));
	set = l->outside;
	for (size_t i = 0; set && i < set->n && !said; i++)
		said = strcmp(set->v[i].path, key) == 0;
	if (set && !said && set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : 16;
		struct said *v = realloc(set->v, cap * sizeof(*v));

		if (v) {
			set->v = v;
			set->cap = cap;
		}
	}
	if (set && !said && set->n < set->cap) {
		set->v[set->n].path = strdup(key);
		if (set->v[set->n].path) {
			set->v[set->n].kind = 'x';
			set->n++;
		}
	}
	disk_mutex_unlock(&l->lock);
	if (!said)
		backend_log(be, BACKEND_LOG_WARN,
			    "source: %s leads out of the source directory (a symbolic link on its "
			    "path): not read",
			    key);
	return -ENOENT;
}

static int local_stat(struct backend *be, const char *key, struct backend_objinfo *info)
{
	struct local *l = be->impl;
	struct stat st;
	int err = local_beneath_stat(local_root(l), key, &st);

	if (err == -EXDEV)
		return local_outside(be, key);
	if (err < 0)
		return err;
	if (!S_ISREG(st.st_mode))
		return S_ISDIR(st.st_mode) ? -EISDIR : -ENOENT;
	local_fill(info, key, &st);
	return 0;
}

static int local_open_fd(struct backend *be, const char *key)
{
	struct local *l = be->impl;
	struct stat st;
	int fd = local_beneath(local_root(l), key, O_RDONLY | O_NOCTTY | O_NONBLOCK);

	if (fd == -EXDEV)
		return local_outside(be, key);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

static ssize_t local_pread(struct backend *be, const char *key, const char *etag, uint64_t size,
			   void *buf, size_t len, uint64_t off)
{
	(void)etag; /* a local file is read in place; its fd pins nothing either */
	int fd = local_open_fd(be, key);
	size_t done = 0;

	if (fd < 0)
		return fd;
	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -errno;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	close(fd);
	return (ssize_t)done;
}

static void local_close(struct backend *be)
{
	struct local *l = be->impl;

	if (l) {
		close(local_root(l));
		for (size_t i = 0; i < l->nold; i++)
			close(l->old[i]);
		free(l->old);
		free(l->path);
		said_free(l->said);
		said_free(l->outside);
		disk_mutex_destroy(&l->lock);
		free(l);
	}
}

static const struct backend_ops local_ops = {
    .close = local_close,
    .list = local_list,
    .stat = local_stat,
    .pread = local_pread,
    .open_fd = local_open_fd,
};

const char *backend_local_source(const struct backend *be)
{
	return be->local ? ((const struct local *)be->impl)->path : NULL;
}

int backend_local_dirfd(struct backend *be, const char *key, const char **base)
{
	struct local *l = be->impl;
	const char *slash = strrchr(key, '/');
	char dir[PATH_MAX];
	size_t n = slash ? (size_t)(slash - key) : 0;

	*base = slash ? slash + 1 : key;
	if (!be->local || !**base || strcmp(*base, ".") == 0 || strcmp(*base, "..") == 0)
		return -EINVAL;
	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, key, n);
	dir[n] = '\0';
	return local_beneath(local_root(l), n ? dir : ".", O_RDONLY | O_DIRECTORY);
}

uint64_t backend_local_refused(struct backend *be, int *nofollow)
{
	struct local *l = be->impl;
	uint64_t n = 0;

	*nofollow = atomic_load_explicit(&no_openat2, memory_order_relaxed);
	if (!be->local)
		return 0;
	disk_mutex_lock(&l->lock);
	for (size_t i = 0; l->said && i < l->said->n; i++)
		n += l->said->v[i].kind == 'x';
	disk_mutex_unlock(&l->lock);
	return n;
}

int backend__local_open(struct backend *be, const char *root)
{
	struct local *l;
	char *abs;
	int fd;

#if SHARDFS_TEST_BACKENDS
	/* the fallback, tested on this kernel too: decided once, at open, before
	 * any thread reads below the root */
	if (getenv("SHARDFS_TEST_NO_OPENAT2"))
		atomic_store_explicit(&no_openat2, 1, memory_order_relaxed);
#endif
	fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	abs = realpath(root, NULL);
	l = calloc(1, sizeof(*l));
	if (l && root[0] == '/') {
		l->path = strdup(root);
	} else if (l) {
		/* relative: to the working directory of now (a daemon moves to /) */
		char cwd[PATH_MAX];
		size_t n = strlen(root);

		if (getcwd(cwd, sizeof(cwd)) && strlen(cwd) + n + 2 <= sizeof(cwd)) {
			l->path = malloc(strlen(cwd) + n + 2);
			if (l->path)
				snprintf(l->path, strlen(cwd) + n + 2, "%s/%s", cwd, root);
		}
	}
	if (l && !l->path && abs)
		l->path = strdup(abs); /* no working directory: the path as resolved now */
	if (!l || !abs || !l->path) {
		if (l)
			free(l->path);
		free(l);
		free(abs);
		close(fd);
		return -ENOMEM;
	}
	atomic_init(&l->rootfd, fd);
	disk_mutex_init(&l->lock, DISK_LOCK_BE_LOCAL);
	be->ops = &local_ops;
	be->impl = l;
	be->local = 1;
	be->desc = abs;
	return 0;
}
