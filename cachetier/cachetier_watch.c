/*
 * cachetier_watch.c — which cache files changed in place.
 *
 * A blob is only ever replaced by a rename (cachetier_meta.c), so a mapping
 * keeps the bytes its caller validated, unless something writes the file
 * itself: a cleanup script, a user, a tool run by hand. The same holds for
 * the data files whose units a reader trusts (cachetier_read.c) and the
 * decoded copies (cachetier_objread.c). To catch that, the inode of each is
 * watched for a write, a truncation, a punched hole or any fallocate, and
 * the queued events are read before the callers' answers. The kernel
 * queues an event before the write that causes it returns, so a change
 * made before a request asks is seen by that request; one made while a
 * request reads may still reach that request (there is no lock across processes;
 * a cut under a reader is caught by cachetier_guard.c, which makes the
 * faulting read read zeros and marks the blob, and by the fstat of the
 * reads that check). Writes through a shared writable mapping of the file
 * make no event.
 *
 * Two kinds of record. Mapped blobs and decoded copies (watch_add) are
 * watched with inotify (IN_MODIFY), whose events do not say who wrote:
 * every write counts, this process's too. Data files (watch_add_own) are
 * watched with fanotify when it can be had (FAN_CLASS_NOTIF,
 * FAN_REPORT_FID, an inode mark for FAN_MODIFY; unprivileged from Linux
 * 5.13), whose events carry the writer's process id: an event of this
 * process is not a change, because this process's only writes to a data
 * file are its fills (whose units carry the CRC32C of the very bytes
 * written) and its evictions' punches (whose units are emptied first). A
 * fanotify record holds no descriptor: it is found by the file handle
 * (name_to_handle_at, and the fsid of fstatfs) that each event's FID
 * record carries, and its mark is removed through the caller's own fd of
 * the inode (watch_drop_fd; a data file's fd stays open as long as its
 * record). Where fanotify cannot be had (an older kernel, EPERM, ENOSYS, a
 * filesystem without file handles, the marks limit) watch_add_own fails
 * and the caller uses watch_add (inotify) for that file.
 *
 * Each instance is opened at its first add and lives as long as the tier
 * or a record. inotify gives one watch (wd) per inode, however often it is
 * added, and fanotify one mark, so users of one inode share a record
 * (refs) and each remembers the record's event count when it was made: a
 * mapping made after a change is not changed. A watch is removed when its
 * last user goes (a watch holds its inode, so a removed file's disk space
 * would stay in use). A lost event (the queue overflowed), or a fanotify
 * event whose file cannot be told, counts as a change of every file of
 * that instance. w->lock is held to add, drop and count (never across
 * anything but reads of the notification fds, non-blocking: no wait), not
 * to read a count (below).
 *
 * How often the fds are read. A request (one FUSE request: the core calls
 * cachetier_request_begin at its start, on its thread) may check thousands
 * of files (a plan's publish, a `find`'s index checks). On such a thread,
 * watch_changed and watch_events look at an instance's fd at the first check
 * of each request and not again in that request: exactly what the
 * guarantee above asks (a change made before the request's first check is
 * queued by then and read then; one made after it is one made while the
 * request reads, which may reach it or the next request on that thread).
 * Another thread's read in between counts the events for every record, so
 * a later check of the request may still see them. Threads that never
 * call cachetier_request_begin (the notifier, fill workers, the plan
 * thread, the control socket's) look at the fds at every check, as do
 * watch_add and watch_add_own always. The thread's mark is kept per
 * instance of the watch (w->id, never reused), so a second tier's checks
 * look at its own fds.
 *
 * A check's steps, each with the guarantee it serves (no other step is
 * made; tests/unit/test_watchcount.c counts the lock's takes and the
 * system calls of each):
 * - the thread's mark (req_read, thread-local): whether this request
 *   looked at the instance already; a later check of the request makes no
 *   system call and takes no lock. Serves neither guarantee: it only skips
 *   what the first look already did.
 * - the look (watch_pending): one ioctl(FIONREAD) of the fd, without the
 *   lock, then a load of the instance's `draining`. Serves "a change made
 *   before a request's first check is seen by that request": its event
 *   was queued before the check (the kernel queues it before the write
 *   returns), so the fd reports it queued, or a drain took it off the
 *   queue first. Such a drain set `draining` before its read(2) and clears
 *   it only after it counted what it read; the kernel's queue lock orders
 *   its read before this ioctl, so the load sees `draining` set (the
 *   drain is under way: the check waits for it on the lock below) or the
 *   clear that follows the counts (a release: the counts are seen).
 * - only when the look found events queued or a drain under way: w->lock,
 *   once, and the drain (watch_drain: read(2) until the queue is empty,
 *   each event counted on its record). Serves the same guarantee: the
 *   counts are made and read in one place.
 * - the record's count (an atomic load) against the caller's: the answer.
 *   The caller's check after it read (fs/'s closing check before it
 *   answers) is such a check too, a load without a system call within the
 *   request: it serves "a change during the request gives ESTALE or the old
 *   answer" with what it can know (events another thread counted
 *   meanwhile, the guard's hit: cachetier_meta_changed), as before.
 * So a check takes w->lock only when events are queued or counted at that
 * moment, and on a request thread makes one system call a request (the
 * FIONREAD), as the read(2) it replaces did. A read(2) of an empty queue
 * is never made. w->lock: records added and dropped, events counted,
 * never taken to read a count.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

#define WATCH_FH_MAX 128 /* most bytes of a file handle (MAX_HANDLE_SZ) */

