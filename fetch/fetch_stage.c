/*
 * fetch_stage.c — the stage (fetch.h: fetch_stage_*; its read side is
 * fetch_stageread.c's): planned bytes the cache could keep only by
 * evicting are fetched into bounded memory (--plan-memory) and the planned
 * reads are answered from there, never written to the cache, checksummed,
 * evicted or punched. The rule that
 * sends a span here (rules_stage, fetch_rules.c) and the planner that
 * issues it (fetch_planner.c) are the scheduler's; the read into memory
 * is the store's (cachetier_obj_read_mem: the listed version, the store's
 * retry budget, stall bound and resumes).
 *
 * A piece: one span of a plan's batch (bytes [off, end) of a store
 * object, the object referenced while the piece lives), its buffer, its
 * state (in flight, there, failed) and its planned paths (subs: the
 * data the batch's pieces named; a first piece's tar header is staged with
 * it but not counted).
 * A read of [a, b) of the object that lies in a piece is served as soon
 * as its own bytes are in (fetch_stageread.c, the read side: which piece
 * a read takes, its wait for the watermark, the count of a path's bytes
 * read). A failed piece's bytes are not served once it failed, those
 * below the watermark included.
 *
 * A failed piece's buffer is freed once no read holds it (at the failure,
 * on the I/O thread, when none does), and its bytes no longer count; the
 * piece itself stays until it goes as below, so its reads count as
 * fallbacks.
 * Freed: once reads got every byte of each of its planned paths, or its
 * plan went (cleared, or replaced at an epoch's end: fetch__stage_plans),
 * and its read ended (one that goes on a read's thread or on the I/O
 * thread is unlinked there, its buffer back in the region, and goes on a
 * list the planner's next pass frees, fetch__stage_bury: freeing drops an
 * object reference, a take of the store's lock, which no read, reply's
 * release or I/O callback makes; only the planner's thread makes pieces,
 * so the pieces on that list are at most those its last pass left); under pressure (a
 * new piece does not fit), those whose paths were all read, then those
 * whose last planned path lies behind their plan's position, oldest
 * first, once no piece wholly read waits only for a reply's hold or its
 * read's end to go (stage_make_room); at fetch_free. A piece in flight or
 * being copied from is never freed (the store's read writes into its
 * buffer until it ends).
 *
 * Memory: the pieces' buffers (whole pages, a span's size rounded up to
 * its class), page runs of one region of --plan-memory's bytes mapped
 * at the stage's first span (fetch_stagebuf.c); their sizes count at most
 * --plan-memory, and a span needs a free run of its pages: one that does
 * not fit either after the pressure rule goes to the store as before. A
 * piece's run goes back to the region when it is unlinked or its failed
 * read's memory goes (no read holds it, the store's read into it ended),
 * never earlier.
 * The lock (rank 89, a leaf): the piece list, the waiters and the
 * counters; held for a lookup and a few updates, never across a call into
 * the store, never while copying; the store's I/O thread takes it to end
 * a read and to wake waiters whose bytes are in, never otherwise.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "disk_arena.h"
#include "fetch_stage_i.h"

int fetch__stage_new(struct fetch *s, uint64_t max)
{
	struct fetch_stage *st;

	if (max == 0 || atomic_load(&s->stage))
		return 0;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	if (fetch__stagebuf_init(&st->pool, max) < 0) {
		free(st);
		return -ENOMEM;
	}
	disk_mutex_init(&st->lock, DISK_LOCK_FETCH_STAGE);
	pthread_cond_init(&st->cond, NULL);
	st->max = max;
	atomic_store(&s->stage, st);
	return 0;
}

void fetch__stage_piece_free(struct stage_piece *p)
{
	for (uint32_t i = 0; i < p->nsub; i++) {
		if (p->sub[i].run != p->sub[i].in)
			free(p->sub[i].run);
	}
	cachetier_obj_unref(p->o);
	free(p);
}

/* Free a list of unlinked pieces (linked by next), unlocked. */
static void pieces_free(struct stage_piece *p)
{
	while (p) {
		struct stage_piece *n = p->next;

		fetch__stage_piece_free(p);
		p = n;
	}
}

