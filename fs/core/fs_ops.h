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
/* fs_lookup_entry in its two steps, for a caller that looks many names up
 * first and asks their attributes later in another order (a plan's
 * publication: in inode order, so an index's entries are decoded walking
 * forward): the inode of name in directory parent (*ino 0: no such entry),
 * or the lookup's error; then ino's entry (e->ino its attributes' inode: a
 * hard link's target) or getattr's error, and parent marked as a directory
 * whose files are looked up. fs_lookup_entry is the one, then the other. */
int fs_lookup_ino(struct fs *fs, uint64_t parent, const char *name, uint64_t *ino);
int fs_lookup_attr(struct fs *fs, uint64_t parent, uint64_t ino, struct fs_entry *e);

#endif
