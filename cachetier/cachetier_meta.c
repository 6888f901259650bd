/*
 * cachetier_meta.c — small metadata blobs (shard indexes, decode records),
 * stored crash-safely.
 *
 * A blob is written with disk_write_atomic (temp file, fsync, rename, fsync
 * of the directory), so a reader sees the old blob, the new blob, or
 * nothing — never a torn one. Blob contents carry their own magic, version
 * and checksum (the caller's format); this file only moves bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
