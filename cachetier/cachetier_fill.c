/*
 * cachetier_fill.c — the fill workers of the unit store (cachetier_map.c)
 * and its flusher: a worker takes a job from the queues (cachetier_queue.c),
 * claims its units and sends their requests, whose sinks hand the bytes to
 * the fill writer (cachetier_write.c), which writes them and marks them valid;
 * the flusher records filled units in the maps.
 *
 * Sharing: several processes may use one cache directory at once. Each
 * unit's truth while they run is the state file data/<hash>.st
 * (cachetier_share.c), not this process's ust[]: a fill holds the unit's
 * write lock (F_OFD_SETLK on stfd) from before its fetch until the state
 * says valid; a reader holds the unit's read lock from its first read
 * until it is wanted (idle past read_end: cachetier_read.c) and trusts a
 * unit only after taking it and seeing it valid in the state file; an
 * eviction takes the write lock on auxfd (so it excludes this process's
 * own readers and fills too), clears the state, then punches. A unit
 * another process is filling is waited for (the lock is polled), never
 * fetched twice. The protocol is in README.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

/* ---- fill workers ---- */

/* May a PF_FIT prefetch fill of f (len bytes, its units claimed) go
 * ahead without evicting: the directory's usage, this process's fills in
 * flight and bytes being punched leave room for it within
 * cache_size_bytes, and the disk keeps its reserve? 1: yes; 0: no
 * (counted as unfit). ct->lock held on entry and return; dropped around
 * statvfs (cachetier__disk_avail). */
static int pf_fits(struct cachetier *ct, struct ct_file *f, uint64_t len)
{
	/* the disk after the other fills in flight, each byte once (not in
	 * the estimate and again in reserved: cachetier__disk_free) */
	uint64_t avail = cachetier__disk_free(ct, len, 0);
	struct ct_room r;

	/* each byte in one of the three (landed units are in the usage, out
	 * of reserved: cachetier__acct_get) */
	cachetier__acct_get(ct, &r);
	if (r.usage + r.reserved + r.evicting + len <= ct->cfg.cache_size_bytes &&
	    avail >= ct->cfg.min_free_bytes + len) {
		ct->room_bytes += len; /* to be written: the next free-space check's */
		return 1;
	}
	f->pf_unfit += len;
	ct->unfit_bytes += len;
	return 0;
}

/* Room for a fill of units [c, c + n) of f (len bytes): a prefetch fill
 * (pf) evicts a unit a plan needs only when that unit's next use is
 * further than the nearest of its own (cachetier__make_room_near). ct->lock
 * held. */
static int fill_room(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, uint64_t len,
		     int pf)
{
	int64_t near = CT_NEAR_NONE;

	for (uint32_t u = c; pf && u < c + n; u++) {
		int64_t d = cachetier__plan_near(ct, f, u);

		near = d < near ? d : near;
	}
	return cachetier__make_room_near(ct, len, pf, near);
}

/* Does the sink's gathered buffer complete a unit (or the run)? */
static int sink_unit_done(const struct fill_sink *s)
{
	uint64_t at = s->cur->off, ue;

	ue = s->start + ((at - s->start) / s->unit_bytes + 1) * s->unit_bytes;
	return at + s->cur->used >= (ue < s->end ? ue : s->end);
}

/* Has the writer at least 'limit' buffers to write? Then the sink answers
 * BACKEND_SINK_FULL, and the writer calls backend_sink_ready when it is
 * down to FILL_WQ_RESUME (cachetier_write.c, buf_done): the flag is set before the
 * count is read again, and the writer reads the flag after its count falls
 * (both sequentially consistent), so either this sees the fall or the
 * writer sees the flag: a pause always has its wake-up. */
static int sink_full(struct cachetier *ct, unsigned limit)
{
	if (atomic_load_explicit(&ct->wr.wq_bufs, memory_order_relaxed) < limit)
		return 0;
	atomic_store(&ct->wr.wq_wake, 1);
	if (atomic_load(&ct->wr.wq_bufs) < limit)
		return 0; /* the flag stays: one wake-up to spare at most */
	return BACKEND_SINK_FULL;
}

/* May s (a prefetch fill's, asynchronous) take a fresh buffer from the
 * pool? While fewer than FILL_BUFS_MAX are out; once it paused for one
 * (s->pool_wait, set here), while fewer than FILL_BUFS_RESUME are out: a
 * fill goes on with room for a run of buffers, so it does not pause again
 * at the next one. A no asks for the put's wake-up (cachetier__buf_room). */
static int sink_pool_room(struct cachetier *ct, struct fill_sink *s)
{
	if (cachetier__buf_room(ct, s->pool_wait ? FILL_BUFS_RESUME : FILL_BUFS_MAX)) {
		s->pool_wait = 0;
		return 1;
	}
	s->pool_wait = 1;
	return 0;
}

