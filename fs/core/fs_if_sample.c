/*
 * fs_if_sample.c — the --layout imagefolder view: what one sample of a
 * shard's index becomes (an item, fs_if_i.h), or why it is left out.
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
 * "imagefolder-cls|<codec>|<tag>|<size>|<key>", the version's tag
 * backend_version_tag's, in the shard's family "imagefolder-cls|<key>",
 * which a save sweeps of the older versions' maps) and later mounts read none of them again. A
 * shard's index from a sidecar is trusted for a .cls member only once the tar header before its
 * bytes, read with them, describes it (read_cls); one that does not
 * rejects the sidecar and the view is built again over the index built
 * from the shard (fs_if_get).
 *
 * Contract: called by the build's worker threads, each on its own shard
 * (the shard's index and stream held by the caller, and the imagefolder lock:
 * a rejected sidecar's shard is replaced after the build); may block on
 * the reads of .cls members. Non-goals: other media (images only); labels
 * beyond one class per sample.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fs_if_i.h"

/* A .cls member longer than this is no class number. */
#define IF_CLS_MAX 32

static const char *const image_exts[] = {"jpg", "jpeg", "png", "webp", "bmp",
					 "ppm", "pgm",	"tif", "tiff"};

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

/* The integer in the bytes of a .cls member, buf[0..n) (surrounding white
 * space allowed): 0 or -EINVAL when they hold no class. */
