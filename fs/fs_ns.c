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

int fs_ns_build(struct fs *fs)
{
	struct listing l = {0};
	int err;

	err = backend_list(fs->be, list_cb, &l);
	fs->objs = l.objs;
	fs->nobjs = l.n;
	if (err < 0)
		return err;
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

const struct fs_dirent *fs_ns_lookup(const struct fs *fs, uint32_t dir, const char *name,
				     size_t len)
{
	const struct fs_dir *d = &fs->dirs[dir];
	uint32_t lo = 0, hi = d->nents;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		const char *m = d->ents[mid].name;
		int c = strncmp(m, name, len);

		if (c == 0 && m[len] != '\0')
			c = 1;
		if (c == 0)
			return &d->ents[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