/* The len-0 ask of a sink paused for a fresh buffer (the store's pass
 * after backend_sink_ready, its poll, its 1 s bound): BACKEND_SINK_FULL
 * (it stays paused, no system call) while FILL_BUFS_RESUME or more are
 * out; else 0, the buffer taken now, so the next sink asked in the same
 * pass sees it counted: a pass resumes as many fills as the pool has
 * buffers for under the mark, not every paused one. A buffer taken with
 * no bytes received into it goes back at the run's end (fill_run_done).
 * At the store's poll (which leaves a paused transfer paused) room under
 * the mark means a put brought the count there after this sink asked for
 * its wake-up (cachetier__buf_room): that put's backend_sink_ready asks
 * it again, and the buffer taken now is its. */
static int sink_pool_ask(struct cachetier *ct, struct fill_sink *s)
{
	if (!cachetier__buf_room(ct, FILL_BUFS_RESUME))
		return BACKEND_SINK_FULL;
	s->pool_wait = 0;
	if (!s->cur && s->next < s->end) {
		s->cur = cachetier__buf_get(ct);
		if (!s->cur)
			return -ENOMEM;
		*s->cur = (struct fill_buf){.slot = s->slot, .off = s->next};
	}
	return 0;
}

/* The sink's buffer s->cur is full: to the fill writer, unless the run
 * has at most half a buffer left (then it is kept in s->full and goes with
 * the run's last bytes and its end in one push, fill_run_done: one batch
 * of the writer, so one pwritev and one take of ct->lock for both, not
 * two wake-ups; its units wait for those bytes, at most FILL_BUF_BYTES / 2
 * more). A full buffer kept before goes first. */
static void sink_full_buf(struct cachetier *ct, struct fill_sink *s)
{
	if (s->full) {
		cachetier__wq_push(ct, s->full);
		s->full = NULL;
	}
	if (s->end - s->next <= FILL_BUF_BYTES / 2)
		s->full = s->cur;
	else
		cachetier__wq_push(ct, s->cur);
}

/* backend_sink_cb: may run on the store's I/O thread; no locks, no disk.
 * An asynchronous fill's (BACKEND_READ_PAUSABLE) takes no bytes while the
 * writer has FILL_WQ_MAX buffers to write (BACKEND_SINK_FULL: its transfer
 * pauses, the same bytes come again), and keeps it paused until the writer
 * is down to a quarter of them (FILL_WQ_RESUME), which the writer says
 * (backend_sink_ready). */
static int fill_sink_write(void *arg, uint64_t off, const void *buf, size_t len)
{
	struct fill_sink *s = arg;
	struct cachetier *ct = s->slot->ct;
	size_t done = 0;

	if (atomic_load_explicit(&s->slot->withdraw, memory_order_relaxed))
		return FILL_WITHDRAWN;
	if (len == 0) {	       /* the store's poll while no bytes arrive (or paused) */
		if (s->full) { /* kept for bytes that do not come: its units wait no more */
			cachetier__wq_push(ct, s->full);
			s->full = NULL;
		}
		if (s->cur && s->cur->used && sink_unit_done(s)) {
			cachetier__wq_push(ct, s->cur);
			s->cur = NULL;
		}
		if (s->pool_wait) /* paused for a buffer: it goes on with one */
			return sink_pool_ask(ct, s);
		/* paused for the writer's queue: it stays paused till a quarter */
		if (s->q_wait && sink_full(ct, FILL_WQ_RESUME + 1))
			return BACKEND_SINK_FULL;
		s->q_wait = 0;
		return 0;
	}
	/* the backend promises contiguous pieces inside the range: anything
	 * else would leave a hole in units about to be marked valid */
	if (off != s->next || len > s->end - off)
		return -EIO;
	if (s->slot->fill->async && sink_full(ct, FILL_WQ_MAX)) {
		s->q_wait = 1;
		return BACKEND_SINK_FULL;
	}
	s->q_wait = 0;
	/* a prefetch's piece that needs a fresh buffer, only while the pool
	 * has fewer than FILL_BUFS_MAX out (FILL_BUFS_RESUME once it paused for
	 * one): else a pause, none of it taken (a piece of more than a buffer
	 * may take more than one then: the bound is passed by at most that) */
	if (s->slot->pf && s->slot->fill->async &&
	    (!s->cur || len > FILL_BUF_BYTES - s->cur->used) && !sink_pool_room(ct, s))
		return BACKEND_SINK_FULL;
	if (!s->wrote)
		s->first_ns = cachetier__mono_ns();
	s->wrote = 1;
	while (done < len) {
		size_t piece = len - done;

		if (!s->cur) {
			s->cur = cachetier__buf_get(ct);
			if (!s->cur)
				return -ENOMEM;
			*s->cur = (struct fill_buf){.slot = s->slot, .off = s->next};
		}
		if (piece > FILL_BUF_BYTES - s->cur->used)
			piece = FILL_BUF_BYTES - s->cur->used;
		/* received there already (fill_sink_mem): no copy */
		if (s->cur->data + s->cur->used != (const char *)buf + done)
			memcpy(s->cur->data + s->cur->used, (const char *)buf + done, piece);
		s->cur->used += piece;
		done += piece;
		s->next += piece;
		if (s->cur->used == FILL_BUF_BYTES) {
			sink_full_buf(ct, s);
			s->cur = NULL;
		}
	}
	atomic_store_explicit(&s->slot->got, s->next - s->start, memory_order_relaxed);
	return 0;
}

