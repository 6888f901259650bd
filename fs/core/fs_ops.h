/*
 * fs_ops.h — inside the core: the operations (include/fs_core_ops.h, the
 * public part) with the core's state (fs_i.h).
 */
#ifndef FS_OPS_H
#define FS_OPS_H

#include "fs_core_ops.h"
#include "fs_i.h"

/* fs_op_lookup without counting a lookup request (the mount's `lookups`
 * counts the kernel's): what the core resolves itself, a plan's paths. */
int fs_lookup_entry(struct fs *fs, uint64_t parent, const char *name, struct fs_entry *e);

#endif
