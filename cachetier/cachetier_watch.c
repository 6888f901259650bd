/*
 * cachetier_watch.c — which cache files changed in place.
 *
 * A blob is only ever replaced by a rename (cachetier_meta.c), so a mapping
 * keeps the bytes its caller validated, unless something writes the file
 * itself: a cleanup script, a user, a tool run by hand. The same holds for
 * the data files whose units a reader trusts (cachetier_read.c) and the
 * decoded copies (cachetier_objread.c). To catch that, the inode of each is
 * watched for a write, a truncation, a punched hole or any fallocate, and
 * the callers read the queued events before they answer. The kernel queues
 * an event before the write that causes it returns, so a change made
 * before a request asks is seen by that request; one made while a request
 * reads may still reach that request (there is no lock across processes;
 * a cut under a reader is caught by cachetier_guard.c and by the fstat of
 * the reads that check). Writes through a shared writable mapping of the
 * file make no event.
 *
 * Two kinds of watch. fanotify (FAN_CLASS_NOTIF, FAN_REPORT_FID, an inode
 * mark for FAN_MODIFY; unprivileged from Linux 5.13) says which process
 * wrote: an event of this process (its pid is getpid()) is not a change,
 * because this process's writes are its fills, whose units are CRC'd as
 * written, and eviction's punches, whose units are cleared first (blobs are
 * only replaced by rename); so a fill of a data file does not send the
 * units readers trust back to "check". Records are keyed by the file
 * handle (name_to_handle_at, the fsid from fstatfs) that the event's FID
 * record carries; a record keeps a dup of the fd to remove its mark. When
 * fanotify cannot be had (an older kernel, EPERM, the first mark refused:
 * a filesystem without file handles, the marks limit) the tier uses
 * inotify (IN_MODIFY) for its whole life, logged once by the caller
 * (cachetier__watch_kind): its events carry no writer, so this process's
 * own fills count as changes. SHARDFS_TEST_WATCH_INOTIFY=1 in the
 * environment forces inotify (for tests; not an option).
 *
 * One instance per cache tier, opened at the first add. inotify gives one
 * watch (wd) per inode, however often it is added, and fanotify one mark,
 * so mappings of one inode share a record (refs) and each remembers the
 * record's event count when it was made: a mapping made after a change is
 * not changed. A watch is removed when its last user goes (a watch holds
 * its inode, so a removed file's disk space would stay in use). A lost
 * event (the queue overflowed) counts as a change of every watched file.
 * Every call holds w->lock, never across anything but reads of the
 * notification fd (non-blocking: no wait).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cachetier_i.h"

#define WATCH_FH_MAX 128 /* bytes of a file handle kept (MAX_HANDLE_SZ) */

struct ct_watch_rec {
	int wd;		 /* inotify: the watch; fanotify: a dup of the file's fd */
	unsigned refs;	 /* users of the inode */
	uint64_t events; /* changes seen so far */
	uint32_t hash;	 /* fanotify: of the key below */
	int fh_type;
	unsigned fh_len;
	int32_t fsid[2];
	unsigned char fh[WATCH_FH_MAX];
	struct ct_watch_rec *next;
};

struct cachetier__watch {
	struct disk_mutex lock; /* DISK_LOCK_CT_WATCH: a leaf */
	int fd; /* inotify or fanotify, opened at the first add; -1 before (or when it cannot be) */
	int kind;		   /* CACHETIER_WATCH_*: none yet, inotify, fanotify */
	int err;		   /* why it cannot be opened (then every add fails with it) */
	pid_t pid;		   /* ours: fanotify events of it are not changes */
	unsigned refs;		   /* the cache tier's, and one per record */
	struct ct_watch_rec **tab; /* chains by wd (inotify) or hash (fanotify) */
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

int cachetier__watch_kind(struct cachetier__watch *w)
{
	int k;

	if (!w)
		return CACHETIER_WATCH_NONE;
	disk_mutex_lock(&w->lock);
	k = w->kind;
	disk_mutex_unlock(&w->lock);
	return k;
}

static uint32_t key_hash(const int32_t fsid[2], int type, const unsigned char *fh, unsigned len)
{
	uint32_t h = 2166136261u ^ (uint32_t)fsid[0] ^ ((uint32_t)fsid[1] << 7) ^ (uint32_t)type;

	for (unsigned i = 0; i < len; i++)
		h = (h ^ fh[i]) * 16777619u;
	return h;
}

static struct ct_watch_rec **rec_slot(struct cachetier__watch *w, int wd)
{
	struct ct_watch_rec **p = &w->tab[(unsigned)wd & (w->size - 1)];

