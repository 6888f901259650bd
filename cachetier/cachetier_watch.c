/*
 * cachetier_watch.c — which mapped blobs changed in place.
 *
 * A blob is only ever replaced by a rename (cachetier_meta.c), so a mapping
 * keeps the bytes its caller validated, unless something writes the file
 * itself: a cleanup script, a user, a tool run by hand. To catch that, the
 * inode of every mapped blob is watched with inotify (IN_MODIFY: a write, a
 * truncation, a punched hole or any fallocate), and cachetier_meta_changed
 * reads the queued events before it answers. The kernel queues an event
 * before the write that causes it returns, so a change made before a
 * request asks is seen by that request; one made while a request reads the
 * mapping may still reach that request (there is no lock across processes;
 * a cut under a reader is caught by cachetier_guard.c, which makes the
 * faulting read read zeros and marks the blob). Writes through a shared
 * writable mapping of the file make no event.
 *
 * One inotify instance per cache tier, opened at the first mapping. inotify
 * gives one watch (wd) per inode, however often it is added, so mappings of
 * one inode share a record (refs) and each remembers the record's event
 * count when it was made: a mapping made after a change is not changed. A
 * watch is removed when its last mapping goes (a watch holds its inode, so
 * a removed blob's disk space would stay in use). A lost event (the queue
 * overflowed) counts as a change of every watched blob. Every call holds
 * w->lock, never across anything but reads of the inotify fd.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "cachetier_i.h"

struct ct_watch_rec {
	int wd;
	unsigned refs;	 /* mappings of the inode */
	uint64_t events; /* changes seen so far */
	struct ct_watch_rec *next;
};

struct cachetier__watch {
	struct disk_mutex lock; /* DISK_LOCK_CT_WATCH: a leaf */
	int fd;	       /* inotify, opened at the first add; -1 before (or when it cannot be) */
	int err;       /* why it cannot be opened (then every add fails with it) */
	unsigned refs; /* the cache tier's, and one per record */
	struct ct_watch_rec **tab; /* chains by wd */
	size_t size, n;		   /* buckets (a power of two), records */
};

struct cachetier__watch *cachetier__watch_new(void)
{
	struct cachetier__watch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	disk_mutex_init(&w->lock, DISK_LOCK_CT_WATCH);
	w->fd = -1;
	w->refs = 1;
	return w;
}

static void watch_unref(struct cachetier__watch *w) /* w->lock held; unlocks it */
{
	if (--w->refs > 0) {
		disk_mutex_unlock(&w->lock);
		return;
	}
	disk_mutex_unlock(&w->lock);
	if (w->fd >= 0)
		close(w->fd);
	free(w->tab);
	disk_mutex_destroy(&w->lock);
	free(w);
}

void cachetier__watch_close(struct cachetier__watch *w)
{
	if (!w)
		return;
	disk_mutex_lock(&w->lock);
	watch_unref(w);
}

static struct ct_watch_rec **rec_slot(struct cachetier__watch *w, int wd)
{
	struct ct_watch_rec **p = &w->tab[(unsigned)wd & (w->size - 1)];

	while (*p && (*p)->wd != wd)
		p = &(*p)->next;
	return p;
}

/* Read every queued event: a read that leaves room for the largest event
 * in buf took every event queued (the kernel stops only at an empty queue
 * or an event that does not fit), so no second read() is made to hear
 * EAGAIN (the events while fills run: a read() a look, not two). */
static void watch_drain(struct cachetier__watch *w)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	for (;;) {
		ssize_t n = w->fd >= 0 ? read(w->fd, buf, sizeof(buf)) : -1;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* EAGAIN: none left */
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)(void *)p;
			struct ct_watch_rec *r;

			if (ev->mask & IN_Q_OVERFLOW) {
				for (size_t i = 0; i < w->size; i++)
					for (r = w->tab[i]; r; r = r->next)
						r->events++;
			} else if (ev->wd >= 0 && w->size && (r = *rec_slot(w, ev->wd)) != NULL) {
				r->events++; /* IN_MODIFY, or IN_IGNORED: not watched any more */
			}
			p += sizeof(*ev) + ev->len;
		}
		if ((size_t)n + sizeof(struct inotify_event) + NAME_MAX + 1 <= sizeof(buf))
			return;
	}
}

static int tab_grow(struct cachetier__watch *w)
{
	size_t size = w->size ? w->size * 2 : 64;
	struct ct_watch_rec **tab = calloc(size, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < w->size; i++)
		for (struct ct_watch_rec *r = w->tab[i], *next; r; r = next) {
			next = r->next;
			r->next = tab[(unsigned)r->wd & (size - 1)];
			tab[(unsigned)r->wd & (size - 1)] = r;
		}
	free(w->tab);
	w->tab = tab;
	w->size = size;
	return 0;
}

int cachetier__watch_add(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			 uint64_t *seen)
{
	char path[64];
	struct ct_watch_rec *r, **slot;
	int wd, err = 0;

	*rec = NULL;
	disk_mutex_lock(&w->lock);
	if (w->fd < 0 && w->err == 0) {
		w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		if (w->fd < 0)
			w->err = -errno;
	}
	if (w->fd < 0) {
		err = w->err;
		goto out;
	}
	if (w->n >= w->size && (err = tab_grow(w)) < 0)
		goto out;
	/* the inode of fd, not whatever its name holds by now */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	wd = inotify_add_watch(w->fd, path, IN_MODIFY);
	if (wd < 0) {
		err = -errno;
		goto out;
	}
	watch_drain(w); /* a change before now is the validation's to find */
	slot = rec_slot(w, wd);
	r = *slot;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r) {
			inotify_rm_watch(w->fd, wd);
			err = -ENOMEM;
			goto out;
		}
		r->wd = wd;
		*slot = r;
		w->n++;
		w->refs++;
	}
	r->refs++;
	*rec = r;
	*seen = r->events;
out:
	disk_mutex_unlock(&w->lock);
	return err;
}

int cachetier__watch_changed(struct cachetier__watch *w, const struct ct_watch_rec *r,
			     uint64_t seen)
{
	int changed;

	disk_mutex_lock(&w->lock);
	watch_drain(w);
	changed = r->events != seen;
	disk_mutex_unlock(&w->lock);
	return changed;
}

uint64_t cachetier__watch_events(struct cachetier__watch *w, const struct ct_watch_rec *r)
{
	uint64_t n;

	disk_mutex_lock(&w->lock);
	watch_drain(w);
	n = r->events;
	disk_mutex_unlock(&w->lock);
	return n;
}

void cachetier__watch_drop(struct cachetier__watch *w, struct ct_watch_rec *r)
{
	disk_mutex_lock(&w->lock);
	if (--r->refs > 0) {
		disk_mutex_unlock(&w->lock);
		return;
	}
	*rec_slot(w, r->wd) = r->next;
	w->n--;
	inotify_rm_watch(w->fd, r->wd);
	free(r);
	watch_unref(w);
}
