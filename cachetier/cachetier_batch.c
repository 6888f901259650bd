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
 *   4. the request runs on a thread of its own: backend_batch_read (on
 *      one more thread, bt_read), whose sink (on the store's I/O thread)
 *      hands each item's bytes to the fill writer, which writes them at
 *      their offset in the object's data file and computes each unit's
 *      CRC32C; when an object's last item of the request arrived whole,
 *      the sink tells the request's thread (a semaphore, never a lock),
 *      which applies the version rule (below) to that object at once
 *      (bt_early): once its HEAD says it is as listed and the writer wrote
 *      its bytes, under ct->lock, its items' units are valid (CRC, state
 *      byte, usage, map batch) and the readers woken, while the answer's
 *      later items still arrive. When the answer ended, the objects left
 *      are confirmed at once (by the thread that read it, bt_read), and
 *      each unit not valid yet is valid or empty (bt_finish). So the
 *      first object of the first request, holding the plan's next
 *      samples, is what a reader waits for, not the whole answer.
 *
 * The version rule. GetBatch has no If-Match: its bytes are of whichever
 * version each object had while it was read. The units of an object's
 * items are kept only when its ETag and size, as listed (ct_file's
 * identity, the data file's name), are what a HEAD says that was sent
 * after the object's last item of the request arrived (bt_confirm; why
 * that is enough: cachetier/README.md, "GetBatch's version rule"). Until
 * then its units stay unserved (filling). An object replaced before or
 * while its items were read, or after but before that HEAD, has another
 * ETag at that HEAD (or is gone): its items' bytes are punched, its units
 * empty with -ESTALE, as a fill's If-Match failure leaves them, so a
 * reader gets what a fill would give it. One replaced and put back (the
 * same ETag: the same bytes) before the HEAD is the one case the rule
 * does not see. A failed HEAD leaves the units empty with no error
 * (fetched on demand, by version).
 *
 * Shared HEADs. A HEAD confirms every item of its object that arrived
 * before it was sent, so requests share them (bt_confirm): a request sends
 * a HEAD of an object when none of it is in flight (those of its objects
 * ready at once in one backend_stat_many, in parallel); one that finds a
 * HEAD in flight, sent before its items arrived, waits for it to end, then
 * sends the next or finds it sent by another request that waited too, and
 * takes its answer. An urgent request (the caller names them: the first of
 * each window, whose units a reader reaches first) never waits for a HEAD
 * sent before its items arrived: it sends its own at once. The cost: a
 * request that is not urgent may wait up to one more round trip for its
 * HEAD (its units are needed later than the urgent one's); the gain: one
 * HEAD per object per round trip at most among those requests, not one per
 * object per request (L9 of tests/bench/link_bench.py: 2,400 HEADs for 455
 * requests before). Counted: heads, heads_shared, head_waits.
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
 * it ended, confirms the objects not confirmed yet (while the request's
 * thread may still wait for an earlier object's HEAD), joined by the
 * request's thread (without one, the answer is read on the request's
 * thread and every object confirmed at its end). The sink runs on the
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

#include "cachetier_i.h"

/* A unit of the window not valid at the claim: claim 1 (this batch
 * fetches it), 0 (another process filled it), -1 (another process fills
 * it: left to it). */
struct bt_unit {
	struct ct_file *f;
	uint32_t c;
	int claim;
};

/* One item: units [c, c + n) of f, all claimed by this batch. */
struct bt_run {
	struct ct_file *f;
	uint32_t c, n;
	uint64_t start, end; /* the item's bytes in the object */
	uint64_t next;	     /* object offset of the next byte expected (the sink's) */
	uint32_t *crc;	     /* CRC32C per unit, as bytes arrive */
	int err;	     /* the item's outcome (0, -ESTALE, or another errno) */
	int werr;	     /* the fill writer's first write error */
	size_t obj;	     /* its object in the request's table (bt_work.obj) */
	int done;	     /* committed at its object's HEAD, before the answer ended */
};

/* An object of a request, for the version rule (bt_confirm). */
/* its items arriving; to confirm (by bt_early, or at the answer's end by
 * bt_read); confirmed (res). Changed under ct->lock while two threads
 * confirm (bt_fetch). */
enum { BO_WAIT, BO_ASK, BO_ASK_END, BO_DONE };
struct bt_obj {
	struct ct_file *f;
	size_t last;   /* its last run in the request */
	uint64_t need; /* the first HEAD number (f->bc_sent) that may confirm it */
	uint64_t seq;  /* the number of the HEAD of it this request sent */
	int res;       /* BO_DONE: the HEAD's answer (0, -ESTALE, -EIO) */
	uint8_t st;
	uint8_t waited; /* counted in head_waits */
};

/* A request's working arrays, one allocation (bt_work_new): the batch
 * read's items and outcomes, its objects, and two rounds of HEADs (the
 * keys sent, their answers and errnos, the object each is of: [0, nruns)
 * for bt_early's, [nruns, 2 nruns) for the answer's end, which may run at
 * once). */
struct bt_work {
	struct backend_batch_item *items;
	int *err;
	struct bt_obj *obj;
	size_t nobj;
	const char **keys;
	struct backend_objinfo *info;
	int *herr;
	size_t *lead;
	void *block;
};

/* What the sink tells the request's thread while the answer arrives
 * (bt_request): lock-free, so the store's I/O thread never waits. */
struct bt_live {
	sem_t arrive;	    /* posted at an object's last item, and at the answer's end */
	atomic_size_t upto; /* runs [0, upto) were answered (the items come in order) */
	atomic_int ended;   /* backend_batch_read returned */
};

/* One request: items runs[0..nruns). */
struct bt_req {
	struct cachetier *ct;
	struct bt_run *runs;
	size_t nruns;
	uint64_t bytes;	   /* reserved for its runs not committed yet */
	int room;	   /* room was made: it runs */
	int own;	   /* one block with its runs and CRCs, freed by its thread */
	int urgent;	   /* confirms at once: never waits for a HEAD sent before its end */
	int ret;	   /* backend_batch_read's answer */
	struct ct_wjob wj; /* its writes, by the fill writer (cachetier__write_push) */
	struct cachetier_batch_result res;
	pthread_t th;
	int started;
	struct bt_work w;
	struct bt_live *live; /* NULL: no early commit (the answer read on this thread) */
};

/* backend_batch_sink_cb: item i's bytes at off. The store's I/O thread:
 * no lock, no disk; the fill writer checksums and writes them. An
 * object's last item arrived whole: the request's thread is told (it
 * sends that object's HEAD now, bt_early). */
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
	err = cachetier__write_push(q->ct, &q->wj, r->f, r->c, r->crc, &r->werr, off, buf, len);
	if (err < 0)
		return err;
	r->next += len;
	if (r->next == r->end && q->live && q->w.obj[r->obj].last == i) {
		atomic_store_explicit(&q->live->upto, i + 1, memory_order_release);
		sem_post(&q->live->arrive);
	}
	return 0;
}

