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
 * opening (cachetier_map.c, _scan.c); an eviction of it. A mark is the
 * span of units marked since (one word per object, widened by a
 * compare-and-swap) and the object on a lock-free stack (ct->ev.dirty)
 * the next pick empties. The pick computes each marked object again
 * (ev_update): from its keys as they were and the marked units alone
 * (O(units marked)), a unit that moved back in the order being no first
 * unit; every unit of it that holds bytes (O(its units)) when its first
 * unit (of either key) is among them, when a key stood on its last use and
 * that moved (units it never touched are as old as the object), or when
 * its time came (ev.h[2]). A change that only moves a unit back (pinned,
 * claimed by a fill) needs no mark; a pinned unit is left out and marked
 * at its unpin.
 * What this does not see: changes by other processes sharing the
 * directory (units they filled into, or evicted from, an object live here;
 * their reads' last use) count from the object's next computation, not at
 * once (the scan saw them at the next pick): a victim whose units went
 * takes none (evict(): given up for the round) and the next is picked.

 * Bytes filled ahead (cachetier__ev_ahead, the rules' ahead_share check of
 * every prefetch fill's room) are kept the same way: per object (ev.ahead),
 * summed in ct->ev.ahead.
 *
 * Tests (cachetier_evict_verify): every pick is also made by the scan it
 * replaced (ev_scan: every unit of every live object, as before) and the
 * two compared; the units each looked at are counted (cachetier_stats:
 * evict_examined, evict_scanned, evict_mismatches).
 *
 * Threads: ct->lock for everything but cachetier__ev_mark (any thread).
 */
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

	if (c1 <= c0)
		return;
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

/* Unit c of live f into the keys *k (k[0], k[1], their units u), *exp,
 * *ufat (fat: file_at(f)); x: now. */
static void unit_into(struct cachetier *ct, struct ct_file *f, uint32_t c, int64_t fat,
		      const struct ev_ctx *x, struct ev_key *k, uint32_t *u, int64_t *exp,
		      int *ufat)
{
	struct ev_key uk;
	int old;

	ct->ev.examined++;
	if (!cachetier__st_get(f, c) || (f->ust[c] != UNIT_VALID && f->ust[c] != UNIT_EMPTY) ||
	    f->pins[c] || cachetier__fp_pins(f, c))
		return; /* pinned: marked when unpinned */
	uk = unit_key(f, c, fat, x);
	old = cachetier__unit_atime(f, c) == 0;
	if (uk.cls == EV_PLANNED) /* the raw mark (ev_before) */
		uk.at = atomic_load_explicit(&f->nu[c], memory_order_relaxed);
	if (kept_less(uk, k[0])) {
		k[0] = uk;
		u[0] = c;
		*ufat |= old;
	}
	if (uk.cls == EV_AHEAD) {
		int64_t e = unit_ahead_end(f, c, x->now);

		*exp = e < *exp ? e : *exp;
		*ufat |= old; /* its key is minus fat */
	} else if (kept_less(uk, k[1])) {
		k[1] = uk;
		u[1] = c;
		*ufat |= old;
	}
}

/* Unit c of live f counted in its bytes filled ahead or not, at now. */
static void unit_held_set(struct ct_file *f, uint32_t c, int64_t now, uint64_t *ahead, int64_t *exp)
{
	int h = unit_ahead_held(f, c, now);

	if (h) {
		*ahead += cachetier__unit_len(f, c);
		if (f->uatime[c] + AHEAD_SPARE_NS < *exp)
			*exp = f->uatime[c] + AHEAD_SPARE_NS;
	}
	f->ev.held[c] = (uint8_t)h;
}

/* f's keys, bytes filled ahead and time at now into the heaps, after
 * units [lo, hi) changed: those units alone when neither first unit is
 * among them and its last use is as it was, else every unit of it that
 * holds bytes. */
static void ev_update(struct cachetier *ct, struct ct_file *f, int64_t now, uint32_t lo,
		      uint32_t hi)
{
	struct ev_key k[2] = {{EV_NONE, 0}, {EV_NONE, 0}};
	struct ev_ctx x = {now, 0, CT_NEAR_NONE, ct, 0};
	uint32_t u[2] = {UINT32_MAX, UINT32_MAX};
	int64_t exp = INT64_MAX, fat = 0;
	uint64_t ahead = 0;
	int ufat = 0, whole = !f->ev.held; /* never computed whole */
	int ahead_whole = whole || (lo == 0 && hi >= f->nunits);

	f->ev.chk = ct->ev.picks;
	if (f->live && !f->ev.held)
		f->ev.held = calloc(f->nunits ? f->nunits : 1, 1);
	if (f->live && f->ev.held) {
		fat = file_at(f);
		whole |= (lo == 0 && hi >= f->nunits) || (f->ev.u[0] >= lo && f->ev.u[0] < hi) ||
			 (f->ev.u[1] >= lo && f->ev.u[1] < hi) || (f->ev.ufat && fat != f->ev.fat);
		if (!whole) { /* from the keys as they were */
			k[0] = f->ev.k[0];
			k[1] = f->ev.k[1];
			u[0] = f->ev.u[0];
			u[1] = f->ev.u[1];
			exp = f->ev.exp;
			ahead = f->ev.ahead;
			ufat = f->ev.ufat;
			hi = hi < f->nunits ? hi : f->nunits;
			for (uint32_t c = lo; c < hi; c++) {
				if (f->ev.held[c])
					ahead -= cachetier__unit_len(f, c);
				unit_held_set(f, c, now, &ahead, &exp);
				unit_into(ct, f, c, fat, &x, k, u, &exp, &ufat);
			}
		} else if (!ahead_whole) {
			/* the keys from every unit, the bytes filled ahead from the
			 * marked ones (each unit's count stands until it is marked) */
			for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1))
				unit_into(ct, f, c, fat, &x, k, u, &exp, &ufat);
			ahead = f->ev.ahead;
			hi = hi < f->nunits ? hi : f->nunits;
			for (uint32_t c = lo; c < hi; c++) {
				ct->ev.examined++;
				if (f->ev.held[c])
					ahead -= cachetier__unit_len(f, c);
				unit_held_set(f, c, now, &ahead, &exp);
			}
			if (f->ev.exp < exp) /* units counted, not marked: their times */
				exp = f->ev.exp;
		} else {
			const uint8_t *p;

			for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1))
				unit_into(ct, f, c, fat, &x, k, u, &exp, &ufat);
			memset(f->ev.held, 0, f->nunits);
			/* as the scan did: from one unit not read since its fill to the next */
			for (uint32_t c = 0; c < f->nunits; c = (uint32_t)(p - f->unread) + 1) {
				p = memchr(f->unread + c, 1, f->nunits - c);
				if (!p)
					break;
				c = (uint32_t)(p - f->unread);
				ct->ev.examined++;
				unit_held_set(f, c, now, &ahead, &exp);
			}
		}
	} else if (!f->live && f->bytes > 0) {
		k[0] = k[1] = (struct ev_key){EV_LRU, f->atime_ns};
	}
	f->ev.k[0] = k[0];
	f->ev.k[1] = k[1];
	f->ev.u[0] = u[0];
	f->ev.u[1] = u[1];
	f->ev.exp = exp;
	f->ev.fat = fat;
	f->ev.ufat = ufat;
	ct->ev.ahead += ahead - f->ev.ahead;
	f->ev.ahead = ahead;
	h_fix(ct, H_ALL, f, k[0].cls != EV_NONE);
	h_fix(ct, H_SPARE, f, k[1].cls != EV_NONE);
	h_fix(ct, H_EXP, f, exp != INT64_MAX);
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

