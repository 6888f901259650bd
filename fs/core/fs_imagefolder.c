/*
 * fs_imagefolder.c — the --layout imagefolder view (DESIGN.md section 1):
 * MOUNTPOINT/<class>/<name>.<ext>, one file per WebDataset sample, so that
 * torchvision's datasets.ImageFolder(MOUNTPOINT) works on shards unchanged.
 *
 * Building: the view needs every shard's index, so the first lookup or
 * listing of the root indexes all shards with IF_THREADS threads (each
 * takes the next shard; fs_shard_index is thread-safe and uses the cache
 * directory's or a sidecar index when there is one). Each thread adds
 * its shards' samples to one sort (below: "the records of the build"),
 * whose order is total, so the result does not depend on thread timing.
 * The sorted records are written as one blob, in pieces, into the cache
 * directory and mapped (below: "the view as a blob"); the build's heap is
 * bounded by --imagefolder-build-memory (past it, sorted runs go to
 * scratch files of the cache directory), not by the number of samples.
 * A later mount of the same shards maps the blob without indexing any
 * shard.
 * Afterwards the view is immutable and published with release semantics;
 * readers take no lock.
 *
 * A sample's file is its first image member (jpg jpeg png webp bmp ppm pgm
 * tif tiff, by the member name's last extension, any case). Its class:
 *   cls         the integer in the sample's <key>.cls member, printed with
 *               as many digits as the largest class (zero-padded), so the
 *               sorted class names are in numeric order. torchvision maps
 *               the i-th sorted directory to i: that is the stored integer
 *               exactly when the classes present are 0..max; a gap is
 *               logged (empty directories cannot fill it: ImageFolder
 *               rejects classes without files).
 *   dir         the name of the member's parent directory inside the shard
 *   key-prefix  the key up to its first '_'
 * Samples without an image, or without a usable class (missing, not an
 * integer, empty, ".", "..", ".shardfs"), are left out and counted.
 *
 * The .cls values need the members' bytes (a remote shard's chunks), so
 * each shard's values are kept in the cache directory (cachetier meta blob
 * "imagefolder-cls|<codec>|<etag>|<size>|<key>" in the shard's family
 * "imagefolder-cls|<key>", which a save sweeps of the older versions'
 * maps) and later mounts read none of them again.
 *
 * Names: <key>.<ext> with the member's own extension. Where two samples of
 * a class would get one name, the first in (shard, entry) order keeps it
 * and later ones become <key>~<shard>.<ext>, then <key>~<shard>~<entry>.<ext>;
 * a name still taken after that is left out and counted (if_dup_dropped).
 * Everything is decided by the source's content, never by timing.
 *
 * Non-goals: other media (the view shows images only); labels beyond one
 * class per sample.
 */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fs_view.h"

/* Index building is I/O bound (headers of local shards, range reads of
 * remote ones); a few threads overlap the waits without a thundering herd. */
#define IF_THREADS 4
/* A .cls member longer than this is no class number. */
#define IF_CLS_MAX 32

static const char *const image_exts[] = {"jpg", "jpeg", "png", "webp", "bmp",
					 "ppm", "pgm",	"tif", "tiff"};

/* One sample found while indexing: pointers into its shard's index, valid
 * while the worker holds the index; encoded at once as a record (below). */
struct if_item {
	const char *cls; /* class name (clslen bytes, no NUL), or NULL; */
	size_t clslen;	 /* --class-from cls: has_num, the class is cls_num */
	int has_num;
	const char *key; /* the image member's name up to its first '.' ... */
	size_t keylen;
	const char *ext;       /* ... and after its last one */
	uint32_t shard, entry; /* the image's canonical entry */
	uint32_t mode;	       /* its permission bits ... */
	uint64_t size;	       /* ... size ... */
	int64_t mtime;	       /* ... and mtime */
	uint64_t cls_num;      /* cls: the integer */
};

/* A worker's samples, added to the build's sort a batch at a time. */
struct if_batch {
	unsigned char *buf; /* records, each after its u32 length */
	size_t len, cap;
	uint64_t max_cls;
};

struct if_build {
	struct fs *fs;
	uint32_t nshards;      /* shards when the build started (a refresh may add) */
	atomic_uint next;      /* next shard to take */
	atomic_int err;	       /* -ENOMEM, -EIO, -ECANCELED, -ENOSPC abort the build */
	atomic_uint skipped;   /* shards left out (no index): the view is not saved */
	pthread_mutex_t lock;  /* items, max_cls */
	struct fs_sort *items; /* every sample, sorted by item_cmp */
	uint64_t max_cls;      /* the largest cls_num */
};

/* ---- the records of the build ----------------------------------------------
 * The build never holds the view's samples in the heap: they are records
 * of three external sorts (fs_sort.c: in memory up to a budget, sorted
 * runs in the cache directory beyond), read in order as streams.
 *  items   (class, key, ext, shard, entry): each sample as found. Read in
 *          that order, equal (class, key, ext) are next to each other: the
 *          first keeps <key>.<ext>, later ones are renamed.
 *  files   (class, name, item order): each file under its name. Read in
 *          that order, they are the class and file records of the blob;
 *          a name met twice in a class is left out the second time.
 *  members (shard, entry, file): the files' attributes, the blob's
 *          members section.
 * plus a spool of the classes (name, newest mtime) in order. Records are
 * native-endian: they never leave the process. */
#define IT_HDR                                                                                     \
	40 /* items: u64 cls_num, u32 shard, entry, mode, 0, u64 size, i64 mtime; then             \
	    * class\0 key\0 ext\0 (the class is "" with --class-from cls) */
#define FR_HDR                                                                                     \
	40	    /* files: u32 class, shard, entry, mode, u64 seq (item order), size, i64       \
		     * mtime; then name\0 */
#define MR_LEN	 24 /* members: u32 shard, entry, file, mtime, u64 size << 12 | mode */
#define CR_HDR	 8  /* classes: i64 mtime; then name\0 */
#define IF_BATCH (1u << 20) /* a worker's batch of records */

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* Order of the items: class, then the name each wants, then where it comes
 * from; the first of equal names keeps its name. --class-from cls: the
 * padded names sort as the numbers (every class string is ""); otherwise
 * every cls_num is 0. */
static int item_cmp(const void *pa, size_t la, const void *pb, size_t lb)
{
	const unsigned char *a = pa, *b = pb;
	const char *sa = (const char *)a + IT_HDR, *sb = (const char *)b + IT_HDR;

	(void)la;
	(void)lb;
	if (get64(a) != get64(b))
		return get64(a) < get64(b) ? -1 : 1;
	for (int k = 0; k < 3; k++) { /* class, key, ext */
		int c = strcmp(sa, sb);

		if (c)
			return c;
		sa += strlen(sa) + 1;
		sb += strlen(sb) + 1;
	}
	if (get32(a + 8) != get32(b + 8))
		return get32(a + 8) < get32(b + 8) ? -1 : 1;
	return get32(a + 12) < get32(b + 12) ? -1 : get32(a + 12) > get32(b + 12);
}

/* Order of the files: class, name, then the items' order (so of equal
 * names the first item's is kept, as a stable sort by name would). */
static int file_cmp(const void *pa, size_t la, const void *pb, size_t lb)
{
	const unsigned char *a = pa, *b = pb;
	int c;

	(void)la;
	(void)lb;
	if (get32(a) != get32(b))
		return get32(a) < get32(b) ? -1 : 1;
	c = strcmp((const char *)a + FR_HDR, (const char *)b + FR_HDR);
	if (c)
		return c;
	return get64(a + 16) < get64(b + 16) ? -1 : get64(a + 16) > get64(b + 16);
}

static int member_cmp(const void *pa, size_t la, const void *pb, size_t lb)
{
	const unsigned char *a = pa, *b = pb;

	(void)la;
	(void)lb;
	for (int k = 0; k < 12; k += 4) { /* shard, entry, file */
		if (get32(a + k) != get32(b + k))
			return get32(a + k) < get32(b + k) ? -1 : 1;
	}
	return 0;
}

static int batch_reserve(struct if_batch *bt, size_t n)
{
	if (bt->len + n > bt->cap) {
		size_t cap = bt->cap ? bt->cap : 4096;
		unsigned char *p;

		while (cap < bt->len + n)
			cap *= 2;
		p = realloc(bt->buf, cap);
		if (!p)
			return -ENOMEM;
		bt->buf = p;
		bt->cap = cap;
	}
	return 0;
}

/* Item it as a record of the batch. */
static int batch_add(struct if_batch *bt, const struct if_item *it)
{
	size_t clslen = it->has_num ? 0 : it->clslen, extlen = strlen(it->ext);
	size_t len = IT_HDR + clslen + 1 + it->keylen + 1 + extlen + 1;
	unsigned char *r;

	if (len > UINT32_MAX - 8 || batch_reserve(bt, 4 + len) < 0)
		return -ENOMEM;
	r = bt->buf + bt->len;
	put32(r, (uint32_t)len);
	r += 4;
	memset(r, 0, IT_HDR);
	put64(r, it->has_num ? it->cls_num : 0);
	put32(r + 8, it->shard);
	put32(r + 12, it->entry);
	put32(r + 16, it->mode);
	put64(r + 24, it->size);
	put64(r + 32, (uint64_t)it->mtime);
	r += IT_HDR;
	memcpy(r, it->cls ? it->cls : "", clslen);
	r[clslen] = '\0';
	r += clslen + 1;
	memcpy(r, it->key, it->keylen);
	r[it->keylen] = '\0';
	memcpy(r + it->keylen + 1, it->ext, extlen + 1);
	bt->len += 4 + len;
	if (it->has_num && it->cls_num > bt->max_cls)
		bt->max_cls = it->cls_num;
	return 0;
}

