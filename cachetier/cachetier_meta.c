/*
 * cachetier_meta.c — metadata blobs (shard indexes, fs's kept listing,
 * imagefolder class maps), stored crash-safely.
 *
 * A blob is written with disk_write_atomic (temp file, fsync, rename, fsync
 * of the directory), so a reader sees the old blob, the new blob, or
 * nothing — never a torn one. Blob contents carry their own magic, version
 * and checksum (the caller's format); this file only moves bytes.
 *
 * A blob is read either into malloc'd memory (get) or mapped read-only
 * (map): the daemon maps shard indexes, so millions of members cost page
 * cache the kernel can reclaim, not heap. Since a blob file is only ever
 * replaced by a rename, never written in place, a mapping keeps the inode
 * it was made of: a put of the same name (another process reindexing)
 * cannot change or truncate the bytes under a reader, nor can a removal
 * (an unlink: the inode lives on while mapped). The mapping goes when its
 * last reference is dropped.
 *
 * Blob families: a blob put into a family (cachetier_meta_put_in) lives in
 * meta/f-<hash of the family>/<hash of the name>, so that the family's
 * blobs can be found although file names are hashes: a sweep
 * (cachetier_meta_sweep) lists that one small directory and removes every
 * blob but the one to keep. Removing a blob changes no byte counts: meta
 * blobs are not in the directory's usage (cachetier_evict.c counts chunk
 * maps and decoded copies only).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cachetier_i.h"

/* Largest blob accepted when reading: a corrupt or hostile file must not
 * make us allocate without bound. An index of 10M members is ~400 MB. */
#define META_MAX_BYTES (1ull << 31)

static void meta_filename(const char *name, char out[17])
{
	cachetier__hash_hex(name, strlen(name), out);
}

int cachetier__read_file(int dirfd, const char *name, uint64_t min, uint64_t max,
			 unsigned char **buf, size_t *len)
{
	struct stat st;
	unsigned char *p = NULL;
	size_t done = 0;
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC), err = 0;

	*buf = NULL;
	*len = 0;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max || (uint64_t)st.st_size < min) {
		err = -EBADMSG;
		goto out;
	}
	p = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!p) {
		err = -ENOMEM;
		goto out;
	}
	while (done < (size_t)st.st_size) {
		ssize_t n = read(fd, p + done, (size_t)st.st_size - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : -EBADMSG;
			goto out;
		}
		done += (size_t)n;
	}
	*buf = p;
	*len = done;
	p = NULL;
out:
	free(p);
	close(fd);
	return err;
}

static int meta_dir(struct cachetier *ct, const char *family, int create);
static void meta_dir_close(struct cachetier *ct, int fd);

/* The directory name of family's blobs: "f-<hash of family>". */
static void family_dname(const char *family, char dname[19])
{
	dname[0] = 'f';
	dname[1] = '-';
	cachetier__hash_hex(family, strlen(family), dname + 2);
}

int cachetier_meta_get_in(struct cachetier *ct, const char *family, const char *name, void **buf,
			  size_t *len)
{
	char fname[17];
	unsigned char *p;
	int dfd, err;

	*buf = NULL;
	*len = 0;
	dfd = meta_dir(ct, family, 0);
	if (dfd < 0)
		return dfd;
	meta_filename(name, fname);
	err = cachetier__read_file(dfd, fname, 0, META_MAX_BYTES, &p, len);
	meta_dir_close(ct, dfd);
	if (err == 0) {
		*buf = p;
		ct->meta_reads++;
	}
	return err;
}

int cachetier_meta_get(struct cachetier *ct, const char *name, void **buf, size_t *len)
{
	return cachetier_meta_get_in(ct, NULL, name, buf, len);
}

/* The directory of family's blobs, meta/f-<hash> (made when create), or
 * meta/ itself for family NULL: an fd to give to meta_dir_close, or -errno
 * (-ENOENT: the family has no directory yet). */