/* p's buffer back in the pool, no longer counted: no read holds p, and
 * the store's read into it ended (or never started). st->lock held. */
static void piece_put_buf(struct fetch_stage *st, struct stage_piece *p)
{
	if (p->buf)
		fetch__stagebuf_put(&st->pool, p->buf, p->size);
	p->buf = NULL;
	st->bytes -= p->counted;
	p->counted = 0;
}

/* Unlink p from st's list, its buffer back in the pool (st->lock held);
 * the caller frees it unlocked. */
void fetch__stage_unlink(struct fetch_stage *st, struct stage_piece *p)
{
	for (struct stage_piece **pp = fetch__stage_list(st, p->o, p->off >> STAGE_BUCKET_LOG2);
	     *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			piece_put_buf(st, p);
			return;
		}
	}
}

/* p (unlinked: no read finds it, its buffer back in the region) onto the
 * list the planner's next pass frees (fetch__stage_reap, from
 * fetch__stage_plans). st->lock held. */
void fetch__stage_bury(struct fetch_stage *st, struct stage_piece *p)
{
	p->next = st->dead;
	st->dead = p;
	atomic_fetch_add_explicit(&st->ndead, 1, memory_order_relaxed);
}

/* Free the pieces unlinked on reads' threads and the I/O thread
 * (fetch__stage_bury): the planner's thread (fetch__stage_plans) and
 * fetch__stage_free; freeing drops an object reference. */
void fetch__stage_reap(struct fetch_stage *st)
{
	struct stage_piece *p;

	if (atomic_load_explicit(&st->ndead, memory_order_relaxed) == 0)
		return;
	disk_mutex_lock(&st->lock);
	p = st->dead;
	st->dead = NULL;
	atomic_store_explicit(&st->ndead, 0, memory_order_relaxed);
	disk_mutex_unlock(&st->lock);
	pieces_free(p);
}

/* Wake p's waiters whose bytes are below end (all: UINT64_MAX), and set
 * need to the lowest end of the others. st->lock held. */
void fetch__stage_wake(struct stage_piece *p, uint64_t end)
{
	uint64_t need = UINT64_MAX;

	for (struct stage_waiter **pw = &p->waiters; *pw;) {
		struct stage_waiter *w = *pw;

		if (w->end <= end) {
			*pw = w->next;
			w->woken = 1;
			pthread_cond_signal(&w->cond);
		} else {
			if (w->end < need)
				need = w->end;
			pw = &w->next;
		}
	}
	atomic_store(&p->need, need);
}

/* A failed piece no read holds: its buffer back in the pool, no longer
 * counted (the piece stays, its reads fall back, until it goes as a read
 * one would). st->lock held. */
void fetch__stage_drop_buf(struct fetch_stage *st, struct stage_piece *p)
{
	if (p->state != STAGE_FAILED || p->readers > 0 || !p->buf)
		return;
	piece_put_buf(st, p);
}

void fetch__stage_free(struct fetch *s)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	struct stage_piece *p;

	if (!st)
		return;
	disk_mutex_lock(&st->lock);
	/* the store's reads end (the mount stops: cancelled at once) */
	while (st->inflight > 0)
		disk_cond_wait(&st->cond, &st->lock);
	p = NULL;
	for (unsigned i = 0; i < STAGE_LISTS; i++) {
		while (st->head[i]) { /* onto one list, freed unlocked */
			struct stage_piece *n = st->head[i];

			st->head[i] = n->next;
			piece_put_buf(st, n);
			n->next = p;
			p = n;
		}
	}
	disk_mutex_unlock(&st->lock);
	pieces_free(p);
	fetch__stage_reap(st);
	fetch__stagebuf_fini(&st->pool);
	pthread_cond_destroy(&st->cond);
	disk_mutex_destroy(&st->lock);
	free(st);
	atomic_store(&s->stage, NULL);
}

/* cachetier_mem_done_fn: the store's I/O thread (or the planner's, for a
 * store that reads in the caller). */