/* backend_sink_mem_cb: the gathered buffer's free end, for the bytes at
 * off (the next expected), up to the run's end: the store's I/O thread
 * receives them there and fill_sink_write takes them without a copy. None
 * when the fill is withdrawn (its usual path: the piece's write says so).
 * None with *len 0 (full: the transfer pauses before a receive, nothing
 * received, held or copied out and back) when fill_sink_write would refuse
 * any piece now: an asynchronous fill's writer has FILL_WQ_MAX buffers to
 * write, or a prefetch's needs a fresh buffer while the pool has
 * FILL_BUFS_MAX out; both asks set the writer's wake-up flag first, as a
 * refusal does, so the pause has its backend_sink_ready. A buffer taken
 * here with no bytes received into it is filled later or put back at the
 * run's end (fill_run_done). */
static void *fill_sink_mem(void *arg, uint64_t off, size_t *len)
{
	struct fill_sink *s = arg;
	struct cachetier *ct = s->slot->ct;
	size_t room;

	if (off != s->next || s->next >= s->end ||
	    atomic_load_explicit(&s->slot->withdraw, memory_order_relaxed))
		return NULL;
	if (s->slot->fill->async && sink_full(ct, FILL_WQ_MAX)) {
		s->q_wait = 1;
		*len = 0;
		return NULL;
	}
	s->q_wait = 0;
	if (!s->cur) {
		if (s->slot->pf && s->slot->fill->async && !sink_pool_room(ct, s)) {
			*len = 0;
			return NULL;
		}
		s->cur = cachetier__buf_get(ct);
		if (!s->cur)
			return NULL;
		*s->cur = (struct fill_buf){.slot = s->slot, .off = s->next};
	}
	room = FILL_BUF_BYTES - s->cur->used;
	if (room > s->end - s->next)
		room = (size_t)(s->end - s->next);
	if (*len > room)
		*len = room;
	return s->cur->data + s->cur->used;
}

int cachetier__read_version(struct cachetier *ct, const char *key, const char *etag, uint64_t size,
			    const uint64_t *next, uint64_t end, backend_sink_cb sink, void *arg)
{
	while (*next < end) {
		uint64_t from = *next;
		ssize_t n = backend_read_version_cb(ct->be, key, etag, size, from,
						    (size_t)(end - from), sink, arg);

		if (n < 0)
			return (int)n;
		if (*next == from)
			return -EIO; /* the object is shorter than its size said */
	}
	return 0;
}

/* Write the maps whose batch timer ran out. ct->lock held; dropped
 * around each write. */
static void flush_old_maps(struct cachetier *ct)
{
	int64_t now = cachetier__now_ns();
	struct ct_file *f;

again:
	for (f = ct->files; f; f = f->next) {
		if (cachetier__flush_due(ct, f, now)) {
			/* live entries are never freed before close: f stays valid */
			disk_mutex_unlock(&ct->lock);
			cachetier__file_flush(ct, f);
			cachetier__lock(ct);
			goto again;
		}
	}
}

/* Start the fill of units [c, c + n) of f (len bytes; ra, pf: a readahead,
 * a prefetch fill): counted in flight, marked filling, published in slot,
 * room made. 0: go ahead (*peer: every unit is valid in the state file
 * already, another process filled it); -1: skipped (a PF_FIT prefetch
 * that does not fit, or a PF_EVICT one with nothing it may evict), the run
 * given back. ct->lock held. */
