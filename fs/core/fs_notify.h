/*
 * fs_notify.h — the notifier (fs_notify.c): the queue of kernel cache
 * invalidations and the one thread that sends them. Its state lives behind
 * an opaque struct fs_notify that fs->notify points to, made by fs_open
 * (fs_notify_new) and freed by fs_close (fs_notify_free); it owns its lock
 * (the queue's) and its thread (struct fs_thread), and nothing outside
 * fs_notify.c touches its fields. fs_notify_start and fs_notify_stop, which
 * the FUSE adapter calls, are in fs_core.h.
 */
#ifndef FS_NOTIFY_H
#define FS_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

struct fs;
struct fs_notify;

/* A notifier that has not started: 0, or -ENOMEM. */
int fs_notify_new(struct fs_notify **n);
/* Free it (after fs_notify_stop said 0; NULL: nothing). */
void fs_notify_free(struct fs_notify *n);

/* Kernel cache invalidations, queued for the notifier thread (a request
 * handler must not send them itself: the kernel may hold the very locks
 * the invalidation waits for). Without a started notifier (shardfs index,
 * the unit tests) or once it is stopping they are dropped. Any thread;
 * never blocks but for the queue's lock. fs_notify_shard invalidates the
 * member inodes [0, n) of shard (and the layout's other inodes of them:
 * fs_view.h, member_alias). */
void fs_notify_inode(struct fs *fs, uint64_t ino);
void fs_notify_entry(struct fs *fs, uint64_t parent, const char *name, size_t len);
void fs_notify_shard(struct fs *fs, uint32_t shard, uint32_t n);
/* Wait until everything queued so far is sent (at most timeout_s; returns
 * at once without a running notifier). Any thread but the notifier's. */
void fs_notify_drain(struct fs *fs, double timeout_s);

/* fs_cancel: every fs_notify_drain returns now and later ones at once (a
 * stop does not wait for a refresh's invalidations; the queue stays). */
void fs_notify_cancel(struct fs *fs);
/* 1 while the notifier thread was started and not joined (for tests). */
int fs_notify_running(const struct fs *fs);
/* Tests: fs_notify_stop's bound on the join, in seconds (FS_THREAD_JOIN_S
 * until set; 0: the stop joins only a thread that has already ended).
 * Owner's thread, not during a stop. */
void fs_notify_join_bound(struct fs *fs, int seconds);

#endif
