/*
 * cachetier_batch.c — batch fills (cachetier_batch_fill, contract in
 * cachetier.h): a window of a reading plan fetched with the store's batch
 * read (backend_batch_read: AIStore's GetBatch for ais://) instead of one
 * ranged GET per chunk a planned range lies in.
 *
 * The window's pieces, in plan order, come split into requests by the
 * caller (the fetch scheduler decides the windows: fetch_batch_fill), each
 * a stretch of the plan's order. Each request in turn, once it has a slot
 * (at most par requests of all calls run at once; a call waits for a
 * slot, bounded waits of 1 s each while the tier runs; a first call,
 * which waits for its requests, needs none):
 *   1. claim (ct->lock; the unit store's run API, cachetier_run.c): every
 *      unit of its pieces not valid and not being filled here is claimed, in plan order, each once.
 * Only now: until its request has a slot, a reader of a unit fetches it on demand instead of
 * waiting behind the requests ahead of it;
 *   2. claim across processes (no lock): each such unit's OFD write lock
 *      is tried once (cachetier_fill.c's rules, but never waited for): a
 *      unit valid in the state file is another process's (taken as peer),
 *      one whose lock another process holds is left to it (empty here
 *      again; a reader of it fills it on demand, which waits for that
 *      process as fills do);
 *   3. the claimed units as items (maximal runs of one object); room is
 *      made for them as a PF_EVICT prefetch makes it (by next use); a
 *      request that gets none ends the call if the rules say (batch_unfit);
 *   4. the request runs on a thread of its own: each HEAD's first hop
 *      that its groups may send asked at once (bt_ahead), then backend_batch_read (on
 *      one more thread, bt_read), whose sink (on the store's I/O thread)
 *      hands each item's bytes to the fill writer, which writes them at
 *      their offset in the object's data file and computes each unit's
 *      CRC32C; when an item arrived whole, the sink tells the request's
 *      thread (a semaphore, never a lock), which applies the version rule
 *      to the items that arrived since it last looked, at once (bt_early):
 *      each joins one of its object's two HEAD groups, and once the HEAD
 *      of its group, sent after it arrived, says the object is as listed
 *      and the writer wrote its bytes, under ct->lock, its units are
 *      valid (CRC, state byte, usage, map batch) and the readers woken,
 *      while the answer's later items still arrive. When the answer ended,
 *      the groups left are confirmed at once (by the thread that read it,
 *      bt_read), and each unit not valid yet is valid or empty
 *      (bt_finish). So an object's first item in a request is valid one
 *      HEAD after it arrived, not after its object's last item there.
 *
 * The version rule, the HEAD groups (exactly min(k, 2) HEADs for an
 * object of k items in a request, whatever the timing) and the HEADs
 * shared between requests: cachetier_batchv.c, and cachetier/README.md,
 * "GetBatch's version rule". A HEAD that finds the object changed leaves
 * the items it confirms empty with -ESTALE (their bytes punched); a
 * failed HEAD leaves them empty with no error (fetched on demand).
 *
 * A failed or cut item (backend_batch_read's err[i]; a cut answer's
 * later items are asked again by the backend) is punched and its units
 * left empty with no error kept: a reader fetches them on demand.
 *
 * Threads: one per request, detached (ct->batch_running counts them;
 * cachetier_close waits for them, cachetier__batch_stop), except until a
 * request of this tier was answered: then joined ones (each started at
 * once; run by the caller when no thread can be had), so that the caller
 * learns a refusal for the window it handed over; and
 * one per request in flight that reads its answer (bt_read) and, once
 * it ended, confirms the groups not asked yet (while the request's
 * thread may still wait for a HEAD), joined by the request's thread
 * (without one, the answer is read on the request's thread and every
 * group confirmed at its end). The sink runs on the
 * store's I/O thread. Allocations: a request's working arrays are one
 * block (bt_work_new). Locks: ct->lock around state changes only (never
 * across I/O), the OFD unit locks held from the claim until the unit is
 * valid or empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cachetier_batch_i.h"

/* A unit of the window not valid at the claim: claim 1 (this batch
 * fetches it), 0 (another process filled it), -1 (another process fills
 * it: left to it). */
