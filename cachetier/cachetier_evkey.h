/*
 * cachetier_evkey.h — private to cachetier/: a unit's place in the eviction
 * order (cachetier_evict.c's classes and keys), shared by the eviction
 * (cachetier_evict.c) and the order kept as units change
 * (cachetier_evheap.c). Every function here: ct->lock held.
 */
#ifndef CACHETIER_EVKEY_H
#define CACHETIER_EVKEY_H

#include <string.h>

#include "cachetier_i.h"

/* The classes of the eviction order, first evicted first (the plans'
 * marks: cachetier_plan.c). */
enum ev_class {
	EV_UNNEEDED = 0, /* a plan read it and none needs it again, or it was
			  * filled between planned ranges: least recently used first */
	EV_LRU = 1,	 /* no plan speaks of it: least recently used first */
	EV_AHEAD = 2,	 /* no plan speaks of it, ahead of its readers (unit_ahead):
			  * latest used first */
	EV_PLANNED = 3,	 /* a plan needs it: furthest next use first */
};
#define EV_NONE (EV_PLANNED + 1) /* no unit: past the last */

static inline int key_less(struct ev_key a, struct ev_key b)
{
	return a.cls != b.cls ? a.cls < b.cls : a.at < b.at;
}

/* The last use of live f by any process: its state file's, or ours. */
static inline int64_t file_at(const struct ct_file *f)
{
	int64_t shared = cachetier__st_atime(f);

	return shared > f->atime_ns ? shared : f->atime_ns;
}

/* How long a unit filled ahead stays spared while nobody reads it. */
#define AHEAD_SPARE_NS (60 * 1000000000LL)

/* Is unit c of live f ahead of its readers: filled ahead (readahead,
 * prefetch) and not read since, within AHEAD_SPARE_NS of its fill, or
 * past where a sequential reader that read f within AHEAD_SPARE_NS is (it
 * gets there soon: a decoder streaming a shard read once before)? Units a
 * plan marked are ordered by their next use instead. */
static inline int unit_ahead(const struct ct_file *f, uint32_t c, int64_t now)
{
	if (f->gap[c] || f->nu[c] != CT_NU_NONE)
		return 0;
	if (cachetier__unit_unread(f, c) && now - cachetier__ua(f, c) < AHEAD_SPARE_NS)
		return 1;
	return f->ra_window && now - f->atime_ns < AHEAD_SPARE_NS &&
	       (uint64_t)c * f->unit_bytes >= f->ra_end;
}

/* When unit c of live f, ahead of its readers at now (unit_ahead), may
 * stop being so by time alone: the earliest of its AHEAD_SPARE_NS ends. */
static inline int64_t unit_ahead_end(const struct ct_file *f, uint32_t c, int64_t now)
{
	int64_t e = INT64_MAX;

	if (cachetier__unit_unread(f, c) && now - cachetier__ua(f, c) < AHEAD_SPARE_NS)
		e = cachetier__ua(f, c) + AHEAD_SPARE_NS;
	if (f->ra_window && now - f->atime_ns < AHEAD_SPARE_NS && f->atime_ns + AHEAD_SPARE_NS < e)
		e = f->atime_ns + AHEAD_SPARE_NS;
	return e;
}

/* Unit c's next use relative to plan position pnow (CT_NEAR_NONE: no plan
 * marked it). */
static inline int64_t near_at(const struct ct_file *f, uint32_t c, uint32_t pnow)
{
	uint32_t nu = atomic_load_explicit(&f->nu[c], memory_order_relaxed);

	return nu < CT_NU_FIRST ? CT_NEAR_NONE : (int32_t)(nu - pnow);
}

/* Does no plan need unit c of live f: a plan read it and needs it no more
 * (CT_NU_DONE), or it was fetched only as the gap of a span, is unread and
 * no plan marked it since? */
static inline int unit_unneeded(const struct ct_file *f, uint32_t c)
{
	return f->nu[c] == CT_NU_DONE ||
	       (f->gap[c] && cachetier__unread(f, c) && f->nu[c] == CT_NU_NONE);
}

/* What eviction looks at: the time, the plan position, and for a
 * prefetch fill (spare) the nearest next use of its units (near). */
struct ev_ctx {
	int64_t now;
	int spare;
	int64_t near;
	const struct cachetier *ct;
	uint32_t pnow; /* ct->plan_now, read once per pick (x_near) */
};

/* cachetier__plan_near with the plan position read once for a whole pick
 * (x->pnow): the same value, without an atomic load per unit. */
static inline int64_t x_near(const struct ev_ctx *x, const struct ct_file *f, uint32_t c)
{
	return near_at(f, c, x->pnow);
}

/* The first unit of live f from c on whose state byte says it holds bytes
 * (f->nunits: none). Eight state bytes at a time (an aligned atomic load:
 * the flusher names units, ST_NAMED, without ct->lock, and other processes
 * store too): in a cache smaller than the data most units hold none. */
