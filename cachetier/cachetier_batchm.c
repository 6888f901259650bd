/*
 * cachetier_batchm.c — batch reads into memory (cachetier_batch_read_mem,
 * contract in cachetier.h): the stage's GetBatch windows
 * (fetch/fetch_planner.c, fetch/fetch_stage.c). A window's spans that the
 * cache could keep only by evicting go to the stage's memory, as ranged
 * spans do, but fetched with the store's batch read (AIStore's GetBatch)
 * instead of a ranged GET each: nothing is written to the cache directory,
 * no unit is claimed, filled, evicted or punched.
 *
 * A request: items it[0..n), each a run (bt_run: its object's ct_file,
 * [start, end), next) of a bt_req, so that the batch fills' version rule
 * runs on it unchanged (cachetier_batchv.c: the HEAD groups, exactly
 * min(k, 2) HEADs for an object of k items whatever the timing, HEADs
 * shared with the batch fills' requests and other staged ones of the same
 * object through ct_file's bc_* counters). The answer is read on a thread
 * of its own (bm_read), whose sink (the store's I/O thread: no lock, no
 * disk) copies each piece into its item's buffer, in order, and tells the
 * request's thread when an item came whole (a semaphore); that thread
 * looks (cachetier__batch_look), sends the groups' HEADs
 * (cachetier__batch_confirm), decides (cachetier__batch_decide) and gives
 * each decided item to its caller (bm_give: progress then done, no lock
 * held), while the answer's later items still arrive.
 *
 * Why an item given from memory is of the listed version (the stage's
 * argument for ranged spans is cachetier_memread.c's header: If-Match and
 * the answer's ETag; GetBatch has neither, nor a version per item in its
 * answer): an item's bytes are given only when a HEAD of its object, sent
 * after the item's last byte arrived (the group's need: the HEAD number
 * taken once the item was looked at, which is after the sink counted it
 * whole), answered the ETag and size the store listed (ct_file's identity,
 * the one cachetier_obj_read_mem sends as If-Match). The bytes were read
 * before that HEAD; an object replaced before or while they were read, or
 * after but before the HEAD, has another ETag (or none) at the HEAD, so
 * the item is refused (-ESTALE) and its reads go the ordinary way, which
 * gives the bytes or the errno they give without the stage. The one case
 * not seen is the batch fills' too (cachetier_batchv.c): an object
 * replaced and put back with the same ETag (the same bytes) before the
 * HEAD. A buffer's bytes are never rewritten after they were given: the
 * sink takes each byte once, in order (off == next), and an item is given
 * once, after its last byte, so progress is called once with the item's
 * end. An item failed or cut (backend_batch_read's err[i]), or whose HEAD
 * failed, is refused with an errno; a failed request refuses every item
 * not given.
 *
 * Threads and lifetime: the request's thread is detached (counted in
 * ct->batch_running, which cachetier_close waits for:
 * cachetier__batch_stop) or the caller's when none can be had; each item's
 * object is referenced from the call until its done ran. The batch fills'
 * slots bound both kinds together (par).
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cachetier_batch_i.h"

/* A staged request: the version rule's request (its runs are the items),
 * the callers' items, the sink's news, one block. */
struct bm_req {
	struct bt_req q;
	struct cachetier_batch_mem *it; /* it[i] is q.runs[i]'s */
	struct bt_live live;
	uint8_t *given; /* 1: it[i]'s done ran (the request's thread only) */
};

/* backend_batch_sink_cb, the store's I/O thread: item i's bytes at off,
 * copied into its buffer in order; an item that came whole is told to the
 * request's thread. */
static int bm_sink(void *arg, size_t i, uint64_t off, const void *buf, size_t len)
{
	struct bm_req *m = arg;
	struct bt_run *r;

	if (i >= m->q.nruns)
		return -EIO;
	r = &m->q.runs[i];
	if (off != r->next || len > r->end - off)
		return -EIO; /* each byte once, in order */
	memcpy((char *)m->it[i].buf + (off - r->start), buf, len);
	r->next += len;
	if (r->next == r->end) {
		atomic_store_explicit(&m->live.upto, i + 1, memory_order_release);
		sem_post(&m->live.arrive);
	}
	return 0;
}