struct ct_watch_rec {
	int wd;	       /* inotify: the watch; fanotify: -1 */
	int own;       /* fanotify: this process's writes are not changes */
	unsigned refs; /* users of the inode (w->lock) */
	/* changes seen so far: written under w->lock, read without it */
	_Atomic uint64_t events;
	struct ct_watch_rec *next;
	/* fanotify: the inode's key */
	uint32_t hash;
	int fh_type;
	unsigned fh_len;
	int32_t fsid[2];
	unsigned char fh[]; /* fh_len bytes */
};

/* One instance of either kind: its records in chains by wd (inotify) or
 * by the hash of the file handle (fanotify). */
struct watch_inst {
	/* opened at the first add; -1 before (or when it cannot be). Set
	 * once under w->lock before any record of the instance is made: a
	 * check of a record reads it without the lock. */
	int fd;
	int err; /* why it cannot be opened (then every add fails with it) */
	/* 1 while a drain of fd under w->lock may hold events it read and
	 * has not counted yet (watch_drain, watch_pending) */
	atomic_int draining;
	struct ct_watch_rec **tab; /* chains */
	size_t size, n;		   /* buckets (a power of two), records */
};

struct cachetier__watch {
	struct disk_mutex lock; /* DISK_LOCK_CT_WATCH: a leaf */
	struct watch_inst ino;	/* inotify: blobs, decoded copies, data files without fanotify */
	struct watch_inst fan;	/* fanotify: data files */
	pid_t pid;		/* ours: fanotify events of it are not changes */
	unsigned refs;		/* the cache tier's, and one per record */
	uint64_t id;		/* this watch's number, never reused (the threads' marks) */
	/* counts (tests): looks at the fds (a check's FIONREAD, an add's
	 * drain: cachetier__watch_reads), read()s of them, takes of w->lock */
	_Atomic uint64_t looks, drains, locks;
};

static _Atomic uint64_t watch_ids;
/* The calling thread's request count (cachetier_request_begin; 0: not a
 * request thread, read at every check) and the request it last read each
 * instance of watch 'id' in (stamp[0]: inotify, [1]: fanotify). */
static _Thread_local uint64_t req_stamp;
static _Thread_local struct {
	uint64_t id, stamp[2];
} req_read;

/* The calling thread's request's stop (cachetier_request_stop), or NULL. */
static _Thread_local const struct cachetier_stop *req_stop;

void cachetier_request_begin(void)
{
	req_stamp++;
	req_stop = NULL;
}

const struct cachetier_stop *cachetier_request_stop(const struct cachetier_stop *stop)
{
	const struct cachetier_stop *old = req_stop;

	req_stop = stop;
	return old;
}

int cachetier_request_stoppable(void)
{
	return req_stop != NULL;
}

int cachetier_request_stopped(void)
{
	return req_stop && req_stop->asked(req_stop->arg);
}

void cachetier_request_tick(struct timespec *t)
{
	clock_gettime(CLOCK_REALTIME, t);
	t->tv_nsec += (long)CACHETIER_STOP_TICK_MS * 1000000;
	if (t->tv_nsec >= 1000000000) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000;
	}
}

