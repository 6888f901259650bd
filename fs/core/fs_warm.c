/*
 * fs_warm.c — warming the cache at mount (--warm): when a remote dataset
 * (every object of the source, shards and plain files) fits in the cache
 * with room to spare (auto), or when asked (all), the whole dataset is
 * fetched in the background, so that a training job's first epoch reads
 * from the cache.
 *
 * It is the fetch scheduler's whole-object fill, not a mechanism of its
 * own: one thread hands every object to fetch_obj_fill in listing order
 * and then follows the progress. The scheduler's rules (fetch_rules.c)
 * serve demand reads first, readahead second and prefetch last; an object
 * a reader reads moves to the front of the prefetch order; prefetch fills
 * claim chunks through the same path as reads, so mounts sharing a cache
 * directory fetch each chunk once. The warm uses fetch_obj_fill (CACHETIER_PF_FIT): it fills only
 * the room the cache has and never evicts, so it stops where the cache is full
 * (FS_WARM_STATE_STOPPED) instead of pushing out what readers use or what
 * it warmed itself.
 *
 * Non-goals: objects a refresh adds are not warmed; local sources need no
 * warm (their files are read in place); an offline mount (the store did
 * not answer at mount) does not warm.
 *
 * Threads: the warm thread, and stats readers calling fs_warm_progress
 * (any thread). Object flags are atomics; so is the state below but for
 * on (set before the thread starts) and the thread's own (fs_thread.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_i.h"

/* The warm's state (fs_warm.h): fs->warm, from fs_open to fs_close. */
struct fs_warm {
	int on;		     /* a warm fill runs or ran; set before its thread starts */
	atomic_int listed;   /* every object of it was handed to the cache tier */
	atomic_int state;    /* enum fs_warm_state once it ended; 0 before */
	atomic_int declined; /* a brace pattern's warm decided not to warm once
			      * the sizes were known (stats: off) */
	struct fs_thread thread;
};

int fs_warm_new(struct fs_warm **w)
{
	*w = calloc(1, sizeof(**w));
	if (!*w)
		return -ENOMEM;
	fs_thread_init(&(*w)->thread, "warm", "shardfs-warm");
	return 0;
}

void fs_warm_free(struct fs_warm *w)
{
	if (!w)
		return;
	fs_thread_destroy(&w->thread);
	free(w);
}

/* how often the thread looks at the progress once everything is handed
 * over (it only logs the end; stats compute the progress themselves) */
#define WARM_POLL_NS 250000000L

uint64_t fs_cache_room(struct fs *fs)
{
	struct cachetier_stats cs;
	uint64_t avail, reserve, room;

	memset(&cs, 0, sizeof(cs));
	cachetier_get_stats(fs->ct, &cs);
	room = cs.bytes_limit > cs.bytes_used ? cs.bytes_limit - cs.bytes_used : 0;
	if (cachetier_disk(fs->ct, &avail, &reserve) == 0) {
		uint64_t disk = avail > reserve ? avail - reserve : 0;

		if (disk < room)
			room = disk;
	}
	return room;
}

/* Sum the progress of the objects marked for the warm; *running: a
 * prefetch of one of them still runs. */
static void warm_scan(struct fs *fs, struct fs_warm_progress *p, int *running)
{
	memset(p, 0, sizeof(*p));
	*running = 0;
	for (uint32_t i = 0; i < fs->nobjs; i++) {
		struct fs_obj *o = fs_obj(fs, i);
		struct cachetier_obj *raw;
		uint64_t unfit = 0;

		if (!atomic_load(&o->warm) || !fs_obj_live(o))
			continue;
		p->wanted += fs_obj_size(o);
		disk_mutex_lock(&o->lock);
		raw = o->raw;
		disk_mutex_unlock(&o->lock);
		if (!raw)
			continue; /* not handed over yet */
		p->done += cachetier_obj_cached_bytes(raw);
		*running |= cachetier_obj_prefetch_state(raw, &unfit);
		p->unfit += unfit;
	}
}

void fs_warm_progress(struct fs *fs, struct fs_warm_progress *p)
{
	int running, state;

	if (!fs->warm->on || atomic_load(&fs->warm->declined)) {
		memset(p, 0, sizeof(*p));
		return;
	}
	warm_scan(fs, p, &running);
	state = atomic_load(&fs->warm->state);
	p->state = state ? (unsigned)state : FS_WARM_STATE_RUNNING;
}

