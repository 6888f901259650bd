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
 *   4. the request runs on a thread of its own: backend_batch_read, whose
 *      sink (on the store's I/O thread) writes
 *      each item's bytes at their offset in the object's data file and
 *      computes each unit's CRC32C; then the version rule (below); then,
 *      under ct->lock, each unit valid (CRC, state byte, usage, map batch)
 *      or empty, and the readers woken. A request's units become valid
 *      when it ended, so the first request, holding the plan's next
 *      samples, is what a reader waits for.
 *
 * The version rule. GetBatch has no If-Match: its bytes are of whichever
 * version each object had while it was read. The units of a request are
 * kept only for objects whose ETag and size, as listed (ct_file's
 * identity, the data file's name), a HEAD sent after the request's answer
 * ended confirms (bt_confirm). The request's bytes stay unserved (its
 * units filling) until then. An object replaced before or during the
 * answer, or after it but before that HEAD, has another ETag at that
 * HEAD (or is gone): its items' bytes are punched, its units empty with
 * -ESTALE, as a fill's If-Match failure leaves them, so a reader gets what
 * a fill would give it. One replaced and put back (the same ETag: the same
 * bytes) before the HEAD is the one case the rule does not see. A failed
 * HEAD leaves the units empty with no error (fetched on demand, by
 * version).
 *
 * Shared HEADs. A HEAD confirms every answer of its object that ended
 * before it was sent, so requests share them (bt_confirm): a request sends
 * a HEAD of an object when none of it is in flight (those of its objects
 * in one backend_stat_many, in parallel); one that finds a HEAD in flight,
 * sent before its answer ended, waits for it to end, then sends the next
 * or finds it sent by another request that waited too, and takes its
 * answer. An urgent request (the caller names them: the first of each
 * window, whose units a reader reaches first) never waits for a HEAD sent
 * before its end: it sends its own at once. The cost: a request that is
 * not urgent may wait up to one more round trip for its HEAD (its units
 * are needed later than the urgent one's); the gain: one HEAD per object
 * per round trip at most among those requests, not one per object per
 * request (L9 of tests/bench/link_bench.py: 2,400 HEADs for 455 requests
 * before). Counted: heads, heads_shared, head_waits.
 *
 * A failed or cut item (backend_batch_read's err[i]; a cut answer's
 * later items are asked again by the backend) is punched and its units
 * left empty with no error kept: a reader fetches them on demand.
 *
 * Threads: one per request, detached (ct->batch_running counts them;
 * cachetier_close waits for them, cachetier__batch_stop), except until a
 * request of this tier was answered: then the caller's and joined ones,
 * so that the caller learns a refusal for the window it handed over. The
 * sink runs on the store's I/O thread. Locks: ct->lock
 * around state changes only (never across I/O), the OFD unit locks held
 * from the claim until the unit is valid or empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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
};

/* One request: items runs[0..nruns). */
struct bt_req {
	struct cachetier *ct;
	struct bt_run *runs;
	size_t nruns;
	uint64_t bytes;
	int room;	   /* room was made: it runs */
	int own;	   /* one block with its runs and CRCs, freed by its thread */
	int urgent;	   /* confirms at once: never waits for a HEAD sent before its end */
	int ret;	   /* backend_batch_read's answer */
	struct ct_wjob wj; /* its writes, by the fill writer (cachetier__write_push) */
	struct cachetier_batch_result res;
	pthread_t th;
	int started;
};

/* backend_batch_sink_cb: item i's bytes at off. The store's I/O thread:
 * no lock, no disk; the fill writer checksums and writes them. */
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
	return 0;
}