struct bt_unit {
	struct ct_file *f;
	uint32_t c;
	int claim;
};

/* backend_batch_sink_cb: item i's bytes at off. The store's I/O thread:
 * no lock, no disk; the fill writer checksums and writes them. An item
 * arrived whole: the request's thread is told (it sends that item's
 * object's HEAD now, bt_early). */
static int bt_sink(void *arg, size_t i, uint64_t off, const void *buf, size_t len)
{
	struct bt_req *q = arg;
	struct bt_run *r;
	int err;

	if (i >= q->nruns)
		return -EIO;
	r = &q->runs[i];
	/* contiguous pieces inside the item (backend_batch_read's promise):
	 * anything else would leave a hole in units about to be valid */
	if (off != r->next || len > r->end - off)
		return -EIO;
	err = cachetier__write_push(q->ct, &q->wj, r->f, r->c, r->crc, &r->werr, &r->wrote, off,
				    buf, len);
	if (err < 0)
		return err;
	r->next += len;
	if (r->next == r->end && q->live) {
		atomic_store_explicit(&q->live->upto, i + 1, memory_order_release);
		sem_post(&q->live->arrive);
	}
	return 0;
}

/* Run r's bytes the fill writer wrote leave the written ones (ct->wr_gone)
 * just before they leave reserved (landing: a look between the two counts
 * them twice, never not at all), or once punched (a run not kept). Before,
 * they counted on the disk and again in reserved until the item's HEAD
 * returned (cachetier__resv_unwritten). After the writer wrote them (a
 * barrier waited for: r->wrote is final). */
static void bt_wr_gone(struct cachetier *ct, struct bt_run *r)
{
	if (r->wrote)
		atomic_fetch_add(&ct->wr_gone, r->wrote);
	r->wrote = 0;
}

/* Runs r's units valid (its object confirmed, its bytes written): they
 * move from reserved to the usage in one step, as a fill's do
 * (cachetier__run_commit). ct->lock held. */
static void bt_commit(struct cachetier *ct, struct bt_req *q, struct bt_run *r)
{
	bt_wr_gone(ct, r);
	cachetier__run_commit(ct, r->f, r->c, r->n, r->crc, 0, NULL);
	cachetier__run_ended(r->f, r->c, r->n);
	q->bytes -= r->end - r->start;
	q->res.bytes += r->end - r->start;
	r->done = 1;
}

/* A map batch of one of runs[0..n)'s objects is due: the flusher is
 * woken (once per request, at its end). ct->lock held. */
static void bt_flush_due(struct cachetier *ct, const struct bt_run *runs, size_t n)
{
	int64_t now = cachetier__now_ns();

	for (size_t i = 0; i < n; i++) {
		if (cachetier__flush_due(ct, runs[i].f, now)) {
			pthread_cond_signal(&ct->flush_cond);
			break;
		}
	}
}

/* A barrier on the fill writer's queue for q's writes pushed so far (a
 * buffer of no bytes: the writer posts q->wj.done once every write pushed
 * before it is done; cachetier_write.c), pushed before a round's HEADs go
 * out and waited for after they return (bt_wmarked): the writer writes
 * while the HEAD is out, instead of a barrier pushed after it returned
 * putting the writer's whole queue after the HEAD. 0: pushed; -1: none
 * (bt_wmarked then waits as cachetier__write_wait does). */
static int bt_wmark(struct bt_req *q)
{
	struct fill_buf *b = calloc(1, sizeof(*b));

	if (!b)
		return -1;
	if (sem_init(&q->wj.done, 0, 0) < 0) {
		free(b);
		return -1;
	}
	b->job = &q->wj;
	cachetier__wq_push(q->ct, b);
	return 0;
}

static void bt_wmarked(struct bt_req *q, int marked)
{
	if (marked < 0) {
		cachetier__write_wait(q->ct, &q->wj);
		return;
	}
	while (sem_wait(&q->wj.done) < 0 && errno == EINTR)
		;
	sem_destroy(&q->wj.done);
}

/* The answer is still arriving and runs [0, upto) were answered (the
 * sink's bt_live): the runs among them not looked at yet that came whole
 * join their objects' HEAD groups, the groups due send their HEADs now
 * (cachetier_batchv.c: an object's first group at its first item, its
 * other at its last), and each run of [0, upto) a HEAD confirmed is
 * committed (valid) once the fill writer wrote it; the rest wait for a
 * later look or the answer's end (bt_read, bt_request). No lock held. */
