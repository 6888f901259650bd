/*
 * fetch_stageread.c — the stage's read side (fetch.h: fetch_stage_read,
 * fetch_stage_hold, fetch_stage_release; the stage itself, its pieces'
 * placement, room and reads into memory: fetch_stage.c, whose header says
 * what a piece is and when it goes).
 *
 * A read of [a, b) of the object that lies in a piece is served as soon
 * as its own bytes are in. Pieces may overlap (a span carries the bytes
 * between its planned paths, another span's paths among them): the read
 * takes the piece that has its bytes, else the one that plans them, else
 * the oldest (stage_pick); bytes only carried by a piece in flight are
 * read from the cache when it holds them all. The store's read publishes
 * how far its bytes reached (the watermark, stage_progress: an atomic store on the store's
 * I/O thread as pieces land), and a read of [a, b) copies from the piece
 * once the watermark passed b, its read ended or not. One whose bytes are
 * not in yet waits (a waiter of the piece, with its own condition
 * variable) until they are or the read ended: the I/O thread takes the
 * lock only when the lowest end a waiter needs is in (need), and wakes
 * only the waiters whose bytes now are; the read's end wakes the rest.
 * The wait is bounded by the store's read, its retry budget and stall
 * bound: it always ends, with its bytes or an error.
 * Bytes below the watermark are the listed version's and never rewritten
 * (cachetier_memread.c's header: the watermark moves only with bytes of an
 * answer whose ETag and size the store checked, in order; a resumed or
 * retried attempt writes only from the watermark on), so a read served
 * from them is right whatever the rest of the read does. A piece that
 * fails after part of it was served (an error, a version change: -ESTALE):
 * the bytes served were the listed version's; every later read of it goes
 * the ordinary way (the cache, a miss fill), which gives the bytes or the
 * same error it gives without the stage, as does a read of an object
 * changed under its weak ETag or of no piece at all. A failed piece's
 * bytes are not served once it failed, those below the watermark
 * included.
 *
 * A read counts its bytes in the planned paths it overlaps (a path is read
 * once the union of the reads' bytes in it is all of it: sub_add,
 * piece_note_read), and the piece goes once every path was read and no
 * read holds it (stage_end, fetch_stage_release): unlinked and its buffer
 * back at once, freed (its object reference dropped) by the planner's next
 * pass (fetch__stage_bury). So a read, a hold and a release take no lock
 * of the store's (ct->lock) but one: bytes only a span in flight carries
 * are looked for in the cache (stage_find).
 * The stage's lock (rank 89, a leaf): held for a lookup and a few
 * updates, never across a call into the store, never while copying.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fetch_stage_i.h"

/* Add [lo, hi) (within u) to u's runs: the bytes it adds that reads had
 * not got (0: none, or no array for one more run: u lost). st->lock held. */
static uint64_t sub_add(struct stage_sub *u, uint64_t lo, uint64_t hi)
{
	struct stage_run *r = u->run;
	uint32_t i = 0, j, n = u->nrun;
	uint64_t had = 0;

	while (i < n && r[i].b < lo) /* runs wholly before, not touching */
		i++;
	for (j = i; j < n && r[j].a <= hi; j++) { /* runs it overlaps or touches */
		had += r[j].b - r[j].a;
		if (r[j].a < lo)
			lo = r[j].a;
		if (r[j].b > hi)
			hi = r[j].b;
	}
	if (j == i) { /* a run of its own at i */
		if (n == u->cap) {
			uint32_t cap = u->cap * 2;
			struct stage_run *nr =
			    cap <= STAGE_SUB_RUNS_MAX ? malloc(cap * sizeof(*nr)) : NULL;

			if (!nr) {
				u->lost = 1;
				return 0;
			}
			memcpy(nr, r, n * sizeof(*nr));
			if (r != u->in)
				free(r);
			u->run = r = nr;
			u->cap = cap;
		}
		memmove(&r[i + 1], &r[i], (n - i) * sizeof(*r));
		u->nrun = n + 1;
	} else if (j > i + 1) { /* runs i..j-1 become one */
		memmove(&r[i + 1], &r[j], (n - j) * sizeof(*r));
		u->nrun = n - (j - i - 1);
	}
	r[i] = (struct stage_run){lo, hi};
	return (hi - lo) - had;
}

