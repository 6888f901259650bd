/*
 * fs_if_i.h — private to fs_if_*.c, the files of the --layout imagefolder
 * view: the records its build sorts, the blob's constants and the
 * functions one file calls in another (prefix fs__if_). Nothing else
 * includes it; the rest of the core sees only fs_if.h (the view's state
 * behind struct fs_imagefolder) and fs_layout_imagefolder (fs_view.h).
 *
 * The files, in the order data flows through them:
 *   fs_if_sample.c  a shard's sample as an item: its image, its class (the
 *                   --class-from rules) and the cached .cls values
 *   fs_if_build.c   the build: worker threads, the items, files and classes
 *                   sorts, the names of the files
 *   fs_if_blob.c    the blob's format: writing it in pieces, validating it
 *   fs_if_store.c   the blob in the cache directory: its name, mapping or
 *                   reading it, saving it, removing the older views; the
 *                   choice between a saved view and a new build
 *   fs_if_view.c    the published view: lookups, listings, attributes, the
 *                   fs_view.h operations of its root, classes and files
 */
#ifndef FS_IF_I_H
#define FS_IF_I_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs_view.h"

/* The view's inode kinds, its layout's own (fs_layout_imagefolder.kinds):
 * a class directory (a = class index) and a sample's image (a = shard
 * index, b = entry index: the image member's canonical one) */
#define FS_K_IFCLASS ((enum fs_kind)FS_K_LAYOUT)
#define FS_K_IFFILE  ((enum fs_kind)(FS_K_LAYOUT + 1))

/* ---- the view ---------------------------------------------------------------
 * ROOT/<class>/<name>.<ext>: one file per sample (its image member). Built
 * once, on the first lookup or listing of the root, from every shard's
 * index (indexed in parallel), saved in the cache directory and mapped from
 * there (a later mount of the same shards maps it without indexing);
 * immutable afterwards, so readers take no lock. Files are the members themselves:
 * a file (shard, entry) is read and stat'ed like FS_K_MEMBER(shard, entry). */
struct fs_ifview {
	/* The view's blob (fs_if_blob.c: header, class and file records, the
	 * name blocks, the shards' entry counts and index checksums, the files'
	 * names front-coded, the class names), mapped from the cache directory (map) or, when it
	 * could not be saved or mapped, in the heap (heap). A file's name is
	 * in it (a listing or lookup needs no shard's index); its attributes
	 * are its image member's, in the shard's index. */
	const unsigned char *classes; /* nclasses records, sorted by name */
	const unsigned char *files;   /* nfiles records, sorted by name within a class */
	const unsigned char *blocks;  /* nblocks u64: where each block of names starts */
	const unsigned char *counts;  /* nshards u32: entries of each shard's index */
	const unsigned char *sums;    /* nshards u64: each shard's index file's checksum */
	const unsigned char *names;   /* the files' names, front-coded (names_len bytes) */
	const char *strtab;	      /* NUL-terminated class names */
	uint64_t strtab_len, names_len;
	uint32_t nclasses, nfiles, nshards, nblocks;
	uint64_t fp; /* its fingerprint: the name of its blob */
	struct cachetier_meta *map;
	void *heap;
	struct fs_ifview *retired_next; /* the views a refresh replaced (fs_if_view.c) */
};
/* Class c: its name; files [*first, *first + *n) of the view; the newest
 * member mtime in it. */
const char *fs_if_class(const struct fs_ifview *v, uint32_t c, uint32_t *first, uint32_t *n,
			int64_t *mtime);
/* File i of the view: its image (shard, canonical entry: the inode's). */
void fs_if_file(const struct fs_ifview *v, uint32_t i, uint32_t *shard, uint32_t *entry);
/* How file i's name was made from its member's (IFV_NAME_*). */
uint32_t fs_if_file_kind(const struct fs_ifview *v, uint32_t i);
/* The name of file first + j of class c (first its first file) into buf
 * (SHARDIDX_NAME_MAX + 1 bytes, NUL-terminated): its length, and in *next
 * where the name after it starts (for fs_if_name_next). -EBADMSG: a read
 * out of the bounds load validated (a blob whose file changed since). */
int fs_if_name_at(const struct fs_ifview *v, uint32_t c, uint32_t j, char *buf, uint64_t *next);
/* The name after the one in buf (len bytes; *pos: where it starts, from
 * fs_if_name_at or this) into buf: its length, *pos moved on; -EBADMSG. */
int fs_if_name_next(const struct fs_ifview *v, uint64_t *pos, char *buf, int len);
/* A file's name from its image member's name (<key>.<ext>: the name up to
 * its first '.' and from its last one), of kind IFV_NAME_* (dir: the
 * shard's directory name, canon: the image's canonical entry) into buf
 * (size bytes): its length, or -ENAMETOOLONG. The build names files so. */
