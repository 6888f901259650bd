/*
 * fs_index.c — 'shardfs index [--sidecar] [--cache-dir DIR] SOURCE'.
 *
 * Opens the core on SOURCE (fs_open, as a mount would but for the daemon's
 * parts) and builds every shard's index exactly as a mount would, leaving
 * them in the cache directory for later mounts; with --sidecar it also
 * writes NAME.tar.idx beside each shard of a local source, so that a copy
 * of the directory gets its indexes without building them again
 * (fs_index_shards, fs_core_sidecar.h).
 */
#include <errno.h>
#include <stdio.h>

#include "fs_core.h"
#include "fs_core_opt.h"
#include "fs_core_sidecar.h"
#include "fs_tools.h"

int fs_index_main(int argc, char **argv)
{
	struct fs_config *cfg;
	struct fs_index_report r;
	struct fs *fs;
	int sidecar, err;

	if (fs_config_new(&cfg) < 0)
		return 1;
	err = fs_opt_parse_index(argc, argv, cfg);
	if (err) {
		fs_config_free(cfg);
		return err > 0 ? 0 : 2;
	}
	sidecar = fs_config_sidecar(cfg);
	/* Ctrl-C (SIGINT), SIGTERM and SIGHUP end index at once, and the
	 * credential helpers it runs with it: a helper runs in a process group
	 * of its own, which the terminal's Ctrl-C does not reach. What index
	 * saves in the cache directory is crash-safe (fs_shard.c). */
	fs_exit_on_signals();
	err = fs_open(cfg, 0, &fs);
	fs_config_free(cfg);
	if (err < 0)
		return 1; /* said on stderr */
	if (fs_index_shards(fs, sidecar, &r) < 0) {
		fprintf(stderr, "shardfs: --sidecar needs a local source (upload NAME.tar.idx "
				"files yourself)\n");
		fs_close(fs);
		return 1;
	}
	printf("indexed %u shards (%llu built, %llu from the cache, %llu from sidecars)%s",
	       r.shards - r.failed, (unsigned long long)r.built, (unsigned long long)r.loaded,
	       (unsigned long long)r.from_sidecar, sidecar ? "" : "\n");
	if (sidecar)
		printf("; wrote %u sidecar indexes\n", r.sidecars);
	/* keeps a brace pattern's sizes, for offline mounts (fs_ns_keep_learned) */
	fs_close(fs);
	return r.failed ? 1 : 0;
}
