/*
 * disk_lock.c — ranked locks (disk_lock.h): with assertions, a per-thread
 * stack of the locks held (address and rank), checked at every
 * acquisition, release and condition wait.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "disk_lock.h"

#ifndef NDEBUG
/* Deeper than any path of the daemon nests its locks. */
#define HELD_MAX 16
static __thread struct held {
	const void *lock;
	int rank;
} held[HELD_MAX];
static __thread unsigned nheld;

static void order_fail(const char *what, int rank, int other)
{
	fprintf(stderr,
		"lock order: %s: rank %d (holding rank %d) (docs/architecture.md, Lock order)\n",
		what, rank, other);
	abort();
}

/* Before taking lock of rank: every held lock ranks lower. Held ranks
 * rise along the stack (each was checked so), so the top says it. */
static void held_check(const void *lock, int rank)
{
	if (nheld > 0 && held[nheld - 1].rank >= rank)
		order_fail(held[nheld - 1].lock == lock ? "a lock taken again"
							: "a lock taken against the order",
			   rank, held[nheld - 1].rank);
	if (nheld == HELD_MAX) {
		fprintf(stderr, "lock order: more than %d ranked locks held\n", HELD_MAX);
		abort();
	}
}

static void held_push(const void *lock, int rank)
{
	held[nheld].lock = lock;
	held[nheld].rank = rank;
	nheld++;
}

/* Locks go in any order: drop lock's entry. */
static void held_drop(const void *lock, int rank)
{
	for (unsigned i = nheld; i-- > 0;) {
		if (held[i].lock == lock) {
			for (unsigned k = i; k + 1 < nheld; k++)
				held[k] = held[k + 1];
			nheld--;
			return;
		}
	}
	order_fail("a lock released that this thread does not hold", rank,
		   nheld ? held[nheld - 1].rank : 0);
}

static void wait_check(const struct disk_mutex *l)
{
	if (nheld == 0 || held[nheld - 1].lock != l)
		order_fail("a condition wait on a lock that is not the innermost held", l->rank,
			   nheld ? held[nheld - 1].rank : 0);
}
#else
#define held_check(lock, rank) ((void)0)
#define held_push(lock, rank)  ((void)0)
#define held_drop(lock, rank)  ((void)0)
#define wait_check(l)	       ((void)0)
#endif

void disk_mutex_init(struct disk_mutex *l, enum disk_lock_rank rank)
{
	pthread_mutex_init(&l->m, NULL);
	l->rank = (int)rank;
}

void disk_mutex_destroy(struct disk_mutex *l)
{
	pthread_mutex_destroy(&l->m);
}

void disk_mutex_lock(struct disk_mutex *l)
{
	held_check(l, l->rank);
	pthread_mutex_lock(&l->m);
	held_push(l, l->rank);
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
	pthread_rwlock_init(&l->l, NULL);
	l->rank = (int)rank;
}

void disk_rwlock_destroy(struct disk_rwlock *l)
{
	pthread_rwlock_destroy(&l->l);
}

void disk_rwlock_rdlock(struct disk_rwlock *l)
{
	held_check(l, l->rank);
	pthread_rwlock_rdlock(&l->l);
	held_push(l, l->rank);
}

void disk_rwlock_wrlock(struct disk_rwlock *l)
{
	held_check(l, l->rank);
	pthread_rwlock_wrlock(&l->l);
	held_push(l, l->rank);
}

void disk_rwlock_unlock(struct disk_rwlock *l)
{
	held_drop(l, l->rank);
	pthread_rwlock_unlock(&l->l);
}

unsigned disk_locks_held(void)
{
#ifndef NDEBUG
	return nheld;
#else
	return 0;
#endif
}