int fs_if_name(const char *member, uint32_t kind, const char *dir, uint32_t canon, char *buf,
	       size_t size);
/* The view, built on first call (blocking: indexes every shard; built
 * again, at most IF_STALE_BUILDS times in all, when a .cls member disproves
 * a shard's sidecar index, once the shard is replaced). 0, or the build's
 * negative errno (-ESTALE when every build met a wrong sidecar). */
int fs_if_get(struct fs *fs, const struct fs_ifview **v);
/* The layout's free hook: free every view (at unmount). */
void fs_if_clear(struct fs *fs);
/* A refresh changed shards: drop the view (kept until unmount: readers
 * may hold it), so the next use builds it again; invalidates the kernel's
 * entries of its classes. */
void fs_if_reset(struct fs *fs);
/* Class named name[0..len), or -ENOENT. */
int64_t fs_if_class_lookup(const struct fs_ifview *v, const char *name, size_t len);
/* File of class c named name[0..len): its index in v->files and its image
 * (shard, canonical entry), or -ENOENT; -EBADMSG as fs_if_name_at. A
 * binary search over the class's block heads, then a scan of one block:
 * no shard's index is read. */
int64_t fs_if_file_lookup(const struct fs_ifview *v, uint32_t c, const char *name, size_t len,
			  uint32_t *shard, uint32_t *canon);

/* One sample found while indexing: key, ext and cls point into the
 * item's own copies of the names (an index decodes a name into its
 * caller's entry); encoded at once as a record (below). */
struct if_item {
	char name[SHARDIDX_NAME_MAX + 1];    /* the image member's name */
	char clsname[SHARDIDX_NAME_MAX + 1]; /* --class-from dir: the directory's */
	const char *cls;		     /* class name (clslen bytes, no NUL), or NULL; */
	size_t clslen;			     /* --class-from cls: has_num, the class is cls_num */
	int has_num;
	const char *key; /* the image member's name up to its first '.' ... */
	size_t keylen;
	const char *ext;       /* ... and after its last one */
	uint32_t shard, entry; /* the image's canonical entry */
	uint32_t img;	       /* the image member's own entry (its name) */
	uint32_t mode;	       /* its permission bits ... */
	uint64_t size;	       /* ... size ... */
	int64_t mtime;	       /* ... and mtime */
	uint64_t cls_num;      /* cls: the integer */
};

/* ---- the records of the build ----------------------------------------------
 * The build never holds the view's samples in the heap: they are records
 * of three external sorts (fs_sort.c: in memory up to a budget, sorted
 * runs in the cache directory beyond), read in order as streams.
 *  items   (class, key, ext, shard, entry): each sample as found. Read in
 *          that order, equal (class, key, ext) are next to each other: the
 *          first keeps <key>.<ext>, later ones are renamed.
 *  files   (class, name, item order): each file under its
 *          name. Read in that order, they are the class and file records
 *          of the blob; a name met twice in a class is left out the
 *          second time.
 * plus a spool of the classes (name, newest mtime) in order, and the
 * entry count of each shard's index (if_pass.counts). Records are
 * native-endian: they never leave the process. */
#define IT_HDR                                                                                     \
	40 /* items: u64 cls_num, u32 shard, entry, mode, img, u64 size, i64 mtime; then           \
	    * class\0 key\0 ext\0 (the class is "" with --class-from cls) */
#define FR_HDR                                                                                     \
	48	 /* files: u32 class, shard, entry, mode, u64 seq (item order), size, i64 mtime,   \
		  * u32 kind (IFV_NAME_*), u32 img; then name\0 */
#define CR_HDR 8 /* classes: i64 mtime; then name\0 */

static inline uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static inline uint64_t get64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static inline void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static inline void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* The .cls values of one shard (fs_if_sample.c), loaded from and saved to
 * the cache directory around a worker's scan of the shard (fs_if_build.c). */
struct cls_map {
	uint32_t *entry; /* ascending */
	uint64_t *num;
	size_t n, cap;
	int from_cache; /* loaded: nothing to save */
	int dirty;	/* values were read from the shard */
};

/* ---- the blob (the format: fs_if_blob.c) ---- */
#define IFV_MAGIC     "SHIFVIEW"
#define IFV_VERSION   4u
#define IFV_HDR	      96u
#define IFV_CLASS_REC 32u
#define IFV_FILE_REC  8u
#define IFV_BLOCK     16u /* names in a front-coded block (the first stored whole) */
/* How a file's name is made (fs_if_name): where two samples of a class
 * want one name, the first keeps it and the later are renamed
 * (fs_if_build.c) */