/* Add the batch to the build's items (which may write a sorted run). */
static int batch_flush(struct if_build *b, struct if_batch *bt)
{
	int err = 0;

	pthread_mutex_lock(&b->lock);
	for (size_t at = 0; err == 0 && at < bt->len;) {
		uint32_t len = get32(bt->buf + at);

		err = fs_sort_add(b->items, bt->buf + at + 4, len);
		at += 4 + (size_t)len;
	}
	if (bt->max_cls > b->max_cls)
		b->max_cls = bt->max_cls;
	pthread_mutex_unlock(&b->lock);
	bt->len = 0;
	return err;
}

static int is_image(const char *name, const char **ext)
{
	const char *dot = strrchr(name, '.');

	if (!dot || dot == name)
		return 0;
	for (size_t i = 0; i < sizeof(image_exts) / sizeof(image_exts[0]); i++) {
		if (strcasecmp(dot + 1, image_exts[i]) == 0) {
			*ext = dot + 1;
			return 1;
		}
	}
	return 0;
}

static int class_ok(const struct if_item *it)
{
	const char *c = it->cls;
	size_t n = it->clslen;

	if (it->has_num)
		return 1;
	return c && n && !(n == 1 && c[0] == '.') && !(n == 2 && memcmp(c, "..", 2) == 0) &&
	       !(n == 8 && memcmp(c, ".shardfs", 8) == 0) && !memchr(c, '/', n);
}

/* The integer in a .cls member (surrounding white space allowed): 0, -EINVAL
 * when the member holds no class, or the read's negative errno. */
static int read_cls(struct cachetier_obj *stream, const struct shardidx_entry *e, uint64_t *num)
{
	char buf[IF_CLS_MAX + 1], *p, *end;
	unsigned long long v;
	ssize_t n;

	if (e->type != SHARDIDX_REG || (e->flags & (SHARDIDX_F_SPARSE | SHARDIDX_F_TRUNCATED)) ||
	    e->size == 0 || e->size > IF_CLS_MAX)
		return -EINVAL;
	n = cachetier_obj_pread(stream, buf, (size_t)e->size, e->data_off);
	if (n < 0)
		return (int)n;
	if (n != (ssize_t)e->size)
		return -EINVAL;
	buf[n] = '\0';
	for (p = buf; isspace((unsigned char)*p); p++)
		;
	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	errno = 0;
	v = strtoull(p, &end, 10);
	if (errno)
		return -EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	if (*end)
		return -EINVAL;
	*num = v;
	return 0;
}

/* ---- the .cls values of one shard, cached in the cache directory ----
 * A blob of the cache tier named by the shard's codec, ETag, size and key
 * (so another version of the shard never meets it). Format: the disk.h
 * envelope (magic, u32 version, u32 count of rows, u64 FNV-1a of the rows),
 * then per sample that has a class {u32 entry of its .cls member, u64 the
 * class}, in ascending order of entry; little-endian. Version 1 was a text
 * file without a checksum ("shardfs-imagefolder-cls 1"), which this magic
 * does not match: it is read again from the shard and replaced. */
#define CLS_MAGIC   "SHCLSMAP"
#define CLS_VERSION 2u
#define CLS_ROW	    12u

struct cls_map {
	uint32_t *entry; /* ascending */
	uint64_t *num;
	size_t n, cap;
	int from_cache; /* loaded: nothing to save */
	int dirty;	/* values were read from the shard */
};

static int cls_map_add(struct cls_map *m, uint32_t entry, uint64_t num)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		uint32_t *e = realloc(m->entry, cap * sizeof(*e));
		uint64_t *v;

		if (!e)
			return -ENOMEM;
		m->entry = e;
		v = realloc(m->num, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->num = v;
		m->cap = cap;
	}
	m->entry[m->n] = entry;
	m->num[m->n++] = num;
	return 0;
}

static int cls_map_find(const struct cls_map *m, uint32_t entry, uint64_t *num)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->entry[mid] == entry) {
			*num = m->num[mid];
			return 0;
		}
		if (m->entry[mid] < entry)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

/* The blob name of a shard's class map and its family (one per key: a
 * save removes the maps of the shard's older versions). */
static int cls_blob_name(const struct fs *fs, uint32_t shard, char *buf, size_t size, char *family,
			 size_t fsize)
{
	const struct fs_obj *o = fs_obj(fs, fs_shard(fs, shard)->obj);
	int n = snprintf(buf, size, "imagefolder-cls|%d|%s|%" PRIu64 "|%s",
			 fs_shard(fs, shard)->codec, o->info.etag, o->info.size, o->key);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return fs_shard_family(o->key, FS_SAVED_CLASSES, family, fsize);
}

/* Load the cached values into m (empty on any doubt about the blob: the
 * values are then read from the shard and the map saved again). */
static void cls_map_load(struct fs *fs, uint32_t shard, struct cls_map *m)
{
	char name[4096 + 256], family[4096 + 32];
	const unsigned char *b;
	size_t len;
	uint32_t n;
	void *buf;
	int err;

	if (cls_blob_name(fs, shard, name, sizeof(name), family, sizeof(family)) < 0)
		return;
	err = cachetier_meta_get_in(fs->ct, family, name, &buf, &len);
	/* saved by a release before families: moved into the family */
	if (err == -ENOENT && cachetier_meta_adopt(fs->ct, family, name) == 0)
		err = cachetier_meta_get_in(fs->ct, family, name, &buf, &len);
	if (err < 0)
		return;
	b = buf;
	err = disk_blob_check(b, len, CLS_MAGIC, CLS_VERSION);
	n = err == 0 ? disk_le32_get(b + 12) : 0;
	if (err == 0 && (len - DISK_BLOB_HDR) / CLS_ROW != n)
		err = -EBADMSG;
	if (err == 0 && (len - DISK_BLOB_HDR) % CLS_ROW != 0)
		err = -EBADMSG;
	for (uint32_t i = 0; err == 0 && i < n; i++) {
		const unsigned char *r = b + DISK_BLOB_HDR + (size_t)i * CLS_ROW;
		uint32_t e = disk_le32_get(r);

		if (m->n && e <= m->entry[m->n - 1])
			err = -EBADMSG; /* rows are in ascending order of entry */
		else if (cls_map_add(m, e, disk_le64_get(r + 4)) < 0)
			err = -ENOMEM;
	}
	free(buf);
	if (err == 0) {
		m->from_cache = 1;
		return;
	}
	fs_log(FS_LOG_WARN, "imagefolder: cached classes of %s unusable (%s); reading them again",
	       fs_obj(fs, fs_shard(fs, shard)->obj)->key,
	       err == -EPROTO ? "another version" : strerror(-err));
	m->n = 0;
}

static void cls_map_save(struct fs *fs, uint32_t shard, const struct cls_map *m)
{
	char name[4096 + 256], family[4096 + 32];
	size_t len = DISK_BLOB_HDR + m->n * CLS_ROW;
	unsigned char *buf;
	unsigned n = 0;

	if (m->from_cache || !m->dirty || m->n > UINT32_MAX ||
	    cls_blob_name(fs, shard, name, sizeof(name), family, sizeof(family)) < 0)
		return;
	buf = malloc(len);
	if (!buf)
		return;
	disk_le32_put(buf + 12, (uint32_t)m->n);
	for (size_t i = 0; i < m->n; i++) {
		disk_le32_put(buf + DISK_BLOB_HDR + i * CLS_ROW, m->entry[i]);
		disk_le64_put(buf + DISK_BLOB_HDR + i * CLS_ROW + 4, m->num[i]);
	}
	disk_blob_seal(buf, len, CLS_MAGIC, CLS_VERSION);
	if (cachetier_meta_put_in(fs->ct, family, name, buf, len) < 0)
		fs_log(FS_LOG_WARN, "imagefolder: classes of %s not cached",
		       fs_obj(fs, fs_shard(fs, shard)->obj)->key);
	else if (cachetier_meta_sweep(fs->ct, family, name, &n) == 0)
		fs->c.if_cls_removed += n; /* the older versions' maps */
	free(buf);
}

/* The members of sample s that matter: its first image (*img_i, *ext
 * inside the entry's name) and its first ".cls" (*cls_i); SHARDIDX_NONE
 * where there is none. -1 when s is not a sample. */
static int sample_members(const struct shardidx *ix, uint32_t s, uint32_t *img_i, const char **ext,
			  uint32_t *cls_i)
{
	struct shardidx_entry e;
	uint32_t first, n;

	*img_i = *cls_i = SHARDIDX_NONE;
	if (shardidx_sample_get(ix, s, &first, &n) < 0)
		return -1;
	for (uint32_t i = first; i < first + n; i++) {
		const char *x, *dot;

		if (shardidx_entry_get(ix, i, &e) < 0 || e.type == SHARDIDX_DIR)
			continue;
		dot = strchr(e.name, '.');
		if (*img_i == SHARDIDX_NONE && e.type == SHARDIDX_REG && is_image(e.name, &x)) {
			*img_i = i;
			*ext = x;
		}
		if (*cls_i == SHARDIDX_NONE && dot && strcmp(dot, ".cls") == 0)
			*cls_i = i;
	}
	return 0;
}