/* Count a read of [a, b) in the planned paths of p it overlaps: a path is
 * read once the union of the reads' bytes in it is all of it (the kernel's
 * readahead may send a path's last request before one in the middle: the
 * end reached is not the path read; a page read again after the page
 * cache was dropped is not a new byte). 1 when every path was read.
 * st->lock held. */
static int piece_note_read(struct stage_piece *p, uint64_t a, uint64_t b)
{
	for (uint32_t i = 0; i < p->nsub; i++) {
		struct stage_sub *u = &p->sub[i];
		uint64_t lo = a > u->off ? a : u->off, hi = b < u->end ? b : u->end;

		if (u->got >= u->end - u->off || u->lost || lo >= hi)
			continue;
		u->got += sub_add(u, lo, hi);
		if (u->got >= u->end - u->off)
			p->left--;
	}
	return p->left == 0;
}

/* 1 when bytes [.., end) of p may be served: they are in (the watermark
 * passed end; its read ended with all of them, or is still running), its
 * read did not fail, and its object's bytes did not change under a weak
 * ETag. st->lock held. */
static int stage_ok(const struct stage_piece *p, uint64_t end)
{
	return p->state != STAGE_FAILED && atomic_load(&p->have) >= end &&
	       !cachetier_obj_stale(p->o);
}

/* 1 when one of p's planned paths holds all of [off, end). */
static int piece_plans(const struct stage_piece *p, uint64_t off, uint64_t end)
{
	for (uint32_t i = 0; i < p->nsub; i++) {
		if (p->sub[i].off <= off && end <= p->sub[i].end)
			return 1;
	}
	return 0;
}

/* How a piece holds a read's bytes (stage_pick): the higher, the sooner
 * they may be served. */
enum stage_fit {
	FIT_FAILED = 0, /* its read failed: the read goes the ordinary way */
	FIT_CARRIED,	/* in flight, between its planned paths (a gap it carries) */
	FIT_PLANNED,	/* in flight, in one of its planned paths */
	FIT_IN,		/* in (the watermark passed them), carried */
	FIT_IN_PLANNED, /* in, in one of its planned paths */
};

/* How p holds [off, end) of its object: the better of it and *best
 * (*fit) kept there, of equal fits the older. */
static void pick_one(struct stage_piece *p, uint64_t off, uint64_t end, struct stage_piece **best,
		     enum stage_fit *fit)
{
	enum stage_fit f;

	if (p->state == STAGE_FAILED)
		f = FIT_FAILED;
	else if (atomic_load(&p->have) >= end)
		f = piece_plans(p, off, end) ? FIT_IN_PLANNED : FIT_IN;
	else
		f = piece_plans(p, off, end) ? FIT_PLANNED : FIT_CARRIED;
	if (!*best || f > *fit || (f == *fit && p->seq < (*best)->seq)) {
		*best = p;
		*fit = f;
	}
}

/* Of the pieces of o that hold [off, end), the one a read is served
 * from, and how it holds them (*fit). Pieces overlap: a span carries the
 * bytes between its planned paths, which may be planned paths of another
 * span, of an earlier batch. Taking the newest made a read of a path an
 * older, finished span holds wait a time to first byte for a newer one
 * just handed over (tests/bench/README.md, "The stage"); so the best fit
 * wins, and of equal fits the oldest. The lists looked at: o's of the
 * MiBs a piece that holds off may start in (from off - span_max to off;
 * every list once when they are more). NULL when none. st->lock held. */
