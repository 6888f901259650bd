/*
 * fs_notify.c — the queue of kernel cache invalidations.
 *
 * The core (a refresh, a lookup that finds a changed object, a layout's
 * view built from shards that changed) queues invalidations; the notifier thread hands them to
 * the session's callbacks (struct fs_notify_ops, given by the FUSE adapter
 * at fs_notify_start). Without a started notifier (shardfs index, unit
 * tests) they are dropped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_view.h"

/* One notifier thread sends the invalidations, never a request handler: invalidating an
 * inode waits for its locked pages and an entry for its directory's lock,
 * which the kernel may hold while it waits for the very request that
 * noticed the change (libfuse: "don't call this function from a
 * filesystem operation"). Sends to inodes the kernel does not know fail
 * with ENOENT, which is fine. */
struct fs_notify {
	struct fs_notify *next;
	enum { NQ_INODE, NQ_ENTRY, NQ_SHARD } kind;
	uint64_t ino; /* the inode; NQ_ENTRY: the parent; NQ_SHARD: the shard */
	uint32_t n;   /* NQ_SHARD: members */
	size_t len;
	char name[]; /* NQ_ENTRY */
};

static void nq_push(struct fs *fs, int kind, uint64_t ino, uint32_t n, const char *name, size_t len)
{
	struct fs_notify *q;

	pthread_mutex_lock(&fs->nq_lock);
	if (!fs->nq_run) { /* no session (shardfs index) or shutting down */
		pthread_mutex_unlock(&fs->nq_lock);
		return;
	}
	q = malloc(sizeof(*q) + len + 1);
	if (q) {
		q->next = NULL;
		q->kind = kind;
		q->ino = ino;
		q->n = n;
		q->len = len;
		memcpy(q->name, name, len);
		q->name[len] = '\0';
		*fs->nq_tail = q;
		fs->nq_tail = &q->next;
		pthread_cond_signal(&fs->nq_cond);
	}
	pthread_mutex_unlock(&fs->nq_lock);
}

void fs_notify_inode(struct fs *fs, uint64_t ino)
{
	nq_push(fs, NQ_INODE, ino, 0, "", 0);
}

void fs_notify_entry(struct fs *fs, uint64_t parent, const char *name, size_t len)
{
	nq_push(fs, NQ_ENTRY, parent, 0, name, len);
}

void fs_notify_shard(struct fs *fs, uint32_t shard, uint32_t n)
{
	nq_push(fs, NQ_SHARD, shard, n, "", 0);
}

void fs_notify_drain(struct fs *fs, double timeout_s)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)timeout_s;
	pthread_mutex_lock(&fs->nq_lock);
	while (fs->nq_run && (fs->nq_head || fs->nq_busy)) {
		if (pthread_cond_timedwait(&fs->nq_idle, &fs->nq_lock, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&fs->nq_lock);
}

static void nq_send(struct fs *fs, const struct fs_notify *q)
{
	const struct fs_notify_ops *ops = fs->nq_ops;
	/* the layout's other inodes of a member (an imagefolder file) */
	uint64_t (*alias)(uint32_t shard, uint32_t entry) = fs_layout_of(fs)->member_alias;

	switch (q->kind) {
	case NQ_INODE:
		ops->inval_inode(fs->nq_ctx, q->ino);
		break;
	case NQ_ENTRY:
		ops->inval_entry(fs->nq_ctx, q->ino, q->name, q->len);
		break;
	case NQ_SHARD:
		for (uint32_t i = 0; i < q->n; i++) {
			ops->inval_inode(fs->nq_ctx, fs_ino(FS_K_MEMBER, (uint32_t)q->ino, i));
			if (alias)
				ops->inval_inode(fs->nq_ctx, alias((uint32_t)q->ino, i));
		}
		break;
	}
}

static void *nq_thread(void *arg)
{
	struct fs *fs = arg;

	pthread_mutex_lock(&fs->nq_lock);
	for (;;) {
		struct fs_notify *q = fs->nq_head;

		if (!q) {
			pthread_cond_broadcast(&fs->nq_idle);
			if (!fs->nq_run)
				break;
			pthread_cond_wait(&fs->nq_cond, &fs->nq_lock);
			continue;
		}
		fs->nq_head = q->next;
		if (!fs->nq_head)
			fs->nq_tail = &fs->nq_head;
		fs->nq_busy = 1;
		pthread_mutex_unlock(&fs->nq_lock);
		nq_send(fs, q);
		free(q);
		pthread_mutex_lock(&fs->nq_lock);
		fs->nq_busy = 0;
	}
	pthread_mutex_unlock(&fs->nq_lock);
	return NULL;
}

int fs_notify_start(struct fs *fs, const struct fs_notify_ops *ops, void *ctx)
{
	int err;

	fs->nq_ops = ops;
	fs->nq_ctx = ctx;
	pthread_mutex_lock(&fs->nq_lock);
	fs->nq_run = 1;
	pthread_mutex_unlock(&fs->nq_lock);
	err = pthread_create(&fs->nq_thread, NULL, nq_thread, fs);
	if (err) {
		fs->nq_run = 0;
		return -err;
	}
	return 0;
}

void fs_notify_stop(struct fs *fs)
{
	struct fs_notify *q;

	pthread_mutex_lock(&fs->nq_lock);
	if (!fs->nq_run) {
		pthread_mutex_unlock(&fs->nq_lock);
		return;
	}
	fs->nq_run = 0;
	while ((q = fs->nq_head) != NULL) {
		fs->nq_head = q->next;
		free(q);
	}
	fs->nq_tail = &fs->nq_head;
	pthread_cond_broadcast(&fs->nq_cond);
	pthread_cond_broadcast(&fs->nq_idle);
	pthread_mutex_unlock(&fs->nq_lock);
	pthread_join(fs->nq_thread, NULL);
}