static void bt_early(struct bt_req *q, size_t upto)
{
	struct cachetier *ct = q->ct;
	size_t nask, ncommit = 0;
	int wake = 0, marked;

	upto = upto < q->nruns ? upto : q->nruns;
	if (upto <= q->asked)
		return;
	cachetier__lock(ct); /* the answer's end may pick runs at once */
	nask = cachetier__batch_look(q, q->asked, upto, BR_EARLY, 0);
	q->asked = upto;
	disk_mutex_unlock(&ct->lock);
	if (nask == 0)
		return;
	marked = bt_wmark(q); /* the bytes of runs [0, upto) were pushed before this */
	cachetier__batch_confirm(q, BR_EARLY);
	cachetier__lock(ct);
	cachetier__batch_decide(q);
	for (size_t i = 0; i < upto; i++) {
		const struct bt_run *r = &q->runs[i];

		ncommit += !r->done && r->cov == BT_DECIDED && r->vres == 0 && r->next == r->end;
	}
	disk_mutex_unlock(&ct->lock);
	bt_wmarked(q, marked); /* their bytes and CRCs are written */
	if (ncommit == 0)
		return;
	cachetier__lock(ct);
	for (size_t i = 0; i < upto; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->done || r->next != r->end || r->werr != 0 || r->cov != BT_DECIDED ||
		    r->vres != 0)
			continue;
		for (uint32_t c = r->c; c < r->c + r->n && !wake; c++)
			wake = r->f->pins[c] > 0;
		bt_commit(ct, q, r);
	}
	/* readers waiting for a unit pin it: with none pinned, nobody to
	 * wake (as a fill's end); no flusher wake-up here: the request's end
	 * gives it (bt_finish); one per object woke it thousands of times an
	 * epoch for maps it had just been told of */
	if (wake)
		cachetier__units_wake(ct);
	disk_mutex_unlock(&ct->lock);
}

/* The runs that came whole and are in no group yet join theirs, and every
 * group with runs not asked yet is asked in slot (the answer ended: no
 * run arrives any more), confirmed and decided. No lock held. */
static void bt_last_look(struct bt_req *q, int slot)
{
	size_t nask;

	cachetier__lock(q->ct);
	nask = cachetier__batch_look(q, 0, q->nruns, slot, 1);
	disk_mutex_unlock(&q->ct->lock);
	if (nask == 0)
		return;
	cachetier__batch_confirm(q, slot);
	cachetier__lock(q->ct);
	cachetier__batch_decide(q);
	disk_mutex_unlock(&q->ct->lock);
}

/* The request ended: each item's units valid, empty with -ESTALE, or
 * empty (those committed before are left as they are); the request leaves
 * the fills in flight; readers woken. ct->lock held. */
static void bt_finish(struct cachetier *ct, struct bt_req *q)
{
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->done) {
			continue;
		} else if (r->err == 0) {
			bt_commit(ct, q, r);
			continue;
		} else if (r->err == -ESTALE) {
			cachetier__run_abort(ct, r->f, r->c, r->n, -ESTALE, 1, 0, NULL);
			ct->fill_errors++; /* the run's, once (cachetier_run.c unit_done) */
		} else {
			cachetier__run_abort(ct, r->f, r->c, r->n, 0, 1, 0, NULL);
			if (r->err != -EOPNOTSUPP)
				q->res.failed++;
		}
		cachetier__run_ended(r->f, r->c, r->n);
	}
	ct->reserved -= q->bytes;
	ct->fills_inflight--;
	cachetier__units_wake(ct);
	bt_flush_due(ct, q->runs, q->nruns);
}

static void res_add(struct cachetier_batch_result *to, const struct cachetier_batch_result *r)
{
	to->requests += r->requests;
	to->items += r->items;
	to->bytes += r->bytes;
	to->failed += r->failed;
	to->stale += r->stale;
	to->peer += r->peer;
	to->skipped += r->skipped;
	to->unfit += r->unfit;
	to->slot_waits += r->slot_waits;
	to->heads += r->heads;
	to->heads_shared += r->heads_shared;
	to->refused |= r->refused;
}

