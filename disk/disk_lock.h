/*
 * disk_lock.h — ranked locks: the daemon's lock order in one place
 * (docs/architecture.md, "Lock order"), checked.
 *
 * Each ranked mutex or rwlock has a rank from enum disk_lock_rank; a thread
 * may take a ranked lock only while every ranked lock it holds has a lower
 * rank (outer locks first; two locks of one rank are never held together;
 * the one exception: a read lock again, below).
 * Built with assertions (no NDEBUG: the default and every test build), each
 * thread keeps the locks it holds and an acquisition out of order aborts
 * with both ranks named, as does releasing a lock the thread does not hold
 * and a condition wait on a mutex that is not the thread's innermost;
 * without, the wrappers are plain pthread calls.
 *
 * Any module may include it (disk/ is the bottom module; it needs only
 * pthreads and libc).
 */
#ifndef DISK_LOCK_H
#define DISK_LOCK_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* The ranks, outer first (the table in docs/architecture.md follows it). */
enum disk_lock_rank {
	DISK_LOCK_NS_REFRESH = 10,   /* fs/core: the namespace's refresh_lock */
	DISK_LOCK_LIDX = 20,	     /* fs/core: the loader index's lock (a document's build) */
	DISK_LOCK_IMAGEFOLDER = 30,  /* fs/core: the imagefolder view's lock */
	DISK_LOCK_PLAN_USE = 40,     /* fs/core: struct fs_plans' use_lock (rwlock) */
	DISK_LOCK_PLAN_READING = 41, /* fs/core: struct fs_plans' reading_lock (a leaf) */
	DISK_LOCK_SHARD = 50,	     /* fs/core: a shard's lock (its loading) */
	DISK_LOCK_NS = 52,	     /* fs/core: the namespace's ns_lock (rwlock) */
	DISK_LOCK_OBJ = 55,	     /* fs/core: an object's lock (raw, learning its info) */
	DISK_LOCK_PLANS = 57,	     /* fs/core: struct fs_plans' lock (rwlock: the plans) */
	DISK_LOCK_CT_MAP = 60,	     /* cachetier: a cached object's maplock */
	DISK_LOCK_CT = 62,	     /* cachetier: ct->lock */
	DISK_LOCK_CT_FILE = 63,	 /* cachetier: a cached object's ct_file.lock (its units' pins) */
	DISK_LOCK_CT_FD = 64,	 /* cachetier: ct->fds.fd_lock (local objects' fds) */
	DISK_LOCK_CT_PUNCH = 65, /* cachetier: the puncher's queue (a leaf) */
	DISK_LOCK_CT_WATCH = 66, /* cachetier: the inotify watch's lock (a leaf) */
	DISK_LOCK_CT_ACCT = 67,	 /* cachetier: the byte accounts' lock (a leaf) */
	DISK_LOCK_CT_BPOOL = 68, /* cachetier: the pool of fill buffers (a leaf) */
	DISK_LOCK_BE_CREDS = 70, /* backend: a credentials source's lock */
	DISK_LOCK_BE_ENV = 72,	 /* backend: the secret variables' copies (a leaf) */
	DISK_LOCK_BE_LOCAL = 74, /* backend: the local store's resolve lock (a leaf) */
	DISK_LOCK_BE_ERROR = 76, /* backend: the failures logged (a leaf) */
	DISK_LOCK_BE_QUEUE = 78, /* backend: the I/O loop's request queue (a leaf) */
	DISK_LOCK_BE_WAIT = 80,	 /* backend: a waiter's lock (one request or a batch; a leaf) */
	DISK_LOCK_SIDECAR_GET = 81,  /* fs/core: a sidecar's download a request waits for (a
				      * leaf; the I/O thread copies its pieces in under it) */
	DISK_LOCK_FETCH_STAGE = 89,  /* fetch/: the stage's pieces (a leaf; the I/O thread ends
				      * a staged read under it) */
	DISK_LOCK_FETCH_STREAM = 90, /* fetch/: a stripe of the stream table (a leaf) */
	DISK_LOCK_FETCH_LINK = 91,   /* fetch/: the link meter (a leaf; under the store's lock) */
	DISK_LOCK_CTL = 92,	     /* fs/core: the control files' lock (a leaf) */
	DISK_LOCK_IF_BUILD = 93,     /* fs/core: an imagefolder build's items (a leaf) */
	DISK_LOCK_NOTIFY = 94,	     /* fs/core: the notifier's queue (then a thread's) */
	DISK_LOCK_LEARN = 95,	     /* fs/core: objects being learned (a leaf) */
	DISK_LOCK_THREAD = 96,	     /* fs/core: a struct fs_thread's stop and wake (a leaf) */
	DISK_LOCK_BUILT = 97,	     /* fs/core: the shards' index builds under way (a leaf) */
	DISK_LOCK_FUSE_STOP = 98,    /* fs/fuse: the stop thread's lock (a leaf) */
};

