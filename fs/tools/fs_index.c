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
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fs_core.h"
#include "fs_core_opt.h"
#include "fs_core_sidecar.h"
#include "fs_mountid.h"
#include "fs_tools.h"

/* A local SOURCE that is a shardfs mount, lies inside one or holds one
 * would be indexed through that mount: its shards read through the daemon
 * (which indexed them already, in its own cache directory). Refused, as a
 * mount refuses a source inside its own mount point: 0, or 1 after saying
 * so. A file:// URL is checked by its path (percent-escapes decoded); a
 * remote store never is. */
static int index_loop_check(const char *source)
{
	char path[PATH_MAX], mp[PATH_MAX], src[PATH_MAX];
	const char *p = source;
	size_t o = 0;
	int holds, r;

	if (strncasecmp(p, "file://", 7) == 0) {
		p += 7;
		if (strncasecmp(p, "localhost/", 10) == 0)
			p += 9;
		for (; *p && o + 1 < sizeof(path); p++) {
			unsigned v;

			if (p[0] == '%' && sscanf(p + 1, "%2x", &v) == 1 && v) {
				path[o++] = (char)v;
				p += 2;
			} else {
				path[o++] = *p;
			}
		}
		path[o] = '\0';
	} else if (strstr(p, "://")) {
		return 0;
	} else {
		snprintf(path, sizeof(path), "%s", p);
	}
	r = path[0] ? fs_mnt_source_loop(path, mp, src, sizeof(mp), &holds) : 0;
	if (r <= 0)
		return 0; /* not resolvable: opening the source says why */
	if (holds)
		fprintf(
		    stderr,
		    "shardfs index: %s holds the shardfs mount %s (of %s): indexing it would "
		    "read that mount's shards through the mount; index a directory without it\n",
		    FS_Q(source), FS_Q(mp), FS_Q(src));
	else
		fprintf(stderr,
			"shardfs index: %s is the shardfs mount %s or lies inside it: indexing it "
			"would read the shards through the mount; index the mount's source (%s) "
			"instead (the mount indexed its shards already, in its cache directory)\n",
			FS_Q(source), FS_Q(mp), FS_Q(src));
	return 1;
}

/* fs_index_shards' say: a shard that could not be indexed, or its sidecar
 * not written, on one line whatever bytes its name holds (fs_quote). */
static void index_say(const char *name, int sidecar, int err, void *arg)
{
	(void)arg;
	if (sidecar && err == -ELOOP)
		fprintf(stderr,
			"shardfs: index: sidecar %s: a symbolic link is at its name: left as it "
			"is, not followed, not replaced (remove it to write the sidecar)\n",
			FS_Q(name));
	else if (sidecar && err == -EXDEV)
		fprintf(stderr,
			"shardfs: index: sidecar %s: a directory on its path is a symbolic link "
			"that leads out of the source directory: not written\n",
			FS_Q(name));
	else if (sidecar && (err == -EISDIR || err == -EEXIST))
		fprintf(stderr,
			"shardfs: index: sidecar %s: %s is at its name: left as it is, not "
			"written\n",
			FS_Q(name),
			err == -EISDIR ? "a directory" : "a file that is not a regular one");
	else if (sidecar)
		fprintf(stderr, "shardfs: index: sidecar %s: %s\n", FS_Q(name), strerror(-err));
	else
		fprintf(stderr, "shardfs: index: %s: cannot index: %s\n", FS_Q(name),
			strerror(-err));
}

int fs_index_main(int argc, char **argv)
{
	struct fs_config *cfg;
	struct fs_index_report r;
	struct fs_mount_args a;
	struct fs *fs;
	int sidecar, err;

	if (fs_config_new(&cfg) < 0)
		return 1;
	err = fs_opt_parse_index(argc, argv, cfg);
	if (err) {
		fs_config_free(cfg);
		/* as mount's: a usage error is 2; a cache directory refused (its
		 * checks run with the options) is 1 */
		return err > 0 ? 0 : err == -EINVAL ? 2 : 1;
	}
	sidecar = fs_config_sidecar(cfg);
	fs_config_mount_args(cfg, &a);
	if (index_loop_check(a.source)) {
		fs_config_free(cfg);
		return 1;
	}
	/* Ctrl-C (SIGINT), SIGTERM and SIGHUP end index at once, and the
	 * credential helpers it runs with it: a helper runs in a process group
	 * of its own, which the terminal's Ctrl-C does not reach. What index
	 * saves in the cache directory is crash-safe (fs_shard.c). */
	fs_exit_on_signals();
	err = fs_open(cfg, 0, &fs);
	fs_config_free(cfg);
	if (err < 0)
		return 1; /* said on stderr */
	if (fs_index_shards(fs, sidecar, &r, index_say, NULL) < 0) {
		fprintf(stderr, "shardfs: --sidecar needs a local source (upload NAME.tar.idx "
				"files yourself)\n");
		fs_close(fs);
		return 1;
	}
	printf("indexed %u %s (%llu built, %llu from the cache, %llu from sidecars)",
	       r.shards - r.failed, fs_plural(r.shards - r.failed, "shard", "shards"),
	       (unsigned long long)r.built, (unsigned long long)r.loaded,
	       (unsigned long long)r.from_sidecar);
	if (sidecar)
		printf("; wrote %u sidecar %s", r.sidecars,
		       fs_plural(r.sidecars, "index", "indexes"));
	/* the exit status 1 said where the eye looks first, beside the counts */
	if (r.failed)
		printf("; %u of %u failed (said on stderr)", r.failed, r.shards);
	printf("\n");
	/* keeps a brace pattern's sizes, for offline mounts (fs_ns_keep_learned) */
	fs_close(fs);
	return r.failed ? 1 : 0;
}
