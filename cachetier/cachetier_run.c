/*
 * cachetier_run.c — the unit store's fill API: every fill of units (a
 * worker's demand, readahead, prefetch and plan-range fills,
 * cachetier_fill.c and cachetier_write.c; a GetBatch request,
 * cachetier_batch.c) changes unit states only through these calls, on
 * runs of units [c, c + n) of one object (struct ct_file):
 *
 *   claim   cachetier__run_claim (ct->lock, then the object's lock for
 *           the states, as every change of one: cachetier__unit_set,
 *           cachetier_run.h): the units are UNIT_FILLING;
 *           readers wait for them, no other fill takes them.
 *           cachetier__run_lock (no lock): the claim across processes,
 *           each unit's OFD write lock, per unit 1 (held: fetch it), 0
 *           (another process filled it: adopt it) or a negative errno.
 *   write   cachetier__run_write (no lock; the fill writer): bytes into the
 *           data file at their offset, each unit's CRC32C as they pass.
 *           cachetier__run_discard: punch bytes written for units that
 *           are not committed (never left on the disk); cachetier__run_alloc:
 *           a run's blocks allocated before its first write.
 *   commit  cachetier__run_commit (ct->lock; takes the object's lock,
 *           ct_file.lock, once a run: the pins decide what becomes of a
 *           unit's lock): written units valid (CRC,
 *           state byte, usage, map batch, write lock to the pinning
 *           readers' read lock); cachetier__run_adopt: units another
 *           process filled, valid here.
 *   abort   cachetier__run_abort (ct->lock): units not made valid: empty
 *           (with the error readers of them get, or none: a pinning
 *           reader's unit is queued on demand), or back to their prefetch
 *           (a withdrawn prefetch fill); write locks this fill holds go.
 *
 * The rule that no claimed unit is left: each claimed unit ends in
 * exactly one of commit, adopt or abort. A fill's per-unit outcome array
 * (ct_fill.claim/errs) and a batch request's runs are walked whole at
 * their end (fill_end, bt_finish), and every early exit (no room, unfit,
 * a failed cross-process claim) aborts the run it claimed. Debug builds
 * assert it at each of those exits (cachetier__run_ended: no unit of the
 * run is UNIT_FILLING) and at close: once every fill ended, no unit is
 * UNIT_FILLING or UNIT_QUEUED (cachetier__run_check, from
 * cachetier__units_stop).
 *
 * Read pins are the other half of the unit store's API:
 * cachetier__file_read_begin / _end (cachetier_read.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cachetier_i.h"

/* Claim unit c of f for a fill: 1 when this process holds its write lock
 * and must fetch it, 0 when another process filled it meanwhile (nothing
 * held), or a negative errno (-ECANCELED when the cache tier closes while
 * another process's fill is awaited). No ct->lock held. */
static int fill_claim(struct cachetier *ct, struct ct_file *f, uint32_t c, int *waited)
{
	unsigned sleep_us = 200;
	int asked = 0;

	for (;;) {
		int err;

		if (cachetier__st_get(f, c))
			return 0;
		err = cachetier__ofd_lock(f->stfd, F_WRLCK, LK_UNIT(c), 0);
		if (err == 0) {
			if (!cachetier__st_get(f, c))
				return 1;
			cachetier__unit_unlock(f, c);
			return 0;
		}
		if (err != -EAGAIN)
			return err;
		/* another process fills or evicts it, or holds its read lock
		 * idle (a unit it served, whose state byte a third found
		 * damaged and cleared: cachetier_read.c): ask once for idle
		 * locks to go, and wait for its lock to go */
		if (__atomic_load_n(&ct->stopping, __ATOMIC_ACQUIRE))
			return -ECANCELED;
		if (!asked) {
			asked = 1;
			cachetier__want_post(ct, f);
		}
		*waited = 1;
		cachetier__backoff(&sleep_us, 10000);
	}
}

/* Claim units [c, c + n) of f for a fill into claim[] (fill_claim's
 * answers): their write locks in one call when no other process holds a
 * lock in the run (units another process filled meanwhile give theirs
 * back), else one unit at a time. No ct->lock held. */