/* --class-from cls: the class of a sample from its .cls member cls_i, from
 * the cached map cm or read from the shard (and added to cm). it->has_num
 * stays 0 when the sample has none. 0, or -EIO / -ECANCELED / -ENOMEM,
 * which abort the view. */
static int class_from_cls(struct fs *fs, const struct shardidx *ix, struct cachetier_obj *stream,
			  struct cls_map *cm, uint32_t cls_i, struct if_item *it)
{
	struct shardidx_entry cls;
	int err;

	if (cls_i == SHARDIDX_NONE)
		return 0;
	if (cm->from_cache) {
		if (cls_map_find(cm, cls_i, &it->cls_num) < 0)
			return 0;
	} else {
		if (shardidx_entry_get(ix, cls_i, &cls) < 0 ||
		    (cls.canon != cls_i && shardidx_entry_get(ix, cls.canon, &cls) < 0))
			return 0;
		fs->c.if_cls_reads++;
		cm->dirty = 1;
		err = read_cls(stream, &cls, &it->cls_num);
		if (err == -EIO || err == -ECANCELED)
			return err; /* as for the index: no view, no saved map */
		if (err < 0)
			return 0;
		if (cls_map_add(cm, cls_i, it->cls_num) < 0)
			return -ENOMEM;
	}
	it->has_num = 1;
	return 0;
}

/* The class of image img (a member named keylen bytes of key, then its
 * extension) by --class-from dir or key-prefix: it->cls, or NULL. */
static void class_from_name(struct fs *fs, const struct shardidx *ix,
			    const struct shardidx_entry *img, size_t keylen, struct if_item *it)
{
	struct shardidx_entry d;
	const char *us;

	if (fs->cfg.class_from == FS_CLASS_DIR) {
		if (img->parent != SHARDIDX_NONE && shardidx_entry_get(ix, img->parent, &d) == 0) {
			it->cls = d.name;
			it->clslen = strlen(d.name);
		}
		return;
	}
	us = memchr(img->name, '_', keylen);
	if (us && us > img->name) {
		it->cls = img->name;
		it->clslen = (size_t)(us - img->name);
	}
}

/* The item of sample s of a shard's index, or 1 when it is left out
 * (counted); 0, or -EIO / -ECANCELED / -ENOMEM. */
static int if_sample(struct fs *fs, const struct shardidx *ix, struct cachetier_obj *stream,
		     struct cls_map *cm, uint32_t s, struct if_item *it)
{
	struct shardidx_entry img, canon;
	uint32_t img_i, cls_i;
	const char *ext = NULL, *dot;
	int err;

	if (sample_members(ix, s, &img_i, &ext, &cls_i) < 0)
		return 1;
	if (img_i == SHARDIDX_NONE) {
		fs->c.if_no_image++;
		return 1;
	}
	shardidx_entry_get(ix, img_i, &img);
	if (shardidx_entry_get(ix, img.canon, &canon) < 0 || canon.type != SHARDIDX_REG) {
		fs->c.if_no_image++; /* a hard link to what is no file */
		return 1;
	}
	dot = strchr(img.name, '.');
	it->key = img.name;
	it->keylen = dot ? (size_t)(dot - img.name) : strlen(img.name);
	it->ext = ext;
	it->entry = img.canon;
	it->mode = canon.mode;
	it->size = canon.size;
	it->mtime = canon.mtime;
	if (fs->cfg.class_from == FS_CLASS_CLS) {
		err = class_from_cls(fs, ix, stream, cm, cls_i, it);
		if (err < 0)
			return err;
	} else {
		class_from_name(fs, ix, &img, it->keylen, it);
	}
	if (!class_ok(it)) {
		fs->c.if_no_class++;
		return 1;
	}
	return 0;
}

/* Add the samples of one shard to the build (through the worker's batch
 * bt): 0; 1 when the shard has no index (left out of the view); or -EIO,
 * -ECANCELED, -ENOMEM, the sort's -ENOSPC. */
static int if_scan_shard(struct if_build *b, uint32_t shard, struct if_batch *bt)
{
	struct fs *fs = b->fs;
	struct shardidx *ix;
	struct cachetier_obj *stream;
	struct shardidx_info info;
	int err = fs_shard_index(fs, shard, &ix, &stream);
	struct cls_map cm = {0};

	if (!fs_obj_live(fs_obj(fs, fs_shard(fs, shard)->obj)))
		return 0; /* an old version a refresh replaced, or a removed shard */
	/* The store is unreachable (or the daemon stops): no view now, rather
	 * than a view that lacks the shard for good; a later lookup builds it
	 * again (the indexes already loaded are kept). */
	if (err == -EIO || err == -ECANCELED)
		return err;
	if (err < 0)
		return 1; /* logged and counted by fs_shard_index; the view goes on without it */
	fs->c.if_shards_indexed++;
	shardidx_get_info(ix, &info);
	if (fs->cfg.class_from == FS_CLASS_CLS)
		cls_map_load(fs, shard, &cm);
	for (uint32_t s = 0; s < info.nsamples; s++) {
		struct if_item it = {.shard = shard};

		err = if_sample(fs, ix, stream, &cm, s, &it);
		if (err < 0)
			goto out;
		if (err == 0)
			err = batch_add(bt, &it);
		if (err == 0 && bt->len >= IF_BATCH)
			err = batch_flush(b, bt);
		if (err < 0)
			goto out;
	}
	err = batch_flush(b, bt);
	if (err == 0)
		cls_map_save(fs, shard, &cm);
out:
	free(cm.entry);
	free(cm.num);
	return err;
}

static void *if_worker(void *arg)
{
	struct if_build *b = arg;
	struct if_batch bt = {0};

	for (;;) {
		unsigned i = atomic_fetch_add(&b->next, 1);

		if (i >= b->nshards || atomic_load(&b->err))
			break;
		int err = if_scan_shard(b, i, &bt);

		if (err < 0)
			atomic_store(&b->err, err);
		else if (err > 0)
			atomic_fetch_add(&b->skipped, 1);
	}
	free(bt.buf);
	return NULL;
}

static void view_free(struct fs_ifview *v)
{
	if (!v)
		return;
	cachetier_meta_unmap(v->map);
	free(v->heap);
	free(v);
}

/* ---- the view as a blob in the cache directory --------------------------
 * The assembled view becomes one cachetier meta blob, "ifview-<srckey>-
 * <fingerprint>" (both in hex), which is mapped and used in place: lookups
 * are binary searches over its records, listings walk them, no name is
 * copied to the heap. A
 * file's attributes are in its record too, found by its inode (shard,
 * entry) in a section sorted that way, so that listings (readdirplus) and
 * stat need no shard's index: only reads do. The
 * fingerprint (FNV-1a 64) covers what the view is made of: this format's
 * version, --class-from, and for each shard in order its key, size, mtime,
 * ETag (a local file's stands for its size, mtime, inode and ctime), the codec its
 * name suggests and its directory name (part of renamed files' names). A
 * changed dataset has another fingerprint, so its view is built again.
 * The blob is in a family of the cache tier, "ifview-<srckey>" (ifv_family:
 * the source and --class-from): a mount that saves or maps its view removes
 * the family's other blobs, the views of older versions of the dataset
 * (ifv_clean; other sources and --class-from are other families). (After a
 * refresh that replaced or removed shards, their numbers stay unused until
 * unmount: that view is saved too, but only this mount's numbering meets
 * its fingerprint.)
 * Layout (little-endian, every section 8-byte aligned):
 *   0  "SHIFVIEW", u32 version, u32 nclasses
 *  16  u64 checksum of bytes [0, 16) and [24, end) (ifv_sum)
 *  24  u64 fingerprint, u32 nfiles, u32 nshards
 *  40  u64 strtab_len; u64 samples without image, without class, left out
 *      as duplicates (what the build counted); u32 class_from, u32 0
 *  80  classes: nclasses x {u64 name, u32 first, u32 n, i64 mtime}
 *      files:   nfiles x {u32 name, u32 shard, u32 entry}, zero-padded to 8
 *      shards:  nshards + 1 x u32: shard s's members are [shards[s],
 *               shards[s + 1]); zero-padded to 8
 *      members: nfiles x {u32 entry, u32 mtime, u64 size << 12 | mode}, the
 *               files' attributes in (shard, entry) order (shardidx's mtimes
 *               are 0..2^32-1, its modes 07777): a getattr searches only its
 *               shard's members, a few KiB in a row
 *      strtab:  NUL-terminated names (the first is ""), zero-padded to 8
 * Names are offsets into strtab. A mapped blob is validated once: checksum,
 * fingerprint, sizes, every name inside strtab (which ends in NUL), every
 * shard below nshards, the shards' starts ascending from 0 to nfiles,
 * classes contiguous, non-empty and sorted. One that
 * fails is counted (imagefolder_view_rejected) and built again. A view that
 * left a shard out (no index) is not saved: the next mount tries again. */
#define IFV_MAGIC     "SHIFVIEW"
#define IFV_VERSION   1u
#define IFV_HDR	      80u
#define IFV_CLASS_REC 24u
#define IFV_FILE_REC  12u
#define IFV_MEMBER    16u
#define IFV_PRIME     0x100000001b3ull

struct ifv_meta {
	uint64_t fp, no_image, no_class, dup;
	uint32_t nshards, class_from;
};

static uint64_t ifv_mix(uint64_t h, uint64_t w)
{
	return ((h << 31 | h >> 33) ^ w) * IFV_PRIME;
}

