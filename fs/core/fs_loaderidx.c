/*
 * fs_loaderidx.c — the data loaders' index files under .shardfs (fs_view.h),
 * all generated from the shard indexes (--layout shards only):
 *
 *   .shardfs/samples.tsv     every regular member of every shard: mount path,
 *                            shard, data offset, size, sample key (a header
 *                            line names the columns)
 *   .shardfs/wids.json       a wids shard index (wids-shard-index-v1) of the
 *                            plain tar shards, urls relative to .shardfs/
 *   .shardfs/dali/D/S.idx    the DALI wds2idx v1.2 index of plain tar shard
 *                            D/S.tar (D: the source's directories)
 *
 * None of them is listed: .shardfs lists its control files only, dali/ and
 * its directories list nothing (a listing would stat every file, which
 * indexes every shard). Reachable by name.
 *
 * Members in archive order: a shard's regular members sorted by the offset
 * of their data (a hardlink at its target's), which is the order wds2idx
 * and wids see them in, so a reader that follows the files reads each shard
 * front to back.
 *
 * samples.tsv and wids.json need every shard's index: they are built
 * together on the first lookup of either (indexing the shards that are not
 * yet, IDX_THREADS at a time: a remote shard's headers are read from the
 * store, a compressed shard is decoded), then kept as one immutable
 * document (struct fs_lidx_doc) whose generation is the inode's b field. A
 * later lookup that finds the namespace changed (a refresh that added,
 * removed or changed objects, a changed object noticed) builds a new
 * generation: a new inode, so the kernel never mixes two versions' pages.
 * Older generations stay readable until unmount (a reader may hold one;
 * freed by fs_lidx_clear). Every inode here has attribute and entry timeout
 * 0 (volatile_attrs), so each path walk reaches the daemon and meets the
 * current generation.
 *
 * A DALI file depends on one shard's index only (immutable for its shard
 * index, which a changed shard never reuses): it is rendered on each
 * getattr and read, never kept.
 *
 * The bytes depend only on the source's content (names, indexes), never on
 * timing or the mount, so they are the same across remounts.
 *
 * Inodes: FS_K_LIDX, a = enum lidx_what, b = a source directory (dali
 * directories), a shard (dali files) or a generation (samples, wids).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disk_json.h"
#include "fs_view.h"

/* Index building is I/O bound: as fs_if_build.c. */
#define IDX_THREADS 4

enum lidx_what { LX_DALI_DIR = 0, LX_DALI_FILE = 1, LX_SAMPLES = 2, LX_WIDS = 3 };

static const char *const lx_names[] = {"dali", NULL, "samples.tsv", "wids.json"};

/* One built generation of samples.tsv and wids.json; immutable. */
struct fs_lidx_doc {
	uint32_t gen;
	uint64_t key[3]; /* the namespace it was built from (lx_key) */
	char *tsv, *wids;
	size_t tsv_len, wids_len;
	int64_t mtime; /* newest shard mtime */
	struct fs_lidx_doc *older;
};

/* The loader indexes' state (fs_lidx.h): fs->lidx, from fs_open to
 * fs_close. Only the shards layout has them and the imagefolder view only
 * its own layout, so their build and the view's never run in one mount. */
struct fs_lidx {
	struct disk_mutex lock;		 /* DISK_LOCK_LIDX: serialises building a document */
	struct fs_lidx_doc *_Atomic doc; /* the newest, immutable once published */
};

int fs_lidx_new(struct fs_lidx **out)
{
	struct fs_lidx *l = calloc(1, sizeof(*l));

	*out = l;
	if (!l)
		return -ENOMEM;
	disk_mutex_init(&l->lock, DISK_LOCK_LIDX);
	return 0;
}

void fs_lidx_free(struct fs_lidx *l)
{
	if (!l)
		return;
	disk_mutex_destroy(&l->lock);
	free(l);
}

/* ---- output buffer ------------------------------------------------------- */

struct lx_out {
	char *p;
	size_t n, cap;
	int err;
};

static void out_put(struct lx_out *o, const char *s, size_t len)
{
	if (o->err)
		return;
	if (o->n + len + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		char *p;

		while (cap < o->n + len + 1)
			cap *= 2;
		p = realloc(o->p, cap);
		if (!p) {
			o->err = -ENOMEM;
			return;
		}
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->n, s, len);
	o->n += len;
	o->p[o->n] = '\0';
}

