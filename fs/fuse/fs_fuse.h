/*
 * fs_fuse.h — the FUSE adapter's entry points, for the shardfs command
 * (fs/cli/shardfs.c): the only header of fs/fuse that its callers see.
 */
#ifndef FS_FUSE_H
#define FS_FUSE_H

/* 'shardfs mount [OPTIONS] SOURCE MOUNTPOINT' (argv after "mount"): the exit
 * status (0; 1 an error said on stderr; 2 a usage error). Returns once the
 * mount is ready (the daemon stays behind), or at its end in the
 * foreground. */
int fs_fuse_mount_main(int argc, char **argv);
/* The libfuse version built against, for --version. */
void fs_fuse_lib_version(int *major, int *minor);

#endif
