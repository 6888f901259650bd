/*
 * fs_mountid.h — which shardfs mount a path names, by what the kernel says
 * (/proc/self/mountinfo), and whether a process is its daemon. The one
 * check of every command that talks to a mount (fs_client.c): umount,
 * stats, prefetch, refresh, plan. A file's contents never decide either
 * (a ".shardfs/stats" can be anybody's file, or a shard's member).
 */
#ifndef FS_MOUNTID_H
#define FS_MOUNTID_H

#include <limits.h>
#include <sys/types.h>

enum fs_mnt_state {
	FS_MNT_LIVE = 0, /* its control file answers, on the mount's device */
	FS_MNT_DEAD,	 /* its daemon is gone (ENOTCONN) */
	FS_MNT_DENIED,	 /* another user's mount (EACCES, EPERM) */
	FS_MNT_ERROR,	 /* another error (err) */
	FS_MNT_HUNG,	 /* its daemon did not answer within FS_MNT_ANSWER_MS */
};

/* The longest the commands wait for a mount's first answer (the stat of
 * its control file) before they say that its daemon does not answer
 * (stopped, or stuck): docs/usage.md. */
#define FS_MNT_ANSWER_MS 5000

struct fs_mnt {
	char dir[PATH_MAX]; /* the mount point as the kernel has it */
	dev_t dev;	    /* its device (mountinfo's major:minor) */
	long owner;	    /* the uid that mounted it (user_id=), -1: unknown */
	int allow_other;
	enum fs_mnt_state state;
	int err; /* the errno of the control file's stat when not FS_MNT_LIVE */
};

/* m for the mount at path: path (relative to the working directory,
 * symlinks resolved where they answer, trailing slashes ignored) must be
 * the mount point itself, the topmost mount there of type fuse.shardfs,
 * and, when it answers, its .shardfs/control on that mount's device.
 * 0 (m->state says whether it answers), -ENOENT when it is no shardfs
 * mount, or another negative errno. */
int fs_mnt_identify(const char *path, struct fs_mnt *m);

/* 1 when process pid is the daemon of m: its /proc/PID/exe is a shardfs
 * binary, its command line is 'shardfs mount ...', and it holds m's mount
 * point's directory open (every daemon does, fs/fuse/fs_mount.c); else 0. */
int fs_mnt_is_daemon(const struct fs_mnt *m, long pid);
/* The daemon of m found among the processes (/proc, fs_mnt_is_daemon),
 * without asking the mount: its pid, or -1. */
long fs_mnt_find_daemon(const struct fs_mnt *m);
/* Say on stderr why the mount m at path does not answer (FS_MNT_HUNG):
 * its daemon, and whether it is stopped. */
void fs_mnt_say_hung(const char *path, const struct fs_mnt *m);
/* Process pid's state letter in /proc/PID/stat ('R', 'S', 'T', 'Z', ...),
 * or 0 when it cannot be read. */
char fs_mnt_pid_state(long pid);
/* 1 when process pid is stopped by a signal (SIGSTOP, Ctrl-Z), else 0. */
int fs_mnt_pid_stopped(long pid);

/* Is the local directory path (relative to the working directory) a
 * shardfs mount of this namespace or inside one (*holds 0), or does it
 * hold one (*holds 1)? 1 with that mount's point in mp (n bytes) and its
 * source (mountinfo's) in src (n bytes), 0 when neither, or a negative
 * errno. Never asks a shardfs mount anything (fs_plan_path_inside), so a
 * stopped daemon does not hold it up. 'shardfs index' refuses such a
 * SOURCE: it would read the mount's shards through the mount. */
int fs_mnt_source_loop(const char *path, char *mp, char *src, size_t n, int *holds);

/* "PATH is not a shardfs mount" on stderr, naming the shardfs mount path
 * lies inside when it does (a shard's directory given for its mount). */
void fs_mnt_say_not_a_mount(const char *path);

struct fs_stats_doc;
/* A control file of a running mount (MNT/.shardfs/NAME) as a malloc'd
 * string, or NULL with errno set. */
char *fs_mnt_read_ctl(const char *mnt, const char *name);
/* Its stats (MNT/.shardfs/stats): 0, or a negative errno (-EPROTO: not a
 * stats document); d is empty after an error. */
int fs_mnt_read_stats(const char *mnt, struct fs_stats_doc *d);

#endif
