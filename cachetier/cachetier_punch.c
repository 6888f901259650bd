/*
 * cachetier_punch.c — the puncher: evictions' hole punches off the fill
 * workers.
 *
 * An eviction (cachetier_evict.c) takes its units under ct->lock (each
 * UNIT_EVICTING and write-locked on auxfd, its bytes off the usage and in
 * ct->evicting), unlinks the map that names them if one does, and hands
 * the punch of their spans to this thread, then returns: the fill that
 * made room starts without waiting for fallocate, which on a filesystem
 * mounted with `discard` waits for the device (about 4 ms an eviction on
 * the bench machine's ext4). The puncher punches each span, unlocks its
 * units on auxfd, then ends the punch (punch_end) without ct->lock: the
 * units UNIT_EMPTY and their readers woken under their object's lock
 * alone, their bytes off ct->evicting (an atomic count), room_cond woken
 * (under ct->lock, taken for it only when a make_room waits or is about to
 * look: ct->room_waiters), a map the eviction unlinked asked again
 * (ct_file.remap, which the flusher folds in under ct->lock).
 *
 * Until then the units stay UNIT_EVICTING (readers wait, no fill or
 * eviction of this process takes them) and write-locked (no other
 * process fills them), so no refill can be destroyed by the punch; the
 * object itself is not marked (f->evicting is cleared when the punch is
 * queued: readers, fills and other evictions of its other units go on).
 * Queued bytes stay in ct->evicting until punched, so the disk bound of
 * room_over holds (cachetier_evict.c; README.md, "Bound").
 *
 * Each wake-up takes every queued punch (punch_batch): the punches of one
 * object merged, so that adjacent units of two evictions make one hole and
 * one fcntl, then their ends, with no take of ct->lock unless a make_room
 * waits for the bytes.
 *
 * The queue holds at most CT_PUNCH_QUEUE_MAX punches; an eviction that
 * finds it full (or the puncher stopped, at close) punches itself, and so
 * does one made for the filesystem's free space (min_free_bytes: its
 * caller checks statvfs, which counts bytes not punched yet).
 *
 * Threads: the puncher takes its own lock (the queue, a leaf), each
 * object's lock (its units' states and readers) and ct->lock only to wake
 * a make_room that waits, one at a time, never with another lock held;
 * never maplock; it never runs on the I/O thread. Started by
 * cachetier_open before the fill workers; stopped by cachetier_close
 * before them: the queue drained, every punch done.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "cachetier_i.h"

/* Punch the spans of adjacent units u[0..n) of f (sorted, taken or joined
 * gaps), one hole and one fcntl to unlock each, without any lock: no map
 * names them now, and a map written meanwhile cannot (their state bytes
 * are clear). */
static void punch_units(struct cachetier *ct, struct ct_file *f, const uint32_t *u, uint32_t n)
{
	CT_OFF_LOOP();
	for (uint32_t i = 0; i < n;) {
		uint32_t k = i + 1;

		while (k < n && u[k] == u[k - 1] + 1)
			k++;
		/* Fails only where holes are unsupported: the bytes stay on
		 * disk unaccounted, but are never served. */
		fallocate(f->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)cachetier__unit_off(f, u[i]),
			  (off_t)cachetier__run_len(f, u[i], k - i));
		cachetier__ofd_lock_n(f->auxfd, F_UNLCK, LK_UNIT(u[i]), k - i, 0);
		atomic_fetch_add_explicit(&ct->punches, 1, memory_order_relaxed);
		i = k;
	}
}

static void punch_run(struct cachetier *ct, const struct ct_punch *p)
{
	punch_units(ct, p->f, p->all, p->n + p->ng);
}

static int u32_cmp(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;

	return a < b ? -1 : a > b;
}

/* Punch the k punches b[0..k) the puncher took off its queue in one
 * wake-up: the punches of one object together, their units merged, so
 * that adjacent spans of different evictions make one hole and one fcntl
 * (a planned epoch evicts a few units at a time, often next to the last
 * eviction's). Without any lock, as punch_run. */
