/*
 * cachetier_queue.c — the fill queues of the unit store (cachetier_map.c)
 * and where its prefetch rules (the fetch scheduler's, cachetier_set_policy:
 * fetch/fetch_rules.c) are asked; the workers that serve them are in
 * cachetier_fill.c. The queue functions run with ct->lock held; the
 * prefetch calls at the end (cachetier__file_prefetch, _prefetch_range,
 * _prefetch_state) take it themselves.
 *
 * Fills: workers (cachetier_fill.c) take jobs, while a fill slot is free and
 * the limits below allow (at most cfg.fill_threads fills but those of small
 * planned ranges, cfg.small_fills + 1 in all), from three queues in order:
 * demand (a reader waits), readahead, prefetch (a cursor per object, so a
 * prefetch of a huge object queues nothing up front; an object a reader
 * reads moves to the front; how many prefetch fills run and which are
 * withdrawn part-way for readers is the rules' (pf_max, pf_yield); a
 * PF_FIT prefetch skips, never evicts for, a chunk that does not fit). A
 * unit has one
 * state (enum ct_unit), so concurrent misses of one unit share one fill.
 * Readers wait on ct->unit_cond for just the units they need; a failed
 * fill leaves the unit EMPTY with its error, which every reader that was
 * waiting for that fill returns; the next read retries.
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
	disk_mutex_lock(&ct->lock);
	if (p && p != ct->policy) { /* the same rules again: their state stays */
		struct cachetier_pf_counts k = pf_counts(ct);

		p->start(&k);
		pf_counts_put(ct, &k);
	}
	ct->policy = p;
	disk_mutex_unlock(&ct->lock);
}

void cachetier__pf_ended(struct cachetier *ct)
{
	struct cachetier_pf_counts k = pf_counts(ct);

	if (!ct->policy)
		return;
	ct->policy->pf_ended(&k);
	pf_counts_put(ct, &k);
}

int cachetier__miss_whole(const struct cachetier *ct, const struct ct_file *f, uint64_t ahead)
{
	return ct->policy && ct->policy->miss_whole(
				 ahead > 0, cachetier__usage_get(ct) + ct->reserved + ct->evicting,
				 (uint64_t)f->unit_bytes * f->group, ct->cfg.cache_size_bytes);
}

/* After a job for object f was queued (ra: a readahead job): the prefetch
 * fills the rules say stop for readers (pf_yield) are withdrawn. */
static void pf_yield(struct cachetier *ct, const struct ct_file *f, int ra)
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

/* Queue one fill of units [c, c + n) of f, all UNIT_EMPTY. */
int cachetier__queue_push(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t n, int ra)
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
	for (uint32_t u = c; u < c + n; u++)
		f->ust[u] = UNIT_QUEUED;
	ct->rd_queued++;
	ct->ra_busy += ra != 0;
	if (ct->policy) {
		struct cachetier_pf_counts k = pf_counts(ct);

		ct->policy->reader_job(&k, ra);
		pf_counts_put(ct, &k);
	}
	pf_yield(ct, f, ra);
	pthread_cond_signal(&ct->work_cond);
	return 0;
}

/* The run of UNIT_EMPTY units around unit c (UNIT_EMPTY) within [lo, hi) and
 * within c's chunk: *a .. *b (exclusive). */
static void empty_run(const struct ct_file *f, uint32_t c, uint32_t lo, uint32_t hi, uint32_t *a,
		      uint32_t *b)
{
	uint32_t g0 = c - c % f->group, g1 = g0 + f->group;

	if (lo < g0)
		lo = g0;
	if (hi > g1)
		hi = g1;
	if (hi > f->nunits)
		hi = f->nunits;
	*a = c;
	*b = c + 1;
	while (*a > lo && f->ust[*a - 1] == UNIT_EMPTY)
		(*a)--;
	while (*b < hi && f->ust[*b] == UNIT_EMPTY)
		(*b)++;
}

/* Queue one fill of the UNIT_EMPTY units around unit c within [lo, hi) and
 * c's chunk (one range request). */
