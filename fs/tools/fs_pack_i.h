/*
 * fs_pack_i.h — private to fs/: the pure part of 'shardfs pack'.
 *
 * fs_pack_plan.c turns the list of files found in INPUT_DIR into members,
 * samples and shards without touching any filesystem, so it can be tested
 * and fuzzed on its own (tests/fuzz/fuzz_pack.c). fs_pack.c walks the tree,
 * feeds the plan, and writes what it says.
 *
 * Input (what fs_pack.c's walk produces, the caller's precondition): paths
 * relative to INPUT_DIR, added in walk order (depth first, each directory's
 * names sorted with strcmp); every component non-empty, not "." or "..",
 * without '/' or NUL and at most 255 bytes; no path added twice; sizes at
 * most INT64_MAX.
 *
 * Contract of the output (checked by the fuzzer):
 *  - every member name is non-empty, does not start with '/', has no empty,
 *    "." or ".." component and no component over 255 bytes, so a tar reader
 *    (and shardidx's name rules) keeps it exactly as written;
 *  - member names are unique, including the generated KEY.cls members of a
 *    class-folder tree;
 *  - a file's sample key is its member name up to the first '.' of the
 *    base name (fs_pack_keylen); files with one key are one sample, and
 *    sample keys are unique;
 *  - class-folder tree: a member is KEY.EXT with KEY non-empty and without
 *    '/' or '.', EXT non-empty, without '/' and not "cls"; every file is
 *    its own sample. Other trees: the member is the relative path itself;
 *  - the shuffle is a permutation; shards are consecutive runs of samples,
 *    each non-empty, within max_count samples and within max_size bytes
 *    unless a single sample is larger.
 */
#ifndef FS_PACK_I_H
#define FS_PACK_I_H

#include <stddef.h>
#include <stdint.h>

/* Longest member-name component (shardidx and most filesystems). */
#define FS_PACK_NAME_MAX 255
/* Longest extension kept in a class-folder tree; longer ones become "bin". */
#define FS_PACK_EXT_MAX 64

struct fs_pack_file {
	char *rel;    /* path relative to INPUT_DIR */
	char *member; /* name inside the tar */
	uint64_t size;
	int64_t mtime;
	uint32_t mode;
	int cls; /* class index (class-folder trees), else -1 */
};

struct fs_pack_sample {
	char *key;
	size_t first, n; /* files [first, first+n) of the sorted member list */
	uint64_t bytes;	 /* tar bytes: headers and padded data (saturating) */
};

struct fs_pack_plan {
	struct fs_pack_file *files;
	size_t nfiles, capfiles;
	char **classes; /* class-folder tree: class names in sorted order */
	size_t nclasses;
	struct fs_pack_sample *samples;
	size_t nsamples;
	size_t *starts; /* shard i holds samples [starts[i], starts[i+1]) */
	size_t nshards;
};

/* Add one file (walk order). 0 or -ENOMEM. */
int fs_pack_plan_add(struct fs_pack_plan *p, const char *rel, uint64_t size, int64_t mtime,
		     uint32_t mode);
/* After the last add: detect a class-folder tree, name the members, group
 * the samples (sorted by key). 0 or -ENOMEM. */
int fs_pack_plan_members(struct fs_pack_plan *p);
/* Shuffle the samples with seed (splitmix64 + Fisher-Yates). */
void fs_pack_plan_shuffle(struct fs_pack_plan *p, uint64_t seed);
/* Cut the samples into shards; max_count 0: no limit. 0 or -ENOMEM. */
int fs_pack_plan_split(struct fs_pack_plan *p, uint64_t max_size, unsigned long long max_count);
void fs_pack_plan_free(struct fs_pack_plan *p); /* the contents; p itself is the caller's */

/* Length of the sample key of a member name: up to the first '.' of its
 * base name. */
size_t fs_pack_keylen(const char *member);
/* Bytes a member takes in the tar (an upper bound for pax headers). */
uint64_t fs_pack_tar_bytes(const char *name, uint64_t size);

#endif