/* The version rule (above), shared: each object of the request marked
 * BO_ASK (its items arrived; bt_early, or the answer ended) is confirmed
 * by a HEAD of it sent after its last item of the request arrived: its
 * own, or one another request sent later. f->bc_sent numbers an object's
 * HEADs in the order sent, so need, one more than bc_sent when we read it
 * here (after the arrival, which the sink told this thread before), is
 * the first number that may confirm it, and any HEAD numbered need or more
 * that ended (bc_done, the highest) says whether the object is as listed.
 * A request sends a HEAD of an object when none of it is in flight;
 * otherwise it waits for those in flight to end (they were sent before its
 * items arrived, unless numbered need or more), then sends the next one,
 * or finds it sent by another request that waited too: requests whose
 * items arrive while a HEAD is out share the next one. An urgent request
 * (q->urgent: the caller's choice, cachetier_batch_fill) waits only for a
 * HEAD sent after its items arrived, else sends its own at once. Each
 * object ends BO_DONE with res 0, -ESTALE (changed) or -EIO (its HEAD
 * failed). Takes ct->lock; the HEADs outside it; each wait is for a HEAD
 * in flight, which the store's retry budget bounds. */
static void bt_confirm(struct bt_req *q, uint8_t which)
{
	struct cachetier *ct = q->ct;
	struct bt_work *w = &q->w;
	size_t left = 0, base = which == BO_ASK ? 0 : q->nruns;
	const char **keys = w->keys + base;
	struct backend_objinfo *info = w->info + base;
	int *herr = w->herr + base;
	size_t *lead = w->lead + base;

	cachetier__lock(ct);
	for (size_t j = 0; j < w->nobj; j++) {
		if (w->obj[j].st == which) {
			w->obj[j].need = w->obj[j].f->bc_sent + 1; /* any HEAD from now on */
			left++;
		}
	}
	while (left > 0) {
		size_t nl = 0;

		for (size_t j = 0; j < w->nobj; j++) {
			struct bt_obj *o = &w->obj[j];
			struct ct_file *f = o->f;

			if (o->st != which)
				continue;
			if (f->bc_done >= o->need) { /* sent after the arrival by another */
				o->res = f->bc_res;
				o->st = BO_DONE;
				q->res.heads_shared++;
				left--;
			} else if (f->bc_inflight == 0 || (q->urgent && f->bc_sent < o->need)) {
				f->bc_inflight++;
				o->seq = ++f->bc_sent;
				keys[nl] = f->key;
				lead[nl++] = j;
			} else if (!o->waited) {
				o->waited = 1; /* counted now: a test sees who waits */
				ct->batch.head_waits++;
			}
		}
		if (nl > 0) {
			int all;

			disk_mutex_unlock(&ct->lock);
			all = backend_stat_many(ct->be, keys, nl, info, herr);
			cachetier__lock(ct);
			for (size_t l = 0; l < nl; l++) {
				struct bt_obj *o = &w->obj[lead[l]];
				struct ct_file *f = o->f;
				int v = 0;

				if (all < 0 || (herr[l] < 0 && herr[l] != -ENOENT))
					v = -EIO;
				else if (herr[l] == -ENOENT || strcmp(info[l].etag, f->etag) != 0 ||
					 info[l].size != f->size)
					v = -ESTALE;
				f->bc_inflight--;
				if (o->seq > f->bc_done) { /* the latest sent of those ended */
					f->bc_done = o->seq;
					f->bc_res = v;
				}
				o->res = v;
				o->st = BO_DONE;
				left--;
			}
			q->res.heads += nl;
			pthread_cond_broadcast(&ct->unit_cond); /* waiters of these HEADs */
		} else if (left > 0) {
			cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
		}
	}
	disk_mutex_unlock(&ct->lock);
}

