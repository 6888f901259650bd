/*
 * cachetier_run.h — private to cachetier/: the unit store's fill API
 * (cachetier_run.c); included at the end of cachetier_i.h, whose types
 * it uses.
 */
#ifndef CACHETIER_RUN_H
#define CACHETIER_RUN_H

/* A unit's state (ct_file.ust) changes only here: under its object's lock
 * (ct_file.lock, asserted in debug builds) and, today, under ct->lock too
 * (written under both, read under either: a reader waiting under the
 * object's lock alone, cachetier__units_wait, sees the same states as the
 * holders of ct->lock), but a punch's end (EVICTING -> EMPTY on the
 * puncher, cachetier_punch.c), under the object's lock alone: a holder of
 * ct->lock may see a unit it found EVICTING go EMPTY, never another step.
 * The changes a unit may make (each asserted):
 *   EMPTY -> QUEUED (queued: cachetier__queue_push, a prefetch cursor's
 *            take), FILLING (a batch request's claim), VALID (its map
 *            read at open), EVICTING (a gap an eviction's punch spans)
 *   QUEUED -> FILLING (a worker's claim), EMPTY (a queued fill never run)
 *   FILLING -> VALID (commit, adopt), EMPTY (abort, a withdrawn prefetch)
 *   VALID -> EVICTING (eviction's take), EMPTY (damaged, or another
 *            process evicted it)
 *   EVICTING -> EMPTY (its punch ended)
 * No caller outside this API (the run calls below, the queue's and
 * eviction's) writes a state byte. */
static inline int cachetier__unit_step_ok(unsigned from, unsigned to)
{
	switch (from) {
	case UNIT_EMPTY:
		return to != UNIT_EMPTY;
	case UNIT_QUEUED:
		return to == UNIT_FILLING || to == UNIT_EMPTY;
	case UNIT_FILLING:
		return to == UNIT_VALID || to == UNIT_EMPTY;
	case UNIT_VALID:
		return to == UNIT_EVICTING || to == UNIT_EMPTY;
	case UNIT_EVICTING:
		return to == UNIT_EMPTY;
	default:
		return 0;
	}
}
static inline void cachetier__unit_set(struct ct_file *f, uint32_t u, enum ct_unit s)
{
	assert(disk_mutex_held(&f->lock));
	assert(cachetier__unit_step_ok(f->ust[u], s));
	f->ust[u] = (uint8_t)s;
}

/* cachetier_run.c — the unit store's fill API: every fill (a worker's,
 * cachetier_fill.c and _write.c; a batch request's, cachetier_batch.c)
 * changes unit states only through these, on runs [c, c + n) of one f.
 * Each claimed unit ends in exactly one commit, adopt or abort (checked at
 * close in debug builds: cachetier__run_check). */
/* claim: units [c, c + n) (empty, or taken from a fill queue: QUEUED) are
 * UNIT_FILLING: readers wait, no other fill takes them. ct->lock held;
 * f->lock taken (their states). */
struct ct_lkrun;
void cachetier__run_claim(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n);
/* The claim across processes: each unit's OFD write lock into claim[i]:
 * 1 held (fetch it), 0 another process filled it (adopt it; nothing
 * held), or a negative errno (abort it, nothing held). wait: poll while
 * another process holds one (*waited set; -ECANCELED once the tier stops);
 * else -EAGAIN for it. No ct->lock held; not on the I/O thread. */
void cachetier__run_lock(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int wait,
			 int *claim, int *waited);
/* write: len bytes at object offset off into f's data file, each unit's
 * CRC32C over them once written (crc[k]: unit c0 + k); 0 or -errno. discard: punch
 * bytes written for units that will not be committed. No lock held; not
 * on the I/O thread (the fill writer). */
int cachetier__run_write(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			 const void *buf, size_t len);
/* writev: the same for n (at most CT_WRITEV_MAX: 512 KiB of sink buffers) buffers (iov) that
 * follow each other from off: one pwritev (more only for a short write), then the CRCs. The sink
 * wrote the bytes on another core: the write's copy reads them from there, and the CRC after it
 * finds them in this core's cache (512 KiB, with as many bytes of the page cache, stay in its
 * L2); with the CRC first over 2 MiB, the copy found them evicted and read them from afar again
 * (tests/bench/README.md, "L4: the CRC after the write"). */
#define CT_WRITEV_MAX 4
struct iovec;
int cachetier__run_writev(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			  const struct iovec *iov, int n);
/* Each unit's CRC32C over len bytes at object offset off (unit c0 + k's
 * into crc[k]), updated in the order of the bytes. */
void cachetier__run_crc(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off, const char *p,
			size_t len);
void cachetier__run_discard(struct ct_file *f, uint64_t off, uint64_t len);
/* alloc: the blocks of [off, off + len) allocated before a run's writes
 * (fallocate, the file's size extended to the run's end), so its writes
 * land in allocated extents (no delayed allocation's work a block on
 * ext4); 0, or a negative errno (nothing to undo: the writes go on as
 * without it). A run that fails punches them with its bytes
 * (cachetier__run_discard up to the run's end). */
