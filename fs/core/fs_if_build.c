/*
 * fs_if_build.c — the --layout imagefolder view's build: from every
 * shard's index to the counted, sorted records the blob is written from.
 *
 * The view needs every shard's index, so the first lookup or listing of
 * the root indexes all shards with IF_THREADS threads (each takes the next
 * shard; fs_shard_index is thread-safe and uses the cache directory's or a
 * sidecar index when there is one). Each thread adds its shards' samples
 * (fs_if_sample.c) to one sort, whose order is total, so the result does
 * not depend on thread timing. The build's heap is bounded by
 * --imagefolder-build-memory (past it, sorted runs go to scratch files of
 * the cache directory: fs_sort.c), not by the number of samples.
 *
 * Names: <key>.<ext> with the member's own extension. Where two samples of
 * a class would get one name, the first in (shard, entry) order keeps it
 * and later ones become <key>~<shard>.<ext>, then <key>~<shard>~<entry>.<ext>;
 * a name still taken after that is left out and counted (if_dup_dropped).
 * The blob holds these names (front-coded, fs_if_blob.c), so a listing or
 * a lookup reads no shard's index.
 * Everything is decided by the source's content, never by timing.
 *
 * Contract: fs__if_build runs under the imagefolder lock (fs_if_get), blocks while
 * it indexes shards, and returns the view written and mapped (or in the
 * heap: fs_if_store.c) or a negative errno; its threads end before it
 * returns. Non-goals: an incremental build (a changed dataset is built
 * again whole).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <time.h>

#include "fs_if_i.h"

/* Index building is I/O bound (headers of local shards, range reads of
 * remote ones); a few threads overlap the waits without a thundering herd. */
#define IF_THREADS 4

/* A worker's samples, added to the build's sort a batch at a time. */
struct if_batch {
	unsigned char *buf; /* records, each after its u32 length */
	size_t len, cap;
	uint64_t max_cls;
};

struct if_build {
	struct fs *fs;
	uint32_t nshards;	/* shards when the build started (a refresh may add) */
	atomic_uint next;	/* next shard to take */
	atomic_int err;		/* -ENOMEM, -EIO, -ECANCELED, -ENOSPC, -ESTALE abort the build */
	atomic_uint skipped;	/* shards left out (no index): the view is not saved */
	struct disk_mutex lock; /* DISK_LOCK_IF_BUILD: items, max_cls */
	struct fs_sort *items;	/* every sample, sorted by item_cmp */
	uint32_t *counts;	/* nshards: entries of each shard's index (each its worker's) */
	uint64_t *sums;		/* nshards: its index file's checksum (each its worker's) */
	uint64_t max_cls;	/* the largest cls_num */
};

#define IF_BATCH (1u << 20) /* a worker's batch of records */

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

/* Order of the files: class, name (strcmp: a lookup's binary search),
 * then the items' order (so of equal names the first item's is kept, as a
 * stable sort by name would). */
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
	put32(r + 20, it->img);
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

	disk_mutex_lock(&b->lock);
	for (size_t at = 0; err == 0 && at < bt->len;) {
		uint32_t len = get32(bt->buf + at);

		err = fs_sort_add(b->items, bt->buf + at + 4, len);
		at += 4 + (size_t)len;
	}
	if (bt->max_cls > b->max_cls)
		b->max_cls = bt->max_cls;
	disk_mutex_unlock(&b->lock);
	bt->len = 0;
	return err;
}

