/*
 * fs_plan.c — reading plans (fs_plan.h): the order in which a reader will
 * read files, published with 'plan [NAME] FILE' on .shardfs/control,
 * resolved once to the extents of objects that hold the bytes
 * (fs_plan_read.c), and marked read as reads land on planned paths.
 *
 * A plan is immutable once published but for its read marks, read count
 * and position (atomics), and is referenced: the array of struct fs_plans
 * (fs->plans) holds one reference, fs_plan_list hands out more. Publishing
 * a name replaces the plan of that name in the array; the old plan lives on
 * until its last reference goes. Reads take its lock shared (and skip it
 * while no plan is published); publish and clear take it exclusively,
 * never while resolving paths (which may index shards).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "disk.h"
#include "fs_ctl.h"
#include "fs_plan_i.h"

static void plan_changed(struct fs *fs);
static void plans_drop_exited(struct fs *fs);

int fs_plans_new(struct fs_plans **pl)
{
	*pl = calloc(1, sizeof(**pl));
	if (!*pl)
		return -ENOMEM;
	disk_rwlock_init(&(*pl)->lock, DISK_LOCK_PLANS);
	disk_rwlock_init(&(*pl)->use_lock, DISK_LOCK_PLAN_USE);
	disk_mutex_init(&(*pl)->reading_lock, DISK_LOCK_PLAN_READING);
	return 0;
}

void fs_plans_free(struct fs_plans *pl)
{
	if (!pl)
		return;
	disk_rwlock_destroy(&pl->lock);
	disk_rwlock_destroy(&pl->use_lock);
	disk_mutex_destroy(&pl->reading_lock);
	free(pl);
}

static uint32_t key_slot(uint64_t key, uint32_t nslots)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (nslots - 1);
}

/* The first extent of p with key, or PLAN_NONE. */
static uint32_t plan_find(const struct fs_plan *p, uint64_t key)
{
	for (uint32_t s = key_slot(key, p->nslots);; s = (s + 1) & (p->nslots - 1)) {
		uint32_t v = p->slots[s];

		if (v == 0)
			return PLAN_NONE;
		if (p->ext[v - 1].key == key)
			return v - 1;
	}
}

static void plan_free(struct fs_plan *p)
{
	if (!p)
		return;
	free(p->ext);
	free(p->slots);
	free(p->next);
	free((void *)p->done);
	free(p->cum);
	free(p->byoff);
	free(p->rank);
	free(p);
}

void fs_plan_put(struct fs_plan *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1)
		plan_free(p);
}

/* The index of extents by key (slots, next) and the read marks. */
static int plan_index(struct fs_plan *p)
{
	uint32_t *last;

	p->nslots = 16;
	while (p->nslots < 2 * (uint64_t)p->n + 1)
		p->nslots *= 2;
	p->slots = calloc(p->nslots, sizeof(*p->slots));
	p->next = malloc((p->n ? p->n : 1) * sizeof(*p->next));
	p->done = calloc(p->n ? p->n : 1, sizeof(*p->done));
	p->cum = malloc(((size_t)p->n + 1) * sizeof(*p->cum));
	/* last[s]: the last extent seen so far of the key in slot s */
	last = malloc(p->nslots * sizeof(*last));
	if (!p->slots || !p->next || !p->done || !p->cum || !last) {
		free(last);
		return -ENOMEM;
	}
	p->cum[0] = 0;
	for (uint32_t i = 0; i < p->n; i++)
		p->cum[i + 1] = p->cum[i] + p->ext[i].len;
	for (uint32_t i = 0; i < p->n; i++) {
		uint32_t s = key_slot(p->ext[i].key, p->nslots);

		p->next[i] = PLAN_NONE;
		while (p->slots[s] && p->ext[p->slots[s] - 1].key != p->ext[i].key)
			s = (s + 1) & (p->nslots - 1);
		if (!p->slots[s])
			p->slots[s] = i + 1;
		else
			p->next[last[s]] = i;
		last[s] = i;
	}
	free(last);
	return fs_plan__use_index(p);
}

/* ---- publishing -------------------------------------------------------- */

