/*
 * test_disk_lock.c — ranked locks (disk/disk_lock.h): what the order check
 * lets through and what it stops. Every forbidden step is taken in a forked
 * child, which must die of SIGABRT with the message naming both ranks
 * (exact text); every allowed step is taken in this process, with the
 * count of held locks checked after each. The I/O loop's thread
 * (disk_loop_thread) takes no lock below the leaves and never writes a file
 * or checksums (DISK_OFF_LOOP). Assertion builds only (every
 * test build); under NDEBUG the test is skipped (exit 77).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "disk.h"
#include "disk_lock.h"

#ifndef NDEBUG
/* Ranks from the daemon's table, outer first: a < b < c < d. */
static struct disk_mutex a, b, c, d, b2;
static struct disk_rwlock rw; /* between a and b */
/* The cache tier's: an object's maplock, ct->lock (c), two objects' own
 * locks (ct_file.lock, after ct->lock), the local fds' lock. */
static struct disk_mutex map, f1, f2, fd;

/* Run step in a child; it must die of SIGABRT having said want on stderr. */
static void dies(const char *name, void (*step)(void), const char *want)
{
	char buf[512];
	size_t len = 0;
	int fds[2], status = 0;
	pid_t pid;

	fflush(NULL);
	if (pipe(fds) != 0)
		FAIL("%s", "pipe");
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], STDERR_FILENO);
		step();
		_exit(0); /* the step was let through */
	}
	close(fds[1]);
	for (ssize_t n;
	     len < sizeof(buf) - 1 && (n = read(fds[0], buf + len, sizeof(buf) - 1 - len)) > 0;)
		len += (size_t)n;
	buf[len] = '\0';
	close(fds[0]);
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
		  WTERMSIG(status) == SIGABRT,
	      "%s: aborts (status %d)", name, status);
	CHECK(strstr(buf, want) != NULL, "%s: says \"%s\" (said \"%s\")", name, want, buf);
}

static void step_against(void)
{
	disk_mutex_lock(&c);
	disk_mutex_lock(&a);
}

static void step_same_rank(void)
{
	disk_mutex_lock(&b);
	disk_mutex_lock(&b2);
}

static void step_again(void)
{
	disk_mutex_lock(&b);
	disk_mutex_lock(&b);
}

static void step_unlock_unheld(void)
{
	disk_mutex_lock(&a);
	disk_mutex_unlock(&b);
}

static void step_rw_against(void)
{
	disk_mutex_lock(&b);
	disk_rwlock_rdlock(&rw);
}

static void step_wr_against(void)
{
	disk_mutex_lock(&b);
	disk_rwlock_wrlock(&rw);
}

static void step_rd_under_wr(void)
{
	disk_rwlock_wrlock(&rw);
	disk_rwlock_rdlock(&rw); /* would deadlock */
}

static void step_wait_not_innermost(void)
{
	static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct timespec past = {1, 0}; /* long past: would return at once */

	disk_mutex_lock(&b);
	disk_mutex_lock(&c);
	disk_cond_timedwait(&cond, &b, &past); /* c held across it; b retaken under c */
}

static void step_wait_unheld(void)
{
	static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct timespec past = {1, 0};

	disk_mutex_lock(&a);
	disk_cond_timedwait(&cond, &b, &past);
}

/* After a wait the stack is as before it: c is held still. */
static void step_after_wait(void)
{
	static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct timespec past = {1, 0};

	disk_mutex_lock(&a);
	disk_mutex_lock(&c);
	(void)disk_cond_timedwait(&cond, &c, &past);
	disk_mutex_lock(&b);
}

/* The I/O loop (disk_loop_thread): the store's lock, a file write, a CRC. */
static void step_loop_lock(void)
{
	disk_loop_thread();
	disk_mutex_lock(&d); /* a leaf: let through */
	disk_mutex_unlock(&d);
	disk_mutex_lock(&c);
}

static void step_loop_pwrite(void)
{
	char byte = 0;

	disk_loop_thread();
	(void)disk_pwrite_all(STDOUT_FILENO, &byte, 1, 0);
}

static void step_loop_crc(void)
{
	disk_loop_thread();
	(void)disk_crc32c_update(0, "x", 1);
}

/* The tier's lock under an object's lock (a read's end holds the object's
 * alone; whatever needs the tier's then lets the object's go first). */
static void step_ct_under_file(void)
{
	disk_mutex_lock(&f1);
	disk_mutex_lock(&c);
}

/* Two objects' locks at once (an eviction takes its victim's only). */
static void step_two_files(void)
{
	disk_mutex_lock(&c);
	disk_mutex_lock(&f1);
	disk_mutex_lock(&f2);
}

/* A wait for units (on ct->lock) with an object's lock held. */
static void step_wait_file_held(void)
{
	static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
	struct timespec past = {1, 0};

	disk_mutex_lock(&c);
	disk_mutex_lock(&f1);
	disk_cond_timedwait(&cond, &c, &past);
}

