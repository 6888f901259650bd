/*
 * fs_learn.c — the size, mtime and ETag of objects that a listing named
 * only: the names of a brace pattern (backend_objinfo.name_only). A mount
 * of https://host/d/shard-{000000..067999}.tar is ready without a request
 * per shard; what the mount needs of a shard is learned when someone asks:
 *  - one object: getattr of the .tar or of its member directory, a lookup,
 *    a read, indexing it (fs_obj_learn: one HEAD);
 *  - many: a listing of a directory (fs_dir_learn, before readdirplus
 *    answers, for the FS_LEARN_AHEAD entries from where it lists), a
 *    prefetch, the warm, the imagefolder view and the loader indexes
 *    (fs_objs_learn, fs_learn_all: HEADs at the store's listing
 *    parallelism, backend_stat_many).
 * What is learned stays for the mount's life, like a listed object's info:
 * the object's version is then fixed (fills carry If-Match on its ETag), so
 * a shard that changes on the server afterwards is ESTALE, then replaced at
 * the next lookup, as any remote object (fs_ns_replace).
 *
 * A name the store does not have (404) becomes FS_INFO_MISSING once:
 * brace_missing counts it, the first LEARN_MISSING_LOGGED of the mount are
 * logged by name (then one line per batch with a count), and from then on
 * it is ENOENT by name and left out of listings (readdir skips entries
 * whose attributes fail; fs_dir_learn learns ahead past them).
 * Its entries stay in the directory's array, so listing offsets never
 * move. A refresh asks for it again (fs_ns.c). Other errors (the store is
 * down: -EIO) are not remembered: the next need asks again.
 *
 * Each name is asked once at a time, whoever needs it: a learner claims
 * the lazy objects it asks for (o->learning, under fs->learn_lock) and
 * skips those another thread is asking; it waits for their answers
 * (learn_cond, until their learn_gen moves) once its own are in, then
 * uses them: a listing that runs while the warm asks the sizes of the
 * same names sends nothing for them and still lists them learned. A
 * waiter gets what that one HEAD found: the info, ENOENT, or its error.
 * The wait is bounded by that HEAD, which the store's retry budget bounds;
 * a learner never waits holding a claim (it waits once all its own
 * answers are in), so two learners never wait for each other.
 *
 * Threads: any. Learning an object takes its lock (o->lock, which also
 * protects o->raw), writes o->info and publishes o->known with release;
 * readers read o->info only after an acquire load saw FS_INFO_KNOWN.
 * Nothing here holds ns_lock, learn_lock or an object's lock while asking
 * the store.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_i.h"

/* Objects asked for in one backend_stat_many (bounds the answers' memory:
 * 4096 x ~120 bytes). */
#define LEARN_BATCH 4096u

/* Names of the pattern the store does not have that are logged one by one;
 * past them, one line per batch gives their count (a pattern that names
 * 100,000 shards of which 40 exist logged 99,960 lines, 13 MB). */
#define LEARN_MISSING_LOGGED 8

/* Record the store's answer about obj (err: 0 with info, or its errno).
 * Returns 1 when it found obj missing and did not log it, else 0. */
static int learn_apply(struct fs *fs, uint32_t obj, const struct backend_objinfo *info, int err)
{
	struct fs_obj *o = fs_obj(fs, obj);

	if (err != 0 && err != -ENOENT)
		return 0; /* nothing learned: asked again at the next need */
	disk_mutex_lock(&o->lock);
	if (atomic_load_explicit(&o->known, memory_order_relaxed) != FS_INFO_LAZY) {
		disk_mutex_unlock(&o->lock);
		return 0; /* another thread learned it first */
	}
	if (err == -ENOENT) {
		atomic_store_explicit(&o->known, FS_INFO_MISSING, memory_order_release);
		disk_mutex_unlock(&o->lock);
		if (atomic_fetch_add(&fs->c.brace_missing, 1) >= LEARN_MISSING_LOGGED)
			return 1;
		fs_log(FS_LOG_WARN,
		       "%s: named by the pattern but not on the server: ENOENT, left "
		       "out of listings",
		       o->key);
		return 0;
	}
	o->info.size = info->size;
	o->info.mtime = info->mtime;
	o->info.mode = info->mode;
	memcpy(o->info.etag, info->etag, sizeof(o->info.etag));
	o->info.etag[sizeof(o->info.etag) - 1] = '\0';
	atomic_store_explicit(&o->known, FS_INFO_KNOWN, memory_order_release);
	disk_mutex_unlock(&o->lock);
	fs->c.brace_learned++;
	atomic_fetch_add(&fs->total_bytes, info->size);
	return 0;
}

