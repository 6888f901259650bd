/*
 * cachetier_evheap.c — eviction's order kept as units change, so a pick
 * costs O(log n) in the objects instead of a look at every unit of every
 * live object under ct->lock (issue 36 #4).
 *
 * Each object keeps the key of its first unit in the eviction order
 * (cachetier_evkey.h: class, then 'at'), twice: over all its evictable
 * units (ev.k[0], what a fill that may evict anything picks by) and over
 * those not ahead of their readers (ev.k[1], a prefetch fill's: it never
 * evicts those, and evicts a unit a plan needs only when it is needed
 * later than its own, a cut of the same order). Heaps of objects by each
 * (ct->ev.h[0], [1]; ties: the later entry of ct->files first, as the scan
 * of the list took the first of equal keys) and one by when a unit of the
 * object stops being ahead by time alone (ev.h[2]: AHEAD_SPARE_NS after
 * its fill or its reader). A unit a plan needs is kept by its raw mark
 * (its position, not the distance from the plan position now): the plan
 * position moves every such key alike, so the heap's order holds as it
 * moves (positions within 2^31 of each other, as cachetier_plan.c's
 * compare-and-swap assumes).
 *
 * Every change that may bring a unit forward in the order, or change the
 * bytes filled ahead, marks its units (cachetier__ev_mark_units; _mark:
 * all of an object's): a fill's end (cachetier_run.c); a read's begin and
 * end, a read without ct->lock (its begin and end: without the lock), a
 * unit found lost, the reader's place moving (cachetier_read.c); a range
 * naming units (cachetier_queue.c, _span.c, _batch.c); a plan's mark, read
 * (without ct->lock), filled range or reset (cachetier_plan.c); an object's
 * opening (cachetier_map.c, _scan.c); an eviction of it. A mark is a
 * bit per unit marked (ev.mbits, set by an atomic or; none until the
 * object's heaps are built: such a mark marks all its units), then the
 * span of units marked since (one word per object, widened by a
 * compare-and-swap: which words of bits to look at), then the object on
 * a lock-free stack (ct->ev.dirty) the next pick empties. The pick places
 * the units whose bits are set, not every unit of the span: a shuffled
 * reader's marks of one object between two picks span most of it
 * (evict_bench's E2: the making room's CPU 0.050 -> 0.034 s per GB).
 *
 * Each live object also keeps its evictable units in the same order
 * (ev.uh: two binary heaps of unit numbers, the units no plan needs or
 * speaks of and the units a plan needs, by key as placed, then unit
 * number; ev.upos, ucls, uat per unit). The pick places each marked unit
 * of each marked object again in its object's heaps (ev_update:
 * O(units marked x log units)) and takes the object's first keys from the
 * first units of its heaps, so neither the pick nor evict() looks at an
 * object's other units: evict() takes its units off the heaps in order
 * (cachetier__ev_walk_next, O(log units) each) and puts back those it
 * did not take (cachetier__ev_walk_end). A key as placed is never later
 * than the unit's own, since every change that may bring a unit forward
 * marks it; a change that only moves a unit back (pinned, claimed by a
 * fill, its object's last use moving on when it never touched the unit)
 * needs no mark: the first unit of a heap is checked when looked at (a
 * unit no fill may evict now is taken out, one whose key moved back is
 * placed again), and a pinned unit comes back at its unpin. Every unit of
 * an object that holds bytes is placed anew (O(its units)) only when the
 * object is first computed, all its units were marked (its opening, a
 * plan's reset, a rescan), its time came (ev.h[2]), or its last use
 * moved so that a key as placed may be later than its unit's (u_stale:
 * moved back, or on while a unit it never touched is ahead: that key is
 * minus its last use).
 * What this does not see: changes by other processes sharing the
 * directory (units they filled into, or evicted from, an object live here;
 * their reads' last use) count from the object's next placing of all its
 * units (a rescan, when nothing is left to evict, marks every live
 * object), not at once: a victim whose units went takes none (evict():
 * given up for the round) and the next is picked.

 * Bytes filled ahead (cachetier__ev_ahead, the rules' ahead_share check of
 * every prefetch fill's room) are kept the same way: per object (ev.ahead),
 * summed in ct->ev.ahead.
 *
 * Tests (cachetier_evict_verify): every pick is also made by the scan it
 * replaced (ev_scan: every unit of every live object, as before) and the
 * two compared (made again first when a unit was marked between them:
 * they did not look at one state; cachetier__ev_pick), and every
 * eviction's walk by the sort it replaced (cachetier_evict.c,
 * evict_sorted); the units each looked at are counted.
 *
 * Threads: ct->lock for everything but cachetier__ev_mark (any thread).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cachetier_evkey.h"

enum { H_ALL = 0, H_SPARE = 1, H_EXP = 2 };

/* key_less for keys kept here (a planned unit's 'at': its raw mark, the
 * later position first). */