/* Request ids (bt_req.id), never 0: ct_file.bc_by starts at 0. */
static atomic_uint_fast64_t bt_ids;

/* q's working arrays in one block (bt_work); its object table made (each
 * run's object, each object's last run and count of runs); its id.
 * -ENOMEM: none. */
static int bt_work_new(struct bt_req *q)
{
	const size_t al = _Alignof(max_align_t), n = q->nruns;
	struct bt_work *w = &q->w;
	size_t sz[8] = {n * sizeof(*w->items),	  n * sizeof(*w->err),
			n * sizeof(*w->obj),	  2 * n * sizeof(*w->keys),
			2 * n * sizeof(*w->info), 2 * n * sizeof(*w->herr),
			2 * n * sizeof(*w->lead), 2 * n * sizeof(*w->ahead)};
	size_t at[8], total = 0;
	char *p;

	for (int k = 0; k < 8; k++) {
		at[k] = total;
		total += (sz[k] + al - 1) / al * al;
	}
	p = calloc(1, total ? total : 1);
	if (!p)
		return -ENOMEM;
	w->block = p;
	w->items = (void *)(p + at[0]);
	w->err = (void *)(p + at[1]);
	w->obj = (void *)(p + at[2]);
	w->keys = (void *)(p + at[3]);
	w->info = (void *)(p + at[4]);
	w->herr = (void *)(p + at[5]);
	w->lead = (void *)(p + at[6]);
	w->ahead = (void *)(p + at[7]);
	w->nobj = 0;
	q->id = (uint64_t)atomic_fetch_add(&bt_ids, 1) + 1;
	for (size_t i = 0; i < n; i++) {
		struct bt_run *r = &q->runs[i];
		size_t j = 0;

		while (j < w->nobj && w->obj[j].f != r->f)
			j++;
		if (j == w->nobj)
			w->obj[w->nobj++] = (struct bt_obj){.f = r->f};
		w->obj[j].last = i;
		w->obj[j].nrun++;
		r->obj = j;
		w->items[i].key = r->f->key;
		w->items[i].off = r->start;
		w->items[i].len = r->end - r->start;
	}
	return 0;
}

/* The answer, read on a thread of its own while the request's thread
 * confirms each object as its items arrive (bt_request). */
static void *bt_read(void *arg)
{
	struct bt_req *q = arg;
	struct bt_work *w = &q->w;

	q->ret = backend_batch_read(q->ct->be, w->items, q->nruns, bt_sink, q, w->err);
	atomic_store_explicit(&q->live->ended, 1, memory_order_release);
	sem_post(&q->live->arrive);
	/* the groups left are asked now, in a slot of their own, even while
	 * the request's thread waits for a HEAD (bt_early): never later than
	 * at the answer's end */
	if (q->ret != -EOPNOTSUPP)
		bt_last_look(q, BR_END);
	return NULL;
}

/* The answer read (on a thread of its own when one can be had), each
 * object confirmed and its items committed as soon as its last item
 * arrived (bt_early), then every byte written. */
static void bt_fetch(struct bt_req *q)
{
	struct bt_live live;
	pthread_t th;

	atomic_init(&live.upto, 0);
	atomic_init(&live.ended, 0);
	if (sem_init(&live.arrive, 0, 0) == 0) {
		q->live = &live;
		if (cachetier__batch_thread(q->ct, &th, 0, bt_read, q) == 0) {
			for (;;) {
				while (sem_wait(&live.arrive) < 0 && errno == EINTR)
					;
				while (sem_trywait(&live.arrive) == 0)
					; /* one look at every item that arrived so far */
				if (atomic_load_explicit(&live.ended, memory_order_acquire))
					break;
				bt_early(q, atomic_load_explicit(&live.upto, memory_order_acquire));
			}
			pthread_join(th, NULL);
			q->live = NULL;
			sem_destroy(&live.arrive);
			return;
		}
		q->live = NULL;
		sem_destroy(&live.arrive);
	}
	/* no thread: the objects are confirmed when the answer ended */
	q->ret = backend_batch_read(q->ct->be, q->w.items, q->nruns, bt_sink, q, q->w.err);
}

