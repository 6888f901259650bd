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

/* fs_client.c — the one way a path (or any other argument a user gave)
 * reaches a message of the shardfs command: its bytes as they are, but a
 * backslash as "\\", a newline, tab and carriage return as "\n", "\t",
 * "\r", every other byte below 0x20, 0x7f and each byte that is not part
 * of UTF-8 as "\xHH", and an empty one as ''; so a message stays one line
 * and says which bytes were given. What does not fit buf (n bytes) is cut
 * and said: "...(N bytes)". Returns buf. FS_Q(s) quotes into a buffer of
 * its own that lives to the end of the enclosing block (one per use). */
#define FS_QUOTE_MAX 512
const char *fs_quote(const char *s, char *buf, size_t n);
#define FS_Q(s) fs_quote((s), (char[FS_QUOTE_MAX]){0}, FS_QUOTE_MAX)

#endif