	while (*p && (*p)->wd != wd)
		p = &(*p)->next;
	return p;
}

static struct ct_watch_rec **fid_slot(struct cachetier__watch *w, uint32_t h, const int32_t fsid[2],
				      int type, const unsigned char *fh, unsigned len)
{
	struct ct_watch_rec **p = &w->tab[h & (w->size - 1)];

	while (*p && ((*p)->hash != h || (*p)->fh_type != type || (*p)->fh_len != len ||
		      (*p)->fsid[0] != fsid[0] || (*p)->fsid[1] != fsid[1] ||
		      memcmp((*p)->fh, fh, len) != 0))
		p = &(*p)->next;
	return p;
}

static void all_changed(struct cachetier__watch *w)
{
	for (size_t i = 0; i < w->size; i++)
		for (struct ct_watch_rec *r = w->tab[i]; r; r = r->next)
			r->events++;
}

static void inotify_events(struct cachetier__watch *w, const char *buf, ssize_t n)
{
	for (const char *p = buf; p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(const void *)p;
		struct ct_watch_rec *r;

		if (ev->mask & IN_Q_OVERFLOW)
			all_changed(w);
		else if (ev->wd >= 0 && w->size && (r = *rec_slot(w, ev->wd)) != NULL)
			r->events++; /* IN_MODIFY, or IN_IGNORED: not watched any more */
		p += sizeof(*ev) + ev->len;
	}
}

/* One fanotify event, its metadata m (copied out: events are only 4-byte
 * aligned in the buffer) and its bytes ev: this process's is not a change
 * (above); another's counts for the record its FID names. */
static void fanotify_event(struct cachetier__watch *w, const struct fanotify_event_metadata *m,
			   const char *ev)
{
	const char *p = ev + m->metadata_len, *end = ev + m->event_len;

	if (m->mask & FAN_Q_OVERFLOW) {
		all_changed(w);
		return;
	}
	if (m->pid == w->pid)
		return;
	while (p + sizeof(struct fanotify_event_info_header) <= end) {
		const struct fanotify_event_info_header *h =
		    (const struct fanotify_event_info_header *)(const void *)p;

		if (h->len < sizeof(*h) || p + h->len > end)
			break;
		if (h->info_type == FAN_EVENT_INFO_TYPE_FID &&
		    h->len >= sizeof(struct fanotify_event_info_fid) + sizeof(struct file_handle)) {
			const struct fanotify_event_info_fid *fid =
			    (const struct fanotify_event_info_fid *)(const void *)p;
			const struct file_handle *fh =
			    (const struct file_handle *)(const void *)fid->handle;
			int32_t fsid[2];
			struct ct_watch_rec *r;

			memcpy(fsid, &fid->fsid, sizeof(fsid));
			if (fh->handle_bytes <= WATCH_FH_MAX &&
			    sizeof(*fid) + sizeof(*fh) + fh->handle_bytes <= h->len && w->size) {
				uint32_t hh =
				    key_hash(fsid, fh->handle_type, fh->f_handle, fh->handle_bytes);

				r = *fid_slot(w, hh, fsid, fh->handle_type, fh->f_handle,
					      fh->handle_bytes);
				if (r)
					r->events++;
			}
			return;
		}
		p += h->len;
	}
	all_changed(w); /* an event whose file cannot be told: every file may have changed */
}

/* Read every queued event: a read that leaves room for the largest event
 * in buf took every event queued (the kernel stops only at an empty queue
 * or an event that does not fit), so no second read() is made to hear
 * EAGAIN (the events while fills run: a read() a look, not two). */
static void watch_drain(struct cachetier__watch *w)
{
	char buf[4096] __attribute__((aligned(8)));
	size_t largest = w->kind == CACHETIER_WATCH_FANOTIFY
			     ? FAN_EVENT_METADATA_LEN + 256
			     : sizeof(struct inotify_event) + NAME_MAX + 1;

	for (;;) {
		ssize_t n = w->fd >= 0 ? read(w->fd, buf, sizeof(buf)) : -1;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return; /* EAGAIN: none left */
		if (w->kind == CACHETIER_WATCH_FANOTIFY) {
			struct fanotify_event_metadata m;

			for (ssize_t off = 0; off + (ssize_t)sizeof(m) <= n;) {
				memcpy(&m, buf + off, sizeof(m));
				if (m.event_len < sizeof(m) || m.metadata_len < sizeof(m) ||
				    off + (ssize_t)m.event_len > n)
					break;
				if (m.vers == FANOTIFY_METADATA_VERSION)
					fanotify_event(w, &m, buf + off);
				off += m.event_len;
			}
		} else {
			inotify_events(w, buf, n);
		}
		if ((size_t)n + largest <= sizeof(buf))
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
			uint32_t h =
			    w->kind == CACHETIER_WATCH_FANOTIFY ? r->hash : (uint32_t)r->wd;

			next = r->next;
			r->next = tab[h & (size - 1)];
			tab[h & (size - 1)] = r;
		}
	free(w->tab);
	w->tab = tab;
	w->size = size;
	return 0;
}

/* Opens the instance: fanotify unless it cannot be had or is turned off
 * for a test, else inotify. w->lock held. */
static void watch_open(struct cachetier__watch *w)
{
	const char *e = getenv("SHARDFS_TEST_WATCH_INOTIFY");

	w->pid = getpid();
	if (!(e && *e && strcmp(e, "0") != 0)) {
		w->fd = fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK | FAN_CLOEXEC | FAN_REPORT_FID,
				      O_RDONLY | O_CLOEXEC);
		if (w->fd >= 0) {
			w->kind = CACHETIER_WATCH_FANOTIFY;
			return;
		}
	}
	w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->fd < 0)
		w->err = -errno;
	else
		w->kind = CACHETIER_WATCH_INOTIFY;
}