static void punch_batch(struct cachetier *ct, struct ct_punch **b, unsigned k)
{
	uint64_t done = 0; /* k <= CT_PUNCH_QUEUE_MAX <= 64 */

	for (unsigned i = 0; i < k; i++) {
		struct ct_file *f = b[i]->f;
		uint32_t m = 0, *u = NULL;
		unsigned j, same = 0;

		if (done >> i & 1)
			continue; /* punched with an earlier one of its object */
		for (j = i; j < k; j++) {
			if (b[j]->f == f) {
				m += b[j]->n + b[j]->ng;
				same++;
			}
		}
		if (same > 1)
			u = malloc((size_t)m * sizeof(*u));
		if (!u) { /* the only one of f, or no memory: each on its own */
			for (j = i; j < k; j++) {
				if (b[j]->f == f) {
					punch_run(ct, b[j]);
					done |= 1ull << j;
				}
			}
			continue;
		}
		m = 0;
		for (j = i; j < k; j++) {
			if (b[j]->f == f) {
				memcpy(u + m, b[j]->all, (size_t)(b[j]->n + b[j]->ng) * sizeof(*u));
				m += b[j]->n + b[j]->ng;
				done |= 1ull << j;
			}
		}
		qsort(u, m, sizeof(*u), u32_cmp);
		punch_units(ct, f, u, m);
		free(u);
	}
}

/* p punched: its units empty and their waiting readers woken (theirs
 * alone: cachetier__units_landed), under f->lock alone; its bytes off
 * ct->evicting; a map the eviction unlinked that named units still valid
 * asked again (f->remap); p freed. Returns p's bytes. No lock held (a
 * unit's seen mark went at its eviction's take, cachetier_evict.c). */
static uint64_t punch_end(struct cachetier *ct, struct ct_punch *p)
{
	struct ct_file *f = p->f;
	uint64_t freed = p->freed;
	int left = 0;

	disk_mutex_lock(&f->lock); /* the states (cachetier__unit_set) */
	for (uint32_t i = 0; i < p->n; i++)
		cachetier__unit_set(f, p->list[i], UNIT_EMPTY);
	for (uint32_t i = 0; i < p->ng; i++)
		cachetier__unit_set(f, p->gaps[i], UNIT_EMPTY); /* a joined gap: as it was */
	/* the readers of those units (waiting for the punch's end to queue
	 * them), not every waiting reader of every object */
	if (p->n + p->ng) {
		uint32_t lo = UINT32_MAX, hi = 0;

		for (uint32_t i = 0; i < p->n; i++) {
			lo = p->list[i] < lo ? p->list[i] : lo;
			hi = p->list[i] + 1 > hi ? p->list[i] + 1 : hi;
		}
		for (uint32_t i = 0; i < p->ng; i++) {
			lo = p->gaps[i] < lo ? p->gaps[i] : lo;
			hi = p->gaps[i] + 1 > hi ? p->gaps[i] + 1 : hi;
		}
		cachetier__units_landed(ct, f, lo, hi - lo);
	}
	disk_mutex_unlock(&f->lock);
	for (uint32_t c = 0; c < f->nunits && p->had_map && !left; c++)
		left = cachetier__st_get(f, c);
	if (p->had_map && left) /* the unlinked map recorded some of them: written
				 * again at the flusher's next pass */
		atomic_store_explicit(&f->remap, 1, memory_order_release);
	free(p->list);
	free(p->gaps);
	free(p->all);
	free(p);
	return freed;
}

/* The punches' ends gave back freed bytes: off ct->evicting, then a
 * make_room that waits for them (or is about to look: room_waiters, raised
 * under ct->lock before it reads ct->evicting) woken under ct->lock, so
 * that no wake-up falls between its look and its wait. locked: ct->lock
 * held. Returns 1 when it took ct->lock. */
static int punch_room(struct cachetier *ct, uint64_t freed, int locked)
{
	atomic_fetch_sub(&ct->evicting, freed); /* seq_cst: before room_waiters' load */
	if (locked) {
		pthread_cond_broadcast(&ct->room_cond);
		return 0;
	}
	if (!atomic_load(&ct->room_waiters))
		return 0;
	cachetier__lock(ct);
	pthread_cond_broadcast(&ct->room_cond);
	disk_mutex_unlock(&ct->lock);
	return 1;
}

void cachetier__punch_submit(struct cachetier *ct, struct ct_punch *p, int here)
{
	struct ct_puncher *pu = ct->pun;
	int queued = 0;

	if (!here && pu) {
		disk_mutex_lock(&pu->lock);
		if (!pu->stop && pu->have_thread && pu->n < CT_PUNCH_QUEUE_MAX) {
			p->next = NULL;
			*pu->tail = p;
			pu->tail = &p->next;
			pu->n++;
			atomic_fetch_add(&pu->pending, 1);
			atomic_fetch_add(&pu->queued, 1);
			pthread_cond_signal(&pu->cond);
			queued = 1;
		}
		disk_mutex_unlock(&pu->lock);
	}
	if (queued)
		return;
	disk_mutex_unlock(&ct->lock);
	punch_run(ct, p);
	cachetier__lock(ct);
	(void)punch_room(ct, punch_end(ct, p), 1);
	pthread_cond_broadcast(&ct->unit_cond);
}

