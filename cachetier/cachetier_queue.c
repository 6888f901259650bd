/*
 * cachetier_queue.c — the fill queues of the unit store (cachetier_map.c),
 * served as the fetch scheduler's rules say (cachetier_set_policy:
 * fetch/fetch_rules.c); the workers that serve them are in
 * cachetier_fill.c. The queue functions run with ct->lock held; the
 * prefetch calls at the end (cachetier__file_prefetch, _prefetch_range,
 * _prefetch_state) take it themselves.
 *
 * Queues: demand (a reader waits), readahead, prefetch ranges (planned
 * ranges, in the order asked), prefetch cursors (a cursor per object, so a
 * prefetch of a huge object queues nothing up front).
 *
 * The store decides no fetch; this file is where it asks the rules, each
 * hook of struct cachetier_policy: which queue the next fill comes from
 * and how many fills of each kind run at once (next), where a fill's run
 * of units ends (run), which range fills are small (small), which prefetch
 * fills are withdrawn part-way for readers (pf_yield) and the counts of
 * the slow start (start, reader_job, pf_ended), how much a miss fills
 * (miss_whole), whether a readahead fill a reader waits for becomes a miss
 * (promote: cachetier__queue_wait), whether a reader's object is
 * prefetched first (cursor_front: cachetier__queue_read), a readahead
 * window's cap (window_max: cachetier_readahead_max) and a decoder's
 * window (decode_ahead: cachetier__decode_ahead), whether a batch request
 * with no room ends its call (batch_unfit: cachetier__batch_unfit) and the
 * share of a full cache fills ahead may hold (ahead_share:
 * cachetier__ahead_share). The store keeps the counts they decide on and
 * does what they say; what it keeps of its own are capacities (a fill's
 * run at most what a slot holds).
 *
 * The no-rules fallback (a store no scheduler drives: only unit tests of
 * the store; fetch_new installs the rules before any read) is minimal:
 * the queues in the order listed in any free slot (plain_next), a chunk a
 * fill (run_bounds), only the units a miss reads, nothing small, no
 * prefetch fill stopped, a queued fill left in its queue, the cursors in
 * the order asked, the configured window uncapped, no readahead for a
 * decoder, every batch request tried, fills ahead may hold the whole cache.
 *
 * A PF_FIT prefetch skips, never evicts for, a fill that does not fit. A
 * unit has one state (enum ct_unit), so concurrent misses of one unit
 * share one fill. Readers wait on ct->unit_cond for just the units they
 * need; a failed fill leaves the unit EMPTY with its error, which every
 * reader that was waiting for that fill returns; the next read retries.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_i.h"

/* ---- queues (all with ct->lock held) ---- */

/* Ask the prefetch fill of slot sl to stop (its sink ends it at the next
 * piece that arrives; worker_main then hands the chunk back). */
static void pf_withdraw(struct cachetier *ct, struct ct_slot *sl)
{
	atomic_store(&sl->withdraw, 1);
	ct->pf_withdrawing++;
	ct->pf_withdrawn++;
}

/* The counts the prefetch rules decide on (cachetier_pf_counts). */
static struct cachetier_pf_counts pf_counts(const struct cachetier *ct)
{
	struct cachetier_pf_counts k = {
	    .fill_threads = ct->cfg.fill_threads,
	    .small_fills = ct->cfg.small_fills,
	    .cursor_fills = ct->cfg.cursor_fills,
	    .rd_queued = ct->rd_queued,
	    .rd_inflight = ct->rd_inflight,
	    .ra_busy = ct->ra_busy,
	    .cap = ct->pf_cap,
	    .quiet = ct->pf_quiet,
	};

	return k;
}

static void pf_counts_put(struct cachetier *ct, const struct cachetier_pf_counts *k)
{
	ct->pf_cap = k->cap;
	ct->pf_quiet = k->quiet;
}

void cachetier_set_policy(struct cachetier *ct, const struct cachetier_policy *p)
{
	cachetier__lock(ct);
	if (p && p != ct->policy) { /* the same rules again: their state stays */
		struct cachetier_pf_counts k = pf_counts(ct);

		p->start(&k);
		pf_counts_put(ct, &k);
	}
	ct->policy = p;
	disk_mutex_unlock(&ct->lock);
}