/* Checksum of a blob (len a multiple of 8, at least IFV_HDR): four lanes of
 * 64-bit words, so a large view is checked at memory speed. */
static uint64_t ifv_sum(const unsigned char *b, size_t len)
{
	uint64_t h[4] = {DISK_FNV64_INIT, DISK_FNV64_INIT ^ 1, DISK_FNV64_INIT ^ 2,
			 DISK_FNV64_INIT ^ 3};
	uint64_t r = DISK_FNV64_INIT ^ len;
	size_t i = 24;

	for (; i + 32 <= len; i += 32)
		for (int k = 0; k < 4; k++)
			h[k] = ifv_mix(h[k], disk_le64_get(b + i + 8 * k));
	for (; i < len; i += 8)
		h[0] = ifv_mix(h[0], disk_le64_get(b + i));
	h[1] = ifv_mix(h[1], disk_le64_get(b));
	h[2] = ifv_mix(h[2], disk_le64_get(b + 8));
	for (int k = 0; k < 4; k++)
		r = ifv_mix(r, h[k]);
	return r ^ r >> 29;
}

static uint64_t if_fingerprint(const struct fs *fs, uint32_t nshards)
{
	unsigned char w[16];
	uint64_t h = disk_fnv64("shardfs-imagefolder-view", 24);

	disk_le32_put(w, IFV_VERSION);
	disk_le32_put(w + 4, (uint32_t)fs->cfg.class_from);
	disk_le32_put(w + 8, nshards);
	h = disk_fnv64_update(h, w, 12);
	for (uint32_t i = 0; i < nshards; i++) {
		const struct fs_shard *s = fs_shard(fs, i);
		const struct fs_obj *o = fs_obj(fs, s->obj);

		if (!fs_obj_live(o)) {
			h = disk_fnv64_update(h, "", 1); /* a number a refresh left unused */
			continue;
		}
		h = disk_fnv64_update(h, o->key, strlen(o->key) + 1);
		h = disk_fnv64_update(h, o->info.etag, strlen(o->info.etag) + 1);
		h = disk_fnv64_update(h, s->dirname, strlen(s->dirname) + 1);
		disk_le64_put(w, o->info.size);
		disk_le32_put(w + 8, (uint32_t)o->codec);
		h = disk_fnv64_update(h, w, 12);
		disk_le64_put(w, (uint64_t)o->info.mtime);
		h = disk_fnv64_update(h, w, 8);
	}
	return h;
}

/* The family of this mount's views (cachetier_meta_put_in): "ifview-<srckey>",
 * srckey a hash of the source and --class-from, the views that replace
 * each other as the dataset changes (the cache tier's directory is per
 * source already; the source is in the key all the same). Another source or
 * --class-from is another family, which a sweep never touches. */
static void ifv_family(const struct fs *fs, char *buf, size_t size)
{
	const char *src = backend_describe(fs->be);
	unsigned char w[4];
	uint64_t h = disk_fnv64(src, strlen(src) + 1);

	disk_le32_put(w, (uint32_t)fs->cfg.class_from);
	h = disk_fnv64_update(h, w, 4);
	snprintf(buf, size, "ifview-%016" PRIx64, h);
}

/* The blob of fingerprint fp in family: "ifview-<srckey>-<fp>". */
static void ifv_name(const char *family, uint64_t fp, char *buf, size_t size)
{
	snprintf(buf, size, "%s-%016" PRIx64, family, fp);
}

/* Remove the views this mount's replaces: every other blob of its family,
 * and the blob the previous release saved for the same fingerprint, a
 * plain blob "ifview-<fp>" (this release never opens a name of that form).
 * Daemons that map a removed blob keep its bytes (cachetier_meta_map: the
 * mapping outlives the unlink; nothing opens it by name again). */
static void ifv_clean(struct fs *fs, const char *family, const char *keep, uint64_t fp)
{
	char old[64];
	unsigned n = 0;
	int err = cachetier_meta_sweep(fs->ct, family, keep, &n);

	snprintf(old, sizeof(old), "ifview-%016" PRIx64, fp);
	if (cachetier_meta_remove(fs->ct, NULL, old) == 0)
		n++;
	fs->c.if_view_removed += n;
	if (err < 0)
		fs_log(FS_LOG_WARN, "imagefolder: cannot remove older views: %s", strerror(-err));
	if (n)
		fs_log(FS_LOG_INFO,
		       "imagefolder: removed %u older views of this dataset from the cache", n);
}

static size_t pad8(uint64_t n)
{
	return (size_t)((n + 7) & ~(uint64_t)7);
}

/* The class and file records of v (set up by ifv_open) are sound. */
static int ifv_check_records(const struct fs_ifview *v, uint32_t nshards)
{
	const char *prev = NULL;
	uint32_t next = 0;

	for (uint32_t c = 0; c < v->nclasses; c++) {
		const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;
		uint64_t off = disk_le64_get(r);
		uint32_t first = disk_le32_get(r + 8), n = disk_le32_get(r + 12);

		if (off >= v->strtab_len || first != next || n == 0 || n > v->nfiles - first ||
		    (prev && strcmp(prev, v->strtab + off) >= 0))
			return -EBADMSG;
		prev = v->strtab + off;
		next += n;
	}
	if (next != v->nfiles)
		return -EBADMSG;
	for (uint32_t i = 0; i < v->nfiles; i++) {
		const unsigned char *r = v->files + (size_t)i * IFV_FILE_REC;

		if (disk_le32_get(r) >= v->strtab_len || disk_le32_get(r + 4) >= nshards)
			return -EBADMSG;
	}
	for (uint32_t s = 0; s < nshards; s++) {
		if (disk_le32_get(v->shards + (size_t)s * 4) >
		    disk_le32_get(v->shards + (size_t)(s + 1) * 4))
			return -EBADMSG;
	}
	if (disk_le32_get(v->shards) != 0 ||
	    disk_le32_get(v->shards + (size_t)nshards * 4) != v->nfiles)
		return -EBADMSG;
	return 0;
}

/* Make v the view in blob b[0..len), built from what want describes (its
 * counts go to *got): 0, -EBADMSG (torn, corrupt, inconsistent), -EPROTO
 * (another version) or -ESTALE (made of other shards or options). */
static int ifv_open(struct fs_ifview *v, const unsigned char *b, size_t len,
		    const struct ifv_meta *want, struct ifv_meta *got)
{
	uint64_t strtab_len;

	if (!b || len < IFV_HDR || len % 8 || memcmp(b, IFV_MAGIC, 8) != 0)
		return -EBADMSG;
	if (disk_le32_get(b + 8) != IFV_VERSION)
		return -EPROTO;
	if (disk_le64_get(b + 16) != ifv_sum(b, len))
		return -EBADMSG;
	got->fp = disk_le64_get(b + 24);
	got->nshards = disk_le32_get(b + 36);
	got->class_from = disk_le32_get(b + 72);
	if (got->fp != want->fp || got->nshards != want->nshards ||
	    got->class_from != want->class_from)
		return -ESTALE;
	v->nclasses = disk_le32_get(b + 12);
	v->nfiles = disk_le32_get(b + 32);
	v->nshards = got->nshards;
	strtab_len = disk_le64_get(b + 40);
	if (strtab_len == 0 || strtab_len > len ||
	    IFV_HDR + (uint64_t)v->nclasses * IFV_CLASS_REC +
		    pad8((uint64_t)v->nfiles * IFV_FILE_REC) +
		    pad8(((uint64_t)got->nshards + 1) * 4) + (uint64_t)v->nfiles * IFV_MEMBER +
		    pad8(strtab_len) !=
		len)
		return -EBADMSG;
	v->classes = b + IFV_HDR;
	v->files = v->classes + (size_t)v->nclasses * IFV_CLASS_REC;
	v->shards = v->files + pad8((uint64_t)v->nfiles * IFV_FILE_REC);
	v->members = v->shards + pad8(((uint64_t)got->nshards + 1) * 4);
	v->strtab = (const char *)v->members + (size_t)v->nfiles * IFV_MEMBER;
	v->strtab_len = strtab_len;
	if (v->strtab[strtab_len - 1] != '\0')
		return -EBADMSG;
	got->no_image = disk_le64_get(b + 48);
	got->no_class = disk_le64_get(b + 56);
	got->dup = disk_le64_get(b + 64);
	return ifv_check_records(v, want->nshards);
}

/* Map the saved view of fingerprint want->fp: 0, -ENOENT (none), the
 * errors of ifv_open or of cachetier_meta_map. */
static int ifv_map(struct fs *fs, const struct ifv_meta *want, struct fs_ifview **out,
		   struct ifv_meta *got)
{
	char family[32], name[64];
	struct cachetier_meta *m;
	struct fs_ifview *v;
	const void *data;
	size_t len;
	int err;

	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want->fp, name, sizeof(name));
	err = cachetier_meta_map_in(fs->ct, family, name, &m, &data, &len);
	if (err < 0)
		return err;
	v = calloc(1, sizeof(*v));
	err = v ? ifv_open(v, data, len, want, got) : -ENOMEM;
	if (err < 0) {
		cachetier_meta_unmap(m);
		free(v);
		return err;
	}
	v->map = m;
	*out = v;
	return 0;
}

/* ---- building the blob -------------------------------------------------- */

/* The build between its sorts. */
struct if_pass {
	struct fs *fs;
	size_t budget;		 /* of each sort */
	struct fs_sort *files;	 /* file records */
	struct fs_sort *classes; /* the class spool */
	uint32_t nclasses, nfiles;
	uint64_t cnames_len, fnames_len; /* the names' bytes, NULs included */
	uint64_t dup;			 /* files left out: their name was taken */
	int width;			 /* --class-from cls: digits of the class names */
};

