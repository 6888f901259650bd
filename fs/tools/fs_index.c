/*
 * fs_index.c — 'shardfs index [--sidecar] [--cache-dir DIR] SOURCE'.
 *
 * Builds every shard's index exactly as a mount would (fs_shard_index:
 * the cache directory's copy, else a valid sidecar, else built from the
 * shard) and so leaves them in the cache directory for later mounts. With
 * --sidecar it also writes NAME.tar.idx beside each shard of a local source
 * (disk_write_atomic: temp file, fsync, rename, fsync of the directory),
 * with the identity fs_shard.c describes (codec, size, a checksum of the
 * shard's tail, its mtime and inode): a copy of
 * the directory gets its indexes built again at the first mount.
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
#include <unistd.h>

#include "fs_i.h"
#include "fs_tools.h"

int fs_sidecar_write(const char *path, const struct shardidx *ix, const struct fs_sidecar_id *id)
{
	char ident[256];
	size_t identlen, len;
	void *buf;
	int err = fs_sidecar_ident(id, ident, sizeof(ident), &identlen);

	if (err == 0)
		err = shardidx_save(ix, ident, identlen, &buf, &len);
	if (err == 0) {
		err = disk_write_atomic(AT_FDCWD, path, buf, len, 0644);
		free(buf);
	}
	return err;
}

int fs_index_main(int argc, char **argv)
{
	struct fs_config cfg;
	struct fs *fs;
	int sidecar, rc = 0, err;
	unsigned nside = 0, nfail = 0;

	memset(&cfg, 0, sizeof(cfg));
	err = fs_opt_parse_index(argc, argv, &cfg);
	if (err) {
		fs_opt_free(&cfg);
		return err > 0 ? 0 : 2;
	}
	sidecar = cfg.sidecar;
	/* Ctrl-C (SIGINT), SIGTERM and SIGHUP end index at once, and the
	 * credential helpers it runs with it: a helper runs in a process group
	 * of its own, which the terminal's Ctrl-C does not reach. What index
	 * saves in the cache directory is crash-safe (fs_shard.c). */
	fs_exit_on_signals();
	if (fs_open(&cfg, 0, &fs) < 0)
		return 1; /* said on stderr */
	if (sidecar && !backend_is_local(fs->be)) {
		fprintf(stderr, "shardfs: --sidecar needs a local source (upload NAME.tar.idx "
				"files yourself)\n");
		fs_close(fs);
		return 1;
	}
	fs_learn_all(fs); /* a brace pattern's sizes, many at once */
	for (uint32_t i = 0; i < fs->nshards; i++) {
		const struct fs_obj *o = fs_obj(fs, fs_shard(fs, i)->obj);
		struct shardidx *ix;
		struct cachetier_obj *stream;
		struct fs_sidecar_id id;
		char path[PATH_MAX];
		int n, fd;

		err = fs_shard_index(fs, i, &ix, &stream);
		if (err < 0) {
			fprintf(stderr, "shardfs: %s: cannot index: %s\n", o->key, strerror(-err));
			nfail++;
			continue;
		}
		if (!sidecar)
			continue;
		n = snprintf(path, sizeof(path), "%s/%s.idx", backend_local_path(fs->be), o->key);
		err = n < 0 || (size_t)n >= sizeof(path) ? -ENAMETOOLONG : 0;
		/* the identity of the file as it is now; one that changed since
		 * it was indexed gets a sidecar that no mount accepts */
		fd = err ? -1 : backend_open_fd(fs->be, o->key);
		if (!err && fd < 0)
			err = fd;
		if (!err) {
			err = fs_sidecar_id_fd(fd, fs_shard(fs, i)->codec, &id);
			close(fd);
		}
		if (!err && id.size != o->info.size)
			err = -ESTALE; /* changed while indexing: try again */
		if (!err)
			err = fs_sidecar_write(path, ix, &id);
		if (err < 0) {
			fprintf(stderr, "shardfs: %s: %s\n", path, strerror(-err));
			nfail++;
		} else {
			nside++;
		}
	}
	printf("indexed %u shards (%llu built, %llu from the cache, %llu from sidecars)%s",
	       fs->nshards - nfail, (unsigned long long)fs->c.index_built,
	       (unsigned long long)fs->c.index_loaded, (unsigned long long)fs->c.index_sidecar,
	       sidecar ? "" : "\n");
	if (sidecar)
		printf("; wrote %u sidecar indexes\n", nside);
	rc = nfail ? 1 : 0;
	/* keeps a brace pattern's sizes, for offline mounts (fs_ns_keep_learned) */
	fs_close(fs);
	return rc;
}