/* The rules' cap of a window (window_max); without rules the configured
 * one. ct->lock held. */
static uint64_t window_cap(const struct cachetier *ct)
{
	return ct->policy ? ct->policy->window_max(ct->cfg.readahead_max_bytes, ct->cfg.chunk_bytes,
						   ct->cfg.cache_size_bytes)
			  : ct->cfg.readahead_max_bytes;
}

uint64_t cachetier_readahead_max(struct cachetier *ct)
{
	uint64_t max;

	cachetier__lock(ct);
	max = window_cap(ct);
	disk_mutex_unlock(&ct->lock);
	return max;
}

uint64_t cachetier__decode_ahead(struct cachetier *ct)
{
	uint64_t ahead;

	cachetier__lock(ct);
	ahead = ct->policy ? ct->policy->decode_ahead(window_cap(ct)) : 0;
	disk_mutex_unlock(&ct->lock);
	return ahead;
}

int cachetier__batch_unfit(struct cachetier *ct, size_t g, size_t nreq)
{
	int ends;

	cachetier__lock(ct);
	ends = ct->policy && ct->policy->batch_unfit(g, nreq);
	disk_mutex_unlock(&ct->lock);
	return ends;
}

uint64_t cachetier__ahead_share(const struct cachetier *ct)
{
	return ct->policy ? ct->policy->ahead_share(ct->cfg.cache_size_bytes)
			  : ct->cfg.cache_size_bytes;
}

void cachetier__pf_ended(struct cachetier *ct)
{
	struct cachetier_pf_counts k = pf_counts(ct);

	if (!ct->policy)
		return;
	ct->policy->pf_ended(&k);
	pf_counts_put(ct, &k);
}

int cachetier__miss_whole(struct cachetier *ct, const struct ct_file *f, uint64_t ahead)
{
	struct ct_room r;

	if (!ct->policy)
		return 0;
	cachetier__acct_get(ct, &r);
	return ct->policy->miss_whole(ahead > 0, r.usage + r.reserved + r.evicting,
				      (uint64_t)f->unit_bytes * f->group, ct->cfg.cache_size_bytes);
}

/* After a job for object f was queued (ra: a readahead job): the prefetch
 * fills the rules say stop for readers (pf_yield) are withdrawn. */
static void ask_yield(struct cachetier *ct, const struct ct_file *f, int ra)
{
	struct cachetier_pf_slot v[ct->nslots > 0 ? ct->nslots : 1];
	uint8_t stop[ct->nslots > 0 ? ct->nslots : 1];
	struct cachetier_pf_counts k = pf_counts(ct);

	if (!ct->policy)
		return;
	for (unsigned i = 0; i < ct->nslots; i++) {
		const struct ct_slot *sl = &ct->slots[i];

		memset(&v[i], 0, sizeof(v[i]));
		stop[i] = 0;
		if (!sl->f)
			continue;
		v[i].inflight = 1;
		v[i].stopping = (uint8_t)atomic_load(&sl->withdraw);
		v[i].pf = sl->pf != 0;
		v[i].small = sl->small != 0;
		v[i].same = sl->f == f;
		v[i].got = atomic_load_explicit(&sl->got, memory_order_relaxed);
		v[i].len = cachetier__run_len(sl->f, sl->c, sl->n);
		v[i].seq = sl->seq;
		for (uint32_t u = sl->c; u < sl->c + sl->n && !v[i].pinned; u++)
			v[i].pinned = sl->f->pins[u] != 0;
	}
	ct->policy->pf_yield(&k, v, ct->nslots, ra, stop);
	for (unsigned i = 0; i < ct->nslots; i++) {
		if (stop[i] && v[i].inflight && v[i].pf && !v[i].stopping)
			pf_withdraw(ct, &ct->slots[i]);
	}
}

/* Queue one fill of units [c, c + n) of f, all UNIT_EMPTY; flocked: the
 * caller holds f->lock (else taken for the states). */