/* A copy of the record last read (an iterator's record lasts one step). */
struct if_prev {
	unsigned char *p;
	size_t cap;
	int set;
};

static int prev_grow(struct if_prev *pv, size_t len)
{
	if (len > pv->cap) {
		unsigned char *p = realloc(pv->p, len);

		if (!p)
			return -ENOMEM;
		pv->p = p;
		pv->cap = len;
	}
	return 0;
}

static int prev_keep(struct if_prev *pv, const void *rec, size_t len)
{
	if (prev_grow(pv, len) < 0)
		return -ENOMEM;
	memcpy(pv->p, rec, len);
	pv->set = 1;
	return 0;
}

/* The class of item record r ended: its spool record (name, newest mtime). */
static int class_put(struct if_pass *p, const unsigned char *r, int64_t mtime)
{
	unsigned char rec[CR_HDR + 32];
	const char *cls = (const char *)r + IT_HDR;
	size_t n;
	int err;

	if (p->fs->cfg.class_from == FS_CLASS_CLS)
		cls = NULL;
	n = cls ? strlen(cls)
		: (size_t)snprintf((char *)rec + CR_HDR, 32, "%0*" PRIu64, p->width, get64(r));
	put64(rec, (uint64_t)mtime);
	if (!cls) {
		err = fs_sort_add(p->classes, rec, CR_HDR + n + 1);
	} else {
		unsigned char *b = malloc(CR_HDR + n + 1);

		if (!b)
			return -ENOMEM;
		memcpy(b, rec, CR_HDR);
		memcpy(b + CR_HDR, cls, n + 1);
		err = fs_sort_add(p->classes, b, CR_HDR + n + 1);
		free(b);
	}
	if (err == 0 && p->nclasses == UINT32_MAX)
		err = -EOVERFLOW;
	p->nclasses++;
	p->cnames_len += n + 1;
	return err;
}

/* The file record of item record r, named as its place among equal names
 * says (prev: the item before it in order, or none): <key>.<ext>, else
 * <key>~<shard>.<ext>, else <key>~<shard>~<entry>.<ext>. */
static int file_put(struct if_pass *p, const unsigned char *r, const struct if_prev *prev,
		    uint64_t seq, struct if_prev *buf)
{
	const char *key = (const char *)r + IT_HDR, *ext;
	uint32_t shard = get32(r + 8), entry = get32(r + 12);
	int dup = 0, same_shard = 0, n;
	const char *dir = "";
	size_t cap;

	key += strlen(key) + 1;
	ext = key + strlen(key) + 1;
	if (prev && prev->set) {
		const char *pk = (const char *)prev->p + IT_HDR;

		pk += strlen(pk) + 1;
		dup = strcmp(pk, key) == 0 && strcmp(pk + strlen(pk) + 1, ext) == 0;
		same_shard = dup && get32(prev->p + 8) == shard;
	}
	if (dup)
		dir = fs_shard(p->fs, shard)->dirname;
	cap = FR_HDR + strlen(key) + strlen(dir) + strlen(ext) + 32;
	if (prev_grow(buf, cap) < 0)
		return -ENOMEM;
	if (!dir[0])
		n = snprintf((char *)buf->p + FR_HDR, cap - FR_HDR, "%s.%s", key, ext);
	else if (same_shard)
		n = snprintf((char *)buf->p + FR_HDR, cap - FR_HDR, "%s~%s~%" PRIu32 ".%s", key,
			     dir, entry, ext);
	else
		n = snprintf((char *)buf->p + FR_HDR, cap - FR_HDR, "%s~%s.%s", key, dir, ext);
	put32(buf->p, p->nclasses);
	put32(buf->p + 4, shard);
	put32(buf->p + 8, entry);
	put32(buf->p + 12, get32(r + 16));
	put64(buf->p + 16, seq);
	put64(buf->p + 24, get64(r + 24));
	put64(buf->p + 32, get64(r + 32));
	return fs_sort_add(p->files, buf->p, FR_HDR + (size_t)n + 1);
}

/* Read the items in order: the classes (spooled) and a file record each. */
static int if_make_files(struct if_pass *p, struct fs_sort *items)
{
	struct if_prev prev = {0}, buf = {0};
	struct fs_sort_iter *it;
	int64_t mtime = 0;
	uint64_t seq = 0;
	const void *v;
	size_t len;
	int err = fs_sort_iter_open(items, &it), got = 0;

	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;
		int newc = !prev.set || get64(r) != get64(prev.p) ||
			   strcmp((const char *)r + IT_HDR, (const char *)prev.p + IT_HDR) != 0;

		if (newc && prev.set) {
			err = class_put(p, prev.p, mtime);
			mtime = 0;
		}
		if (err == 0)
			err = file_put(p, r, newc ? NULL : &prev, seq++, &buf);
		if ((int64_t)get64(r + 32) > mtime)
			mtime = (int64_t)get64(r + 32);
		if (err == 0)
			err = prev_keep(&prev, r, len);
	}
	if (err == 0 && got < 0)
		err = got;
	if (err == 0 && prev.set)
		err = class_put(p, prev.p, mtime);
	fs_sort_iter_close(it);
	free(prev.p);
	free(buf.p);
	return err;
}

/* Read the files in order once to count what the blob holds: files (not
 * the second of a name), their names' bytes. */
static int if_count_files(struct if_pass *p)
{
	struct if_prev prev = {0};
	struct fs_sort_iter *it;
	const void *v;
	size_t len;
	int err = fs_sort_iter_open(p->files, &it), got = 0;

	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;
		int64_t mtime = (int64_t)get64(r + 32);

		if (prev.set && get32(prev.p) == get32(r) &&
		    strcmp((const char *)prev.p + FR_HDR, (const char *)r + FR_HDR) == 0) {
			p->dup++;
			continue;
		}
		if (get64(r + 24) >> 52 || mtime < 0 || mtime > UINT32_MAX)
			err = -EFBIG; /* no such member: see shardidx.h */
		else if (p->nfiles == UINT32_MAX)
			err = -EOVERFLOW;
		p->nfiles++;
		p->fnames_len += len - FR_HDR;
		if (err == 0)
			err = prev_keep(&prev, r, len);
	}
	fs_sort_iter_close(it);
	free(prev.p);
	return err ? err : got;
}

/* Where the blob's sections start (the layout in "the view as a blob"). */
struct ifv_layout {
	uint64_t classes, files, shards, members, strtab, strtab_len, len;
};

static int ifv_layout(const struct if_pass *p, uint32_t nshards, struct ifv_layout *l)
{
	l->strtab_len = 1 + p->cnames_len + p->fnames_len;
	if (l->strtab_len > UINT32_MAX)
		return -EFBIG; /* names are u32 offsets */
	l->classes = IFV_HDR;
	l->files = l->classes + (uint64_t)p->nclasses * IFV_CLASS_REC;
	l->shards = l->files + pad8((uint64_t)p->nfiles * IFV_FILE_REC);
	l->members = l->shards + pad8(((uint64_t)nshards + 1) * 4);
	l->strtab = l->members + (uint64_t)p->nfiles * IFV_MEMBER;
	l->len = l->strtab + pad8(l->strtab_len);
	return l->len > SIZE_MAX ? -EFBIG : 0;
}

/* Where the blob goes: a blob of the cache tier written in pieces, or the
 * heap (zeroed, l->len bytes). */
struct ifv_sink {
	struct cachetier_meta_writer *w;
	unsigned char *heap;
};

#define IFV_OUT_BUF (64u << 10)

/* One section written front to back. */
struct ifv_out {
	struct ifv_sink *k;
	uint64_t off; /* where buf[0] goes */
	unsigned char *buf;
	size_t n;
	int err;
};

static void out_open(struct ifv_out *o, struct ifv_sink *k, uint64_t off)
{
	*o = (struct ifv_out){.k = k, .off = off};
	if (k->w) {
		o->buf = malloc(IFV_OUT_BUF);
		o->err = o->buf ? 0 : -ENOMEM;
	}
}

static void out_flush(struct ifv_out *o)
{
	if (o->n && o->err == 0)
		o->err = cachetier_meta_pwrite(o->k->w, o->buf, o->n, o->off);
	o->off += o->n;
	o->n = 0;
}

static void out_put(struct ifv_out *o, const void *p, size_t n)
{
	if (!o->k->w) {
		memcpy(o->k->heap + o->off, p, n);
		o->off += n;
		return;
	}
	while (n && o->err == 0) {
		size_t c = IFV_OUT_BUF - o->n < n ? IFV_OUT_BUF - o->n : n;

		memcpy(o->buf + o->n, p, c);
		o->n += c;
		p = (const char *)p + c;
		n -= c;
		if (o->n == IFV_OUT_BUF)
			out_flush(o);
	}
}

/* Flush and free o; its error (or err, when that is one). */
static int out_close(struct ifv_out *o, int err)
{
	if (o->k->w)
		out_flush(o);
	free(o->buf);
	o->buf = NULL;
	return err ? err : o->err;
}

/* The class record of class c: name at name_off, files [first, first + n),
 * newest mtime. */
static void class_rec(struct ifv_out *o, uint64_t name_off, uint32_t first, uint32_t n,
		      int64_t mtime)
{
	unsigned char r[IFV_CLASS_REC];

	disk_le64_put(r, name_off);
	disk_le32_put(r + 8, first);
	disk_le32_put(r + 12, n);
	disk_le64_put(r + 16, (uint64_t)mtime);
	out_put(o, r, sizeof(r));
}

