/*
 * cachetier_read.c — reads of the unit store (cachetier_map.c): a read
 * pins its units, queues and waits for the missing ones (cachetier_queue.c),
 * has units checked on their first read (cachetier_check.c), and queues the
 * readahead its caller asks for.
 *
 * Readahead: the window is the caller's (the scheduler's stream of the
 * reader, fetch/); a read with a window queues the chunks of the window
 * past its end without waiting, and its misses fill their whole chunk.
 *
 * Pins: read_begin pins the units of its range (also while it waits), and
 * read_end unpins them, on any thread: the caller's pin handle
 * (struct cachetier_pin) carries the range. Eviction never touches a
 * pinned unit. A unit's read lock (other processes' evictions fail on it)
 * is taken at its first read and kept idle past its last unpin until it is
 * wanted (below, "Idle read locks").
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

_Thread_local uint64_t cachetier__lock_takes;
_Thread_local uint64_t cachetier__lock_busy;

uint64_t cachetier_lock_takes(void)
{
	return cachetier__lock_takes;
}

uint64_t cachetier_lock_busy(void)
{
	return cachetier__lock_busy;
}

/* ---- reads ---- */

/* Queue readahead after a read ending at end of f: the chunks of
 * [end, end + ahead) (ahead: the caller's window, fetch/), when queue (the
 * window took a step: the scheduler hands a window's chunks over once per
 * step, not at every read of it). ct->lock held. */
static void ra_queue(struct cachetier *ct, struct ct_file *f, uint64_t end, uint64_t ahead,
		     int queue)
{
	uint64_t last;

	/* the last streaming reader's place: eviction spares what lies
	 * ahead of it (cachetier_evict.c, unit_ahead); a read without
	 * ct->lock leaves it, at most a step behind */
	if ((f->ra_window != 0) != (ahead != 0) || (ahead && f->ra_end != end)) {
		/* units whose place ahead of it changes (eviction's order) */
		uint64_t lo = f->ra_end < end ? f->ra_end : end,
			 hi = f->ra_end < end ? end : f->ra_end;

		cachetier__ev_mark_units(ct, f, (uint32_t)(lo / f->unit_bytes),
					 (f->ra_window != 0) != (ahead != 0)
					     ? UINT32_MAX
					     : (uint32_t)(hi / f->unit_bytes + 1));
	}
	f->ra_window = ahead;
	f->ra_end = end;
	if (!ahead || !queue || end >= f->size)
		return;
	/* whole fills as the scheduler's rules bound them (a chunk each):
	 * one request each, from the one the read ends in (its units before
	 * the read's end too: the read's own misses then join that request
	 * instead of splitting it), to the one the window's last byte is in */
	last = (end + ahead - 1) / f->unit_bytes;
	last = cachetier__queue_last(ct, f, CACHETIER_FILL_READAHEAD,
				     last < f->nunits ? (uint32_t)last : f->nunits - 1);
	for (uint64_t c = end / f->unit_bytes; c <= last; c++) {
		if (f->ust[c] == UNIT_EMPTY &&
		    cachetier__queue_run(ct, f, (uint32_t)c, 0, f->nunits, 1) < 0)
			break; /* out of memory: readahead is optional */
	}
}

/* Idle read locks (release on demand; README "Sharing one cache
 * directory"). A unit's read lock on stfd is kept past its last unpin
 * (held[c] with pins[c] 0: idle), so a read of it again takes no fcntl.
 * It goes, one fcntl a run of adjacent units, when (a) this process evicts
 * the unit (the eviction locks through auxfd, another description: take()
 * drops it first, under ct->lock, with no pin on it), (b) another process
 * sharing the directory asks (its eviction's write lock failed: it posted
 * a release request, cachetier__want_post, and skipped the unit; this
 * process looks at the requests at every read's begin and end and at
 * every pass of the flusher, at most a second apart, and drops every idle
 * lock of the objects asked for), (c) an object on the file closes, or the
 * process ends (OFD locks go with their descriptions). */
