/*
 * fs_plan_index.c — the shards a plan file names, indexed several at once
 * before its paths are resolved one by one (fs_plan__index_ahead, called
 * by fs_plan.c's plan_read).
 *
 * Resolving a path of a shard whose index is not loaded builds that index
 * (fs_shard_index: the cache directory's copy, a sidecar, else the shard's
 * headers read through the cache, for shards of small members all of its
 * bytes). One path after another, that is one shard after another on one
 * connection: over a link of 1 MB/s per connection a plan of 24 shards of
 * 2.7 MB waited 65 s for 24 builds in a row. Here a first pass over the
 * file looks each line's leading directories up (the listing's entries:
 * no index is needed to find a shard's directory) and notes the shards
 * whose index is not loaded, in the order the plan first names them; then
 * PLAN_INDEX_THREADS threads at most (and at most --connections, and so
 * many that their readahead windows take at most half of the cache:
 * builds that evict each other's bytes would fetch them twice) build
 * them, each the next shard of the list. The resolving pass after it
 * finds them loaded. A shard whose build fails is left to that pass, which
 * meets the same error and counts the path missing as before.
 *
 * In --layout imagefolder a line is CLASS/FILE, looked up in the view
 * (the view's names: no index is read) to the shard FILE is a member of.
 * The view itself needs every shard's index, but the mount builds it
 * before it serves (fs_if_view.c's prepare: IF_THREADS builds), so a
 * plan never waits for that here; a mount that mapped a saved view has
 * loaded no index, and the shards a plan's files are in are then loaded
 * (built, where the cache directory holds no usable copy) here, several
 * at once, instead of one by one as the lines are resolved. (A view
 * dropped since, e.g. by a refresh, is built again by the pass's first
 * lookup, with every index, as any lookup builds it.)
 * What it does not do: index a shard no line names; look past a line's
 * first shard directory (a shard inside a shard is no path); read the file
 * at all when every shard's index is loaded already (a mount whose view
 * built them, a plan published again): the pass would look every line up
 * to note nothing (some 2,800 instructions a line of an imagefolder
 * plan, about half of what resolving the line cost after it).
 *
 * Counters: plan_index_wanted (shards the pass found not loaded),
 * plan_index_done (of them, builds ended: loaded or failed); the plan
 * command's progress follows them. Bounds: the threads check the sender's
 * stop between shards (a Ctrl-C or the plan command's bound ends the
 * publish after the builds in flight); each build is bounded by the
 * store's retry budget and stall bound.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs_i.h"
#include "fs_if_i.h"
#include "fs_plan_i.h"
#include "fs_view.h"

/* Index builds at once at most: each streams one shard on one connection. */
#define PLAN_INDEX_THREADS 16u
/* The file is read in pieces of this size (as plan_read's). */
#define PLAN_INDEX_CHUNK (64u << 10)

struct index_ahead {
	struct fs *fs;
	const struct fs_op_stop *stop;
	uint32_t *shard; /* in the order the plan names them first */
	uint32_t n, cap;
	unsigned char *seen; /* a bit per shard of the mount */
	uint32_t nseen;	     /* shards the bitmap covers */
	atomic_uint next;    /* the next of shard[] to build */
	/* the last line's leading directories up to its shard's: a line
	 * that begins with the same ones needs no lookup */
	char prefix[PATH_MAX + 1];
	size_t plen; /* 0: none */
	/* a line's shard noted: line_shard, line_if_shard (the layout's) */
	int (*line)(struct index_ahead *ia, const char *path, size_t len);
};

/* Lines the first pass looked up, since the process started (a test's
 * count: fs_plan__index_lines). */
static atomic_ullong index_lines;

uint64_t fs_plan__index_lines(void)
{
	return atomic_load(&index_lines);
}

/* Is every shard of the mount's index loaded (its shards up to n)? */
static int all_loaded(struct fs *fs, uint32_t n)
{
	for (uint32_t a = 0; a < n; a++)
		if (!atomic_load_explicit(&fs_shard(fs, a)->ix, memory_order_acquire))
			return 0;
	return 1;
}