/* The classes, files and names sections from the files in order (the
 * class spool beside them); each file's attributes go to members. */
static int ifv_write_files(struct if_pass *p, const struct ifv_layout *l, struct ifv_sink *k,
			   struct fs_sort *members)
{
	struct ifv_out oc, of, ocn, ofn; /* classes, files, class names, file names */
	struct fs_sort_iter *it = NULL, *cit = NULL;
	uint64_t coff = 1, foff = 1 + p->cnames_len, cur_off = 0;
	uint32_t ci = UINT32_MAX, first = 0, fi = 0;
	const char *cname = "";
	int64_t cmtime = 0;
	struct if_prev prev = {0};
	const void *v;
	size_t len;
	int err = fs_sort_iter_open(p->files, &it), got = 0;

	if (err == 0)
		err = fs_sort_iter_open(p->classes, &cit);
	out_open(&oc, k, l->classes);
	out_open(&of, k, l->files);
	out_open(&ocn, k, l->strtab + 1);
	out_open(&ofn, k, l->strtab + 1 + p->cnames_len);
	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;
		const char *name = (const char *)r + FR_HDR;
		unsigned char rec[MR_LEN > IFV_FILE_REC ? MR_LEN : IFV_FILE_REC];

		if (get32(r) != ci) {
			const void *c;
			size_t clen;

			if (ci != UINT32_MAX)
				class_rec(&oc, cur_off, first, fi - first, cmtime);
			got = fs_sort_next(cit, &c, &clen);
			if (got <= 0 || get32(r) != ci + 1) {
				err = got < 0 ? got : -EIO; /* files of a class not spooled */
				break;
			}
			ci = get32(r);
			cmtime = (int64_t)get64(c);
			cname = (const char *)c + CR_HDR;
			out_put(&ocn, cname, clen - CR_HDR);
			cur_off = coff;
			coff += clen - CR_HDR;
			first = fi;
			prev.set = 0;
		} else if (prev.set && strcmp((const char *)prev.p, name) == 0) {
			fs_log(FS_LOG_WARN, "imagefolder: %s/%s stored twice; left out once", cname,
			       name);
			continue;
		}
		disk_le32_put(rec, (uint32_t)foff);
		disk_le32_put(rec + 4, get32(r + 4));
		disk_le32_put(rec + 8, get32(r + 8));
		out_put(&of, rec, IFV_FILE_REC);
		out_put(&ofn, name, len - FR_HDR);
		foff += len - FR_HDR;
		put32(rec, get32(r + 4));
		put32(rec + 4, get32(r + 8));
		put32(rec + 8, fi++);
		put32(rec + 12, (uint32_t)get64(r + 32));
		put64(rec + 16, get64(r + 24) << 12 | (get32(r + 12) & 07777));
		err = fs_sort_add(members, rec, MR_LEN);
		if (err == 0)
			err = prev_keep(&prev, name, len - FR_HDR);
	}
	if (err == 0 && got < 0)
		err = got;
	if (err == 0 && ci != UINT32_MAX)
		class_rec(&oc, cur_off, first, fi - first, cmtime);
	if (err == 0 && (fi != p->nfiles || (ci == UINT32_MAX ? 0 : ci + 1) != p->nclasses))
		err = -EIO; /* not what if_count_files read */
	fs_sort_iter_close(it);
	fs_sort_iter_close(cit);
	free(prev.p);
	err = out_close(&oc, err);
	err = out_close(&of, err);
	err = out_close(&ocn, err);
	return out_close(&ofn, err);
}

/* The shards and members sections from the members in (shard, entry,
 * file) order. */
static int ifv_write_members(struct fs_sort *members, const struct ifv_layout *l, uint32_t nshards,
			     struct ifv_sink *k)
{
	struct ifv_out os, om;
	struct fs_sort_iter *it;
	uint32_t s = 0, i = 0;
	unsigned char w[IFV_MEMBER];
	const void *v;
	size_t len;
	int err = fs_sort_iter_open(members, &it), got = 0;

	out_open(&os, k, l->shards);
	out_open(&om, k, l->members);
	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;

		for (; s <= get32(r) && s <= nshards; s++) {
			disk_le32_put(w, i);
			out_put(&os, w, 4);
		}
		disk_le32_put(w, get32(r + 4));
		disk_le32_put(w + 4, get32(r + 12));
		disk_le64_put(w + 8, get64(r + 16));
		out_put(&om, w, IFV_MEMBER);
		i++;
	}
	for (; s <= nshards; s++) {
		disk_le32_put(w, i);
		out_put(&os, w, 4);
	}
	fs_sort_iter_close(it);
	err = out_close(&os, err ? err : got);
	return out_close(&om, err);
}

/* ifv_sum of the blob in sink k (hdr: its first 16 bytes), reading it
 * back a MiB at a time when it is a file. */
static int ifv_sum_sink(struct ifv_sink *k, const unsigned char *hdr, uint64_t len, uint64_t *sum)
{
	uint64_t h[4] = {DISK_FNV64_INIT, DISK_FNV64_INIT ^ 1, DISK_FNV64_INIT ^ 2,
			 DISK_FNV64_INIT ^ 3};
	uint64_t r = DISK_FNV64_INIT ^ len, blocks_end = 24 + (len - 24) / 32 * 32;
	size_t cap = 1u << 20; /* a multiple of 32: blocks never straddle two reads */
	unsigned char *buf;
	int err = 0;

	if (!k->w) {
		*sum = ifv_sum(k->heap, (size_t)len);
		return 0;
	}
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (uint64_t pos = 24; err == 0 && pos < len;) {
		size_t n = len - pos < cap ? (size_t)(len - pos) : cap, i = 0;

		err = cachetier_meta_pread(k->w, buf, n, pos);
		for (; err == 0 && i + 32 <= n && pos + i + 32 <= blocks_end; i += 32)
			for (int q = 0; q < 4; q++)
				h[q] = ifv_mix(h[q], disk_le64_get(buf + i + 8 * q));
		for (; err == 0 && i < n; i += 8)
			h[0] = ifv_mix(h[0], disk_le64_get(buf + i));
		pos += n;
	}
	free(buf);
	h[1] = ifv_mix(h[1], disk_le64_get(hdr));
	h[2] = ifv_mix(h[2], disk_le64_get(hdr + 8));
	for (int q = 0; q < 4; q++)
		r = ifv_mix(r, h[q]);
	*sum = r ^ r >> 29;
	return err;
}

/* The header, the padding after the names and the checksum. */
static int ifv_seal(struct ifv_sink *k, const struct if_pass *p, const struct ifv_layout *l,
		    const struct ifv_meta *m)
{
	unsigned char b[IFV_HDR] = {0}, zero[8] = {0};
	struct ifv_out o;
	uint64_t sum = 0;
	int err;

	memcpy(b, IFV_MAGIC, 8);
	disk_le32_put(b + 8, IFV_VERSION);
	disk_le32_put(b + 12, p->nclasses);
	disk_le64_put(b + 24, m->fp);
	disk_le32_put(b + 32, p->nfiles);
	disk_le32_put(b + 36, m->nshards);
	disk_le64_put(b + 40, l->strtab_len);
	disk_le64_put(b + 48, m->no_image);
	disk_le64_put(b + 56, m->no_class);
	disk_le64_put(b + 64, m->dup);
	disk_le32_put(b + 72, m->class_from);
	out_open(&o, k, 0);
	out_put(&o, b, IFV_HDR);
	err = out_close(&o, 0);
	out_open(&o, k, l->strtab);
	out_put(&o, zero, 1); /* the empty name */
	err = out_close(&o, err);
	out_open(&o, k, l->strtab + l->strtab_len);
	out_put(&o, zero, (size_t)(l->len - l->strtab - l->strtab_len));
	err = out_close(&o, err);
	if (err == 0)
		err = ifv_sum_sink(k, b, l->len, &sum);
	disk_le64_put(b + 16, sum);
	out_open(&o, k, 16);
	out_put(&o, b + 16, 8);
	return out_close(&o, err);
}

/* Write the blob of p (counted, laid out as l) to sink k. */
static int ifv_write(struct if_pass *p, const struct ifv_meta *m, const struct ifv_layout *l,
		     struct ifv_sink *k)
{
	struct fs_sort *members;
	int err = fs_sort_new(p->fs->ct, p->budget, member_cmp, &members);

	if (err == 0)
		err = ifv_write_files(p, l, k, members);
	if (err == 0)
		err = fs_sort_finish(members);
	if (err == 0)
		err = ifv_write_members(members, l, m->nshards, k);
	if (members)
		p->fs->c.if_build_runs += fs_sort_runs(members);
	fs_sort_free(members);
	if (err == 0)
		err = ifv_seal(k, p, l, m);
	return err;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The view in the heap: blob of p written into memory. */
static int ifv_heap(struct if_pass *p, const struct ifv_meta *want, const struct ifv_layout *l,
		    struct fs_ifview **out)
{
	struct ifv_sink k = {.heap = calloc(1, (size_t)l->len)};
	struct fs_ifview *v = calloc(1, sizeof(*v));
	struct ifv_meta got;
	int err = k.heap && v ? ifv_write(p, want, l, &k) : -ENOMEM;