struct ct_file *cachetier__ev_pick(struct cachetier *ct, const struct ev_ctx *x, struct ev_key *key,
				   struct ev_key *next)
{
	int h = x->spare ? H_SPARE : H_ALL;
	struct ct_file *best, *second = NULL;

	ct->ev.picks++;
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
	if (ct->ev.verify) {
		struct ev_key sk, sn;
		struct ct_file *s = ev_scan(ct, x, &sk, &sn);

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
	}
	return best;
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

void cachetier_evict_verify(struct cachetier *ct, int on, uint64_t counts[4])
{
	cachetier__lock(ct);
	if (on >= 0)
		ct->ev.verify = on;
	if (counts) {
		counts[0] = ct->ev.picks;
		counts[1] = ct->ev.examined;
		counts[2] = ct->ev.scanned;
		counts[3] = ct->ev.mismatch;
	}
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
		const uint8_t *p;

		for (uint32_t c = 0; f->live && f->bytes && c < f->nunits;
		     c = (uint32_t)(p - f->unread) + 1) {
			p = memchr(f->unread + c, 1, f->nunits - c);
			if (!p)
				break;
			c = (uint32_t)(p - f->unread);
			ct->ev.scanned++;
			if (unit_ahead_held(f, c, now))
				sum += cachetier__unit_len(f, c);
		}
	}
	return sum;
}