int cachetier__queue_run(struct cachetier *ct, struct ct_file *f, uint32_t c, uint32_t lo,
			 uint32_t hi, int ra)
{
	uint32_t a, b;

	empty_run(f, c, lo, hi, &a, &b);
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

/* A reader needs a unit that readahead queued: move its fill to the front
 * queue. Units queued on demand already are there. */
void cachetier__queue_promote(struct cachetier *ct, struct ct_file *f, uint32_t c)
{
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
	f->pf_listed = 0;
}

void cachetier__pf_push(struct cachetier *ct, struct ct_file *f, int front)
{
	f->pf_listed = 1;
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

/* Most prefetch fills in flight at once, as the rules say: pf_max of large
 * ones (a budget of fill_threads slots: the store's connections and one),
 * pf_small_max of all, small planned ranges too (small_fills + 1: its
 * max_connections and one). Without rules: the budget. */
static unsigned pf_max_of(const struct cachetier *ct, unsigned n)
{
	struct cachetier_pf_counts k = pf_counts(ct);

	return ct->policy ? ct->policy->pf_max(&k, n) : n;
}

static unsigned pf_max(const struct cachetier *ct)
{
	return pf_max_of(ct, ct->cfg.fill_threads);
}

static unsigned pf_small_max(const struct cachetier *ct)
{
	return pf_max_of(ct, ct->cfg.small_fills + 1);
}

int cachetier__fill_small(const struct cachetier *ct, const struct ct_file *f, uint32_t c,
			  uint32_t n, int pf)
{
	(void)ct;
	return (pf == CT_PF_RANGE_FIT || pf == CT_PF_RANGE_EVICT) &&
	       cachetier__run_len(f, c, n) <= CT_SMALL_FILL_BYTES;
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
static int cursor_take(struct ct_file *p, uint32_t *next, uint32_t end, uint32_t *c, uint32_t *n)
{
	uint32_t a, b;

	while (*next < end && p->ust[*next] != UNIT_EMPTY)
		(*next)++;
	if (*next >= end)
		return 0;
	empty_run(p, *next, *next, end, &a, &b);
	for (uint32_t u = a; u < b; u++)
		p->ust[u] = UNIT_QUEUED;
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
	empty_run(r->f, at, at, r->end, &a, &b);
	return cachetier__fill_small(ct, r->f, a, b - a, CT_PF_RANGE_FIT);
}

/* The next fill of the range at the front of ct->pr (cursor_take); the
 * range goes once its cursor reached its end. 1: one, in *f, *c, *n, *pf;
 * 0: the range had none left. ct->lock held. */
static int range_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n, int *pf)
{
	struct ct_range *r = ct->pr;
	int took = cursor_take(r->f, &r->next, r->end, c, n);

	*f = r->f;
	*pf = r->evict ? CT_PF_RANGE_EVICT : CT_PF_RANGE_FIT;
	if (r->next >= r->end)
		cachetier__range_pop(ct);
	return took;
}

/* The next fill: demand, then readahead, then prefetch ranges, then prefetch cursors (the
 * object at the front of ct->pf first; at most pf_max in flight). *pf: a
 * prefetch cursor's chunk. An object whose cursor passed its last chunk
 * leaves the list at once, so its prefetch counts as ended once its fills
 * in flight are done. */
int cachetier__queue_next(struct cachetier *ct, struct ct_file **f, uint32_t *c, uint32_t *n,
			  int *ra, int *pf)
{
	struct ct_job *j = NULL;

	*pf = 0;
	if (ct->fills_inflight - ct->small_inflight >= ct->cfg.fill_threads)
		; /* as many large fills as the store's connections and one more */
	else if (ct->dq)
		j = queue_pop(&ct->dq_tail, &ct->dq);
	else if (ct->rq)
		j = queue_pop(&ct->rq_tail, &ct->rq);
	if (j) {
		ct->rd_queued--;
		*f = j->f;
		*c = j->c;
		*n = j->n;
		*ra = j->ra;
		free(j);
		return 1;
	}
	while (ct->pr) {
		int small = range_small(ct, ct->pr);

		if (small > 0 ? ct->pf_running >= pf_small_max(ct)
			      : small == 0 && ct->pf_running - ct->small_inflight >= pf_max(ct))
			break;
		if (range_next(ct, f, c, n, pf)) {
			*ra = 1;
			return 1;
		}
	}
	while (ct->pf && ct->pf_running - ct->small_inflight < pf_max(ct)) {
		struct ct_file *p = ct->pf;
		int took = cursor_take(p, &p->pf_next, p->pf_end, c, n);

		/* an object whose cursor passed its end leaves the list at once */
		if (p->pf_next >= p->pf_end)
			cachetier__pf_unlink(ct, p);
		if (took) {
			*f = p;
			*ra = 1;
			*pf = CT_PF_OBJ;
			return 1;
		}
	}
	return 0;
}

int cachetier__file_prefetch(struct cachetier *ct, struct ct_file *f, uint32_t c0, uint32_t c1,
			     int mode)
{
	if (c1 > f->nunits)
		c1 = f->nunits;
	if (c0 >= c1)
		return 0;
	disk_mutex_lock(&ct->lock);
	if (f->pf_listed) {
		/* the running prefetch's cursor covers the new range too */
		f->pf_evict |= mode == CACHETIER_PF_EVICT;
		if (c0 < f->pf_next)
			f->pf_next = c0;
		if (c1 > f->pf_end)
			f->pf_end = c1;
	} else if (!ct->stopping) {
		f->pf_next = c0;
		f->pf_end = c1;
		f->pf_unfit = 0;
		f->pf_evict = mode == CACHETIER_PF_EVICT;
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
	disk_mutex_lock(&ct->lock);
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
				f->uatime[c] = now;
				f->unread[c] = 1;
			}
		}
		err = cachetier__range_push(ct, f, c0, c1, mode == CACHETIER_PF_EVICT, 0);
		pthread_cond_signal(&ct->work_cond);
	}
	disk_mutex_unlock(&ct->lock);
	return err;
}

int cachetier__file_prefetch_state(struct cachetier *ct, struct ct_file *f, uint64_t *unfit)
{
	int running;

	disk_mutex_lock(&ct->lock);
	running = f->pf_listed || f->pr_queued > 0 || f->pf_inflight > 0;
	*unfit = f->pf_unfit;
	disk_mutex_unlock(&ct->lock);
	return running;
}
