/*
 * disk_lock.h — ranked mutexes: the daemon's lock order in one place
 * (docs/architecture.md, "Lock order"), checked.
 *
 * Each ranked mutex has a rank from enum disk_lock_rank; a thread may take
 * a ranked mutex only while every ranked mutex it holds has a lower rank
 * (outer locks first). Built with assertions (no NDEBUG: the default and
 * every test build), each thread keeps the ranks it holds and an
 * acquisition out of order aborts with both ranks named; without, the
 * wrapper is a plain mutex. Locks not converted yet are listed in the doc
 * with the rank they would take.
 *
 * Any module may include it (disk/ is the bottom module; it needs only
 * pthreads and libc).
 */
#ifndef DISK_LOCK_H
#define DISK_LOCK_H

#include <pthread.h>

/* The ranks, outer first. Gaps leave room for the locks still to convert. */
enum disk_lock_rank {
	DISK_LOCK_NS_REFRESH = 10,   /* fs/core: the namespace's refresh_lock */
	DISK_LOCK_LIDX = 20,	     /* fs/core: the loader index's lock (a document's build) */
	DISK_LOCK_IMAGEFOLDER = 30,  /* fs/core: the imagefolder view's lock */
	DISK_LOCK_PLAN_USE = 40,     /* fs/core: struct fs_plans' use_lock */
	DISK_LOCK_SHARD = 50,	     /* fs/core: a shard's lock (its loading) */
	DISK_LOCK_OBJ = 55,	     /* fs/core: an object's lock (raw, learning its info) */
	DISK_LOCK_FETCH_STREAM = 90, /* fetch/: a stripe of the stream table (a leaf) */
	DISK_LOCK_CTL = 92,	     /* fs/core: the control files' lock (a leaf) */
	DISK_LOCK_IF_BUILD = 93,     /* fs/core: an imagefolder build's items (a leaf) */
	DISK_LOCK_NOTIFY = 94,	     /* fs/core: the notifier's queue (then a thread's) */
	DISK_LOCK_THREAD = 96,	     /* fs/core: a struct fs_thread's stop and wake (a leaf) */
};

struct disk_mutex {
	pthread_mutex_t m;
	int rank;
};

void disk_mutex_init(struct disk_mutex *l, enum disk_lock_rank rank);
void disk_mutex_destroy(struct disk_mutex *l);
/* Take l: aborts (assertion builds) when the thread holds a ranked mutex
 * of rank >= l's. */
void disk_mutex_lock(struct disk_mutex *l);
void disk_mutex_unlock(struct disk_mutex *l);
/* Ranked mutexes the calling thread holds now (assertion builds; 0
 * without). */
unsigned disk_locks_held(void);

#endif
