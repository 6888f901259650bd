/*
 * fs_notify.c — the notifier (fs_notify.h): the queue of kernel cache
 * invalidations and the thread that sends them.
 *
 * The core (a refresh, a lookup that finds a changed object, a layout's
 * view built from shards that changed) queues invalidations; the notifier thread hands them to
 * the session's callbacks (struct fs_notify_ops, given by the FUSE adapter
 * at fs_notify_start). Without a started notifier (shardfs index, unit
 * tests) they are dropped.
 *
 * Threads: fs_notify_inode, _entry, _shard and _drain from any thread;
 * fs_notify_start and fs_notify_stop from the owner's (the adapter's, and
 * fs_close). The thread is the core's helper (fs_thread.c): fs_notify_stop
 * joins it within FS_THREAD_JOIN_S (10 s), and a send the kernel holds up
 * longer than that leaves it running (fs_close then frees nothing).
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
struct nq_item {
	struct nq_item *next;
	enum { NQ_INODE, NQ_ENTRY, NQ_SHARD } kind;
	uint64_t ino; /* the inode; NQ_ENTRY: the parent; NQ_SHARD: the shard */
	uint32_t n;   /* NQ_SHARD: members */
	size_t len;
	char name[]; /* NQ_ENTRY */
};

/* The notifier's state (fs_notify.h): fs->notify, from fs_open to fs_close. */
struct fs_notify {
	/* set once at fs_notify_start, before the thread starts */
	const struct fs_notify_ops *ops;
	void *ctx;
	struct disk_mutex lock; /* DISK_LOCK_NOTIFY: protects head, tail, busy and open */
	pthread_cond_t idle;	/* the queue drained, or the notifier stopped */
	struct nq_item *head, **tail;
	int busy;		 /* the thread is sending an item */
	int open;		 /* items are taken: from fs_notify_start to fs_notify_stop */
	int cancelled;		 /* fs_cancel: drains do not wait */
	struct fs_thread thread; /* woken by every item queued */
};

int fs_notify_new(struct fs_notify **out)
{
	struct fs_notify *n = calloc(1, sizeof(*n));

	*out = n;
	if (!n)
		return -ENOMEM;
	disk_mutex_init(&n->lock, DISK_LOCK_NOTIFY);
	pthread_cond_init(&n->idle, NULL);
	n->tail = &n->head;
	fs_thread_init(&n->thread, "notifier", "shardfs-notify");
	return 0;
}

void fs_notify_free(struct fs_notify *n)
{
	if (!n)
		return;
	fs_thread_destroy(&n->thread);
	pthread_cond_destroy(&n->idle);
	disk_mutex_destroy(&n->lock);
	free(n);
}

int fs_notify_running(const struct fs *fs)
{
	return fs->notify->thread.run;
}

void fs_notify_join_bound(struct fs *fs, int seconds)
{
	fs->notify->thread.join_s = seconds;
}

static void nq_push(struct fs *fs, int kind, uint64_t ino, uint32_t cnt, const char *name,
		    size_t len)
{
	struct fs_notify *n = fs->notify;
	struct nq_item *q;

	disk_mutex_lock(&n->lock);
	if (!n->open) { /* no session (shardfs index) or shutting down */
		disk_mutex_unlock(&n->lock);
		return;
	}
	q = malloc(sizeof(*q) + len + 1);
	if (q) {
		q->next = NULL;
		q->kind = kind;
		q->ino = ino;
		q->n = cnt;
		q->len = len;
		memcpy(q->name, name, len);
		q->name[len] = '\0';
		*n->tail = q;
		n->tail = &q->next;
	}
	disk_mutex_unlock(&n->lock);
	if (q)
		fs_thread_wake(&n->thread);
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
	struct fs_notify *n = fs->notify;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)timeout_s;
	disk_mutex_lock(&n->lock);
	while (n->open && !n->cancelled && (n->head || n->busy)) {
		if (disk_cond_timedwait(&n->idle, &n->lock, &until) == ETIMEDOUT)
			break;
	}
	disk_mutex_unlock(&n->lock);
}

void fs_notify_cancel(struct fs *fs)
{
	struct fs_notify *n = fs->notify;

	if (!n)
		return;
	disk_mutex_lock(&n->lock);
	n->cancelled = 1;
	pthread_cond_broadcast(&n->idle);
	disk_mutex_unlock(&n->lock);
}

static void nq_send(struct fs *fs, const struct nq_item *q)
{
	const struct fs_notify *n = fs->notify;
	const struct fs_notify_ops *ops = n->ops;
	/* the layout's other inodes of a member (an imagefolder file) */
	uint64_t (*alias)(uint32_t shard, uint32_t entry) = fs_layout_of(fs)->member_alias;

	switch (q->kind) {
	case NQ_INODE:
		ops->inval_inode(n->ctx, q->ino);
		break;
	case NQ_ENTRY:
		ops->inval_entry(n->ctx, q->ino, q->name, q->len);
		break;
	case NQ_SHARD:
		for (uint32_t i = 0; i < q->n; i++) {
			ops->inval_inode(n->ctx, fs_ino(FS_K_MEMBER, (uint32_t)q->ino, i));
			if (alias)
				ops->inval_inode(n->ctx, alias((uint32_t)q->ino, i));
		}
		break;
	}
}

/* The notifier thread: sends the queue's items in order, one at a time
 * without the lock; sleeps (fs_thread_wait, woken by nq_push) while the
 * queue is empty; ends at the stop (fs_notify_stop empties the queue). */
static void *nq_thread(void *arg)
{
	struct fs *fs = arg;
	struct fs_notify *n = fs->notify;

	disk_mutex_lock(&n->lock);
	for (;;) {
		struct nq_item *q = n->head;

		if (!q) {
			pthread_cond_broadcast(&n->idle);
			disk_mutex_unlock(&n->lock);
			if (fs_thread_wait(&n->thread, 0))
				return NULL;
			disk_mutex_lock(&n->lock);
			continue;
		}
		n->head = q->next;
		if (!n->head)
			n->tail = &n->head;
		n->busy = 1;
		disk_mutex_unlock(&n->lock);
		nq_send(fs, q);
		free(q);
		disk_mutex_lock(&n->lock);
		n->busy = 0;
	}
}

int fs_notify_start(struct fs *fs, const struct fs_notify_ops *ops, void *ctx)
{
	struct fs_notify *n = fs->notify;
	int err;

	n->ops = ops;
	n->ctx = ctx;
	disk_mutex_lock(&n->lock);
	n->open = 1;
	disk_mutex_unlock(&n->lock);
	err = fs_thread_start(&n->thread, nq_thread, fs);
	if (err < 0) {
		disk_mutex_lock(&n->lock);
		n->open = 0;
		disk_mutex_unlock(&n->lock);
	}
	return err;
}

int fs_notify_stop(struct fs *fs)
{
	struct fs_notify *n = fs->notify;
	struct nq_item *q;

	if (!n) /* fs_open failed before making it */
		return 0;
	disk_mutex_lock(&n->lock);
	n->open = 0;
	while ((q = n->head) != NULL) {
		n->head = q->next;
		free(q);
	}
	n->tail = &n->head;
	pthread_cond_broadcast(&n->idle);
	disk_mutex_unlock(&n->lock);
	return fs_thread_stop(&n->thread);
}
