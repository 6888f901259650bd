/*
 * fs_ctl.h — the control files (.shardfs/: stats, metrics, plans, control)
 * and the commands written to control. What they say and the commands:
 * fs_ctl.c; the files as a view, their snapshots and the prefetch run:
 * fs_view_ctl.c. The control files' state (the snapshots, one per open or
 * one per file without OPEN requests, and the latest prefetch run) lives
 * behind an opaque struct fs_ctl_state that fs->ctl points to, made by fs_open
 * (fs_ctl_new) and freed by fs_close (fs_ctl_clear, then fs_ctl_free); it
 * owns its lock, and nothing outside fs_view_ctl.c touches its fields.
 *
 * The counters are not here: struct fs_counters (fs_i.h) stays a plain
 * struct of relaxed atomics in struct fs, because every part of the core
 * (namespace, shards, views, plans, learning) counts into it without a lock
 * or a call; fs_ctl.c only reads it to render stats and metrics.
 */
#ifndef FS_CTL_H
#define FS_CTL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs_core_ctl.h"

struct fs_op_stop; /* fs_core_ops.h */

struct fs;
struct fs_ctl_state;

/* The control files' state, empty: 0, or -ENOMEM. */
int fs_ctl_new(struct fs_ctl_state **c);
/* Free it (after fs_ctl_clear; NULL: nothing). */
void fs_ctl_free(struct fs_ctl_state *c);
/* fs_view_ctl.c: free every snapshot of the control files, the plans
 * (fs_plan_free_all) and the loader indexes (fs_lidx_clear), at unmount,
 * when no request runs any more. */
void fs_ctl_clear(struct fs *fs);

/* fs_ctl.c: render control file 'which' into a malloc'd buffer: 0 or
 * -ENOMEM. */
int fs_ctl_render(struct fs *fs, enum fs_ctl which, char **buf, size_t *len);

/* Carry out the commands written to .shardfs/control (one per line; blanks
 * at a line's ends are trimmed, so a PATH or FILE argument carries a byte
 * as "\xHH": 'shardfs prefetch' and 'shardfs plan' send every byte up to
 * 0x20, 0x7f and '\' so, and only "\x" with two hex digits is decoded):
 *   prefetch [PATH]   fill the cache with every object at or below PATH
 *                     (relative to the mount root; none: everything), as
 *                     part of the sender's prefetch run (fs_ctl_run_of)
 *   prefetch-start    begin a new prefetch run for the sender
 *   prefetch-wait RUN MS  wait until prefetch run RUN is over (every byte of
 *                     its objects cached, or no prefetch of them running, as
 *                     the prefetch_run_* counters say) or no longer the
 *                     latest run: 1; or until MS milliseconds passed (at most
 *                     FS_CTL_WAIT_MAX_MS): 0. The run is looked at every
 *                     10 ms, at the cost of one or two of its objects a look
 *                     (fs_ctl.c); 'shardfs prefetch' follows its run so
 *                     instead of reading the stats file over and over
 *                     A 'umount-notice' ends every wait at once: -ESHUTDOWN
 *   prefetch-check MS [PATH]  whether every byte of the objects at or below
 *                     PATH (as 'prefetch PATH' names them; none: everything) is
 *                     cached, whichever run fetched it: waits until no
 *                     prefetch of them runs or MS milliseconds passed (at most
 *                     FS_CTL_WAIT_MAX_MS), looking every 10 ms, then answers
 *                     enum fs_ctl_check (fs_core_ctl.h). Begins no run, tags
 *                     nothing, asks for no fill: 'shardfs prefetch' asks it for
 *                     its PATHs once another run overtook its own. Ended as
 *                     prefetch-wait is (-EINTR, -ESHUTDOWN)
 *   umount-notice MS  'shardfs umount' found the mount busy with control-file
 *                     users only: for MS milliseconds (at most
 *                     FS_CTL_NOTICE_MAX_MS; 0 ends the notice) every
 *                     prefetch-wait, running or new, ends at once with
 *                     -ESHUTDOWN, so that 'shardfs prefetch' stops following
 *                     its run and lets go of the control file
 *   refresh           list the source again (fs_ns_refresh) and wait until
 *                     the kernel's caches of what changed are invalidated
 *   plan [NAME] FILE  publish the reading plan in FILE (an absolute path the
 *                     daemon reads) under NAME (fs_plan_publish; none: the
 *                     sender's, "pid-PID" with pid, the sending process)
 *   plan-clear [NAME] drop the plan NAME (none: the sender's)
 * A PATH inside a shard's member directory prefetches the whole shard (the
 * cache holds objects, a member is a range of its shard).
 * Returns 0, 1 when a PATH named something inside a shard (so its shard
 * was prefetched), a prefetch-wait's or prefetch-check's result, or -EINVAL / -ENOENT for a bad
 * command or path, or the listing's error of a refresh, or -EINTR (stop:
 * the sender gave up waiting while a plan file was read or a prefetch-wait
 * waited; counted in prefetch_wait_interrupts), or -ESHUTDOWN (a
 * prefetch-wait under an umount-notice). */