/* Note shard a (not loaded, not noted yet). */
static int note_shard(struct index_ahead *ia, uint32_t a)
{
	if (a >= ia->nseen || (ia->seen[a / 8] & (1u << (a % 8))))
		return 0;
	ia->seen[a / 8] |= (unsigned char)(1u << (a % 8));
	if (atomic_load_explicit(&fs_shard(ia->fs, a)->ix, memory_order_acquire))
		return 0; /* loaded already */
	if (ia->n == ia->cap) {
		uint32_t nc = ia->cap ? ia->cap * 2 : 64;
		uint32_t *ns = realloc(ia->shard, nc * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		ia->shard = ns;
		ia->cap = nc;
	}
	ia->shard[ia->n++] = a;
	return 0;
}

/* Line path[0..len): its leading directories looked up as resolve() does
 * until a shard's directory; that shard noted. */
static int line_shard(struct index_ahead *ia, const char *path, size_t len)
{
	char comp[NAME_MAX + 1];
	uint64_t ino = 1;
	size_t i = 0;

	if (ia->plen && len > ia->plen && memcmp(path, ia->prefix, ia->plen) == 0 &&
	    path[ia->plen] == '/')
		return 0; /* the last line's shard */
	for (size_t clen; (clen = fs_path_comp(path, len, &i)) > 0; i += clen + 1) {
		struct fs_entry e;
		size_t j = i + clen;

		if (j - i > NAME_MAX || j == len)
			return 0; /* no directory, or the last component */
		memcpy(comp, path + i, j - i);
		comp[j - i] = '\0';
		if (memchr(comp, '\0', j - i) || fs_lookup_entry(ia->fs, ino, comp, &e) < 0 ||
		    !e.ino)
			return 0;
		ino = e.ino;
		if (fs_ino_kind(ino) == FS_K_SHARD) {
			if (j <= PATH_MAX) {
				memcpy(ia->prefix, path, j);
				ia->plen = j;
			}
			return note_shard(ia, fs_ino_a(ino));
		}
		if (fs_ino_kind(ino) != FS_K_DIR)
			return 0;
	}
	return 0;
}

/* Line path[0..len) of a --layout imagefolder mount: its components
 * looked up in the view (the layout's own lookup: names only, no
 * attributes, so no shard's index is read) down to a file; its shard
 * noted. */
static int line_if_shard(struct index_ahead *ia, const char *path, size_t len)
{
	char comp[NAME_MAX + 1];
	uint64_t ino = 1;
	size_t i = 0;

	for (size_t clen; (clen = fs_path_comp(path, len, &i)) > 0; i += clen + 1) {
		const struct fs_view *v = fs_view_of(ia->fs, ino);
		uint64_t next = 0;

		if (clen > NAME_MAX || !v || !v->lookup)
			return 0;
		memcpy(comp, path + i, clen);
		comp[clen] = '\0';
		if (memchr(comp, '\0', clen) || v->lookup(ia->fs, ino, comp, clen, &next) < 0 ||
		    !next)
			return 0;
		ino = next;
		if (fs_ino_kind(ino) == FS_K_IFFILE)
			return i + clen == len ? note_shard(ia, fs_ino_a(ino)) : 0;
	}
	return 0;
}

/* The first pass: every line's shard noted. 0, or a read error, -ENOMEM. */
static int scan_file(struct index_ahead *ia, int fd)
{
	char *buf = malloc(PLAN_INDEX_CHUNK), *line = malloc(PATH_MAX + 1);
	uint64_t total = 0, nlines = 0;
	size_t ll = 0;
	int overlong = 0, err = 0;

	if (!buf || !line) {
		err = -ENOMEM;
		goto out;
	}
	while (err == 0) {
		ssize_t n = disk_read_some(fd, buf, PLAN_INDEX_CHUNK);
		size_t i = 0;

		total += n > 0 ? (uint64_t)n : 0;
		if (n <= 0 || total > FS_PLAN_FILE_MAX) {
			err = n < 0 ? (int)n : 0; /* grown past the bound: plan_read says so */
			break;
		}
		if (ia->stop && ia->stop->asked(ia->stop->arg)) {
			err = -EINTR;
			break;
		}
		while (i < (size_t)n && err == 0) {
			const char *nl = memchr(buf + i, '\n', (size_t)n - i);
			size_t j = nl ? (size_t)(nl - buf) : (size_t)n;

			if (!overlong && j - i <= PATH_MAX - ll) {
				memcpy(line + ll, buf + i, j - i);
				ll += j - i;
			} else {
				overlong = 1;
			}
			i = j;
			if (nl) {
				if (!overlong) {
					nlines++;
					err = ia->line(ia, line, ll);
				}
				ll = 0;
				overlong = 0;
				i++;
			}
		}
	}
	if (err == 0 && ll && !overlong) {
		nlines++;
		err = ia->line(ia, line, ll);
	}
	atomic_fetch_add_explicit(&index_lines, nlines, memory_order_relaxed);
out:
	free(buf);
	free(line);
	return err;
}

static void *build_thread(void *arg)
{
	struct index_ahead *ia = arg;

	for (;;) {
		unsigned k = atomic_fetch_add(&ia->next, 1);
		struct shardidx *ix;
		struct cachetier_obj *stream;

		if (k >= ia->n)
			break;
		if (ia->stop && ia->stop->asked(ia->stop->arg)) {
			atomic_store(&ia->next, ia->n); /* the others stop too */
			break;
		}
		/* no fs_shard_request_begin: the publishing thread's request
		 * is its own, and a builder thread is in none (its checks are
		 * never skipped) */
		(void)fs_shard_index(ia->fs, ia->shard[k], &ix, &stream); /* errors: below */
		ia->fs->c.plan_index_done++;
	}
	return NULL;
}

/* Threads for n builds: at most PLAN_INDEX_THREADS and --connections, and
 * so many that their readahead windows fit in half of the cache. */
static unsigned build_threads(struct fs *fs, uint32_t n)
{
	struct cachetier_stats cs;
	uint64_t win = cachetier_readahead_max(fs->ct), fit;
	unsigned t = PLAN_INDEX_THREADS;

	cachetier_get_stats(fs->ct, &cs);
	if (fs->cfg.be.connections && fs->cfg.be.connections < t)
		t = fs->cfg.be.connections;
	fit = win ? cs.bytes_limit / 2 / win : t;
	if (fit < t)
		t = fit ? (unsigned)fit : 1;
	return n < t ? (unsigned)n : t;
}

int fs_plan__index_ahead(struct fs *fs, int fd, const struct fs_op_stop *stop)
{
	struct index_ahead ia = {.fs = fs, .stop = stop};
	pthread_t th[PLAN_INDEX_THREADS];
	uint32_t nshards = atomic_load(&fs->nshards);
	unsigned nt, started = 0;
	int err;

	if (nshards == 0 || all_loaded(fs, nshards))
		return 0; /* nothing to note: fd is still at its start */
	ia.line = fs->cfg.layout == FS_LAYOUT_IMAGEFOLDER ? line_if_shard : line_shard;
	ia.nseen = nshards;
	ia.seen = calloc((ia.nseen + 7) / 8, 1);
	if (!ia.seen)
		return -ENOMEM;
	err = scan_file(&ia, fd);
	if (lseek(fd, 0, SEEK_SET) < 0)
		err = -errno; /* the resolving pass cannot read from the start */
	else if (err == -ENOMEM)
		err = 0; /* what was noted is built: the rest as before */
	if (err < 0 || ia.n == 0)
		goto out;
	fs->c.plan_index_wanted += ia.n;
	nt = build_threads(fs, ia.n);
	for (unsigned i = 1; i < nt; i++) /* this thread is the first */
		if (pthread_create(&th[started], NULL, build_thread, &ia) == 0)
			started++;
	build_thread(&ia);
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	/* shards no thread got to (a stop): never counted done */
	if (stop && stop->asked(stop->arg))
		err = -EINTR;
out:
	free(ia.shard);
	free(ia.seen);
	return err;
}
