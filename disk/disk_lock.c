/*
 * disk_lock.c — ranked mutexes (disk_lock.h): with assertions, a per-thread
 * stack of the ranks held, checked at every acquisition.
 */
#include <stdio.h>
#include <stdlib.h>

#include "disk_lock.h"

#ifndef NDEBUG
/* Deeper than any path of the daemon nests its locks. */
#define HELD_MAX 16
static __thread int held[HELD_MAX];
static __thread unsigned nheld;
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
#ifndef NDEBUG
	if (nheld > 0 && held[nheld - 1] >= l->rank) {
		fprintf(stderr,
			"lock order: a lock of rank %d taken while holding one of rank %d "
			"(docs/architecture.md, Lock order)\n",
			l->rank, held[nheld - 1]);
		abort();
	}
	if (nheld == HELD_MAX) {
		fprintf(stderr, "lock order: more than %d ranked locks held\n", HELD_MAX);
		abort();
	}
#endif
	pthread_mutex_lock(&l->m);
#ifndef NDEBUG
	held[nheld++] = l->rank;
#endif
}

void disk_mutex_unlock(struct disk_mutex *l)
{
#ifndef NDEBUG
	/* locks go in any order: drop this rank's latest entry */
	for (unsigned i = nheld; i-- > 0;) {
		if (held[i] == l->rank) {
			for (unsigned k = i; k + 1 < nheld; k++)
				held[k] = held[k + 1];
			nheld--;
			break;
		}
	}
#endif
	pthread_mutex_unlock(&l->m);
}

unsigned disk_locks_held(void)
{
#ifndef NDEBUG
	return nheld;
#else
	return 0;
#endif
}
