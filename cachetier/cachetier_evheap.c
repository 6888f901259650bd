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
 * An object's keys are computed again (ev_update: every unit of it that
 * holds bytes, O(its units)) when
 *   - it was marked (cachetier__ev_mark): whatever may bring a unit of it
 *     forward in the order or change its bytes filled ahead calls it: a
 *     fill's end (cachetier_run.c), a read's begin and the loss of a unit
 *     it finds (cachetier_read.c, also without ct->lock), a range naming
 *     units (cachetier_queue.c, _span.c, _batch.c), a plan's mark or read
 *     (cachetier_plan.c, without ct->lock), its opening (cachetier_map.c),
 *     an eviction of it; marks are a lock-free stack (ct->ev.dirty) a pick
 *     empties;
 *   - a unit of it was pinned at the last computation (a read holds it,
 *     with or without ct->lock): it is looked at again at every pick until
 *     none is (ct->ev.vol), so a read's end needs no mark;
 *   - its time came (ev.h[2]);
 *   - it comes first in a pick: its key is checked (computed again) before
 *     it is taken, and so is the next one's, so a change that only moves a
 *     unit back in the order (pinned, claimed by a fill, its state byte
 *     cleared by another process) needs no mark.
 * What this does not see at once: units another process filled into an
 * object live here (their state bytes) are candidates from the object's
 * next computation, not before; the scan saw them at the next eviction.
 *
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

void cachetier__ev_mark(struct cachetier *ct, struct ct_file *f)
{
	struct ct_file *head;

	if (atomic_load_explicit(&f->ev.dirty, memory_order_relaxed) ||
	    atomic_exchange_explicit(&f->ev.dirty, 1, memory_order_acq_rel))
		return;
	head = atomic_load_explicit(&ct->ev.dirty, memory_order_relaxed);
	do {
		f->ev.dnext = head;
	} while (!atomic_compare_exchange_weak_explicit(
	    &ct->ev.dirty, &head, f, memory_order_release, memory_order_relaxed));
}

void cachetier__ev_link(struct cachetier *ct, struct ct_file *f)
{
	f->ev.seq = ++ct->ev.seq;
	cachetier__ev_mark(ct, f);
}

/* f's keys, bytes filled ahead and time at now, into the heaps. */
static void ev_update(struct cachetier *ct, struct ct_file *f, int64_t now)
{
	struct ev_key k0 = {EV_NONE, 0}, k1 = {EV_NONE, 0};
	struct ev_ctx x = {now, 0, CT_NEAR_NONE, ct, 0};
	int64_t exp = INT64_MAX;
	uint64_t ahead = 0;
	int vol = 0;

	f->ev.chk = ct->ev.picks;
	if (f->live) {
		int64_t fat = file_at(f);
		const uint8_t *p;

		for (uint32_t c = st_next(f, 0); c < f->nunits; c = st_next(f, c + 1)) {
			struct ev_key k;

			ct->ev.examined++;
			if (f->ust[c] != UNIT_VALID && f->ust[c] != UNIT_EMPTY)
				continue;
			if (f->pins[c] || cachetier__fp_pins(f, c)) {
				vol = 1; /* looked at again at the next pick */
				continue;
			}
			k = unit_key(f, c, fat, &x);
			if (k.cls == EV_PLANNED) /* the raw mark (ev_before) */
				k.at = atomic_load_explicit(&f->nu[c], memory_order_relaxed);
			if (kept_less(k, k0))
				k0 = k;
			if (k.cls == EV_AHEAD) {
				int64_t e = unit_ahead_end(f, c, now);

				exp = e < exp ? e : exp;
			} else if (kept_less(k, k1)) {
				k1 = k;
			}
		}
		/* as the scan did: from one unit not read since its fill to the next */
		for (uint32_t c = 0; f->bytes && c < f->nunits; c = (uint32_t)(p - f->unread) + 1) {
			p = memchr(f->unread + c, 1, f->nunits - c);
			if (!p)
				break;
			c = (uint32_t)(p - f->unread);
			ct->ev.examined++;
			if (unit_ahead_held(f, c, now)) {
				ahead += cachetier__unit_len(f, c);
				if (f->uatime[c] + AHEAD_SPARE_NS < exp)
					exp = f->uatime[c] + AHEAD_SPARE_NS;
			}
		}
	} else if (f->bytes > 0) {
		k0 = k1 = (struct ev_key){EV_LRU, f->atime_ns};
	}
	f->ev.k[0] = k0;
	f->ev.k[1] = k1;
	f->ev.exp = exp;
	ct->ev.ahead += ahead - f->ev.ahead;
	f->ev.ahead = ahead;
	h_fix(ct, H_ALL, f, k0.cls != EV_NONE);
	h_fix(ct, H_SPARE, f, k1.cls != EV_NONE);
	h_fix(ct, H_EXP, f, exp != INT64_MAX);
	if (vol && !f->ev.inv) {
		f->ev.inv = 1;
		f->ev.vnext = ct->ev.vol;
		ct->ev.vol = f;
	}
}

/* Bring every object's keys up to date for a pick at now: those with a
 * pinned unit, those marked, those whose time came. */
static void ev_drain(struct cachetier *ct, int64_t now)
{
	struct ct_file *f = ct->ev.vol, *next;

	ct->ev.vol = NULL;
	for (; f; f = next) {
		next = f->ev.vnext;
		f->ev.inv = 0;
		ev_update(ct, f, now);
	}
	f = atomic_exchange_explicit(&ct->ev.dirty, NULL, memory_order_acquire);
	for (; f; f = next) {
		next = f->ev.dnext;
		atomic_store_explicit(&f->ev.dirty, 0, memory_order_release);
		ev_update(ct, f, now);
	}
	while (ct->ev.h[H_EXP].n && ct->ev.h[H_EXP].v[0]->ev.exp <= now)
		ev_update(ct, ct->ev.h[H_EXP].v[0], now);
}

/* The first object of heap h that is not set aside for this pick (being
 * opened or evicted, given up on in this round: taken out into
 * ct->ev.park until the pick ends), its keys checked; NULL: none. */
static struct ct_file *ev_first(struct cachetier *ct, int h, int64_t now)
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
		if (f->ev.chk == ct->ev.picks)
			return f;
		ev_update(ct, f, now); /* checked: it may have moved back */
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
	best = ev_first(ct, h, x->now);
	if (best) {
		h_remove(ct, h, best);
		second = ev_first(ct, h, x->now);
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
	ct->ev.vol = NULL;
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