static int fill_begin(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
		      uint32_t n, int ra, int pf)
{
	uint64_t len = cachetier__run_len(f, c, n);
	/* a PF_FIT prefetch never evicts: a run that needs room is
	 * skipped (units another process filled need none) */
	int fit = pf == CT_PF_RANGE_FIT || (pf == CT_PF_OBJ && !f->pf_evict), peer = 1;

	/* claimed at once (pf_fits may drop ct->lock): every exit below
	 * commits or aborts the run */
	cachetier__run_claim(ct, f, c, n);
	if (pf) { /* counted from here: its prefetch has not ended yet */
		f->pf_inflight++;
		ct->pf_running++;
	}
	for (uint32_t u = c; u < c + n && peer; u++)
		peer = cachetier__st_get(f, u);
	if (fit && !peer && pf_fits(ct, f, len) != 1) {
		f->pf_inflight--;
		ct->pf_running--;
		cachetier__run_abort(ct, f, c, n, 0, 0, 0, NULL);
		cachetier__run_ended(f, c, n);
		return -1;
	}
	ct->reserved += len;
	ct->fills_inflight++;
	if (!pf)
		ct->rd_inflight++;
	slot->f = f;
	slot->c = c;
	slot->n = n;
	slot->pf = pf;
	/* through O_DIRECT (cachetier_direct.c): every prefetch fill under
	 * auto; under prefetch a `shardfs prefetch` cursor's (PF_COLD), whose
	 * bytes no reader reads soon: where fresh memory is dear (a VM that
	 * gives free memory back to its host) the copy into the page cache's
	 * new pages was most of a buffered prefetch's CPU
	 * (tests/bench/README.md, "L4: fresh page cache") */
	slot->direct = ct->cfg.direct_fills == CACHETIER_DIRECT_AUTO
			   ? pf != 0
			   : ct->cfg.direct_fills == CACHETIER_DIRECT_PREFETCH && pf == CT_PF_OBJ &&
				 f->pf_cold;
	slot->small = cachetier__fill_small(ct, f, c, n, pf);
	ct->small_inflight += slot->small;
	slot->seq = ++ct->fill_seq;
	atomic_store(&slot->withdraw, 0);
	atomic_store(&slot->got, 0);
	if (ra)
		ct->readahead_fills++;
	if (!fit && !peer && fill_room(ct, f, c, n, len, pf) < 0) {
		/* a PF_EVICT prefetch fill only evicts units read
		 * already: none left, so it is skipped like an unfit one */
		ct->reserved -= len;
		ct->fills_inflight--;
		if (ra)
			ct->readahead_fills--;
		if (atomic_load(&slot->withdraw))
			ct->pf_withdrawing--; /* asked while room was made */
		ct->small_inflight -= slot->small;
		slot->f = NULL;
		f->pf_inflight--;
		ct->pf_running--;
		f->pf_unfit += len;
		ct->unfit_bytes += len;
		cachetier__run_abort(ct, f, c, n, 0, 0, 0, NULL);
		cachetier__run_ended(f, c, n);
		return -1;
	}
	return 0;
}

/* A fill of units [c, c + n) of f ended (fill_begin's counts undone, each
 * unit's outcome in claim[] and errs[]; units fill_publish made valid
 * already, their requests counted: FILL_PUBLISHED, pub_bytes): account for it and wake
 * whoever waits. ct->lock held. */
