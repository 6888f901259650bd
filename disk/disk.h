/*
 * disk.h — the on-disk toolkit every module shares: little-endian fields,
 * FNV-1a, a binary search, CRC32C, a crash-safe file write and the
 * envelope of a metadata blob.
 *
 * The bottom module: it depends on nothing of ours (libc only), and every
 * module may use it. Formats themselves stay with their owners (shardidx
 * saves indexes, cachetier its maps and records, fs its listing and class
 * map through cachetier's blobs); this header only gives them one way to
 * lay out integers, to checksum and to replace a file.
 *
 * Thread safety: every function is reentrant; disk_tmp_open numbers its
 * temp files with a process-wide atomic counter.
 */
#ifndef SHARDFS_DISK_H
#define SHARDFS_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* ---- little-endian fixed-width fields (unaligned pointers are fine) ---- */

static inline void disk_le16_put(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline void disk_le32_put(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void disk_le64_put(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint16_t disk_le16_get(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t disk_le32_get(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t disk_le64_get(const unsigned char *p)
{
	return (uint64_t)disk_le32_get(p) | (uint64_t)disk_le32_get(p + 4) << 32;
}

/* ---- FNV-1a ------------------------------------------------------------
 * Checksums of every on-disk format (64-bit) and the hashes of in-memory
 * tables (shardidx's name table: 32-bit). _update continues a hash, so a
 * caller can hash pieces (or leave out a field) without a copy. Not a
 * cryptographic hash: it detects torn and corrupted files, not forgeries. */
#define DISK_FNV32_INIT 2166136261u
#define DISK_FNV64_INIT 0xcbf29ce484222325ull

static inline uint32_t disk_fnv32_update(uint32_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

static inline uint64_t disk_fnv64_update(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static inline uint64_t disk_fnv64(const void *data, size_t len)
{
	return disk_fnv64_update(DISK_FNV64_INIT, data, len);
}

/* ---- binary search -----------------------------------------------------
 * The one binary search of every module, over indexes [lo, hi) of a
 * sorted sequence that only the caller knows how to read: cmp(ctx, i)
 * compares element i with what is sought, negative when i comes before
 * it, 0 when i is it, positive when i comes after it. Returns an index
 * whose cmp is 0, with *found 1 (any one of several equal elements);
 * else, with *found 0, the first index whose cmp is positive (hi when
 * none): where the sought would go. A cmp that never answers 0 asks for
 * that split point: the first element that is not before. found may be
 * NULL. About log2(hi - lo) calls of cmp; inline, so a cmp the compiler
 * sees is inlined too. Reentrant; blocks only as cmp does. */
static inline size_t disk_bsearch(size_t lo, size_t hi, int (*cmp)(const void *ctx, size_t i),
				  const void *ctx, int *found)
{
	if (found)
		*found = 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = cmp(ctx, mid);

		if (c < 0) {
			lo = mid + 1;
		} else if (c > 0) {
			hi = mid;
		} else {
			if (found)
				*found = 1;
			return mid;
		}
	}
	return lo;
}

/* ---- CRC32C (Castagnoli) ----------------------------------------------
 * The checksum of cached bytes (cachetier's units): computed as a fill's
 * bytes arrive and checked when another process's (or mount's) unit is
 * first read. _update continues a CRC (start with 0; pieces in order give
 * the CRC of the whole), by the fastest method the CPU has (cpuid, once;
 * disk_crc.c): AVX-512's VPCLMULQDQ folding 256 bytes a step (runs of
 * 1 KiB or more), else three interleaved streams of SSE4.2's crc32 joined
 * by PCLMULQDQ, else SSE4.2's crc32 alone, else a table (slicing by 8).
 * Reentrant; never blocks. disk_crc32c_sw: the table always (tests, the
 * bench); disk_crc32c_by: a given method (tests, the bench: only one that
 * disk_crc32c_supported says the CPU has). */
enum disk_crc_method {
	DISK_CRC_TABLE,
	DISK_CRC_SSE42,
	DISK_CRC_SSE42X3,
	DISK_CRC_VPCLMUL,
	DISK_CRC_METHODS
};
uint32_t disk_crc32c_update(uint32_t crc, const void *data, size_t len);
uint32_t disk_crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t disk_crc32c_by(int method, uint32_t crc, const void *data, size_t len);
int disk_crc32c_supported(int method);
/* the method disk_crc32c_update uses, and a method's name */
int disk_crc32c_method(void);
const char *disk_crc32c_name(int method);
/* 1 when disk_crc32c_update uses one of the CPU's instructions. */
int disk_crc32c_hw(void);

/* ---- crash-safe writes -------------------------------------------------
 * A file is replaced by writing a temp file in the same directory, fsyncing
 * it, renaming it over the final name and fsyncing the directory: a reader
 * (or a restart after a crash or power loss) sees the old file, the new
 * file, or none — never a torn one. Temp files are named ".tmp.PID.N" in
 * the directory of the final name (cachetier's scan removes those a killed
 * process left in its directories).
 *
 * dirfd is a directory fd or AT_FDCWD; name may contain '/'. 0 or -errno;
 * on failure the temp file is gone and the old file is untouched. */

/* write(2) all of buf, retrying short writes and EINTR. 0 or -errno. */
int disk_write_all(int fd, const void *buf, size_t len);
/* pwrite(2) all of buf at off, retrying short writes and EINTR. 0 or
 * -errno (-EIO: nothing written). */
int disk_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
/* pwritev(2) all of v[0..n) at off, a short write going on from where it
 * stopped, EINTR retried; v is changed (the caller's copy). 0 or -errno
 * (-EIO: nothing written). */
int disk_pwritev_all(int fd, struct iovec *v, int n, uint64_t off);
/* pread(2) len bytes at off, retrying short reads and EINTR. 0, -EIO (the
 * file ends first) or -errno. */
int disk_pread_all(int fd, void *buf, size_t len, uint64_t off);

/* read(2) once into buf (at most len bytes), retrying EINTR: the count
 * (0 at the end of the file or stream) or -errno (-EAGAIN from a
 * non-blocking fd). For loops that take a stream piece by piece. */
ssize_t disk_read_some(int fd, void *buf, size_t len);

/* Create a new temp file (O_CREAT | O_EXCL | O_CLOEXEC | flags, mode) for
 * the final name 'name'; its path relative to dirfd goes to tmp[tmpsize].
 * Returns the fd or -errno. */
int disk_tmp_open(int dirfd, const char *name, int flags, mode_t mode, char *tmp, size_t tmpsize);

/* Make temp file tmp (open as fd, which the caller still owns and closes)
 * the file 'name': fsync fd, rename, fsync the directory. 0 or -errno; on
 * failure the caller unlinks tmp. */
int disk_commit(int dirfd, int fd, const char *tmp, const char *name);

/* disk_tmp_open + disk_write_all + disk_commit of buf as dirfd/name. */
int disk_write_atomic(int dirfd, const char *name, const void *buf, size_t len, mode_t mode);

/* mkdir -p: every component of path made with mode where it is missing
 * (an existing one, of any kind, is left as it is). 0 or -errno of the
 * first mkdir that failed; -ENAMETOOLONG for an empty path or one of
 * PATH_MAX or more. */
int disk_mkdirs(const char *path, mode_t mode);

/* Has process pid ended (no such process, or a zombie)? 1 or 0; 0 for pid <= 0. What a
 * file named after its writer's pid (temp files .tmp.PID.N, per-process state) and a plan
 * named pid-PID are reaped by. */
int disk_pid_gone(pid_t pid);

/* ---- the envelope of a metadata blob -----------------------------------
 * A small format that has nothing else to put in its header starts with
 * DISK_BLOB_HDR bytes: 8 magic, u32 version, u32 for the format's own use
 * (a count), u64 FNV-1a 64 of every byte after the header. */
#define DISK_BLOB_HDR 24

/* Fill in magic, version and checksum of buf[0..len) (len >= DISK_BLOB_HDR;
 * bytes 12..16 and the payload are the caller's, written before). */
void disk_blob_seal(void *buf, size_t len, const char magic[8], uint32_t version);

/* 0; -EBADMSG: too short, another magic or a checksum that fails (torn or
 * corrupted); -EPROTO: a version this build does not read (the caller
 * rebuilds it). The version is checked before the checksum. */
int disk_blob_check(const void *buf, size_t len, const char magic[8], uint32_t version);

#endif
