/*
 * fs_core_sidecar.h — shard indexes for the offline tools: indexing every
 * shard of an open core (shardfs index) and the sidecar index NAME.tar.idx
 * written beside a local shard (index --sidecar, pack). Part of the core's
 * public API (fs_core.h).
 */
#ifndef FS_CORE_SIDECAR_H
#define FS_CORE_SIDECAR_H

#include <stddef.h>
#include <stdint.h>

struct fs;
struct shardidx; /* shardidx.h: the index format */

/* How a shard's bytes are stored: the values of the cache tier's enum
 * cachetier_codec (fs_core_index.c checks that they agree). */
enum fs_codec { FS_CODEC_RAW = 0, FS_CODEC_GZIP = 1, FS_CODEC_ZSTD = 2 };

/* The identity a sidecar NAME.tar.idx is saved with (fs_shard.c): codec,
 * size, an FNV-1a of the shard's last FS_SIDECAR_TAIL bytes, and the local
 * file's mtime (ns) and inode. */
#define FS_SIDECAR_TAIL (64u * 1024)
struct fs_sidecar_id {
	int codec;
	uint64_t size, tail_fnv, mtime_ns, ino, ctime_ns;
};
int fs_sidecar_ident(const struct fs_sidecar_id *id, char *buf, size_t bufsize, size_t *len);
/* The identity of the local shard file open at fd (fstat and a read of
 * its tail). */
int fs_sidecar_id_fd(int fd, int codec, struct fs_sidecar_id *id);
/* Write index ix as the sidecar name (one component) in the directory open
 * at dirfd (beside its shard), for the shard whose identity is id (index
 * --sidecar: the shard's directory below the source's top; pack: its output
 * directory, opened once): a temp
 * file created O_EXCL in dirfd, then renameat into place (disk_write_atomic).
 * Whatever is at name but a regular file is left alone: -ELOOP for a
 * symbolic link (never followed, never replaced), -EISDIR, -EEXIST. 0 or
 * -errno (fs_core_index.c). */
int fs_sidecar_write_at(int dirfd, const char *name, const struct shardidx *ix,
			const struct fs_sidecar_id *id);

/* What fs_index_shards did. */
struct fs_index_report {
	uint32_t shards;   /* shards of the source */
	uint32_t failed;   /* of those, not indexed, or their sidecar not written */
	uint32_t sidecars; /* sidecars written */
	uint64_t built, loaded, from_sidecar; /* indexes built from the shard, loaded
					       * from the cache directory, taken
					       * from a sidecar */
};
/* Index every shard of fs as a mount would (fs_shard_index: the cache
 * directory's copy, else a valid sidecar, else built from the shard),
 * leaving the indexes in the cache directory; with sidecar, also write
 * NAME.tar.idx beside each shard (a local source only: -EINVAL otherwise,
 * before any work). A brace pattern's sizes are learned first (many at
 * once). Each shard's error is counted in r->failed and handed to say
 * (name: the shard's key, or the path of its sidecar that could not be
 * written; err: a negative errno; arg: say_arg), which says it: a name is
 * any bytes of the source, so the caller quotes it (fs_quote). Returns 0
 * or -EINVAL. Blocks. */
int fs_index_shards(struct fs *fs, int sidecar, struct fs_index_report *r,
		    void (*say)(const char *name, int sidecar, int err, void *arg), void *say_arg);

#endif