static void fill_end(struct cachetier *ct, struct ct_slot *slot, struct ct_file *f, uint32_t c,
		     uint32_t n, int ra, int pf, const int *claim, const int *errs,
		     const uint32_t *crc, int waited, uint64_t pub_bytes)
{
	struct ct_lkrun run = {0};
	int err = 0, withdrawn, more, failed = 0;
	uint64_t unreserve = 0;

	/* the units published (pub_bytes) left reserved as they landed, those
	 * committed below leave it as they become valid (cachetier__run_commit,
	 * one step with the usage); the rest (adopted, aborted) below */
	(void)pub_bytes;
	ct->fills_inflight--;
	if (!pf)
		ct->rd_inflight--;
	if (!pf && ra)
		ct->ra_busy--;
	withdrawn = atomic_load(&slot->withdraw);
	if (withdrawn)
		ct->pf_withdrawing--;
	ct->small_inflight -= slot->small;
	slot->f = NULL;
	slot->busy = 0;
	if (pf) {
		f->pf_inflight--;
		ct->pf_running--;
	}
	for (uint32_t i = 0; i < n && err == 0; i++)
		err = errs[i];
	if (err < 0 && withdrawn && ra)
		ct->readahead_fills--; /* counted again when it is fetched */
	if (pf && err == 0)
		cachetier__pf_ended(ct);
	/* every unit of the run ends here unless fill_publish committed it:
	 * committed, adopted (another process's) or aborted */
	for (uint32_t i = 0; i < n; i++) {
		if (claim[i] == FILL_PUBLISHED)
			continue;
		if (claim[i] == 1 && errs[i] == 0)
			cachetier__run_commit(ct, f, c + i, 1, &crc[i], waited, &run);
		else if (errs[i] == 0)
			cachetier__run_adopt(ct, f, c + i, 1, waited);
		else
			cachetier__run_abort(ct, f, c + i, 1, errs[i], claim[i] == 1,
					     withdrawn ? pf : 0, &run);
		if (claim[i] != 1 || errs[i] != 0)
			unreserve += cachetier__unit_len(f, c + i);
		failed |= errs[i] < 0 && !(withdrawn && pf);
		cachetier__run_ended(f, c + i, 1);
	}
	atomic_fetch_sub(&ct->reserved, unreserve);
	ct->fill_errors += failed; /* a fill that failed, once whatever its units */
	cachetier__lkrun_flush(&run);
	if (pf == CT_PF_RANGE_FIT || pf == CT_PF_RANGE_EVICT)
		cachetier__plan_filled(ct, f, c, n); /* between planned extents: needed by none */
	/* a reader waits only for units it pinned, and the stop for the last
	 * fill: the fill wakes the readers of its own units only (each on a
	 * condition variable of its own, on its object's list, under the
	 * object's lock: cachetier_run.c), not every waiting reader (a tier-wide
	 * broadcast woke them all, about 25 wake-ups per read that waited in
	 * a planned epoch before only fills with a pinned unit woke) */
	if (ct->stopping) {
		cachetier__units_wake(ct);
	} else {
		disk_mutex_lock(&f->lock);
		cachetier__units_landed(ct, f, c, n);
		disk_mutex_unlock(&f->lock);
		if (ct->fills_inflight == 0)
			pthread_cond_broadcast(&ct->unit_cond); /* cachetier__units_stop */
	}
	/* its slot is free. A store on its I/O thread: a worker is woken if
	 * one is needed (cachetier__work_wake: none while one woken has not
	 * run yet). A store that reads in the caller holds a worker per fill:
	 * one more is woken, every one when prefetch may go on. */
	more = ct->dq || ct->rq || ct->pf || ct->pr;
	if (more && slot->fill->async) {
		cachetier__work_wake(ct);
	} else if (more) {
		ct->work_wakes++;
		if (withdrawn || (!pf && ra && ct->ra_busy == 0))
			pthread_cond_broadcast(&ct->work_cond); /* prefetch may go on */
		else
			pthread_cond_signal(&ct->work_cond);
	}
	if (cachetier__flush_due(ct, f, cachetier__now_ns()))
		pthread_cond_signal(&ct->flush_cond);
}

void cachetier__fill_end_locked(struct ct_slot *slot)
{
	struct ct_fill *fl = slot->fill;

	fill_end(slot->ct, slot, slot->f, slot->c, slot->n, fl->ra, slot->pf, fl->claim, fl->errs,
		 fl->crc, fl->waited, fl->pub_bytes);
}

/* The fill of slot ended: account for it (fill_end) and free the slot.
 * Takes ct->lock (no lock held on entry): on the fill writer, or in the
 * worker for a store that reads in the caller. slot is another fill's
 * once ct->lock is dropped. */
static void fill_finish(struct ct_slot *slot)
{
	struct cachetier *ct = slot->ct;

	cachetier__lock(ct);
	cachetier__fill_end_locked(slot);
	disk_mutex_unlock(&ct->lock);
}

/* backend_done_cb of a run's request (units [c + i, c + k) of the slot):
 * an answer that ended early at the object's end without all of the run is
 * asked for again from where it stopped (as cachetier__read_version); else
 * the gathered bytes (a failed run's are dropped) and the run's end go to
 * the fill writer (fill_run_end). No lock, no disk: the store's I/O thread
 * (or the worker). */
static void fill_run_done(void *arg, int err, uint64_t bytes)
{
	struct ct_slot *slot = arg;
	struct cachetier *ct = slot->ct;
	struct ct_fill *fl = slot->fill;
	struct ct_file *f = slot->f;
	struct fill_buf *last, *full;

	if (err == 0 && fl->s.next < fl->s.end) {
		if (bytes == 0) {
			err = -EIO; /* the object is shorter than its size said */
		} else {
			backend_read_version_async_mem(ct->be, f->key, f->etag, f->size, fl->s.next,
						       (size_t)(fl->s.end - fl->s.next),
						       (slot->small ? BACKEND_READ_SMALL : 0) |
							   (fl->async ? BACKEND_READ_PAUSABLE : 0),
						       fill_sink_write, fill_sink_mem, &fl->s,
						       fill_run_done, slot);
			return;
		}
	}
	backend_log_failure(ct->be, f->key, err, "fill"); /* once per object and cause */
	if (fl->s.cur && fl->s.cur->used && err == 0) {
		last = fl->s.cur; /* the run's last bytes */
	} else {
		cachetier__buf_put(ct, fl->s.cur);
		last = NULL;
	}
	fl->s.cur = NULL;
	full = fl->s.full;
	fl->s.full = NULL;
	*fl->end = (struct fill_buf){.slot = slot, .end = 1, .err = err};
	/* with its end (and a full buffer kept for them, whole bytes that
	 * arrived before any failure): one wake-up of the writer for all (a
	 * small planned range's whole body is often these); the slot is the
	 * writer's from the push on */
	cachetier__wq_push3(ct, full, last, fl->end);
}

