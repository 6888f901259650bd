/*
 * fs_warm.h — the warm fill (--warm, fs_warm.c): its state lives behind an
 * opaque struct fs_warm that fs->warm points to, made by fs_open
 * (fs_warm_new) and freed by fs_close (fs_warm_free); it owns its lock
 * (its thread's, struct fs_thread) and nothing outside fs_warm.c touches
 * its fields. The per-object mark (fs_obj.warm) is the namespace's.
 */
#ifndef FS_WARM_H
#define FS_WARM_H

#include <stdint.h>

struct fs;
struct fs_warm;

/* warm_state in stats */
enum fs_warm_state {
	FS_WARM_STATE_OFF = 0,
	FS_WARM_STATE_RUNNING = 1,
	FS_WARM_STATE_DONE = 2,	   /* every byte of the dataset is cached */
	FS_WARM_STATE_STOPPED = 3, /* ended short: the cache is full (it never evicts to warm),
				    * or fills failed */
};

/* A warm that has not started: 0, or -ENOMEM. */
int fs_warm_new(struct fs_warm **w);
/* Free it (after fs_warm_stop said 0; NULL: nothing). */
void fs_warm_free(struct fs_warm *w);
/* fs_warm.c: --warm. Decide from the mode, the dataset's size, the cache's
 * size and the disk's room whether to warm, say so in the log, and start
 * the warm thread (which hands every object to the cache tier as a PF_FIT
 * prefetch, in listing order, then follows it to its end). Call once,
 * after the namespace is built. fs_warm_cancel tells the thread to stop
 * (any thread, never blocks); fs_warm_stop also joins it (call after
 * cachetier_cancel; accepts a warm that never started). */
void fs_warm_start(struct fs *fs);
void fs_warm_cancel(struct fs *fs);
int fs_warm_stop(struct fs *fs); /* fs_thread_stop's result */
/* 1 while the warm thread was started and not joined (for tests). */
int fs_warm_running(const struct fs *fs);
struct fs_warm_progress {
	uint64_t wanted; /* bytes of the objects being warmed */
	uint64_t done;	 /* of those, bytes cached now */
	uint64_t unfit;	 /* of those, bytes skipped: no room without evicting */
	unsigned state;	 /* enum fs_warm_state */
};
void fs_warm_progress(struct fs *fs, struct fs_warm_progress *p);
/* Bytes the cache can still take without evicting: the smaller of what
 * --cache-size leaves above the directory's usage and the disk's free
 * space above its reserve. */
uint64_t fs_cache_room(struct fs *fs);

#endif
