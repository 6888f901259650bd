/*
 * fs_ns.c — the namespace of the source: directories, objects, shards.
 *
 * Built once at mount from the backend's listing and immutable afterwards,
 * so lookups need no locks. Keys are sorted first; then every directory's
 * keys are contiguous, and one pass with a stack of the current directory
 * chain creates each directory exactly once.
 *
 * Name conflicts (a real directory "x", a file "x" and shards "x.tar" and
 * "x.tar.gz" all want the name "x"): a directory wins over a file, a file
 * over a shard's member directory, and among shards the first key in sorted
 * order wins. The loser stays reachable by its own file name where it has
 * one; the log says what was hidden. ".shardfs" at the root is reserved for
 * the control directory.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

static const struct {
	const char *suffix;
	int codec;
} shard_suffixes[] = {
	{".tar", CACHETIER_RAW},
	{".tar.gz", CACHETIER_GZIP},
	{".tgz", CACHETIER_GZIP},
	{".tar.zst", CACHETIER_ZSTD},
};

int fs_ns_shard_suffix(const char *name, size_t *dirlen)
{
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(shard_suffixes) / sizeof(shard_suffixes[0]); i++) {
		size_t s = strlen(shard_suffixes[i].suffix);

		if (n > s && strcmp(name + n - s, shard_suffixes[i].suffix) == 0) {
			*dirlen = n - s;
			return shard_suffixes[i].codec;
		}
	}
	return -1;
}

struct listing {
	struct fs_obj *objs;
	uint32_t n, cap;
};

static int list_cb(void *arg, const struct backend_objinfo *info)
{
	struct listing *l = arg;
	struct fs_obj *o;

	if (l->n == l->cap) {
		uint32_t cap = l->cap ? l->cap * 2 : 256;
		struct fs_obj *p = realloc(l->objs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		l->objs = p;
		l->cap = cap;
	}
	o = &l->objs[l->n];
	memset(o, 0, sizeof(*o));
	o->key = strdup(info->key);
	if (!o->key)
		return -ENOMEM;
	o->info = *info;
	o->info.key = o->key;
	l->n++;
	return 0;
}

static int obj_cmp(const void *a, const void *b)
{
	return strcmp(((const struct fs_obj *)a)->key, ((const struct fs_obj *)b)->key);
}

static int dirent_cmp(const void *a, const void *b)
{
	const struct fs_dirent *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	/* DIR (1) < OBJ (2) < SHARD (3): the lower kind wins a conflict */
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int dir_new(struct fs *fs, uint32_t *cap, const char *name, size_t len, uint32_t parent)
{
	struct fs_dir *d;

	if (fs->ndirs == *cap) {
		uint32_t ncap = *cap * 2;
		struct fs_dir *p = realloc(fs->dirs, ncap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		fs->dirs = p;
		*cap = ncap;
	}
	d = &fs->dirs[fs->ndirs];
	memset(d, 0, sizeof(*d));
	d->name = strndup(name, len);
	if (!d->name)
		return -ENOMEM;
	d->parent = parent;
	return (int)fs->ndirs++;
}

/* Place every object in its directory, creating directories on the way. */
static int ns_place(struct fs *fs)
{
	/* stack[i]: dir index at depth i+1; stack_name[i]: its path component */
	uint32_t stack[256];
	const char *stack_name[256];
	size_t stack_len[256];
	uint32_t depth = 0, dcap = 64;
	int err;

	fs->dirs = calloc(dcap, sizeof(*fs->dirs));
	if (!fs->dirs)
		return -ENOMEM;
	err = dir_new(fs, &dcap, "", 0, 0);
	if (err < 0)
		return err;

	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = &fs->objs[i];
		const char *p = o->key, *slash;
		uint32_t d = 0, level = 0;

		while ((slash = strchr(p, '/')) != NULL) {
			size_t len = (size_t)(slash - p);

			if (level >= 256)
				break; /* deeper than any real tree; keep it at this level */
			if (level < depth && stack_len[level] == len &&
			    memcmp(stack_name[level], p, len) == 0) {
				d = stack[level];
			} else {
				err = dir_new(fs, &dcap, p, len, d);
				if (err < 0)
					return err;
				d = (uint32_t)err;
				stack[level] = d;
				stack_name[level] = p;
				stack_len[level] = len;
				depth = level + 1;
			}
			level++;
			p = slash + 1;
		}
		if (level < depth)
			depth = level;
		o->base = p;
		o->dir = d;
		fs->total_bytes += o->info.size;
		/* directory mtimes: the newest object below */
		for (uint32_t x = d;; x = fs->dirs[x].parent) {
			if (fs->dirs[x].mtime < o->info.mtime)
				fs->dirs[x].mtime = o->info.mtime;
			if (x == 0)
				break;
		}
	}
	return 0;
}