/* Send the request of the fill's next run: the next maximal run of units
 * whose claim is 1 (one request each: a chunk, or a random read's units of
 * one), its bytes written into f's data file by the fill writer (durable
 * only at the next map flush), each unit's CRC32C into crc[]; or, with none
 * left, end the fill. The slot holds the units' write locks, so no one else
 * trusts or writes the range. No lock held; the worker, or the fill writer
 * after the run before. A store that reads in the caller reads here: the
 * worker then waits for the writer to end each run (bounded by the disk). */
uint32_t cachetier__fill_skip(struct ct_slot *slot, uint32_t i)
{
	struct ct_fill *fl = slot->fill;

	while (i < slot->n && fl->claim[i] != 1) {
		if (fl->claim[i] != FILL_PUBLISHED)
			fl->errs[i] = fl->claim[i] < 0 ? fl->claim[i] : 0;
		i++;
	}
	return i;
}

void cachetier__fill_next(struct ct_slot *slot)
{
	struct ct_fill *fl = slot->fill;
	struct ct_file *f = slot->f;

	for (;;) {
		uint32_t i = cachetier__fill_skip(slot, fl->i), k;
		uint64_t off, len;

		if (i >= slot->n) {
			fill_finish(slot);
			return;
		}
		for (k = i; k < slot->n && fl->claim[k] == 1;)
			k++;
		fl->i = i;
		fl->k = k;
		fl->pub = fl->land = i;
		fl->werr = 0;
		off = cachetier__unit_off(f, slot->c + i);
		len = cachetier__run_len(f, slot->c + i, k - i);
		fl->wnext = fl->wtop = off;
		memset(fl->crc + i, 0, sizeof(*fl->crc) * (k - i));
		fl->s = (struct fill_sink){.start = off,
					   .next = off,
					   .end = off + len,
					   .slot = slot,
					   .unit_bytes = f->unit_bytes};
		fl->t0 = cachetier__mono_ns();
		/* only from the listed version: units of two versions never mix */
		backend_read_version_async_mem(
		    slot->ct->be, f->key, f->etag, f->size, off, (size_t)len,
		    (slot->small ? BACKEND_READ_SMALL : 0) |
			(fl->async ? BACKEND_READ_PAUSABLE : 0),
		    fill_sink_write, fill_sink_mem, &fl->s, fill_run_done, slot);
		if (fl->async)
			return; /* the slot is the request's now */
		while (sem_wait(&fl->run_sem) < 0 && errno == EINTR)
			;
	}
}

/* A free slot (not busy), or NULL. ct->lock held. */
static struct ct_slot *slot_free(struct cachetier *ct)
{
	for (unsigned i = 0; i < ct->nslots; i++) {
		if (!ct->slots[i].busy)
			return &ct->slots[i];
	}
	return NULL;
}

/* Jobs were queued, or a slot freed with jobs queued: wake a fill worker
 * if one is needed. The counts (struct cachetier): workers waiting on
 * work_cond (work_idle), signals sent none has taken yet (work_woken), a
 * batch of pushes open (wake_hold, cachetier_wake_hold) and whether it
 * pushed (wake_held), the wake-up calls (work_wakes). ct->lock held. */
void cachetier__work_wake(struct cachetier *ct)
{
	if (ct->wake_hold) {
		ct->wake_held = 1; /* one wake-up at the batch's end */
		return;
	}
	/* none waits, a worker woken already takes every job a free slot
	 * allows before it waits again (a store that reads in the caller: one
	 * per fill, so one more is woken while any waits), or no slot is free
	 * (the fill that frees one wakes one then) */
	if (ct->work_idle <= ct->work_woken ||
	    (ct->work_woken > 0 && backend_reads_async(ct->be)) || !slot_free(ct))
		return;
	ct->work_woken++;
	ct->work_wakes++;
	pthread_cond_signal(&ct->work_cond);
}

void cachetier_wake_hold(struct cachetier *ct, int on)
{
	cachetier__lock(ct);
	if (on) {
		ct->wake_hold++;
	} else if (ct->wake_hold > 0 && --ct->wake_hold == 0 && ct->wake_held) {
		ct->wake_held = 0;
		if (ct->dq || ct->rq || ct->pf || ct->pr)
			cachetier__work_wake(ct);
	}
	disk_mutex_unlock(&ct->lock);
}

/* A fill worker: takes a job (cachetier__queue_next) while a slot is free,
 * unless a batch of pushes is open (wake_hold: its end wakes one), starts
 * its fill (fill_begin: counts, room), claims its units (the units' write
 * locks; fill_claim may poll while another process fills one) and sends
 * its first request (fill_next), then takes the next job: it waits for no
 * request. Woken by cachetier__work_wake, the stop, or every second. */