static void fill_claim_run(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			   int *claim, int *waited)
{
	if (n > 1 && cachetier__ofd_lock_n(f->stfd, F_WRLCK, LK_UNIT(c), n, 0) == 0) {
		for (uint32_t i = 0; i < n; i++) {
			claim[i] = !cachetier__st_get(f, c + i);
			if (!claim[i])
				cachetier__unit_unlock(f, c + i);
		}
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		claim[i] = fill_claim(ct, f, c + i, waited);
}

/* The claim of unit c of f across processes, never waiting (a batch
 * request's): 1 held, 0 another process filled it, -EAGAIN another
 * process holds it. No ct->lock held. */
static int lock_try(struct ct_file *f, uint32_t c)
{
	if (cachetier__st_get(f, c))
		return 0;
	if (cachetier__ofd_lock(f->stfd, F_WRLCK, LK_UNIT(c), 0) < 0)
		return -EAGAIN;
	if (!cachetier__st_get(f, c))
		return 1;
	cachetier__unit_unlock(f, c);
	return 0;
}

/* Units [c, c + n) of f, claimed by a fill that does not fetch them, are
 * empty again with no error kept; a reader that came to wait for one meanwhile gets it queued
 * on demand. ct->lock held; f->lock taken (the states). */
static void run_abandon(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++) {
		cachetier__unit_set(f, u, UNIT_EMPTY);
		if (f->pins[u] > 0 && cachetier__queue_push_flocked(ct, f, u, 1, 0) < 0) {
			f->uerr[u] = -ENOMEM;
			ct->fill_errors++;
		}
	}
	disk_mutex_unlock(&f->lock);
	cachetier__units_wake(ct);
}

/* A withdrawn prefetch fill of unit c of f ended without it: the unit
 * is empty again and its prefetch looks at it again (its object back at
 * the front of the prefetch order); a reader that came to wait for it
 * meanwhile gets it queued on demand. ct->lock and f->lock held. */
static void pf_withdrawn(struct cachetier *ct, struct ct_file *f, uint32_t c, int pf)
{
	cachetier__unit_set(f, c, UNIT_EMPTY);
	if (f->pins[c] > 0 && cachetier__queue_push_flocked(ct, f, c, 1, 0) < 0) {
		f->uerr[c] = -ENOMEM;
		ct->fill_errors++;
	}
	if (ct->stopping)
		return;
	if (pf != CT_PF_OBJ) { /* a range's unit: first of the ranges again */
		if (ct->pr && ct->pr->f == f && ct->pr->end == c)
			ct->pr->end = c + 1; /* the next unit of the same run */
		else if (ct->pr && ct->pr->f == f && ct->pr->next == c + 1)
			ct->pr->next = c;
		else if (cachetier__range_push(ct, f, c, c + 1, pf == CT_PF_RANGE_EVICT, 1) < 0)
			ct->fill_errors++;
	} else if (!f->pf_listed) {
		f->pf_next = c;
		if (f->pf_end <= c)
			f->pf_end = c + 1;
		cachetier__pf_push(ct, f, 1);
	} else if (c < f->pf_next) {
		f->pf_next = c;
	}
}

/* The outcome of unit u of a fill: err (0 or negative errno), claim (1:
 * this fill fetched it; else another process's fill did, waited: after
 * waiting for it), withdrawn (the fill was stopped for a reader: its
 * enum ct_pf_kind; 0: it was not). Valid,
 * empty with its error, or back to its prefetch; its write lock becomes
 * the pinning readers' read lock or goes. ct->lock and f->lock held (a
 * read's end drops its pins under f->lock alone: the callers take it once a
 * run). */