/* The version rule (above), shared: each object of the request's items
 * that arrived whole is confirmed by a HEAD of it sent after this
 * request's answer ended: its own, or one another request sent later.
 * f->bc_sent numbers an object's HEADs in the order sent, so need[j],
 * one more than bc_sent when the answer ended, is the first number that
 * may confirm it, and any HEAD numbered need[j] or more that ended
 * (bc_done, the highest) says whether the object is as listed. A request
 * sends a HEAD of an object when none of it is in flight; otherwise it
 * waits for those in flight to end (they were sent before its answer
 * ended, unless numbered need[j] or more), then sends the next one, or
 * finds it sent by another request that waited too: requests whose
 * answers end while a HEAD is out share the next one. An urgent request
 * (q->urgent: the caller's choice, cachetier_batch_fill) waits only for a
 * HEAD sent after its answer ended, else sends its own at once. Items of
 * an object that changed get -ESTALE, of one whose HEAD failed -EIO.
 * Takes ct->lock; the HEADs outside it; each wait is for a HEAD in
 * flight, which the store's retry budget bounds. */
static void bt_confirm(struct bt_req *q)
{
	struct cachetier *ct = q->ct;
	struct ct_file **fs = calloc(q->nruns, sizeof(*fs));
	const char **keys = calloc(q->nruns, sizeof(*keys));
	struct backend_objinfo *info = calloc(q->nruns, sizeof(*info));
	int *err = calloc(q->nruns, sizeof(*err));
	uint64_t *need = calloc(q->nruns, sizeof(*need));
	uint64_t *seq = calloc(q->nruns, sizeof(*seq));
	int *res = calloc(q->nruns, sizeof(*res));
	size_t *lead = calloc(q->nruns, sizeof(*lead));
	uint8_t *waited = calloc(q->nruns, sizeof(*waited));
	size_t k = 0, left;

	if (!fs || !keys || !info || !err || !need || !seq || !res || !lead || !waited) {
		for (size_t i = 0; i < q->nruns; i++) /* not confirmed: not kept */
			if (q->runs[i].err == 0)
				q->runs[i].err = -EIO;
		goto out;
	}
	for (size_t i = 0; i < q->nruns; i++) {
		size_t j = 0;

		if (q->runs[i].err != 0)
			continue;
		while (j < k && fs[j] != q->runs[i].f)
			j++;
		if (j == k)
			fs[k++] = q->runs[i].f;
	}
	cachetier__lock(ct);
	for (size_t j = 0; j < k; j++) {
		need[j] = fs[j]->bc_sent + 1; /* the answer ended: any HEAD from now on */
		res[j] = 1;		      /* not known yet */
	}
	for (left = k; left > 0;) {
		size_t nl = 0;

		for (size_t j = 0; j < k; j++) {
			struct ct_file *f = fs[j];

			if (res[j] != 1)
				continue;
			if (f->bc_done >= need[j]) { /* sent after the end by another */
				res[j] = f->bc_res;
				q->res.heads_shared++;
				left--;
			} else if (f->bc_inflight == 0 || (q->urgent && f->bc_sent < need[j])) {
				f->bc_inflight++;
				seq[j] = ++f->bc_sent;
				keys[nl] = f->key;
				lead[nl++] = j;
			} else if (!waited[j]) {
				waited[j] = 1; /* counted now: a test sees who waits */
				ct->batch.head_waits++;
			}
		}
		if (nl > 0) {
			int all;

			disk_mutex_unlock(&ct->lock);
			all = backend_stat_many(ct->be, keys, nl, info, err);
			cachetier__lock(ct);
			for (size_t l = 0; l < nl; l++) {
				size_t j = lead[l];
				struct ct_file *f = fs[j];
				int v = 0;

				if (all < 0 || (err[l] < 0 && err[l] != -ENOENT))
					v = -EIO;
				else if (err[l] == -ENOENT || strcmp(info[l].etag, f->etag) != 0 ||
					 info[l].size != f->size)
					v = -ESTALE;
				f->bc_inflight--;
				if (seq[j] > f->bc_done) { /* the latest sent of those ended */
					f->bc_done = seq[j];
					f->bc_res = v;
				}
				res[j] = v;
				left--;
			}
			q->res.heads += nl;
			pthread_cond_broadcast(&ct->unit_cond); /* waiters of these HEADs */
		} else if (left > 0) {
			cachetier__cond_wait_s(&ct->unit_cond, &ct->lock, 1);
		}
	}
	disk_mutex_unlock(&ct->lock);
	for (size_t j = 0; j < k; j++) {
		if (res[j] == -ESTALE)
			q->res.stale++;
		for (size_t i = 0; res[j] && i < q->nruns; i++)
			if (q->runs[i].f == fs[j] && q->runs[i].err == 0)
				q->runs[i].err = res[j];
	}
out:
	free(fs);
	free(keys);
	free(info);
	free(err);
	free(need);
	free(seq);
	free(res);
	free(lead);
	free(waited);
}