static void *worker_main(void *arg)
{
	struct cachetier *ct = arg;
	uint64_t busy = 0; /* its takes of ct->lock that found it held, counted */

	cachetier__lock(ct);
	while (!ct->stopping) {
		struct ct_slot *slot = slot_free(ct);
		struct ct_fill *fl;
		struct ct_file *f;
		uint32_t c, n;
		int ra, pf, waited = 0;

		if (ct->wake_hold || !slot || !cachetier__queue_next(ct, &f, &c, &n, &ra, &pf)) {
			ct->work_idle++;
			cachetier__cond_wait_s(&ct->work_cond, &ct->lock, 1);
			ct->work_idle--;
			if (ct->work_woken > 0)
				ct->work_woken--;
			continue;
		}
		/* taken before fill_begin, which may drop ct->lock (pf_fits,
		 * fill_room): no other worker takes it meanwhile */
		slot->busy = 1;
		if (fill_begin(ct, slot, f, c, n, ra, pf) < 0) {
			slot->busy = 0;
			continue;
		}
		disk_mutex_unlock(&ct->lock);

		fl = slot->fill;
		cachetier__run_lock(ct, f, c, n, 1, fl->claim, &waited);
		fl->ra = ra;
		fl->waited = waited;
		fl->pub_bytes = 0;
		fl->i = 0;
		cachetier__fill_next(slot); /* the slot is the request's now */

		cachetier__lock(ct);
		atomic_fetch_add_explicit(&ct->wk_busy, cachetier__lock_busy - busy,
					  memory_order_relaxed);
		busy = cachetier__lock_busy;
	}
	disk_mutex_unlock(&ct->lock);
	return NULL;
}

/* The cache over its limit with no fill here to evict it down: a fill
 * went over it while every unit was pinned, or was bigger than the cache
 * (a chunk of --chunk-size in a smaller one), and no fill came since. Once
 * a read ended or a fill was done after the last try, evict back down to
 * the limit (what is still pinned stays). ct->lock held. */
static void flush_over_limit(struct cachetier *ct)
{
	struct ct_room r;

	cachetier__acct_get(ct, &r);
	if (ct->fills_inflight || ct->room_gen == ct->room_gen_tried ||
	    r.usage + r.reserved <= ct->cfg.cache_size_bytes)
		return;
	ct->room_gen_tried = ct->room_gen;
	(void)cachetier__make_room(ct, 0, 0);
}

/* The flusher: writes the maps whose batch is due (a worker signals a full
 * batch; the timer catches the rest), so the fdatasync before each map
 * never holds up a fill; and evicts a cache left over its limit back down
 * (flush_over_limit), within a second of the read or fill that let it. */
static void *flusher_main(void *arg)
{
	struct cachetier *ct = arg;

	cachetier__lock(ct);
	while (!ct->stopping) {
		flush_old_maps(ct);
		cachetier__dec_release(ct); /* decoded copies other processes evicted */
		cachetier__lazy_check(ct);  /* idle read locks other processes asked for */
		flush_over_limit(ct);
		if (!ct->stopping)
			cachetier__cond_wait_s(&ct->flush_cond, &ct->lock, 1);
	}
	disk_mutex_unlock(&ct->lock);
	return NULL;
}

/* Fill workers when the store's reads run on its I/O thread
 * (backend_reads_async): they only claim units, make room and send
 * requests, so two serve any number of fills in flight: one may wait
 * for an eviction's file operations (punching, the map's durable unlink)
 * or poll another process's unit lock while the other keeps claiming.
 * More only contend for ct->lock: with 4, a planned epoch on the link
 * emulator (tests/bench/link_bench.py --quick, L8g) cost the daemon
 * 8-13 % more CPU and about 40 % more futex calls in the workers, and its
 * epochs took 10 % longer, on 2 cores. A store that reads in the calling
 * thread (local, fault://) gets cfg.fill_threads of them: each fill holds
 * one. */
#define CT_ASYNC_WORKERS 2u

