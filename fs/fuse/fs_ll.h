/*
 * fs_ll.h — the FUSE adapter (fs_ll.c): the only part of shardfs that
 * speaks FUSE.
 */
#ifndef FS_LL_H
#define FS_LL_H

#include "fs_core.h"

/* Mount fs's mountpoint (fs_mount_args) and serve it until unmounted or stopped by a
 * signal; ready_fd (>= 0) gets one byte once the mount answers; lock_fd
 * (>= 0: the mount point's lock a foreground 'shardfs mount -f' holds from
 * its checks, fs_mount.c) is closed once mounted, or on the way out. 0 or a
 * negative errno. */
int fs_ll_run(struct fs *fs, int ready_fd, int lock_fd);

/* fs_mount.c: in the foreground (-f) under systemd's Type=notify, tell the
 * service manager that the mount is ready (sd_notify's READY=1 and
 * MAINPID on $NOTIFY_SOCKET, written here: no libsystemd); nothing when
 * NOTIFY_SOCKET is unset. */
void fs_mount_notify_ready(const char *mountpoint);

#endif