static void test_forbidden(void)
{
	dies("the tier's lock under an object's", step_ct_under_file,
	     "a lock taken against the order: rank 62 (holding rank 63)");
	dies("two objects' locks", step_two_files,
	     "a lock taken against the order: rank 63 (holding rank 63)");
	dies("a wait on the tier's lock holding an object's", step_wait_file_held,
	     "a condition wait on a lock that is not the innermost held: rank 62 (holding rank "
	     "63)");
	dies("against the order", step_against,
	     "a lock taken against the order: rank 40 (holding rank 62)");
	dies("two of one rank", step_same_rank,
	     "a lock taken against the order: rank 55 (holding rank 55)");
	dies("one lock twice", step_again, "a lock taken again: rank 55 (holding rank 55)");
	dies("release unheld", step_unlock_unheld,
	     "a lock released that this thread does not hold: rank 55 (holding rank 40)");
	dies("read lock against the order", step_rw_against,
	     "a lock taken against the order: rank 52 (holding rank 55)");
	dies("write lock against the order", step_wr_against,
	     "a lock taken against the order: rank 52 (holding rank 55)");
	dies("read under own write", step_rd_under_wr,
	     "a lock taken again: rank 52 (holding rank 52)");
	dies(
	    "wait not innermost", step_wait_not_innermost,
	    "a condition wait on a lock that is not the innermost held: rank 55 (holding rank 62)");
	dies(
	    "wait unheld", step_wait_unheld,
	    "a condition wait on a lock that is not the innermost held: rank 55 (holding rank 40)");
	dies("order after a wait", step_after_wait,
	     "a lock taken against the order: rank 55 (holding rank 62)");
	dies("the I/O loop takes the store's lock", step_loop_lock,
	     "the I/O loop takes rank 62 (it takes only leaves from rank 68");
	dies("the I/O loop writes a file", step_loop_pwrite, "Assertion `!disk_on_loop()' failed");
	dies("the I/O loop checksums", step_loop_crc, "Assertion `!disk_on_loop()' failed");
}

static void test_allowed(void)
{
	disk_mutex_lock(&a);
	disk_rwlock_rdlock(&rw);
	disk_mutex_lock(&b);
	disk_mutex_lock(&d);
	CHECK(disk_locks_held() == 4, "in order: %u held", disk_locks_held());
	disk_mutex_unlock(&a); /* released out of order: allowed */
	disk_mutex_unlock(&d);
	disk_mutex_lock(&c); /* after b, d gone */
	CHECK(disk_locks_held() == 3, "after releases: %u held", disk_locks_held());
	/* a read lock again under locks of higher rank: cannot block */
	disk_rwlock_rdlock(&rw);
	CHECK(disk_locks_held() == 4, "read again: %u held", disk_locks_held());
	disk_rwlock_unlock(&rw);
	disk_rwlock_unlock(&rw);
	disk_mutex_unlock(&c);
	disk_mutex_unlock(&b);
	CHECK(disk_locks_held() == 0, "all released: %u held", disk_locks_held());
	disk_rwlock_wrlock(&rw);
	disk_mutex_lock(&b);
	disk_mutex_unlock(&b);
	disk_rwlock_unlock(&rw);
	CHECK(disk_locks_held() == 0, "write lock released: %u held", disk_locks_held());
	/* the tier's: maplock, ct->lock, an object's lock, the fds' lock; an
	 * object's lock alone (a read's end), then another's */
	disk_mutex_lock(&map);
	disk_mutex_lock(&c);
	disk_mutex_lock(&f1);
	disk_mutex_lock(&fd);
	CHECK(disk_locks_held() == 4, "the tier's in order: %u held", disk_locks_held());
	disk_mutex_unlock(&fd);
	disk_mutex_unlock(&f1);
	disk_mutex_unlock(&c);
	disk_mutex_unlock(&map);
	disk_mutex_lock(&f1);
	disk_mutex_unlock(&f1);
	disk_mutex_lock(&f2);
	disk_mutex_unlock(&f2);
	CHECK(disk_locks_held() == 0, "objects' locks released: %u held", disk_locks_held());
}

/* A condition wait releases and retakes its mutex: another thread takes it
 * meanwhile, and the waiter holds the same locks on return. */
static pthread_cond_t wcond = PTHREAD_COND_INITIALIZER;
static int flag;

static void *signaller(void *arg)
{
	(void)arg;
	disk_mutex_lock(&c); /* only while the waiter waits */
	flag = 1;
	pthread_cond_signal(&wcond);
	disk_mutex_unlock(&c);
	return NULL;
}

/* The contention counter (disk_mutex_waits): a take that finds the mutex
 * held by another thread is counted before it blocks, so this thread,
 * holding it, sees the waiter (a condition, bounded by a guard) before it
 * lets go; a take of a free mutex counts nothing. */