/* fanotify: the record of fd's inode, marked. w->lock held. Returns 0, or
 * -errno (then, when no record was ever made, the caller turns to
 * inotify). */
static int fanotify_add(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec)
{
	struct {
		struct file_handle fh;
		unsigned char bytes[WATCH_FH_MAX];
	} h;
	struct statfs sfs;
	int32_t fsid[2];
	int mnt, dfd;
	uint32_t hh;
	struct ct_watch_rec **slot, *r;

	h.fh.handle_bytes = WATCH_FH_MAX;
	if (name_to_handle_at(fd, "", &h.fh, &mnt, AT_EMPTY_PATH) < 0 || fstatfs(fd, &sfs) < 0)
		return -errno;
	memcpy(fsid, &sfs.f_fsid, sizeof(fsid));
	hh = key_hash(fsid, h.fh.handle_type, h.fh.f_handle, h.fh.handle_bytes);
	slot = fid_slot(w, hh, fsid, h.fh.handle_type, h.fh.f_handle, h.fh.handle_bytes);
	if (*slot) {
		*rec = *slot;
		return 0;
	}
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		return -errno;
	if (fanotify_mark(w->fd, FAN_MARK_ADD, FAN_MODIFY, dfd, NULL) < 0) {
		int err = -errno;

		close(dfd);
		return err;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		fanotify_mark(w->fd, FAN_MARK_REMOVE, FAN_MODIFY, dfd, NULL);
		close(dfd);
		return -ENOMEM;
	}
	r->wd = dfd;
	r->hash = hh;
	r->fh_type = h.fh.handle_type;
	r->fh_len = h.fh.handle_bytes;
	memcpy(r->fsid, fsid, sizeof(fsid));
	memcpy(r->fh, h.fh.f_handle, h.fh.handle_bytes);
	*slot = r;
	*rec = r;
	return 1; /* new */
}

int cachetier__watch_add(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			 uint64_t *seen)
{
	char path[64];
	struct ct_watch_rec *r = NULL, **slot;
	int wd, err = 0;

	*rec = NULL;
	disk_mutex_lock(&w->lock);
	if (w->fd < 0 && w->err == 0)
		watch_open(w);
	if (w->fd < 0) {
		err = w->err;
		goto out;
	}
	if (w->n >= w->size && (err = tab_grow(w)) < 0)
		goto out;
	if (w->kind == CACHETIER_WATCH_FANOTIFY) {
		err = fanotify_add(w, fd, &r);
		if (err < 0 && w->n == 0 && err != -ENOMEM && err != -EMFILE) {
			/* a mark refused while none is held (no file handles,
			 * EPERM, the marks limit): inotify for the tier's life */
			close(w->fd);
			w->kind = CACHETIER_WATCH_NONE;
			w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
			if (w->fd < 0) {
				err = w->err = -errno;
				goto out;
			}
			w->kind = CACHETIER_WATCH_INOTIFY;
		} else {
			if (err < 0)
				goto out;
			if (err == 1) {
				w->n++;
				w->refs++;
			}
			err = 0;
			watch_drain(w); /* a change before now is the validation's to find */
			goto have;
		}
	}
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
have:
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
	w->n--;
	if (w->kind == CACHETIER_WATCH_FANOTIFY) {
		*fid_slot(w, r->hash, r->fsid, r->fh_type, r->fh, r->fh_len) = r->next;
		fanotify_mark(w->fd, FAN_MARK_REMOVE, FAN_MODIFY, r->wd, NULL);
		close(r->wd);
	} else {
		*rec_slot(w, r->wd) = r->next;
		inotify_rm_watch(w->fd, r->wd);
	}
	free(r);
	watch_unref(w);
}