/* The first hop of each HEAD q's groups may send (the proxy's redirect,
 * backend_head_ahead), now, beside the request: a group's HEAD, sent after
 * its items arrived (cachetier_batchv.c), then costs the target's round
 * trip only. One per group: an object of one item has one group, of more
 * two. No lock held (q's objects are its thread's until the answer's reader
 * starts). */
static void bt_ahead(struct bt_req *q)
{
	for (size_t j = 0; j < q->w.nobj; j++) {
		struct bt_obj *o = &q->w.obj[j];

		o->ahead[BG_FIRST] = backend_head_ahead(q->ct->be, o->f->key);
		if (o->nrun >= 2 && o->ahead[BG_FIRST])
			o->ahead[BG_REST] = backend_head_ahead(q->ct->be, o->f->key);
	}
}

/* The first hops no group of q followed (its HEAD shared with another
 * request, or none sent: no item of it came whole) ended unfollowed. Both
 * threads of the answer are done; no lock held. */
static void bt_ahead_drop(struct bt_req *q)
{
	for (size_t j = 0; j < q->w.nobj; j++) {
		for (int g = BG_FIRST; g <= BG_REST; g++) {
			backend_head_drop(q->ct->be, q->w.obj[j].ahead[g]);
			q->w.obj[j].ahead[g] = NULL;
		}
	}
}

/* Run request q: fetch, confirm, punch what is not kept, finish. Its own
 * thread or the caller's; no lock held. */
static void *bt_request(void *arg)
{
	struct bt_req *q = arg;
	struct cachetier *ct = q->ct;
	struct bt_work *w = &q->w;

	CT_OFF_LOOP(); /* it punches, waits for the writer and takes ct->lock */
	if (bt_work_new(q) < 0) {
		q->ret = -ENOMEM;
	} else {
		bt_ahead(q);
		bt_fetch(q);
	}
	if (q->ret != -EOPNOTSUPP && q->ret != -ENOMEM) {
		q->res.requests++;
		q->res.items += q->nruns;
	}
	/* the groups no look asked for yet (both threads of the answer are
	 * done; without a reader thread, all of them), confirmed while the
	 * fill writer still writes */
	if (w->block && q->ret != -EOPNOTSUPP)
		bt_last_look(q, BR_EARLY);
	if (w->block)
		bt_ahead_drop(q);
	cachetier__write_wait(ct, &q->wj); /* every byte the sink got */
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->done)
			continue;
		r->err = q->ret == -EOPNOTSUPP || q->ret == -ENOMEM ? q->ret : w->err[i];
		if (r->err == 0 && r->werr < 0)
			r->err = r->werr;
		if (r->err == 0 && r->next != r->end)
			r->err = -EIO; /* never: the backend said all of it came */
		if (r->err != 0 && r->err != -EOPNOTSUPP && r->err != -ECANCELED)
			backend_log_failure(ct->be, r->f->key, r->err, "batch fill");
		if (r->err == 0 && r->cov != BT_DECIDED)
			r->err = -EIO; /* never: each run that came whole was asked */
	}
	for (size_t j = 0; w->block && j < w->nobj; j++)
		q->res.stale += w->obj[j].stale;
	/* bytes not kept never stay on the disk (they may be of another
	 * version); the units' write locks are still held */
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (!r->done && r->err == 0 && r->vres != 0)
			r->err = r->vres;
		if (r->err != 0 && r->next > r->start)
			cachetier__run_discard(r->f, r->start, r->next - r->start);
		if (r->err != 0)
			bt_wr_gone(ct, r); /* off the disk (reserved until bt_finish) */
	}
	free(w->block);
	cachetier__lock(ct);
	bt_finish(ct, q);
	res_add(&ct->batch, &q->res);
	if (q->ret == -EOPNOTSUPP)
		ct->batch.refused = 1;
	else if (q->ret == 0)
		ct->batch_answered = 1;
	ct->batch_running--;
	pthread_cond_broadcast(&ct->unit_cond); /* a slot is free (cachetier_batch_fill) */
	disk_mutex_unlock(&ct->lock);
	if (q->own)
		free(q);
	return NULL;
}