/* The commit of unit u of f that this fill fetched (its bytes written, its
 * CRC stored and its state-file byte set): valid, with its byte counts,
 * time of use, trust, map batch and lock (landed: a read lock already,
 * cachetier__run_land; else its write lock). Every field it writes is its
 * object's (under f->lock) or an atomic word of the tier, so the fill
 * writer commits units as they land under f->lock alone, with no ct->lock
 * (cachetier__run_landed). What a reader of the unit looks at is written
 * before its state (an atomic word it reads first): seen, the counts, the
 * map batch; the eviction order's mark after it. f->lock held; ct->lock
 * too when tier_locked (its idle lock armed as a read under it arms). */
static void unit_commit(struct cachetier *ct, struct ct_file *f, uint32_t u, int landed,
			int tier_locked, struct ct_lkrun *run)
{
	uint64_t ulen = cachetier__unit_len(f, u);
	int64_t now = cachetier__now_ns();
	struct ct_lkrun one = {0};
	int pinned, keep;

	/* trusted while its file's watch ignores our own writes, else checked
	 * at its first read (cachetier_check.c, units_watch: under f->lock) */
	f->seen[u] = cachetier__seen_filled(f, u);
	f->ufills++; /* a weak ETag's probe covers it (cachetier_read.c) */
	/* no reader waits for it: filled ahead, spared by the evictions of
	 * prefetch fills until it is read */
	cachetier__ua_set(f, u, now);
	cachetier__unread_set(f, u, f->pins[u] == 0);
	cachetier__map_dirty(ct, f, u, now);
	ct->bytes_fetched += ulen;
	f->bytes += ulen;
	ct->used += ulen;
	ct->room_gen++;
	cachetier__unit_set(f, u, UNIT_VALID);
	cachetier__ev_mark_units(ct, f, u, u + 1); /* eviction's order (cachetier_evheap.c) */
	/* readers waiting for it keep it pinned: the write lock becomes their
	 * read lock without a gap an eviction could use; a unit filled ahead
	 * keeps it idle (its first read then takes no fcntl and no ct->lock)
	 * while idle locks are to be had; otherwise it goes */
	pinned = f->pins[u] > 0;
	keep = pinned || (tier_locked ? cachetier__unit_filled_idle(ct, f, u)
				      : cachetier__unit_landed_idle(ct, f, u));
	/* landed: its lock is a read lock already; only one that does not
	 * stay goes (idle locks at CT_IDLE_MAX) */
	if (!landed || !keep)
		cachetier__lkrun_add(run ? run : &one, f->stfd, keep ? F_RDLCK : F_UNLCK, u);
	if (pinned)
		f->held[u] = 1;
	cachetier__lkrun_flush(&one);
}

static void unit_done(struct cachetier *ct, struct ct_file *f, uint32_t u, int err, int claim,
		      int waited, int withdrawn, struct ct_lkrun *run)
{
	struct ct_lkrun one = {0};

	if (err == 0 && claim == 1) {
		unit_commit(ct, f, u, 0, 1, run);
		return;
	}
	ct->room_gen++;
	cachetier__ev_mark_units(ct, f, u, u + 1); /* eviction's order (cachetier_evheap.c) */
	if (err < 0 && withdrawn) {
		pf_withdrawn(ct, f, u, withdrawn);
	} else if (err == 0) { /* another process filled it */
		uint64_t ulen = cachetier__unit_len(f, u);

		f->seen[u] = 0; /* checked when read */
		cachetier__ua_set(f, u, cachetier__now_ns());
		cachetier__unread_set(f, u, f->pins[u] == 0);
		f->bytes += ulen;
		ct->used += ulen;
		if (waited)
			ct->peer_waits++;
		cachetier__unit_set(f, u, UNIT_VALID);
	} else {
		/* the fill's failure is counted once by its caller
		 * (fill_errors: fills, not units) */
		cachetier__unit_set(f, u, UNIT_EMPTY);
		f->uerr[u] = err;
	}
	/* a failed unit this fill claimed: its write lock goes */
	if (claim == 1 && err < 0) {
		cachetier__lkrun_add(run ? run : &one, f->stfd, F_UNLCK, u);
		cachetier__lkrun_flush(&one);
	}
}

