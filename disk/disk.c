/*
 * disk.c — crash-safe writes and the blob envelope (disk.h).
 *
 * Non-goals: reading files (each owner bounds and checks its own), locks,
 * anything that knows a format.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "disk.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#endif

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
	return io_all(IO_PWRITE, fd, (char *)(uintptr_t)buf, len, off);
}

int disk_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
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

int disk_write_atomic(int dirfd, const char *name, const void *buf, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd = disk_tmp_open(dirfd, name, O_WRONLY, mode, tmp, sizeof(tmp)), err;

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

/* ---- CRC32C ---- */

#define CRC32C_POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t crc_tab[8][256];
static atomic_int crc_tab_ready; /* 0 none, 1 being built, 2 built */
static atomic_int crc_hw = -1;	 /* -1: not asked the CPU yet */

static void crc_tab_build(void)
{
	int expect = 0;

	if (atomic_load_explicit(&crc_tab_ready, memory_order_acquire) == 2)
		return;
	if (!atomic_compare_exchange_strong(&crc_tab_ready, &expect, 1)) {
		while (atomic_load_explicit(&crc_tab_ready, memory_order_acquire) != 2)
			; /* another thread builds it: microseconds */
		return;
	}
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++) {
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] =
			    (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
	}
	atomic_store_explicit(&crc_tab_ready, 2, memory_order_release);
}

uint32_t disk_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
	const unsigned char *p = data;

	crc_tab_build();
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = crc ^ disk_le32_get(p), hi = disk_le32_get(p + 4);

		crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		      crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
		      crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^
		      crc_tab[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

__attribute__((target("sse4.2"))) static uint32_t crc_hw_update(uint32_t crc, const void *data,
								size_t len)
{
	const unsigned char *p = data;
	uint64_t c = ~crc;

	while (len && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8((uint32_t)c, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c = _mm_crc32_u64(c, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

int disk_crc32c_hw(void)
{
	int hw = atomic_load_explicit(&crc_hw, memory_order_relaxed);

	if (hw < 0) {
		__builtin_cpu_init();
		hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		atomic_store_explicit(&crc_hw, hw, memory_order_relaxed);
	}
	return hw;
}

uint32_t disk_crc32c_update(uint32_t crc, const void *data, size_t len)
{
	return disk_crc32c_hw() ? crc_hw_update(crc, data, len) : disk_crc32c_sw(crc, data, len);
}
#else
int disk_crc32c_hw(void)
{
	(void)crc_hw;
	return 0;
}

uint32_t disk_crc32c_update(uint32_t crc, const void *data, size_t len)
{
	return disk_crc32c_sw(crc, data, len);
}
#endif