#define IFV_NAME_PLAIN 0u /* <key>.<ext> */
#define IFV_NAME_DIR   1u /* <key>~<dir>.<ext> */
#define IFV_NAME_ENTRY 2u /* <key>~<dir>~<canonical entry>.<ext> */
/* the image is a hard link to its canonical entry: its name is the link
 * member's, which the file record does not name (any of the three forms) */
#define IFV_NAME_LINK 3u
/* A file record's entry: the canonical entry below 2^30, the name's kind
 * in the top two bits */
#define IFV_KIND_SHIFT 30
#define IFV_ENTRY_MASK 0x3fffffffu
#define IFV_PRIME      0x100000001b3ull

/* Bytes name b shares at its start with name a (both NUL-terminated), at
 * most 255 (a u8 in the blob). */
static inline unsigned ifv_lcp(const char *a, const char *b)
{
	unsigned n = 0;

	while (n < 255 && a[n] && a[n] == b[n])
		n++;
	return n;
}

/* Bytes of the name's entry in the blob's names: u8 shared, u8 length of
 * the rest, the rest; prev: the name before it in its block, or NULL (a
 * block's first, stored whole). */
static inline uint64_t ifv_name_bytes(const char *prev, const char *name)
{
	return 2 + strlen(name) - (prev ? ifv_lcp(prev, name) : 0);
}

struct ifv_meta {
	uint64_t fp, no_image, no_class, dup;
	uint32_t nshards, class_from;
};

/* The build between its sorts. */
/* --class-gaps empty: empty classes one missing run may add (a .cls value
 * of 10^9 is a mistake, not a class count) */
#define IF_GAPS_MAX 1000000u

struct if_pass {
	struct fs *fs;
	size_t budget;		 /* of each sort */
	struct fs_sort *files;	 /* file records */
	struct fs_sort *classes; /* the class spool */
	uint32_t nclasses, nfiles;
	uint64_t cnames_len; /* the class names' bytes, NULs included */
	uint64_t names_len;  /* the files' names, front-coded (ifv_name_bytes) */
	uint32_t nblocks;    /* their blocks (IFV_BLOCK names, in a class) */
	uint64_t dup;	     /* files left out: their name was taken */
	int width;	     /* --class-from cls: digits of the class names */
	uint64_t next_cls;   /* --class-gaps empty: the next .cls value without a class yet */
	uint32_t *counts;    /* nshards: entries of each shard's index (0: left out) */
	uint64_t *sums;	     /* nshards: its index file's checksum (shardidx_file_sum) */
};

/* A copy of the record last read (an iterator's record lasts one step). */
struct if_prev {
	unsigned char *p;
	size_t cap;
	int set;
};

/* Where the blob's sections start (the layout: fs_if_blob.c). */
struct ifv_layout {
	uint64_t classes, files, blocks, counts, sums, names, names_len, strtab, strtab_len, len;
	uint32_t nblocks;
};

/* Where the blob goes: a blob of the cache tier written in pieces, or the
 * heap (zeroed, l->len bytes). */
struct ifv_sink {
	struct cachetier_meta_writer *w;
	unsigned char *heap;
};

/* fs_if_sample.c */
void fs__if_cls_map_load(struct fs *fs, uint32_t shard, struct cls_map *m);
void fs__if_cls_map_save(struct fs *fs, uint32_t shard, const struct cls_map *m);
int fs__if_sample(struct fs *fs, const struct shardidx *ix, struct cachetier_obj *stream,
		  struct cls_map *cm, uint32_t first, uint32_t n, struct if_item *it);

/* fs_if_build.c */
int fs__if_prev_keep(struct if_prev *pv, const void *rec, size_t len);
int fs__if_build(struct fs *fs, struct ifv_meta *want, struct fs_ifview **out);

/* fs_if_blob.c */
int fs__if_open(struct fs_ifview *v, const unsigned char *b, size_t len,
		const struct ifv_meta *want, struct ifv_meta *got);
int fs__if_layout(const struct if_pass *p, uint32_t nshards, struct ifv_layout *l);
int fs__if_write(struct if_pass *p, const struct ifv_meta *m, const struct ifv_layout *l,
		 struct ifv_sink *k);

/* fs_if_store.c */
int fs__if_emit(struct if_pass *p, const struct ifv_meta *want, const struct ifv_layout *l,
		int save, struct fs_ifview **out);
int fs__if_view(struct fs *fs, struct fs_ifview **out);
/* Remove the saved blob of view v (it does not match the shards' indexes:
 * the next use builds the view again instead of mapping it). */
void fs__if_unsave(struct fs *fs, const struct fs_ifview *v);

#endif
