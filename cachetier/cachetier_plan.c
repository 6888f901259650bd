/*
 * cachetier_plan.c — next use by reading plans: what the caller (fs/'s
 * plans) says of when each unit of a remote object will be read next,
 * kept per unit for the eviction order (cachetier_evict.c).
 *
 * Per unit, ct_file.nu (4 bytes, allocated with the object's other
 * per-unit arrays): CT_NU_NONE, no plan speaks of it (least recently used
 * order); CT_NU_DONE, a plan read it (a read got past its bytes of the
 * planned path: cachetier_plan_read), or a range prefetch filled it while
 * no plan marked it (bytes between planned extents), and no plan needs it
 * again (evicted first); otherwise the plan position of its next use, a
 * serial number compared with ct->plan_now (cachetier_plan_now), so the
 * positions may wrap around 2^32. The marks are this process's knowledge
 * only: other processes sharing the directory evict by their own marks
 * (or least recently used), and an object opened by an eviction starts
 * unmarked.
 *
 * Threads: any. A plan's marks and reads (cachetier_plan_mark, _read, on
 * every planned read) take no lock: each unit's mark is an atomic word
 * (the nearest use by a compare-and-swap), the time of a read goes to
 * ct_file.fatime (cachetier__unit_atime), and eviction reads them under
 * ct->lock; a mark racing an eviction of its unit is as if it came just
 * before or after it (take: a mark's value stays, CT_NU_DONE goes by a
 * compare-and-swap). Reset and filled take ct->lock (reset: O(units of
 * every live object), while no plan marks: fs/'s use_lock).
 */
#include <errno.h>

#include "cachetier_i.h"

void cachetier_plan_now(struct cachetier *ct, uint32_t now)
{
	atomic_store_explicit(&ct->plan_now, now, memory_order_relaxed);
}

/* Units [*c0, *c1) of live f behind [off, off + len); 0 or -EINVAL. */
static int plan_units(const struct cachetier_obj *o, uint64_t off, uint64_t len, uint32_t *c0,
		      uint32_t *c1)
{
	const struct ct_file *f = o->file;

	if (off > o->size || len > o->size - off)
		return -EINVAL;
	*c0 = *c1 = 0;
	if (!f || len == 0)
		return 0;
	*c0 = (uint32_t)(off / f->unit_bytes);
	*c1 = (uint32_t)((off + len - 1) / f->unit_bytes + 1);
	return 0;
}

int cachetier_plan_mark(struct cachetier_obj *o, uint64_t off, uint64_t len, uint32_t seq)
{
	struct cachetier *ct = o->ct;
	struct ct_file *f = o->file;
	uint32_t c0, c1, now;
	int err = plan_units(o, off, len, &c0, &c1);

	if (err < 0 || c0 == c1)
		return err;
	if (seq < CT_NU_FIRST)
		seq = CT_NU_FIRST; /* a position one step off: never a state's value */
	if (!atomic_load_explicit(&ct->plan_marked, memory_order_relaxed))
		atomic_store(&ct->plan_marked, 1);
	now = atomic_load_explicit(&ct->plan_now, memory_order_relaxed);
	for (uint32_t c = c0; c < c1; c++) {
		uint32_t v = atomic_load_explicit(&f->nu[c], memory_order_relaxed);

		/* the nearest of the uses marked */
		while ((v < CT_NU_FIRST || (int32_t)(seq - now) < (int32_t)(v - now)) &&
		       !atomic_compare_exchange_weak_explicit(
			   &f->nu[c], &v, seq, memory_order_relaxed, memory_order_relaxed))
			;
	}
	cachetier__ev_mark_units(ct, f, c0, c1); /* bytes filled ahead (cachetier_evheap.c) */
	return 0;
}

int cachetier_plan_read(struct cachetier_obj *o, uint64_t off, uint64_t len, uint64_t upto,
			int begun, uint64_t *lo, uint64_t *hi)
{
	struct ct_file *f = o->file;
	uint32_t c0, c1, d;
	int err = plan_units(o, off, len, &c0, &c1);
	int64_t now;

	*lo = *hi = off;
	if (err < 0 || c0 == c1)
		return err;
	if (!begun && off % f->unit_bytes) /* its start is not read yet */
		c0++;
	if (c0 == c1)
		return 0;
	/* units [c0, d): their bytes of the range end at or before upto (the
	 * last unit's at off + len, which may lie inside it) */
	if (upto >= off + len)
		d = c1;
	else
		d = upto / f->unit_bytes > c0 ? (uint32_t)(upto / f->unit_bytes) : c0;
	if (d == c0)
		return 0;
	*lo = cachetier__unit_off(f, c0);
	*hi = cachetier__unit_off(f, d - 1) + cachetier__unit_len(f, d - 1);
	now = cachetier__now_ns();
	for (uint32_t c = c0; c < d; c++) {
		atomic_store_explicit(&f->nu[c], CT_NU_DONE, memory_order_relaxed);
		/* last in the order of units no plan needs */
		__atomic_store_n(&f->fatime[c], now, __ATOMIC_RELAXED);
	}
	cachetier__ev_mark_units(o->ct, f, c0, d); /* needed by none: first in the order */
	return 0;
}

int cachetier_plan_done(struct cachetier_obj *o, uint64_t off, uint64_t len, uint64_t *lo,
			uint64_t *hi)
{
	return cachetier_plan_read(o, off, len, off + len, 1, lo, hi);
}

void cachetier_plan_reset(struct cachetier *ct)
{
	cachetier__lock(ct);
	for (struct ct_file *f = ct->files; f; f = f->next) {
		for (uint32_t c = 0; f->live && c < f->nunits; c++) {
			if (f->nu[c] != CT_NU_NONE)
				f->nu[c] = CT_NU_DONE;
		}
		cachetier__ev_mark(ct, f);
	}
	disk_mutex_unlock(&ct->lock);
}

void cachetier__plan_filled(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n)
{
	/* while plans mark, range prefetches are theirs: a unit no mark names
	 * lies between planned extents (a caller that marks nothing keeps its
	 * range's units spared as filled ahead) */
	for (uint32_t u = c; ct->plan_marked && u < c + n; u++) {
		if (f->ust[u] == UNIT_VALID)
			atomic_compare_exchange_strong(&f->nu[u], &(uint32_t){CT_NU_NONE},
						       CT_NU_DONE);
	}
	cachetier__ev_mark_units(ct, f, c, c + n);
}