static int queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int ra,
		      int flocked)
{
	struct ct_job *j = malloc(sizeof(*j));

	if (!j)
		return -ENOMEM;
	j->f = f;
	j->c = c;
	j->n = n;
	j->ra = ra;
	j->next = NULL;
	if (ra) {
		*ct->rq_tail = j;
		ct->rq_tail = &j->next;
	} else {
		*ct->dq_tail = j;
		ct->dq_tail = &j->next;
	}
	if (!flocked)
		disk_mutex_lock(&f->lock);
	for (uint32_t u = c; u < c + n; u++)
		cachetier__unit_set(f, u, UNIT_QUEUED);
	if (!flocked)
		disk_mutex_unlock(&f->lock);
	ct->rd_queued++;
	ct->ra_busy += ra != 0;
	if (ct->policy) {
		struct cachetier_pf_counts k = pf_counts(ct);

		ct->policy->reader_job(&k, ra);
		pf_counts_put(ct, &k);
	}
	ask_yield(ct, f, ra);
	cachetier__work_wake(ct); /* one wake-up for the pushes of one hold of ct->lock */
	return 0;
}

int cachetier__queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int ra)
{
	return queue_push(ct, f, c, n, ra, 0);
}

int cachetier__queue_push_flocked(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n,
				  int ra)
{
	return queue_push(ct, f, c, n, ra, 1);
}

/* The bounds of a fill of kind around unit c of f, within [*lo, *hi): the
 * rules' (policy->run); without rules c's chunk. ct->lock held. */
static void run_bounds(const struct cachetier *ct, const struct ct_file *f,
		       enum cachetier_fill_kind kind, uint32_t c, uint32_t *lo, uint32_t *hi)
{
	if (*hi > f->nunits)
		*hi = f->nunits;
	if (ct->policy) {
		ct->policy->run(kind, c, f->group, f->nunits, lo, hi);
	} else {
		uint32_t g0 = c - c % f->group, g1 = g0 + f->group;

		if (*lo < g0)
			*lo = g0;
		if (*hi > g1)
			*hi = g1;
	}
	if (*lo > c)
		*lo = c;
	if (*hi <= c)
		*hi = c + 1;
}

uint32_t cachetier__queue_last(const struct cachetier *ct, const struct ct_file *f,
			       enum cachetier_fill_kind kind, uint32_t c)
{
	uint32_t lo = 0, hi = f->nunits;

	if (c >= f->nunits)
		c = f->nunits - 1;
	run_bounds(ct, f, kind, c, &lo, &hi);
	return hi - 1;
}

/* The run of UNIT_EMPTY units around unit c (UNIT_EMPTY) within [lo, hi) as
 * the rules bound a fill of kind: *a .. *b (exclusive). ct->lock held. */
static void empty_run(const struct cachetier *ct, const struct ct_file *f,
		      enum cachetier_fill_kind kind, uint32_t c, uint32_t lo, uint32_t hi,
		      uint32_t *a, uint32_t *b)
{
	run_bounds(ct, f, kind, c, &lo, &hi);
	*a = c;
	*b = c + 1;
	/* at most what a fill slot holds (ct->upc units: its claim, error
	 * and CRC arrays), whatever the rules allow: a capacity, not a choice */
	while (*a > lo && *b - *a < ct->upc && f->ust[*a - 1] == UNIT_EMPTY)
		(*a)--;
	while (*b < hi && *b - *a < ct->upc && f->ust[*b] == UNIT_EMPTY)
		(*b)++;
}

/* Queue one fill of the UNIT_EMPTY units around unit c within [lo, hi) as
 * the rules bound it (one range request). */
int cachetier__queue_run(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t lo,
			 uint32_t hi, int ra)
{
	uint32_t a, b;

	empty_run(ct, f, ra ? CACHETIER_FILL_READAHEAD : CACHETIER_FILL_DEMAND, c, lo, hi, &a, &b);
	return cachetier__queue_push(ct, f, a, b - a, ra);
}

