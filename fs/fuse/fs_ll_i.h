/*
 * fs_ll_i.h — what fs_ll.c and fs_ll_stop.c share: the stop thread that
 * turns SIGTERM, SIGINT, SIGHUP and the end of the session into
 * fs_cancel and the end of the session loop (fs_ll_stop.c says how).
 */
#ifndef FS_LL_I_H
#define FS_LL_I_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 312
#endif

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <signal.h>

#include "fs_core.h"
#include "disk_lock.h"

struct ll_stop {
	struct fs *fs;
	struct fuse_session *se;
	int pipe[2];	/* a byte per signal; 0 from fs_ll_run: stop waiting */
	pthread_t main; /* runs fuse_session_loop_mt */
	pthread_t thread;
	struct disk_mutex lock; /* DISK_LOCK_FUSE_STOP */
	pthread_cond_t cond;
	int loop_done; /* protected by lock: the loop returned, send no wake */
	struct sigaction old[4];
};

/* Install the handlers and start the stop thread for fs's session se, run
 * by the calling thread (it runs fuse_session_loop_mt). Returns 0 or a
 * negative errno (nothing installed). */
int fs_ll__stop_start(struct ll_stop *st, struct fs *fs, struct fuse_session *se);

/* After fuse_session_loop_mt returned: end the stop thread (it may still be
 * cancelling), restore the handlers. */
void fs_ll__stop_finish(struct ll_stop *st);

/* Stop fs's notifier (fs_notify_stop) while answering, ENOTCONN, the
 * requests the kernel still sends on the session's device fd (after the
 * session loop no one else reads it). Returns what fs_notify_stop did. */
int fs_ll__notify_stop(struct fs *fs, int fd);

#endif