/* --warm all, every object handed over: warn when what of the dataset is
 * not cached yet is more than the cache's room. Fills landing meanwhile
 * take as much from the first as from the second (the warm never evicts),
 * so the comparison does not depend on when it is made. Before, the whole
 * dataset was compared with the room at the decision, and a dataset cached
 * whole by an earlier mount was said "larger than the cache's room". */
static void warm_room_check(struct fs *fs, const struct fs_warm_progress *p)
{
	uint64_t room = fs_cache_room(fs), left = p->wanted > p->done ? p->wanted - p->done : 0;
	char left_s[32], total_s[32], room_s[32], limit_s[32];

	if (fs->cfg.warm != FS_WARM_ALL || left <= room)
		return;
	fs_human_bytes(left, left_s, sizeof(left_s));
	fs_human_bytes(p->wanted, total_s, sizeof(total_s));
	fs_human_bytes(room, room_s, sizeof(room_s));
	fs_human_bytes(fs->cfg.cache_size_bytes, limit_s, sizeof(limit_s));
	fs_log(FS_LOG_WARN,
	       "warm: what is not cached of the dataset (%s of %s) is larger than the cache's "
	       "room (%s, --cache-size %s): warming what fits; the warm never evicts, so it stops "
	       "at the limit",
	       left_s, total_s, room_s, limit_s);
}

static void *warm_main(void *arg)
{
	struct fs *fs = arg;
	uint32_t n = fs->nobjs;
	struct timespec t0, t1;
	uint64_t failed = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* every object is handed to the cache tier in listing order (opening
	 * an object touches only the cache directory) and counts in
	 * warm_bytes_wanted from then on: wanted reaches the dataset's size
	 * once all are in the cache tier's prefetch order */
	for (uint32_t i = 0; i < n && !fs_thread_stopping(&fs->warm->thread); i++) {
		struct fs_obj *o = fs_obj(fs, i);
		struct cachetier_obj *raw;

		if (!fs_obj_live(o) || atomic_load(&o->known) == FS_INFO_MISSING)
			continue;
		if (fs_obj_raw(fs, i, &raw) < 0 || fetch_obj_fill(fs->fetch, raw, 0) < 0) {
			failed++; /* fs_obj_raw logged why */
			continue;
		}
		atomic_store(&o->warm, 1);
	}
	atomic_store(&fs->warm->listed, 1);
	{
		struct fs_warm_progress p;
		int running;

		warm_scan(fs, &p, &running);
		warm_room_check(fs, &p);
	}
	while (!fs_thread_wait(&fs->warm->thread, WARM_POLL_NS)) {
		struct fs_warm_progress p;
		char done_s[32], want_s[32], unfit_s[32], size_s[32];
		double secs;
		int running;

		warm_scan(fs, &p, &running);
		if (running)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		fs_human_bytes(p.done, done_s, sizeof(done_s));
		fs_human_bytes(p.wanted, want_s, sizeof(want_s));
		fs_human_bytes(p.unfit, unfit_s, sizeof(unfit_s));
		fs_human_bytes(fs->cfg.cache_size_bytes, size_s, sizeof(size_s));
		if (p.done >= p.wanted) {
			atomic_store(&fs->warm->state, FS_WARM_STATE_DONE);
			fs_log(FS_LOG_INFO, "warm: done: %s of %s cached in %.1f s", done_s, want_s,
			       secs);
		} else {
			atomic_store(&fs->warm->state, FS_WARM_STATE_STOPPED);
			if (p.unfit)
				fs_log(FS_LOG_WARN,
				       "warm: stopped at the cache's limit after %.1f s: %s of %s "
				       "cached, %s did not fit (--cache-size %s; the warm never "
				       "evicts)",
				       secs, done_s, want_s, unfit_s, size_s);
			else
				fs_log(
				    FS_LOG_WARN,
				    "warm: ended after %.1f s with %s of %s cached: fills failed "
				    "(see fill_errors and the log)%s",
				    secs, done_s, want_s,
				    failed ? ", or objects could not be opened" : "");
		}
		break;
	}
	return NULL;
}

/* Whether to warm, from the mode, the dataset's size (of the objects
 * known), the cache's size and the disk's room; logs the decision. */
