/*
 * fetch_stage.c — the stage (fetch.h: fetch_stage_*): planned bytes the
 * cache could keep only by evicting are fetched into bounded memory
 * (--plan-memory) and the planned reads are answered from there, never
 * written to the cache, checksummed, evicted or punched. The rule that
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
 * A failed piece's buffer is freed once no read holds it (at the failure,
 * on the I/O thread, when none does), and its bytes no longer count; the
 * piece itself stays until it goes as below, so its reads count as
 * fallbacks.
 * Freed: once reads got every byte of each of its planned paths, or its
 * plan went (cleared, or replaced at an epoch's end: fetch__stage_plans),
 * and its read ended (one that ends on the I/O thread with every path read goes
 * on a list the next stage call of another thread frees: freeing drops
 * an object reference, which takes the store's lock); under pressure (a
 * new piece does not fit), those whose paths were all read, then those
 * whose last planned path lies behind their plan's position, oldest
 * first, once no piece wholly read waits only for a reply's hold or its
 * read's end to go (stage_make_room); at fetch_free. A piece in flight or
 * being copied from is never freed (the store's read writes into its
 * buffer until it ends).
 *
 * Memory: the pieces' buffers (whole pages, a span's size rounded up to
 * its class), page runs of one region of --plan-memory's bytes mapped
 * once with the stage (fetch_stagebuf.c); their sizes count at most
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
#include "fetch_i.h"

enum stage_state { STAGE_INFLIGHT = 0, STAGE_OK, STAGE_FAILED };

/* Bytes [a, b) of a planned path that reads got. */
struct stage_run {
	uint64_t a, b;
};

/* Runs a path keeps in place before it takes an array of its own, and
 * the most it keeps (a path read in more disjoint pieces than that is
 * never counted read: its piece goes for room or with its plan; the
 * kernel reads a path through the page cache in pages, mostly in order). */
#define STAGE_SUB_RUNS	   2u
#define STAGE_SUB_RUNS_MAX 64u

/* A planned path's data in a piece: [off, end) (its tar header, staged
 * with a first piece, not counted), and the bytes of it reads got: their
 * union (runs, sorted, disjoint, not touching; got: their bytes), so a
 * byte read again (the kernel reads a page again after another process
 * dropped the page cache) counts once. lost: more than STAGE_SUB_RUNS_MAX
 * runs, or an array for more could not be had: the path is never counted
 * read (its piece goes for room or with its plan). */
struct stage_sub {
	uint64_t off, end, got;
	struct stage_run *run; /* in[] or its own array (cap runs) */
	uint32_t nrun, cap;
	int lost;
	struct stage_run in[STAGE_SUB_RUNS];
};

/* A read waiting for bytes [.., end) of a piece (on its stack). */
struct stage_waiter {
	struct stage_waiter *next;
	uint64_t end;
	int woken;
	pthread_cond_t cond;
};

struct stage_piece {
	struct stage_piece *next;
	struct fetch_stage *st;
	struct cachetier_obj *o; /* referenced */
	uint64_t off, end;
	unsigned char *buf; /* NULL once it failed and no read held it, or went */
	size_t size;	    /* buf's size (fetch__stagebuf_size: whole pages) */
	uint64_t counted;   /* its bytes in st->bytes (0 once buf is back in the pool) */
	/* the watermark: [off, have) of buf is in (stage_progress); and the
	 * lowest end a waiter needs (UINT64_MAX: none) */
	_Atomic uint64_t have, need;
	struct stage_waiter *waiters;
	enum stage_state state;
	int err;
	const void *plan; /* its plan (compared, never followed) */
	uint64_t seq;	  /* its order of staging (stage_pick: the oldest of equal fits) */
	uint32_t last;	  /* the plan index of its last planned path */
	unsigned readers; /* reads copying from it now */
	uint32_t nsub, left;
	struct stage_sub sub[];
};

/* The pieces' lists: a piece is listed by its object and the MiB its
 * first byte is in (STAGE_BUCKET_LOG2), hashed (stage_list: the top
 * STAGE_LISTS_LOG2 bits). A read of [a, b) looks only at the lists of its
 * object's MiBs from a - the longest span staged to a: a piece that holds
 * it starts there. One list of every piece (300-400 in the planned epoch
 * of tests/bench/link_bench.py) cost 6 % of the daemon's CPU in the scan,
 * a list per object (its 40-50 pieces there) 3 %. */
#define STAGE_LISTS_LOG2  8u
#define STAGE_LISTS	  (1u << STAGE_LISTS_LOG2)
#define STAGE_BUCKET_LOG2 20u