	if (err == 0)
		err = ifv_open(v, k.heap, (size_t)l->len, want, &got);
	if (err < 0) {
		free(v);
		free(k.heap);
		return err;
	}
	v->heap = k.heap;
	p->fs->c.if_view_mapped = 0;
	*out = v;
	return 0;
}

/* A saved blob that could not be mapped: read into the heap. */
static int ifv_read(struct fs *fs, const struct ifv_meta *want, struct fs_ifview **out)
{
	struct fs_ifview *v = calloc(1, sizeof(*v));
	struct ifv_meta got;
	char family[32], name[64];
	size_t len;
	void *b = NULL;
	int err;

	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want->fp, name, sizeof(name));
	err = v ? cachetier_meta_get_in(fs->ct, family, name, &b, &len) : -ENOMEM;
	if (err == 0)
		err = ifv_open(v, b, len, want, &got);
	if (err < 0) {
		free(v);
		free(b);
		return err;
	}
	v->heap = b;
	fs->c.if_view_mapped = 0;
	*out = v;
	return 0;
}

/* Write the blob of p into the cache directory and map it. When it cannot
 * be written (a full disk) it is built in the heap instead, as long as the
 * build never needed the disk (its sorts fitted --imagefolder-build-memory:
 * the view is about as large); otherwise the build fails, as a view in the
 * heap would cost the memory the budget keeps it from taking (tens of bytes
 * a sample: gigabytes for tens of millions), and says why. A view that
 * left a shard out is not saved: it is built in the heap. */
static int ifv_emit(struct if_pass *p, const struct ifv_meta *want, const struct ifv_layout *l,
		    int save, struct fs_ifview **out)
{
	struct fs *fs = p->fs;
	struct ifv_sink k = {0};
	struct ifv_meta got;
	char family[32], name[64];
	int err;

	if (!save)
		return ifv_heap(p, want, l, out);
	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want->fp, name, sizeof(name));
	err = cachetier_meta_create_in(fs->ct, family, name, &k.w);
	if (err == 0) {
		err = ifv_write(p, want, l, &k);
		if (err == 0)
			err = cachetier_meta_commit(k.w);
		else
			cachetier_meta_abort(k.w);
	}
	if (err == 0) {
		fs->c.if_view_saved++;
		if (ifv_map(fs, want, out, &got) == 0) {
			fs->c.if_view_mapped = 1;
			ifv_clean(fs, family, name, want->fp);
			return 0;
		}
		fs_log(FS_LOG_WARN, "imagefolder: the view is kept in memory: cannot map %s", name);
		err = ifv_read(fs, want, out);
		ifv_clean(fs, family, name, want->fp);
		return err;
	}
	if (err == -ENOMEM || err == -EFBIG || err == -EOVERFLOW)
		return err;
	if (fs_sort_spilled(p->files) || fs_sort_spilled(p->classes)) {
		fs_log(
		    FS_LOG_ERR,
		    "imagefolder: cannot write the view %s to %s: %s; its build sorted %" PRIu64
		    " files in runs there (more than --imagefolder-build-memory holds), so it is "
		    "not built in memory instead: free space there, use another --cache-dir, or "
		    "raise --imagefolder-build-memory",
		    name, fs->cfg.ct.cache_dir, strerror(-err), fs_sort_count(p->files));
		return err;
	}
	fs_log(FS_LOG_WARN, "imagefolder: the view is kept in memory: cannot save %s: %s", name,
	       strerror(-err));
	return ifv_heap(p, want, l, out);
}

/* Index shards [0, nshards) and add their samples to b->items (sorted,
 * finished); *skipped: shards left out. */
static int if_collect(struct if_build *b)
{
	pthread_t th[IF_THREADS];
	unsigned nth = b->nshards < IF_THREADS ? b->nshards : IF_THREADS, started = 0;
	int err;

	fs_log(FS_LOG_INFO, "imagefolder: indexing %u shards with %u threads", b->nshards, nth);
	for (unsigned i = 0; i < nth; i++) {
		if (pthread_create(&th[i], NULL, if_worker, b) != 0)
			break;
		started++;
	}
	if (started == 0)
		if_worker(b); /* no threads to be had: do it here */
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	err = atomic_load(&b->err);
	if (err == 0)
		err = fs_sort_finish(b->items);
	return err;
}

/* The samples, sorted, into the pass's files and classes (sorted). */
static int if_files(struct if_pass *p, struct if_build *b)
{
	int err = fs_sort_new(p->fs->ct, p->budget, file_cmp, &p->files);

	if (err == 0)
		err = fs_sort_new(p->fs->ct, p->budget / 8, NULL, &p->classes);
	if (err == 0 && fs_sort_count(b->items) > UINT32_MAX)
		err = -EOVERFLOW;
	if (err == 0 && p->fs->cfg.class_from == FS_CLASS_CLS && fs_sort_count(b->items)) {
		char buf[32];

		p->width = snprintf(buf, sizeof(buf), "%" PRIu64, b->max_cls);
	}
	if (err == 0)
		err = if_make_files(p, b->items);
	p->fs->c.if_build_runs += fs_sort_runs(b->items);
	fs_sort_free(b->items);
	b->items = NULL;
	if (err == 0)
		err = fs_sort_finish(p->files);
	if (err == 0)
		err = fs_sort_finish(p->classes);
	if (err == 0 && p->fs->cfg.class_from == FS_CLASS_CLS && p->nclasses &&
	    b->max_cls + 1 != p->nclasses)
		fs_log(FS_LOG_WARN,
		       "imagefolder: classes are not 0..%" PRIu64
		       " (%u present): torchvision's class_to_idx will not equal the .cls integers",
		       b->max_cls, p->nclasses);
	return err;
}

/* Build the view of what want describes from the shards' indexes, save it
 * in the cache directory and map it. The heap it takes is about
 * --imagefolder-build-memory, whatever the number of samples. */
static int if_build(struct fs *fs, struct ifv_meta *want, struct fs_ifview **out)
{
	uint64_t no_image = fs->c.if_no_image, no_class = fs->c.if_no_class;
	struct if_build b = {.fs = fs, .nshards = want->nshards};
	struct if_pass p = {.fs = fs, .budget = (size_t)(fs->cfg.if_build_memory / 2)};
	struct ifv_layout l;
	double t0 = now_ms();
	int err;

	pthread_mutex_init(&b.lock, NULL);
	err = fs_sort_new(fs->ct, p.budget, item_cmp, &b.items);
	if (err == 0)
		err = if_collect(&b);
	if (err == 0)
		err = if_files(&p, &b);
	fs_sort_free(b.items);
	pthread_mutex_destroy(&b.lock);
	if (err == 0)
		err = if_count_files(&p);
	fs->c.if_dup_dropped += p.dup;
	want->no_image = fs->c.if_no_image - no_image;
	want->no_class = fs->c.if_no_class - no_class;
	want->dup = p.dup;
	if (err == 0)
		err = ifv_layout(&p, want->nshards, &l);
	if (err == 0)
		err = ifv_emit(&p, want, &l, atomic_load(&b.skipped) == 0, out);
	if (p.files)
		fs->c.if_build_runs += fs_sort_runs(p.files);
	if (p.classes)
		fs->c.if_build_runs += fs_sort_runs(p.classes);
	fs_sort_free(p.files);
	fs_sort_free(p.classes);
#ifdef __GLIBC__
	malloc_trim(0); /* the build's buffers are gone */
#endif
	fs->c.if_build_ms = (uint64_t)(now_ms() - t0);
	if (err < 0) {
		fs_log(FS_LOG_ERR, "imagefolder: cannot build the view: %s", strerror(-err));
		return err;
	}
	fs->c.if_images = p.nfiles;
	fs_log(FS_LOG_INFO,
	       "imagefolder: %u images in %u classes from %u shards in %" PRIu64
	       " ms (%llu without image, %llu without class)",
	       (*out)->nfiles, (*out)->nclasses, want->nshards, (uint64_t)fs->c.if_build_ms,
	       (unsigned long long)want->no_image, (unsigned long long)want->no_class);
	return 0;
}

/* The view: the saved one of these shards when there is a sound one, else
 * a new one. */
static int if_view(struct fs *fs, struct fs_ifview **out)
{
	struct ifv_meta want = {.nshards = fs->nshards, .class_from = (uint32_t)fs->cfg.class_from},
			got;
	char family[32], name[64];
	int err;

	/* a brace pattern's sizes and ETags, many at once: the fingerprint
	 * covers them, and the build needs every shard anyway */
	fs_learn_all(fs);
	want.fp = if_fingerprint(fs, want.nshards);
	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want.fp, name, sizeof(name));
	err = ifv_map(fs, &want, out, &got);
	if (err == 0) {
		ifv_clean(fs, family, name, want.fp);
		fs->c.if_view_loaded++;
		fs->c.if_view_mapped = 1;
		fs->c.if_images = (*out)->nfiles;
		fs->c.if_no_image = got.no_image;
		fs->c.if_no_class = got.no_class;
		fs->c.if_dup_dropped = got.dup;
		fs_log(FS_LOG_INFO, "imagefolder: %u images in %u classes mapped from the cache",
		       (*out)->nfiles, (*out)->nclasses);
		return 0;
	}
	if (err != -ENOENT) {
		if (err == -EBADMSG || err == -EPROTO || err == -ESTALE)
			fs->c.if_view_rejected++;
		fs_log(FS_LOG_WARN, "imagefolder: saved view %s unusable (%s); building it again",
		       name, strerror(-err));
	}
	return if_build(fs, &want, out);
}