/* Give each of runs [0, upto) decided and not given yet to its caller:
 * its bytes (a HEAD after its arrival confirmed the listed version) or
 * its refusal. The request's thread; no lock held. */
static void bm_give(struct bm_req *m, size_t upto)
{
	struct cachetier *ct = m->q.ct;
	size_t n = upto < m->q.nruns ? upto : m->q.nruns;

	for (size_t i = 0; i < n; i++) {
		struct bt_run *r = &m->q.runs[i];
		int cov, vres;

		if (m->given[i])
			continue;
		cachetier__lock(ct); /* decided under it (the answer's reader too) */
		cov = r->cov;
		vres = r->vres;
		disk_mutex_unlock(&ct->lock);
		if (cov != BT_DECIDED || r->next != r->end)
			continue;
		m->given[i] = 1;
		if (vres == 0 && m->it[i].progress)
			m->it[i].progress(m->it[i].arg, r->end);
		m->it[i].done(m->it[i].arg, vres);
	}
}

/* One look at the runs that came whole (final: the answer ended), their
 * groups' HEADs, the decisions. No lock held. */
static void bm_look(struct bm_req *m, size_t from, size_t upto, int slot, int final)
{
	struct bt_req *q = &m->q;
	size_t nask;

	cachetier__lock(q->ct);
	nask = cachetier__batch_look(q, from, upto, slot, final);
	disk_mutex_unlock(&q->ct->lock);
	if (nask == 0)
		return;
	cachetier__batch_confirm(q, slot);
	cachetier__lock(q->ct);
	cachetier__batch_decide(q);
	disk_mutex_unlock(&q->ct->lock);
}

/* The answer, read on a thread of its own; at its end the groups left
 * are asked in a slot of their own (never later than the answer's end). */
static void *bm_read(void *arg)
{
	struct bm_req *m = arg;
	struct bt_req *q = &m->q;

	q->ret = backend_batch_read(q->ct->be, q->w.items, q->nruns, bm_sink, m, q->w.err);
	atomic_store_explicit(&m->live.ended, 1, memory_order_release);
	sem_post(&m->live.arrive);
	if (q->ret != -EOPNOTSUPP)
		bm_look(m, 0, q->nruns, BR_END, 1);
	return NULL;
}

/* The request: read, confirm and give as items arrive; at the end, every
 * item given or refused, the objects released, the slot given back. */