static struct stage_piece *stage_pick(struct fetch_stage *st, const struct cachetier_obj *o,
				      uint64_t off, uint64_t end, enum stage_fit *fit)
{
	struct stage_piece *best = NULL;
	uint64_t hi = off >> STAGE_BUCKET_LOG2,
		 lo = off > st->span_max ? (off - st->span_max) >> STAGE_BUCKET_LOG2 : 0;

	*fit = FIT_FAILED;
	if (hi - lo >= STAGE_LISTS) {
		for (unsigned i = 0; i < STAGE_LISTS; i++) {
			for (struct stage_piece *p = st->head[i]; p; p = p->next) {
				if (p->o == o && p->off <= off && end <= p->end)
					pick_one(p, off, end, &best, fit);
			}
		}
		return best;
	}
	for (uint64_t m = lo; m <= hi; m++) {
		for (struct stage_piece *p = *fetch__stage_list(st, o, m); p; p = p->next) {
			if (p->o == o && p->off <= off && end <= p->end &&
			    (p->off >> STAGE_BUCKET_LOG2) == m)
				pick_one(p, off, end, &best, fit);
		}
	}
	return best;
}

/* A waiter w of p for its bytes up to w->end (stage_find): done once woken,
 * or p is no longer in flight, or has them. st->lock held. */
struct stage_wait {
	struct stage_piece *p;
	const struct stage_waiter *w;
};

static int stage_waited(void *arg)
{
	const struct stage_wait *sw = arg;

	return sw->w->woken || sw->p->state != STAGE_INFLIGHT ||
	       atomic_load(&sw->p->have) >= sw->w->end;
}

/* The stage's lock taken by a read (stage_read_lock): counted in read_locks
 * once held (a read's find and end under one take, its reply's release
 * under another: fetch_stage_hold, fetch_stage_release). */
static void stage_read_lock(struct fetch_stage *st)
{
	disk_mutex_lock(&st->lock);
	st->c.read_locks++;
}

/* The piece of o that holds [off, off + len) (stage_pick), held (readers), once its
 * bytes are in or its read ended (bounded by the store's read: its retry
 * budget and stall bound); NULL when none. *ok: 1 when they may be served
 * (stage_ok); -EINTR when the calling request was given up while it waited
 * (cachetier_request_stop); else 0, the read goes the ordinary way.
 * st->lock held at the call and at the return (dropped and taken again
 * only around the cache's look at carried bytes). */
static struct stage_piece *stage_find(struct fetch_stage *st, struct cachetier_obj *o, uint64_t off,
				      size_t len, int *ok)
{
	struct stage_piece *p;
	uint64_t end = off + len;
	enum stage_fit fit;

	*ok = 0;
	p = stage_pick(st, o, off, end, &fit);
	if (p && fit == FIT_CARRIED) {
		/* bytes a span in flight only carries (it was handed over for
		 * other paths): the cache may hold them already (a span of an
		 * earlier batch went there), and then they are read from it
		 * now rather than a time to first byte later */
		int cached;

		disk_mutex_unlock(&st->lock);
		cached = cachetier_obj_range_cached(o, off, len);
		stage_read_lock(st);
		if (cached)
			return NULL;
		p = stage_pick(st, o, off, end, &fit);
	}
	if (p) {
		p->readers++;
		if (p->state == STAGE_INFLIGHT && atomic_load(&p->have) < end) {
			struct stage_waiter w = {.next = p->waiters, .end = end};
			struct timespec t0, t1;

			clock_gettime(CLOCK_MONOTONIC, &t0);
			st->c.waits++;
			pthread_cond_init(&w.cond, NULL);
			p->waiters = &w;
			if (end < atomic_load(&p->need))
				atomic_store(&p->need, end);
			/* need stored before have is loaded (stage_progress); a
			 * request with a stop looks at it every tick and, given
			 * up, leaves the span to its other readers (-EINTR) */
			*ok = cachetier_request_wait(&w.cond, &st->lock, NULL, stage_waited,
						     &(struct stage_wait){p, &w});
			if (!w.woken) { /* not woken by stage_progress or stage_done */
				for (struct stage_waiter **pw = &p->waiters; *pw;
				     pw = &(*pw)->next) {
					if (*pw == &w) {
						*pw = w.next;
						break;
					}
				}
				fetch__stage_wake(p, 0); /* need recomputed, nobody woken */
			}
			pthread_cond_destroy(&w.cond);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			st->c.wait_ms_ns += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
						       (t1.tv_nsec - t0.tv_nsec));
		}
		if (*ok == 0)
			*ok = stage_ok(p, end);
	}
	return p;
}