/* A copy of request q that owns its runs and CRCs (one block), for a
 * thread that outlives the call. NULL: no memory. */
static struct bt_req *bt_clone(const struct bt_req *q)
{
	size_t units = 0, at = 0;
	struct bt_req *c;
	uint32_t *crc;

	for (size_t i = 0; i < q->nruns; i++)
		units += q->runs[i].n;
	c = calloc(1, sizeof(*c) + q->nruns * sizeof(*c->runs) + units * sizeof(*crc));
	if (!c)
		return NULL;
	*c = *q;
	c->own = 1;
	c->runs = (struct bt_run *)(c + 1);
	crc = (uint32_t *)(c->runs + q->nruns);
	for (size_t i = 0; i < q->nruns; i++) {
		c->runs[i] = q->runs[i];
		c->runs[i].crc = crc + at;
		at += q->runs[i].n;
	}
	return c;
}

/* Step 1 (ct->lock held): the window's units not valid and not being
 * filled become UNIT_FILLING into u[] (plan order, each once); those
 * valid are needed ahead as a range prefetch's are. Returns their count. */
static size_t bt_mark(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
		      struct bt_unit *u)
{
	int64_t now = cachetier__now_ns();
	size_t nu = 0;

	for (size_t i = 0; i < n; i++) {
		struct ct_file *f = p[i].o ? p[i].o->file : NULL;
		uint32_t c0, c1;

		if (!f || p[i].len == 0)
			continue;
		c0 = (uint32_t)(p[i].off / f->unit_bytes);
		c1 = (uint32_t)((p[i].off + p[i].len - 1) / f->unit_bytes + 1);
		for (uint32_t c = c0; c < c1 && c < f->nunits; c++) {
			f->gap[c] = 0; /* named: planned */
			if (f->ust[c] == UNIT_VALID && f->pins[c] == 0) {
				f->uatime[c] = now;
				f->unread[c] = 1;
				cachetier__ev_mark_units(ct, f, c, c + 1); /* eviction's order */
			}
			if (f->ust[c] != UNIT_EMPTY)
				continue;
			cachetier__run_claim(ct, f, c, 1);
			u[nu].f = f;
			u[nu++].c = c;
		}
	}
	return nu;
}

/* Step 3 (ct->lock held): the claimed units of u[0..nu) as the runs of
 * request *q (zeroed by the caller), room made for it. Returns 0 when it
 * has none (nothing claimed), else 1 (q->room: whether it got room). */
static int bt_make(struct cachetier *ct, struct bt_unit *u, size_t nu, struct bt_run *runs,
		   uint32_t *crc, struct bt_req *q, struct cachetier_batch_result *res)
{
	int64_t near = CT_NEAR_NONE;
	size_t at = 0;

	for (size_t i = 0; i < nu; i++) {
		struct bt_run *r = q->nruns ? &runs[q->nruns - 1] : NULL;

		if (u[i].claim != 1)
			continue;
		if (r && r->f == u[i].f && r->c + r->n == u[i].c) {
			r->n++;
		} else {
			r = &runs[q->nruns++];
			memset(r, 0, sizeof(*r));
			r->f = u[i].f;
			r->c = u[i].c;
			r->n = 1;
			r->crc = crc + at;
		}
		at++;
	}
	if (q->nruns == 0)
		return 0;
	q->ct = ct;
	q->runs = runs;
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &runs[i];

		r->start = cachetier__unit_off(r->f, r->c);
		r->end = r->start + cachetier__run_len(r->f, r->c, r->n);
		r->next = r->start;
		r->werr = 0;
		q->bytes += r->end - r->start;
		for (uint32_t c = r->c; c < r->c + r->n; c++) {
			int64_t d = cachetier__plan_near(ct, r->f, c);

			near = d < near ? d : near;
		}
	}
	ct->reserved += q->bytes;
	ct->fills_inflight++;
	/* a request that would evict what is needed sooner is left out (and
	 * the caller fetches no later one: they are needed later) */
	q->room = cachetier__make_room_near(ct, q->bytes, 1, near) >= 0;
	if (!q->room) {
		ct->reserved -= q->bytes;
		ct->fills_inflight--;
		ct->unfit_bytes += q->bytes;
		res->unfit += q->bytes;
		for (size_t i = 0; i < q->nruns; i++) {
			runs[i].f->pf_unfit += runs[i].end - runs[i].start;
			cachetier__run_abort(ct, runs[i].f, runs[i].c, runs[i].n, 0, 1, 0, NULL);
			cachetier__run_ended(runs[i].f, runs[i].c, runs[i].n);
		}
	}
	cachetier__units_wake(ct);
	return 1;
}

