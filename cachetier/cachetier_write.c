/*
 * cachetier_write.c — the fill writer of the unit store: one thread
 * (cachetier__writer_main) that takes the buffers of up to 128 KiB
 * (FILL_BUF_BYTES) the fills' sinks gather on the store's I/O thread
 * (cachetier_fill.c) and the batch fill's writes (cachetier__write_push),
 * computes each unit's CRC32C, writes each buffer with one pwrite, makes
 * the units it completes valid at once (fill_publish) and ends each run
 * (fill_run_end), so the I/O thread only moves bytes. The queue is a
 * lock-free stack (ct->wq) and a semaphore (ct->wsem) posted once per
 * batch: only by the push that finds the stack empty (the writer takes the
 * whole stack at each wake-up, so a push onto a non-empty stack is taken
 * with the one that posted). The sinks' buffers come from a pool
 * (cachetier__buf_get) the writer gives them back to: no malloc, no fresh
 * (faulted and zeroed) pages per buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cachetier_i.h"

/* Hand a (if not NULL) then b to the fill writer with one push:
 * lock-free, never waits (the store's I/O thread). */
void cachetier__wq_push2(struct cachetier *ct, struct fill_buf *a, struct fill_buf *b)
{
	struct fill_buf *head = atomic_load_explicit(&ct->wq, memory_order_relaxed);
	struct fill_buf *first = a ? a : b; /* the older: last in the chain */

	/* a fill's bytes (fill_write takes them off) */
	atomic_fetch_add_explicit(&ct->wq_bufs,
				  (unsigned)(a && a->slot && !a->end) + (b->slot && !b->end),
				  memory_order_relaxed);
	if (a)
		b->next = a;
	do
		first->next = head;
	while (!atomic_compare_exchange_weak_explicit(&ct->wq, &head, b, memory_order_release,
						      memory_order_relaxed));
	/* the stack was empty: the writer has taken (or will take, after the
	 * post it has not consumed yet) everything pushed before, so it needs
	 * a wake-up for this one; a push onto a non-empty stack rides with the
	 * push that found it empty and posted */
	if (!head)
		sem_post(&ct->wsem);
}

void cachetier__wq_push(struct cachetier *ct, struct fill_buf *b)
{
	cachetier__wq_push2(ct, NULL, b);
}

/* The sinks' buffers: a stack of free ones (ct->bpool) under ct->bpool_lock
 * (a leaf: nothing is taken under it, held for a pointer swap), at most
 * FILL_POOL_MAX kept (8 MiB: the bytes of the fills in flight; more are
 * freed). A lock-free stack would need its whole list taken and walked to
 * pop one safely from several threads (the store's I/O thread, the fill
 * workers of a store that reads in the caller): a cache miss per buffer
 * walked. */
#define FILL_POOL_MAX 64u

struct fill_buf *cachetier__buf_get(struct cachetier *ct)
{
	struct fill_buf *b;

	disk_mutex_lock(&ct->bpool_lock);
	b = ct->bpool;
	if (b) {
		ct->bpool = b->next;
		ct->bpool_n--;
	}
	disk_mutex_unlock(&ct->bpool_lock);
	return b ? b : malloc(sizeof(*b) + FILL_BUF_BYTES);
}

void cachetier__buf_put(struct cachetier *ct, struct fill_buf *b)
{
	if (!b)
		return;
	disk_mutex_lock(&ct->bpool_lock);
	if (ct->bpool_n < FILL_POOL_MAX) {
		b->next = ct->bpool;
		ct->bpool = b;
		ct->bpool_n++;
		b = NULL;
	}
	disk_mutex_unlock(&ct->bpool_lock);
	free(b);
}

void cachetier__buf_pool_free(struct cachetier *ct)
{
	disk_mutex_lock(&ct->bpool_lock);
	while (ct->bpool) {
		struct fill_buf *b = ct->bpool;

		ct->bpool = b->next;
		free(b);
	}
	ct->bpool_n = 0;
	disk_mutex_unlock(&ct->bpool_lock);
}

/* The fill writer: b's bytes to the data file, each unit's CRC32C as they
 * pass (while they are in the CPU's cache; tests/bench/crc_bench.sh), then
 * the units they complete made valid (fill_publish). After a write error
 * the run's later bytes are dropped (fill_run_end fails the run). */
static void fill_publish(struct cachetier *ct, struct ct_slot *slot, struct ct_fill *fl);

static void fill_write(struct cachetier *ct, struct fill_buf *b)
{
	struct ct_slot *slot = b->slot;
	struct ct_fill *fl = slot->fill;
	struct ct_file *f = slot->f;

	CT_OFF_LOOP();
	if (fl->werr == 0) {
		fl->werr = cachetier__run_write(f, slot->c, fl->crc, b->off, b->data, b->used);
		if (fl->werr == 0)
			fl->wnext = b->off + b->used;
	}
	cachetier__buf_put(ct, b);
	/* down to half with a sink paused (cachetier_fill.c, sink_full): its
	 * transfer goes on (one wake-up of the store's I/O thread, not a poll) */
	if (atomic_fetch_sub(&ct->wq_bufs, 1) - 1 <= FILL_WQ_MAX / 2 && atomic_load(&ct->wq_wake) &&
	    atomic_exchange(&ct->wq_wake, 0))
		backend_sink_ready(ct->be);
	if (fl->werr == 0)
		fill_publish(ct, slot, fl);
}