int cachetier__units_start(struct cachetier *ct)
{
	unsigned nworkers = ct->cfg.fill_threads;

	if (backend_reads_async(ct->be) && nworkers > CT_ASYNC_WORKERS)
		nworkers = CT_ASYNC_WORKERS;
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->pf_tail = &ct->pf;
	ct->nslots = ct->cfg.fill_threads + ct->cfg.small_fills;
	if (sem_init(&ct->wr.wsem, 0, 0) < 0)
		return -errno;
	ct->workers = calloc(nworkers, sizeof(*ct->workers));
	ct->slots = calloc(ct->nslots, sizeof(*ct->slots));
	if (!ct->workers || !ct->slots)
		return -ENOMEM;
	for (unsigned i = 0; i < ct->nslots; i++) {
		struct ct_fill *fl = calloc(1, sizeof(*fl));

		ct->slots[i].ct = ct;
		ct->slots[i].fill = fl;
		if (!fl)
			return -ENOMEM;
		/* per unit of a fill: at most one chunk's units */
		fl->claim = calloc(ct->upc, sizeof(*fl->claim));
		fl->errs = calloc(ct->upc, sizeof(*fl->errs));
		fl->crc = calloc(ct->upc, sizeof(*fl->crc));
		fl->end = malloc(sizeof(*fl->end));
		fl->async = backend_reads_async(ct->be);
		if (!fl->claim || !fl->errs || !fl->crc || !fl->end ||
		    sem_init(&fl->run_sem, 0, 0) < 0)
			return -ENOMEM;
	}
	if (pthread_create(&ct->wr.writer, NULL, cachetier__writer_main, ct) != 0)
		return -EAGAIN;
	pthread_setname_np(ct->wr.writer, "shardfs-write");
	ct->wr.have_writer = 1;
	if (pthread_create(&ct->flusher, NULL, flusher_main, ct) != 0)
		return -EAGAIN;
	pthread_setname_np(ct->flusher, "shardfs-flush"); /* top -H, perf */
	ct->have_flusher = 1;
	for (unsigned i = 0; i < nworkers; i++) {
		int err = pthread_create(&ct->workers[i], NULL, worker_main, ct);

		if (err)
			return -err;
		pthread_setname_np(ct->workers[i], "shardfs-fill");
		ct->nworkers++;
	}
	return 0;
}

/* Stop: workers leave (cachetier_cancel), then the fills in flight end.
 * That wait is bounded by the store: after backend_cancel each request
 * completes at once with -ECANCELED; without it, within the store's retry
 * budget (each attempt within the stall timeout), as a worker's blocking
 * fill was before. */
void cachetier__units_stop(struct cachetier *ct)
{
	struct ct_job *j;

	cachetier_cancel(ct);
	if (ct->have_flusher)
		pthread_join(ct->flusher, NULL);
	ct->have_flusher = 0;
	for (unsigned i = 0; i < ct->nworkers; i++)
		pthread_join(ct->workers[i], NULL);
	free(ct->workers);
	ct->workers = NULL;
	ct->nworkers = 0;
	cachetier__lock(ct);
	while (ct->fills_inflight > 0)
		disk_cond_wait(&ct->unit_cond, &ct->lock); /* fill_end broadcasts it */
	disk_mutex_unlock(&ct->lock);
	if (ct->wr.have_writer) { /* no fill left: nothing more is pushed */
		atomic_store(&ct->wr.wstop, 1);
		sem_post(&ct->wr.wsem);
		pthread_join(ct->wr.writer, NULL);
		ct->wr.have_writer = 0;
		sem_destroy(&ct->wr.wsem);
	}
	cachetier__buf_pool_free(ct);
	for (unsigned i = 0; ct->slots && i < ct->nslots; i++) {
		struct ct_fill *fl = ct->slots[i].fill;

		if (fl) {
			free(fl->claim);
			free(fl->errs);
			free(fl->crc);
			free(fl->end);
			sem_destroy(&fl->run_sem);
			free(fl);
		}
	}
	free(ct->slots);
	ct->slots = NULL;
	ct->nslots = 0;

	/* queued fills never run: their units stay empty */
	cachetier__lock(ct);
	while ((j = ct->dq) || (j = ct->rq)) {
		if (j == ct->dq)
			ct->dq = j->next;
		else
			ct->rq = j->next;
		disk_mutex_lock(&j->f->lock); /* the states (cachetier__unit_set) */
		for (uint32_t u = j->c; u < j->c + j->n; u++) {
			cachetier__unit_set(j->f, u, UNIT_EMPTY);
			j->f->uerr[u] = -ECANCELED;
		}
		disk_mutex_unlock(&j->f->lock);
		free(j);
	}
	ct->dq_tail = &ct->dq;
	ct->rq_tail = &ct->rq;
	ct->rd_queued = 0;
	ct->ra_busy = 0;
	while (ct->pf)
		cachetier__pf_unlink(ct, ct->pf);
	while (ct->pr)
		cachetier__range_pop(ct);
	cachetier__units_wake(ct);
	disk_mutex_unlock(&ct->lock);

#ifndef NDEBUG
	cachetier__run_check(ct); /* every claimed unit was committed or aborted */
#endif
	/* no other thread runs now: record every filled unit, free */
	for (struct ct_file *f = ct->files; f; f = f->next)
		cachetier__file_flush(ct, f);
	cachetier__ev_free(ct);
	while (ct->files) {
		struct ct_file *f = ct->files;

		ct->files = f->next;
		cachetier__file_free(f);
	}
}