struct fetch_stage {
	struct disk_mutex lock;
	pthread_cond_t cond;		       /* a piece's read ended, or a piece went */
	struct stage_piece *head[STAGE_LISTS]; /* by object and MiB (stage_list) */
	struct stage_piece *dead;	       /* unlinked on the I/O thread: freed by stage_reap */
	atomic_int ndead;
	uint64_t max, bytes;	/* bytes: the pieces' buffers' sizes */
	uint64_t span_max, seq; /* the longest span staged; pieces staged */
	unsigned inflight;
	struct fetch_stage_stats c;
	struct fetch_stage_pool pool; /* the region's runs (fetch_stagebuf.c) */
};

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

/* The list of o's pieces that start in MiB m (off >> STAGE_BUCKET_LOG2). */
static struct stage_piece **stage_list(struct fetch_stage *st, const struct cachetier_obj *o,
				       uint64_t m)
{
	uint64_t h = ((uint64_t)(uintptr_t)o ^ (m * 0xff51afd7ed558ccdull)) * 0x9e3779b97f4a7c15ull;

	return &st->head[h >> (64u - STAGE_LISTS_LOG2)]; /* the top bits: one of STAGE_LISTS */
}

static void piece_free(struct stage_piece *p)
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

		piece_free(p);
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
static void piece_unlink(struct fetch_stage *st, struct stage_piece *p)
{
	for (struct stage_piece **pp = stage_list(st, p->o, p->off >> STAGE_BUCKET_LOG2); *pp;
	     pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			piece_put_buf(st, p);
			return;
		}
	}
}

/* Free the pieces stage_done unlinked (a thread other than the I/O
 * thread: freeing drops an object reference). */
