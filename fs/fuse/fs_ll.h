/*
 * fs_ll.h — the FUSE adapter (fs_ll.c): the only part of shardfs that
 * speaks FUSE.
 */
#ifndef FS_LL_H
#define FS_LL_H

#include "fs_core.h"

/* Mount fs's mountpoint (fs_mount_args) and serve it until unmounted or stopped by a
 * signal; ready_fd (>= 0) gets one byte once the mount answers. 0 or a
 * negative errno. */
int fs_ll_run(struct fs *fs, int ready_fd);

#endif