void cachetier__run_claim(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	(void)ct;
	disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++) {
		assert(f->ust[u] == UNIT_EMPTY || f->ust[u] == UNIT_QUEUED);
		cachetier__unit_set(f, u, UNIT_FILLING);
		f->uerr[u] = 0; /* a new fill: an earlier one's error is not its */
	}
	disk_mutex_unlock(&f->lock);
}

void cachetier__run_lock(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int wait,
			 int *claim, int *waited)
{
	CT_OFF_LOOP();
	if (!wait) {
		for (uint32_t i = 0; i < n; i++)
			claim[i] = lock_try(f, c + i);
		return;
	}
	fill_claim_run(ct, f, c, n, claim, waited);
}

void cachetier__run_crc(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off, const char *p,
			size_t len)
{
	for (size_t at = 0; at < len;) {
		uint64_t o = off + at;
		uint32_t u = (uint32_t)(o / f->unit_bytes) - c0;
		uint64_t uend = cachetier__unit_off(f, c0 + u + 1);
		size_t piece = (size_t)(uend - o < len - at ? uend - o : len - at);

		crc[u] = disk_crc32c_update(crc[u], p + at, piece);
		at += piece;
	}
}

int cachetier__run_write(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			 const void *buf, size_t len)
{
	int err;

	CT_OFF_LOOP();
	err = disk_pwrite_all(f->datafd, buf, len, off);
	if (err == 0) /* after the write, as cachetier__run_writev's */
		cachetier__run_crc(f, c0, crc, off, buf, len);
	return err;
}

int cachetier__run_writev(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			  const struct iovec *iov, int n)
{
	struct iovec v[CT_WRITEV_MAX];
	int err;

	CT_OFF_LOOP();
	assert(n > 0 && n <= CT_WRITEV_MAX);
	for (int k = 0; k < n; k++)
		v[k] = iov[k];
	err = disk_pwritev_all(f->datafd, v, n, off); /* a short write goes on */
	if (err)
		return err;
	/* the CRCs after the write: the bytes are in this core's cache now
	 * (the sink wrote them on another core; read first by the CRC, they
	 * were read from there twice when the copy found them evicted) */
	for (int k = 0; k < n; k++) {
		cachetier__run_crc(f, c0, crc, off, iov[k].iov_base, iov[k].iov_len);
		off += iov[k].iov_len;
	}
	return 0;
}

void cachetier__run_discard(struct ct_file *f, uint64_t off, uint64_t len)
{
	CT_OFF_LOOP();
	if (len)
		(void)fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
				(off_t)len);
}

int cachetier__run_alloc(struct ct_file *f, uint64_t off, uint64_t len)
{
	CT_OFF_LOOP();
	return fallocate(f->datafd, 0, (off_t)off, (off_t)len) < 0 ? -errno : 0;
}

void cachetier__run_commit(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			   const uint32_t *crc, int waited, struct ct_lkrun *run)
{
	uint64_t added = 0;

	disk_mutex_lock(&f->lock);
	for (uint32_t i = 0; i < n; i++) {
		/* the CRC first: whoever sees the state byte valid sees it */
		cachetier__st_set_crc(f, c + i, crc[i]);
		if (!cachetier__st_set(f, c + i, 1))
			added += cachetier__unit_len(f, c + i);
		unit_done(ct, f, c + i, 0, 1, waited, 0, run);
	}
	disk_mutex_unlock(&f->lock);
	/* from reserved to the usage in one step (the room's accounts) */
	cachetier__acct_move(ct, cachetier__run_len(f, c, n), added);
}

void cachetier__run_land(struct ct_file *f, uint32_t c, uint32_t n, const uint32_t *crc)
{
	for (uint32_t i = 0; i < n; i++)
		cachetier__st_set_crc(f, c + i, crc[i]);
	/* F_RDLCK over this description's own F_WRLCK: a conversion, which
	 * cannot fail; no other thread of this process changes the lock of a
	 * unit being filled */
	cachetier__ofd_lock_n(f->stfd, F_RDLCK, LK_UNIT(c), n, 0);
}

