/*
 * fs_tools.h — the commands that need no FUSE (fs/tools/), for the
 * shardfs command (fs/cli/shardfs.c).
 * Each *_main takes argv after the command's name and returns the exit
 * status (0; 1 an error said on stderr; 2 a usage error).
 */
#ifndef FS_TOOLS_H
#define FS_TOOLS_H

#include <stddef.h>

/* fs_pack.c / fs_index.c — the pack and index commands */
int fs_pack_main(int argc, char **argv);
struct fs_opt_cmd;
extern const struct fs_opt_cmd fs_pack_cmd; /* pack's options (the completion's too) */
int fs_index_main(int argc, char **argv);
/* fs_client.c — the commands that talk to a running mount: shardfs umount,
 * stats, prefetch, refresh, plan. */
int fs_umount_main(int argc, char **argv);
int fs_stats_main(int argc, char **argv);
int fs_prefetch_main(int argc, char **argv);
int fs_refresh_main(int argc, char **argv);
int fs_plan_main(int argc, char **argv);

/* fs_quote and FS_Q, the one way a path (or any other argument a user
 * gave) reaches a message of the shardfs command: fs_core.h (fs_log.c),
 * shared with the mount's and the options' messages. */
#include "fs_core.h"

#endif