uint32_t cachetier__lazy_drop(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint64_t calls = 0;
	struct ct_lkrun run = {.calls = &calls};
	uint32_t n = 0;
	int kept = 0;

	if (!f->lazy || !f->held)
		return 0;
	for (uint32_t c = c0; c < c1; c++) {
		if (f->held[c] && f->pins[c] == 0 && !cachetier__fp_revoke(f, c)) {
			kept = 1; /* a read without ct->lock pins it: as a pinned unit */
			continue;
		}
		if (f->held[c] && f->pins[c] == 0) {
			cachetier__lkrun_add(&run, f->stfd, F_UNLCK, c);
			f->held[c] = 0;
			assert(ct->idle_units > 0);
			ct->idle_units--;
			n++;
		}
	}
	cachetier__lkrun_flush(&run);
	ct->unit_read_locks += calls;
	if (c0 == 0 && c1 == f->nunits && !kept)
		f->lazy = 0;
	return n;
}

/* f's release requests moved since this process last acted on them: its
 * idle locks go. f->lock held. */
static void lazy_want(struct cachetier *ct, struct ct_file *f)
{
	uint32_t want = cachetier__st_want(f);

	if (want == __atomic_load_n(&f->want_seen, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&f->want_seen, want, __ATOMIC_RELAXED);
	ct->lock_releases += cachetier__lazy_drop(ct, f, 0, f->nunits);
}

void cachetier__lazy_check(struct cachetier *ct)
{
	uint32_t want = cachetier__want_dir(ct);

	if (want == __atomic_load_n(&ct->want_seen, __ATOMIC_RELAXED))
		return;
	__atomic_store_n(&ct->want_seen, want, __ATOMIC_RELAXED);
	/* objects with no idle lock now keep their old want_seen: a request
	 * made while their units were pinned is met at the unpin (read_unpin) */
	for (struct ct_file *f = ct->files; f; f = f->next) {
		if (!f->live)
			continue;
		disk_mutex_lock(&f->lock);
		if (f->lazy)
			lazy_want(ct, f);
		disk_mutex_unlock(&f->lock);
	}
}

/* Drop a read's pins of units [c0, c1): their read locks stay, idle (see
 * above), unless a release request for f came, or CT_IDLE_MAX units are
 * idle already (then they go, a run in one fcntl). f->lock held (ct->lock
 * too, or not: a read's end takes f->lock alone). */
static void read_unpin(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint64_t calls = 0;
	struct ct_lkrun run = {.calls = &calls};

	for (uint32_t c = c0; c < c1; c++) {
		if (--f->pins[c] != 0 || !f->held[c])
			continue;
		if (ct->idle_units < CT_IDLE_MAX || !cachetier__fp_revoke(f, c)) {
			ct->idle_units++;
			f->lazy = 1;
			continue;
		}
		cachetier__lkrun_add(&run, f->stfd, F_UNLCK, c);
		f->held[c] = 0;
	}
	cachetier__lkrun_flush(&run);
	ct->unit_read_locks += calls;
	if (f->lazy)
		lazy_want(ct, f);
	cachetier__ev_mark_units(ct, f, c0, c1); /* unpinned: eviction's order */
}

/* Unit c of f, read-locked (taken is 1) or not: trusted if the state file
 * still says valid (another process may have evicted it), else its lock
 * goes and it is marked empty. Returns 1 when held. ct->lock and f->lock
 * held. */
static int unit_held(struct cachetier *ct, struct ct_file *f, uint32_t c, int taken)
{
	if (taken) {
		if (cachetier__st_get(f, c)) {
			/* one filled by another process (or mount), not seen
			 * here yet, is checked before it is served (cachetier__units_check) */
			f->held[c] = 1;
			return 1;
		}
		cachetier__unit_unlock(f, c);
	}
	/* evicted, or being evicted or filled, by another process */
	cachetier__ev_mark_units(ct, f, c, c + 1);
	cachetier__unit_set(f, c, UNIT_EMPTY);
	f->seen[c] = 0;
	f->bytes -= cachetier__unit_len(f, c);
	ct->used -= cachetier__unit_len(f, c);
	return 0;
}

/* The pinned units of [c0, c1) this process thinks valid and holds no
 * read lock on: take their read locks (a run of adjacent ones in one call;
 * one at a time when another process holds one of the run), and keep only
 * those the state file still says valid; req[c - c0] is cleared for the
 * others (gone again: fetched anew). A unit held already (pinned by
 * another read here, or idle) is kept with no call (no other process
 * evicts or fills it while the lock is held); one held idle until this
 * read whose state byte went meanwhile is let go and fetched again, as a
 * lock taken anew would find it. No unit this process fills or evicts is
 * valid, so no run converts a lock of its own. ct->lock and f->lock held. */
static void units_hold(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
		       uint8_t *req)
{
	for (uint32_t c = c0; c < c1;) {
		uint32_t k = c;
		int run;

		if (f->ust[c] == UNIT_VALID && f->held[c] && f->pins[c] == 1 &&
		    !cachetier__st_get(f, c) && cachetier__fp_revoke(f, c)) {
			/* held idle until this read, but another process found
			 * it damaged since and cleared its byte (cachetier__unit_corrupt
			 * there: its read lock allows that; no other change
			 * does): as if the lock were taken now */
			cachetier__unit_unlock(f, c);
			ct->unit_read_locks++;
			f->held[c] = 0;
			unit_held(ct, f, c, 0);
			req[c - c0] = 0;
			c++;
			continue;
		}
		while (k < c1 && f->ust[k] == UNIT_VALID && !f->held[k])
			k++;
		if (k == c) {
			c++;
			continue;
		}
		ct->unit_read_locks += k - c > 1;
		run =
		    k - c > 1 && cachetier__ofd_lock_n(f->stfd, F_RDLCK, LK_UNIT(c), k - c, 0) == 0;
		for (; c < k; c++) {
			int taken;

			ct->unit_read_locks += !run;
			taken = run || cachetier__ofd_lock(f->stfd, F_RDLCK, LK_UNIT(c), 0) == 0;

			if (!unit_held(ct, f, c, taken))
				req[c - c0] = 0;
		}
	}
}

/* ---- reads without ct->lock ----
 *
 * A read that asks for no readahead (a planned read's: the plan fetches
 * ahead for it; a probe's, a spot check of a tar header) and whose units
 * are all valid, read-locked by this process (pinned by another read
 * here, or idle) and trusted
 * (seen 1: checked here, the data file unchanged since) is served without
 * ct->lock or any other lock all readers share: it pins each unit with a
 * compare-and-swap on the unit's word f->fp[c], which a read with ct->lock
 * arms (FP_ARMED) once it has served the unit (units_arm). While a unit is
 * armed it is valid, held and trusted: whatever under ct->lock would
 * change that revokes it first (cachetier__fp_revoke: this process's
 * eviction, through lazy_drop; the release of its idle lock, on request
 * or past CT_IDLE_MAX; a damaged unit, cachetier__unit_corrupt; a change of the data
 * file, units_watch), and a unit such reads pin (FP_COUNT) counts as
 * pinned: eviction skips it (unit_evictable, take) and an idle lock stays
 * (lazy_drop), as for a read's pin under ct->lock; its last reader's end
 * then takes ct->lock (FP_WANTED: room_gen moves, release requests are
 * met). What such a read still checks, lock-free, after its pins: the
 * watch's change count (a read() of the watch's fd that finds nothing,
 * under the watch's own lock) against f->wev_fast, which units_watch
 * moves only after it revoked the units the change makes untrusted, then
 * that each unit is still armed (a revocation between its pin and the
 * check) and its state byte still set (another process found it damaged:
 * its read lock allows that), and that no release request came (the
 * directory's counter). What it leaves as it was: the unit's ahead and gap
 * marks and the object's readahead window (ra_queue: a read with ct->lock
 * sets them), and the object's prefetch cursor (an object with one,
 * pf_listed, is read with ct->lock: cachetier__queue_read). It sets the
 * units' time of use (f->fatime, eviction's LRU: cachetier__unit_atime)
 * and the object's in the state file (st_touch). */

/* Pin unit c of f if it is armed; 1 when pinned. */
static int fast_pin(struct ct_file *f, uint32_t c)
{
	uint32_t v = atomic_load_explicit(&f->fp[c], memory_order_acquire);

	do {
		if (!(v & FP_ARMED) || (v & FP_COUNT) == FP_COUNT)
			return 0;
	} while (!atomic_compare_exchange_weak_explicit(&f->fp[c], &v, v + 1, memory_order_acq_rel,
							memory_order_acquire));
	return 1;
}

/* Have this process's release requests moved since it last acted on them
 * (the directory's, or f's)? Lock-free. */
static int fast_wanted(const struct cachetier *ct, const struct ct_file *f)
{
	return cachetier__want_dir(ct) != __atomic_load_n(&ct->want_seen, __ATOMIC_RELAXED) ||
	       cachetier__st_want(f) != __atomic_load_n(&f->want_seen, __ATOMIC_RELAXED);
}

/* Drop the pins of units [c0, c1) of f taken without ct->lock; ct->lock
 * only when a unit was revoked while pinned (its last pin's end: WANTED)
 * or a release request came. */
static void fast_end(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	int slow = 0;

	for (uint32_t c = c0; c < c1; c++) {
		uint32_t v = atomic_fetch_sub_explicit(&f->fp[c], 1, memory_order_acq_rel);

		slow |= (v & FP_COUNT) == 1 && (v & FP_WANTED);
	}
	cachetier__ev_mark_units(ct, f, c0, c1); /* unpinned: eviction's order */
	if (!slow && !fast_wanted(ct, f))
		return;
	atomic_fetch_add_explicit(&ct->read_locks, 1, memory_order_relaxed);
	cachetier__lock(ct);
	for (uint32_t c = c0; c < c1; c++) {
		uint32_t v = atomic_load_explicit(&f->fp[c], memory_order_relaxed);

		while ((v & FP_WANTED) && !(v & FP_COUNT) &&
		       !atomic_compare_exchange_weak(&f->fp[c], &v, v & ~FP_WANTED))
			;
	}
	cachetier__lazy_check(ct);
	disk_mutex_lock(&f->lock);
	if (f->lazy)
		lazy_want(ct, f);
	disk_mutex_unlock(&f->lock);
	ct->room_gen++;
	disk_mutex_unlock(&ct->lock);
}

/* Serve units [c0, c1) of f without ct->lock if every one is armed: 1
 * when pinned so, else 0 (nothing pinned: the caller takes ct->lock). */
static int fast_begin(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint32_t c;
	int ok;

	if (!atomic_load_explicit(&f->fast_ok, memory_order_acquire) || fast_wanted(ct, f))
		return 0;
	for (c = c0; c < c1 && fast_pin(f, c); c++)
		;
	ok = c == c1 && cachetier__watch_events(f->w, f->wrec) ==
			    atomic_load_explicit(&f->wev_fast, memory_order_acquire);
	for (uint32_t u = c0; u < c1 && ok; u++)
		ok = (atomic_load_explicit(&f->fp[u], memory_order_acquire) & FP_ARMED) &&
		     cachetier__st_get(f, u);
	if (!ok) {
		fast_end(ct, f, c0, c);
		return 0;
	}
	{
		int64_t now = cachetier__now_ns();

		cachetier__st_touch(f, now);
		for (c = c0; c < c1; c++)
			__atomic_store_n(&f->fatime[c], now, __ATOMIC_RELAXED);
		cachetier__ev_mark_units(ct, f, c0, c1); /* eviction's order (cachetier_evheap.c) */
	}
	atomic_fetch_add_explicit(&ct->hits_fast, 1, memory_order_relaxed);
	return 1;
}

/* After a read with ct->lock served units [c0, c1) of f (pinned, valid,
 * read-locked, checked or trusted): arm those this process trusts, so the
 * next reads of them take no ct->lock (above), when f's file is watched
 * and f has no prefetch cursor. ct->lock and f->lock held. */
static void units_arm(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	/* filled here under a watch that ignores our writes (seen 3): trusted
	 * as seen 1 is, but for a weak ETag's anchor (unit_served, cachetier_weak.c),
	 * so armed only where the ETag needs none */
	int filled_ok = ct->cfg.weak_etag_trust || !cachetier__etag_weak(f->etag, f->size);

	if (!f->wrec || f->wfail || f->pf_listed || cachetier__live_check_off())
		return;
	for (uint32_t c = c0; c < c1; c++) {
		if (f->ust[c] == UNIT_VALID && f->held[c] &&
		    (f->seen[c] == 1 || (f->seen[c] == 3 && filled_ok)))
			atomic_fetch_or_explicit(&f->fp[c], FP_ARMED, memory_order_release);
	}
	atomic_store_explicit(&f->wev_fast, f->wevents, memory_order_release);
	atomic_store_explicit(&f->fast_ok, 1, memory_order_release);
}

/* One more idle unit, unless CT_IDLE_MAX are: 1 counted, 0 not. */
static int idle_take(struct cachetier *ct)
{
	uint32_t n = atomic_load(&ct->idle_units);

	do {
		if (n >= CT_IDLE_MAX)
			return 0;
	} while (!atomic_compare_exchange_weak(&ct->idle_units, &n, n + 1));
	return 1;
}

int cachetier__unit_filled_idle(struct cachetier *ct, struct ct_file *f, uint32_t u)
{
	if (!idle_take(ct))
		return 0;
	f->lazy = 1;
	f->held[u] = 1;
	units_arm(ct, f, u, u + 1);
	return 1;
}

int cachetier__unit_landed_idle(struct cachetier *ct, struct ct_file *f, uint32_t u)
{
	int filled_ok = ct->cfg.weak_etag_trust || !cachetier__etag_weak(f->etag, f->size);

	if (!idle_take(ct))
		return 0;
	f->lazy = 1;
	f->held[u] = 1;
	/* armed as units_arm would, where a read under ct->lock armed f's
	 * units before (fast_ok: f is watched, its watch's count in wev_fast)
	 * and f has no prefetch cursor (pf_listed, written under ct->lock:
	 * read atomically); a change of the data file seen since revokes it
	 * under f->lock (units_watch) */
	if (atomic_load_explicit(&f->fast_ok, memory_order_acquire) &&
	    !__atomic_load_n(&f->pf_listed, __ATOMIC_ACQUIRE) && !cachetier__live_check_off() &&
	    (f->seen[u] == 1 || (f->seen[u] == 3 && filled_ok)))
		atomic_fetch_or_explicit(&f->fp[u], FP_ARMED, memory_order_release);
	return 1;
}

/* A read's state across its looks at its units (cachetier__file_read_begin
 * and its steps below; the reader's thread alone). */
struct rd_begin {
	uint32_t c0, c1; /* its units */
	uint8_t *req;	 /* per unit: this read saw it queued or filling */
	uint32_t vgen;	 /* f->vgen as the read began */
	int whole;	 /* a miss fills the rest of f (the rules), else its units */
	int repairs;	 /* its units fetched again: failed, or damaged */
	int waited;	 /* it waited for a unit (a miss) */
};

/* The read's first step: its units pinned (an idle one is idle no more),
 * their times of use and eviction's order set, f's prefetch cursor moved
 * and its readahead queued as the rules say, and how much a miss fills.
 * ct->lock held; f->lock taken for the pins. */
static void read_pin(struct cachetier *ct, struct ct_file *f, struct rd_begin *rb, uint64_t end,
		     int probe, uint64_t ahead, int queue)
{
	/* the object's version as this read begins: a change found while it
	 * waits (weak_drop) ends it with ESTALE, whatever its units' states
	 * then (dropped, refilled, still filling): never EIO, never a mix */
	rb->vgen = f->vgen;
	disk_mutex_lock(&f->lock);
	for (uint32_t c = rb->c0; c < rb->c1; c++) {
		if (f->pins[c]++ == 0 && f->held[c])
			ct->idle_units--; /* idle no more */
	}
	disk_mutex_unlock(&f->lock);
	f->atime_ns = cachetier__now_ns();
	cachetier__st_touch(f, f->atime_ns);
	for (uint32_t c = rb->c0; c < rb->c1; c++) { /* unit LRU (cachetier_evict.c) */
		cachetier__ua_set(f, c, f->atime_ns);
		cachetier__unread_set(f, c, 0);
		f->gap[c] = 0;
	}
	cachetier__ev_mark_units(ct, f, rb->c0, rb->c1); /* eviction's order (cachetier_evheap.c) */
	/* its prefetch cursor moves as the rules say (what readers touch first) */
	cachetier__queue_read(ct, f);
	/* a probe says nothing of what comes next: no readahead, and a miss
	 * fills only the units it reads */
	if (!probe)
		ra_queue(ct, f, end, ahead, queue);
	/* how much a miss fills: the scheduler's rules (a probe: the units it reads) */
	rb->whole = !probe && cachetier__miss_whole(ct, f, ahead);
}

/* One look at the read's units: an empty one queued (or its fill's error
 * taken), each one not valid yet noted in rb->req. Returns 0 or a negative
 * errno (-ESTALE: f's bytes changed since the read began; the failed
 * fill's error; -EIO: fetched again too often; -ECANCELED: the tier
 * stops); *ready 1 when every unit is valid, *gen the f->ugen a wait from
 * here waits past. ct->lock held; f->lock taken. */
static int read_look(struct cachetier *ct, struct ct_file *f, struct rd_begin *rb, uint64_t *gen,
		     int *ready)
{
	int err = 0;

	*ready = 1;
	if (f->vgen != rb->vgen)
		return -ESTALE; /* the store's bytes changed while this read waited */
	disk_mutex_lock(&f->lock);
	*gen = f->ugen; /* a wake-up of f's readers from now on: look again */
	/* (the fill writer commits units as they land: none to commit here) */
	units_hold(ct, f, rb->c0, rb->c1, rb->req);
	disk_mutex_unlock(&f->lock);
	for (uint32_t c = rb->c0; c < rb->c1 && err == 0; c++) {
		uint8_t *req = &rb->req[c - rb->c0];

		switch (f->ust[c]) {
		case UNIT_VALID:
			break;
		case UNIT_EMPTY:
			if (*req && f->uerr[c] < 0) {
				/* the fill this read waited for failed (its error
				 * cleared when a fill claims the unit again) */
				err = f->uerr[c];
				break;
			}
			if (*req && ++rb->repairs > 2) {
				/* landed and dropped again (found damaged by
				 * another read) as fast as it is fetched */
				err = -EIO;
				break;
			}
			err = rb->whole ? cachetier__queue_run(ct, f, c, 0, f->nunits, 0)
					: cachetier__queue_run(ct, f, c, c, rb->c1, 0);
			*req = 1;
			*ready = 0;
			break;
		case UNIT_QUEUED:
			if (!*req)
				cachetier__queue_wait(ct, f, c);
			*req = 1;
			*ready = 0;
			break;
		case UNIT_FILLING:
			*req = 1;
			*ready = 0;
			break;
		default: /* UNIT_EVICTING: empty soon, then queued */
			ct->evicting_waits += !rb->waited && *ready;
			*ready = 0;
			break;
		}
	}
	if (err == 0 && !*ready && ct->stopping)
		err = -ECANCELED;
	return err;
}

/* The read's units all valid: checked (a weak ETag's probe, then each
 * unit's first read here). 0: served as they are; 1: units found damaged
 * were dropped to be fetched again (look again); a negative errno (-EIO:
 * damaged again as fast as they are fetched). ct->lock held (the checks
 * may drop it). */
static int read_verify(struct cachetier *ct, struct ct_file *f, struct rd_begin *rb)
{
	int bad = cachetier__weak_check(ct, f, rb->c0, rb->c1);

	if (bad == 0)
		bad = cachetier__units_check(ct, f, rb->c0, rb->c1);
	if (bad > 0 && ++rb->repairs > 2)
		bad = -EIO; /* damaged again as fast as it is fetched */
	if (bad <= 0)
		return bad;
	for (uint32_t c = rb->c0; c < rb->c1; c++) { /* fetch the damaged units again */
		if (f->ust[c] == UNIT_EMPTY)
			rb->req[c - rb->c0] = 0;
	}
	return 1;
}

/* The read's last step: its units unpinned when it failed (err < 0), else
 * armed for reads without ct->lock; counted a miss (it waited, since
 * wait_from) or a hit. ct->lock held; f->lock taken. */
static void read_done(struct cachetier *ct, struct ct_file *f, const struct rd_begin *rb, int err,
		      int64_t wait_from)
{
	disk_mutex_lock(&f->lock);
	if (err < 0)
		read_unpin(ct, f, rb->c0, rb->c1);
	else
		units_arm(ct, f, rb->c0, rb->c1);
	disk_mutex_unlock(&f->lock);
	if (err == 0 && rb->waited) {
		ct->misses++;
		ct->miss_wait_ns += (uint64_t)(cachetier__mono_ns() - wait_from);
	} else if (err == 0) {
		ct->hits++;
	}
}

int cachetier__file_read_begin(struct cachetier *ct, struct ct_file *f, uint64_t off, uint64_t len,
			       int probe, uint64_t ahead, int queue, uint32_t *pc0, uint32_t *pc1,
			       int *fast)
{
	uint64_t unit_bytes = f->unit_bytes;
	uint8_t reqbuf[64];
	struct rd_begin rb = {.c0 = (uint32_t)(off / unit_bytes), .req = reqbuf};
	int err = 0;
	int64_t wait_from = 0;
	uint64_t takes = cachetier__lock_takes, waits = 0; /* read_locks */

	rb.c1 = len ? (uint32_t)((off + len - 1) / unit_bytes + 1) : rb.c0;
	*pc0 = rb.c0;
	*pc1 = rb.c1;
	/* a window with nothing to queue (no step) needs no ct->lock, nor a
	 * probe (no window: it asks nothing more of a hit) */
	*fast = (probe || !ahead || !queue) && rb.c1 - rb.c0 <= FP_COUNT &&
		fast_begin(ct, f, rb.c0, rb.c1);
	if (*fast)
		return 0;
	if (rb.c1 - rb.c0 > sizeof(reqbuf))
		rb.req = calloc(rb.c1 - rb.c0, 1);
	else
		memset(reqbuf, 0, sizeof(reqbuf));
	if (!rb.req)
		return -ENOMEM;

	cachetier__lock(ct);
	cachetier__lazy_check(ct); /* other processes' release requests */
	read_pin(ct, f, &rb, off + len, probe, ahead, queue);
	for (;;) {
		uint64_t gen = 0;
		int ready;

		err = read_look(ct, f, &rb, &gen, &ready);
		if (err == 0 && ready) {
			err = read_verify(ct, f, &rb);
			if (err > 0)
				continue; /* the damaged units: fetched again */
		}
		if (err == 0 && f->vgen != rb.vgen)
			err = -ESTALE; /* changed while a check dropped ct->lock */
		if (err < 0 || ready)
			break;
		if (cachetier_request_stopped()) {
			/* its sender gave up (cachetier_request_stop): the fills
			 * it asked for go on for whoever reads them next */
			err = -EINTR;
			break;
		}
		if (!rb.waited)
			wait_from = cachetier__mono_ns();
		rb.waited = 1;
		/* on f's lock alone: woken by its units' publish (which takes no
		 * ct->lock), or by units_wake; the lock taken again (counted) */
		waits +=
		    (uint64_t)cachetier__units_wait(ct, f, rb.c0, rb.c1, UNITS_WAIT_BOUND_S, gen);
	}
	read_done(ct, f, &rb, err, wait_from);
	disk_mutex_unlock(&ct->lock);
	atomic_fetch_add_explicit(&ct->read_locks, cachetier__lock_takes - takes + waits,
				  memory_order_relaxed);
	if (rb.req != reqbuf)
		free(rb.req);
	return err;
}

void cachetier__file_read_end(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			      int fast)
{
	if (fast) {
		fast_end(ct, f, c0, c1);
		return;
	}
	/* f's lock alone: the pins, the units' idle read locks and f's
	 * release requests are f's; the tier's lock only when the
	 * directory's release requests moved (lazy_check walks every object) */
	disk_mutex_lock(&f->lock);
	read_unpin(ct, f, c0, c1);
	disk_mutex_unlock(&f->lock);
	ct->room_gen++;
	if (cachetier__want_dir(ct) == __atomic_load_n(&ct->want_seen, __ATOMIC_RELAXED))
		return;
	atomic_fetch_add_explicit(&ct->read_locks, 1, memory_order_relaxed);
	cachetier__lock(ct);
	cachetier__lazy_check(ct);
	disk_mutex_unlock(&ct->lock);
}