/* Runs r's units valid (its object confirmed, its bytes written): they
 * move from reserved to the usage, as a fill's do. ct->lock held. */
static void bt_commit(struct cachetier *ct, struct bt_req *q, struct bt_run *r)
{
	cachetier__run_commit(ct, r->f, r->c, r->n, r->crc, 0, NULL);
	cachetier__run_ended(r->f, r->c, r->n);
	ct->reserved -= r->end - r->start;
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
 * before it is done, as for cachetier__write_wait), pushed before a
 * round's HEADs go out and waited for after they return (bt_wmarked): the
 * writer writes while the HEAD is out. Pushed after the HEAD returned, it
 * put the writer's whole queue (every fill's) between the HEAD and the
 * commit. 0: pushed; -1: none (bt_wmarked then waits as
 * cachetier__write_wait does). */
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
 * sink's bt_live): each object whose last item is among them and of which
 * an item arrived whole is confirmed now (its HEAD sent now: bt_confirm),
 * and its items that arrived whole are committed (valid) once the fill
 * writer wrote them; the rest wait for the answer's end (bt_request). No
 * lock held. */
static void bt_early(struct bt_req *q, size_t upto)
{
	struct cachetier *ct = q->ct;
	struct bt_work *w = &q->w;
	size_t nask = 0, first = SIZE_MAX, ncommit = 0;
	int wake = 0, marked;

	cachetier__lock(ct); /* the answer's end may pick objects at once */
	for (size_t i = 0; i < upto && i < q->nruns; i++) {
		const struct bt_run *r = &q->runs[i];
		struct bt_obj *o = &w->obj[r->obj];

		if (o->st == BO_WAIT && o->last < upto && r->next == r->end) {
			o->st = BO_ASK;
			nask++;
			first = first < i ? first : i;
		}
	}
	disk_mutex_unlock(&ct->lock);
	if (nask == 0)
		return;
	marked = bt_wmark(q); /* their bytes were pushed before this */
	bt_confirm(q, BO_ASK);
	cachetier__lock(ct);
	for (size_t i = first; i < upto; i++) {
		const struct bt_run *r = &q->runs[i];

		ncommit += !r->done && r->next == r->end && w->obj[r->obj].res == 0 &&
			   w->obj[r->obj].st == BO_DONE;
	}
	disk_mutex_unlock(&ct->lock);
	bt_wmarked(q, marked); /* their bytes and CRCs are written */
	if (ncommit == 0)
		return;
	cachetier__lock(ct);
	for (size_t i = first; i < upto; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->done || r->next != r->end || r->werr != 0 || w->obj[r->obj].st != BO_DONE ||
		    w->obj[r->obj].res != 0)
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
		pthread_cond_broadcast(&ct->unit_cond);
	disk_mutex_unlock(&ct->lock);
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
		} else {
			cachetier__run_abort(ct, r->f, r->c, r->n, 0, 1, 0, NULL);
			if (r->err != -EOPNOTSUPP)
				q->res.failed++;
		}
		cachetier__run_ended(r->f, r->c, r->n);
	}
	ct->reserved -= q->bytes;
	ct->fills_inflight--;
	pthread_cond_broadcast(&ct->unit_cond);
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