void fs_learn_init(struct fs *fs)
{
	disk_mutex_init(&fs->learn_lock, DISK_LOCK_LEARN);
	pthread_cond_init(&fs->learn_cond, NULL);
	disk_mutex_init(&fs->built_lock, DISK_LOCK_BUILT);
	pthread_cond_init(&fs->built_cond, NULL);
}

void fs_learn_destroy(struct fs *fs)
{
	pthread_cond_destroy(&fs->built_cond);
	disk_mutex_destroy(&fs->built_lock);
	pthread_cond_destroy(&fs->learn_cond);
	disk_mutex_destroy(&fs->learn_lock);
}

/* End the learning of objs[0..n) that this thread claimed: err[i] (or
 * err0 when errs is NULL) is what its HEAD found; wakes its waiters. */
static void learn_done(struct fs *fs, const uint32_t *objs, size_t n, const int *errs, int err0)
{
	disk_mutex_lock(&fs->learn_lock);
	for (size_t i = 0; i < n; i++) {
		struct fs_obj *o = fs_obj(fs, objs[i]);

		o->learning = 0;
		o->learn_err = errs ? errs[i] : err0;
		o->learn_gen++;
	}
	pthread_cond_broadcast(&fs->learn_cond);
	disk_mutex_unlock(&fs->learn_lock);
}

/* Under learn_lock: wait until the learning of o that had ended gen times
 * ends; its error. */
static int learn_wait_locked(struct fs *fs, struct fs_obj *o, uint32_t gen)
{
	while (o->learn_gen == gen)
		disk_cond_wait(&fs->learn_cond, &fs->learn_lock);
	return o->learn_err;
}

static int known_err(const struct fs_obj *o, int err)
{
	int k = atomic_load_explicit(&o->known, memory_order_acquire);

	if (k == FS_INFO_KNOWN)
		return 0;
	if (k == FS_INFO_MISSING)
		return -ENOENT;
	return err < 0 ? err : -EIO;
}