/* A read of [off, off + len) found p (stage_find): counted (served or a
 * fallback) and noted in its planned paths; unless kept (held by the
 * reply: stage_release), p's hold ends, and p goes once every path was
 * read and no read holds it. st->lock held (by stage_find's caller: one
 * take for the find and the end); dropped here. */
static void stage_end(struct fetch_stage *st, struct stage_piece *p, uint64_t off, size_t len,
		      int served, int keep)
{
	int gone;

	if (!keep)
		p->readers--;
	if (served) {
		st->c.reads++;
		st->c.read_bytes += len;
	} else {
		st->c.fallbacks++;
	}
	gone = piece_note_read(p, off, off + len);
	gone = (gone || !p->plan) && p->readers == 0 && p->state != STAGE_INFLIGHT;
	if (gone) {
		fetch__stage_unlink(st, p);
		fetch__stage_bury(st, p);	   /* freed by the planner's pass */
		pthread_cond_broadcast(&st->cond); /* room (stage_make_room) */
	} else
		fetch__stage_drop_buf(st, p);
	disk_mutex_unlock(&st->lock);
}

int fetch_stage_read(struct fetch *s, struct cachetier_obj *o, void *dst, size_t len, uint64_t off)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	struct stage_piece *p;
	int ok;

	if (!st || !len)
		return 0;
	stage_read_lock(st);
	p = stage_find(st, o, off, len, &ok);
	if (!p) {
		disk_mutex_unlock(&st->lock);
		return 0;
	}
	/* a hold kept for the copy, made without the lock */
	stage_end(st, p, off, len, ok > 0, ok > 0);
	if (ok > 0) {
		memcpy(dst, p->buf + (off - p->off), len);
		fetch_stage_release(p);
	}
	return ok;
}

int fetch_stage_hold(struct fetch *s, struct cachetier_obj *o, size_t len, uint64_t off, char **ptr,
		     void **ref)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	struct stage_piece *p;
	int ok;

	*ptr = NULL;
	*ref = NULL;
	if (!st || !len)
		return 0;
	stage_read_lock(st);
	p = stage_find(st, o, off, len, &ok);
	if (!p) {
		disk_mutex_unlock(&st->lock);
		return 0;
	}
	if (ok > 0) {
		*ptr = (char *)p->buf + (off - p->off);
		*ref = p;
	}
	stage_end(st, p, off, len, ok > 0, ok > 0);
	return ok;
}

void fetch_stage_release(void *ref)
{
	struct stage_piece *p = ref;
	struct fetch_stage *st;
	int gone;

	if (!p)
		return;
	st = p->st;
	stage_read_lock(st);
	p->readers--;
	gone = (p->left == 0 || !p->plan) && p->readers == 0 && p->state != STAGE_INFLIGHT;
	if (gone) {
		fetch__stage_unlink(st, p);
		fetch__stage_bury(st, p);	   /* freed by the planner's pass */
		pthread_cond_broadcast(&st->cond); /* room (stage_make_room) */
	} else
		fetch__stage_drop_buf(st, p);
	disk_mutex_unlock(&st->lock);
}