/* Start request q (room made, a slot taken): on a thread of its own,
 * detached, or (sync: a first call) joined by the caller, or run by the
 * caller later when no thread can be had. */
static void bt_start(struct bt_req *q, int sync)
{
	struct bt_req *c;
	pthread_t th;
	int started;

	if (sync) {
		/* each at once, the first too: it holds what a reader needs
		 * first, while the caller claims the window's later requests
		 * (run on the caller's thread after them, the first request went
		 * out last: readers waited 0.2-0.7 s for it at an epoch's start) */
		if (cachetier__batch_thread(q->ct, &q->th, 0, bt_request, q) == 0)
			q->started = 1;
		return;
	}
	c = bt_clone(q);
	if (!c) {
		bt_request(q); /* no memory for a copy: on this thread */
		return;
	}
	/* the thread id goes to a local: once started, the detached thread
	 * may have freed c before pthread_create returns */
	started = cachetier__batch_thread(c->ct, &th, 1, bt_request, c) == 0;
	if (!started)
		bt_request(c); /* frees c */
}

/* Units pieces p[0..n) may touch. */
static size_t bt_units(const struct cachetier_batch_piece *p, size_t n)
{
	size_t units = 0;

	for (size_t i = 0; i < n; i++) {
		const struct cachetier_obj *o = p[i].o;

		if (o && o->file && p[i].len > 0)
			units += (p[i].off + p[i].len - 1) / o->file->unit_bytes -
				 p[i].off / o->file->unit_bytes + 1;
	}
	return units;
}

/* Steps 1-3 for the pieces p[0..n) of one request, once it has a slot:
 * claim their units (here and across processes), make the request of
 * those claimed into *q, make room for it. Returns 1 when q is to run,
 * 0 when nothing of them is to be fetched here, -1 when there was no room
 * (nothing later is fetched either). The slot is given back unless 1. */
static int bt_group(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
		    struct bt_unit *u, struct bt_run *runs, uint32_t *crc, struct bt_req *q)
{
	struct cachetier_batch_result local;
	size_t nu;
	int made;

	memset(&local, 0, sizeof(local));
	memset(q, 0, sizeof(*q));
	cachetier__lock(ct);
	nu = bt_mark(ct, p, n, u);
	disk_mutex_unlock(&ct->lock);
	for (size_t i = 0; i < nu; i++) /* never waiting: a unit another process fills is its */
		cachetier__run_lock(ct, u[i].f, u[i].c, 1, 0, &u[i].claim, NULL);
	cachetier__lock(ct);
	for (size_t i = 0; i < nu; i++) {
		if (u[i].claim == 0) {
			cachetier__run_adopt(ct, u[i].f, u[i].c, 1, 0);
			local.peer++;
		} else if (u[i].claim < 0) {
			cachetier__run_abort(ct, u[i].f, u[i].c, 1, 0, 0, 0, NULL);
			local.skipped++;
		}
		if (u[i].claim != 1)
			cachetier__run_ended(u[i].f, u[i].c, 1);
	}
	made = bt_make(ct, u, nu, runs, crc, q, &local);
	res_add(&ct->batch, &local);
	if (!made || !q->room) {
		ct->batch_running--;
		pthread_cond_broadcast(&ct->unit_cond); /* the slot is free again */
	}
	disk_mutex_unlock(&ct->lock);
	return !made ? 0 : q->room ? 1 : -1;
}

int cachetier__batch_thread(struct cachetier *ct, pthread_t *th, int detached, void *(*fn)(void *),
			    void *arg)
{
	pthread_attr_t at;
	int err = pthread_attr_init(&at);

	if (err != 0)
		return err;
	err = pthread_attr_setstacksize(&at, BT_STACK_BYTES);
	if (err == 0 && detached)
		err = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (err == 0)
		err = pthread_create(th, &at, fn, arg);
	pthread_attr_destroy(&at);
	if (err == 0)
		atomic_fetch_add_explicit(&ct->batch_threads, 1, memory_order_relaxed);
	return err;
}

