/*
 * fs_client_i.h — the helpers the client commands share (fs_client.c
 * defines them; fs_client.c and fs_prefetch.c use them): their command
 * lines, the mount they talk to, the control ioctl.
 */
#ifndef FS_CLIENT_I_H
#define FS_CLIENT_I_H

#include <stddef.h>

#include "fs_mountid.h"

/* The usage of a command that takes MOUNTPOINT (and, with more, further
 * arguments): -1 to go on, or the exit status after --help (0, on stdout)
 * or a wrong command line (2, said: an option it does not take named). A
 * "--" first is dropped from *argc, *argv (a MOUNTPOINT may then begin
 * with '-'). */
int fs_client_usage(int *argcp, char ***argvp, const char *synopsis, const char *about, int more);

/* Say why the mount m (as path names it) cannot be used; err: the errno
 * of the attempt. */
void fs_client_say_not_usable(const char *path, const struct fs_mnt *m, int err);
/* A command lost the mount at mnt while it followed it (err: the negative
 * errno of the read that failed): a daemon gone (killed) is said as
 * 'shardfs stats' says it, with what cleans up; lead: printed first (a
 * newline after a progress bar, or ""). */
void fs_client_say_lost(const char *lead, const char *mnt, int err);

/* The shardfs mount at path: 0 when it answers; else 1 after saying why
 * not. */
int fs_client_mount(const char *path, struct fs_mnt *m);

/* CLOCK_MONOTONIC in seconds. */
double fs_client_now(void);

/* Where PATH lies relative to the mount root mnt (buf: n bytes for it);
 * *outside is set when PATH names something that exists outside the
 * mount. */
const char *fs_client_mount_relative(const char *mnt, const char *path, char *buf, size_t n,
				     int *outside);

/* A PATH or FILE argument as a command line carries it: bytes up to 0x20,
 * 0x7f and a backslash as "\xHH". 0, or -ENAMETOOLONG. */
int fs_client_ctl_escape(const char *in, char *out, size_t cap);

/* Send a command line to a running mount (FS_CTL_IOC on fd, its control
 * file): what the mount's fs_ctl_command returned, or a negative errno. */
int fs_client_ctl_send(int fd, const char *cmd);

/* After a command (cmd: its name) failed on the mount at mnt: when the
 * mount counts opens refused because its cache directory was removed
 * under it (cache_dir_removed), say so on stderr, naming the directory
 * and what to do, and return 1; else 0. The mount's log said it, but by
 * default the log lay in that directory: the command is where a user
 * learns why its EIO came. */
int fs_client_say_cache_gone(const char *cmd, const char *mnt);

#endif
