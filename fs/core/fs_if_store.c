/*
 * fs_if_store.c — the --layout imagefolder view in the cache directory:
 * which blob is this dataset's view (its fingerprint and family), mapping
 * a saved one or building a new one, saving and mapping what the build
 * wrote, and removing the views this one replaces.
 *
 * A later mount of the same shards maps the blob without indexing any
 * shard. A view that cannot be saved or mapped is kept in the heap, but
 * only when its build never needed the disk (fs__if_emit says why).
 *
 * Contract: runs under the imagefolder lock (fs_if_get); may block (the cache
 * directory, the build). Errors: the build's, -ENOMEM; a saved view that
 * is torn, of another version or of other shards is counted, logged and
 * built again, never used. Non-goals: sharing a view between sources or
 * --class-from values (each is its own family).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fs_if_i.h"

static uint64_t if_fingerprint(const struct fs *fs, uint32_t nshards)
{
	unsigned char w[16];
	uint64_t h = disk_fnv64("shardfs-imagefolder-view", 24);

	disk_le32_put(w, IFV_VERSION);
	/* --class-gaps empty adds classes: another view (refuse: as before) */
	disk_le32_put(w + 4, (uint32_t)fs->cfg.class_from | (uint32_t)fs->cfg.class_gaps << 8);
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
		       "imagefolder: removed %u older %s of this dataset from the cache", n,
		       fs_plural(n, "view", "views"));
}

/* A saved blob that could not be mapped (or watched): read into the heap. */
static int ifv_read(struct fs *fs, const struct ifv_meta *want, struct fs_ifview **out,
		    struct ifv_meta *got)
{
	struct fs_ifview *v = calloc(1, sizeof(*v));
	char family[32], name[64];
	size_t len;
	void *b = NULL;
	int err;

	ifv_family(fs, family, sizeof(family));
	ifv_name(family, want->fp, name, sizeof(name));
	err = v ? cachetier_meta_get_in(fs->ct, family, name, &b, &len) : -ENOMEM;
	if (err == 0)
		err = fs__if_open(v, b, len, want, got);
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

/* Map the saved view of fingerprint want->fp (read into the heap when its
 * file cannot be watched for changes: cachetier_meta_watched): 0, -ENOENT
 * (none), the errors of fs__if_open or of cachetier_meta_map. */
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
	if (!cachetier_meta_watched(m)) {
		/* a change of the file in place could not be seen: a copy */
		cachetier_meta_unmap(m);
		return ifv_read(fs, want, out, got);
	}
	v = calloc(1, sizeof(*v));
	err = v ? fs__if_open(v, data, len, want, got) : -ENOMEM;
	if (err < 0) {
		cachetier_meta_unmap(m);
		free(v);
		return err;
	}
	v->map = m;
	*out = v;
	return 0;
}

/* The view in the heap: blob of p written into memory. */
static int ifv_heap(struct if_pass *p, const struct ifv_meta *want, const struct ifv_layout *l,
		    struct fs_ifview **out)
{
	struct ifv_sink k = {.heap = calloc(1, (size_t)l->len)};
	struct fs_ifview *v = calloc(1, sizeof(*v));
	struct ifv_meta got;
	int err = k.heap && v ? fs__if_write(p, want, l, &k) : -ENOMEM;

	if (err == 0)
		err = fs__if_open(v, k.heap, (size_t)l->len, want, &got);
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

/* Write the blob of p into the cache directory and map it. When it cannot
 * be written (a full disk) it is built in the heap instead, as long as the
 * build never needed the disk (its sorts fitted --imagefolder-build-memory:
 * the view is about as large); otherwise the build fails, as a view in the
 * heap would cost the memory the budget keeps it from taking (tens of bytes
 * a sample: gigabytes for tens of millions), and says why. A view that
 * left a shard out is not saved: it is built in the heap. */
int fs__if_emit(struct if_pass *p, const struct ifv_meta *want, const struct ifv_layout *l,
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
		err = fs__if_write(p, want, l, &k);
		if (err == 0)
			err = cachetier_meta_commit(k.w);
		else
			cachetier_meta_abort(k.w);
	}
	if (err == 0) {
		fs->c.if_view_saved++;
		if (ifv_map(fs, want, out, &got) == 0) {
			fs->c.if_view_mapped = (*out)->map != NULL;
			ifv_clean(fs, family, name, want->fp);
			return 0;
		}
		fs_log(FS_LOG_WARN, "imagefolder: the view is kept in memory: cannot map %s", name);
		err = ifv_read(fs, want, out, &got);
		ifv_clean(fs, family, name, want->fp);
		/* the file just written no longer checks out: changed in place
		 * under the build, which fs_if_get makes again (ESTALE) */
		return err == -EBADMSG || err == -EPROTO ? -ESTALE : err;
	}
	if (err == -ENOMEM || err == -EFBIG || err == -EOVERFLOW)
		return err;
	if (fs_sort_spilled(p->files) || fs_sort_spilled(p->classes)) {
		fs_log(FS_LOG_ERR,
		       "imagefolder: cannot write the view %s to %s: %s; its build sorted %" PRIu64
		       " %s in runs there (more than --imagefolder-build-memory holds), so it is "
		       "not built in memory instead: free space there, use another --cache-dir, or "
		       "raise --imagefolder-build-memory",
		       name, fs->cfg.ct.cache_dir, strerror(-err), fs_sort_count(p->files),
		       fs_plural(fs_sort_count(p->files), "file", "files"));
		return err;
	}
	fs_log(FS_LOG_WARN, "imagefolder: the view is kept in memory: cannot save %s: %s", name,
	       strerror(-err));
	return ifv_heap(p, want, l, out);
}

void fs__if_unsave(struct fs *fs, const struct fs_ifview *v)
{
	char family[32], name[64];

	ifv_family(fs, family, sizeof(family));
	ifv_name(family, v->fp, name, sizeof(name));
	cachetier_meta_remove(fs->ct, family, name);
}

/* The view: the saved one of these shards when there is a sound one, else
 * a new one. */
int fs__if_view(struct fs *fs, struct fs_ifview **out)
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
		fs->c.if_view_mapped = (*out)->map != NULL;
		fs->c.if_images = (*out)->nfiles;
		fs->c.if_no_image = got.no_image;
		fs->c.if_no_class = got.no_class;
		fs->c.if_dup_dropped = got.dup;
		fs_log(FS_LOG_INFO, "imagefolder: %u %s in %u %s mapped from the cache",
		       (*out)->nfiles, fs_plural((*out)->nfiles, "image", "images"),
		       (*out)->nclasses, fs_plural((*out)->nclasses, "class", "classes"));
		return 0;
	}
	if (err != -ENOENT) {
		if (err == -EBADMSG || err == -EPROTO || err == -ESTALE)
			fs->c.if_view_rejected++;
		fs_log(FS_LOG_WARN, "imagefolder: saved view %s unusable (%s); building it again",
		       name, strerror(-err));
	}
	return fs__if_build(fs, &want, out);
}