static int kept_less(struct ev_key a, struct ev_key b)
{
	if (a.cls != b.cls)
		return a.cls < b.cls;
	if (a.cls == EV_PLANNED)
		return (int32_t)((uint32_t)a.at - (uint32_t)b.at) > 0;
	return a.at < b.at;
}

/* Is a (of heap h) before b? */
static int ev_before(int h, const struct ct_file *a, const struct ct_file *b)
{
	if (h == H_EXP)
		return a->ev.exp < b->ev.exp;
	if (kept_less(a->ev.k[h], b->ev.k[h]))
		return 1;
	if (kept_less(b->ev.k[h], a->ev.k[h]))
		return 0;
	return a->ev.seq > b->ev.seq; /* earlier in ct->files */
}

static void h_set(struct ct_evheap *hp, int h, uint32_t i, struct ct_file *f)
{
	hp->v[i] = f;
	f->ev.pos[h] = i + 1;
}

static void h_up(struct ct_evheap *hp, int h, uint32_t i)
{
	struct ct_file *f = hp->v[i];

	while (i > 0 && ev_before(h, f, hp->v[(i - 1) / 2])) {
		h_set(hp, h, i, hp->v[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	h_set(hp, h, i, f);
}

static void h_down(struct ct_evheap *hp, int h, uint32_t i)
{
	struct ct_file *f = hp->v[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m = l;

		if (l >= hp->n)
			break;
		if (l + 1 < hp->n && ev_before(h, hp->v[l + 1], hp->v[l]))
			m = l + 1;
		if (!ev_before(h, hp->v[m], f))
			break;
		h_set(hp, h, i, hp->v[m]);
		i = m;
	}
	h_set(hp, h, i, f);
}

static void h_remove(struct cachetier *ct, int h, struct ct_file *f)
{
	struct ct_evheap *hp = &ct->ev.h[h];
	uint32_t i;

	if (!f->ev.pos[h])
		return;
	i = f->ev.pos[h] - 1;
	f->ev.pos[h] = 0;
	if (i == --hp->n)
		return;
	h_set(hp, h, i, hp->v[hp->n]);
	h_up(hp, h, i);
	h_down(hp, h, hp->v[i]->ev.pos[h] - 1);
}

/* f in heap h or not (in: its place there fixed after its key changed).
 * Out of memory: left out (it is not evicted until it is marked again). */
static void h_fix(struct cachetier *ct, int h, struct ct_file *f, int in)
{
	struct ct_evheap *hp = &ct->ev.h[h];

	if (!in) {
		h_remove(ct, h, f);
		return;
	}
	if (!f->ev.pos[h]) {
		if (hp->n == hp->cap) {
			uint32_t cap = hp->cap ? 2 * hp->cap : 64;
			struct ct_file **v = realloc(hp->v, cap * sizeof(*v));

			if (!v)
				return;
			hp->v = v;
			hp->cap = cap;
		}
		h_set(hp, h, hp->n++, f);
	}
	h_up(hp, h, f->ev.pos[h] - 1);
	h_down(hp, h, f->ev.pos[h] - 1);
}

void cachetier__ev_mark_units(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1)
{
	uint64_t cur = atomic_load_explicit(&f->ev.range, memory_order_relaxed), nv;
	struct ct_file *head;

	_Atomic uint64_t *mb;

	if (c1 <= c0)
		return;
	/* each unit's bit (cachetier_evheap.c's words: the pick looks at the
	 * units marked, not at every unit between the first and the last),
	 * then the span */
	mb = atomic_load_explicit(&f->ev.mbits, memory_order_acquire);
	if (!mb) {
		c0 = 0; /* no words yet: all, built anew */
		c1 = UINT32_MAX;
	} else if (c0 != 0 || c1 != UINT32_MAX) { /* not all (cachetier__ev_mark) */
		/* units from c0 to the end of its object: up to its last word */
		uint32_t e = c1 - 1 < f->ev.nmw * 64 - 1 ? c1 - 1 : f->ev.nmw * 64 - 1;

		for (uint32_t w = c0 / 64; w <= e / 64 && c0 <= e; w++) {
			uint64_t m = ~0ull;

			if (w == c0 / 64)
				m &= ~0ull << (c0 % 64);
			if (w == e / 64)
				m &= ~0ull >> (63 - e % 64);
			atomic_fetch_or_explicit(&mb[w], m, memory_order_release);
		}
	}
	/* the units first, then the mark: a pick that takes the mark takes
	 * the units (or a later pick takes both) */
	do {
		uint32_t lo = (uint32_t)cur, hi = (uint32_t)(cur >> 32);

		if (!cur) {
			lo = c0;
			hi = c1;
		} else {
			lo = c0 < lo ? c0 : lo;
			hi = c1 > hi ? c1 : hi;
		}
		nv = (uint64_t)hi << 32 | lo;
	} while (nv != cur && !atomic_compare_exchange_weak_explicit(&f->ev.range, &cur, nv,
								     memory_order_acq_rel,
								     memory_order_relaxed));
	if (atomic_load_explicit(&f->ev.dirty, memory_order_acquire) ||
	    atomic_exchange_explicit(&f->ev.dirty, 1, memory_order_acq_rel))
		return;
	head = atomic_load_explicit(&ct->ev.dirty, memory_order_relaxed);
	do {
		f->ev.dnext = head;
	} while (!atomic_compare_exchange_weak_explicit(
	    &ct->ev.dirty, &head, f, memory_order_release, memory_order_relaxed));
}

void cachetier__ev_mark(struct cachetier *ct, struct ct_file *f)
{
	cachetier__ev_mark_units(ct, f, 0, UINT32_MAX);
}

void cachetier__ev_link(struct cachetier *ct, struct ct_file *f)
{
	f->ev.seq = ++ct->ev.seq;
	f->ev.u[0] = f->ev.u[1] = UINT32_MAX;
	cachetier__ev_mark(ct, f);
}

/* ---- an object's units in eviction order (ct_evfile.uh) ---- */

/* Is unit a of f before unit b in its heap (keys as placed, then the
 * lower unit first)? */
static int u_before(const struct ct_file *f, uint32_t a, uint32_t b)
{
	struct ev_key ka = {f->ev.ucls[a], f->ev.uat[a]}, kb = {f->ev.ucls[b], f->ev.uat[b]};

	if (kept_less(ka, kb))
		return 1;
	if (kept_less(kb, ka))
		return 0;
	return a < b;
}

static void u_set(struct ct_file *f, int h, uint32_t i, uint32_t c)
{
	f->ev.uh[h][i] = c;
	f->ev.upos[c] = (i + 1) | (h ? UPOS_H1 : 0);
}

static void u_up(struct ct_file *f, int h, uint32_t i)
{
	uint32_t c = f->ev.uh[h][i];

	while (i > 0 && u_before(f, c, f->ev.uh[h][(i - 1) / 2])) {
		u_set(f, h, i, f->ev.uh[h][(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	u_set(f, h, i, c);
}

static void u_down(struct ct_file *f, int h, uint32_t i)
{
	uint32_t c = f->ev.uh[h][i], n = f->ev.un[h];

	for (;;) {
		uint32_t l = 2 * i + 1, m = l;

		if (l >= n)
			break;
		if (l + 1 < n && u_before(f, f->ev.uh[h][l + 1], f->ev.uh[h][l]))
			m = l + 1;
		if (!u_before(f, f->ev.uh[h][m], c))
			break;
		u_set(f, h, i, f->ev.uh[h][m]);
		i = m;
	}
	u_set(f, h, i, c);
}

/* Unit c out of its heap (if in one). */
static void u_remove(struct ct_file *f, uint32_t c)
{
	uint32_t p = f->ev.upos[c], i, last;
	int h;

	if (!p)
		return;
	h = (p & UPOS_H1) != 0;
	i = (p & ~UPOS_H1) - 1;
	f->ev.upos[c] = 0;
	last = f->ev.uh[h][--f->ev.un[h]];
	if (last == c)
		return;
	u_set(f, h, i, last);
	u_up(f, h, i);
	u_down(f, h, (f->ev.upos[last] & ~UPOS_H1) - 1);
}

/* Unit c of live f's key in the kept form (a planned unit's 'at': its
 * raw mark) into *k; 0 when no fill may evict it now (state byte clear,
 * pinned, being filled or evicted). fat: file_at(f). */
static int u_key(const struct ct_file *f, uint32_t c, int64_t fat, const struct ev_ctx *x,
		 struct ev_key *k)
{
	if (!cachetier__st_get(f, c) || (f->ust[c] != UNIT_VALID && f->ust[c] != UNIT_EMPTY) ||
	    f->pins[c] || cachetier__fp_pins(f, c))
		return 0; /* pinned: marked when unpinned */
	*k = unit_key(f, c, fat, x);
	if (k->cls == EV_PLANNED) /* the raw mark (ev_before) */
		k->at = atomic_load_explicit(&f->nu[c], memory_order_relaxed);
	return 1;
}

/* Unit c of live f placed again at its key now (or taken out); a unit
 * ahead of its readers lowers *exp to when it stops being so. lazy (a
 * mark's): a unit in a heap stays where it is when it may not be evicted
 * now (pinned: looked at again at its unpin's mark or when first) or its
 * key moved back or not at all (a read, most of a marked span: its key
 * as placed stays earlier than its own, and it is placed when first),
 * so a read's marks cost O(1) a unit, not a sift. */
static void u_place(struct ct_file *f, uint32_t c, int64_t fat, const struct ev_ctx *x,
		    int64_t *exp, int lazy)
{
	struct ev_key k;
	uint32_t p = f->ev.upos[c];
	int h;

	if (!u_key(f, c, fat, x, &k)) {
		if (!lazy)
			u_remove(f, c);
		return;
	}
	if (p && lazy && !kept_less(k, (struct ev_key){f->ev.ucls[c], f->ev.uat[c]}))
		return;
	h = k.cls == EV_PLANNED;
	if (p && ((p & UPOS_H1) != 0) != h) {
		u_remove(f, c);
		p = 0;
	}
	f->ev.ucls[c] = (uint8_t)k.cls;
	f->ev.uat[c] = k.at;
	if (!p) {
		u_set(f, h, f->ev.un[h]++, c);
		p = f->ev.upos[c];
	}
	u_up(f, h, (p & ~UPOS_H1) - 1);
	u_down(f, h, (f->ev.upos[c] & ~UPOS_H1) - 1);
	if (k.cls != EV_PLANNED && cachetier__unit_atime(f, c) == 0) {
		f->ev.uold = 1;
		f->ev.uold_ahead |= k.cls == EV_AHEAD;
	}
	if (k.cls == EV_AHEAD) {
		int64_t e = unit_ahead_end(f, c, x->now);

		*exp = e < *exp ? e : *exp;
	}
}

static void u_free(struct ct_file *f)
{
	free((void *)atomic_load(&f->ev.mbits));
	atomic_store(&f->ev.mbits, NULL);
	free(f->ev.uh[0]);
	free(f->ev.uh[1]);
	free(f->ev.upos);
	free(f->ev.uat);
	free(f->ev.ucls);
	f->ev.uh[0] = f->ev.uh[1] = f->ev.upos = NULL;
	f->ev.uat = NULL;
	f->ev.ucls = NULL;
	f->ev.un[0] = f->ev.un[1] = 0;
}

/* The heaps of live f's units (allocated: 0; -ENOMEM). */
static int u_alloc(struct ct_file *f)
{
	size_t n = f->nunits ? f->nunits : 1;

	if (f->ev.upos)
		return 0;
	f->ev.uh[0] = malloc(n * sizeof(uint32_t));
	f->ev.uh[1] = malloc(n * sizeof(uint32_t));
	f->ev.upos = calloc(n, sizeof(uint32_t));
	f->ev.uat = malloc(n * sizeof(int64_t));
	f->ev.ucls = malloc(n);
	if (f->ev.uh[0] && f->ev.uh[1] && f->ev.upos && f->ev.uat && f->ev.ucls) {
		/* the marks' words last (a mark without them marks all) */
		_Atomic uint64_t *mb = calloc((n + 63) / 64, sizeof(*mb));

		f->ev.nmw = (uint32_t)((n + 63) / 64);
		if (mb)
			atomic_store_explicit(&f->ev.mbits, mb, memory_order_release);
		return 0;
	}
	u_free(f);
	return -ENOMEM;
}

/* Every unit of live f that holds bytes placed anew (O(its units log
 * them)): when it is first computed, all its units were marked, or a key
 * as placed may be later than the unit's own (its last use moved back,
 * or forward with a unit ahead as old as it: a key of minus fat). */
static void u_build(struct cachetier *ct, struct ct_file *f, int64_t fat, const struct ev_ctx *x,
		    int64_t *exp)
{
	for (int h = 0; h < 2; h++) {
		for (uint32_t i = 0; i < f->ev.un[h]; i++)
			f->ev.upos[f->ev.uh[h][i]] = 0;
		f->ev.un[h] = 0;
	}
	f->ev.uold = f->ev.uold_ahead = 0;
	for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1)) {
		ct->ev.examined++;
		u_place(f, c, fat, x, exp, 0);
	}
}

/* Must f's units be placed anew because its last use moved from the
 * one they were placed at (f->ev.fat) to fat? */
static int u_stale(const struct ct_file *f, int64_t fat)
{
	return fat != f->ev.fat && f->ev.uold && (fat < f->ev.fat || f->ev.uold_ahead);
}

/* The first unit of f's heap h, checked: a unit no fill may evict now
 * is taken out, one whose key moved back is placed again (at most once:
 * then it is where it belongs); UINT32_MAX: none. *looked counts the
 * units looked at. */
static uint32_t u_first(struct ct_file *f, int h, int64_t fat, const struct ev_ctx *x,
			uint64_t *looked, int64_t *exp)
{
	while (f->ev.un[h]) {
		uint32_t c = f->ev.uh[h][0];
		struct ev_key k;

		(*looked)++;
		if (!u_key(f, c, fat, x, &k)) {
			u_remove(f, c);
			continue;
		}
		if (k.cls == f->ev.ucls[c] && k.at == f->ev.uat[c])
			return c;
		u_place(f, c, fat, x, exp, 0);
	}
	return UINT32_MAX;
}

/* f's first keys (k[0]: of all its units, k[1]: of those not ahead) and
 * their units from its heaps' first units (*exp: as u_place). */
static void u_keys(struct cachetier *ct, struct ct_file *f, int64_t fat, const struct ev_ctx *x,
		   struct ev_key *k, uint32_t *u, int64_t *exp)
{
	uint32_t c0 = u_first(f, 0, fat, x, &ct->ev.examined, exp);
	uint32_t c1 = u_first(f, 1, fat, x, &ct->ev.examined, exp);

	for (int i = 0; i < 2; i++) {
		uint32_t c = c0 != UINT32_MAX && (i == 0 || f->ev.ucls[c0] < EV_AHEAD) ? c0 : c1;

		if (c == UINT32_MAX)
			continue;
		k[i] = (struct ev_key){f->ev.ucls[c], f->ev.uat[c]};
		u[i] = c;
	}
}

/* Unit c of live f counted in its bytes filled ahead or not, at now. */
static void unit_held_set(struct ct_file *f, uint32_t c, int64_t now, uint64_t *ahead, int64_t *exp)
{
	int h = unit_ahead_held(f, c, now);

	if (h) {
		*ahead += cachetier__unit_len(f, c);
		if (cachetier__ua(f, c) + AHEAD_SPARE_NS < *exp)
			*exp = cachetier__ua(f, c) + AHEAD_SPARE_NS;
	}
	f->ev.held[c] = (uint8_t)h;
}

/* f's keys, time, last use and bytes filled ahead as computed, into the
 * heaps. */
static void ev_set(struct cachetier *ct, struct ct_file *f, const struct ev_key *k,
		   const uint32_t *u, int64_t exp, int64_t fat, uint64_t ahead)
{
	f->ev.k[0] = k[0];
	f->ev.k[1] = k[1];
	f->ev.u[0] = u[0];
	f->ev.u[1] = u[1];
	f->ev.exp = exp;
	f->ev.fat = fat;
	ct->ev.ahead += ahead - f->ev.ahead;
	f->ev.ahead = ahead;
	h_fix(ct, H_ALL, f, k[0].cls != EV_NONE);
	h_fix(ct, H_SPARE, f, k[1].cls != EV_NONE);
	h_fix(ct, H_EXP, f, exp != INT64_MAX);
}

/* One changed unit c of ev_update's: placed again lazily in its order
 * unless built (the whole order was), counted again in the bytes filled
 * ahead (*ahead, its time into *exp) unless those are counted whole. */
static void ev_unit(struct cachetier *ct, struct ct_file *f, uint32_t c, int built, int ahead_whole,
		    const struct ev_ctx *x, int64_t fat, int64_t *exp, uint64_t *ahead)
{
	if (!built) {
		ct->ev.examined++;
		u_place(f, c, fat, x, exp, 1);
	}
	if (!ahead_whole) {
		if (f->ev.held[c])
			*ahead -= cachetier__unit_len(f, c);
		unit_held_set(f, c, x->now, ahead, exp);
	}
}

/* f's keys, bytes filled ahead and time at now into the heaps, after
 * units [lo, hi) changed: those units placed again in its order (its
 * units' heaps), or every unit of it that holds bytes when it was never
 * computed, all were marked, or its last use moved so that a key as
 * placed may be later than its unit's (u_stale); its first keys from the
 * first units of its order. The bytes filled ahead: from the marked
 * units, from every unit not read since its fill when all were marked. */
static void ev_update(struct cachetier *ct, struct ct_file *f, int64_t now, uint32_t lo,
		      uint32_t hi)
{
	struct ev_key k[2] = {{EV_NONE, 0}, {EV_NONE, 0}};
	struct ev_ctx x = {now, 0, CT_NEAR_NONE, ct, 0};
	uint32_t u[2] = {UINT32_MAX, UINT32_MAX};
	int64_t exp = INT64_MAX, fat = 0;
	uint64_t ahead = 0;
	/* f->nunits only once live: a file being loaded (f->opening) sets
	 * it without ct->lock. All: marked all (or marked with no words),
	 * not a span of marks from its first unit to its last */
	int all = f->live && lo == 0 && hi >= f->nunits &&
		  (hi == UINT32_MAX || !atomic_load_explicit(&f->ev.mbits, memory_order_relaxed));
	int ahead_whole = !f->ev.held || all;

	f->ev.chk = ct->ev.picks;
	if (f->live && !f->ev.held)
		f->ev.held = calloc(f->nunits ? f->nunits : 1, 1);
	if (f->live && f->ev.held && !f->ev.upos && u_alloc(f) == 0)
		all = ahead_whole = 1; /* never built */
	if (f->live && f->ev.held && f->ev.upos) {
		fat = file_at(f);
		hi = hi < f->nunits ? hi : f->nunits;
		if (!ahead_whole)
			exp = f->ev.exp; /* units counted ahead, not marked: their times */
		_Atomic uint64_t *mb = atomic_load_explicit(&f->ev.mbits, memory_order_relaxed);
		int built = all || u_stale(f, fat);

		if (built)
			u_build(ct, f, fat, &x, &exp);
		if (!ahead_whole)
			ahead = f->ev.ahead;
		/* the units marked (their bits, taken: every bit of a word, some
		 * may be of a mark whose span the next pick takes; its units'
		 * changes came before their bits), placed again lazily and
		 * counted in the bytes filled ahead or not; with no words (out of
		 * memory), every unit of the span */
		for (uint32_t w = lo / 64; mb && hi > lo && w < f->ev.nmw && w <= (hi - 1) / 64;
		     w++) {
			uint64_t b = atomic_exchange_explicit(&mb[w], 0, memory_order_acquire);

			for (; b && !all; b &= b - 1) {
				uint32_t c = w * 64 + (uint32_t)__builtin_ctzll(b);

				if (c >= f->nunits)
					break;
				ev_unit(ct, f, c, built, ahead_whole, &x, fat, &exp, &ahead);
			}
		}
		for (uint32_t c = lo; !mb && c < hi; c++)
			ev_unit(ct, f, c, built, ahead_whole, &x, fat, &exp, &ahead);
		if (ahead_whole) {
			memset(f->ev.held, 0, f->nunits);
			/* as the scan did: from one unit not read since its fill to the next */
			for (uint32_t c = cachetier__unread_next(f, 0); c < f->nunits;
			     c = cachetier__unread_next(f, c + 1)) {
				ct->ev.examined++;
				unit_held_set(f, c, now, &ahead, &exp);
			}
		}
		u_keys(ct, f, fat, &x, k, u, &exp);
	} else if (!f->live && f->bytes > 0) {
		k[0] = k[1] = (struct ev_key){EV_LRU, f->atime_ns};
	}
	ev_set(ct, f, k, u, exp, fat, ahead);
}

/* Bring every object's keys up to date for a pick at now: those marked,
 * those whose time came. */
static void ev_drain(struct cachetier *ct, int64_t now)
{
	struct ct_file *f, *next;

	f = atomic_exchange_explicit(&ct->ev.dirty, NULL, memory_order_acquire);
	for (; f; f = next) {
		uint64_t r;

		next = f->ev.dnext;
		atomic_store_explicit(&f->ev.dirty, 0, memory_order_release);
		r = atomic_exchange_explicit(&f->ev.range, 0, memory_order_acq_rel);
		ev_update(ct, f, now, (uint32_t)r, (uint32_t)(r >> 32));
	}
	while (ct->ev.h[H_EXP].n && ct->ev.h[H_EXP].v[0]->ev.exp <= now)
		ev_update(ct, ct->ev.h[H_EXP].v[0], now, 0, UINT32_MAX);
}

/* The first object of heap h that is not set aside for this pick (being
 * opened or evicted, given up on in this round: taken out into
 * ct->ev.park until the pick ends), its keys checked; NULL: none. */
static struct ct_file *ev_first(struct cachetier *ct, int h)
{
	struct ct_evheap *hp = &ct->ev.h[h];

	while (hp->n) {
		struct ct_file *f = hp->v[0];

		if (f->opening || f->evicting || f->evict_round == ct->evict_round) {
			if (ct->ev.npark == ct->ev.cpark) {
				uint32_t cap = ct->ev.cpark ? 2 * ct->ev.cpark : 16;
				struct ct_file **v = realloc(ct->ev.park, cap * sizeof(*v));

				if (!v)
					return NULL; /* no victim this time */
				ct->ev.park = v;
				ct->ev.cpark = cap;
			}
			h_remove(ct, h, f);
			ct->ev.park[ct->ev.npark++] = f;
			continue;
		}
		return f;
	}
	return NULL;
}

/* f's key in heap h as the scan gave it (a planned unit's: minus its
 * distance from the plan position), or EV_NONE when x may not evict it. */
static struct ev_key ev_key_of(const struct ct_file *f, int h, const struct ev_ctx *x)
{
	struct ev_key k = f ? f->ev.k[h] : (struct ev_key){EV_NONE, 0};

	if (k.cls == EV_PLANNED) {
		int64_t near = (int32_t)((uint32_t)k.at - x->pnow);

		if (x->spare && (x->near == CT_NEAR_NONE || near <= x->near))
			return (struct ev_key){EV_NONE, 0};
		k.at = -near;
	}
	return k;
}

static struct ct_file *ev_scan(struct cachetier *ct, const struct ev_ctx *x, struct ev_key *key,
			       struct ev_key *next);
static uint64_t ev_ahead_scan(struct cachetier *ct, int64_t now);

/* The kept order's pick for x (cachetier__ev_pick without the checks). */
static struct ct_file *ev_pick_kept(struct cachetier *ct, const struct ev_ctx *x, int h,
				    struct ev_key *key, struct ev_key *next)
{
	struct ct_file *best, *second = NULL;

	ev_drain(ct, x->now);
	best = ev_first(ct, h);
	if (best) {
		h_remove(ct, h, best);
		second = ev_first(ct, h);
		h_fix(ct, h, best, 1);
	}
	while (ct->ev.npark) {
		struct ct_file *f = ct->ev.park[--ct->ev.npark];

		h_fix(ct, h, f, 1);
	}
	*key = ev_key_of(best, h, x);
	*next = ev_key_of(second, h, x);
	if (key->cls == EV_NONE) {
		best = NULL;
		*key = (struct ev_key){0, 0};
	}
	return best;
}

/* Most times a checked pick is made again because a unit was marked
 * between the kept order's answer and the scan's (EV_VERIFY_TRIES - 1:
 * the last one is compared whatever came in). */
#define EV_VERIFY_TRIES 4

struct ct_file *cachetier__ev_pick(struct cachetier *ct, const struct ev_ctx *x, struct ev_key *key,
				   struct ev_key *next)
{
	int h = x->spare ? H_SPARE : H_ALL;
	struct ct_file *best, *s;
	struct ev_key sk, sn;

	ct->ev.picks++;
	best = ev_pick_kept(ct, x, h, key, next);
	for (int tries = 1; ct->ev.verify; tries++) {
		void (*hook)(void *) = ct->ev.hook;

		if (hook) { /* tests: a change without ct->lock, now */
			ct->ev.hook = NULL;
			hook(ct->ev.hook_arg);
		}
		s = ev_scan(ct, x, &sk, &sn);
		/* Units change without ct->lock (a read's end, a read or a plan's
		 * mark or read without it: cachetier_evheap.h), each marked after
		 * its change: the kept order has it at the next pick. A mark that
		 * came in since this pick's drain is a change the scan may have
		 * seen and the kept order did not (they did not look at one
		 * state): the two are made again, and compared once no unit was
		 * marked between them. (A change whose mark is still to come is
		 * not seen here: tests make no such change while a pick runs.) */
		if (atomic_load_explicit(&ct->ev.dirty, memory_order_acquire) &&
		    tries < EV_VERIFY_TRIES) {
			ct->ev.raced++;
			best = ev_pick_kept(ct, x, h, key, next);
			continue;
		}
		if (s != best || (s && (key_less(sk, *key) || key_less(*key, sk))) ||
		    key_less(sn, *next) || key_less(*next, sn)) {
			ct->ev.mismatch++;
			fprintf(stderr,
				"evheap: pick %llu (spare %d): heap %s {%d %lld} next {%d %lld}, "
				"scan %s {%d %lld} next {%d %lld}\n",
				(unsigned long long)ct->ev.picks, x->spare, best ? best->hash : "-",
				key->cls, (long long)key->at, next->cls, (long long)next->at,
				s ? s->hash : "-", sk.cls, (long long)sk.at, sn.cls,
				(long long)sn.at);
		}
		break;
	}
	return best;
}

void cachetier__ev_walk_begin(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x)
{
	ev_drain(ct, x->now);
	ct->ev.cur_fat = file_at(f);
	if (!f->ev.upos || u_stale(f, ct->ev.cur_fat))
		ev_update(ct, f, x->now, 0, 0);
}

uint32_t cachetier__ev_walk_next(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x,
				 struct ev_key *key)
{
	int64_t fat = ct->ev.cur_fat, exp = f->ev.exp;
	uint32_t c = UINT32_MAX, c0, c1;

	if (!f->ev.upos)
		return UINT32_MAX;
	c0 = u_first(f, 0, fat, x, &ct->ev.looked, &exp);
	if (c0 != UINT32_MAX && (!x->spare || f->ev.ucls[c0] < EV_AHEAD)) {
		c = c0;
		*key = (struct ev_key){f->ev.ucls[c], f->ev.uat[c]};
	} else if ((c1 = u_first(f, 1, fat, x, &ct->ev.looked, &exp)) != UINT32_MAX) {
		/* the furthest next use first: past one a prefetch fill may not
		 * evict (needed as soon as its own units), every other is nearer */
		int64_t near = (int32_t)((uint32_t)f->ev.uat[c1] - x->pnow);

		if (!x->spare || (x->near != CT_NEAR_NONE && near > x->near)) {
			c = c1;
			*key = (struct ev_key){EV_PLANNED, -near};
		}
	}
	if (c != UINT32_MAX)
		u_remove(f, c);
	if (exp < f->ev.exp) { /* a unit placed again is ahead */
		f->ev.exp = exp;
		h_fix(ct, H_EXP, f, 1);
	}
	return c;
}

void cachetier__ev_walk_end(struct cachetier *ct, struct ct_file *f, const struct ev_ctx *x,
			    const uint32_t *list, uint32_t n)
{
	struct ev_key k[2] = {{EV_NONE, 0}, {EV_NONE, 0}};
	uint32_t u[2] = {UINT32_MAX, UINT32_MAX};
	int64_t fat = ct->ev.cur_fat, exp = f->ev.exp;
	uint64_t ahead = f->ev.ahead;

	if (!f->ev.upos)
		return;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = list[i];

		ct->ev.looked++;
		u_place(f, c, fat, x, &exp, 0);
		if (f->ev.held[c])
			ahead -= cachetier__unit_len(f, c);
		unit_held_set(f, c, x->now, &ahead, &exp);
	}
	u_keys(ct, f, fat, x, k, u, &exp);
	ev_set(ct, f, k, u, exp, fat, ahead);
}

uint64_t cachetier__ev_ahead(struct cachetier *ct, int64_t now)
{
	ev_drain(ct, now);
	if (ct->ev.verify && ev_ahead_scan(ct, now) != ct->ev.ahead) {
		ct->ev.mismatch++;
		fprintf(stderr, "evheap: ahead %llu, scan %llu\n", (unsigned long long)ct->ev.ahead,
			(unsigned long long)ev_ahead_scan(ct, now));
	}
	return ct->ev.ahead;
}

void cachetier_evict_verify(struct cachetier *ct, int on, uint64_t counts[CT_EVV_N])
{
	cachetier__lock(ct);
	if (on >= 0)
		ct->ev.verify = on;
	if (counts) {
		counts[0] = ct->ev.picks;
		counts[1] = ct->ev.examined;
		counts[2] = ct->ev.scanned;
		counts[3] = ct->ev.mismatch;
		counts[4] = ct->ev.lists;
		counts[5] = ct->ev.list_mismatch;
		counts[6] = ct->ev.looked;
		counts[7] = ct->ev.sorted;
		counts[8] = ct->ev.units;
		counts[9] = ct->ev.raced;
	}
	disk_mutex_unlock(&ct->lock);
}

void cachetier_evict_verify_hook(struct cachetier *ct, void (*fn)(void *arg), void *arg)
{
	cachetier__lock(ct);
	ct->ev.hook = fn;
	ct->ev.hook_arg = arg;
	disk_mutex_unlock(&ct->lock);
}

void cachetier__ev_free(struct cachetier *ct)
{
	for (int h = 0; h < 3; h++) {
		free(ct->ev.h[h].v);
		ct->ev.h[h] = (struct ct_evheap){0};
	}
	free(ct->ev.park);
	ct->ev.park = NULL;
	ct->ev.npark = ct->ev.cpark = 0;
	for (struct ct_file *f = ct->files; f; f = f->next) {
		free(f->ev.held);
		f->ev.held = NULL;
		u_free(f);
	}
	atomic_store(&ct->ev.dirty, NULL);
}

/* ---- the scan the heaps replaced: what tests check each pick against ---- */

/* The scan's pick: every unit of every live object, a key each. */
static struct ct_file *ev_scan(struct cachetier *ct, const struct ev_ctx *x, struct ev_key *key,
			       struct ev_key *next)
{
	struct ct_file *best = NULL;
	struct ev_key bk = {0, 0}, nk = {EV_NONE, 0};

	for (struct ct_file *f = ct->files; f; f = f->next) {
		struct ev_key fk = {EV_NONE, 0};

		if (f->opening || f->evicting || f->evict_round == ct->evict_round)
			continue;
		if (f->live) {
			int64_t fat = file_at(f);

			for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1)) {
				struct ev_key k;

				ct->ev.scanned++;
				if (!unit_evictable(f, c, x))
					continue;
				k = unit_key(f, c, fat, x);
				if (key_less(k, fk))
					fk = k;
			}
		} else if (f->bytes > 0) {
			fk = (struct ev_key){EV_LRU, f->atime_ns};
		}
		if (fk.cls == EV_NONE)
			continue;
		if (!best || key_less(fk, bk)) {
			if (best)
				nk = bk;
			best = f;
			bk = fk;
		} else if (key_less(fk, nk)) {
			nk = fk;
		}
	}
	*key = bk;
	*next = nk;
	return best;
}

/* The scan's bytes filled ahead. */
static uint64_t ev_ahead_scan(struct cachetier *ct, int64_t now)
{
	uint64_t sum = 0;

	for (const struct ct_file *f = ct->files; f; f = f->next) {
		for (uint32_t c = f->live && f->bytes ? cachetier__unread_next(f, 0) : f->nunits;
		     c < f->nunits; c = cachetier__unread_next(f, c + 1)) {
			ct->ev.scanned++;
			if (unit_ahead_held(f, c, now))
				sum += cachetier__unit_len(f, c);
		}
	}
	return sum;
}
