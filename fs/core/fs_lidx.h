/*
 * fs_lidx.h — the data loaders' index files under .shardfs (fs_loaderidx.c:
 * samples.tsv, wids.json, dali/; --layout shards only). Their state (the
 * newest samples.tsv/wids.json document, older generations hanging off it,
 * and the lock that serialises building them) lives behind an opaque
 * struct fs_lidx that fs->lidx points to, made by fs_open (fs_lidx_new)
 * and freed by fs_close (after fs_lidx_clear, fs_lidx_free); it owns its
 * lock, and nothing outside fs_loaderidx.c touches its fields.
 */
#ifndef FS_LIDX_H
#define FS_LIDX_H

#include <stdint.h>

struct fs;
struct fs_lidx;

/* No document built yet: 0, or -ENOMEM. */
int fs_lidx_new(struct fs_lidx **l);
/* Free it (after fs_lidx_clear; NULL: nothing). */
void fs_lidx_free(struct fs_lidx *l);
/* Free every generation of the documents (fs_ctl_clear calls it, at
 * unmount, when no request runs any more). */
void fs_lidx_clear(struct fs *fs);
/* Name in .shardfs when it is a loader index (samples.tsv, wids.json,
 * dali): 0 with *ino (untouched when it is none), or the build's error. */
int fs_lidx_lookup_ctl(struct fs *fs, const char *name, uint64_t *ino);

#endif