/* q's working arrays in one block (bt_work); its object table made (each
 * run's object, each object's last run). -ENOMEM: none. */
static int bt_work_new(struct bt_req *q)
{
	const size_t al = _Alignof(max_align_t), n = q->nruns;
	struct bt_work *w = &q->w;
	size_t sz[7] = {n * sizeof(*w->items),	  n * sizeof(*w->err),
			n * sizeof(*w->obj),	  2 * n * sizeof(*w->keys),
			2 * n * sizeof(*w->info), 2 * n * sizeof(*w->herr),
			2 * n * sizeof(*w->lead)};
	size_t at[7], total = 0;
	char *p;

	for (int k = 0; k < 7; k++) {
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
	w->nobj = 0;
	for (size_t i = 0; i < n; i++) {
		struct bt_run *r = &q->runs[i];
		size_t j = 0;

		while (j < w->nobj && w->obj[j].f != r->f)
			j++;
		if (j == w->nobj)
			w->obj[w->nobj++] = (struct bt_obj){.f = r->f, .st = BO_WAIT};
		w->obj[j].last = i;
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
	size_t nask = 0;

	q->ret = backend_batch_read(q->ct->be, w->items, q->nruns, bt_sink, q, w->err);
	atomic_store_explicit(&q->live->ended, 1, memory_order_release);
	sem_post(&q->live->arrive);
	/* the objects not picked yet with an item that came whole are
	 * confirmed now, even while the request's thread waits for an earlier
	 * object's HEAD (bt_early): never later than at the answer's end */
	cachetier__lock(q->ct);
	for (size_t i = 0; q->ret != -EOPNOTSUPP && i < q->nruns; i++) {
		struct bt_obj *o = &w->obj[q->runs[i].obj];

		if (o->st == BO_WAIT && w->err[i] == 0 && q->runs[i].next == q->runs[i].end) {
			o->st = BO_ASK_END;
			nask++;
		}
	}
	disk_mutex_unlock(&q->ct->lock);
	if (nask > 0)
		bt_confirm(q, BO_ASK_END);
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
		if (pthread_create(&th, NULL, bt_read, q) == 0) {
			for (;;) {
				while (sem_wait(&live.arrive) < 0 && errno == EINTR)
					;
				if (atomic_load_explicit(&live.ended, memory_order_acquire))
					break;
				bt_early(q, atomic_load_explicit(&live.upto, memory_order_acquire));
			}
			pthread_join(th, NULL);
			q->live = NULL;
			sem_destroy(&live.arrive);
			cachetier__write_wait(q->ct, &q->wj); /* every byte the sink got */
			return;
		}
		q->live = NULL;
		sem_destroy(&live.arrive);
	}
	/* no thread: the objects are confirmed when the answer ended */
	q->ret = backend_batch_read(q->ct->be, q->w.items, q->nruns, bt_sink, q, q->w.err);
	cachetier__write_wait(q->ct, &q->wj);
}

/* Run request q: fetch, confirm, punch what is not kept, finish. Its own
 * thread or the caller's; no lock held. */
static void *bt_request(void *arg)
{
	struct bt_req *q = arg;
	struct cachetier *ct = q->ct;
	struct bt_work *w = &q->w;

	CT_OFF_LOOP(); /* it punches, waits for the writer and takes ct->lock */
	if (bt_work_new(q) < 0)
		q->ret = -ENOMEM;
	else
		bt_fetch(q);
	if (q->ret != -EOPNOTSUPP && q->ret != -ENOMEM) {
		q->res.requests++;
		q->res.items += q->nruns;
	}
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
		/* an object not confirmed yet with an item to keep */
		if (r->err == 0 && w->obj[r->obj].st == BO_WAIT)
			w->obj[r->obj].st = BO_ASK;
	}
	if (w->block)
		bt_confirm(q, BO_ASK);
	for (size_t j = 0; j < w->nobj; j++)
		q->res.stale += w->obj[j].st == BO_DONE && w->obj[j].res == -ESTALE;
	/* bytes not kept never stay on the disk (they may be of another
	 * version); the units' write locks are still held */
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (!r->done && r->err == 0 && w->obj[r->obj].res != 0)
			r->err = w->obj[r->obj].res;
		if (r->err != 0 && r->next > r->start)
			cachetier__run_discard(r->f, r->start, r->next - r->start);
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
	pthread_cond_broadcast(&ct->unit_cond);
	return 1;
}