int cachetier_request_wait(pthread_cond_t *cond, struct disk_mutex *lock,
			   const struct timespec *until, int (*done)(void *arg), void *arg)
{
	int stoppable = cachetier_request_stoppable();

	for (;;) {
		struct timespec t;

		if (done(arg))
			return 0;
		if (stoppable && cachetier_request_stopped())
			return -EINTR;
		if (!stoppable && !until) {
			disk_cond_wait(cond, lock);
			continue;
		}
		if (!stoppable) {
			t = *until;
		} else {
			cachetier_request_tick(&t);
			if (until && (until->tv_sec < t.tv_sec ||
				      (until->tv_sec == t.tv_sec && until->tv_nsec < t.tv_nsec)))
				t = *until;
		}
		if (disk_cond_timedwait(cond, lock, &t) == ETIMEDOUT && until &&
		    t.tv_sec == until->tv_sec && t.tv_nsec == until->tv_nsec && !done(arg))
			return -ETIMEDOUT;
	}
}

struct cachetier__watch *cachetier__watch_new(void)
{
	struct cachetier__watch *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	disk_mutex_init(&w->lock, DISK_LOCK_CT_WATCH);
	w->ino.fd = w->fan.fd = -1;
	w->refs = 1;
	w->id = atomic_fetch_add(&watch_ids, 1) + 1;
	return w;
}

/* w->lock taken, counted (cachetier__watch_locks). */
static void watch_lock(struct cachetier__watch *w)
{
	disk_mutex_lock(&w->lock);
	atomic_fetch_add_explicit(&w->locks, 1, memory_order_relaxed);
}

static void watch_unref(struct cachetier__watch *w) /* w->lock held; unlocks it */
{
	if (--w->refs > 0) {
		disk_mutex_unlock(&w->lock);
		return;
	}
	disk_mutex_unlock(&w->lock);
	if (w->ino.fd >= 0)
		close(w->ino.fd);
	if (w->fan.fd >= 0)
		close(w->fan.fd);
	free(w->ino.tab);
	free(w->fan.tab);
	disk_mutex_destroy(&w->lock);
	free(w);
}

void cachetier__watch_close(struct cachetier__watch *w)
{
	if (!w)
		return;
	watch_lock(w);
	watch_unref(w);
}

static uint32_t key_hash(const int32_t fsid[2], int type, const unsigned char *fh, unsigned len)
{
	uint32_t h = 2166136261u ^ (uint32_t)fsid[0] ^ ((uint32_t)fsid[1] << 7) ^ (uint32_t)type;

	for (unsigned i = 0; i < len; i++)
		h = (h ^ fh[i]) * 16777619u;
	return h;
}

static struct ct_watch_rec **rec_slot(struct watch_inst *in, int wd)
{
	struct ct_watch_rec **p = &in->tab[(unsigned)wd & (in->size - 1)];

	while (*p && (*p)->wd != wd)
		p = &(*p)->next;
	return p;
}

static struct ct_watch_rec **fid_slot(struct watch_inst *in, uint32_t h, const int32_t fsid[2],
				      int type, const unsigned char *fh, unsigned len)
{
	struct ct_watch_rec **p = &in->tab[h & (in->size - 1)];

	while (*p && ((*p)->hash != h || (*p)->fh_type != type || (*p)->fh_len != len ||
		      (*p)->fsid[0] != fsid[0] || (*p)->fsid[1] != fsid[1] ||
		      memcmp((*p)->fh, fh, len) != 0))
		p = &(*p)->next;
	return p;
}