static void stage_done(void *arg, int err)
{
	struct stage_piece *p = arg;
	struct fetch_stage *st = p->st;

	disk_mutex_lock(&st->lock);
	p->state = err < 0 ? STAGE_FAILED : STAGE_OK;
	p->err = err;
	st->inflight--;
	if (err < 0)
		st->c.failed++;
	fetch__stage_wake(p, UINT64_MAX);
	if ((p->left == 0 || !p->plan) && p->readers == 0) {
		/* every path was read while the read ran (bytes past the last
		 * path: a gap), or its plan went: freed by the next other
		 * caller */
		if (p->left > 0)
			st->c.dropped++;
		fetch__stage_unlink(st, p);
		fetch__stage_bury(st, p);
	} else {
		/* failed, no read holds it: its buffer goes back to the pool
		 * now (no system call) */
		fetch__stage_drop_buf(st, p);
	}
	pthread_cond_broadcast(&st->cond);
	disk_mutex_unlock(&st->lock);
}

/* cachetier_mem_progress_fn, the store's I/O thread: [p->off, end) is in.
 * The watermark is published first (a reader that finds it past its end
 * serves itself without waiting); the lock is taken only when a waiter's
 * bytes are in (need: the lowest end a waiter needs). The waiter stores
 * need and then loads have, this stores have and then loads need (both
 * sequentially consistent): one of the two sees the other's store, so no
 * waiter sleeps past its bytes. */
static void stage_progress(void *arg, uint64_t end)
{
	struct stage_piece *p = arg;
	struct fetch_stage *st = p->st;

	atomic_store(&p->have, end);
	if (atomic_load(&p->need) > end)
		return;
	disk_mutex_lock(&st->lock);
	fetch__stage_wake(p, end);
	disk_mutex_unlock(&st->lock);
}

/* Room for len more bytes: pieces done and not read from now whose plan
 * went (fetch__stage_plans), then those of plan whose last planned path
 * lies behind its position (position >= last + 1), the lowest last first,
 * unlinked onto *freed. Before a piece with planned bytes not read yet
 * goes, the pieces whose every path was read and that only a reply's hold
 * or their read's end keeps (they go then: stage_end, fetch_stage_release,
 * stage_done) are waited for: the position moves at a path's first read,
 * and a reader whose last reply of the path before was not released yet
 * (or whose span's read had not ended) lost the path it is reading to the
 * next batch (tests/mount/test_stage.py 'epoch' under load). That wait is
 * bounded by the reply's write to the kernel and by the store's read (its
 * retry budget and stall bound), as a reader's wait for a piece's bytes.
 * Room is the count and a run: len more bytes within --plan-memory and a
 * free run of them in the region (fetch_stagebuf.c). When the count has
 * room and the region no run, the same pieces go, but none is waited for:
 * no piece to go is no room (nofit counted), the span goes to the store.
 * st->lock held (released while waiting). 1 when there is room, *at the
 * first page of the free run found (fetch__stagebuf_fit: the run the span
 * takes, stage_link, under the same hold of the lock: one scan). */
static int stage_make_room(struct fetch_stage *st, uint64_t len, const void *plan,
			   uint32_t position, struct stage_piece **freed, size_t *at)
{
	for (;;) {
		int over = st->bytes + len > st->max; /* else: no free run */
		struct stage_piece *v = NULL;
		int soon = 0; /* a piece wholly read goes once its hold or read ends */

		if (!over && (*at = fetch__stagebuf_fit(&st->pool, (size_t)len)) < st->pool.pages)
			return 1;

		for (unsigned i = 0; i < STAGE_LISTS && !(v && (!v->plan || v->left == 0)); i++) {
			for (struct stage_piece *p = st->head[i]; p; p = p->next) {
				if (p->state == STAGE_INFLIGHT || p->readers > 0) {
					soon |= p->left == 0;
					continue;
				}
				if (!p->plan || p->left == 0) { /* its plan went, or read: first */
					v = p;
					break;
				}
				if (p->plan != plan || p->last >= position)
					continue;
				if (!v || p->last < v->last)
					v = p;
			}
		}
		if (over && soon && !(v && (!v->plan || v->left == 0))) {
			st->c.room_waits++;
			disk_cond_wait(&st->cond, &st->lock);
			continue;
		}
		if (!v) {
			st->pool.nofit += !over;
			return 0;
		}
		fetch__stage_unlink(st, v);
		if (v->left > 0)
			st->c.dropped++;
		v->next = *freed;
		*freed = v;
	}
}

