/*
 * disk.c — crash-safe writes, the blob envelope and mkdir -p (disk.h).
 *
 * Non-goals: reading files (each owner bounds and checks its own), locks,
 * anything that knows a format.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "disk_lock.h"

static atomic_uint tmp_seq;

enum io_kind { IO_WRITE, IO_PWRITE, IO_PREAD };

/* All len bytes of one kind of I/O, retrying short transfers and EINTR:
 * 0, or -errno (-EIO: a transfer of nothing, e.g. the file's end). */
static int io_all(enum io_kind k, int fd, char *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = k == IO_WRITE ? write(fd, buf + done, len - done)
			    : k == IO_PWRITE
				? pwrite(fd, buf + done, len - done, (off_t)(off + done))
				: pread(fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	return 0;
}

int disk_write_all(int fd, const void *buf, size_t len)
{
	return io_all(IO_WRITE, fd, (char *)(uintptr_t)buf, len, 0);
}

int disk_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	DISK_OFF_LOOP(); /* the I/O loop never writes a file (disk_lock.h) */
	return io_all(IO_PWRITE, fd, (char *)(uintptr_t)buf, len, off);
}

int disk_pwritev_all(int fd, struct iovec *v, int n, uint64_t off)
{
	int i = 0;

	DISK_OFF_LOOP();
	while (i < n) {
		ssize_t w = pwritev(fd, v + i, n - i, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		off += (uint64_t)w;
		while (i < n && (size_t)w >= v[i].iov_len)
			w -= (ssize_t)v[i++].iov_len;
		if (i < n) {
			v[i].iov_base = (char *)v[i].iov_base + w;
			v[i].iov_len -= (size_t)w;
		}
	}
	return 0;
}

int disk_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	DISK_OFF_LOOP();
	return io_all(IO_PREAD, fd, buf, len, off);
}

ssize_t disk_read_some(int fd, void *buf, size_t len)
{
	ssize_t n;

	do
		n = read(fd, buf, len);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

/* Length of the directory part of name, its last '/' included (0: none). */
static size_t dir_len(const char *name)
{
	const char *slash = strrchr(name, '/');

	return slash ? (size_t)(slash - name) + 1 : 0;
}

int disk_tmp_open(int dirfd, const char *name, int flags, mode_t mode, char *tmp, size_t tmpsize)
{
	size_t dl = dir_len(name);
	int n = snprintf(tmp, tmpsize, "%.*s.tmp.%d.%u", (int)dl, name, (int)getpid(),
			 atomic_fetch_add(&tmp_seq, 1));
	int fd;

	if (n < 0 || (size_t)n >= tmpsize)
		return -ENAMETOOLONG;
	fd = openat(dirfd, tmp, O_CREAT | O_EXCL | O_CLOEXEC | flags, mode);
	return fd < 0 ? -errno : fd;
}

/* fsync the directory that holds name (relative to dirfd). */
static int dir_sync(int dirfd, const char *name)
{
	char dir[PATH_MAX];
	size_t dl = dir_len(name);
	int fd, err = 0;

	if (dl == 0 && dirfd != AT_FDCWD)
		return fsync(dirfd) < 0 ? -errno : 0;
	if (dl >= sizeof(dir))
		return -ENAMETOOLONG;
	if (dl == 0) {
		dir[0] = '.';
		dir[1] = '\0';
	} else {
		memcpy(dir, name, dl);
		dir[dl] = '\0';
	}
	fd = openat(dirfd, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

int disk_commit(int dirfd, int fd, const char *tmp, const char *name)
{
	if (fsync(fd) < 0 || renameat(dirfd, tmp, dirfd, name) < 0)
		return -errno;
	/* the rename is done: a directory that cannot be synced (some
	 * filesystems refuse fsync on directories) costs durability, not the
	 * new file */
	dir_sync(dirfd, name);
	return 0;
}

int disk_mkdirs(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = path[i];
	}
	return 0;
}

int disk_write_atomic(int dirfd, const char *name, const void *buf, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd, err;

	DISK_OFF_LOOP();
	fd = disk_tmp_open(dirfd, name, O_WRONLY, mode, tmp, sizeof(tmp));
	if (fd < 0)
		return fd;
	err = disk_write_all(fd, buf, len);
	if (err == 0)
		err = disk_commit(dirfd, fd, tmp, name);
	if (close(fd) < 0 && err == 0)
		err = -errno;
	if (err < 0)
		unlinkat(dirfd, tmp, 0);
	return err;
}

void disk_blob_seal(void *buf, size_t len, const char magic[8], uint32_t version)
{
	unsigned char *b = buf;

	memcpy(b, magic, 8);
	disk_le32_put(b + 8, version);
	disk_le64_put(b + 16, disk_fnv64(b + DISK_BLOB_HDR, len - DISK_BLOB_HDR));
}

int disk_blob_check(const void *buf, size_t len, const char magic[8], uint32_t version)
{
	const unsigned char *b = buf;

	if (!buf || len < DISK_BLOB_HDR || memcmp(b, magic, 8) != 0)
		return -EBADMSG;
	if (disk_le32_get(b + 8) != version)
		return -EPROTO;
	if (disk_le64_get(b + 16) != disk_fnv64(b + DISK_BLOB_HDR, len - DISK_BLOB_HDR))
		return -EBADMSG;
	return 0;
}

int disk_pid_gone(pid_t pid)
{
	char path[32], buf[512], *rp;
	ssize_t n;
	int fd;

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "PID (COMM) STATE ...": COMM may hold ')' */
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}
