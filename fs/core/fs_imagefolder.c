/*
 * fs_imagefolder.c — the --layout imagefolder view (DESIGN.md section 1):
 * MOUNTPOINT/<class>/<name>.<ext>, one file per WebDataset sample, so that
 * torchvision's datasets.ImageFolder(MOUNTPOINT) works on shards unchanged.
 *
 * Building: the view needs every shard's index, so the first lookup or
 * listing of the root indexes all shards with IF_THREADS threads (each
 * takes the next shard; fs_shard_index is thread-safe and uses the cache
 * directory's or a sidecar index when there is one). Each thread collects
 * its shards' samples; one thread then merges them in shard order, so the
 * result does not depend on thread timing. The result becomes one blob,
 * saved in the cache directory and mapped (below: "the view as a blob");
 * a later mount of the same shards maps it without indexing any shard.
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
 * "imagefolder-cls|<codec>|<etag>|<size>|<key>": text lines "ENTRY VALUE"
 * after a magic line) and later mounts read none of them again.
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

/* One sample found while indexing, before names are made unique. */
struct if_item {
	char *cls; /* class name (cls: if_cls_num, the class is cls_num) */
	char *key;
	const char *ext; /* inside name, no '.' */
	char *name;	 /* member name (owned) */
	uint32_t shard, entry;
	uint32_t mode;	  /* the member's (its canonical entry's) permission bits ... */
	uint64_t size;	  /* ... size ... */
	int64_t mtime;	  /* ... and mtime */
	uint64_t cls_num; /* cls: the integer */
};

struct if_list {
	struct if_item *v;
	size_t n, cap;
};

/* The view while it is assembled, before it becomes a blob. */
struct if_file {
	char *name;
	uint32_t shard, entry, mode;
	uint64_t size;
	int64_t mtime;
};
struct if_class {
	char *name;
	uint32_t first, n;
	int64_t mtime;
};
struct if_heap {
	struct if_class *classes;
	struct if_file *files;
	uint32_t nclasses, nfiles;
};

struct if_build {
	struct fs *fs;
	uint32_t nshards;	   /* shards when the build started (a refresh may add) */
	atomic_uint next;	   /* next shard to take */
	struct if_list *per_shard; /* [nshards] */
	atomic_int err;		   /* -ENOMEM, -EIO, -ECANCELED abort the build */
	atomic_uint skipped;	   /* shards left out (no index): the view is not saved */
};

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