int fetch__stage_add(struct fetch *s, struct cachetier_obj *o, uint64_t off, uint64_t end,
		     const struct cachetier_piece *sub, size_t nsub, const void *plan,
		     uint32_t last, uint32_t position)
{
	return fetch__stage_add_via(s, o, off, end, sub, nsub, plan, last, position, NULL, NULL);
}

/* A piece for [off, end) of o (not referenced yet) with its planned paths
 * sub[nsub], in flight, no buffer, listed nowhere. NULL: no memory. */
static struct stage_piece *piece_new(struct fetch_stage *st, struct cachetier_obj *o, uint64_t off,
				     uint64_t end, const struct cachetier_piece *sub, size_t nsub,
				     const void *plan, uint32_t last)
{
	struct stage_piece *p = calloc(1, sizeof(*p) + nsub * sizeof(p->sub[0]));

	if (!p)
		return NULL;
	p->st = st;
	p->o = o;
	p->off = off;
	p->end = end;
	p->plan = plan;
	p->last = last;
	atomic_init(&p->have, off);
	atomic_init(&p->need, UINT64_MAX);
	p->nsub = p->left = (uint32_t)nsub;
	for (size_t i = 0; i < nsub; i++) {
		struct stage_sub *u = &p->sub[i];

		*u = (struct stage_sub){
		    .off = sub[i].off, .end = sub[i].off + sub[i].len, .cap = STAGE_SUB_RUNS};
		u->run = u->in;
	}
	return p;
}

/* p listed, counted (size bytes: its class) and in flight, the room for
 * it made (the free run at page at, stage_make_room's: its buffer);
 * [*fault, + *nfault): the region's chunks its run reaches first, to
 * fault in unlocked. st->lock held. */
static void stage_link(struct fetch_stage *st, struct stage_piece *p, size_t size, size_t at,
		       void **fault, size_t *nfault)
{
	struct stage_piece **l = fetch__stage_list(st, p->o, p->off >> STAGE_BUCKET_LOG2);
	uint64_t len = p->end - p->off;

	p->buf = fetch__stagebuf_take(&st->pool, at, size, fault, nfault);
	p->size = size;
	p->seq = st->seq++;
	if (len > st->span_max)
		st->span_max = len;
	p->next = *l;
	*l = p;
	st->bytes += size;
	p->counted = size;
	st->inflight++;
	if (st->bytes > st->c.peak)
		st->c.peak = st->bytes;
	/* counted staged now, under this take (its read starts next; one that
	 * does not start is taken back: stage_unstarted) */
	st->c.pieces++;
	st->c.bytes += len;
}

/* Place p (size bytes: its span's class) once there is room for it
 * (stage_make_room, the pieces it unlinks freed unlocked): listed and in
 * flight with its run (stage_link), the region's chunks its run reaches
 * first faulted in (found by no read before its read starts: its bytes
 * are served only below the watermark). The region is mapped at the
 * stage's first span (one mmap under the lock, once: nothing waits on it
 * then; a mount that never stages maps nothing); not mapped is no room.
 * 0; -ENOSPC: no room (p freed). */
static int stage_place(struct fetch_stage *st, struct stage_piece *p, size_t size,
		       uint32_t position)
{
	struct stage_piece *freed = NULL;
	void *fault = NULL;
	size_t nfault = 0, at = 0;
	int room;

	disk_mutex_lock(&st->lock);
	st->c.add_locks++;
	room = fetch__stagebuf_map(&st->pool) == 0 &&
	       stage_make_room(st, size, p->plan, position, &freed, &at);
	if (room)
		stage_link(st, p, size, at, &fault, &nfault);
	else
		st->c.full++;
	disk_mutex_unlock(&st->lock);
	pieces_free(freed);
	if (!room) {
		free(p);
		return -ENOSPC;
	}
	disk_arena_prefault(fault, nfault);
	return 0;
}

/* p's read did not start (err, its done not run): the span goes to the
 * store; a read that found p meanwhile reads the ordinary way, the last
 * one frees it, else it is freed here. */