/* Unlink the job *pp from a queue whose tail pointer is *tail. */
static struct ct_job *queue_pop(struct ct_job ***tail, struct ct_job **pp)
{
	struct ct_job *j = *pp;

	*pp = j->next;
	if (*tail == &j->next)
		*tail = pp;
	return j;
}

/* A reader waits for unit c of f (UNIT_QUEUED): when readahead queued it,
 * its fill moves to the demand queue if the rules' promote says so (a
 * store without rules leaves it). Units queued on demand already are
 * there; a prefetch cursor's claimed units are on no queue. */
void cachetier__queue_wait(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
	ct->queued_waits++;
	if (!ct->policy || !ct->policy->promote(CACHETIER_FILL_READAHEAD))
		return;
	for (struct ct_job **pp = &ct->rq; *pp; pp = &(*pp)->next) {
		if ((*pp)->f == f && (*pp)->c <= c && c < (*pp)->c + (*pp)->n) {
			struct ct_job *j = queue_pop(&ct->rq_tail, pp);

			j->next = NULL;
			*ct->dq_tail = j;
			ct->dq_tail = &j->next;
			return;
		}
	}
}

/* The prefetch list ct->pf: objects whose prefetch runs, doubly linked
 * (pf_pprev points at the link that points at the entry) so that a
 * reader's object moves to the front in O(1). */
void cachetier__pf_unlink(struct cachetier *ct, struct ct_file *f)
{
	*f->pf_pprev = f->pf_link;
	if (f->pf_link)
		f->pf_link->pf_pprev = f->pf_pprev;
	else
		ct->pf_tail = f->pf_pprev;
	f->pf_link = NULL;
	f->pf_pprev = NULL;
	__atomic_store_n(&f->pf_listed, 0,
			 __ATOMIC_RELEASE); /* read by a commit without ct->lock */
}

void cachetier__queue_read(struct cachetier *ct, struct ct_file *f)
{
	if (f->pf_listed && ct->pf != f && ct->policy && ct->policy->cursor_front()) {
		cachetier__pf_unlink(ct, f);
		cachetier__pf_push(ct, f, 1);
	}
}

void cachetier__pf_push(struct cachetier *ct, struct ct_file *f, int front)
{
	__atomic_store_n(&f->pf_listed, 1, __ATOMIC_RELEASE);
	/* its reads move its cursor (queue_read): with ct->lock */
	atomic_store_explicit(&f->fast_ok, 0, memory_order_relaxed);
	if (front) {
		f->pf_link = ct->pf;
		f->pf_pprev = &ct->pf;
		if (ct->pf)
			ct->pf->pf_pprev = &f->pf_link;
		else
			ct->pf_tail = &f->pf_link;
		ct->pf = f;
	} else {
		f->pf_link = NULL;
		f->pf_pprev = ct->pf_tail;
		*ct->pf_tail = f;
		ct->pf_tail = &f->pf_link;
	}
}

int cachetier__fill_small(const struct cachetier *ct, const struct ct_file *f, uint32_t c,
			  uint32_t n, int pf)
{
	return (pf == CT_PF_RANGE_FIT || pf == CT_PF_RANGE_EVICT) && ct->policy &&
	       ct->policy->small(cachetier__run_len(f, c, n));
}

/* Drop the range at the front of ct->pr. */
void cachetier__range_pop(struct cachetier *ct)
{
	struct ct_range *r = ct->pr;

	ct->pr = r->link;
	if (!ct->pr)
		ct->pr_tail = &ct->pr;
	r->f->pr_queued--;
	free(r);
}

/* Queue units [c0, c1) of f as a range, at the back of ct->pr or (front:
 * a withdrawn fill's units) at its front. 0 or -ENOMEM. */
int cachetier__range_push(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			  int evict, int front)
{
	struct ct_range *r = malloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->f = f;
	r->next = c0;
	r->end = c1;
	r->evict = evict;
	f->pr_queued++;
	if (front) {
		r->link = ct->pr;
		if (!ct->pr)
			ct->pr_tail = &r->link;
		ct->pr = r;
	} else {
		r->link = NULL;
		*ct->pr_tail = r;
		ct->pr_tail = &r->link;
	}
	return 0;
}

