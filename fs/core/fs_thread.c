/*
 * fs_thread.c — the core's background threads (the warm fill, the plan
 * fetcher, the notifier): one helper for starting a thread, waking it,
 * telling it to stop and joining it within a bound (fs_i.h, struct
 * fs_thread).
 *
 * A thread's body polls fs_thread_stopping between steps, or sleeps in
 * fs_thread_wait, which returns at a wake-up, at a stop, or after its
 * timeout. A stop never interrupts a step: each body keeps its steps short
 * (no step waits on the network for longer than the backend's cancel lets
 * it, fs_cancel), so a join takes milliseconds in practice.
 * fs_thread_stop gives up after FS_THREAD_JOIN_S (the thread's join_s) and
 * says so: the caller
 * then keeps everything the thread may still touch (fs_close does).
 *
 * Threads: fs_thread_wake, fs_thread_cancel and fs_thread_stopping from any
 * thread; fs_thread_start, fs_thread_stop and fs_thread_destroy from the
 * owner's (the thread that called fs_open and fs_close) only.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "fs_i.h"

void fs_thread_init(struct fs_thread *t, const char *name, const char *comm)
{
	pthread_condattr_t ca;

	memset(t, 0, sizeof(*t));
	t->name = name;
	t->comm = comm;
	t->join_s = FS_THREAD_JOIN_S;
	disk_mutex_init(&t->lock, DISK_LOCK_THREAD);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cond, &ca);
	pthread_condattr_destroy(&ca);
}

int fs_thread_start(struct fs_thread *t, void *(*fn)(void *), void *arg)
{
	int err = pthread_create(&t->thread, NULL, fn, arg);

	if (err) {
		fs_log(FS_LOG_ERR, "%s: cannot start its thread: %s", t->name, strerror(err));
		return -err;
	}
	pthread_setname_np(t->thread, t->comm); /* top -H, perf */
	t->run = 1;
	return 0;
}

void fs_thread_wake(struct fs_thread *t)
{
	disk_mutex_lock(&t->lock);
	t->wake = 1;
	pthread_cond_broadcast(&t->cond);
	disk_mutex_unlock(&t->lock);
}

void fs_thread_cancel(struct fs_thread *t)
{
	disk_mutex_lock(&t->lock);
	t->stop = 1;
	pthread_cond_broadcast(&t->cond);
	disk_mutex_unlock(&t->lock);
}

int fs_thread_stopping(struct fs_thread *t)
{
	int stop;

	disk_mutex_lock(&t->lock);
	stop = t->stop;
	disk_mutex_unlock(&t->lock);
	return stop;
}

int fs_thread_wait(struct fs_thread *t, long timeout_ns)
{
	struct timespec ts;
	int stop;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ns / 1000000000L;
	ts.tv_nsec += timeout_ns % 1000000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	disk_mutex_lock(&t->lock);
	while (!t->wake && !t->stop) {
		if (timeout_ns <= 0)
			disk_cond_wait(&t->cond, &t->lock);
		else if (disk_cond_timedwait(&t->cond, &t->lock, &ts) == ETIMEDOUT)
			break;
	}
	t->wake = 0;
	stop = t->stop;
	disk_mutex_unlock(&t->lock);
	return stop;
}

int fs_thread_stop(struct fs_thread *t)
{
	struct timespec ts;
	int err;

	if (!t->run)
		return 0;
	fs_thread_cancel(t);
	clock_gettime(CLOCK_REALTIME, &ts); /* pthread_timedjoin_np's clock */
	ts.tv_sec += t->join_s;
	err = pthread_timedjoin_np(t->thread, NULL, &ts);
	if (err) {
		fs_log(FS_LOG_ERR, "%s: its thread did not end within %d s of the stop: %s",
		       t->name, t->join_s, strerror(err));
		return -ETIMEDOUT;
	}
	t->run = 0;
	return 0;
}

void fs_thread_destroy(struct fs_thread *t)
{
	if (t->run)
		return; /* still running (fs_thread_stop said so): keep its lock */
	pthread_cond_destroy(&t->cond);
	disk_mutex_destroy(&t->lock);
}