static int class_ok(const char *c)
{
	return c && *c && strcmp(c, ".") && strcmp(c, "..") && strcmp(c, ".shardfs") &&
	       !strchr(c, '/');
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

static int cls_blob_name(const struct fs *fs, uint32_t shard, char *buf, size_t size)
{
	const struct fs_obj *o = fs_obj(fs, fs_shard(fs, shard)->obj);
	int n = snprintf(buf, size, "imagefolder-cls|%d|%s|%" PRIu64 "|%s",
			 fs_shard(fs, shard)->codec, o->info.etag, o->info.size, o->key);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Load the cached values into m (empty on any doubt about the blob: the
 * values are then read from the shard and the map saved again). */
static void cls_map_load(struct fs *fs, uint32_t shard, struct cls_map *m)
{
	char name[4096 + 256];
	const unsigned char *b;
	size_t len;
	uint32_t n;
	void *buf;
	int err;

	if (cls_blob_name(fs, shard, name, sizeof(name)) < 0 ||
	    cachetier_meta_get(fs->ct, name, &buf, &len) < 0)
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
	char name[4096 + 256];
	size_t len = DISK_BLOB_HDR + m->n * CLS_ROW;
	unsigned char *buf;

	if (m->from_cache || !m->dirty || m->n > UINT32_MAX ||
	    cls_blob_name(fs, shard, name, sizeof(name)) < 0)
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
	if (cachetier_meta_put(fs->ct, name, buf, len) < 0)
		fs_log(FS_LOG_WARN, "imagefolder: classes of %s not cached",
		       fs_obj(fs, fs_shard(fs, shard)->obj)->key);
	free(buf);
}

static int list_push(struct if_list *l, const struct if_item *it)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct if_item *p = realloc(l->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = *it;
	return 0;
}

/* it->cls of a sample whose class is its cls_num (--class-from cls): the
 * name, zero-padded, is made once per class. */
static char if_cls_num[] = "#";

static void item_free(struct if_item *it)
{
	if (it->cls != if_cls_num)
		free(it->cls);
	free(it->key);
	free(it->name);
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
 * the cached map cm or read from the shard (and added to cm). it->cls stays
 * NULL when the sample has none. 0, or -EIO / -ECANCELED / -ENOMEM, which
 * abort the view. */
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
	it->cls = if_cls_num;
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
		if (img->parent != SHARDIDX_NONE && shardidx_entry_get(ix, img->parent, &d) == 0)
			it->cls = strdup(d.name);
		return;
	}
	us = memchr(img->name, '_', keylen);
	if (us && us > img->name)
		it->cls = strndup(img->name, (size_t)(us - img->name));
}

/* Collect the samples of one shard into l: 0; 1 when the shard has no
 * index (left out of the view); or -EIO, -ECANCELED, -ENOMEM. */
static int if_scan_shard(struct fs *fs, uint32_t shard, struct if_list *l)
{
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
	if (info.nsamples && !l->v) { /* at most one item a sample: no slack */
		l->v = malloc(info.nsamples * sizeof(*l->v));
		l->cap = l->v ? info.nsamples : 0;
	}
	if (fs->cfg.class_from == FS_CLASS_CLS)
		cls_map_load(fs, shard, &cm);
	for (uint32_t s = 0; s < info.nsamples; s++) {
		struct shardidx_entry img, canon;
		uint32_t img_i, cls_i;
		struct if_item it = {0};
		const char *ext = NULL, *dot;
		size_t keylen;

		if (sample_members(ix, s, &img_i, &ext, &cls_i) < 0)
			continue;
		if (img_i == SHARDIDX_NONE) {
			fs->c.if_no_image++;
			continue;
		}
		shardidx_entry_get(ix, img_i, &img);
		if (shardidx_entry_get(ix, img.canon, &canon) < 0 || canon.type != SHARDIDX_REG) {
			fs->c.if_no_image++; /* a hard link to what is no file */
			continue;
		}
		dot = strchr(img.name, '.');
		keylen = dot ? (size_t)(dot - img.name) : strlen(img.name);
		it.shard = shard;
		it.entry = img.canon;
		it.mode = canon.mode;
		it.size = canon.size;
		it.mtime = canon.mtime;
		if (fs->cfg.class_from == FS_CLASS_CLS) {
			err = class_from_cls(fs, ix, stream, &cm, cls_i, &it);
			if (err < 0)
				goto out;
		} else {
			class_from_name(fs, ix, &img, keylen, &it);
		}
		if (!class_ok(it.cls)) {
			item_free(&it);
			fs->c.if_no_class++;
			continue;
		}
		it.name = strdup(img.name);
		it.key = strndup(img.name, keylen);
		if (!it.name || !it.key || list_push(l, &it) < 0) {
			item_free(&it);
			err = -ENOMEM;
			goto out;
		}
		l->v[l->n - 1].ext = l->v[l->n - 1].name + (ext - img.name);
	}
	cls_map_save(fs, shard, &cm);
out:
	free(cm.entry);
	free(cm.num);
	return err;
}

static void *if_worker(void *arg)
{
	struct if_build *b = arg;

	for (;;) {
		unsigned i = atomic_fetch_add(&b->next, 1);

		if (i >= b->nshards || atomic_load(&b->err))
			break;
		int err = if_scan_shard(b->fs, i, &b->per_shard[i]);

		if (err < 0)
			atomic_store(&b->err, err);
		else if (err > 0)
			atomic_fetch_add(&b->skipped, 1);
	}
	return NULL;
}

/* Order of the merged items: class, then the name each wants, then where
 * it comes from; the first of equal names keeps its name. */
static int item_cmp(const void *pa, const void *pb)
{
	const struct if_item *a = pa, *b = pb;
	int c;

	if (a->cls == if_cls_num && b->cls == if_cls_num) {
		/* the padded names sort as the numbers */
		if (a->cls_num != b->cls_num)
			return a->cls_num < b->cls_num ? -1 : 1;
	} else {
		c = strcmp(a->cls, b->cls);
		if (c)
			return c;
	}
	c = strcmp(a->key, b->key);
	if (c)
		return c;
	c = strcmp(a->ext, b->ext);
	if (c)
		return c;
	if (a->shard != b->shard)
		return a->shard < b->shard ? -1 : 1;
	return a->entry < b->entry ? -1 : a->entry > b->entry;
}

static int file_cmp(const void *pa, const void *pb)
{
	const struct if_file *a = pa, *b = pb;

	return strcmp(a->name, b->name);
}

static char *join_name(const struct if_item *it, const char *shardname, int with_entry)
{
	size_t n = strlen(it->key) + strlen(shardname) + strlen(it->ext) + 32;
	char *s = malloc(n);

	if (!s)
		return NULL;
	if (!shardname[0])
		snprintf(s, n, "%s.%s", it->key, it->ext);
	else if (with_entry)
		snprintf(s, n, "%s~%s~%" PRIu32 ".%s", it->key, shardname, it->entry, it->ext);
	else
		snprintf(s, n, "%s~%s.%s", it->key, shardname, it->ext);
	return s;
}

static int same_class(const struct if_item *a, const struct if_item *b)
{
	if (a->cls == if_cls_num || b->cls == if_cls_num)
		return a->cls == b->cls && a->cls_num == b->cls_num;
	return strcmp(a->cls, b->cls) == 0;
}

/* The name of it's class: cls, or cls_num zero-padded to width digits. */
static char *class_name(const struct if_item *it, int width)
{
	char buf[32];

	if (it->cls != if_cls_num)
		return strdup(it->cls);
	snprintf(buf, sizeof(buf), "%0*" PRIu64, width, it->cls_num);
	return strdup(buf);
}

/* Turn the items into the view (sorted here). */
static int if_assemble(struct fs *fs, struct if_item *items, size_t n, struct if_heap *v)
{
	uint64_t max_cls = 0;
	int width = 1;
	size_t i = 0;
	size_t ncls = n ? 1 : 0;

	if (n > UINT32_MAX)
		return -EOVERFLOW;
	if (fs->cfg.class_from == FS_CLASS_CLS && n) {
		char buf[32];

		for (size_t k = 0; k < n; k++)
			max_cls = items[k].cls_num > max_cls ? items[k].cls_num : max_cls;
		width = snprintf(buf, sizeof(buf), "%" PRIu64, max_cls);
	}
	qsort(items, n, sizeof(*items), item_cmp);
	for (size_t k = 1; k < n; k++)
		ncls += !same_class(&items[k], &items[k - 1]);
	v->files = calloc(n ? n : 1, sizeof(*v->files));
	v->classes = calloc(ncls ? ncls : 1, sizeof(*v->classes));
	if (!v->files || !v->classes)
		return -ENOMEM;
	while (i < n) {
		struct if_class *c = &v->classes[v->nclasses];
		size_t j = i;

		c->name = class_name(&items[i], width);
		if (!c->name)
			return -ENOMEM;
		v->nclasses++;
		c->first = v->nfiles;
		for (; j < n && same_class(&items[j], &items[i]); j++) {
			struct if_item *it = &items[j];
			int dup = j > i && strcmp(it->key, items[j - 1].key) == 0 &&
				  strcmp(it->ext, items[j - 1].ext) == 0;
			int same_shard = dup && items[j - 1].shard == it->shard;
			char *name;

			if (!dup && strlen(it->key) + 1 + strlen(it->ext) == strlen(it->name)) {
				name = it->name; /* it is <key>.<ext>: the file takes it over (its
						  * ext, which the next item compares, stays) */
				it->name = NULL;
			} else {
				name = join_name(it, dup ? fs_shard(fs, it->shard)->dirname : "",
						 same_shard);
			}
			if (!name)
				return -ENOMEM;
			v->files[v->nfiles++] = (struct if_file){name,	   it->shard, it->entry,
								 it->mode, it->size,  it->mtime};
			c->mtime = it->mtime > c->mtime ? it->mtime : c->mtime;
		}
		c->n = v->nfiles - c->first;
		qsort(v->files + c->first, c->n, sizeof(*v->files), file_cmp);
		/* a renamed file may still meet an existing name: leave it out */
		for (uint32_t k = c->first + 1; k < c->first + c->n;) {
			if (strcmp(v->files[k].name, v->files[k - 1].name) == 0) {
				fs_log(FS_LOG_WARN,
				       "imagefolder: %s/%s stored twice; left out once", c->name,
				       v->files[k].name);
				fs->c.if_dup_dropped++;
				free(v->files[k].name);
				memmove(&v->files[k], &v->files[k + 1],
					(c->first + c->n - k - 1) * sizeof(*v->files));
				c->n--;
				v->nfiles--;
			} else {
				k++;
			}
		}
		i = j;
	}
	if (fs->cfg.class_from == FS_CLASS_CLS && v->nclasses && max_cls + 1 != v->nclasses)
		fs_log(FS_LOG_WARN,
		       "imagefolder: classes are not 0..%" PRIu64
		       " (%u present): torchvision's class_to_idx will not equal the .cls integers",
		       max_cls, v->nclasses);
	fs->c.if_images = v->nfiles;
	return 0;
}

static void heap_free(struct if_heap *v)
{
	for (uint32_t i = 0; v->classes && i < v->nclasses; i++)
		free(v->classes[i].name);
	for (uint32_t i = 0; v->files && i < v->nfiles; i++)
		free(v->files[i].name);
	free(v->classes);
	free(v->files);
	*v = (struct if_heap){0};
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

static void ifv_put_name(unsigned char *rec, int wide, char *strtab, uint64_t *off,
			 const char *name)
{
	size_t n = strlen(name) + 1;

	if (wide)
		disk_le64_put(rec, *off);
	else
		disk_le32_put(rec, (uint32_t)*off);
	memcpy(strtab + *off, name, n);
	*off += n;
}

struct ifv_member {
	uint32_t shard, entry, file;
};

static int member_cmp(const void *pa, const void *pb)
{
	const struct ifv_member *a = pa, *b = pb;

	if (a->shard != b->shard)
		return a->shard < b->shard ? -1 : 1;
	if (a->entry != b->entry)
		return a->entry < b->entry ? -1 : 1;
	return a->file < b->file ? -1 : a->file > b->file;
}

/* The shards and members sections: the files' attributes in (shard, entry)
 * order, and where each shard's start. */
static int ifv_put_members(const struct if_heap *hv, uint32_t nshards, unsigned char *shards,
			   unsigned char *out)
{
	struct ifv_member *m = malloc((hv->nfiles ? hv->nfiles : 1) * sizeof(*m));
	uint32_t k = 0;

	if (!m)
		return -ENOMEM;
	for (uint32_t i = 0; i < hv->nfiles; i++)
		m[i] = (struct ifv_member){hv->files[i].shard, hv->files[i].entry, i};
	qsort(m, hv->nfiles, sizeof(*m), member_cmp);
	for (uint32_t s = 0; s <= nshards; s++) {
		while (k < hv->nfiles && m[k].shard < s)
			k++;
		disk_le32_put(shards + (size_t)s * 4, k);
	}
	for (uint32_t i = 0; i < hv->nfiles; i++) {
		const struct if_file *f = &hv->files[m[i].file];
		unsigned char *r = out + (size_t)i * IFV_MEMBER;

		disk_le32_put(r, f->entry);
		disk_le32_put(r + 4, (uint32_t)f->mtime);
		disk_le64_put(r + 8, f->size << 12 | (f->mode & 07777));
	}
	free(m);
	return 0;
}

/* The blob of view hv (malloc'd, *len bytes). */
static int ifv_serialize(const struct if_heap *hv, const struct ifv_meta *m, unsigned char **out,
			 size_t *len)
{
	uint64_t strtab_len = 1, off = 1;
	unsigned char *b, *cls, *files, *shards, *members;
	char *strtab;

	for (uint32_t i = 0; i < hv->nclasses; i++)
		strtab_len += strlen(hv->classes[i].name) + 1;
	for (uint32_t i = 0; i < hv->nfiles; i++) {
		strtab_len += strlen(hv->files[i].name) + 1;
		if (hv->files[i].size >> 52 || hv->files[i].mtime < 0 ||
		    hv->files[i].mtime > UINT32_MAX)
			return -EFBIG; /* no such member: see shardidx.h */
	}
	if (strtab_len > UINT32_MAX)
		return -EFBIG; /* names are u32 offsets */
	*len = IFV_HDR + (size_t)hv->nclasses * IFV_CLASS_REC +
	       pad8((uint64_t)hv->nfiles * IFV_FILE_REC) + pad8(((uint64_t)m->nshards + 1) * 4) +
	       (size_t)hv->nfiles * IFV_MEMBER + pad8(strtab_len);
	b = calloc(1, *len);
	if (!b)
		return -ENOMEM;
	cls = b + IFV_HDR;
	files = cls + (size_t)hv->nclasses * IFV_CLASS_REC;
	shards = files + pad8((uint64_t)hv->nfiles * IFV_FILE_REC);
	members = shards + pad8(((uint64_t)m->nshards + 1) * 4);
	strtab = (char *)members + (size_t)hv->nfiles * IFV_MEMBER;
	if (ifv_put_members(hv, m->nshards, shards, members) < 0) {
		free(b);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < hv->nclasses; i++) {
		unsigned char *r = cls + (size_t)i * IFV_CLASS_REC;

		ifv_put_name(r, 1, strtab, &off, hv->classes[i].name);
		disk_le32_put(r + 8, hv->classes[i].first);
		disk_le32_put(r + 12, hv->classes[i].n);
		disk_le64_put(r + 16, (uint64_t)hv->classes[i].mtime);
	}
	for (uint32_t i = 0; i < hv->nfiles; i++) {
		unsigned char *r = files + (size_t)i * IFV_FILE_REC;

		ifv_put_name(r, 0, strtab, &off, hv->files[i].name);
		disk_le32_put(r + 4, hv->files[i].shard);
		disk_le32_put(r + 8, hv->files[i].entry);
	}
	memcpy(b, IFV_MAGIC, 8);
	disk_le32_put(b + 8, IFV_VERSION);
	disk_le32_put(b + 12, hv->nclasses);
	disk_le64_put(b + 24, m->fp);
	disk_le32_put(b + 32, hv->nfiles);
	disk_le32_put(b + 36, m->nshards);
	disk_le64_put(b + 40, strtab_len);
	disk_le64_put(b + 48, m->no_image);
	disk_le64_put(b + 56, m->no_class);
	disk_le64_put(b + 64, m->dup);
	disk_le32_put(b + 72, m->class_from);
	disk_le64_put(b + 16, ifv_sum(b, *len));
	*out = b;
	return 0;
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

/* Save blob b (the view just built) and map it; when that fails the view
 * lives in the heap (b, then owned by the view). */
static int ifv_save(struct fs *fs, const struct ifv_meta *want, int save, unsigned char *b,
		    size_t len, struct fs_ifview **out)
{
	struct fs_ifview *v;
	struct ifv_meta got;
	char family[32], name[64];
	int err;

	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want->fp, name, sizeof(name));
	if (save) {
		err = cachetier_meta_put_in(fs->ct, family, name, b, len);
		if (err == 0)
			fs->c.if_view_saved++;
		if (err == 0 && ifv_map(fs, want, out, &got) == 0) {
			free(b);
			fs->c.if_view_mapped = 1;
			ifv_clean(fs, family, name, want->fp);
			return 0;
		}
		if (err == 0)
			ifv_clean(fs, family, name, want->fp);
		fs_log(FS_LOG_WARN, "imagefolder: the view is kept in memory: %s %s",
		       err < 0 ? "cannot save" : "cannot map", name);
	}
	v = calloc(1, sizeof(*v));
	err = v ? ifv_open(v, b, len, want, &got) : -ENOMEM;
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

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Index shards [0, nshards) and gather their samples in shard order into
 * *items (n of them; the caller frees them); *skipped: shards left out. */
static int if_collect(struct fs *fs, uint32_t nshards, struct if_item **items, size_t *n,
		      unsigned *skipped)
{
	struct if_build b = {.fs = fs, .nshards = nshards};
	pthread_t th[IF_THREADS];
	unsigned nth = nshards < IF_THREADS ? nshards : IF_THREADS, started = 0;
	int err;

	*items = NULL;
	*n = 0;
	b.per_shard = calloc(nshards ? nshards : 1, sizeof(*b.per_shard));
	if (!b.per_shard)
		return -ENOMEM;
	fs_log(FS_LOG_INFO, "imagefolder: indexing %u shards with %u threads", nshards, nth);
	for (unsigned i = 0; i < nth; i++) {
		if (pthread_create(&th[i], NULL, if_worker, &b) != 0)
			break;
		started++;
	}
	if (started == 0)
		if_worker(&b); /* no threads to be had: do it here */
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	err = atomic_load(&b.err);
	*skipped = atomic_load(&b.skipped);
	for (uint32_t i = 0; err == 0 && i < nshards; i++)
		*n += b.per_shard[i].n;
	if (err == 0) {
		*items = malloc((*n ? *n : 1) * sizeof(**items));
		err = *items ? 0 : -ENOMEM;
	}
	*n = 0;
	for (uint32_t i = 0; err == 0 && i < nshards; i++) {
		if (b.per_shard[i].n) /* a shard without images has no array at all */
			memcpy(*items + *n, b.per_shard[i].v, b.per_shard[i].n * sizeof(**items));
		*n += b.per_shard[i].n;
		b.per_shard[i].n = 0; /* items own the strings now */
		free(b.per_shard[i].v);
		b.per_shard[i].v = NULL;
	}
	for (uint32_t i = 0; i < nshards; i++) {
		for (size_t k = 0; k < b.per_shard[i].n; k++)
			item_free(&b.per_shard[i].v[k]);
		free(b.per_shard[i].v);
	}
	free(b.per_shard);
	return err;
}

/* Build the view of what want describes from the shards' indexes, save it
 * in the cache directory and map it. */
static int if_build(struct fs *fs, struct ifv_meta *want, struct fs_ifview **out)
{
	uint64_t no_image = fs->c.if_no_image, no_class = fs->c.if_no_class,
		 dup = fs->c.if_dup_dropped;
	struct if_heap hv = {0};
	struct if_item *items;
	unsigned char *blob = NULL;
	unsigned skipped = 0;
	size_t n, len = 0;
	double t0 = now_ms();
	int err = if_collect(fs, want->nshards, &items, &n, &skipped);

	if (err == 0)
		err = if_assemble(fs, items, n, &hv);
	for (size_t i = 0; i < n && items; i++)
		item_free(&items[i]);
	free(items);
	want->no_image = fs->c.if_no_image - no_image;
	want->no_class = fs->c.if_no_class - no_class;
	want->dup = fs->c.if_dup_dropped - dup;
	if (err == 0)
		err = ifv_serialize(&hv, want, &blob, &len);
	heap_free(&hv);
#ifdef __GLIBC__
	malloc_trim(0); /* the build's many small allocations are gone */
#endif
	if (err == 0)
		err = ifv_save(fs, want, skipped == 0, blob, len, out);
	fs->c.if_build_ms = (uint64_t)(now_ms() - t0);
	if (err < 0) {
		fs_log(FS_LOG_ERR, "imagefolder: cannot build the view: %s", strerror(-err));
		return err;
	}
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