/* A prefetch cursor (*next, up to end) over units of p takes its next
 * fill: the empty units from the first empty one at or after *next to the
 * end of their chunk (or at end), claimed for the worker (UNIT_QUEUED, on no
 * queue: a reader waits for them), in *c and *n; *next moves past them and
 * the filled units after them. 0: none left (*next reached end). ct->lock
 * held. */
static int cursor_take(const struct cachetier *ct, struct ct_file *p, enum cachetier_fill_kind kind,
		       uint32_t *next, uint32_t end, uint32_t *c, uint32_t *n)
{
	uint32_t a, b;

	while (*next < end && p->ust[*next] != UNIT_EMPTY)
		(*next)++;
	if (*next >= end)
		return 0;
	empty_run(ct, p, kind, *next, *next, end, &a, &b);
	disk_mutex_lock(&p->lock);
	for (uint32_t u = a; u < b; u++)
		cachetier__unit_set(p, u, UNIT_QUEUED);
	disk_mutex_unlock(&p->lock);
	*c = a;
	*n = b - a;
	*next = b;
	while (*next < end && p->ust[*next] != UNIT_EMPTY)
		(*next)++;
	return 1;
}

/* Is the next fill of range r (cursor_take's run, not claimed here) a
 * small one (cachetier__fill_small)? 1 yes, 0 no, -1 none left (range_next
 * then drops the range). ct->lock held. */
static int range_small(const struct cachetier *ct, const struct ct_range *r)
{
	uint32_t at = r->next, a, b;

	while (at < r->end && r->f->ust[at] != UNIT_EMPTY)
		at++;
	if (at >= r->end)
		return -1;
	empty_run(ct, r->f, CACHETIER_FILL_RANGE, at, at, r->end, &a, &b);
	return cachetier__fill_small(ct, r->f, a, b - a, CT_PF_RANGE_FIT);
}

/* The next fill of the range at the front of ct->pr (cursor_take); the
 * range goes once its cursor reached its end. 1: one, in *f, *c, *n, *pf;
 * 0: the range had none left. ct->lock held. */
static int range_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n, int *pf)
{
	struct ct_range *r = ct->pr;
	int took = cursor_take(ct, r->f, CACHETIER_FILL_RANGE, &r->next, r->end, c, n);

	*f = r->f;
	*pf = r->evict ? CT_PF_RANGE_EVICT : CT_PF_RANGE_FIT;
	if (r->next >= r->end)
		cachetier__range_pop(ct);
	return took;
}

/* Without rules: the queues in the order listed, in any free slot. */
static enum cachetier_queue plain_next(const struct cachetier_queue_heads *q)
{
	if (q->demand)
		return CACHETIER_Q_DEMAND;
	if (q->readahead)
		return CACHETIER_Q_READAHEAD;
	if (q->range >= 0)
		return CACHETIER_Q_RANGE;
	return q->cursor ? CACHETIER_Q_CURSOR : CACHETIER_Q_NONE;
}

/* The next fill, from the queue the rules pick (policy->next): demand,
 * readahead, the front prefetch range, or the front object's prefetch
 * cursor (*pf: its kind). A range or an object whose cursor passed its
 * last unit leaves its queue at once (so an object's prefetch counts as
 * ended once its fills in flight are done). ct->lock held. */