static void out_str(struct lx_out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

static void out_u64(struct lx_out *o, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%" PRIu64, v);

	out_put(o, b, (size_t)n);
}

/* A TSV field: backslash, tab, newline and carriage return as \\ \t \n \r,
 * other control bytes (below 0x20, 0x7f) as \xHH; every other byte as it
 * is. So a line is one record and a field has no tab. */
static void out_tsv(struct lx_out *o, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[5];

		if (c == '\\' || c == '\t' || c == '\n' || c == '\r') {
			esc[0] = '\\';
			esc[1] = c == '\\' ? '\\' : c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
			out_put(o, esc, 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			out_put(o, esc, 4);
		} else {
			out_put(o, s + i, 1);
		}
	}
}

/* A JSON string's contents: '"' and '\\' escaped, control bytes and DEL as
 * \u00XX (disk_json_esc). */
static void out_json(struct lx_out *o, const char *s)
{
	for (; *s; s++) {
		char esc[8];

		out_put(o, esc, disk_json_esc((unsigned char)*s, esc));
	}
}

/* 1 when s is valid UTF-8 (JSON text must be). */
static int utf8_ok(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	while (*p) {
		int n = *p < 0x80	      ? 0
			: (*p & 0xe0) == 0xc0 ? 1
			: (*p & 0xf0) == 0xe0 ? 2
			: (*p & 0xf8) == 0xf0 ? 3
					      : -1;

		if (n < 0 || (n == 1 && *p < 0xc2))
			return 0;
		p++;
		for (int k = 0; k < n; k++, p++)
			if ((*p & 0xc0) != 0x80)
				return 0;
	}
	return 1;
}

/* ---- a shard's members in archive order ---------------------------------- */

struct lx_member {
	uint64_t off, size; /* of the data (a hardlink: its target's) */
	uint32_t idx;
	uint8_t hard, sparse, truncated;
};

static int member_cmp(const void *pa, const void *pb)
{
	const struct lx_member *a = pa, *b = pb;

	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* The regular members of ix (hardlinks too), sorted by data offset;
 * sparse members (no one data range) last. *out is malloc'd. */
static int lx_members(const struct shardidx *ix, struct lx_member **out, uint32_t *n)
{
	struct shardidx_info info;
	struct lx_member *v;
	uint32_t k = 0;

	shardidx_get_info(ix, &info);
	v = malloc((info.nentries ? info.nentries : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t i = 0; i < info.nentries; i++) {
		struct shardidx_entry e, t;

		if (shardidx_entry_get(ix, i, &e) < 0 || e.type != SHARDIDX_REG)
			continue;
		t = e;
		if (e.canon != i && shardidx_entry_get(ix, e.canon, &t) < 0)
			continue;
		v[k] = (struct lx_member){t.data_off,
					  t.size,
					  i,
					  e.canon != i,
					  (t.flags & SHARDIDX_F_SPARSE) != 0,
					  (t.flags & SHARDIDX_F_TRUNCATED) != 0};
		if (v[k].sparse)
			v[k].off = UINT64_MAX;
		k++;
	}
	qsort(v, k, sizeof(*v), member_cmp);
	*out = v;
	*n = k;
	return 0;
}

/* The path of entry i inside its shard into o (from its root, '/'-joined). */
static void lx_path(const struct shardidx *ix, uint32_t i, struct lx_out *o)
{
	struct shardidx_entry e;

	if (shardidx_entry_get(ix, i, &e) < 0)
		return;
	if (e.parent != SHARDIDX_NONE) {
		lx_path(ix, e.parent, o);
		out_put(o, "/", 1);
	}
	out_str(o, e.name);
}

/* The length of the WebDataset key of path p (up to the first '.' of its
 * base name), and where its extension starts (0: none). */
static size_t lx_key_len(const char *p, size_t len, size_t *ext)
{
	const char *slash = memrchr(p, '/', len);
	size_t base = slash ? (size_t)(slash - p) + 1 : 0;
	const char *dot = memchr(p + base, '.', len - base);

	*ext = dot ? (size_t)(dot - p) + 1 : 0;
	return dot ? (size_t)(dot - p) : len;
}

static int has_space(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (strchr(" \t\n\v\f\r", s[i]) && s[i])
			return 1;
	return 0;
}

/* The samples of a plain tar shard as wds2idx groups them: its regular
 * members (not hardlinks, sparse or truncated ones) whose base name has an
 * extension (a '.' after its first byte, something after it), in archive
 * order, consecutive members of one key making one sample. dali != NULL:
 * also leaves out members with white space in their path (the index
 * format splits fields at it) and renders the index file into *dali.
 * *nsamples and *skipped (members left out) are set. */
static int lx_samples(const struct shardidx *ix, struct lx_out *dali, uint64_t *nsamples,
		      uint64_t *skipped)
{
	struct lx_member *m;
	struct lx_out body = {0}, path = {0}, last = {0};
	uint32_t n;
	int err = lx_members(ix, &m, &n);

	*nsamples = *skipped = 0;
	if (err < 0)
		return err;
	for (uint32_t i = 0; i < n && !body.err && !path.err; i++) {
		size_t ext, klen;

		path.n = 0;
		lx_path(ix, m[i].idx, &path);
		if (path.err)
			break;
		klen = lx_key_len(path.p, path.n, &ext);
		if (m[i].hard || m[i].sparse || m[i].truncated || !ext || ext == path.n ||
		    (klen && path.p[klen - 1] == '/') || klen == 0 ||
		    (dali && has_space(path.p, path.n))) {
			(*skipped)++;
			continue;
		}
		if (last.n == klen && memcmp(last.p, path.p, klen) == 0) {
			out_put(&body, " ", 1);
		} else {
			if (*nsamples)
				out_put(&body, "\n", 1);
			(*nsamples)++;
			last.n = 0;
			out_put(&last, path.p, klen);
		}
		if (!dali)
			continue;
		out_put(&body, path.p + ext, path.n - ext);
		out_put(&body, " ", 1);
		out_u64(&body, m[i].off);
		out_put(&body, " ", 1);
		out_u64(&body, m[i].size);
		out_put(&body, " ", 1);
		out_put(&body, path.p, path.n);
	}
	if (*nsamples)
		out_put(&body, "\n", 1);
	err = body.err ? body.err : path.err ? path.err : last.err;
	if (err == 0 && dali) {
		out_str(dali, "v1.2 ");
		out_u64(dali, *nsamples);
		out_put(dali, "\n", 1);
		if (body.n)
			out_put(dali, body.p, body.n);
		err = dali->err;
	}
	free(body.p);
	free(path.p);
	free(last.p);
	free(m);
	return err;
}

/* ---- samples.tsv and wids.json --------------------------------------------- */

/* What the documents depend on: the shards, and every change of the
 * namespace since mount. */
static void lx_key(struct fs *fs, uint64_t key[3])
{
	key[0] = fs->nshards;
	key[1] = fs->c.refresh_added + fs->c.refresh_removed + fs->c.refresh_changed;
	key[2] = fs->c.stale_noticed;
}

struct lx_build {
	struct fs *fs;
	uint32_t *shards, n;
	atomic_uint next;
	atomic_int err; /* -EIO, -ECANCELED, -ENOMEM: no document now */
};

static void *lx_worker(void *arg)
{
	struct lx_build *b = arg;

	for (;;) {
		unsigned i = atomic_fetch_add(&b->next, 1);
		struct shardidx *ix;
		int err;

		if (i >= b->n || atomic_load(&b->err))
			break;
		err = fs_shard_index(b->fs, b->shards[i], &ix, NULL);
		/* the store is unreachable, or the daemon stops: no document
		 * rather than one that lacks the shard */
		if (err == -EIO || err == -ECANCELED || err == -ENOMEM)
			atomic_store(&b->err, err);
	}
	return NULL;
}

static int shard_key_cmp(const void *pa, const void *pb, void *arg)
{
	const struct fs *fs = arg;

	return strcmp(fs_obj(fs, fs_shard(fs, *(const uint32_t *)pa)->obj)->key,
		      fs_obj(fs, fs_shard(fs, *(const uint32_t *)pb)->obj)->key);
}

/* Is the member directory of shard s the one its name shows? (A name
 * conflict may hide it: its members have no path in the mount.) */
static int shard_dir_shown(struct fs *fs, uint32_t s)
{
	const struct fs_shard *sh = fs_shard(fs, s);
	const struct fs_dirent *d;
	int shown;

	fs_ns_rdlock(fs);
	d = fs_ns_lookup(fs, fs_obj(fs, sh->obj)->dir, sh->dirname, strlen(sh->dirname));
	shown = d && d->kind == FS_K_SHARD && d->idx == s;
	fs_ns_unlock(fs);
	return shown;
}

/* The lines of shard s in samples.tsv. */
static int tsv_shard(struct fs *fs, uint32_t s, const struct shardidx *ix, struct lx_out *tsv)
{
	const struct fs_shard *sh = fs_shard(fs, s);
	const char *key = fs_obj(fs, sh->obj)->key, *slash = strrchr(key, '/');
	size_t dirlen = slash ? (size_t)(slash - key) + 1 : 0;
	struct lx_out path = {0};
	struct lx_member *m;
	uint32_t n;
	int err = lx_members(ix, &m, &n);

	if (err < 0)
		return err;
	for (uint32_t i = 0; i < n && !path.err; i++) {
		size_t ext;

		path.n = 0;
		lx_path(ix, m[i].idx, &path);
		if (path.err)
			break;
		out_tsv(tsv, key, dirlen);
		out_tsv(tsv, sh->dirname, strlen(sh->dirname));
		out_put(tsv, "/", 1);
		out_tsv(tsv, path.p, path.n);
		out_put(tsv, "\t", 1);
		out_tsv(tsv, key, strlen(key));
		out_put(tsv, "\t", 1);
		if (m[i].sparse)
			out_put(tsv, "-", 1);
		else
			out_u64(tsv, m[i].off);
		out_put(tsv, "\t", 1);
		out_u64(tsv, m[i].size);
		out_put(tsv, "\t", 1);
		out_tsv(tsv, path.p, lx_key_len(path.p, path.n, &ext));
		out_put(tsv, "\n", 1);
	}
	err = path.err ? path.err : tsv->err;
	free(path.p);
	free(m);
	return err;
}

/* Index the live shards of fs into b (b->shards, sorted by key after) on
 * IDX_THREADS workers (lx_worker, or this thread if none starts): 0, or the
 * first error. */
static int lx_index_shards(struct fs *fs, struct lx_build *b)
{
	uint32_t nshards = fs->nshards;
	pthread_t th[IDX_THREADS];
	unsigned started = 0;
	int err;

	b->shards = malloc((nshards ? nshards : 1) * sizeof(*b->shards));
	if (!b->shards)
		return -ENOMEM;
	for (uint32_t s = 0; s < nshards; s++)
		if (fs_obj_live(fs_obj(fs, fs_shard(fs, s)->obj)))
			b->shards[b->n++] = s;
	fs_learn_all(fs); /* a brace pattern's sizes, many at once */
	fs_log(FS_LOG_INFO, "loader indexes: indexing %u %s", b->n,
	       fs_plural(b->n, "shard", "shards"));
	for (unsigned i = 0; i < IDX_THREADS && i < b->n; i++) {
		if (pthread_create(&th[i], NULL, lx_worker, b) != 0)
			break;
		started++;
	}
	if (started == 0)
		lx_worker(b);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	err = atomic_load(&b->err);
	if (err == 0)
		qsort_r(b->shards, b->n, sizeof(*b->shards), shard_key_cmp, fs);
	return err;
}

/* The documents of a build (lx_docs): samples.tsv, wids.json, the shards
 * listed in wids.json and what both left out. */
struct lx_docs {
	struct lx_out tsv, wids;
	uint32_t nwids;
	uint64_t skipped_shards, skipped_members;
};

/* samples.tsv and wids.json of b's indexed shards, in their order, into x;
 * d->mtime the newest shard's: 0, or the first error. */
static int lx_docs(struct fs *fs, const struct lx_build *b, struct fs_lidx_doc *d,
		   struct lx_docs *x)
{
	struct lx_out scratch = {0};
	int err = 0;

	out_str(&x->tsv, "path\tshard\toffset\tsize\tkey\n");
	out_str(&x->wids, "{\n  \"__kind__\": \"wids-shard-index-v1\",\n  \"wids_version\": 1,\n"
			  "  \"shardlist\": [");
	for (uint32_t i = 0; i < b->n && err == 0; i++) {
		uint32_t s = b->shards[i];
		const struct fs_obj *o = fs_obj(fs, fs_shard(fs, s)->obj);
		uint64_t nsamples, skipped;
		struct shardidx *ix;

		if (fs_shard_index(fs, s, &ix, NULL) < 0) {
			x->skipped_shards++; /* logged by fs_shard_index */
			continue;
		}
		d->mtime = o->info.mtime > d->mtime ? o->info.mtime : d->mtime;
		if (shard_dir_shown(fs, s))
			err = tsv_shard(fs, s, ix, &x->tsv);
		if (err < 0)
			break;
		if (fs_shard(fs, s)->codec != CACHETIER_RAW || !utf8_ok(o->key)) {
			x->skipped_shards++; /* DALI and wids read the raw file as a tar */
			continue;
		}
		/* what the DALI file leaves out (also names with white space) */
		err = lx_samples(ix, &scratch, &nsamples, &skipped);
		scratch.n = 0;
		x->skipped_members += skipped;
		/* wids reads names with white space */
		if (err == 0)
			err = lx_samples(ix, NULL, &nsamples, &skipped);
		if (err < 0)
			break;
		out_str(&x->wids, x->nwids++ ? ",\n    {\"url\": \"../" : "\n    {\"url\": \"../");
		out_json(&x->wids, o->key);
		out_str(&x->wids, "\", \"nsamples\": ");
		out_u64(&x->wids, nsamples);
		out_str(&x->wids, "}");
	}
	out_str(&x->wids, x->nwids ? "\n  ]\n}\n" : "]\n}\n");
	free(scratch.p);
	if (err == 0)
		err = x->tsv.err ? x->tsv.err : x->wids.err;
	return err;
}

/* The loader indexes' document of fs's live shards (key its namespace's):
 * 0 and *out, or the error, logged. */
static int lx_build(struct fs *fs, const uint64_t key[3], struct fs_lidx_doc **out)
{
	struct lx_build b = {.fs = fs};
	struct lx_docs x = {0};
	struct fs_lidx_doc *d = calloc(1, sizeof(*d));
	int err = d ? lx_index_shards(fs, &b) : -ENOMEM;

	if (err == 0)
		err = lx_docs(fs, &b, d, &x);
	if (err < 0)
		goto out;
	d->tsv = x.tsv.p;
	d->tsv_len = x.tsv.n;
	d->wids = x.wids.p;
	d->wids_len = x.wids.n;
	x.tsv.p = x.wids.p = NULL;
	memcpy(d->key, key, sizeof(d->key));
	fs->c.lidx_builds++;
	atomic_store(&fs->c.lidx_shards_skipped, x.skipped_shards);
	atomic_store(&fs->c.lidx_members_skipped, x.skipped_members);
	fs_log(FS_LOG_INFO,
	       "loader indexes: %zu bytes of samples.tsv, %u %s in wids.json, %" PRIu64
	       " %s and %" PRIu64 " %s left out of DALI and wids indexes",
	       d->tsv_len, x.nwids, fs_plural(x.nwids, "shard", "shards"), x.skipped_shards,
	       fs_plural(x.skipped_shards, "shard", "shards"), x.skipped_members,
	       fs_plural(x.skipped_members, "member", "members"));
	*out = d;
	d = NULL;
out:
	if (err < 0)
		fs_log(FS_LOG_ERR, "loader indexes: cannot build samples.tsv: %s", strerror(-err));
	free(x.tsv.p);
	free(x.wids.p);
	free(b.shards);
	free(d);
	return err;
}

/* The current document, built when the namespace changed since the last. */
static int lx_current(struct fs *fs, const struct fs_lidx_doc **out)
{
	struct fs_lidx *l = fs->lidx;
	struct fs_lidx_doc *d = atomic_load_explicit(&l->doc, memory_order_acquire), *nd;
	uint64_t key[3];
	int err = 0;

	lx_key(fs, key);
	if (d && memcmp(d->key, key, sizeof(key)) == 0) {
		*out = d;
		return 0;
	}
	disk_mutex_lock(&l->lock);
	d = atomic_load_explicit(&l->doc, memory_order_acquire);
	lx_key(fs, key);
	if (!d || memcmp(d->key, key, sizeof(key)) != 0) {
		err = lx_build(fs, key, &nd);
		if (err == 0) {
			nd->gen = d ? d->gen + 1 : 1;
			nd->older = d;
			atomic_store_explicit(&l->doc, nd, memory_order_release);
			d = nd;
		}
	}
	disk_mutex_unlock(&l->lock);
	*out = d;
	return err;
}

/* Generation gen (kept until unmount), or NULL. */
static const struct fs_lidx_doc *lx_doc(struct fs *fs, uint32_t gen)
{
	const struct fs_lidx_doc *d = atomic_load_explicit(&fs->lidx->doc, memory_order_acquire);

	while (d && d->gen != gen)
		d = d->older;
	return d;
}

void fs_lidx_clear(struct fs *fs)
{
	struct fs_lidx_doc *d;

	if (!fs->lidx) /* fs_open failed before making it */
		return;
	d = fs->lidx->doc;

	while (d) {
		struct fs_lidx_doc *older = d->older;

		free(d->tsv);
		free(d->wids);
		free(d);
		d = older;
	}
	fs->lidx->doc = NULL;
}

/* ---- DALI files ---------------------------------------------------------------- */

/* The DALI index of shard s: -ENOENT for a shard that is no plain tar. */
static int dali_render(struct fs *fs, uint32_t s, struct lx_out *o)
{
	struct shardidx *ix;
	uint64_t nsamples, skipped;
	int err;

	if (s >= fs->nshards)
		return -ENOENT;
	err = fs_obj_check(fs, fs_shard(fs, s)->obj);
	if (err == 0)
		err = fs_shard_index(fs, s, &ix, NULL);
	if (err < 0)
		return err;
	if (fs_shard(fs, s)->codec != CACHETIER_RAW)
		return -ENOENT;
	return lx_samples(ix, o, &nsamples, &skipped);
}

/* ---- the view -------------------------------------------------------------------- */

int fs_lidx_lookup_ctl(struct fs *fs, const char *name, uint64_t *ino)
{
	const struct fs_lidx_doc *d;
	int err;

	if (!fs_layout_of(fs)->loader_indexes)
		return 0;
	if (strcmp(name, lx_names[LX_DALI_DIR]) == 0) {
		*ino = fs_ino(FS_K_LIDX, LX_DALI_DIR, 0);
		return 0;
	}
	if (strcmp(name, lx_names[LX_SAMPLES]) && strcmp(name, lx_names[LX_WIDS]))
		return 0;
	err = lx_current(fs, &d);
	if (err < 0)
		return err;
	*ino = fs_ino(FS_K_LIDX, strcmp(name, lx_names[LX_SAMPLES]) ? LX_WIDS : LX_SAMPLES, d->gen);
	return 0;
}

static int lx_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	uint32_t a = fs_ino_a(ino), b = fs_ino_b(ino);
	const struct fs_lidx_doc *d;
	struct lx_out o = {0};
	int err;

	switch (a) {
	case LX_DALI_DIR:
		if (b >= fs->ndirs)
			return -ENOENT;
		fs_attr_dir(fs, st, ino, 0555, 1, fs->mount_time);
		return 0;
	case LX_DALI_FILE:
		err = dali_render(fs, b, &o);
		free(o.p);
		if (err < 0)
			return err;
		fs_attr_file(fs, st, ino, S_IFREG | 0444, o.n,
			     fs_obj(fs, fs_shard(fs, b)->obj)->info.mtime);
		return 0;
	case LX_SAMPLES:
	case LX_WIDS:
		d = lx_doc(fs, b);
		if (!d)
			return -ENOENT;
		fs_attr_file(fs, st, ino, S_IFREG | 0444,
			     a == LX_SAMPLES ? d->tsv_len : d->wids_len, d->mtime);
		return 0;
	default:
		return -ENOENT;
	}
}

/* name in dali directory parent: a source directory, or S.idx for the
 * shard S.tar (its raw file: a name conflict may hide its member
 * directory, never the file). */
static int lx_lookup(struct fs *fs, uint64_t parent, const char *name, size_t len, uint64_t *ino)
{
	const struct fs_dirent *e;
	uint32_t dir = fs_ino_b(parent), shard = 0;
	char tar[256];
	int found = 0;
	struct stat st;

	if (fs_ino_a(parent) != LX_DALI_DIR)
		return -ENOTDIR;
	*ino = 0;
	fs_ns_rdlock(fs);
	if (dir < fs->ndirs) {
		e = fs_ns_lookup(fs, dir, name, len);
		if (e && e->kind == FS_K_DIR) {
			*ino = fs_ino(FS_K_LIDX, LX_DALI_DIR, e->idx);
		} else if (len > 4 && len < sizeof(tar) && memcmp(name + len - 4, ".idx", 4) == 0) {
			memcpy(tar, name, len - 4);
			memcpy(tar + len - 4, ".tar", 4);
			e = fs_ns_lookup(fs, dir, tar, len);
			found = e && e->kind == FS_K_OBJ && fs_obj(fs, e->idx)->codec >= 0;
			shard = found ? fs_obj(fs, e->idx)->shard : 0;
		}
	}
	fs_ns_unlock(fs);
	/* outside the lock: this indexes the shard */
	if (found && lx_getattr(fs, fs_ino(FS_K_LIDX, LX_DALI_FILE, shard), &st) == 0)
		*ino = fs_ino(FS_K_LIDX, LX_DALI_FILE, shard);
	return 0;
}

static int lx_list_open(struct fs *fs, uint64_t ino, struct fs_listing *l)
{
	(void)fs;
	if (fs_ino_a(ino) != LX_DALI_DIR)
		return -ENOTDIR;
	l->n = 0; /* reachable by name, never listed */
	l->parent = fs_ino(FS_K_CTL, FS_CTL_DIR, 0);
	return 0;
}

static const char *lx_list_entry(const struct fs_listing *l, uint32_t i, uint64_t *ino)
{
	(void)l;
	(void)i;
	(void)ino;
	return NULL;
}

static int lx_read(struct fs *fs, uint64_t ino, uint64_t fh, uint64_t off, size_t size,
		   struct fs_read *r)
{
	uint32_t a = fs_ino_a(ino);
	const struct fs_lidx_doc *d = NULL;
	struct lx_out o = {0};
	const char *p;
	size_t len;
	int err = 0;

	(void)fh;
	if (a == LX_DALI_DIR)
		return -EISDIR;
	if (a == LX_DALI_FILE) {
		err = dali_render(fs, fs_ino_b(ino), &o);
		p = o.p;
		len = o.n;
	} else {
		d = lx_doc(fs, fs_ino_b(ino));
		if (!d)
			return -ENOENT;
		p = a == LX_SAMPLES ? d->tsv : d->wids;
		len = a == LX_SAMPLES ? d->tsv_len : d->wids_len;
	}
	if (err == 0 && off < len) {
		size = size < len - off ? size : (size_t)(len - off);
		r->buf = malloc(size ? size : 1);
		if (!r->buf) {
			err = -ENOMEM;
		} else {
			memcpy(r->buf, p + off, size);
			r->len = size;
		}
	}
	free(o.p);
	return err;
}

static void lx_describe(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	uint32_t a = fs_ino_a(ino), b = fs_ino_b(ino);

	if (a == LX_DALI_FILE && b < fs->nshards)
		snprintf(buf, size, "DALI index of %s", fs_obj(fs, fs_shard(fs, b)->obj)->key);
	else
		snprintf(buf, size, ".shardfs/%s", a < 4 && lx_names[a] ? lx_names[a] : "?");
}

const struct fs_view fs_view_lidx = {
    .name = "loader index",
    .volatile_attrs = 1,
    .getattr = lx_getattr,
    .lookup = lx_lookup,
    .list_open = lx_list_open,
    .list_entry = lx_list_entry,
    .read = lx_read,
    .describe = lx_describe,
};
