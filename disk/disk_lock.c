/*
 * disk_lock.c — ranked locks (disk_lock.h): with assertions, a per-thread
 * stack of the locks held (address and rank), checked at every
 * acquisition, release and condition wait.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "disk_lock.h"

#ifndef NDEBUG
/* Deeper than any path of the daemon nests its locks. */
#define HELD_MAX 16
static __thread struct held {
	const void *lock;
	int rank;
	int read; /* an rwlock held shared */
} held[HELD_MAX];
static __thread unsigned nheld;

static void order_fail(const char *what, int rank, int other)
{
	fprintf(stderr,
		"lock order: %s: rank %d (holding rank %d) (docs/architecture.md, Lock order)\n",
		what, rank, other);
	abort();
}

/* The held entry of lock, the latest; NULL: not held. */
static struct held *held_find(const void *lock)
{
	for (unsigned i = nheld; i-- > 0;)
		if (held[i].lock == lock)
			return &held[i];
	return NULL;
}

/* The highest rank held (0: none). */
static int held_max(void)
{
	int max = 0;

	for (unsigned i = 0; i < nheld; i++)
		if (held[i].rank > max)
			max = held[i].rank;
	return max;
}

static void held_room(void)
{
	if (nheld == HELD_MAX) {
		fprintf(stderr, "lock order: more than %d ranked locks held\n", HELD_MAX);
		abort();
	}
}

static __thread int on_loop; /* disk_loop_thread */

/* Before taking lock of rank: every held lock ranks lower; on the I/O
 * loop, only a leaf from DISK_LOCK_LOOP_MIN up. */
static void held_check(const void *lock, int rank)
{
	int max = held_max();

	if (on_loop && rank < DISK_LOCK_LOOP_MIN) {
		fprintf(
		    stderr,
		    "lock order: the I/O loop takes rank %d (it takes only leaves from rank %d: "
		    "it never blocks on the store) (docs/architecture.md, Lock order)\n",
		    rank, DISK_LOCK_LOOP_MIN);
		abort();
	}
	if (max >= rank)
		order_fail(held_find(lock) ? "a lock taken again"
					   : "a lock taken against the order",
			   rank, max);
	held_room();
}

static void held_push(const void *lock, int rank, int read)
{
	held[nheld].lock = lock;
	held[nheld].rank = rank;
	held[nheld].read = read;
	nheld++;
}

/* Locks go in any order: drop lock's latest entry. */
static void held_drop(const void *lock, int rank)
{
	struct held *h = held_find(lock);

	if (!h)
		order_fail("a lock released that this thread does not hold", rank, held_max());
	for (; h + 1 < held + nheld; h++)
		h[0] = h[1];
	nheld--;
}

/* A wait on l releases it and takes it again: l must be held, and no lock
 * held of a higher rank (it would be held across the wait and l taken
 * again under it). */
static void wait_check(const struct disk_mutex *l)
{
	if (!held_find(l) || held_max() > l->rank)
		order_fail("a condition wait on a lock that is not the innermost held", l->rank,
			   held_max());
}
#else
#define held_check(lock, rank)	    ((void)0)
#define held_push(lock, rank, read) ((void)0)
#define held_drop(lock, rank)	    ((void)0)
#define wait_check(l)		    ((void)0)
#endif

void disk_mutex_init(struct disk_mutex *l, enum disk_lock_rank rank)
{
	pthread_mutex_init(&l->m, NULL);
	l->rank = (int)rank;
	atomic_init(&l->waits, 0);
	atomic_init(&l->wait_ns, 0);
}

void disk_mutex_destroy(struct disk_mutex *l)
{
	pthread_mutex_destroy(&l->m);
}

int disk_mutex_lock(struct disk_mutex *l)
{
	int busy = 0;

	held_check(l, l->rank);
	if (pthread_mutex_trylock(&l->m) != 0) {
		struct timespec t0, t1;

		/* counted before it blocks: a test can see the waiter */
		atomic_fetch_add_explicit(&l->waits, 1, memory_order_relaxed);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		pthread_mutex_lock(&l->m);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		atomic_fetch_add_explicit(
		    &l->wait_ns,
		    (unsigned long long)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
					 (t1.tv_nsec - t0.tv_nsec)),
		    memory_order_relaxed);
		busy = 1;
	}
	held_push(l, l->rank, 0);
	return busy;
}

void disk_mutex_relock(struct disk_mutex *l)
{
	held_check(l, l->rank);
	pthread_mutex_lock(&l->m);
	held_push(l, l->rank, 0);
}

void disk_mutex_waits(const struct disk_mutex *l, unsigned long long *waits,
		      unsigned long long *wait_ns)
{
	*waits = atomic_load_explicit(&l->waits, memory_order_relaxed);
	*wait_ns = atomic_load_explicit(&l->wait_ns, memory_order_relaxed);
}

void disk_mutex_unlock(struct disk_mutex *l)
{
	held_drop(l, l->rank);
	pthread_mutex_unlock(&l->m);
}

/* The entry for l stays on the stack across the wait: l is the innermost
 * lock, so nothing is taken or released meanwhile by this thread, and l is
 * held again on return. */
void disk_cond_wait(pthread_cond_t *c, struct disk_mutex *l)
{
	wait_check(l);
	pthread_cond_wait(c, &l->m);
}

int disk_cond_timedwait(pthread_cond_t *c, struct disk_mutex *l, const struct timespec *abstime)
{
	wait_check(l);
	return pthread_cond_timedwait(c, &l->m, abstime);
}

void disk_rwlock_init(struct disk_rwlock *l, enum disk_lock_rank rank)
{
	pthread_rwlockattr_t ra;

	/* a reader never waits behind a waiting writer: a read lock taken
	 * again by its holder cannot block (disk_rwlock_rdlock) */
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_READER_NP);
	pthread_rwlock_init(&l->l, &ra);
	pthread_rwlockattr_destroy(&ra);
	l->rank = (int)rank;
}

void disk_rwlock_destroy(struct disk_rwlock *l)
{
	pthread_rwlock_destroy(&l->l);
}

void disk_rwlock_rdlock(struct disk_rwlock *l)
{
#ifndef NDEBUG
	const struct held *h = held_find(l);

	/* held shared already: no writer holds it and readers are preferred,
	 * so this cannot block, whatever else is held */
	if (h && h->read)
		held_room();
	else
		held_check(l, l->rank);
#endif
	pthread_rwlock_rdlock(&l->l);
	held_push(l, l->rank, 1);
}

void disk_rwlock_wrlock(struct disk_rwlock *l)
{
	held_check(l, l->rank);
	pthread_rwlock_wrlock(&l->l);
	held_push(l, l->rank, 0);
}

void disk_rwlock_unlock(struct disk_rwlock *l)
{
	held_drop(l, l->rank);
	pthread_rwlock_unlock(&l->l);
}

void disk_loop_thread(void)
{
#ifndef NDEBUG
	on_loop = 1;
#endif
}

int disk_on_loop(void)
{
#ifndef NDEBUG
	return on_loop;
#else
	return 0;
#endif
}

int disk_mutex_held(const struct disk_mutex *l)
{
#ifndef NDEBUG
	return held_find(l) != NULL;
#else
	(void)l;
	return 1;
#endif
}

unsigned disk_locks_held(void)
{
#ifndef NDEBUG
	return nheld;
#else
	return 0;
#endif
}
