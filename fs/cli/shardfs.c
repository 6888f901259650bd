/*
 * shardfs.c — the shardfs command: --help, --version, and the dispatch to
 * the FUSE adapter (mount, fs/fuse/fs_fuse.h) and the commands that need
 * no FUSE (fs/tools/fs_tools.h: umount, stats, prefetch, refresh, plan,
 * pack, index). It sees only those two headers and the core's public one
 * (fs/core/include/), and includes no FUSE header.
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "fs_core.h"
#include "fs_core_opt.h"
#include "fs_fuse.h"
#include "fs_tools.h"
#include "shardfs_config.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: shardfs COMMAND [ARGS]\n\n"
	    "Mount a WebDataset dataset (tar shards) as a read-only directory: every shard\n"
	    "shows as its raw .tar file and as a directory of its members.\n\n"
	    "commands:\n"
	    "  mount [OPTIONS] SOURCE MOUNTPOINT   mount; returns once ready ('shardfs mount "
	    "--help')\n"
	    "  umount [--force | --stale] MOUNTPOINT\n"
	    "                                      unmount (also a mount whose daemon died) and "
	    "wait\n"
	    "                                      for the daemon; a busy one only with --force\n"
	    "  stats MOUNTPOINT                    print the counters of a running mount\n"
	    "  prefetch MOUNTPOINT [PATH...]       fill the cache with PATHs (default: all), with "
	    "progress\n"
	    "  refresh MOUNTPOINT                  list the source again: show new, removed, "
	    "changed shards\n"
	    "  plan MOUNTPOINT FILE [--name NAME]  publish the order in which files will be read\n"
	    "  plan MOUNTPOINT --clear [--name NAME]\n"
	    "                                      drop that plan\n"
	    "  index [OPTIONS] SOURCE              build every shard's index ('shardfs index "
	    "--help')\n"
	    "  pack [OPTIONS] INPUT_DIR OUTPUT_PREFIX\n"
	    "                                      make WebDataset shards ('shardfs pack --help')\n"
	    "  --help, -h                          this help\n"
	    "  --version, -V                       print the version\n\n"
	    "%s"
	    "Credentials come from the environment and the usual files, never from the\n"
	    "command line; the first source that has them is used (man shardfs: CREDENTIALS):\n"
	    "  s3://  1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)\n"
	    "         2. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN, exchanged\n"
	    "            with STS (AWS_ENDPOINT_URL_STS)\n"
	    "         3. the AWS_PROFILE (default) profile of ~/.aws/credentials\n"
	    "            (AWS_SHARED_CREDENTIALS_FILE)\n"
	    "         4. that profile's credential_process (~/.aws/config, AWS_CONFIG_FILE),\n"
	    "            killed after --credential-timeout\n"
	    "         5. the container endpoint: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or\n"
	    "            _FULL_URI (+ AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE])\n"
	    "         6. the EC2 instance metadata service (IMDSv2; AWS_EC2_METADATA_DISABLED)\n"
	    "  gs://  GOOGLE_OAUTH_ACCESS_TOKEN, GCS_HMAC_ACCESS_ID/GCS_HMAC_SECRET, the AWS keys\n"
	    "         of 1 and 3, then the GCE metadata server (GCE_METADATA_HOST; NO_GCE_CHECK)\n"
	    "Metadata services are asked with short timeouts (AWS_METADATA_SERVICE_TIMEOUT,\n"
	    "GCE_METADATA_TIMEOUT). Also: AWS_REGION, AWS_ENDPOINT_URL(_S3), AIS_ENDPOINT.\n",
	    fs_opt_sources_help);
}

static void version(void)
{
	int major, minor;

	fs_fuse_lib_version(&major, &minor);
	printf("shardfs %s (libfuse %d.%d)\n", SHARDFS_VERSION, major, minor);
}

/* glibc gives each thread that allocates an arena of its own, up to 8 per
 * core, and an arena keeps the pages it once held. The daemon's 30 to 50
 * threads (FUSE workers with libfuse's 1 MiB request buffers, fills,
 * fetches) then hold more and more of it: in stress-soak on 2 cores, the
 * default let a local mount grow from 25 MB to 57 MB in 120 s (45 MB after
 * a plateau at 300 s, 82 MB for the remote mount); with 4 arenas three runs
 * ended at 25 to 43 MB (51 to 55 MB remote). Reads of 8 KiB and more
 * splice from the cache files; libfuse copies smaller replies through
 * malloc, which 4 arenas serve without contention at these rates. */
#define MAIN_MALLOC_ARENAS 4

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, MAIN_MALLOC_ARENAS);
#endif

	if (!cmd) {
		usage(stderr);
		return 2;
	}
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0 ||
	    strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		/* they take nothing after them: 'shardfs --version extra' is a
		 * mistake said, not a version printed */
		if (argc > 2) {
			fprintf(stderr, "shardfs: %s takes no arguments (given %s)\n", cmd,
				FS_Q(argv[2]));
			return 2;
		}
		if (cmd[1] == 'V' || strcmp(cmd, "--version") == 0)
			version();
		else
			usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "mount") == 0)
		return fs_fuse_mount_main(argc - 2, argv + 2);
	if (strcmp(cmd, "umount") == 0 || strcmp(cmd, "unmount") == 0)
		return fs_umount_main(argc - 2, argv + 2);
	if (strcmp(cmd, "stats") == 0)
		return fs_stats_main(argc - 2, argv + 2);
	if (strcmp(cmd, "prefetch") == 0)
		return fs_prefetch_main(argc - 2, argv + 2);
	if (strcmp(cmd, "refresh") == 0)
		return fs_refresh_main(argc - 2, argv + 2);
	if (strcmp(cmd, "plan") == 0)
		return fs_plan_main(argc - 2, argv + 2);
	if (strcmp(cmd, "pack") == 0)
		return fs_pack_main(argc - 2, argv + 2);
	if (strcmp(cmd, "index") == 0)
		return fs_index_main(argc - 2, argv + 2);
	if (!cmd[0])
		fprintf(stderr, "shardfs: COMMAND is empty (see 'shardfs --help')\n");
	else
		fprintf(stderr, "shardfs: unknown command '%s' (see 'shardfs --help')\n",
			FS_Q(cmd));
	return 2;
}