static int ns_shards(struct fs *fs)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < fs->nobjs; i++) {
		size_t dl;

		fs->objs[i].codec = fs_ns_shard_suffix(fs->objs[i].base, &dl);
		if (fs->objs[i].codec >= 0)
			n++;
	}
	if (n >= FS_MAX_SHARDS)
		return -EFBIG;
	fs->shards = calloc(n ? n : 1, sizeof(*fs->shards));
	if (!fs->shards)
		return -ENOMEM;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = &fs->objs[i];
		struct fs_shard *s;
		size_t dl;

		if (o->codec < 0)
			continue;
		fs_ns_shard_suffix(o->base, &dl);
		s = &fs->shards[fs->nshards];
		s->obj = i;
		s->dirname = strndup(o->base, dl);
		if (!s->dirname)
			return -ENOMEM;
		pthread_mutex_init(&s->lock, NULL);
		o->shard = fs->nshards++;
	}
	return 0;
}

static int ns_entries(struct fs *fs)
{
	uint32_t *count = calloc(fs->ndirs, sizeof(*count));

	if (!count)
		return -ENOMEM;
	for (uint32_t i = 1; i < fs->ndirs; i++)
		count[fs->dirs[i].parent]++;
	for (uint32_t i = 0; i < fs->nobjs; i++)
		count[fs->objs[i].dir] += fs->objs[i].codec >= 0 ? 2 : 1;
	for (uint32_t i = 0; i < fs->ndirs; i++) {
		fs->dirs[i].ents = calloc(count[i] ? count[i] : 1, sizeof(struct fs_dirent));
		if (!fs->dirs[i].ents) {
			free(count);
			return -ENOMEM;
		}
	}
	free(count);
	for (uint32_t i = 1; i < fs->ndirs; i++) {
		struct fs_dir *p = &fs->dirs[fs->dirs[i].parent];

		p->ents[p->nents++] = (struct fs_dirent){fs->dirs[i].name, FS_K_DIR, i};
	}
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = &fs->objs[i];
		struct fs_dir *p = &fs->dirs[o->dir];

		p->ents[p->nents++] = (struct fs_dirent){o->base, FS_K_OBJ, i};
		if (o->codec >= 0)
			p->ents[p->nents++] =
				(struct fs_dirent){fs->shards[o->shard].dirname, FS_K_SHARD, o->shard};
	}
	for (uint32_t i = 0; i < fs->ndirs; i++) {
		struct fs_dir *d = &fs->dirs[i];
		uint32_t w = 0;

		qsort(d->ents, d->nents, sizeof(*d->ents), dirent_cmp);
		for (uint32_t r = 0; r < d->nents; r++) {
			const struct fs_dirent *e = &d->ents[r];

			if ((w > 0 && strcmp(d->ents[w - 1].name, e->name) == 0) ||
			    (i == 0 && strcmp(e->name, ".shardfs") == 0)) {
				fs_log(FS_LOG_WARN, "name conflict: '%s' in directory '%s' is hidden",
				       e->name, d->name);
				continue;
			}
			d->ents[w++] = *e;
			if (e->kind == FS_K_DIR || e->kind == FS_K_SHARD)
				d->nsubdirs++;
		}
		d->nents = w;
	}
	return 0;
}

/* ---- the listing kept in the cache directory ------------------------------
 * A remote source's listing is saved after every successful listing, so a
 * mount can start while the store is unreachable and serve what the cache
 * holds. Format: magic, u32 version, u32 count, u64 FNV-1a of the entries,
 * then per object {u32 keylen, key, u64 size, i64 mtime, u32 mode,
 * u32 etaglen, etag}; all little-endian. */
#define LISTING_MAGIC "SHLIST\0\0\1"
#define LISTING_VERSION 1u
#define LISTING_HDR 24
#define LISTING_BLOB "listing"

static uint64_t fnv64(const unsigned char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static int listing_save(struct fs *fs)
{
	size_t len = LISTING_HDR, off;
	unsigned char *b;
	int err;

	for (uint32_t i = 0; i < fs->nobjs; i++)
		len += 4 + strlen(fs->objs[i].key) + 8 + 8 + 4 + 4 + strlen(fs->objs[i].info.etag);
	b = malloc(len);
	if (!b)
		return -ENOMEM;
	memcpy(b, LISTING_MAGIC, 8);
	put_le(b + 8, LISTING_VERSION, 4);
	put_le(b + 12, fs->nobjs, 4);
	off = LISTING_HDR;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		const struct fs_obj *o = &fs->objs[i];
		size_t kl = strlen(o->key), el = strlen(o->info.etag);

		put_le(b + off, kl, 4);
		memcpy(b + off + 4, o->key, kl);
		off += 4 + kl;
		put_le(b + off, o->info.size, 8);
		put_le(b + off + 8, (uint64_t)o->info.mtime, 8);
		put_le(b + off + 16, o->info.mode, 4);
		put_le(b + off + 20, el, 4);
		memcpy(b + off + 24, o->info.etag, el);
		off += 24 + el;
	}
	put_le(b + 16, fnv64(b + LISTING_HDR, len - LISTING_HDR), 8);
	err = cachetier_meta_put(fs->ct, LISTING_BLOB, b, len);
	free(b);
	return err;
}