void cachetier__run_landed(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			   int last, int wake, int tier_locked)
{
	/* lock fcntls (only units past CT_IDLE_MAX idle): counted when made
	 * under ct->lock (fill_locked_calls) */
	struct ct_lkrun run = {.calls = tier_locked ? &ct->wr.wlocked_calls : NULL};
	uint64_t added = 0;

	disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++) {
		/* valid on disk (its CRC stored before: cachetier__run_land), as
		 * the directory's usage and other processes see it */
		if (!cachetier__st_set(f, u, 1))
			added += cachetier__unit_len(f, u);
		if (last && u == c + n - 1)
			ct->fills++; /* the run's request: counted before its readers see it */
		/* committed here, under f->lock alone (unit_commit): valid,
		 * readable (armed for reads without ct->lock where f's are) */
		unit_commit(ct, f, u, 1, tier_locked, &run);
	}
	cachetier__lkrun_flush(&run);
	if (wake)
		cachetier__units_landed(ct, f, c, n); /* their readers (f->ugen moves) */
	disk_mutex_unlock(&f->lock);
	/* from reserved to the usage in one step, as the state file counts
	 * them: no sum of the room counts a landed unit twice */
	cachetier__acct_move(ct, cachetier__run_len(f, c, n), added);
}

void cachetier__run_adopt(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			  int waited)
{
	disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++)
		unit_done(ct, f, u, 0, 0, waited, 0, NULL);
	disk_mutex_unlock(&f->lock);
}

void cachetier__run_abort(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int err,
			  int held, int withdrawn, struct ct_lkrun *run)
{
	if (err == 0) {
		for (uint32_t u = c; held && u < c + n; u++)
			cachetier__unit_unlock(f, u);
		run_abandon(ct, f, c, n);
		return;
	}
	disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++)
		unit_done(ct, f, u, err, held ? 1 : -1, 0, withdrawn, run);
	disk_mutex_unlock(&f->lock);
}

/* Has a reader waiting for units [c0, c1) of f, just woken, nothing to do
 * with ct->lock? 1 while each is valid, queued, being filled (not landed)
 * or evicted, and one is not valid yet, and the tier does not stop: what
 * woke it changed none of its units so (another object's eviction, a
 * punch, a batch: cachetier__units_wake wakes every reader). 0: one is
 * empty (failed, or evicted: to be queued), landed (to be committed) or
 * all are valid. f->lock held (unit states are atomic words, written
 * under ct->lock). */
static int units_still(const struct cachetier *ct, const struct ct_file *f, uint32_t c0,
		       uint32_t c1)
{
	int pending = 0;

	if (__atomic_load_n(&ct->stopping, __ATOMIC_ACQUIRE))
		return 0;
	for (uint32_t c = c0; c < c1; c++) {
		uint8_t s = f->ust[c];

		if (s == UNIT_EMPTY)
			return 0;
		pending |= s != UNIT_VALID;
	}
	return pending;
}

/* Has a waiter of units_wait been woken (taken off f's list)? */
static int uwait_woken(void *arg)
{
	return ((const struct ct_uwait *)arg)->woken;
}