int fs_if_get(struct fs *fs, const struct fs_ifview **v)
{
	struct fs_ifview *p = atomic_load_explicit(&fs->ifv, memory_order_acquire);
	int err = 0;

	if (!p) {
		pthread_mutex_lock(&fs->if_lock);
		p = atomic_load_explicit(&fs->ifv, memory_order_acquire);
		if (!p) {
			err = if_view(fs, &p);
			if (err == 0)
				atomic_store_explicit(&fs->ifv, p, memory_order_release);
		}
		pthread_mutex_unlock(&fs->if_lock);
	}

	*v = p;
	return err;
}

void fs_if_free(struct fs *fs)
{
	view_free(fs->ifv);
	fs->ifv = NULL;
	while (fs->if_retired) {
		struct fs_ifview *v = fs->if_retired;

		fs->if_retired = v->retired_next;
		view_free(v);
	}
}

void fs_if_reset(struct fs *fs)
{
	struct fs_ifview *v;

	pthread_mutex_lock(&fs->if_lock);
	v = atomic_exchange(&fs->ifv, NULL);
	if (v) {
		/* class inodes are indexes into this view: the kernel must look
		 * every class name up again in the next one, and drop the
		 * listing it cached (cache_readdir) of each class inode, which
		 * the next view may give to another class or other files (a
		 * reader in the directory keeps the inode alive across the
		 * lookup) */
		for (uint32_t i = 0; i < v->nclasses; i++) {
			const char *name = fs_if_class(v, i, NULL, NULL, NULL);

			fs_notify_entry(fs, 1, name, strlen(name));
			fs_notify_inode(fs, fs_ino(FS_K_IFCLASS, i, 0));
		}
		fs_notify_inode(fs, 1);
		v->retired_next = fs->if_retired;
		fs->if_retired = v;
	}
	pthread_mutex_unlock(&fs->if_lock);
}

const char *fs_if_class(const struct fs_ifview *v, uint32_t c, uint32_t *first, uint32_t *n,
			int64_t *mtime)
{
	const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;

	if (first)
		*first = disk_le32_get(r + 8);
	if (n)
		*n = disk_le32_get(r + 12);
	if (mtime)
		*mtime = (int64_t)disk_le64_get(r + 16);
	return v->strtab + disk_le64_get(r);
}

const char *fs_if_file(const struct fs_ifview *v, uint32_t i, uint32_t *shard, uint32_t *entry)
{
	const unsigned char *r = v->files + (size_t)i * IFV_FILE_REC;

	*shard = disk_le32_get(r + 4);
	*entry = disk_le32_get(r + 8);
	return v->strtab + disk_le32_get(r);
}

/* The attributes of member (shard, entry) of a file of the view (its
 * record in the members section), or NULL. */
static const unsigned char *ifv_member(const struct fs_ifview *v, uint32_t shard, uint32_t entry)
{
	uint32_t lo, hi;

	if (shard >= v->nshards)
		return NULL;
	lo = disk_le32_get(v->shards + (size_t)shard * 4);
	hi = disk_le32_get(v->shards + (size_t)(shard + 1) * 4);
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const unsigned char *r = v->members + (size_t)mid * IFV_MEMBER;
		uint32_t e = disk_le32_get(r);

		if (e < entry)
			lo = mid + 1;
		else if (e > entry)
			hi = mid;
		else
			return r;
	}
	return NULL;
}

/* Record [lo, hi) of recs (stride bytes each, a name offset first) named
 * name[0..len), or -ENOENT. */
static int64_t ifv_bsearch(const struct fs_ifview *v, const unsigned char *recs, size_t stride,
			   uint32_t lo, uint32_t hi, const char *name, size_t len)
{
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const unsigned char *r = recs + (size_t)mid * stride;
		const char *m =
		    v->strtab + (stride == IFV_FILE_REC ? disk_le32_get(r) : disk_le64_get(r));
		int c = fs_name_cmp(m, name, len);

		if (c < 0)
			lo = mid + 1;
		else if (c > 0)
			hi = mid;
		else
			return mid;
	}
	return -ENOENT;
}

int64_t fs_if_class_lookup(const struct fs_ifview *v, const char *name, size_t len)
{
	return ifv_bsearch(v, v->classes, IFV_CLASS_REC, 0, v->nclasses, name, len);
}

int64_t fs_if_file_lookup(const struct fs_ifview *v, uint32_t c, const char *name, size_t len)
{
	uint32_t first, n;

	if (c >= v->nclasses)
		return -ENOENT;
	fs_if_class(v, c, &first, &n, NULL);
	return ifv_bsearch(v, v->files, IFV_FILE_REC, first, first + n, name, len);
}

/* ---- the view's operations (fs_view.h) ------------------------------------
 * The root lists the classes (FS_K_IFCLASS), a class its files
 * (FS_K_IFFILE). A file is its image member: read, xattrs and log lines are
 * the member's; its attributes too, with its own inode and nlink 1. */

static int ifroot_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	int err = fs_view_dir.getattr(fs, ino, st);

	if (err == 0)
		st->st_nlink = 1; /* "unknown": no view needed to answer */
	return err;
}

static int ifroot_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			 uint64_t *ino)
{
	const struct fs_ifview *v;
	int64_t idx;
	int err = fs_if_get(fs, &v);

	(void)parent;
	if (err < 0)
		return err;
	idx = fs_if_class_lookup(v, name, len);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_IFCLASS, (uint32_t)idx, 0);
	return 0;
}

static int ifroot_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	const struct fs_ifview *v;
	int err = fs_if_get(fs, &v);

	(void)ino;
	if (err < 0)
		return err;
	l->p = v;
	l->n = v->nclasses;
	l->parent = 1;
	return 0;
}

static const char *ifroot_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	const struct fs_ifview *v = l->p;

	*ino = fs_ino(FS_K_IFCLASS, i, 0);
	return fs_if_class(v, i, NULL, NULL, NULL);
}

const struct fs_view fs_view_ifroot = {
    .name = "imagefolder root",
    .getattr = ifroot_getattr,
    .lookup = ifroot_lookup,
    .list_open = ifroot_list_open,
    .list_entry = ifroot_list_entry,
};

static int ifclass_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct fs_ifview *v;
	uint32_t a = fs_ino_a(ino);
	int64_t mtime;
	int err = fs_if_get(fs, &v);

	if (err < 0)
		return err;
	if (a >= v->nclasses || fs_ino_b(ino) != 0)
		return -ENOENT;
	fs_if_class(v, a, NULL, NULL, &mtime);
	fs_attr_dir(fs, st, ino, 0555, 2, mtime);
	return 0;
}

static int ifclass_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			  uint64_t *ino)
{
	const struct fs_ifview *v;
	uint32_t shard, entry;
	int64_t idx;
	int err = fs_if_get(fs, &v);

	if (err < 0)
		return err;
	idx = fs_if_file_lookup(v, fs_ino_a(parent), name, len);
	if (idx >= 0)
		fs_if_file(v, (uint32_t)idx, &shard, &entry);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_IFFILE, shard, entry);
	return 0;
}

static int ifclass_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	const struct fs_ifview *v;
	int err = fs_if_get(fs, &v);

	(void)ino;
	if (err < 0)
		return err;
	if (l->a >= v->nclasses)
		return -ENOENT;
	l->p = v;
	fs_if_class(v, l->a, &l->first, &l->n, NULL);
	l->parent = 1;
	return 0;
}

static const char *ifclass_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	uint32_t shard, entry;
	const char *name = fs_if_file(l->p, l->first + i, &shard, &entry);

	*ino = fs_ino(FS_K_IFFILE, shard, entry);
	return name;
}

const struct fs_view fs_view_ifclass = {
    .name = "imagefolder class",
    .getattr = ifclass_getattr,
    .lookup = ifclass_lookup,
    .list_open = ifclass_list_open,
    .list_entry = ifclass_list_entry,
};

/* From the view's record when the view is there (no shard index needed);
 * else the member's. */
static int iffile_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct fs_ifview *v = atomic_load_explicit(&fs->ifv, memory_order_acquire);
	const unsigned char *r;
	uint64_t size_mode;
	int err;

	if (fs_ino_a(ino) >= fs->nshards)
		return -ENOENT;
	r = v ? ifv_member(v, fs_ino_a(ino), fs_ino_b(ino)) : NULL;
	if (r) {
		if (!fs_obj_live(fs_obj(fs, fs_shard(fs, fs_ino_a(ino))->obj)))
			return -ESTALE; /* as fs_member_getattr: an old version */
		size_mode = disk_le64_get(r + 8);
		fs_attr_base(fs, st, ino);
		st->st_mode = S_IFREG | (mode_t)(size_mode & 07777);
		st->st_nlink = 1;
		st->st_size = (off_t)(size_mode >> 12);
		st->st_blocks = (blkcnt_t)(((size_mode >> 12) + 511) / 512);
		st->st_mtim.tv_sec = st->st_ctim.tv_sec = st->st_atim.tv_sec =
		    (time_t)disk_le32_get(r + 4);
		return 0;
	}
	err = fs_member_getattr(fs, ino, st);
	if (err == 0 && !S_ISREG(st->st_mode))
		err = -ENOENT;
	st->st_ino = ino;
	st->st_nlink = 1;
	return err;
}

const struct fs_view fs_view_iffile = {
    .name = "imagefolder file",
    .getattr = iffile_getattr,
    .read = fs_member_read,
    .xattr = fs_member_xattr,
    .describe = fs_member_describe,
    .mark_stale = fs_member_mark_stale,
};