/* The request ended: each item's units valid, empty with -ESTALE, or
 * empty; the request leaves the fills in flight; readers woken. ct->lock
 * held. */
static void bt_finish(struct cachetier *ct, struct bt_req *q)
{
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->err == 0) {
			cachetier__run_commit(ct, r->f, r->c, r->n, r->crc, 0, NULL);
			q->res.bytes += r->end - r->start;
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
	for (size_t i = 0; i < q->nruns; i++) {
		if (cachetier__flush_due(ct, q->runs[i].f, cachetier__now_ns())) {
			pthread_cond_signal(&ct->flush_cond);
			break;
		}
	}
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

/* Run request q: fetch, confirm, punch what is not kept, finish. Its own
 * thread or the caller's; no lock held. */
static void *bt_request(void *arg)
{
	struct bt_req *q = arg;
	struct cachetier *ct = q->ct;
	struct backend_batch_item *items = calloc(q->nruns, sizeof(*items));
	int *err = calloc(q->nruns, sizeof(*err));

	CT_OFF_LOOP(); /* it punches, waits for the writer and takes ct->lock */
	if (!items || !err) {
		q->ret = -ENOMEM;
	} else {
		for (size_t i = 0; i < q->nruns; i++) {
			items[i].key = q->runs[i].f->key;
			items[i].off = q->runs[i].start;
			items[i].len = q->runs[i].end - q->runs[i].start;
		}
		q->ret = backend_batch_read(ct->be, items, q->nruns, bt_sink, q, err);
		cachetier__write_wait(ct, &q->wj); /* every byte the sink got is written */
	}
	if (q->ret != -EOPNOTSUPP && q->ret != -ENOMEM) {
		q->res.requests++;
		q->res.items += q->nruns;
	}
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		r->err = q->ret == -EOPNOTSUPP || q->ret == -ENOMEM ? q->ret : err[i];
		if (r->err == 0 && r->werr < 0)
			r->err = r->werr;
		if (r->err == 0 && r->next != r->end)
			r->err = -EIO; /* never: the backend said all of it came */
		if (r->err != 0 && r->err != -EOPNOTSUPP && r->err != -ECANCELED)
			backend_log_failure(ct->be, r->f->key, r->err, "batch fill");
	}
	if (q->ret != -EOPNOTSUPP)
		bt_confirm(q);
	/* bytes not kept never stay on the disk (they may be of another
	 * version); the units' write locks are still held */
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];

		if (r->err != 0 && r->next > r->start)
			cachetier__run_discard(r->f, r->start, r->next - r->start);
	}
	free(items);
	free(err);
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

/* Start request q (room made, a slot taken): on a thread of its own, or
 * (sync: a first call, j its index) joined or run by the caller later. */
static void bt_start(struct bt_req *q, int sync, size_t j)
{
	struct bt_req *c;
	pthread_attr_t at;

	if (sync) {
		/* the first on the caller's thread, later; the others on their own */
		if (j > 0 && pthread_create(&q->th, NULL, bt_request, q) == 0)
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
		c->started = pthread_create(&c->th, &at, bt_request, c) == 0;
		pthread_attr_destroy(&at);
	}
	if (!c->started)
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
			bt_start(&reqs[nq], sync, nq);
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