static int warm_decide(struct fs *fs, int partial)
{
	uint64_t total = fs->total_bytes, limit = fs->cfg.cache_size_bytes;
	char total_s[32], limit_s[32];
	struct cachetier_stats cs;
	uint64_t avail, reserve, disk = 0;

	fs_human_bytes(total, total_s, sizeof(total_s));
	fs_human_bytes(limit, limit_s, sizeof(limit_s));
	if (total == 0)
		return 0;
	memset(&cs, 0, sizeof(cs));
	cachetier_get_stats(fs->ct, &cs);
	if (cachetier_disk(fs->ct, &avail, &reserve) == 0)
		disk = avail > reserve ? avail - reserve : 0;
	if (fs->cfg.warm == FS_WARM_AUTO) {
		/* whether it fits is the scheduler's (fetch_warm_auto_fits) */
		if (!fetch_warm_auto_fits(total, limit, disk, cs.bytes_used)) {
			fs_log(FS_LOG_INFO,
			       "warm: off: the dataset (%s%s) does not fit in %u%% of --cache-size "
			       "%s and the disk's room (--warm all warms what fits)",
			       partial ? "at least " : "", total_s, FETCH_WARM_AUTO_PERCENT,
			       limit_s);
			return 0;
		}
		fs_log(FS_LOG_INFO,
		       "warm: the dataset (%s) fits in the cache (--cache-size %s): "
		       "fetching all of it in the background",
		       total_s, limit_s);
	} else {
		/* whether it fits the room is said once its objects are handed
		 * over (warm_room_check): bytes of it cached already (an earlier
		 * mount's, another mount's of the same source) need no room */
		fs_log(FS_LOG_INFO, "warm: fetching the dataset (%s) in the background", total_s);
	}
	return 1;
}

/* Objects whose sizes are asked for at once while a brace pattern's
 * dataset is sized for the warm. */
#define WARM_LEARN_SLICE 4096u

/* A brace pattern's mount: learn the shards' sizes (many at once), in
 * slices, stopping early once --warm auto's dataset cannot fit; then
 * decide and warm as any mount. Runs on the warm thread: the mount is
 * ready meanwhile, and readers' requests share the connections. */
static void *warm_lazy_main(void *arg)
{
	struct fs *fs = arg;
	uint32_t n = fs->nobjs;
	uint64_t auto_max = fetch_warm_auto_max(fs->cfg.cache_size_bytes);
	uint32_t *objs = malloc(WARM_LEARN_SLICE * sizeof(*objs));
	int partial = 0;

	fs_log(FS_LOG_INFO, "warm: asking the store for the sizes of %u %s of the pattern", n,
	       fs_plural(n, "object", "objects"));
	for (uint32_t i = 0; objs && i < n && !fs_thread_stopping(&fs->warm->thread);
	     i += WARM_LEARN_SLICE) {
		uint32_t m = 0;

		for (uint32_t k = i; k < n && k - i < WARM_LEARN_SLICE; k++)
			if (fs_obj_live(fs_obj(fs, k)))
				objs[m++] = k;
		fs_objs_learn(fs, objs, m);
		if (fs->cfg.warm == FS_WARM_AUTO && fs->total_bytes > auto_max) {
			partial = i + WARM_LEARN_SLICE < n;
			break; /* cannot fit: no need to know the rest */
		}
	}
	free(objs);
	if (fs_thread_stopping(&fs->warm->thread) || !warm_decide(fs, partial)) {
		atomic_store(&fs->warm->declined, 1);
		return NULL;
	}
	return warm_main(fs);
}

void fs_warm_start(struct fs *fs)
{
	if (fs->cfg.warm == FS_WARM_OFF)
		return;
	if (backend_is_local(fs->be)) {
		if (fs->cfg.warm == FS_WARM_ALL)
			fs_log(FS_LOG_INFO, "warm: nothing to do: the source's files are local");
		return;
	}
	if (fs->offline) {
		fs_log(FS_LOG_WARN, "warm: not started: the store did not answer at mount");
		return;
	}
	/* a brace pattern's sizes are not known yet: the thread learns them
	 * first and decides then */
	if (!fs->lazy && !warm_decide(fs, 0))
		return;
	if (fs->lazy && fs->nobjs == 0)
		return;
	fs->warm->on = 1;
	if (fs_thread_start(&fs->warm->thread, fs->lazy ? warm_lazy_main : warm_main, fs) < 0)
		atomic_store(&fs->warm->state, FS_WARM_STATE_STOPPED);
}

void fs_warm_cancel(struct fs *fs)
{
	if (fs->warm) /* NULL: fs_open failed before making it */
		fs_thread_cancel(&fs->warm->thread);
}

int fs_warm_stop(struct fs *fs)
{
	return fs->warm ? fs_thread_stop(&fs->warm->thread) : 0;
}

int fs_warm_running(const struct fs *fs)
{
	return fs->warm->thread.run;
}
