/*
 * fs_core_index.c — shard indexes for the offline tools
 * (fs_core_sidecar.h): every shard of an open core indexed exactly as a
 * mount would (fs_shard_index: the cache directory's copy, else a valid
 * sidecar, else built from the shard), and sidecar indexes NAME.tar.idx
 * written beside local shards (disk_write_atomic: temp file, fsync,
 * rename, fsync of the directory), with the identity fs_shard.c describes
 * (codec, size, a checksum of the shard's tail, its mtime and inode).
 *
 * Non-goals: writing sidecars to remote stores (upload them with the
 * store's own tools: they are plain files).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_i.h"

_Static_assert(FS_CODEC_RAW == (int)CACHETIER_RAW && FS_CODEC_GZIP == (int)CACHETIER_GZIP &&
		   FS_CODEC_ZSTD == (int)CACHETIER_ZSTD,
	       "enum fs_codec is enum cachetier_codec");

int fs_sidecar_write_at(int dirfd, const char *name, const struct shardidx *ix,
			const struct fs_sidecar_id *id)
{
	char ident[256];
	size_t identlen, len;
	struct stat st;
	void *buf;
	int err = fs_sidecar_ident(id, ident, sizeof(ident), &identlen);

	/* what lies at the name: nothing, or a sidecar of before; a symbolic
	 * link (or anything else) is left as it is, not followed, not replaced
	 * (the rename below would replace a link planted after this look, never
	 * follow it) */
	if (err == 0 && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
		err = S_ISLNK(st.st_mode) ? -ELOOP : S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST;
	if (err == 0)
		err = shardidx_save(ix, ident, identlen, &buf, &len);
	if (err == 0) {
		/* a temp file created O_EXCL beside it, renamed into place
		 * (renameat relative to dirfd) */
		err = disk_write_atomic(dirfd, name, buf, len, 0644);
		free(buf);
	}
	return err;
}

/* Write shard i's index ix as its sidecar, with the identity of the file
 * as it is now (one that changed since it was indexed gets a sidecar that
 * no mount accepts), in the shard's directory as the backend opens it
 * below the source's top (backend_local_dirfd: a directory swapped for a
 * link out of the tree is refused, -EXDEV): 0 or -errno; path gets the
 * sidecar's path (for the messages). */
static int index_sidecar(struct fs *fs, uint32_t i, const struct shardidx *ix, char *path,
			 size_t size)
{
	const struct fs_obj *o = fs_obj(fs, fs_shard(fs, i)->obj);
	struct fs_sidecar_id id;
	char name[NAME_MAX + 1];
	const char *base;
	int n, fd, dirfd, err;

	n = snprintf(path, size, "%s/%s.idx", backend_local_source(fs->be), o->key);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	fd = backend_open_fd(fs->be, o->key);
	if (fd < 0)
		return fd;
	err = fs_sidecar_id_fd(fd, fs_shard(fs, i)->codec, &id);
	close(fd);
	if (!err && id.size != o->info.size)
		err = -ESTALE; /* changed while indexing: try again */
	if (err)
		return err;
	dirfd = backend_local_dirfd(fs->be, o->key, &base);
	if (dirfd < 0)
		return dirfd;
	n = snprintf(name, sizeof(name), "%s.idx", base);
	err = n < 0 || (size_t)n >= sizeof(name) ? -ENAMETOOLONG
						 : fs_sidecar_write_at(dirfd, name, ix, &id);
	close(dirfd);
	return err;
}

int fs_index_shards(struct fs *fs, int sidecar, struct fs_index_report *r,
		    void (*say)(const char *name, int sidecar, int err, void *arg), void *say_arg)
{
	memset(r, 0, sizeof(*r));
	if (sidecar && !backend_is_local(fs->be))
		return -EINVAL;
	fs_learn_all(fs); /* a brace pattern's sizes, many at once */
	r->shards = fs->nshards;
	for (uint32_t i = 0; i < fs->nshards; i++) {
		const struct fs_obj *o = fs_obj(fs, fs_shard(fs, i)->obj);
		struct shardidx *ix;
		struct cachetier_obj *stream;
		char path[PATH_MAX];
		int err = fs_shard_index(fs, i, &ix, &stream);

		if (err < 0) {
			say(o->key, 0, err, say_arg);
			r->failed++;
			continue;
		}
		if (!sidecar)
			continue;
		path[0] = '\0';
		err = index_sidecar(fs, i, ix, path, sizeof(path));
		if (err < 0) {
			say(path[0] ? path : o->key, 1, err, say_arg);
			r->failed++;
		} else {
			r->sidecars++;
		}
	}
	r->built = fs->c.index_built;
	r->loaded = fs->c.index_loaded;
	r->from_sidecar = fs->c.index_sidecar;
	return 0;
}