static int meta_dir(struct cachetier *ct, const char *family, int create)
{
	char dname[19];
	int fd = -1;

	if (!family)
		return ct->metafd;
	family_dname(family, dname);
	/* twice: a sweep of the whole family (cachetier_meta_sweep, keep NULL)
	 * may remove the directory between the mkdir and the open */
	for (int i = 0; i < 2 && fd < 0; i++) {
		if (create && mkdirat(ct->metafd, dname, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(ct->metafd, dname, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 && (errno != ENOENT || !create))
			break;
	}
	return fd < 0 ? -errno : fd;
}

static void meta_dir_close(struct cachetier *ct, int fd)
{
	if (fd >= 0 && fd != ct->metafd)
		close(fd);
}

int cachetier_meta_put_in(struct cachetier *ct, const char *family, const char *name,
			  const void *buf, size_t len)
{
	char fname[17];
	int dfd = meta_dir(ct, family, 1), err;

	if (dfd < 0)
		return dfd;
	meta_filename(name, fname);
	err = disk_write_atomic(dfd, fname, buf, len, 0600);
	if (err == 0)
		ct->meta_writes++;
	meta_dir_close(ct, dfd);
	return err;
}

int cachetier_meta_put(struct cachetier *ct, const char *name, const void *buf, size_t len)
{
	return cachetier_meta_put_in(ct, NULL, name, buf, len);
}

int cachetier_meta_remove(struct cachetier *ct, const char *family, const char *name)
{
	char fname[17];
	int dfd = meta_dir(ct, family, 0), err = 0;

	if (dfd < 0)
		return dfd;
	meta_filename(name, fname);
	if (unlinkat(dfd, fname, 0) < 0)
		err = -errno;
	meta_dir_close(ct, dfd);
	return err;
}

int cachetier_meta_adopt(struct cachetier *ct, const char *family, const char *name)
{
	char fname[17];
	int dfd, err = 0;

	if (!family)
		return -EINVAL;
	meta_filename(name, fname);
	/* nothing to adopt: no directory made for the family */
	if (faccessat(ct->metafd, fname, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	dfd = meta_dir(ct, family, 1);
	if (dfd < 0)
		return dfd;
	if (renameat(ct->metafd, fname, dfd, fname) < 0)
		err = -errno;
	meta_dir_close(ct, dfd);
	return err;
}

int cachetier_meta_sweep(struct cachetier *ct, const char *family, const char *keep,
			 unsigned *removed)
{
	char kname[17] = "";
	struct dirent *de;
	DIR *d;
	int dfd, err = 0;

	*removed = 0;
	if (!family)
		return -EINVAL;
	dfd = meta_dir(ct, family, 0);
	if (dfd < 0)
		return dfd == -ENOENT ? 0 : dfd;
	d = fdopendir(dfd);
	if (!d) {
		err = -errno;
		close(dfd);
		return err;
	}
	if (keep)
		meta_filename(keep, kname);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (cachetier__is_hash(de->d_name, len) && strcmp(de->d_name, kname) != 0) {
			/* ENOENT: another process removed it first (its count) */
			if (unlinkat(dfd, de->d_name, 0) == 0)
				(*removed)++;
			else if (errno != ENOENT)
				err = -errno;
		} else if (strncmp(de->d_name, ".tmp.", 5) == 0) {
			cachetier__tmp_drop(dfd, de->d_name); /* a killed put's partial blob */
		}
	}
	closedir(d);
	if (!keep && err == 0) {
		/* the whole family went: its directory too (unless a put of a
		 * running process is in it: ENOTEMPTY, left) */
		char dname[19];

		family_dname(family, dname);
		unlinkat(ct->metafd, dname, AT_REMOVEDIR);
	}
	return err;
}

/* A mapped blob (cachetier_meta_map). */
struct cachetier_meta {
	void *addr; /* NULL for an empty blob */
	size_t len;
	struct cachetier__watch *w; /* its inode's watch (cachetier_watch.c); NULL: none */
	struct ct_watch_rec *rec;
	uint64_t seen;	    /* rec's events when mapped */
	atomic_int changed; /* 1 once cachetier_meta_changed found it changed */
	int guard;	    /* its slot in cachetier_guard.c; -1: none */
};

int cachetier_meta_map_in(struct cachetier *ct, const char *family, const char *name,
			  struct cachetier_meta **m, const void **data, size_t *len)
{
	struct cachetier_meta *cm;
	struct stat st;
	char fname[17];
	int dfd, fd, err = 0;

	*m = NULL;
	*data = NULL;
	*len = 0;
	dfd = meta_dir(ct, family, 0);
	if (dfd < 0)
		return dfd;
	meta_filename(name, fname);
	fd = openat(dfd, fname, O_RDONLY | O_CLOEXEC);
	err = fd < 0 ? -errno : 0;
	meta_dir_close(ct, dfd);
	if (fd < 0)
		return err;
	cm = calloc(1, sizeof(*cm));
	if (!cm) {
		err = -ENOMEM;
		goto out;
	}
	cm->guard = -1;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > META_MAX_BYTES) {
		err = -EBADMSG;
		goto out;
	}
	cm->len = (size_t)st.st_size;
	if (cm->len) {
		/* watched before the caller validates it: a later change is seen */
		if (ct->watch && cachetier__watch_add(ct->watch, fd, &cm->rec, &cm->seen) == 0)
			cm->w = ct->watch;
		cm->addr = mmap(NULL, cm->len, PROT_READ, MAP_SHARED, fd, 0);
		if (cm->addr == MAP_FAILED) {
			cm->addr = NULL;
			err = -errno;
			goto out;
		}
		cm->guard = cachetier__guard_add(cm->addr, cm->len);
	}
	ct->meta_reads++;
	*m = cm;
	*data = cm->addr;
	*len = cm->len;
	cm = NULL;
out:
	if (cm && cm->w)
		cachetier__watch_drop(cm->w, cm->rec);
	free(cm);
	close(fd);
	return err;
}

int cachetier_meta_map(struct cachetier *ct, const char *name, struct cachetier_meta **m,
		       const void **data, size_t *len)
{
	return cachetier_meta_map_in(ct, NULL, name, m, data, len);
}

void cachetier_meta_unmap(struct cachetier_meta *m)
{
	if (!m)
		return;
	if (m->addr) {
		cachetier__guard_del(m->guard);
		munmap(m->addr, m->len);
	}
	if (m->w)
		cachetier__watch_drop(m->w, m->rec);
	free(m);
}

int cachetier_meta_watched(const struct cachetier_meta *m)
{
	return !m->addr || (m->w && m->guard >= 0);
}

int cachetier_meta_changed(struct cachetier_meta *m)
{
	if (atomic_load_explicit(&m->changed, memory_order_acquire))
		return 1;
	if (!m->w ||
	    (!cachetier__guard_hit(m->guard) && !cachetier__watch_changed(m->w, m->rec, m->seen)))
		return 0;
	/* its bytes are not what the caller validated, and a read past a new
	 * end would fault (SIGBUS): zeros from here on, in place (a failure
	 * leaves the file's pages: the caller drops the mapping's user anyway) */
	if (!atomic_exchange(&m->changed, 1))
		mmap(m->addr, m->len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	return 1;
}

/* A blob written in pieces (cachetier_meta_create). */
struct cachetier_meta_writer {
	struct cachetier *ct;
	int fd, dfd; /* the temp file; the blob's directory (meta_dir) */
	char fname[17];
	char tmp[64];
};

int cachetier_meta_create_in(struct cachetier *ct, const char *family, const char *name,
			     struct cachetier_meta_writer **w)
{
	struct cachetier_meta_writer *mw = calloc(1, sizeof(*mw));
	int err;

	*w = NULL;
	if (!mw)
		return -ENOMEM;
	mw->ct = ct;
	mw->dfd = meta_dir(ct, family, 1);
	if (mw->dfd < 0) {
		err = mw->dfd;
		free(mw);
		return err;
	}
	meta_filename(name, mw->fname);
	mw->fd = disk_tmp_open(mw->dfd, mw->fname, O_RDWR, 0600, mw->tmp, sizeof(mw->tmp));
	if (mw->fd < 0) {
		err = mw->fd;
		meta_dir_close(ct, mw->dfd);
		free(mw);
		return err;
	}
	*w = mw;
	return 0;
}

int cachetier_meta_create(struct cachetier *ct, const char *name, struct cachetier_meta_writer **w)
{
	return cachetier_meta_create_in(ct, NULL, name, w);
}

int cachetier_meta_pwrite(struct cachetier_meta_writer *w, const void *buf, size_t len,
			  uint64_t off)
{
	return disk_pwrite_all(w->fd, buf, len, off);
}

int cachetier_meta_pread(struct cachetier_meta_writer *w, void *buf, size_t len, uint64_t off)
{
	return disk_pread_all(w->fd, buf, len, off);
}

int cachetier_meta_commit(struct cachetier_meta_writer *w)
{
	int err = disk_commit(w->dfd, w->fd, w->tmp, w->fname);

	if (close(w->fd) < 0 && err == 0)
		err = -errno;
	if (err < 0)
		unlinkat(w->dfd, w->tmp, 0);
	else
		w->ct->meta_writes++;
	meta_dir_close(w->ct, w->dfd);
	free(w);
	return err;
}

void cachetier_meta_abort(struct cachetier_meta_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlinkat(w->dfd, w->tmp, 0);
	meta_dir_close(w->ct, w->dfd);
	free(w);
}

int cachetier_scratch_open(struct cachetier *ct)
{
	char tmp[64];
	int fd = openat(ct->metafd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0)
		return fd;
	if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	/* a filesystem without O_TMPFILE: a name for a moment (a kill in
	 * between leaves a .tmp.PID.N that the next open removes) */
	fd = disk_tmp_open(ct->metafd, "scratch", O_RDWR, 0600, tmp, sizeof(tmp));
	if (fd >= 0)
		unlinkat(ct->metafd, tmp, 0);
	return fd;
}