static void *bm_request(void *arg)
{
	struct bm_req *m = arg;
	struct bt_req *q = &m->q;
	struct cachetier *ct = q->ct;
	int live = 0;
	pthread_t th;

	CT_OFF_LOOP();
	if (cachetier__batch_work_new(q) < 0) {
		q->ret = -ENOMEM;
	} else if (sem_init(&m->live.arrive, 0, 0) == 0) {
		live = 1;
		if (pthread_create(&th, NULL, bm_read, m) == 0) {
			for (;;) {
				size_t upto;

				while (sem_wait(&m->live.arrive) < 0 && errno == EINTR)
					;
				while (sem_trywait(&m->live.arrive) == 0)
					;
				if (atomic_load_explicit(&m->live.ended, memory_order_acquire))
					break;
				upto = atomic_load_explicit(&m->live.upto, memory_order_acquire);
				if (upto > q->asked) {
					bm_look(m, q->asked, upto, BR_EARLY, 0);
					q->asked = upto;
				}
				bm_give(m, upto);
			}
			pthread_join(th, NULL);
		} else {
			bm_read(m); /* no thread: the answer read here, confirmed at its end */
		}
	} else {
		bm_read(m);
	}
	if (q->w.block && q->ret != -EOPNOTSUPP)
		bm_look(m, 0, q->nruns, BR_EARLY, 1); /* the groups no look asked yet */
	for (size_t i = 0; i < q->nruns; i++) {
		struct bt_run *r = &q->runs[i];
		int err = q->ret == -EOPNOTSUPP || q->ret == -ENOMEM ? q->ret : q->w.err[i];

		if (err != 0 || r->next != r->end) {
			if (!m->given[i]) {
				m->given[i] = 1;
				m->it[i].done(m->it[i].arg, err != 0 ? err : -EIO);
			}
			q->res.failed += err != -EOPNOTSUPP && err != -ECANCELED;
		}
	}
	bm_give(m, q->nruns);
	for (size_t i = 0; i < q->nruns; i++) { /* never: each run that came whole was asked */
		if (!m->given[i])
			m->it[i].done(m->it[i].arg, -EIO);
	}
	for (size_t j = 0; q->w.block && j < q->w.nobj; j++)
		q->res.stale += q->w.obj[j].stale;
	if (live)
		sem_destroy(&m->live.arrive);
	for (size_t i = 0; i < q->nruns; i++)
		cachetier_obj_unref(m->it[i].o);
	free(q->w.block);
	cachetier__lock(ct);
	if (q->ret != -EOPNOTSUPP && q->ret != -ENOMEM) {
		ct->batch.requests++;
		ct->batch.items += q->nruns;
	}
	ct->batch.failed += q->res.failed;
	ct->batch.stale += q->res.stale;
	ct->batch.heads += q->res.heads;
	ct->batch.heads_shared += q->res.heads_shared;
	if (q->ret == -EOPNOTSUPP)
		ct->batch.refused = 1;
	else if (q->ret == 0)
		ct->batch_answered = 1;
	ct->batch_running--;
	pthread_cond_broadcast(&ct->unit_cond); /* a slot is free */
	disk_mutex_unlock(&ct->lock);
	free(m);
	return NULL;
}

int cachetier_batch_read_mem(struct cachetier *ct, const struct cachetier_batch_mem *it, size_t n,
			     unsigned par, int urgent)
{
	struct bm_req *m;
	pthread_attr_t at;
	pthread_t th;
	int ret, started = 0;
	char *p;

	par = par ? par : 1;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const struct cachetier_obj *o = it[i].o;

		if (!o || !o->file || !cachetier_obj_can_read_mem(o) || it[i].len == 0 ||
		    it[i].off > o->size || it[i].len > o->size - it[i].off || !it[i].done)
			return -EINVAL;
	}
	p = calloc(1, sizeof(*m) + n * (sizeof(*m->it) + sizeof(*m->q.runs) + 1));
	if (!p)
		return -ENOMEM;
	m = (struct bm_req *)(void *)p;
	m->q.runs = (struct bt_run *)(void *)(p + sizeof(*m));
	m->it = (struct cachetier_batch_mem *)(void *)(m->q.runs + n);
	m->given = (uint8_t *)(m->it + n);
	memcpy(m->it, it, n * sizeof(*it));
	m->q.ct = ct;
	m->q.nruns = n;
	m->q.urgent = urgent;
	atomic_init(&m->live.upto, 0);
	atomic_init(&m->live.ended, 0);
	for (size_t i = 0; i < n; i++) {
		struct bt_run *r = &m->q.runs[i];

		r->f = it[i].o->file;
		r->start = r->next = it[i].off;
		r->end = it[i].off + it[i].len;
	}
	ret = cachetier__batch_slot(ct, par); /* as a batch fill's request takes one */
	if (ret < 0) {
		free(m);
		return ret;
	}
	for (size_t i = 0; i < n; i++)
		cachetier_obj_ref(it[i].o);
	if (pthread_attr_init(&at) == 0) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		/* once started, the thread may have freed m */
		started = pthread_create(&th, &at, bm_request, m) == 0;
		pthread_attr_destroy(&at);
	}
	if (!started)
		bm_request(m);
	return 0;
}
