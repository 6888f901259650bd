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
 * cannot change or truncate the bytes under a reader. The mapping goes
 * when its last reference is dropped.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
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

int cachetier_meta_get(struct cachetier *ct, const char *name, void **buf, size_t *len)
{
	char fname[17];
	unsigned char *p;
	int err;

	*buf = NULL;
	*len = 0;
	meta_filename(name, fname);
	err = cachetier__read_file(ct->metafd, fname, 0, META_MAX_BYTES, &p, len);
	if (err == 0) {
		*buf = p;
		ct->meta_reads++;
	}
	return err;
}

int cachetier_meta_put(struct cachetier *ct, const char *name, const void *buf, size_t len)
{
	char fname[17];
	int err;

	meta_filename(name, fname);
	err = disk_write_atomic(ct->metafd, fname, buf, len, 0600);
	if (err == 0)
		ct->meta_writes++;
	return err;
}

/* A mapped blob (cachetier_meta_map). */
struct cachetier_meta {
	void *addr; /* NULL for an empty blob */
	size_t len;
	atomic_uint refs;
};

int cachetier_meta_map(struct cachetier *ct, const char *name, struct cachetier_meta **m,
		       const void **data, size_t *len)
{
	struct cachetier_meta *cm;
	struct stat st;
	char fname[17];
	int fd, err = 0;

	*m = NULL;
	*data = NULL;
	*len = 0;
	meta_filename(name, fname);
	fd = openat(ct->metafd, fname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	cm = calloc(1, sizeof(*cm));
	if (!cm) {
		err = -ENOMEM;
		goto out;
	}
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
		cm->addr = mmap(NULL, cm->len, PROT_READ, MAP_SHARED, fd, 0);
		if (cm->addr == MAP_FAILED) {
			cm->addr = NULL;
			err = -errno;
			goto out;
		}
	}
	atomic_init(&cm->refs, 1);
	ct->meta_reads++;
	*m = cm;
	*data = cm->addr;
	*len = cm->len;
	cm = NULL;
out:
	free(cm);
	close(fd);
	return err;
}

void cachetier_meta_ref(struct cachetier_meta *m)
{
	atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void cachetier_meta_unmap(struct cachetier_meta *m)
{
	if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (m->addr)
		munmap(m->addr, m->len);
	free(m);
}

/* A blob written in pieces (cachetier_meta_create). */
struct cachetier_meta_writer {
	struct cachetier *ct;
	int fd;
	char fname[17];
	char tmp[64];
};

int cachetier_meta_create(struct cachetier *ct, const char *name, struct cachetier_meta_writer **w)
{
	struct cachetier_meta_writer *mw = calloc(1, sizeof(*mw));

	*w = NULL;
	if (!mw)
		return -ENOMEM;
	mw->ct = ct;
	meta_filename(name, mw->fname);
	mw->fd = disk_tmp_open(ct->metafd, mw->fname, O_RDWR, 0600, mw->tmp, sizeof(mw->tmp));
	if (mw->fd < 0) {
		int err = mw->fd;

		free(mw);
		return err;
	}
	*w = mw;
	return 0;
}

int cachetier_meta_pwrite(struct cachetier_meta_writer *w, const void *buf, size_t len,
			  uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n =
		    pwrite(w->fd, (const char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

int cachetier_meta_pread(struct cachetier_meta_writer *w, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(w->fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

int cachetier_meta_commit(struct cachetier_meta_writer *w)
{
	int err = disk_commit(w->ct->metafd, w->fd, w->tmp, w->fname);

	if (close(w->fd) < 0 && err == 0)
		err = -errno;
	if (err < 0)
		unlinkat(w->ct->metafd, w->tmp, 0);
	else
		w->ct->meta_writes++;
	free(w);
	return err;
}

void cachetier_meta_abort(struct cachetier_meta_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlinkat(w->ct->metafd, w->tmp, 0);
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