/* Add the samples of one shard to the build (through the worker's batch
 * bt): 0; 1 when the shard has no index (left out of the view); or -EIO,
 * -ECANCELED, -ENOMEM, the sort's -ENOSPC, or -ESTALE: a .cls member's tar
 * header disproved the shard's sidecar index (fs__if_sample), which
 * aborts the build (fs_if_get builds again once the shard is replaced). */
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
	b->counts[shard] = info.nentries;
	b->sums[shard] = shardidx_file_sum(ix);
	if (fs->cfg.class_from == FS_CLASS_CLS)
		fs__if_cls_map_load(fs, shard, &cm);
	/* in entry order, without the index's sample table (4 bytes a sample,
	 * kept as long as the index is loaded: 8.6 MB at 2.15 M samples) */
	for (uint32_t at = 0, first, n; shardidx_sample_next(ix, at, &first, &n) == 0;
	     at = first + n) {
		struct if_item it = {.shard = shard};

		err = fs__if_sample(fs, ix, stream, &cm, first, n, &it);
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
		fs__if_cls_map_save(fs, shard, &cm);
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

int fs__if_prev_keep(struct if_prev *pv, const void *rec, size_t len)
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
	char member[2 * (SHARDIDX_NAME_MAX + 1)];
	uint32_t kind;

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
	kind = !dir[0] ? IFV_NAME_PLAIN : same_shard ? IFV_NAME_ENTRY : IFV_NAME_DIR;
	if (entry > IFV_ENTRY_MASK)
		return -EOVERFLOW; /* entries are below 2^30 (the kind above, in the blob) */
	if (prev_grow(buf, FR_HDR + SHARDIDX_NAME_MAX + 1) < 0)
		return -ENOMEM;
	snprintf(member, sizeof(member), "%s.%s", key, ext);
	n = fs_if_name(member, kind, dir, entry, (char *)buf->p + FR_HDR, SHARDIDX_NAME_MAX + 1);
	if (n < 0) {
		fs_log(FS_LOG_WARN, "imagefolder: %s~%s...: a name over %u bytes; left out", key,
		       dir, SHARDIDX_NAME_MAX);
		p->dup++;
		return 0;
	}
	put32(buf->p, p->nclasses);
	put32(buf->p + 4, shard);
	put32(buf->p + 8, entry);
	put32(buf->p + 12, get32(r + 16));
	put64(buf->p + 16, seq);
	put64(buf->p + 24, get64(r + 24));
	put64(buf->p + 32, get64(r + 32));
	/* the record's kind: how the view makes the name again from its
	 * member's, unless it is named after a link member the record does
	 * not name */
	put32(buf->p + 40, get32(r + 20) != entry ? IFV_NAME_LINK : kind);
	put32(buf->p + 44, get32(r + 20));
	return fs_sort_add(p->files, buf->p, FR_HDR + (size_t)n + 1);
}

/* --class-gaps empty: the classes of the .cls values below v that no
 * sample has (from p->next_cls on), spooled without files. */
static int gaps_put(struct if_pass *p, uint64_t v)
{
	unsigned char r[IT_HDR + 1] = {0};

	if (p->fs->cfg.class_from != FS_CLASS_CLS || p->fs->cfg.class_gaps != FS_GAPS_EMPTY)
		return 0;
	if (v > p->next_cls && v - p->next_cls > IF_GAPS_MAX) {
		fs_log(FS_LOG_ERR,
		       "imagefolder: --class-gaps empty: the .cls value %" PRIu64
		       " would need %" PRIu64 " empty class directories below it (%u at most)",
		       v, v - p->next_cls, IF_GAPS_MAX);
		return -E2BIG;
	}
	for (; p->next_cls < v; p->next_cls++) {
		int err;

		put64(r, p->next_cls);
		err = class_put(p, r, 0);
		if (err < 0)
			return err;
	}
	p->next_cls = v + 1;
	return 0;
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
		if (newc && err == 0)
			err = gaps_put(p, get64(r));
		if (err == 0)
			err = file_put(p, r, newc ? NULL : &prev, seq++, &buf);
		if ((int64_t)get64(r + 32) > mtime)
			mtime = (int64_t)get64(r + 32);
		if (err == 0)
			err = fs__if_prev_keep(&prev, r, len);
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
 * the second of a name), their names' bytes front-coded and their blocks
 * (as ifv_write_files writes them). */
static int if_count_files(struct if_pass *p)
{
	struct if_prev prev = {0};
	struct fs_sort_iter *it;
	const void *v;
	size_t len;
	uint32_t j = 0; /* the file's place in its class */
	int err = fs_sort_iter_open(p->files, &it), got = 0;

	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;
		const char *name = (const char *)r + FR_HDR;
		int64_t mtime = (int64_t)get64(r + 32);

		if (!prev.set || get32(prev.p) != get32(r))
			j = 0;
		else if (strcmp((const char *)prev.p + FR_HDR, name) == 0) {
			p->dup++;
			continue;
		}
		if (get64(r + 24) >> 52 || mtime < 0 || mtime > UINT32_MAX)
			err = -EFBIG; /* no such member: see shardidx.h */
		else if (p->nfiles == UINT32_MAX)
			err = -EOVERFLOW;
		p->nfiles++;
		p->names_len +=
		    ifv_name_bytes(j % IFV_BLOCK ? (const char *)prev.p + FR_HDR : NULL, name);
		p->nblocks += j % IFV_BLOCK == 0;
		j++;
		if (err == 0)
			err = fs__if_prev_keep(&prev, r, len);
	}
	fs_sort_iter_close(it);
	free(prev.p);
	return err ? err : got;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Index shards [0, nshards) and add their samples to b->items (sorted,
 * finished); *skipped: shards left out. */