/* The run's units whose bytes are all written (up to fl->wnext) are valid
 * now, as a fill's end makes them (their CRC, state byte, the usage, their
 * write lock to the pinning readers' read lock), and their readers wake:
 * a unit is readable as it lands, not when its fill ends. The fill writer;
 * takes ct->lock. */
static void fill_publish(struct cachetier *ct, struct ct_slot *slot, struct ct_fill *fl)
{
	struct ct_file *f = slot->f;
	struct ct_lkrun run = {0};
	uint32_t u = fl->pub;
	int wake = 0;

	while (u < fl->k &&
	       cachetier__unit_off(f, slot->c + u) + cachetier__unit_len(f, slot->c + u) <=
		   fl->wnext)
		u++;
	if (u == fl->pub)
		return;
	cachetier__lock(ct);
	for (uint32_t x = fl->pub; x < u; x++) {
		uint32_t c = slot->c + x;
		uint64_t ulen = cachetier__unit_len(f, c);

		ct->reserved -= ulen; /* with the usage: pf_fits never counts it twice */
		fl->pub_bytes += ulen;
		fl->errs[x] = 0;
		fl->claim[x] = FILL_PUBLISHED;
		wake |= f->pins[c] > 0;
	}
	cachetier__run_commit(ct, f, slot->c + fl->pub, u - fl->pub, fl->crc + fl->pub, fl->waited,
			      &run);
	if (u == fl->k)
		ct->fills++; /* the run's request: counted before its readers see it */
	cachetier__lkrun_flush(&run);
	if (wake)
		pthread_cond_broadcast(&ct->unit_cond);
	disk_mutex_unlock(&ct->lock);
	fl->pub = u;
}

/* The fill writer: the run of slot ended with err (its bytes before the
 * end written). A failed run's bytes that no unit made valid are punched
 * (perhaps of a version that changed meanwhile: never counted, so they
 * must not stay on the disk); its units left get err; then the next run
 * (a store on its I/O thread), or the worker goes on (one reading in the
 * caller). */
static void fill_run_end(struct cachetier *ct, struct ct_slot *slot, int err)
{
	struct ct_fill *fl = slot->fill;
	struct ct_file *f = slot->f;
	uint64_t from = cachetier__unit_off(f, slot->c + fl->pub);

	CT_OFF_LOOP();
	if (fl->pub == fl->k)
		err = 0; /* every unit landed (and counted): an error after them costs none */
	else if (err == 0)
		err = fl->werr ? fl->werr : -EIO; /* -EIO never: every byte was written */
	if (err == 0 && fl->s.wrote) /* the link as this fill saw it (cachetier_span.c) */
		cachetier__link_note(ct, fl->s.first_ns - fl->t0, fl->s.end - fl->s.start,
				     cachetier__mono_ns() - fl->s.first_ns);
	if (err < 0 && fl->wnext > from)
		cachetier__run_discard(f, from, fl->wnext - from);
	for (uint32_t u = fl->pub; u < fl->k; u++)
		fl->errs[u] = err;
	fl->i = fl->k;
	if (fl->async)
		cachetier__fill_next(slot);
	else
		sem_post(&fl->run_sem);
}

int cachetier__write_push(struct cachetier *ct, struct ct_wjob *j, struct ct_file *f, uint32_t c0,
			  uint32_t *crc, int *werr, uint64_t off, const void *buf, size_t len)
{
	struct fill_buf *b = malloc(sizeof(*b) + len);

	if (!b)
		return -ENOMEM;
	*b = (struct fill_buf){
	    .job = j, .f = f, .c0 = c0, .crc = crc, .werr = werr, .off = off, .used = len};
	memcpy(b->data, buf, len);
	cachetier__wq_push(ct, b);
	return 0;
}

void cachetier__write_wait(struct cachetier *ct, struct ct_wjob *j)
{
	struct fill_buf *b = calloc(1, sizeof(*b));

	CT_OFF_LOOP();
	if (!b) { /* no barrier to be had: wait for the queue to drain */
		while (atomic_load(&ct->wq))
			sched_yield();
		return;
	}
	if (sem_init(&j->done, 0, 0) < 0) {
		free(b);
		return;
	}
	b->job = j;
	cachetier__wq_push(ct, b);
	while (sem_wait(&j->done) < 0 && errno == EINTR)
		;
	sem_destroy(&j->done);
}

/* The fill writer: a job's write (its units' CRC32C, then the bytes) or
 * its barrier (every write pushed before it is done). */
static void job_write(struct fill_buf *b)
{
	struct ct_file *f = b->f;

	if (!b->used) {
		sem_post(&b->job->done);
	} else if (*b->werr == 0) {
		*b->werr = cachetier__run_write(f, b->c0, b->crc, b->off, b->data, b->used);
	}
	free(b);
}

/* The fill writer's thread: takes what the sinks pushed, oldest first. */
void *cachetier__writer_main(void *arg)
{
	struct cachetier *ct = arg;

	for (;;) {
		struct fill_buf *l, *fifo = NULL;

		while (sem_wait(&ct->wsem) < 0 && errno == EINTR)
			;
		l = atomic_exchange_explicit(&ct->wq, NULL, memory_order_acquire);
		if (!l && atomic_load(&ct->wstop))
			break;
		while (l) { /* newest first: reversed */
			struct fill_buf *next = l->next;

			l->next = fifo;
			fifo = l;
			l = next;
		}
		while (fifo) {
			struct fill_buf *b = fifo;

			fifo = b->next;
			if (b->job)
				job_write(b);
			else if (b->end)
				fill_run_end(ct, b->slot, b->err);
			else
				fill_write(ct, b);
		}
	}
	return NULL;
}