/* r's count one more (w->lock held: the only writer; checks load it). */
static void rec_changed(struct ct_watch_rec *r)
{
	atomic_store_explicit(&r->events,
			      atomic_load_explicit(&r->events, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static void all_changed(struct watch_inst *in)
{
	for (size_t i = 0; i < in->size; i++)
		for (struct ct_watch_rec *r = in->tab[i]; r; r = r->next)
			rec_changed(r);
}

static void inotify_events(struct watch_inst *in, const char *buf, ssize_t n)
{
	for (const char *p = buf; p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)(const void *)p;
		struct ct_watch_rec *r;

		if (ev->mask & IN_Q_OVERFLOW)
			all_changed(in);
		else if (ev->wd >= 0 && in->size && (r = *rec_slot(in, ev->wd)) != NULL)
			rec_changed(r); /* IN_MODIFY, or IN_IGNORED: not watched any more */
		p += sizeof(*ev) + ev->len;
	}
}

/* One fanotify event, its metadata m (copied out: events are only 4-byte
 * aligned in the buffer) and its bytes ev: this process's is not a change
 * (above); another's counts for the record its FID names (none: a mark
 * removed since, nothing to count). */
static void fanotify_event(struct cachetier__watch *w, const struct fanotify_event_metadata *m,
			   const char *ev)
{
	struct watch_inst *in = &w->fan;
	const char *p = ev + m->metadata_len, *end = ev + m->event_len;

	if (m->mask & FAN_Q_OVERFLOW) {
		all_changed(in);
		return;
	}
	if (m->pid == w->pid)
		return;
	while (p + sizeof(struct fanotify_event_info_header) <= end) {
		struct fanotify_event_info_header h;

		memcpy(&h, p, sizeof(h));
		if (h.len < sizeof(h) || p + h.len > end)
			break;
		if (h.info_type == FAN_EVENT_INFO_TYPE_FID &&
		    h.len >= sizeof(struct fanotify_event_info_fid) + sizeof(struct file_handle)) {
			const char *fidp = p + sizeof(struct fanotify_event_info_fid);
			struct file_handle fh;
			int32_t fsid[2];

			memcpy(fsid, p + offsetof(struct fanotify_event_info_fid, fsid),
			       sizeof(fsid));
			memcpy(&fh, fidp, sizeof(fh));
			if (fh.handle_bytes <= WATCH_FH_MAX &&
			    sizeof(struct fanotify_event_info_fid) + sizeof(fh) + fh.handle_bytes <=
				h.len) {
				const unsigned char *b =
				    (const unsigned char *)fidp + sizeof(struct file_handle);
				struct ct_watch_rec *r = NULL;

				if (in->size)
					r = *fid_slot(
					    in, key_hash(fsid, fh.handle_type, b, fh.handle_bytes),
					    fsid, fh.handle_type, b, fh.handle_bytes);
				if (r)
					rec_changed(r);
				return;
			}
			break;
		}
		p += h.len;
	}
	all_changed(in); /* an event whose file cannot be told: every file may have changed */
}

/* Read every queued event of in: a read that leaves room for the largest
 * event in buf took every event queued (the kernel stops only at an empty
 * queue or an event that does not fit), so no second read() is made to
 * hear EAGAIN (a read() a look, not two). in->draining is set before the
 * first read and cleared once every event read is counted (release): a
 * check that finds the queue empty without the lock waits for such a
 * drain (watch_pending). w->lock held. */
static void watch_drain(struct cachetier__watch *w, struct watch_inst *in)
{
	char buf[4096] __attribute__((aligned(8)));
	int fan = in == &w->fan;
	size_t largest = fan ? FAN_EVENT_METADATA_LEN + sizeof(struct fanotify_event_info_fid) +
				   sizeof(struct file_handle) + WATCH_FH_MAX
			     : sizeof(struct inotify_event) + NAME_MAX + 1;

	if (in->fd < 0)
		return;
	atomic_store(&in->draining, 1); /* before the read: seq_cst */
	for (;;) {
		ssize_t n;

		atomic_fetch_add_explicit(&w->drains, 1, memory_order_relaxed);
		n = read(in->fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* EAGAIN: none left */
		if (fan) {
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
			inotify_events(in, buf, n);
		}
		if ((size_t)n + largest <= sizeof(buf))
			break;
	}
	atomic_store_explicit(&in->draining, 0, memory_order_release);
}

/* An add's drain (w->lock held): a look, counted as one. */
static void watch_drain_add(struct cachetier__watch *w, struct watch_inst *in)
{
	atomic_fetch_add_explicit(&w->looks, 1, memory_order_relaxed);
	watch_drain(w, in);
}

static int tab_grow(struct watch_inst *in, int fan)
{
	size_t size = in->size ? in->size * 2 : 64;
	struct ct_watch_rec **tab = calloc(size, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < in->size; i++)
		for (struct ct_watch_rec *r = in->tab[i], *next; r; r = next) {
			uint32_t h = fan ? r->hash : (uint32_t)r->wd;

			next = r->next;
			r->next = tab[h & (size - 1)];
			tab[h & (size - 1)] = r;
		}
	free(in->tab);
	in->tab = tab;
	in->size = size;
	return 0;
}

/* The open and grow half of watch_add and watch_add_own: instance in
 * (inotify; fanotify with own) made at its first use, with room for one
 * more record. 0 or -errno (the instance's failure is kept: not tried
 * again). w->lock held. */
static int inst_ready(struct cachetier__watch *w, struct watch_inst *in, int own)
{
	if (in->fd < 0 && in->err == 0) {
		if (own) {
			w->pid = getpid();
			in->fd = fanotify_init(FAN_CLASS_NOTIF | FAN_NONBLOCK | FAN_CLOEXEC |
						   FAN_REPORT_FID,
					       O_RDONLY | O_CLOEXEC);
		} else {
			in->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
		}
		if (in->fd < 0)
			in->err = -errno;
	}
	if (in->fd < 0)
		return in->err;
	return in->n >= in->size ? tab_grow(in, own) : 0;
}

/* A new record r into *slot, counted. w->lock held. */
static void rec_insert(struct cachetier__watch *w, struct watch_inst *in,
		       struct ct_watch_rec **slot, struct ct_watch_rec *r)
{
	*slot = r;
	in->n++;
	w->refs++;
}

/* The hand-out half: r gets one more holder, *rec, whose change count
 * starts at *seen (after the caller drained the events before now).
 * w->lock held. */
static void rec_hand(struct ct_watch_rec *r, struct ct_watch_rec **rec, uint64_t *seen)
{
	r->refs++;
	*rec = r;
	*seen = atomic_load_explicit(&r->events, memory_order_relaxed);
}

int cachetier__watch_add(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			 uint64_t *seen)
{
	struct watch_inst *in = &w->ino;
	char path[64];
	struct ct_watch_rec *r, **slot;
	int wd, err;

	*rec = NULL;
	watch_lock(w);
	err = inst_ready(w, in, 0);
	if (err < 0)
		goto out;
	/* the inode of fd, not whatever its name holds by now */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	wd = inotify_add_watch(in->fd, path, IN_MODIFY);
	if (wd < 0) {
		err = -errno;
		goto out;
	}
	watch_drain_add(w, in); /* a change before now is the validation's to find */
	slot = rec_slot(in, wd);
	r = *slot;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r) {
			inotify_rm_watch(in->fd, wd);
			err = -ENOMEM;
			goto out;
		}
		r->wd = wd;
		rec_insert(w, in, slot, r);
	}
	rec_hand(r, rec, seen);
out:
	disk_mutex_unlock(&w->lock);
	return err;
}

int cachetier__watch_add_own(struct cachetier__watch *w, int fd, struct ct_watch_rec **rec,
			     uint64_t *seen)
{
	struct watch_inst *in = &w->fan;
	struct {
		struct file_handle fh;
		unsigned char bytes[WATCH_FH_MAX];
	} h;
	struct statfs sfs;
	int32_t fsid[2];
	struct ct_watch_rec *r, **slot;
	uint32_t hh;
	int mnt, err;

	*rec = NULL;
	watch_lock(w);
	err = inst_ready(w, in, 1);
	if (err < 0)
		goto out;
	h.fh.handle_bytes = WATCH_FH_MAX;
	if (name_to_handle_at(fd, "", &h.fh, &mnt, AT_EMPTY_PATH) < 0 || fstatfs(fd, &sfs) < 0) {
		err = -errno;
		goto out;
	}
	memcpy(fsid, &sfs.f_fsid, sizeof(fsid));
	hh = key_hash(fsid, h.fh.handle_type, h.fh.f_handle, h.fh.handle_bytes);
	slot = fid_slot(in, hh, fsid, h.fh.handle_type, h.fh.f_handle, h.fh.handle_bytes);
	r = *slot;
	if (!r) {
		if (fanotify_mark(in->fd, FAN_MARK_ADD, FAN_MODIFY, fd, NULL) < 0) {
			err = -errno;
			goto out;
		}
		r = calloc(1, sizeof(*r) + h.fh.handle_bytes);
		if (!r) {
			fanotify_mark(in->fd, FAN_MARK_REMOVE, FAN_MODIFY, fd, NULL);
			err = -ENOMEM;
			goto out;
		}
		r->wd = -1;
		r->own = 1;
		r->hash = hh;
		r->fh_type = h.fh.handle_type;
		r->fh_len = h.fh.handle_bytes;
		memcpy(r->fsid, fsid, sizeof(fsid));
		memcpy(r->fh, h.fh.f_handle, h.fh.handle_bytes);
		rec_insert(w, in, slot, r);
	}
	watch_drain_add(w, in); /* a change before now is the validation's to find */
	rec_hand(r, rec, seen);
out:
	disk_mutex_unlock(&w->lock);
	return err;
}

int cachetier__watch_own(const struct ct_watch_rec *r)
{
	return r && r->own; /* set once, before the record is handed out */
}

static struct watch_inst *rec_inst(struct cachetier__watch *w, const struct ct_watch_rec *r)
{
	return r->own ? &w->fan : &w->ino;
}

/* Whether in may hold events no record counts yet, without w->lock (the
 * header's "A check's steps"): events queued on its fd (FIONREAD; an
 * ioctl that fails says so too), or a drain under way, which may have
 * read events it has not counted: the caller then drains under w->lock,
 * which waits for that drain. Else every event queued before the ioctl
 * is counted and its counts are seen by this thread. A look: counted. */
static int watch_pending(struct cachetier__watch *w, struct watch_inst *in)
{
	int queued = 0;

	if (in->fd < 0)
		return 0; /* no instance: no record of it either */
	atomic_fetch_add_explicit(&w->looks, 1, memory_order_relaxed);
	if (ioctl(in->fd, FIONREAD, &queued) < 0 || queued > 0)
		return 1;
	return atomic_load(&in->draining) != 0; /* after the ioctl: seq_cst */
}

/* A check's look at in: once per request on a request thread, else every
 * time (the header's "How often"); w->lock taken only when the look finds
 * events to count (watch_pending). No lock held. */
static void watch_look(struct cachetier__watch *w, struct watch_inst *in)
{
	unsigned k = in == &w->fan;

	if (req_stamp != 0) {
		if (req_read.id != w->id) {
			req_read.id = w->id;
			req_read.stamp[0] = req_read.stamp[1] = 0;
		}
		if (req_read.stamp[k] == req_stamp)
			return; /* looked at in this request already */
	}
	if (watch_pending(w, in)) {
		watch_lock(w);
		watch_drain(w, in);
		disk_mutex_unlock(&w->lock);
	}
	if (req_stamp != 0)
		req_read.stamp[k] = req_stamp;
}

int cachetier__watch_changed(struct cachetier__watch *w, const struct ct_watch_rec *r,
			     uint64_t seen)
{
	watch_look(w, rec_inst(w, r));
	return atomic_load_explicit(&r->events, memory_order_relaxed) != seen;
}

uint64_t cachetier__watch_events(struct cachetier__watch *w, const struct ct_watch_rec *r)
{
	watch_look(w, rec_inst(w, r));
	return atomic_load_explicit(&r->events, memory_order_relaxed);
}

uint64_t cachetier__watch_reads(struct cachetier__watch *w)
{
	return atomic_load_explicit(&w->looks, memory_order_relaxed);
}

uint64_t cachetier__watch_drains(struct cachetier__watch *w)
{
	return atomic_load_explicit(&w->drains, memory_order_relaxed);
}

uint64_t cachetier__watch_locks(struct cachetier__watch *w)
{
	return atomic_load_explicit(&w->locks, memory_order_relaxed);
}

void cachetier__watch_drop_fd(struct cachetier__watch *w, struct ct_watch_rec *r, int fd)
{
	struct watch_inst *in;

	watch_lock(w);
	if (--r->refs > 0) {
		disk_mutex_unlock(&w->lock);
		return;
	}
	in = rec_inst(w, r);
	in->n--;
	if (r->own) {
		*fid_slot(in, r->hash, r->fsid, r->fh_type, r->fh, r->fh_len) = r->next;
		/* fd: the caller's, of this inode; without it the mark (and the
		 * inode) would stay until the instance is closed */
		if (fd >= 0)
			fanotify_mark(in->fd, FAN_MARK_REMOVE, FAN_MODIFY, fd, NULL);
	} else {
		*rec_slot(in, r->wd) = r->next;
		inotify_rm_watch(in->fd, r->wd);
	}
	free(r);
	watch_unref(w);
}

void cachetier__watch_drop(struct cachetier__watch *w, struct ct_watch_rec *r)
{
	assert(!r->own); /* a fanotify record's mark goes through an fd: watch_drop_fd */
	cachetier__watch_drop_fd(w, r, -1);
}
