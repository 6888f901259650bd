/*
 * cachetier_fast.h — private to cachetier/: idle read locks and reads
 * without ct->lock (cachetier_read.c, "Idle read locks", "Reads without
 * ct->lock"), included by cachetier_i.h.
 *
 * ct_file's fields for them: fp, per unit FP_ARMED (valid, read-locked
 * here, trusted: a read may pin it with a compare-and-swap), FP_WANTED
 * (revoked while pinned: the last such read's end takes ct->lock) and
 * such reads' pins (FP_COUNT); fatime, per unit the time of such a read
 * or of a plan's read of it (eviction's LRU: cachetier__unit_atime;
 * __atomic); fast_ok, whether f may be read so (no prefetch cursor of it
 * to move, its file watched); wev_fast, the watch's change count its
 * trusted units go by (f->wevents once they are revoked).
 */
#ifndef CACHETIER_FAST_H
#define CACHETIER_FAST_H

/* cachetier_read.c: drop the read locks of f's units in [c0, c1) that this
 * process holds idle (held, no read pins them): one fcntl a run; returns
 * the units released; f->lock held (its held[], pins and lazy: f's lock
 * guards them). lazy_check: when the directory's release requests moved,
 * each live object with idle locks whose own requests moved drops them all
 * (the flusher calls it at every pass, reads at begin, and at end when the
 * requests moved); ct->lock held, takes each object's f->lock. */
uint32_t cachetier__lazy_drop(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1);
/* Most units a process holds idle: each is a lock record in the kernel
 * (about 200 bytes of unswappable memory, and a longer list for every
 * fcntl on its state file to walk), so a cache of millions of units must
 * not hold one for each: past it a read's units are unlocked at its end,
 * as before idle locks (16384 units: 1 GiB of 64 KiB units, a few MB of
 * kernel memory at most). */
#define CT_IDLE_MAX 16384u
void cachetier__lazy_check(struct cachetier *ct);

/* ct_file.fp's bits (cachetier_read.c, "Reads without ct->lock"). */
#define FP_ARMED  0x80000000u
#define FP_WANTED 0x40000000u
#define FP_COUNT  0x3fffffffu

/* Reads pinning unit c of f without ct->lock now. */
static inline uint32_t cachetier__fp_pins(const struct ct_file *f, uint32_t c)
{
	return atomic_load_explicit(&f->fp[c], memory_order_acquire) & FP_COUNT;
}

/* No read pins unit c of f without ct->lock from now on (until a read
 * with ct->lock arms it again): 1 when none does now; else 0, and the
 * last of them takes ct->lock at its end (room_gen, release requests).
 * ct->lock held. */
static inline int cachetier__fp_revoke(struct ct_file *f, uint32_t c)
{
	uint32_t v = atomic_load_explicit(&f->fp[c], memory_order_acquire), nv;

	do {
		nv = v & ~FP_ARMED;
		if (v & FP_COUNT)
			nv |= FP_WANTED;
	} while (nv != v && !atomic_compare_exchange_weak_explicit(
				&f->fp[c], &v, nv, memory_order_acq_rel, memory_order_acquire));
	return !(v & FP_COUNT);
}

/* Is unit c of f unread since its fill or its plan's naming (ct_file.unread),
 * also by a read without ct->lock (which leaves unread[c] as it was and
 * sets fatime[c])? ct->lock held. */
static inline int cachetier__unit_unread(const struct ct_file *f, uint32_t c)
{
	return cachetier__unread(f, c) &&
	       __atomic_load_n(&f->fatime[c], __ATOMIC_RELAXED) <= cachetier__ua(f, c);
}

/* Unit c of f's last read here, with ct->lock or without (eviction's
 * LRU). ct->lock held. */
static inline int64_t cachetier__unit_atime(const struct ct_file *f, uint32_t c)
{
	int64_t a = __atomic_load_n(&f->fatime[c], __ATOMIC_RELAXED), u = cachetier__ua(f, c);

	return a > u ? a : u;
}

/* Unit u of f, just filled here with no read pinning it (its fill's
 * write lock still held): 1 when its lock is to become an idle read lock
 * (fewer than CT_IDLE_MAX idle), counted idle and armed for reads without
 * ct->lock when this process trusts it (cachetier_read.c); else 0 (the
 * lock goes). ct->lock and f->lock held. */
int cachetier__unit_filled_idle(struct cachetier *ct, struct ct_file *f, uint32_t u);
/* The same for a unit the fill writer commits as it lands, f->lock held
 * alone (no ct->lock: cachetier__run_landed); it is armed only where a
 * read under ct->lock armed f's units before (fast_ok) and f has no
 * prefetch cursor. */
int cachetier__unit_landed_idle(struct cachetier *ct, struct ct_file *f, uint32_t u);

#endif