/* Load the saved listing into l; -EBADMSG for anything malformed. */
static int listing_load(struct fs *fs, struct listing *l)
{
	unsigned char *b;
	size_t len, off = LISTING_HDR;
	uint32_t n;
	void *buf;
	int err = cachetier_meta_get(fs->ct, LISTING_BLOB, &buf, &len);

	if (err < 0)
		return err;
	b = buf;
	err = -EBADMSG;
	if (len < LISTING_HDR || memcmp(b, LISTING_MAGIC, 8) != 0 ||
	    get_le(b + 8, 4) != LISTING_VERSION ||
	    get_le(b + 16, 8) != fnv64(b + LISTING_HDR, len - LISTING_HDR))
		goto out;
	n = (uint32_t)get_le(b + 12, 4);
	for (uint32_t i = 0; i < n; i++) {
		struct backend_objinfo info;
		char key[4096];
		uint64_t kl, el;

		memset(&info, 0, sizeof(info));
		if (len - off < 4 || (kl = get_le(b + off, 4)) >= sizeof(key) || len - off - 4 < kl + 24)
			goto out;
		memcpy(key, b + off + 4, kl);
		key[kl] = '\0';
		off += 4 + kl;
		info.key = key;
		info.size = get_le(b + off, 8);
		info.mtime = (int64_t)get_le(b + off + 8, 8);
		info.mode = (uint32_t)get_le(b + off + 16, 4);
		el = get_le(b + off + 20, 4);
		if (el >= sizeof(info.etag) || len - off - 24 < el)
			goto out;
		memcpy(info.etag, b + off + 24, el);
		off += 24 + el;
		if (memchr(key, '\0', kl) || list_cb(l, &info) != 0)
			goto out;
	}
	err = off == len ? 0 : -EBADMSG;
out:
	free(buf);
	return err;
}

int fs_ns_build(struct fs *fs)
{
	struct listing l = {0};
	int err;

	err = backend_list(fs->be, list_cb, &l);
	if (!backend_is_local(fs->be) && err == -EIO) {
		/* the store is unreachable or failing (refusals, bad certificates
		 * and bad URLs have their own errors): serve what the cache holds */
		int lerr;

		for (uint32_t i = 0; i < l.n; i++)
			free(l.objs[i].key);
		l.n = 0;
		lerr = listing_load(fs, &l);
		if (lerr == 0) {
			fs_log(FS_LOG_WARN, "source %s unreachable (%s); serving the listing kept in the cache (%u objects)",
			       backend_describe(fs->be), strerror(-err), l.n);
			fs->offline = 1;
			err = 0;
		}
	}
	fs->objs = l.objs;
	fs->nobjs = l.n;
	if (err < 0)
		return err;
	if (!backend_is_local(fs->be) && !fs->offline) {
		int serr = listing_save(fs);

		if (serr < 0)
			fs_log(FS_LOG_WARN, "listing not kept in the cache: %s", strerror(-serr));
	}
	qsort(fs->objs, fs->nobjs, sizeof(*fs->objs), obj_cmp);
	for (uint32_t i = 0; i < fs->nobjs; i++)
		pthread_mutex_init(&fs->objs[i].lock, NULL);
	err = ns_place(fs);
	if (err < 0)
		return err;
	err = ns_shards(fs);
	if (err < 0)
		return err;
	return ns_entries(fs);
}

void fs_ns_free(struct fs *fs)
{
	for (uint32_t i = 0; i < fs->ndirs; i++) {
		free(fs->dirs[i].name);
		free(fs->dirs[i].ents);
	}
	free(fs->dirs);
	for (uint32_t i = 0; i < fs->nshards; i++) {
		free(fs->shards[i].dirname);
		pthread_mutex_destroy(&fs->shards[i].lock);
	}
	free(fs->shards);
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		free(fs->objs[i].key);
		pthread_mutex_destroy(&fs->objs[i].lock);
	}
	free(fs->objs);
	fs->dirs = NULL;
	fs->shards = NULL;
	fs->objs = NULL;
	fs->ndirs = fs->nshards = fs->nobjs = 0;
}

int64_t fs__bsearch_name(const void *base, size_t stride, size_t name_off, uint32_t lo,
			 uint32_t hi, const char *name, size_t len)
{
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const char *m;
		int c;

		memcpy(&m, (const char *)base + (size_t)mid * stride + name_off, sizeof(m));
		c = strncmp(m, name, len);
		if (c == 0 && m[len] != '\0')
			c = 1;
		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len)
{
	const struct fs_dir *d = &fs->dirs[dir];
	int64_t i = fs__bsearch_name(d->ents, sizeof(d->ents[0]), offsetof(struct fs_dirent, name),
				     0, d->nents, name, len);

	return i < 0 ? NULL : &d->ents[i];
}