/* Start request q (room made, a slot taken): on a thread of its own,
 * detached, or (sync: a first call) joined by the caller, or run by the
 * caller later when no thread can be had. */
static void bt_start(struct bt_req *q, int sync)
{
	struct bt_req *c;
	pthread_attr_t at;
	pthread_t th;
	int started = 0;

	if (sync) {
		/* each at once, the first too: it holds what a reader needs
		 * first, while the caller claims the window's later requests
		 * (run on the caller's thread after them, the first request went
		 * out last: readers waited 0.2-0.7 s for it at an epoch's start) */
		if (pthread_create(&q->th, NULL, bt_request, q) == 0)
			q->started = 1;
		return;
	}
	c = bt_clone(q);
	if (!c) {
		bt_request(q); /* no memory for a copy: on this thread */
		return;
	}
	if (pthread_attr_init(&at) == 0) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		/* the thread id goes to a local: once started, the detached
		 * thread may have freed c before pthread_create returns */
		started = pthread_create(&th, &at, bt_request, c) == 0;
		pthread_attr_destroy(&at);
	}
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
		cachetier__lock(ct);
		if (!sync && ct->batch_running >= par && !ct->stopping)
			ct->batch.slot_waits++;
		while (!sync && ct->batch_running >= par && !ct->stopping)
			cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
		if (ct->stopping)
			ret = -ECANCELED;
		else if (ct->batch.refused)
			ret = -EOPNOTSUPP;
		else
			ct->batch_running++;
		disk_mutex_unlock(&ct->lock);
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
}

void cachetier__batch_stop(struct cachetier *ct)
{
	cachetier__lock(ct);
	while (ct->batch_running)
		cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
	disk_mutex_unlock(&ct->lock);
}