static struct disk_mutex cw;

static void *cw_taker(void *arg)
{
	(void)arg;
	disk_mutex_lock(&cw);
	disk_mutex_unlock(&cw);
	return NULL;
}

static atomic_int relocking;

static void *cw_relocker(void *arg)
{
	(void)arg;
	atomic_store(&relocking, 1);
	disk_mutex_relock(&cw);
	disk_mutex_unlock(&cw);
	return NULL;
}

static void test_contention(void)
{
	unsigned long long waits = 0, ns = 0;
	pthread_t t;

	disk_mutex_init(&cw, DISK_LOCK_CT);
	disk_mutex_lock(&cw);
	disk_mutex_unlock(&cw);
	disk_mutex_waits(&cw, &waits, &ns);
	CHECK(waits == 0 && ns == 0, "a free mutex: %llu waits, %llu ns", waits, ns);
	disk_mutex_lock(&cw);
	CHECK(pthread_create(&t, NULL, cw_taker, NULL) == 0, "%s", "pthread_create");
	for (int i = 0; i < 600000 && waits == 0; i++) { /* guard: 60 s */
		struct timespec ts = {0, 100 * 1000};

		nanosleep(&ts, NULL);
		disk_mutex_waits(&cw, &waits, &ns);
	}
	disk_mutex_unlock(&cw);
	pthread_join(t, NULL);
	disk_mutex_waits(&cw, &waits, &ns);
	CHECK(waits == 1 && ns > 0,
	      "held by this thread: the other's take waited: %llu waits, "
	      "%llu ns",
	      waits, ns);
	disk_mutex_lock(&cw);
	disk_mutex_unlock(&cw);
	disk_mutex_waits(&cw, &waits, &ns);
	CHECK(waits == 1, "a free mutex again: %llu waits", waits);
	/* disk_mutex_relock: held and ranked as a take, never counted (a take
	 * again after a wait, as a condition wait's own), whether it found the
	 * mutex free or held by this thread until it let go */
	disk_mutex_relock(&cw);
	CHECK(disk_locks_held() == 1, "relock: %u held", disk_locks_held());
	CHECK(pthread_create(&t, NULL, cw_relocker, NULL) == 0, "%s", "pthread_create");
	while (!atomic_load(&relocking))
		sched_yield();
	disk_mutex_unlock(&cw);
	pthread_join(t, NULL);
	disk_mutex_waits(&cw, &waits, &ns);
	CHECK(waits == 1 && disk_locks_held() == 0,
	      "relocks: %llu waits (want 1: none more), %u held", waits, disk_locks_held());
	disk_mutex_destroy(&cw);
}

static void test_wait(void)
{
	struct timespec past = {1, 0};
	pthread_t t;

	disk_mutex_lock(&a);
	disk_mutex_lock(&c);
	CHECK(disk_cond_timedwait(&wcond, &c, &past) == ETIMEDOUT, "%s",
	      "a past deadline times out");
	CHECK(disk_locks_held() == 2, "after a timed out wait: %u held", disk_locks_held());
	CHECK(pthread_create(&t, NULL, signaller, NULL) == 0, "%s", "thread");
	while (!flag)
		disk_cond_wait(&wcond, &c);
	CHECK(disk_locks_held() == 2, "after a wait: %u held", disk_locks_held());
	disk_mutex_lock(&d); /* c is still the top: d may follow */
	disk_mutex_unlock(&d);
	disk_mutex_unlock(&c);
	disk_mutex_unlock(&a);
	pthread_join(t, NULL);
	CHECK(disk_locks_held() == 0, "all released: %u held", disk_locks_held());
}
#endif

int main(void)
{
#ifndef NDEBUG
	disk_mutex_init(&a, DISK_LOCK_PLAN_USE); /* 40 */
	disk_rwlock_init(&rw, DISK_LOCK_NS);	 /* 52 */
	disk_mutex_init(&b, DISK_LOCK_OBJ);	 /* 55 */
	disk_mutex_init(&b2, DISK_LOCK_OBJ);
	disk_mutex_init(&c, DISK_LOCK_CT);	     /* 62 */
	disk_mutex_init(&d, DISK_LOCK_FETCH_STREAM); /* 90 */
	disk_mutex_init(&map, DISK_LOCK_CT_MAP);     /* 60 */
	disk_mutex_init(&f1, DISK_LOCK_CT_FILE);     /* 63 */
	disk_mutex_init(&f2, DISK_LOCK_CT_FILE);
	disk_mutex_init(&fd, DISK_LOCK_CT_FD); /* 64 */
	test_forbidden();
	test_allowed();
	test_wait();
	test_contention();
	return check_summary("disk-lock");
#else
	printf("disk-lock: skipped (NDEBUG: no order check)\n");
	return 77;
#endif
}