int cachetier__run_alloc(struct ct_file *f, uint64_t off, uint64_t len);
/* commit: claimed units [c, c + n), whose bytes are written and whose
 * OFD write locks this process holds, are valid (crc[k]: unit c + k's
 * CRC32C, stored before its state byte; their bytes from ct->reserved to
 * the usage in one step, cachetier__acct_move; map batch; the write lock
 * becomes the pinning readers' read lock or goes: joins run, which the
 * caller flushes before it drops ct->lock, or at once with run NULL).
 * adopt: claimed units another process filled (run_lock's 0) are valid
 * here (waited: after waiting for it). ct->lock held. */
void cachetier__run_commit(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			   const uint32_t *crc, int waited, struct ct_lkrun *run);
void cachetier__run_adopt(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			  int waited);
/* The fill writer's commit in two steps, so that no system call is made
 * under ct->lock and committing units takes no ct->lock. land (no lock;
 * after the bytes are written): each unit's CRC32C stored (crc[k]: unit
 * c + k's) and its OFD write lock turned into a read lock (one fcntl for
 * the run; the read lock still keeps every other process from filling,
 * evicting or punching it, and none serves it before the state byte says
 * valid, which is set after the CRC). landed (f->lock alone; ct->lock held
 * or not, tier_locked says which): the units valid in the state file and
 * committed as commit does (unit_commit: valid, counted, in the map batch,
 * their read locks the pinning readers' or idle, armed for reads without
 * ct->lock where f's units are; last: the run's last unit is among them,
 * its request counted), their bytes moved from ct->reserved to the
 * directory's usage in one step (cachetier__acct_move: no room check
 * counts a landed unit twice), and, with wake, their waiting readers woken
 * (else the caller wakes them: cachetier__units_landed). */
void cachetier__run_land(struct ct_file *f, uint32_t c, uint32_t n, const uint32_t *crc);
void cachetier__run_landed(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
			   int last, int wake, int tier_locked);
/* abort: claimed units [c, c + n) are not made valid. err 0: empty with
 * no error kept (not fetched: no room, unfit, left to another process, a
 * failed batch item); a pinning reader's unit is queued on demand. err < 0:
 * empty with err for their readers, or (withdrawn: a withdrawn prefetch
 * fill's enum ct_pf_kind) back to their prefetch. held: this process holds
 * their OFD write locks, which go (with err < 0 they join run as commit's
 * do). fill_errors is the caller's to count, once a fill (not a unit).
 * ct->lock held; f->lock taken (their states, their pins). */
void cachetier__run_abort(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int err,
			  int held, int withdrawn, struct ct_lkrun *run);
/* Readers waiting for units: each waits on a condition variable of its
 * own, on its object's list (struct ct_uwait, on ct_file.uwaits, under the
 * object's lock, ct_file.lock), so a fill that made units valid or ended
 * wakes only the readers of those units, under that object's lock alone
 * (not ct->lock), and not every reader waiting (one tier-wide broadcast
 * woke them all at each unit a reader pinned landing).
 * units_wait: wait (at most secs) for a change of units [c0, c1) of f,
 *   unless f->ugen moved from gen (read under f->lock when the caller
 *   looked at the units: a wake-up came since; returns 0, nothing
 *   dropped); else 1: ct->lock was dropped while it waited (on f->lock
 *   alone) and is held again. Woken for none of its units (units_still:
 *   each still queued, being filled or evicted; a units_wake, which wakes
 *   every reader), it waits on under f->lock alone, with no take of
 *   ct->lock, until secs have passed in all (counted: unit_waits_quiet).
 *   ct->lock held on entry and return, f->lock not.
 * units_wake: every waiting reader woken (each object's on ct->uw_files,
 *   under its lock; an object with none is taken off it), and
 *   ct->unit_cond's waiters (whatever changed is not
 *   one fill's units: an abort, a batch, a stop; a punch wakes its
 *   units' readers, punch_end). ct->lock
 *   held, no object's lock.
 * units_landed: the readers of units [c, c + n) of f woken (signalled
 *   under f->lock: a waiter's node lives until it has the lock again).
 *   f->lock held (ct->lock or not). */
struct ct_uwait {
	struct ct_uwait *next;
	uint32_t c0, c1;
	pthread_cond_t cond;
	int woken; /* taken off the list by a waker (under f->lock) */
};
int cachetier__units_wait(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			  unsigned secs, uint64_t gen);
void cachetier__units_wake(struct cachetier *ct);
void cachetier__units_landed(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n);
#ifndef NDEBUG
/* Every fill ended (cachetier__units_stop): asserts no unit is claimed
 * (UNIT_FILLING) or taken from a queue (UNIT_QUEUED) any more, no read
 * pins one, and ct->idle_units counts exactly the units held (all idle). */
void cachetier__run_check(struct cachetier *ct);
#endif
/* Debug builds: a fill's exit asserts that its units [c, c + n) ended
 * (committed, adopted or aborted: none is UNIT_FILLING). ct->lock held. */
static inline void cachetier__run_ended(const struct ct_file *f, uint32_t c, uint32_t n)
{
#ifndef NDEBUG
	for (uint32_t u = c; u < c + n; u++)
		assert(f->ust[u] != UNIT_FILLING);
#else
	(void)f;
	(void)c;
	(void)n;
#endif
}

#endif