int cachetier__batch_slot(struct cachetier *ct, unsigned par)
{
	int ret = 0;

	cachetier__lock(ct);
	if (par > 0 && ct->batch_running >= par && !ct->stopping)
		ct->batch.slot_waits++;
	while (par > 0 && ct->batch_running >= par && !ct->stopping)
		cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
	if (ct->stopping)
		ret = -ECANCELED;
	else if (ct->batch.refused)
		ret = -EOPNOTSUPP;
	else
		ct->batch_running++;
	disk_mutex_unlock(&ct->lock);
	return ret;
}

int cachetier_batch_fill(struct cachetier *ct, const struct cachetier_batch_piece *p, size_t n,
			 const size_t *ends, size_t nreq, unsigned par, size_t urgent)
{
	struct bt_unit *u = NULL;
	struct bt_run *runs = NULL;
	struct bt_req *reqs = NULL;
	uint32_t *crc = NULL;
	size_t max, nq = 0, at = 0;
	int ret = 0, sync;

	par = par ? par : 1;
	for (size_t i = 0; i < n; i++) {
		const struct cachetier_obj *o = p[i].o;

		if (!o)
			continue;
		if (p[i].off > o->size || p[i].len > o->size - p[i].off)
			return -EINVAL;
	}
	for (size_t g = 0; g < nreq; g++) {
		if (ends[g] > n || (g > 0 && ends[g] <= ends[g - 1]) || (g == 0 && ends[0] == 0))
			return -EINVAL;
	}
	if (nreq == 0 || ends[nreq - 1] != n)
		return n ? -EINVAL : 0;
	max = bt_units(p, n);
	if (max == 0)
		return 0;
	u = calloc(max, sizeof(*u));
	runs = calloc(max, sizeof(*runs));
	crc = calloc(max, sizeof(*crc));
	reqs = calloc(nreq, sizeof(*reqs));
	if (!u || !runs || !crc || !reqs) {
		ret = -ENOMEM;
		goto out;
	}
	cachetier__lock(ct);
	sync = !ct->batch_answered;
	disk_mutex_unlock(&ct->lock);
	for (size_t i = 0, g = 0; i < n; g++) {
		size_t j = ends[g], units;
		int r;

		units = bt_units(p + i, j - i);
		/* a request's units are claimed only once it has a slot (at
		 * most par requests of the batch fills run at once; a first
		 * call's, which it waits for, need none): until then a reader
		 * of them fetches them itself instead of waiting behind the
		 * requests ahead of it */
		ret = cachetier__batch_slot(ct, sync ? 0 : par);
		if (ret < 0)
			break;
		r = bt_group(ct, p + i, j - i, u + at, runs + at, crc + at, &reqs[nq]);
		if (r < 0 && cachetier__batch_unfit(ct, g, nreq))
			break; /* no room: the rules end the call */
		if (r > 0) {
			reqs[nq].urgent = g < urgent;
			bt_start(&reqs[nq], sync);
			nq++;
		}
		at += units;
		i = j;
	}
	for (size_t j = 0; sync && j < nq; j++) {
		if (reqs[j].started)
			pthread_join(reqs[j].th, NULL);
		else
			bt_request(&reqs[j]);
		if (reqs[j].ret == -EOPNOTSUPP || (ret == 0 && reqs[j].ret < 0))
			ret = reqs[j].ret;
	}
out:
	free(u);
	free(runs);
	free(crc);
	free(reqs);
	return ret;
}

void cachetier_batch_stats(struct cachetier *ct, struct cachetier_batch_result *r)
{
	cachetier__lock(ct);
	*r = ct->batch;
	disk_mutex_unlock(&ct->lock);
	r->threads = atomic_load_explicit(&ct->batch_threads, memory_order_relaxed);
}

void cachetier__batch_stop(struct cachetier *ct)
{
	cachetier__lock(ct);
	while (ct->batch_running || ct->batch_windows)
		cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
	disk_mutex_unlock(&ct->lock);
}