static int if_collect(struct if_build *b)
{
	pthread_t th[IF_THREADS];
	unsigned nth = b->nshards < IF_THREADS ? b->nshards : IF_THREADS, started = 0;
	int err;

	fs_log(FS_LOG_INFO, "imagefolder: indexing %u %s with %u %s", b->nshards,
	       fs_plural(b->nshards, "shard", "shards"), nth, fs_plural(nth, "thread", "threads"));
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
	return err; /* gaps in the .cls values: fs_if_view.c's prepare */
}

/* Build the view of what want describes from the shards' indexes, save it
 * in the cache directory and map it. The heap it takes is about
 * --imagefolder-build-memory, whatever the number of samples. */
int fs__if_build(struct fs *fs, struct ifv_meta *want, struct fs_ifview **out)
{
	uint64_t no_image = fs->c.if_no_image, no_class = fs->c.if_no_class;
	struct if_build b = {.fs = fs, .nshards = want->nshards};
	struct if_pass p = {.fs = fs, .budget = (size_t)(fs->cfg.if_build_memory / 2)};
	struct ifv_layout l;
	double t0 = now_ms();
	int err;

	disk_mutex_init(&b.lock, DISK_LOCK_IF_BUILD);
	b.counts = calloc(want->nshards ? want->nshards : 1, sizeof(*b.counts));
	b.sums = calloc(want->nshards ? want->nshards : 1, sizeof(*b.sums));
	p.counts = b.counts;
	p.sums = b.sums;
	err = b.counts && b.sums ? fs_sort_new(fs->ct, p.budget, item_cmp, &b.items) : -ENOMEM;
	if (err == 0)
		err = if_collect(&b);
	if (err == 0)
		err = if_files(&p, &b);
	fs_sort_free(b.items);
	disk_mutex_destroy(&b.lock);
	if (err == 0)
		err = if_count_files(&p);
	fs->c.if_dup_dropped += p.dup;
	want->no_image = fs->c.if_no_image - no_image;
	want->no_class = fs->c.if_no_class - no_class;
	want->dup = p.dup;
	if (err == 0)
		err = fs__if_layout(&p, want->nshards, &l);
	if (err == 0)
		err = fs__if_emit(&p, want, &l, atomic_load(&b.skipped) == 0, out);
	if (p.files)
		fs->c.if_build_runs += fs_sort_runs(p.files);
	if (p.classes)
		fs->c.if_build_runs += fs_sort_runs(p.classes);
	fs_sort_free(p.files);
	fs_sort_free(p.classes);
	free(b.counts);
	free(b.sums);
#ifdef __GLIBC__
	malloc_trim(0); /* the build's buffers are gone */
#endif
	fs->c.if_build_ms = (uint64_t)(now_ms() - t0);
	if (err == -ESTALE) {
		/* a shard's sidecar index was rejected: fs_if_get builds again */
		fs_log(FS_LOG_INFO,
		       "imagefolder: a sidecar index was wrong; building the view again");
		return err;
	}
	if (err < 0) {
		fs_log(FS_LOG_ERR, "imagefolder: cannot build the view: %s", strerror(-err));
		return err;
	}
	fs->c.if_images = p.nfiles;
	fs_log(FS_LOG_INFO,
	       "imagefolder: %u %s in %u %s from %u %s in %" PRIu64
	       " ms (%llu without image, %llu without class)",
	       (*out)->nfiles, fs_plural((*out)->nfiles, "image", "images"), (*out)->nclasses,
	       fs_plural((*out)->nclasses, "class", "classes"), want->nshards,
	       fs_plural(want->nshards, "shard", "shards"), (uint64_t)fs->c.if_build_ms,
	       (unsigned long long)want->no_image, (unsigned long long)want->no_class);
	return 0;
}
