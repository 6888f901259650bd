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
 * result does not depend on thread timing. Afterwards the view is
 * immutable and published with release semantics; readers take no lock.
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
	char *cls; /* class name (cls: the integer, unpadded) */
	char *key;
	const char *ext; /* inside name, no '.' */
	char *name;	 /* member name (owned) */
	uint32_t shard, entry;
	int64_t mtime;
	uint64_t cls_num; /* cls: the integer */
};

struct if_list {
	struct if_item *v;
	size_t n, cap;
};

struct if_build {
	struct fs *fs;
	uint32_t nshards;	   /* shards when the build started (a refresh may add) */
	atomic_uint next;	   /* next shard to take */
	struct if_list *per_shard; /* [nshards] */
	atomic_int err;		   /* -ENOMEM, -EIO, -ECANCELED abort the build */
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

static void item_free(struct if_item *it)
{
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
	char num[32];
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
	snprintf(num, sizeof(num), "%" PRIu64, it->cls_num);
	it->cls = strdup(num);
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

/* Collect the samples of one shard into l. */
static int if_scan_shard(struct fs *fs, uint32_t shard, struct if_list *l)
{
	struct shardidx *ix;
	struct cachetier_obj *stream;
	struct shardidx_info info;
	int err = fs_shard_index(fs, shard, &ix, &stream);

	struct cls_map cm = {0};

	/* The store is unreachable (or the daemon stops): no view now, rather
	 * than a view that lacks the shard for good; a later lookup builds it
	 * again (the indexes already loaded are kept). */
	if (err == -EIO || err == -ECANCELED)
		return err;
	if (err < 0)
		return 0; /* logged and counted by fs_shard_index; the view goes on without it */
	fs->c.if_shards_indexed++;
	shardidx_get_info(ix, &info);
	if (fs->cfg.class_from == FS_CLASS_CLS)
		cls_map_load(fs, shard, &cm);
	for (uint32_t s = 0; s < info.nsamples; s++) {
		struct shardidx_entry img;
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
		dot = strchr(img.name, '.');
		keylen = dot ? (size_t)(dot - img.name) : strlen(img.name);
		it.shard = shard;
		it.entry = img.canon;
		it.mtime = img.mtime;
		if (fs->cfg.class_from == FS_CLASS_CLS) {
			err = class_from_cls(fs, ix, stream, &cm, cls_i, &it);
			if (err < 0)
				goto out;
		} else {
			class_from_name(fs, ix, &img, keylen, &it);
		}
		if (!class_ok(it.cls)) {
			free(it.cls);
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
	}
	return NULL;
}

/* Order of the merged items: class, then the name each wants, then where
 * it comes from; the first of equal names keeps its name. */
static int item_cmp(const void *pa, const void *pb)
{
	const struct if_item *a = pa, *b = pb;
	int c = strcmp(a->cls, b->cls);

	if (c)
		return c;
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
	const struct fs_if_file *a = pa, *b = pb;

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

/* Turn the sorted items into the view. */
static int if_assemble(struct fs *fs, struct if_item *items, size_t n, struct fs_ifview *v)
{
	uint64_t max_cls = 0;
	int width = 1;
	size_t i = 0;

	if (n > UINT32_MAX)
		return -EOVERFLOW;
	if (fs->cfg.class_from == FS_CLASS_CLS && n) {
		char buf[32];

		for (size_t k = 0; k < n; k++)
			max_cls = items[k].cls_num > max_cls ? items[k].cls_num : max_cls;
		width = snprintf(buf, sizeof(buf), "%" PRIu64, max_cls);
		for (size_t k = 0; k < n; k++) {
			char *s = malloc(32);

			if (!s)
				return -ENOMEM;
			snprintf(s, 32, "%0*" PRIu64, width, items[k].cls_num);
			free(items[k].cls);
			items[k].cls = s;
		}
	}
	qsort(items, n, sizeof(*items), item_cmp);
	v->files = calloc(n ? n : 1, sizeof(*v->files));
	v->classes = calloc(n ? n : 1, sizeof(*v->classes));
	if (!v->files || !v->classes)
		return -ENOMEM;
	while (i < n) {
		struct fs_if_class *c = &v->classes[v->nclasses];
		size_t j = i;

		c->name = strdup(items[i].cls);
		if (!c->name)
			return -ENOMEM;
		v->nclasses++;
		c->first = v->nfiles;
		for (; j < n && strcmp(items[j].cls, items[i].cls) == 0; j++) {
			const struct if_item *it = &items[j];
			int dup = j > i && strcmp(it->key, items[j - 1].key) == 0 &&
				  strcmp(it->ext, items[j - 1].ext) == 0;
			int same_shard = dup && items[j - 1].shard == it->shard;
			char *name =
			    join_name(it, dup ? fs_shard(fs, it->shard)->dirname : "", same_shard);

			if (!name)
				return -ENOMEM;
			v->files[v->nfiles++] = (struct fs_if_file){name, it->shard, it->entry};
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

static void view_free(struct fs_ifview *v)
{
	if (!v)
		return;
	for (uint32_t i = 0; i < v->nclasses; i++)
		free(v->classes[i].name);
	for (uint32_t i = 0; i < v->nfiles; i++)
		free(v->files[i].name);
	free(v->classes);
	free(v->files);
	free(v);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int if_build(struct fs *fs, struct fs_ifview **out)
{
	struct if_build b = {.fs = fs, .nshards = fs->nshards};
	uint32_t nshards = b.nshards;
	pthread_t th[IF_THREADS];
	unsigned nth = nshards < IF_THREADS ? nshards : IF_THREADS, started = 0;
	struct if_item *items = NULL;
	struct fs_ifview *v = calloc(1, sizeof(*v));
	size_t n = 0;
	double t0 = now_ms();
	int err = 0;

	b.per_shard = calloc(nshards ? nshards : 1, sizeof(*b.per_shard));
	if (!v || !b.per_shard) {
		err = -ENOMEM;
		goto out;
	}
	fs_learn_all(fs); /* a brace pattern's sizes, many at once */
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
	if (err < 0)
		goto out;
	for (uint32_t i = 0; i < nshards; i++)
		n += b.per_shard[i].n;
	items = malloc((n ? n : 1) * sizeof(*items));
	if (!items) {
		err = -ENOMEM;
		goto out;
	}
	n = 0;
	for (uint32_t i = 0; i < nshards; i++) {
		if (b.per_shard[i].n) /* a shard without images has no array at all */
			memcpy(items + n, b.per_shard[i].v, b.per_shard[i].n * sizeof(*items));
		n += b.per_shard[i].n;
		b.per_shard[i].n = 0; /* items own the strings now */
	}
	err = if_assemble(fs, items, n, v);
	fs->c.if_build_ms = (uint64_t)(now_ms() - t0);
	if (err == 0)
		fs_log(FS_LOG_INFO,
		       "imagefolder: %u images in %u classes from %u shards in %" PRIu64
		       " ms (%llu without image, %llu without class)",
		       v->nfiles, v->nclasses, nshards, (uint64_t)fs->c.if_build_ms,
		       (unsigned long long)fs->c.if_no_image,
		       (unsigned long long)fs->c.if_no_class);
out:
	for (size_t i = 0; i < n && items; i++)
		item_free(&items[i]);
	free(items);
	for (uint32_t i = 0; b.per_shard && i < nshards; i++) {
		for (size_t k = 0; k < b.per_shard[i].n; k++)
			item_free(&b.per_shard[i].v[k]);
		free(b.per_shard[i].v);
	}
	free(b.per_shard);
	if (err < 0) {
		fs_log(FS_LOG_ERR, "imagefolder: cannot build the view: %s", strerror(-err));
		view_free(v);
		return err;
	}
	*out = v;
	return 0;
}

int fs_if_get(struct fs *fs, const struct fs_ifview **v)
{
	struct fs_ifview *p = atomic_load_explicit(&fs->ifv, memory_order_acquire);
	int err = 0;

	if (!p) {
		pthread_mutex_lock(&fs->if_lock);
		p = atomic_load_explicit(&fs->ifv, memory_order_acquire);
		if (!p) {
			err = if_build(fs, &p);
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
		 * every class name up again in the next one */
		for (uint32_t i = 0; i < v->nclasses; i++)
			fs_notify_entry(fs, 1, v->classes[i].name, strlen(v->classes[i].name));
		fs_notify_inode(fs, 1);
		v->retired_next = fs->if_retired;
		fs->if_retired = v;
	}
	pthread_mutex_unlock(&fs->if_lock);
}

int64_t fs_if_class_lookup(const struct fs_ifview *v, const char *name, size_t len)
{
	int64_t i = fs__bsearch_name(v->classes, sizeof(v->classes[0]),
				     offsetof(struct fs_if_class, name), 0, v->nclasses, name, len);

	return i < 0 ? -ENOENT : i;
}

int64_t fs_if_file_lookup(const struct fs_ifview *v, uint32_t c, const char *name, size_t len)
{
	int64_t i;

	if (c >= v->nclasses)
		return -ENOENT;
	i = fs__bsearch_name(v->files, sizeof(v->files[0]), offsetof(struct fs_if_file, name),
			     v->classes[c].first, v->classes[c].first + v->classes[c].n, name, len);
	return i < 0 ? -ENOENT : i;
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
	return v->classes[i].name;
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
	int err = fs_if_get(fs, &v);

	if (err < 0)
		return err;
	if (a >= v->nclasses || fs_ino_b(ino) != 0)
		return -ENOENT;
	fs_attr_dir(fs, st, ino, 0555, 2, v->classes[a].mtime);
	return 0;
}

static int ifclass_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len,
			  uint64_t *ino)
{
	const struct fs_ifview *v;
	int64_t idx;
	int err = fs_if_get(fs, &v);

	if (err < 0)
		return err;
	idx = fs_if_file_lookup(v, fs_ino_a(parent), name, len);
	*ino = idx < 0 ? 0 : fs_ino(FS_K_IFFILE, v->files[idx].shard, v->files[idx].entry);
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
	l->first = v->classes[l->a].first;
	l->n = v->classes[l->a].n;
	l->parent = 1;
	return 0;
}

static const char *ifclass_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	const struct fs_if_file *f = &((const struct fs_ifview *)l->p)->files[l->first + i];

	*ino = fs_ino(FS_K_IFFILE, f->shard, f->entry);
	return f->name;
}

const struct fs_view fs_view_ifclass = {
    .name = "imagefolder class",
    .getattr = ifclass_getattr,
    .lookup = ifclass_lookup,
    .list_open = ifclass_list_open,
    .list_entry = ifclass_list_entry,
};

static int iffile_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	int err;

	if (fs_ino_a(ino) >= fs->nshards)
		return -ENOENT;
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