static void stage_unstarted(struct fetch_stage *st, struct stage_piece *p, int err)
{
	disk_mutex_lock(&st->lock);
	st->c.add_locks++;
	st->c.pieces--; /* counted at its placing (stage_link) */
	st->c.bytes -= p->end - p->off;
	p->state = STAGE_FAILED;
	p->err = err;
	st->inflight--;
	pthread_cond_broadcast(&st->cond);
	if (p->readers == 0)
		fetch__stage_unlink(st, p);
	else
		p = NULL;
	disk_mutex_unlock(&st->lock);
	if (p)
		fetch__stage_piece_free(p);
}

int fetch__stage_add_via(struct fetch *s, struct cachetier_obj *o, uint64_t off, uint64_t end,
			 const struct cachetier_piece *sub, size_t nsub, const void *plan,
			 uint32_t last, uint32_t position, fetch_stage_read_fn read, void *ctx)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	struct stage_piece *p;
	uint64_t len = end - off;
	size_t size;
	int err;

	if (!st || len == 0)
		return -EOPNOTSUPP;
	size = fetch__stagebuf_size((size_t)len, NULL);
	if (size > st->max) {
		disk_mutex_lock(&st->lock);
		st->c.add_locks++;
		st->c.full++;
		disk_mutex_unlock(&st->lock);
		return -ENOSPC;
	}
	p = piece_new(st, o, off, end, sub, nsub, plan, last);
	if (!p)
		return -ENOMEM;
	err = stage_place(st, p, size, position);
	if (err == -ENOSPC)
		return err;
	cachetier_obj_ref(o); /* p listed: dropped by fetch__stage_piece_free */
	if (err == 0)
		err = read ? read(ctx, o, off, (size_t)len, p->buf, stage_progress, stage_done, p)
			   : cachetier_obj_read_mem(o, off, (size_t)len, p->buf,
						    fetch__rules_stage_small(len), stage_progress,
						    stage_done, p);
	if (err < 0) {
		stage_unstarted(st, p, err);
		return err;
	}
	return err;
}

void fetch_stage_stats_get(struct fetch *s, struct fetch_stage_stats *out)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	memset(out, 0, sizeof(*out));
	if (!st)
		return;
	disk_mutex_lock(&st->lock);
	*out = st->c;
	out->wait_ms = st->c.wait_ms_ns / 1000000;
	out->buf_runs = st->pool.runs;
	out->buf_chunks = st->pool.chunks;
	out->buf_nofit = st->pool.nofit;
	out->buf_free = st->pool.free_bytes;
	out->now = st->bytes;
	out->max = st->max;
	disk_mutex_unlock(&st->lock);
}

void fetch__stage_plans(struct fetch *s, void *const *plans, size_t n)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	if (!st)
		return;
	fetch__stage_reap(st);
	struct stage_piece *freed = NULL;

	disk_mutex_lock(&st->lock);
	for (unsigned l = 0; l < STAGE_LISTS; l++) {
		for (struct stage_piece **pp = &st->head[l]; *pp;) {
			struct stage_piece *p = *pp;
			size_t i = 0;

			while (p->plan && i < n && plans[i] != p->plan)
				i++;
			if (i == n)
				p->plan = NULL;
			if (!p->plan && p->state != STAGE_INFLIGHT && p->readers == 0) {
				/* its plan went (cleared, replaced: an epoch's end):
				 * no planned read is due */
				*pp = p->next;
				piece_put_buf(st, p);
				if (p->left > 0)
					st->c.dropped++;
				p->next = freed;
				freed = p;
				continue;
			}
			pp = &p->next;
		}
	}
	disk_mutex_unlock(&st->lock);
	while (freed) {
		struct stage_piece *nx = freed->next;

		fetch__stage_piece_free(freed);
		freed = nx;
	}
}

const void *fetch__stage_region(struct fetch *s, size_t *bytes)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	const void *base;

	*bytes = 0;
	if (!st)
		return NULL;
	disk_mutex_lock(&st->lock);
	base = st->pool.base; /* mapped at the first span */
	*bytes = base ? st->pool.pages * 4096u : 0;
	disk_mutex_unlock(&st->lock);
	return base;
}

uint64_t fetch__stage_max(struct fetch *s)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	return st ? st->max : 0;
}