int fs_obj_learn(struct fs *fs, uint32_t obj)
{
	struct fs_obj *o = fs_obj(fs, obj);
	struct backend_objinfo info;
	int err;

	if (atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_LAZY)
		return known_err(o, 0);
	disk_mutex_lock(&fs->learn_lock);
	if (atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_LAZY) {
		disk_mutex_unlock(&fs->learn_lock);
		return known_err(o, 0);
	}
	if (o->learning) { /* another thread asks: its answer is ours */
		fs->c.brace_waits++;
		err = learn_wait_locked(fs, o, o->learn_gen);
		disk_mutex_unlock(&fs->learn_lock);
		return known_err(o, err);
	}
	o->learning = 1;
	disk_mutex_unlock(&fs->learn_lock);
	memset(&info, 0, sizeof(info));
	err = backend_stat(fs->be, o->key, &info);
	if (err == -EISDIR)
		err = -ENOENT; /* a directory: no object of that name */
	if (learn_apply(fs, obj, &info, err)) {
		unsigned long long missing = atomic_load(&fs->c.brace_missing);

		fs_log(FS_LOG_WARN,
		       "%s: named by the pattern but not on the server: ENOENT, left out of "
		       "listings (%llu such %s: counter brace_missing)",
		       o->key, missing, fs_plural(missing, "name", "names"));
	}
	learn_done(fs, &obj, 1, NULL, err);
	return known_err(o, err);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* One backend_stat_many of objs[0..n) (n <= LEARN_BATCH, all lazy and
 * claimed by this thread: their learning ends here). */
static void learn_batch(struct fs *fs, const uint32_t *objs, size_t n)
{
	const char **keys = malloc(n * sizeof(*keys));
	struct backend_objinfo *info = malloc(n * sizeof(*info));
	int *errs = malloc(n * sizeof(*errs)), first = 0, err;
	size_t failed = 0, unlogged = 0;
	const char *first_unlogged = NULL;

	if (!keys || !info || !errs) {
		learn_done(fs, objs, n, NULL, -ENOMEM); /* each asked alone at its need */
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		keys[i] = fs_obj(fs, objs[i])->key;
	err = backend_stat_many(fs->be, keys, n, info, errs);
	if (err < 0) {
		learn_done(fs, objs, n, NULL, err);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (errs[i] == -EISDIR)
			errs[i] = -ENOENT;
		if (errs[i] < 0 && errs[i] != -ENOENT && !failed++)
			first = errs[i];
		if (learn_apply(fs, objs[i], &info[i], errs[i]) && !unlogged++)
			first_unlogged = keys[i];
	}
	learn_done(fs, objs, n, errs, 0);
	if (unlogged)
		fs_log(FS_LOG_WARN,
		       "%zu more %s of the pattern not on the server (%s%s): ENOENT, "
		       "left out of listings; not logged one by one (%llu in all: counter "
		       "brace_missing)",
		       unlogged, fs_plural(unlogged, "name", "names"),
		       unlogged == 1 ? "" : "the first: ", first_unlogged,
		       (unsigned long long)atomic_load(&fs->c.brace_missing));
	if (failed) {
		/* the store's reason (a redirect loop, a refusal, an answer that
		 * is not HTTP), not only the errno: a user cannot act on EIO */
		const char *why = backend_last_error(fs->be);

		fs_log(FS_LOG_WARN,
		       "%zu of %zu %s sizes not learned: %s%s%s (asked again when needed)", failed,
		       n, fs_plural(n, "object's", "objects'"), strerror(-first),
		       why && *why ? ": " : "", why ? why : "");
	}
out:
	free(keys);
	free(info);
	free(errs);
}

/* Of lazy[0..n): claim those no thread is learning (moved to the front;
 * their count), and note in waits (with their learn_gen) those another
 * thread is learning. */
static size_t learn_claim(struct fs *fs, uint32_t *lazy, size_t n, uint32_t (*waits)[2],
			  size_t *nwaits)
{
	size_t mine = 0;

	disk_mutex_lock(&fs->learn_lock);
	for (size_t i = 0; i < n; i++) {
		struct fs_obj *o = fs_obj(fs, lazy[i]);

		if (atomic_load_explicit(&o->known, memory_order_acquire) != FS_INFO_LAZY)
			continue; /* learned since */
		if (o->learning) {
			fs->c.brace_waits++;
			waits[*nwaits][0] = lazy[i];
			waits[(*nwaits)++][1] = o->learn_gen;
			continue;
		}
		o->learning = 1;
		lazy[mine++] = lazy[i];
	}
	disk_mutex_unlock(&fs->learn_lock);
	return mine;
}

void fs_objs_learn(struct fs *fs, const uint32_t *objs, size_t n)
{
	uint32_t *lazy, (*waits)[2];
	size_t m = 0, nwaits = 0;

	if (!fs->lazy || n == 0)
		return;
	lazy = malloc(n * sizeof(*lazy));
	waits = malloc(n * sizeof(*waits));
	if (!lazy || !waits) {
		free(lazy);
		free(waits);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (atomic_load_explicit(&fs_obj(fs, objs[i])->known, memory_order_acquire) ==
		    FS_INFO_LAZY)
			lazy[m++] = objs[i];
	qsort(lazy, m, sizeof(*lazy), u32_cmp);
	{
		size_t w = 0;

		for (size_t i = 0; i < m; i++)
			if (w == 0 || lazy[w - 1] != lazy[i])
				lazy[w++] = lazy[i];
		m = w;
	}
	/* claimed a batch at a time, just before it is asked: the names past
	 * it stay free for another learner (a listing ahead of the warm) */
	for (size_t i = 0; i < m; i += LEARN_BATCH) {
		size_t b = m - i < LEARN_BATCH ? m - i : LEARN_BATCH;
		size_t mine = learn_claim(fs, lazy + i, b, waits, &nwaits);

		if (mine)
			learn_batch(fs, lazy + i, mine);
	}
	if (nwaits) { /* holding no claim: the others' answers */
		disk_mutex_lock(&fs->learn_lock);
		for (size_t i = 0; i < nwaits; i++)
			learn_wait_locked(fs, fs_obj(fs, waits[i][0]), waits[i][1]);
		disk_mutex_unlock(&fs->learn_lock);
	}
	free(lazy);
	free(waits);
}

void fs_learn_all(struct fs *fs)
{
	uint32_t n = atomic_load_explicit(&fs->nobjs, memory_order_acquire), m = 0;
	uint32_t *objs;

	if (!fs->lazy || n == 0)
		return;
	objs = malloc((size_t)n * sizeof(*objs));
	if (!objs)
		return;
	for (uint32_t i = 0; i < n; i++)
		if (fs_obj_live(fs_obj(fs, i)))
			objs[m++] = i;
	fs_objs_learn(fs, objs, m);
	free(objs);
}

static int obj_of_ent(const struct fs *fs, const struct fs_dirent *e, uint32_t *obj)
{
	if (e->kind == FS_K_OBJ)
		*obj = e->idx;
	else if (e->kind == FS_K_SHARD)
		*obj = fs_shard(fs, e->idx)->obj;
	else
		return 0;
	return 1;
}

/* Entries of [from, end) of dir that a listing shows: all but those whose
 * object the store does not have. */
static uint32_t dir_shown(struct fs *fs, uint32_t dir, uint32_t from, uint32_t end)
{
	uint32_t shown = 0;

	fs_ns_rdlock(fs);
	for (uint32_t i = from; dir < fs->ndirs && i < end && i < fs->dirs[dir].nents; i++) {
		uint32_t obj;

		if (!obj_of_ent(fs, &fs->dirs[dir].ents[i], &obj) ||
		    atomic_load_explicit(&fs_obj(fs, obj)->known, memory_order_acquire) !=
			FS_INFO_MISSING)
			shown++;
	}
	fs_ns_unlock(fs);
	return shown;
}

/* One window [from, end) of dir learned when one of its first
 * FS_LEARN_NEAR entries is not known; its end (from: past the
 * directory's end). */
static uint32_t dir_learn_window(struct fs *fs, uint32_t dir, uint32_t from)
{
	uint32_t *objs = NULL, n = 0, near = 0, end = from;

	fs_ns_rdlock(fs);
	if (dir < fs->ndirs && from < fs->dirs[dir].nents) {
		const struct fs_dir *d = &fs->dirs[dir];

		end = d->nents - from > FS_LEARN_AHEAD ? from + FS_LEARN_AHEAD : d->nents;
		for (uint32_t i = from; i < end && i < from + FS_LEARN_NEAR && !near; i++) {
			uint32_t obj;

			if (obj_of_ent(fs, &d->ents[i], &obj) &&
			    atomic_load_explicit(&fs_obj(fs, obj)->known, memory_order_acquire) ==
				FS_INFO_LAZY)
				near = 1;
		}
		objs = near ? malloc((size_t)(end - from) * sizeof(*objs)) : NULL;
		for (uint32_t i = from; objs && i < end; i++)
			if (obj_of_ent(fs, &d->ents[i], &objs[n]))
				n++;
	}
	fs_ns_unlock(fs);
	if (objs)
		fs_objs_learn(fs, objs, n);
	free(objs);
	return end;
}

void fs_dir_learn(struct fs *fs, uint32_t dir, uint32_t from)
{
	uint32_t shown = 0;

	if (!fs->lazy)
		return;
	/* A listing leaves out the names the store does not have, so one READDIR
	 * passes as many of them as come before its next entries: a window of
	 * a pattern that names more shards than exist may show few entries,
	 * and the listing would go on into names not learned yet and show them
	 * (the kernel then keeps that listing). Windows are learned until
	 * FS_LEARN_NEAR entries that a listing shows lie ahead, or the end. */
	while (shown < FS_LEARN_NEAR) {
		uint32_t end = dir_learn_window(fs, dir, from);

		if (end == from)
			return;
		shown += dir_shown(fs, dir, from, end);
		from = end;
	}
}

int fs_ino_unlearned(const struct fs *fs, uint64_t ino)
{
	enum fs_kind k = fs_ino_kind(ino);
	uint32_t a = fs_ino_a(ino), obj;

	if (!fs->lazy)
		return 0;
	if (k == FS_K_OBJ && a < fs->nobjs)
		obj = a;
	else if (k == FS_K_SHARD && a < fs->nshards)
		obj = fs_shard(fs, a)->obj;
	else
		return 0;
	return atomic_load_explicit(&fs_obj(fs, obj)->known, memory_order_acquire) == FS_INFO_LAZY;
}