/* The I/O loop's thread (backend_io_loop.c marks itself with
 * disk_loop_thread) only moves bytes: with assertions, it aborts when it
 * takes a ranked lock below DISK_LOCK_LOOP_MIN (every lock of the store but
 * its buffer pool's, and every lock of the core) and when it calls into the
 * disk (DISK_OFF_LOOP, in disk_pwrite_all, disk_write_atomic,
 * disk_crc32c_update; the store's CT_OFF_LOOP). */
#define DISK_LOCK_LOOP_MIN DISK_LOCK_CT_BPOOL
void disk_loop_thread(void);
/* 1 on the thread disk_loop_thread marked (assertion builds; else 0). */
int disk_on_loop(void);
#define DISK_OFF_LOOP() assert(!disk_on_loop())

/* A mutex with its rank, and what waiting for it cost: waits counts the
 * takes that found it held by another thread (counted before they block),
 * wait_ns the time they blocked (in every build: one trylock first, a
 * clock read only when it is held). */
struct disk_mutex {
	pthread_mutex_t m;
	int rank;
	_Atomic unsigned long long waits, wait_ns;
};

/* A static mutex of rank r (for the one process-wide lock that has one). */
#define DISK_MUTEX_INITIALIZER(r)                                                                  \
	{                                                                                          \
		PTHREAD_MUTEX_INITIALIZER, (r), 0, 0                                               \
	}

struct disk_rwlock {
	pthread_rwlock_t l;
	int rank;
};

void disk_mutex_init(struct disk_mutex *l, enum disk_lock_rank rank);
void disk_mutex_destroy(struct disk_mutex *l);
/* Take l: aborts (assertion builds) when the thread holds a ranked lock
 * of rank >= l's. Returns 1 when the take found l held by another thread
 * (counted in its waits), else 0. */
int disk_mutex_lock(struct disk_mutex *l);
/* Release l: aborts (assertion builds) when the thread does not hold it. */
void disk_mutex_unlock(struct disk_mutex *l);
/* Take l again after a wait on another lock (a reader that waited on its
 * cached object's lock for ct->lock's units, cachetier_run.c): ranked as
 * disk_mutex_lock, but a take that finds l held is not counted in l's
 * waits, as a condition wait's own take again (disk_cond_wait) never is:
 * l's waits stay the contention of its takes, whichever way a wait ends. */
void disk_mutex_relock(struct disk_mutex *l);
/* The takes of l that waited for another thread, and the nanoseconds
 * they waited in all, since its init. */
void disk_mutex_waits(const struct disk_mutex *l, unsigned long long *waits,
		      unsigned long long *wait_ns);

/* Wait on c, releasing l, as pthread_cond_(timed)wait. l must be held and
 * rank highest of the locks the thread holds (a lock of a higher rank would
 * be held across the wait, and l taken again under it: aborts otherwise).
 * The thread's held locks are the same on return. abstime is on c's clock;
 * returns pthread_cond_timedwait's result (0 or ETIMEDOUT). */
void disk_cond_wait(pthread_cond_t *c, struct disk_mutex *l);
int disk_cond_timedwait(pthread_cond_t *c, struct disk_mutex *l, const struct timespec *abstime);

void disk_rwlock_init(struct disk_rwlock *l, enum disk_lock_rank rank);
void disk_rwlock_destroy(struct disk_rwlock *l);
/* Shared or exclusive; both check the rank as disk_mutex_lock does, but
 * for a read lock taken again by a thread that holds it shared (readers
 * are preferred: that cannot block, whatever the thread holds). */
void disk_rwlock_rdlock(struct disk_rwlock *l);
void disk_rwlock_wrlock(struct disk_rwlock *l);
void disk_rwlock_unlock(struct disk_rwlock *l);

/* 1 when the calling thread holds l (assertion builds; always 1 without:
 * for assert only). */
int disk_mutex_held(const struct disk_mutex *l);

/* Ranked locks the calling thread holds now (assertion builds; 0
 * without). */
unsigned disk_locks_held(void);

#endif
