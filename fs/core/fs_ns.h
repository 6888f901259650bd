/*
 * fs_ns.h — the namespace (fs_ns*.c; fs_ns.c lists the files): the
 * directories and objects of the source, built from its listing and
 * changed only by versions. Its locks live behind an opaque struct fs_ns
 * that fs->ns points to, made by fs_open (fs_ns_new) and freed by fs_close
 * (after fs_ns_clear, fs_ns_free); nothing outside fs_ns*.c touches its
 * fields (fs_ns_i.h). What the locks protect (fs->objs, fs->shards,
 * fs->dirs and their counts) stays in struct fs (fs_i.h): every part of the
 * core reads objects and shards on every request through the inline
 * fs_obj() and fs_shard().
 *
 * Lock order: refresh_lock, then ns_lock. refresh_lock serialises every
 * change of the namespace (refresh, a lookup replacing a changed object);
 * ns_lock (reader-preferring, so a reader may take it twice) protects
 * fs->dirs, fs->ndirs and every dir's entries. Nothing blocks on I/O or on
 * the kernel while holding ns_lock.
 */
#ifndef FS_NS_H
#define FS_NS_H

#include <stddef.h>
#include <stdint.h>

/* included at the end of fs_i.h, after the types named below */
struct fs;
struct fs_ns;

/* The namespace's locks, for a namespace not built yet: 0 or -ENOMEM. */
int fs_ns_new(struct fs_ns **ns);
/* Free them (NULL: nothing). */
void fs_ns_free(struct fs_ns *ns);

/* fs_ns.c: build the namespace from the backend's listing (fs_open): 0 or
 * the listing's error. fs_ns_clear frees it (fs_close, when no request
 * runs any more). */
int fs_ns_build(struct fs *fs);
void fs_ns_clear(struct fs *fs);
/* List the source again and apply it: new objects appear (at new indexes),
 * removed ones are marked gone, changed ones (another ETag; local: size,
 * mtime, ctime or inode) are marked stale and replaced by a new version at
 * a new index. Kernel caches of what changed are invalidated through the
 * notifier. Blocks (listing); callable from any thread. Returns 0 or the
 * listing's error (then nothing changed). */
int fs_ns_refresh(struct fs *fs);
/* A brace pattern's mount keeps what it learned (sizes, ETags) as the
 * source's listing in the cache directory, merged with the one kept before,
 * for a later mount that finds the store unreachable. At unmount, when no
 * request runs; 0 or -errno (nothing learned: nothing written). */
int fs_ns_keep_learned(struct fs *fs);
/* Is object obj still the source's current version? 0, or -ESTALE once it
 * changed or went away (then it is marked so and the kernel's caches of it
 * are invalidated). Local sources stat the file (one fstatat) unless it is
 * marked already; remote ones only report the mark (their reads carry
 * If-Match and mark the object through fs_obj_mark_stale). */
int fs_obj_check(struct fs *fs, uint32_t obj);
/* Mark obj stale (changed) and queue the invalidations of its inodes. */
void fs_obj_mark_stale(struct fs *fs, uint32_t obj, enum fs_obj_state why);
/* Mark obj's version stale because its index was dropped (a saved index
 * changed in place, a sidecar proved wrong), not because the source
 * changed: the same ESTALE and invalidations, the next lookup a new version
 * whose index is built from the shard; not logged (the caller says why)
 * and not counted in changes_noticed. */
void fs_obj_mark_reindex(struct fs *fs, uint32_t obj);
/* Object obj is not live (or fs_obj_check said so) and a lookup found its
 * name: stat the source's object and replace obj's entries in its
 * directory with a new version at new indexes, or remove them when it is
 * gone. Returns 0 (look the name up again) or a negative errno. */
int fs_ns_replace(struct fs *fs, uint32_t obj);
/* Read lock of the directories (ns_lock) around fs_ns_lookup and any
 * use of fs->dirs. */
void fs_ns_rdlock(struct fs *fs);
void fs_ns_unlock(struct fs *fs);
/* fs_ns.c: binary search for the name name[0..len) (no NUL needed) in elements
 * [lo, hi) of an array of structs of size stride, sorted by strcmp of the
 * string whose char * sits at offset name_off of each: the index found, or
 * -1. */
int64_t fs__bsearch_name(const void *base, size_t stride, size_t name_off, uint32_t lo, uint32_t hi,
			 const char *name, size_t len);
/* Entry named name[0..len) in dir, or NULL. */
const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len);
/* The codec of a shard name (-1 when it is no shard) and the length of its
 * member directory name. */
int fs_ns_shard_suffix(const char *name, size_t *dirlen);

#endif