int cachetier__units_wait(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			  unsigned secs, uint64_t gen)
{
	struct ct_uwait w = {.c0 = c0, .c1 = c1};
	struct timespec until;

	disk_mutex_lock(&f->lock);
	if (f->ugen != gen) { /* a wake-up of f's readers since the caller looked */
		disk_mutex_unlock(&f->lock);
		return 0;
	}
	pthread_cond_init(&w.cond, NULL);
	w.next = f->uwaits;
	f->uwaits = &w;
	atomic_fetch_add_explicit(&ct->unit_waiters, 1, memory_order_relaxed);
	if (!f->uw_listed) { /* units_wake finds f's readers (ct->lock held) */
		f->uw_listed = 1;
		f->uw_next = ct->uw_files;
		ct->uw_files = f;
	}
	/* ct->lock goes while f->lock is held: a waker under ct->lock
	 * (units_wake) takes f->lock, so it finds w listed and signals it
	 * once this thread waits; one under f->lock alone finds it listed */
	disk_mutex_unlock(&ct->lock);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	for (;;) {
		/* a request with a stop looks at it every tick, listed all along
		 * (cachetier_request_stop): given up, it leaves as at the bound */
		if (cachetier_request_wait(&w.cond, &f->lock, &until, uwait_woken, &w) < 0) {
			/* the bound, or given up: still listed */
			struct ct_uwait **pp = &f->uwaits;

			while (*pp != &w)
				pp = &(*pp)->next;
			*pp = w.next;
			atomic_fetch_sub_explicit(&ct->unit_waiters, 1, memory_order_relaxed);
			break;
		}
		if (!f->uw_listed || !units_still(ct, f, c0, c1))
			break;
		/* woken for none of its units: it waits on under f->lock alone,
		 * listed again (f stays on ct->uw_files while uw_listed is set,
		 * which only ct->lock's and f->lock's holders clear), with no
		 * take of ct->lock */
		w.woken = 0;
		w.next = f->uwaits;
		f->uwaits = &w;
		atomic_fetch_add_explicit(&ct->unit_waiters, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&ct->unit_waits_quiet, 1, memory_order_relaxed);
	}
	disk_mutex_unlock(&f->lock);
	pthread_cond_destroy(&w.cond);
	/* taken again as a condition wait on it would (not counted in its
	 * waits, cachetier_stats.tier_lock_waits, as that take never was):
	 * the caller counts it in read_locks */
	disk_mutex_relock(&ct->lock);
	return 1;
}

/* Wake f's readers of units [c, c + n) (all: n 0). f->lock held. */
static void uw_wake(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	struct ct_uwait **pp = &f->uwaits;

	f->ugen++;
	while (*pp) {
		struct ct_uwait *w = *pp;

		if (n && (w->c1 <= c || c + n <= w->c0)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		w->woken = 1;
		atomic_fetch_sub_explicit(&ct->unit_waiters, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&ct->unit_waiter_wakes, 1, memory_order_relaxed);
		pthread_cond_signal(&w->cond); /* w lives until its reader has f->lock */
	}
}

void cachetier__units_wake(struct cachetier *ct)
{
	struct ct_file **pp = &ct->uw_files;

	pthread_cond_broadcast(&ct->unit_cond);
	while (*pp) {
		struct ct_file *f = *pp;
		int none;

		disk_mutex_lock(&f->lock);
		none = !f->uwaits;
		if (none) /* no reader waits on it: off the list (a reader lists it
			   * again under ct->lock) */
			f->uw_listed = 0;
		else /* stays listed: a reader it woke may wait again under f->lock */
			uw_wake(ct, f, 0, 0);
		disk_mutex_unlock(&f->lock);
		if (none) {
			*pp = f->uw_next;
			f->uw_next = NULL;
		} else {
			pp = &f->uw_next;
		}
	}
}

void cachetier__units_landed(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	if (n)
		uw_wake(ct, f, c, n);
}

#ifndef NDEBUG
void cachetier__run_check(struct cachetier *ct)
{
	uint32_t idle = 0;

	for (const struct ct_file *f = ct->files; f; f = f->next) {
		for (uint32_t u = 0; f->live && f->ust && u < f->nunits; u++) {
			assert(f->ust[u] != UNIT_FILLING && f->ust[u] != UNIT_QUEUED);
			assert(f->pins[u] == 0); /* every read ended */
			idle += f->held[u];
		}
	}
	/* every unit held with no pin is counted idle, once (cachetier_read.c:
	 * pins and idle locks change under the object's lock) */
	assert(idle == ct->idle_units);
	/* every byte a fill reserved left reserved once (landed, committed,
	 * adopted or aborted): none left, none taken twice */
	assert(atomic_load(&ct->reserved) == 0);
	/* ... and every byte the fill writer wrote left it once */
	assert(atomic_load(&ct->wr_bytes) == atomic_load(&ct->wr_gone));
}
#endif