static inline uint32_t st_next(const struct ct_file *f, uint32_t c)
{
	const unsigned char *s = f->st + ST_HDR; /* page-aligned mapping + ST_HDR */

	for (; c < f->nunits && (c & 7); c++) {
		if (cachetier__st_get(f, c))
			return c;
	}
	for (; c + 8 <= f->nunits; c += 8) {
		if (__atomic_load_n((const uint64_t *)(const void *)(s + c), __ATOMIC_ACQUIRE))
			break;
	}
	while (c < f->nunits && !cachetier__st_get(f, c))
		c++;
	return c;
}

/* May unit c of live f be evicted now (as far as this process knows: no
 * reader here pins it, no fill or eviction here works on it, the state
 * file says it holds bytes)? For a prefetch fill (x->spare), not if it is
 * ahead of its readers, nor if a plan needs it as soon as the fill's
 * units or sooner. */
static inline int unit_evictable(const struct ct_file *f, uint32_t c, const struct ev_ctx *x)
{
	/* the state byte first (the callers already skip units whose byte
	 * was clear, st_next; it may have been cleared since) */
	if (!(cachetier__st_get(f, c) && f->pins[c] == 0 && cachetier__fp_pins(f, c) == 0 &&
	      (f->ust[c] == UNIT_VALID || f->ust[c] == UNIT_EMPTY)))
		return 0;
	if (!x->spare || unit_unneeded(f, c))
		return 1;
	if (f->nu[c] == CT_NU_NONE)
		return !unit_ahead(f, c, x->now);
	return x->near != CT_NEAR_NONE && x_near(x, f, c) > x->near;
}

/* Unit c's place in the eviction order; fat: file_at(f). A unit this
 * process never touched is as old as its object's last use. Units ahead
 * of their readers (unit_ahead) go after the others no plan speaks of,
 * the latest used first: units filled ahead of a reader in order are the
 * furthest ahead (a shard fetched ahead of an in-order reader, its first
 * units filled first and needed first). Units a plan needs go last, the
 * furthest next use first. */
static inline struct ev_key unit_key(const struct ct_file *f, uint32_t c, int64_t fat,
				     const struct ev_ctx *x)
{
	int64_t at = cachetier__unit_atime(f, c);
	struct ev_key k = {EV_LRU, at ? at : fat};

	if (unit_unneeded(f, c)) {
		k.cls = EV_UNNEEDED;
	} else if (f->nu[c] != CT_NU_NONE) {
		k.cls = EV_PLANNED;
		k.at = -x_near(x, f, c);
	} else if (unit_ahead(f, c, x->now)) {
		k.cls = EV_AHEAD;
		k.at = -k.at;
	}
	return k;
}

/* Is unit c of live f filled ahead and spared, counted in what fills
 * ahead hold (the rules' ahead_share): valid, not read since its fill,
 * within AHEAD_SPARE_NS of it, needed by a plan or not marked, not a gap? */
static inline int unit_ahead_held(const struct ct_file *f, uint32_t c, int64_t now)
{
	return !f->gap[c] && f->ust[c] == UNIT_VALID && f->nu[c] != CT_NU_DONE &&
	       cachetier__unit_unread(f, c) && now - cachetier__ua(f, c) < AHEAD_SPARE_NS;
}

/* cachetier_evheap.c: the entry holding the first unit in eviction order
 * for x, not given up on in this round (*key: that unit's key; *next: the
 * first key of any other entry, class EV_NONE when there is none); NULL:
 * none. An entry that is not live counts as one unit last used when its
 * map was written. Cost: O(log n) in the objects, plus the units of the
 * objects marked since the last pick (cachetier__ev_mark) and of the two
 * it returns. */
struct ct_file *cachetier__ev_pick(struct cachetier *ct, const struct ev_ctx *x, struct ev_key *key,
				   struct ev_key *next);
/* evict()'s walk of live f's units in eviction order for x, the first
 * first (cachetier_evheap.c; ct->lock held throughout): begin brings f's
 * order up to date; next takes the next unit out of it (*key: its key, as
 * unit_key gives it), UINT32_MAX when none is left that x may evict (no
 * sort, no look at f's other units: O(log units) a unit, plus the units
 * found pinned or moved back on the way); end puts back the units next
 * returned (list[0..n)) that are still evictable, counts the others out
 * of the bytes filled ahead, and places f again by its first keys. */
void cachetier__ev_walk_begin(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x);
uint32_t cachetier__ev_walk_next(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x,
				 struct ev_key *key);
void cachetier__ev_walk_end(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x,
			    const uint32_t *list, uint32_t n);
/* Bytes of units filled ahead and spared (unit_ahead_held) in this
 * process's live objects, at now. */
uint64_t cachetier__ev_ahead(struct cachetier *ct, int64_t now);

#endif