static void stage_reap(struct fetch_stage *st)
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
static void piece_wake(struct stage_piece *p, uint64_t end)
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
static void piece_drop_buf(struct fetch_stage *st, struct stage_piece *p)
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
	stage_reap(st);
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
	piece_wake(p, UINT64_MAX);
	if ((p->left == 0 || !p->plan) && p->readers == 0) {
		/* every path was read while the read ran (bytes past the last
		 * path: a gap), or its plan went: freed by the next other
		 * caller */
		if (p->left > 0)
			st->c.dropped++;
		piece_unlink(st, p);
		p->next = st->dead;
		st->dead = p;
		atomic_fetch_add_explicit(&st->ndead, 1, memory_order_relaxed);
	} else {
		/* failed, no read holds it: its buffer goes back to the pool
		 * now (no system call) */
		piece_drop_buf(st, p);
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
	piece_wake(p, end);
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
 * st->lock held (released while waiting). 1 when there is room. */
static int stage_make_room(struct fetch_stage *st, uint64_t len, const void *plan,
			   uint32_t position, struct stage_piece **freed)
{
	for (;;) {
		int over = st->bytes + len > st->max; /* else: no free run */
		struct stage_piece *v = NULL;
		int soon = 0; /* a piece wholly read goes once its hold or read ends */

		if (!over && fetch__stagebuf_fits(&st->pool, (size_t)len))
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
		piece_unlink(st, v);
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
 * it made (a free run: its buffer); [*fault, + *nfault): the region's
 * chunks its run reaches first, to fault in unlocked. st->lock held. */
static void stage_link(struct fetch_stage *st, struct stage_piece *p, size_t size, void **fault,
		       size_t *nfault)
{
	struct stage_piece **l = stage_list(st, p->o, p->off >> STAGE_BUCKET_LOG2);
	uint64_t len = p->end - p->off;

	p->buf = fetch__stagebuf_take(&st->pool, size, fault, nfault);
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
}

/* Place p (size bytes: its span's class) once there is room for it
 * (stage_make_room, the pieces it unlinks freed unlocked): listed and in
 * flight with its run (stage_link), the region's chunks its run reaches
 * first faulted in (found by no read before its read starts: its bytes
 * are served only below the watermark). 0; -ENOSPC: no room (p freed). */
static int stage_place(struct fetch_stage *st, struct stage_piece *p, size_t size,
		       uint32_t position)
{
	struct stage_piece *freed = NULL;
	void *fault = NULL;
	size_t nfault = 0;
	int room;

	disk_mutex_lock(&st->lock);
	room = stage_make_room(st, size, p->plan, position, &freed);
	if (room)
		stage_link(st, p, size, &fault, &nfault);
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
	p->state = STAGE_FAILED;
	p->err = err;
	st->inflight--;
	pthread_cond_broadcast(&st->cond);
	if (p->readers == 0)
		piece_unlink(st, p);
	else
		p = NULL;
	disk_mutex_unlock(&st->lock);
	if (p)
		piece_free(p);
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
	cachetier_obj_ref(o); /* p listed: dropped by piece_free */
	if (err == 0)
		err = read ? read(ctx, o, off, (size_t)len, p->buf, stage_progress, stage_done, p)
			   : cachetier_obj_read_mem(o, off, (size_t)len, p->buf,
						    fetch__rules_stage_small(len), stage_progress,
						    stage_done, p);
	if (err < 0) {
		stage_unstarted(st, p, err);
		return err;
	}
	disk_mutex_lock(&st->lock);
	st->c.pieces++;
	st->c.bytes += len;
	disk_mutex_unlock(&st->lock);
	return err;
}

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
		for (struct stage_piece *p = *stage_list(st, o, m); p; p = p->next) {
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

/* The piece of o that holds [off, off + len) (stage_pick), held (readers), once its
 * bytes are in or its read ended (bounded by the store's read: its retry
 * budget and stall bound); NULL when none. *ok: 1 when they may be served
 * (stage_ok); -EINTR when the calling request was given up while it waited
 * (cachetier_request_stop); else 0, the read goes the ordinary way. */
static struct stage_piece *stage_find(struct fetch_stage *st, struct cachetier_obj *o, uint64_t off,
				      size_t len, int *ok)
{
	struct stage_piece *p;
	uint64_t end = off + len;
	enum stage_fit fit;

	*ok = 0;
	disk_mutex_lock(&st->lock);
	p = stage_pick(st, o, off, end, &fit);
	if (p && fit == FIT_CARRIED) {
		/* bytes a span in flight only carries (it was handed over for
		 * other paths): the cache may hold them already (a span of an
		 * earlier batch went there), and then they are read from it
		 * now rather than a time to first byte later */
		disk_mutex_unlock(&st->lock);
		if (cachetier_obj_range_cached(o, off, len))
			return NULL;
		disk_mutex_lock(&st->lock);
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
				piece_wake(p, 0); /* need recomputed, nobody woken */
			}
			pthread_cond_destroy(&w.cond);
			clock_gettime(CLOCK_MONOTONIC, &t1);
			st->c.wait_ms_ns += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL +
						       (t1.tv_nsec - t0.tv_nsec));
		}
		if (*ok == 0)
			*ok = stage_ok(p, end);
	}
	disk_mutex_unlock(&st->lock);
	return p;
}

/* A read of [off, off + len) found p (stage_find): counted (served or a
 * fallback) and noted in its planned paths; unless kept (held by the
 * reply: stage_release), p's hold ends, and p goes once every path was
 * read and no read holds it. */
static void stage_end(struct fetch_stage *st, struct stage_piece *p, uint64_t off, size_t len,
		      int served, int keep)
{
	int gone;

	disk_mutex_lock(&st->lock);
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
		piece_unlink(st, p);
		pthread_cond_broadcast(&st->cond); /* room (stage_make_room) */
	} else
		piece_drop_buf(st, p);
	disk_mutex_unlock(&st->lock);
	if (gone)
		piece_free(p);
}

int fetch_stage_read(struct fetch *s, struct cachetier_obj *o, void *dst, size_t len, uint64_t off)
{
	struct fetch_stage *st = atomic_load(&s->stage);
	struct stage_piece *p;
	int ok;

	if (!st || !len)
		return 0;
	stage_reap(st);
	p = stage_find(st, o, off, len, &ok);
	if (!p)
		return 0;
	if (ok > 0)
		memcpy(dst, p->buf + (off - p->off), len);
	stage_end(st, p, off, len, ok > 0, 0);
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
	stage_reap(st);
	p = stage_find(st, o, off, len, &ok);
	if (!p)
		return 0;
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
	disk_mutex_lock(&st->lock);
	p->readers--;
	gone = (p->left == 0 || !p->plan) && p->readers == 0 && p->state != STAGE_INFLIGHT;
	if (gone) {
		piece_unlink(st, p);
		pthread_cond_broadcast(&st->cond); /* room (stage_make_room) */
	} else
		piece_drop_buf(st, p);
	disk_mutex_unlock(&st->lock);
	if (gone)
		piece_free(p);
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
	stage_reap(st);
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

		piece_free(freed);
		freed = nx;
	}
}

const void *fetch__stage_region(struct fetch *s, size_t *bytes)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	*bytes = st ? st->pool.pages * 4096u : 0;
	return st ? st->pool.base : NULL;
}

uint64_t fetch__stage_max(struct fetch *s)
{
	struct fetch_stage *st = atomic_load(&s->stage);

	return st ? st->max : 0;
}