int cachetier__queue_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n,
			  int *ra, int *pf)
{
	for (;;) {
		struct cachetier_queue_heads q = {
		    .fills_inflight = ct->fills_inflight,
		    .small_inflight = ct->small_inflight,
		    .pf_running = ct->pf_running,
		    .demand = ct->dq != NULL,
		    .readahead = ct->rq != NULL,
		    .cursor = ct->pf != NULL,
		    .range = -1,
		};
		struct cachetier_pf_counts k = pf_counts(ct);
		struct ct_job *j = NULL;

		while (ct->pr && (q.range = (int8_t)range_small(ct, ct->pr)) < 0)
			cachetier__range_pop(ct); /* nothing left of it */
		*pf = 0;
		switch (ct->policy ? ct->policy->next(&k, &q) : plain_next(&q)) {
		case CACHETIER_Q_DEMAND:
			if (ct->dq)
				j = queue_pop(&ct->dq_tail, &ct->dq);
			break;
		case CACHETIER_Q_READAHEAD:
			if (ct->rq)
				j = queue_pop(&ct->rq_tail, &ct->rq);
			break;
		case CACHETIER_Q_RANGE:
			if (ct->pr && range_next(ct, f, c, n, pf)) {
				*ra = 1;
				return 1;
			}
			continue;
		case CACHETIER_Q_CURSOR:
			if (ct->pf) {
				struct ct_file *p = ct->pf;
				int took = cursor_take(ct, p, CACHETIER_FILL_CURSOR, &p->pf_next,
						       p->pf_end, c, n);

				/* an object whose cursor passed its end leaves the list at once */
				if (p->pf_next >= p->pf_end)
					cachetier__pf_unlink(ct, p);
				if (took) {
					*f = p;
					*ra = 1;
					*pf = CT_PF_OBJ;
					return 1;
				}
				continue;
			}
			return 0;
		default:
			return 0;
		}
		if (!j)
			return 0;
		ct->rd_queued--;
		*f = j->f;
		*c = j->c;
		*n = j->n;
		*ra = j->ra;
		free(j);
		return 1;
	}
}

int cachetier__file_prefetch(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			     int mode)
{
	if (c1 > f->nunits)
		c1 = f->nunits;
	if (c0 >= c1)
		return 0;
	cachetier__lock(ct);
	if (f->pf_listed) {
		/* the running prefetch's cursor covers the new range too */
		f->pf_evict |= mode == CACHETIER_PF_EVICT;
		f->pf_cold &= mode == CACHETIER_PF_COLD; /* another asker: read soon */
		if (c0 < f->pf_next)
			f->pf_next = c0;
		if (c1 > f->pf_end)
			f->pf_end = c1;
	} else if (!ct->stopping) {
		f->pf_next = c0;
		f->pf_end = c1;
		f->pf_unfit = 0;
		f->pf_evict = mode == CACHETIER_PF_EVICT;
		f->pf_cold = mode == CACHETIER_PF_COLD;
		cachetier__pf_push(ct, f, 0);
		pthread_cond_broadcast(&ct->work_cond);
	}
	disk_mutex_unlock(&ct->lock);
	return 0;
}

int cachetier__file_prefetch_range(struct cachetier *ct, struct ct_file *f, uint32_t c0,
				   uint32_t c1, int mode)
{
	int err = 0;

	if (c1 > f->nunits)
		c1 = f->nunits;
	if (c0 >= c1)
		return 0;
	cachetier__lock(ct);
	if (!ct->stopping) {
		int64_t now = cachetier__now_ns();

		/* units of the range that are here already (a neighbour's read
		 * or fill brought them) are needed ahead as much as those the
		 * range fetches: spared like them, not left at the head of the
		 * LRU order where the next eviction takes them before their
		 * reader comes */
		for (uint32_t c = c0; c < c1; c++) {
			f->gap[c] = 0; /* named: planned */
			if (f->ust[c] == UNIT_VALID && f->pins[c] == 0) {
				cachetier__ua_set(f, c, now);
				cachetier__unread_set(f, c, 1);
			}
		}
		cachetier__ev_mark_units(ct, f, c0, c1); /* eviction's order (cachetier_evheap.c) */
		err = cachetier__range_push(ct, f, c0, c1, mode == CACHETIER_PF_EVICT, 0);
		cachetier__work_wake(ct);
	}
	disk_mutex_unlock(&ct->lock);
	return err;
}

int cachetier__file_prefetch_state(struct cachetier *ct, struct ct_file *f, uint64_t *unfit)
{
	int running;

	cachetier__lock(ct);
	running = f->pf_listed || f->pr_queued > 0 || f->pf_inflight > 0;
	*unfit = f->pf_unfit;
	disk_mutex_unlock(&ct->lock);
	return running;
}