static int parse_cls(char *buf, size_t n, uint64_t *num)
{
	unsigned long long v;
	char *p, *end;

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

/* The integer in .cls member idx (entry e) of shard's index: 0, -EINVAL
 * when the member holds no class, or the read's negative errno. An index
 * from a sidecar whose member idx no read checked yet (fs_shard_unchecked)
 * is trusted only after the tar header before the data, read with it (one
 * read of the stream), describes e (shardidx_check_header, as a member's
 * first read: fs_view_shard.c); a header that does not rejects the index
 * (fs_shard_reject_deferred: the caller holds the imagefolder lock) and gives -ESTALE,
 * never a class from bytes the index points to. */
static int read_cls(struct fs *fs, uint32_t shard, struct cachetier_obj *stream, uint32_t idx,
		    const struct shardidx_entry *e, uint64_t *num)
{
	char buf[512 + IF_CLS_MAX + 1];
	size_t hdr = 0;
	ssize_t n;
	int err;

	if (e->type != SHARDIDX_REG || (e->flags & (SHARDIDX_F_SPARSE | SHARDIDX_F_TRUNCATED)) ||
	    e->size == 0 || e->size > IF_CLS_MAX)
		return -EINVAL;
	if (fs_shard_unchecked(fs, shard, idx)) {
		if (e->data_off < 512)
			return fs_shard_reject_deferred(fs, shard, e, "is not there");
		hdr = 512;
	}
	n = fetch_pread(fs->fetch, FETCH_READER_SELF, stream, buf, hdr + (size_t)e->size,
			e->data_off - hdr);
	if (n < 0)
		return (int)n;
	if (hdr && n != (ssize_t)(hdr + e->size)) /* the stream ends before them */
		return fs_shard_reject_deferred(fs, shard, e, "is past the end of the shard");
	if (n != (ssize_t)(hdr + e->size))
		return -EINVAL;
	if (hdr) {
		err = shardidx_check_header(buf, e);
		if (err < 0)
			return fs_shard_reject_deferred(
			    fs, shard, e,
			    err == -EBADMSG ? "is no tar header" : "describes another member");
		fs_shard_mark_checked(fs, shard, idx);
	}
	return parse_cls(buf + hdr, (size_t)e->size, num);
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

/* The entry sought in a map (disk_bsearch). */
struct cls_key {
	const struct cls_map *m;
	uint32_t entry;
};

static int cls_key_cmp(const void *ctx, size_t i)
{
	const struct cls_key *k = ctx;

	return k->m->entry[i] < k->entry ? -1 : k->m->entry[i] > k->entry;
}

static int cls_map_find(const struct cls_map *m, uint32_t entry, uint64_t *num)
{
	struct cls_key k = {m, entry};
	int found;
	size_t i = disk_bsearch(0, m->n, cls_key_cmp, &k, &found);

	if (!found)
		return -ENOENT;
	*num = m->num[i];
	return 0;
}

/* The blob name of a shard's class map and its family (one per key: a
 * save removes the maps of the shard's older versions). */
static int cls_blob_name(const struct fs *fs, uint32_t shard, char *buf, size_t size, char *family,
			 size_t fsize)
{
	const struct fs_obj *o = fs_obj(fs, fs_shard(fs, shard)->obj);
	char tag[BACKEND_VERSION_TAG]; /* the version: its ETag, else size and mtime */
	int n;

	backend_version_tag(o->info.etag, o->info.size, o->info.mtime, tag);
	n = snprintf(buf, size, "imagefolder-cls|%d|%s|%" PRIu64 "|%s", fs_shard(fs, shard)->codec,
		     tag, o->info.size, o->key);

	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return fs_shard_family(o->key, FS_SAVED_CLASSES, family, fsize);
}

/* Load the cached values into m (empty on any doubt about the blob: the
 * values are then read from the shard and the map saved again). */
void fs__if_cls_map_load(struct fs *fs, uint32_t shard, struct cls_map *m)
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

void fs__if_cls_map_save(struct fs *fs, uint32_t shard, const struct cls_map *m)
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

/* The members of the sample of entries [first, first + n) that matter:
 * its first image (*img_i, *ext the offset of its extension in the entry's
 * name) and its first ".cls" (*cls_i); SHARDIDX_NONE where there is none. */
static void sample_members(const struct shardidx *ix, uint32_t first, uint32_t n, uint32_t *img_i,
			   size_t *ext, uint32_t *cls_i)
{
	struct shardidx_entry e;

	*img_i = *cls_i = SHARDIDX_NONE;
	for (uint32_t i = first; i < first + n; i++) {
		const char *x, *dot;

		if (shardidx_entry_get(ix, i, &e) < 0 || e.type == SHARDIDX_DIR)
			continue;
		dot = strchr(e.name, '.');
		if (*img_i == SHARDIDX_NONE && e.type == SHARDIDX_REG && is_image(e.name, &x)) {
			*img_i = i;
			*ext = (size_t)(x - e.name);
		}
		if (*cls_i == SHARDIDX_NONE && dot && strcmp(dot, ".cls") == 0)
			*cls_i = i;
	}
}

/* --class-from cls: the class of a sample from its .cls member cls_i, from
 * the cached map cm or read from the shard (and added to cm). it->has_num
 * stays 0 when the sample has none. 0, or -EIO / -ECANCELED / -ENOMEM,
 * which abort the view, or -ESTALE: the shard's sidecar index was
 * rejected (read_cls), the view is built again once it is replaced. */
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
		err = read_cls(fs, it->shard, stream, cls.canon, &cls, &it->cls_num);
		if (err == -EIO || err == -ECANCELED || err == -ESTALE)
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
			memcpy(it->clsname, d.name, strlen(d.name) + 1);
			it->cls = it->clsname;
			it->clslen = strlen(d.name);
		}
		return;
	}
	us = memchr(it->name, '_', keylen);
	if (us && us > it->name) {
		it->cls = it->name;
		it->clslen = (size_t)(us - it->name);
	}
}

/* The item of the sample of entries [first, first + n) of shard
 * it->shard's index (shardidx_sample_next), or 1 when it is left out
 * (counted); 0, or -EIO / -ECANCELED / -ENOMEM / -ESTALE (class_from_cls). */
int fs__if_sample(struct fs *fs, const struct shardidx *ix, struct cachetier_obj *stream,
		  struct cls_map *cm, uint32_t first, uint32_t n, struct if_item *it)
{
	struct shardidx_entry img, canon;
	uint32_t img_i, cls_i;
	size_t ext = 0;
	const char *dot;
	int err;

	sample_members(ix, first, n, &img_i, &ext, &cls_i);
	if (img_i == SHARDIDX_NONE) {
		fs->c.if_no_image++;
		return 1;
	}
	shardidx_entry_get(ix, img_i, &img);
	if (shardidx_entry_get(ix, img.canon, &canon) < 0 || canon.type != SHARDIDX_REG) {
		fs->c.if_no_image++; /* a hard link to what is no file */
		return 1;
	}
	memcpy(it->name, img.name, strlen(img.name) + 1);
	dot = strchr(it->name, '.');
	it->key = it->name;
	it->keylen = dot ? (size_t)(dot - it->name) : strlen(it->name);
	it->ext = it->name + ext;
	it->entry = img.canon;
	it->img = img_i;
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