int fs_ctl_command(struct fs *fs, const char *buf, size_t len, pid_t pid,
		   const struct fs_op_stop *stop);
/* fs_ctl_command sent by user uid, group gid (the request's sender; the
 * daemon's own user and group for fs_ctl_command): a file a command names
 * (plan FILE) is opened with the sender's rights, never the daemon's
 * (fs_ctl_open_as). */
int fs_ctl_command_as(struct fs *fs, const char *buf, size_t len, uid_t uid, gid_t gid, pid_t pid,
		      const struct fs_op_stop *stop);
/* open(path, flags) with the rights of user uid, group gid, no
 * supplementary group: the daemon's own when uid is root's or the daemon's;
 * else, in a daemon run as root, this thread's file-system ids set to the
 * sender's for the open (setfsuid, setfsgid: per thread) and put back; in
 * one that is not, only a file uid owns or anybody may read. Returns the
 * fd or -errno (-EACCES: not the sender's to read). */
int fs_ctl_open_as(const char *path, int flags, uid_t uid, gid_t gid);
/* fn(arg) with the file-system rights of user uid, group gid, no
 * supplementary group, on this thread only (fs_ctl_open_as's switch; the
 * daemon's other threads keep theirs): fn's answer, or -EPERM (a daemon
 * not run as root and uid neither root's nor the daemon's: fn not run),
 * -EACCES (the ids did not take), -ENOMEM. */
int fs_ctl_as(uid_t uid, gid_t gid, int (*fn)(void *), void *arg);

/* fs_view_ctl.c: the latest prefetch run. A run begins at a
 * 'prefetch-start' command, or at a prefetch command from another process
 * than the run's; its objects carry its id in fs_obj.prefetch, and the
 * prefetch_run_* counters are of its objects only. Any thread; each takes
 * the state's lock only for itself (never blocks on anything else).
 * fs_ctl_run_of: the run a prefetch command from pid belongs to (ids 1, 2,
 * ...): the current one, or a new one when pid did not begin it or start is
 * set. fs_ctl_run_cached: the first time run names an object, add what is
 * cached of it (bytes) to the run's "cached already", if run is still the
 * latest. fs_ctl_run: the latest run (0: none yet) and its "cached
 * already" bytes in *before. */
int fs_ctl_run_of(struct fs *fs, pid_t pid, int start);
void fs_ctl_run_cached(struct fs *fs, int run, uint64_t cached);
int fs_ctl_run(struct fs *fs, uint64_t *before);

/* fs_view_ctl.c: the notice of 'umount-notice MS': the CLOCK_MONOTONIC
 * time (ns) until which prefetch-waits end at once with -ESHUTDOWN (0:
 * none). Any thread; the state's lock only. */
void fs_ctl_notice_set(struct fs *fs, int64_t until_ns);
int64_t fs_ctl_notice(struct fs *fs);

#endif