static void *puncher_main(void *arg)
{
	struct cachetier *ct = arg;
	struct ct_puncher *pu = ct->pun;
	struct ct_punch *b[CT_PUNCH_QUEUE_MAX];

	disk_mutex_lock(&pu->lock);
	for (;;) {
		unsigned k = 0;
		uint64_t freed = 0;

		if (!pu->q || (pu->hold && !pu->stop)) {
			if (!pu->q && pu->stop)
				break;
			/* idle: a queued punch or the stop wakes it */
			disk_cond_wait(&pu->cond, &pu->lock);
			continue;
		}
		/* every punch queued now, in one wake-up: adjacent spans of one
		 * object in one hole, their ends with no take of ct->lock */
		for (struct ct_punch *p = pu->q; p; p = p->next)
			b[k++] = p;
		pu->q = NULL;
		pu->tail = &pu->q;
		pu->n = 0;
		atomic_fetch_add(&pu->wakes, 1);
		disk_mutex_unlock(&pu->lock);
		punch_batch(ct, b, k);
		/* each punch wakes its units' readers under their object's lock
		 * (every waiting reader of every object woken under ct->lock
		 * held it across a signal each, and the fill writer and workers
		 * met it held: test_objlock's test_threads) */
		for (unsigned i = 0; i < k; i++)
			freed += punch_end(ct, b[i]);
		if (punch_room(ct, freed, 0))
			atomic_fetch_add(&pu->tier_locks, 1);
		atomic_fetch_sub(&pu->pending, k);
		atomic_store(&pu->cpu_ns, (unsigned long long)cachetier__cpu_ns());
		disk_mutex_lock(&pu->lock);
	}
	disk_mutex_unlock(&pu->lock);
	atomic_store(&pu->cpu_ns, (unsigned long long)cachetier__cpu_ns());
	return NULL;
}

int cachetier__writev_units(struct ct_file *f, uint32_t c0, uint32_t *crc, uint64_t off,
			    const struct iovec *iov, int n)
{
	size_t skip = 0; /* bytes of iov[i] written */
	int i = 0;

	while (i < n) {
		/* the slices of iov that fill the rest of off's unit: at most
		 * n of them, each within one buffer */
		struct iovec v[CT_WRITEV_MAX];
		uint64_t at = off, room = f->unit_bytes - off % f->unit_bytes;
		int m = 0, err;

		while (i < n && room) {
			size_t l = iov[i].iov_len - skip;

			l = l < room ? l : (size_t)room;
			if (l) /* an empty buffer adds no slice */
				v[m++] = (struct iovec){.iov_base = (char *)iov[i].iov_base + skip,
							.iov_len = l};
			room -= l;
			off += l;
			skip += l;
			if (skip == iov[i].iov_len) {
				i++;
				skip = 0;
			}
		}
		err = m ? cachetier__run_writev(f, c0, crc, at, v, m) : 0;
		if (err)
			return err;
	}
	return 0;
}

int cachetier__punch_start(struct cachetier *ct)
{
	struct ct_puncher *pu = calloc(1, sizeof(*pu));

	if (!pu)
		return -ENOMEM;
	disk_mutex_init(&pu->lock, DISK_LOCK_CT_PUNCH);
	pthread_cond_init(&pu->cond, NULL);
	pu->tail = &pu->q;
	ct->pun = pu;
	if (pthread_create(&pu->thread, NULL, puncher_main, ct) != 0)
		return -EAGAIN;
	pthread_setname_np(pu->thread, "shardfs-punch"); /* top -H, perf */
	pu->have_thread = 1;
	return 0;
}

void cachetier__punch_stop(struct cachetier *ct)
{
	struct ct_puncher *pu = ct->pun;

	if (!pu || !pu->have_thread)
		return;
	disk_mutex_lock(&pu->lock);
	pu->stop = 1;
	pthread_cond_signal(&pu->cond);
	disk_mutex_unlock(&pu->lock);
	pthread_join(pu->thread, NULL); /* after the queue drained */
	pu->have_thread = 0;
}

void cachetier__punch_free(struct cachetier *ct)
{
	if (!ct->pun)
		return;
	pthread_cond_destroy(&ct->pun->cond);
	disk_mutex_destroy(&ct->pun->lock);
	free(ct->pun);
	ct->pun = NULL;
}

void cachetier_punch_hold(struct cachetier *ct, int hold)
{
	if (ct->pun) {
		disk_mutex_lock(&ct->pun->lock);
		ct->pun->hold = hold;
		pthread_cond_signal(&ct->pun->cond);
		disk_mutex_unlock(&ct->pun->lock);
	}
}