/* name, or "pid-PID" without one, checked into out. */
static int plan_name(const char *name, pid_t pid, char out[FS_PLAN_NAME_MAX + 1])
{
	size_t n;

	if (!name) {
		snprintf(out, FS_PLAN_NAME_MAX + 1, "pid-%ld", (long)pid);
		return 0;
	}
	n = strlen(name);
	if (n == 0 || n > FS_PLAN_NAME_MAX ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") != n)
		return -EINVAL;
	memcpy(out, name, n + 1);
	return 0;
}

/* A plan file the daemon may read: an absolute path, not inside this
 * mount (reading a file of this very mount from a request handler could
 * wait for a handler thread forever: also through a symlink or a bind
 * mount; fs_plan_path_inside never asks the mount; resolved with the
 * sender's rights, uid and gid). 0, or -errno after
 * saying why. */
static int plan_file_ok(const char *mp, const char *nm, const char *file, uid_t uid, gid_t gid)
{
	int err;

	if (file[0] != '/') {
		fs_log(FS_LOG_WARN, "plan '%s': the plan file '%s' is not an absolute path", nm,
		       file);
		return -EINVAL;
	}
	err = fs_plan_path_inside_as(mp, file, uid, gid);
	if (err > 0)
		fs_log(FS_LOG_WARN, "plan '%s': the plan file '%s' is inside the mount", nm, file);
	else if (err < 0)
		fs_log(FS_LOG_WARN, "plan '%s': cannot resolve the plan file '%s': %s", nm, file,
		       strerror(-err));
	return err > 0 ? -EINVAL : err;
}

/* Put plan p in the table: in the slot of the plan of its name, else a
 * free one, else the one published longest ago. Returns the plan it
 * replaced (the caller puts it), or NULL. */
static struct fs_plan *plan_install(struct fs *fs, struct fs_plan *p)
{
	struct fs_plan *old;
	int slot = -1;

	disk_rwlock_wrlock(&fs->plans->lock);
	p->seq = ++fs->plans->seq;
	p->base = atomic_load(&fs->plans->clock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		struct fs_plan *q = fs->plans->v[i];

		if (q && strcmp(q->name, p->name) == 0) {
			slot = i;
			break;
		}
		if (!q && slot < 0)
			slot = i;
	}
	if (slot < 0) { /* full: the plan published longest ago goes */
		slot = 0;
		for (int i = 1; i < FS_PLAN_MAX; i++)
			if (fs->plans->v[i]->seq < fs->plans->v[slot]->seq)
				slot = i;
	}
	old = fs->plans->v[slot];
	fs->plans->v[slot] = p;
	if (!old)
		atomic_fetch_add(&fs->plans->n, 1);
	fs->c.plans_published++;
	disk_rwlock_unlock(&fs->plans->lock);
	return old;
}

int fs_plan_publish(struct fs *fs, const char *name, pid_t pid, const char *file,
		    const struct fs_op_stop *stop, uid_t uid, gid_t gid)
{
	char nm[FS_PLAN_NAME_MAX + 1], human[32], lines[PLAN_LOG_LINES * 22 + 8];
	const char *mp = fs->cfg.mountpoint;
	struct fs_plan *p, *old = NULL;
	struct fs_plan_skipped sk;
	uint32_t nf, failed;
	size_t ln = 0;
	int err, failed_err;

	plans_drop_exited(fs);
	err = plan_name(name, pid, nm);
	if (err < 0) {
		fs_log(FS_LOG_WARN, "plan: bad name '%s' (1 to %d of A-Z a-z 0-9 . _ : -)", name,
		       FS_PLAN_NAME_MAX);
		return err;
	}
	err = plan_file_ok(mp, nm, file, uid, gid);
	if (err < 0)
		return err;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	memcpy(p->name, nm, sizeof(nm));
	p->pid = pid;
	p->fs = fs;
	atomic_init(&p->refs, 1);
	err = fs_plan__read(fs, p, file, stop, uid, gid, &sk);
	if (err == 0)
		err = plan_index(p);
	if (err < 0) {
		fs_log(FS_LOG_WARN, "plan '%s': cannot read the plan file '%s': %s", nm, file,
		       strerror(-err));
		plan_free(p);
		return err;
	}
	/* the numbers of the lines that named nothing, never their text: a
	 * plan file may be anything its sender could name (the daemon's user
	 * may read more than the sender) */
	for (uint32_t i = 0; i < sk.not_found && i < PLAN_LOG_LINES; i++)
		ln += (size_t)snprintf(lines + ln, sizeof(lines) - ln, "%s%" PRIu64, i ? ", " : "",
				       sk.lines[i]);
	if (sk.not_found > PLAN_LOG_LINES)
		snprintf(lines + ln, sizeof(lines) - ln, ", ...");
	nf = sk.not_found;
	failed = sk.failed;
	failed_err = sk.failed_err;
	old = plan_install(fs, p);
	fs_human_bytes(p->bytes, human, sizeof(human));
	fs_log(FS_LOG_INFO, "plan '%s' (pid %ld) from '%s': %" PRIu32 " %s, %s%s%s", nm, (long)pid,
	       file, p->n, fs_plural(p->n, "path", "paths"), human,
	       old && strcmp(old->name, nm) == 0 ? ", replacing the earlier one" : "",
	       old && strcmp(old->name, nm) != 0 ? ", dropping the oldest plan" : "");
	if (nf)
		fs_log(FS_LOG_WARN,
		       "plan '%s': %" PRIu32 " %s not found in the mount %s skipped "
		       "(line%s %s of the plan file)",
		       nm, nf, fs_plural(nf, "path", "paths"), fs_plural(nf, "was", "were"),
		       nf == 1 ? "" : "s", lines);
	if (failed)
		fs_log(FS_LOG_WARN,
		       "plan '%s': %" PRIu32 " %s could not be looked up and %s skipped: %s "
		       "could not be read or indexed (%s; see above)",
		       nm, failed, fs_plural(failed, "path", "paths"),
		       fs_plural(failed, "was", "were"),
		       fs_plural(failed, "its shard", "their shards"), strerror(failed_err));
	if (old && strcmp(old->name, nm) != 0)
		fs_log(FS_LOG_WARN,
		       "plan: the mount holds at most FS_PLAN_MAX (%d) plans: dropped '%s'",
		       FS_PLAN_MAX, old->name);
	fs_plan_put(old);
	fs_plan__use_all(fs);
	plan_changed(fs);
	return 0;
}

int fs_plan_clear(struct fs *fs, const char *name, pid_t pid)
{
	char nm[FS_PLAN_NAME_MAX + 1];
	struct fs_plan *old = NULL;
	int err = plan_name(name, pid, nm);

	if (err < 0)
		return err;
	disk_rwlock_wrlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		if (fs->plans->v[i] && strcmp(fs->plans->v[i]->name, nm) == 0) {
			old = fs->plans->v[i];
			fs->plans->v[i] = NULL;
			atomic_fetch_sub(&fs->plans->n, 1);
			break;
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	if (!old)
		return -ENOENT;
	fs_log(FS_LOG_INFO, "plan '%s' cleared", nm);
	fs_plan_put(old);
	fs_plan__use_all(fs);
	plan_changed(fs);
	return 0;
}

/* ---- reads --------------------------------------------------------------- */

static void plan_mark(struct fs *fs, struct fs_plan *p, uint32_t i, int *marked)
{
	unsigned pos = atomic_load_explicit(&p->position, memory_order_relaxed);

	atomic_fetch_add_explicit(&p->nread, 1, memory_order_relaxed);
	fs->c.plan_hits++;
	while (pos < i + 1 && !atomic_compare_exchange_weak(&p->position, &pos, i + 1))
		;
	/* the fetcher has nothing to do before its wake point (a batch is due
	 * once the reader is half-way through the last): waking it for every
	 * read cost a context switch a sample */
	if ((pos > i + 1 ? pos : i + 1) >= atomic_load_explicit(&p->wake_at, memory_order_relaxed))
		*marked = 1;
	fs_plan__use_moved(fs, p);
}

int fs_plan_note_read(struct fs *fs, uint64_t ino, uint64_t off, uint64_t size)
{
	enum fs_kind k = fs_ino_kind(ino);
	uint64_t key = ino;
	struct fs_plan_extent x = {0}; /* set when planned */
	struct fs_plan_hit hits[FS_PLAN_MAX];
	uint32_t nhits = 0;
	int marked = 0;

	if (!atomic_load_explicit(&fs->plans->n, memory_order_relaxed))
		return 0;
	if (k != FS_K_OBJ && k != FS_K_MEMBER)
		return 0;
	disk_rwlock_rdlock(&fs->plans->lock);
	/* the slots up to the last plan (n counts v[]'s plans, both changed
	 * under the lock held exclusive) */
	for (unsigned s = 0, left = atomic_load(&fs->plans->n); s < FS_PLAN_MAX && left; s++) {
		struct fs_plan *p = fs->plans->v[s];
		uint32_t first;

		if (!p)
			continue;
		left--;
		first = plan_find(p, key);
		if (first == PLAN_NONE)
			continue;
		/* one key: the same bytes in every plan */
		x = p->ext[first];
		hits[nhits++] = (struct fs_plan_hit){p->seq, s, first};
		if (off == 0) { /* a new read of the file: its next occurrence */
			for (uint32_t i = first; i != PLAN_NONE; i = p->next[i]) {
				if (atomic_exchange(&p->done[i], 1) == 0) {
					plan_mark(fs, p, i, &marked);
					break;
				}
			}
		} else { /* a read that continues one: counted when none is */
			uint32_t i = first;

			while (i != PLAN_NONE && !atomic_load(&p->done[i]))
				i = p->next[i];
			if (i == PLAN_NONE && atomic_exchange(&p->done[first], 1) == 0)
				plan_mark(fs, p, first, &marked);
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	if (nhits)
		fs_plan__use_read(fs, &x, off, size, hits, nhits);
	return marked;
}

void fs_plan_wake(struct fs *fs)
{
	plan_changed(fs);
}

/* ---- the fetcher's side and stats ------------------------------------------ */

void fs_plan_set_listener(struct fs *fs, void (*fn)(void *ctx), void *ctx)
{
	fs->plans->listener = fn;
	fs->plans->listener_ctx = ctx;
}

void fs_plan_wake_at(struct fs_plan *p, uint32_t position)
{
	atomic_store_explicit(&p->wake_at, position, memory_order_relaxed);
}

static void plan_changed(struct fs *fs)
{
	if (fs->plans->listener)
		fs->plans->listener(fs->plans->listener_ctx);
}

size_t fs_plan_list(struct fs *fs, struct fs_plan **out, size_t max)
{
	size_t n = 0;

	disk_rwlock_rdlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX && n < max; i++) {
		if (fs->plans->v[i]) {
			atomic_fetch_add(&fs->plans->v[i]->refs, 1);
			out[n++] = fs->plans->v[i];
		}
	}
	disk_rwlock_unlock(&fs->plans->lock);
	return n;
}

/* Extents of p whose object the source removed (FS_OBJ_GONE: a refresh,
 * or a lookup that found it gone): a path of the plan that names nothing
 * any more is missing, as one that named nothing at publish is. Counted
 * again only when an object was marked stale or gone since the last count
 * (fs_obj_mark_stale moves fs->c.stale_noticed after the object's state),
 * so a read of the counters costs one load while nothing changes, and a
 * count that raced a mark is made again at the next read. Any thread. */
static uint32_t plan_gone(const struct fs_plan *p)
{
	atomic_ullong *cache = (atomic_ullong *)&p->gone; /* a cache, not the plan */
	uint64_t g = atomic_load(&p->fs->c.stale_noticed), tag = (uint64_t)(uint32_t)(g + 1) << 32,
		 v = atomic_load_explicit(cache, memory_order_acquire);
	uint32_t n = 0;

	if (tag && (v & ~(uint64_t)UINT32_MAX) == tag)
		return (uint32_t)v;
	for (uint32_t k = 0; k < p->n; k++)
		n += atomic_load_explicit(&fs_obj(p->fs, p->ext[k].obj)->state,
					  memory_order_acquire) == FS_OBJ_GONE;
	atomic_store_explicit(cache, tag | n, memory_order_release);
	return n;
}

void fs_plan_get_info(const struct fs_plan *p, struct fs_plan_info *i)
{
	i->name = p->name;
	i->pid = p->pid;
	i->paths = p->n;
	i->missing = p->missing + plan_gone(p);
	i->failed = p->failed;
	i->read = atomic_load_explicit(&p->nread, memory_order_relaxed);
	i->position = atomic_load_explicit(&p->position, memory_order_relaxed);
	i->bytes = p->bytes;
	i->fnv = p->fnv;
}

uint32_t fs_plan_ahead(const struct fs_plan *p, uint32_t *from, struct fs_plan_extent *out,
		       uint32_t *idx, uint32_t max)
{
	uint32_t n = 0, i = *from;

	for (; i < p->n && n < max; i++) {
		if (atomic_load_explicit(&p->done[i], memory_order_relaxed))
			continue;
		if (idx)
			idx[n] = i;
		out[n++] = p->ext[i];
	}
	*from = i;
	return n;
}

uint64_t fs_plan_bytes_before(const struct fs_plan *p, uint32_t i)
{
	return p->cum[i < p->n ? i : p->n];
}

void fs_plan_totals(struct fs *fs, struct fs_plan_totals *t)
{
	struct fs_plan *ps[FS_PLAN_MAX];
	size_t n = fs_plan_list(fs, ps, FS_PLAN_MAX);

	memset(t, 0, sizeof(*t));
	for (size_t k = 0; k < n; k++) {
		struct fs_plan_info i;

		fs_plan_get_info(ps[k], &i);
		t->plans++;
		t->paths += i.paths;
		t->missing += i.missing;
		t->failed += i.failed;
		t->read += i.read;
		t->position += i.position;
		t->bytes += i.bytes;
		fs_plan_put(ps[k]);
	}
}

/* A plan named "pid-PID" (the daemon's name for one published without a
 * name, and the Python module's) is that process's (or thread's): once it
 * has ended nobody reads along the plan any more, and it would stay listed
 * (and hold its marks) for ever. Such plans are dropped here, at each
 * publish and each read of .shardfs/plans; other names are kept ('shardfs
 * plan' publishes and exits). */
static void plans_drop_exited(struct fs *fs)
{
	char gone[FS_PLAN_MAX][FS_PLAN_NAME_MAX + 1];
	pid_t pids[FS_PLAN_MAX];
	int n = 0;

	disk_rwlock_rdlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		const struct fs_plan *p = fs->plans->v[i];
		char *end;
		long who;

		if (!p || strncmp(p->name, "pid-", 4) != 0 || p->name[4] < '1' || p->name[4] > '9')
			continue;
		errno = 0;
		who = strtol(p->name + 4, &end, 10);
		if (errno || *end || who > INT_MAX || !disk_pid_gone((pid_t)who))
			continue;
		snprintf(gone[n], sizeof(gone[n]), "%s", p->name);
		pids[n++] = (pid_t)who;
	}
	disk_rwlock_unlock(&fs->plans->lock);
	for (int k = 0; k < n; k++)
		if (fs_plan_clear(fs, gone[k], pids[k]) == 0)
			fs_log(FS_LOG_INFO, "plan '%s' dropped: process %ld has ended", gone[k],
			       (long)pids[k]);
}

int fs_plan_render(struct fs *fs, char **buf, size_t *len)
{
	plans_drop_exited(fs);
	struct fs_plan *ps[FS_PLAN_MAX];
	size_t n = fs_plan_list(fs, ps, FS_PLAN_MAX), cap = 128 + n * 256, l;
	char *b = malloc(cap);

	if (!b) {
		for (size_t k = 0; k < n; k++)
			fs_plan_put(ps[k]);
		return -ENOMEM;
	}
	l = (size_t)snprintf(b, cap,
			     "name\tpid\tpaths\tmissing\tfailed\tread\tposition\tbytes\tfnv\n");
	for (size_t k = 0; k < n; k++) {
		struct fs_plan_info i;

		fs_plan_get_info(ps[k], &i);
		l += (size_t)snprintf(b + l, cap - l,
				      "%s\t%ld\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu32 "\t%" PRIu32
				      "\t%" PRIu32 "\t%" PRIu64 "\t%016" PRIx64 "\n",
				      i.name, (long)i.pid, i.paths, i.missing, i.failed, i.read,
				      i.position, i.bytes, i.fnv);
		fs_plan_put(ps[k]);
	}
	*buf = b;
	*len = l;
	return 0;
}

void fs_plan_free_all(struct fs *fs)
{
	if (!fs->plans)
		return;
	disk_rwlock_wrlock(&fs->plans->lock);
	for (int i = 0; i < FS_PLAN_MAX; i++) {
		fs_plan_put(fs->plans->v[i]);
		fs->plans->v[i] = NULL;
	}
	atomic_store(&fs->plans->n, 0);
	disk_rwlock_unlock(&fs->plans->lock);
}
