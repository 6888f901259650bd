/*
 * cachetier_batchm.c — batch reads into memory (cachetier_batch_read_mem,
 * contract in cachetier.h): the stage's GetBatch windows
 * (fetch/fetch_planner.c, fetch/fetch_stage.c). A window's spans that the
 * cache could keep only by evicting go to the stage's memory, as ranged
 * spans do, but fetched with the store's batch read (AIStore's GetBatch)
 * instead of a ranged GET each: nothing is written to the cache directory,
 * no unit is claimed, filled, evicted or punched.
 *
 * A window: items it[0..n), split by the caller into requests (stretches
 * [ends[g - 1], ends[g]) of the plan's order), each one GetBatch request
 * (a batch slot each: at most par requests of these and the batch fills
 * at once), read in parallel: submitted (backend_batch_read_submit), its
 * end told on the store's I/O thread (bm_read_done) and its slot given
 * back by the window thread (bm_slots), no thread waiting for it; a store
 * that cannot submit one has it on a reader thread of its own (bm_read,
 * as every request until 2026-12-03). Their
 * sinks (the store's I/O thread: no lock, no disk) copy each piece into
 * its item's buffer, in order. One window thread (bm_window) applies the
 * version rule to the whole window: one HEAD per HEAD group, an object's
 * items of the window (in a window of several requests, two groups: its
 * items of the first request, and its others: bm_new), sent once every
 * item of the group has begun (its first byte arrived) or settled
 * (failed, or its request ended without it); the HEAD's answer decides
 * every item of the group at once, and each is given to its caller
 * (progress then done, no lock held) once the HEAD is back and the item
 * itself settled (arrived whole or failed; until 2026-12-04 once every
 * item of its object had). So a window of k objects, j of them in its
 * first request when it has several, sends exactly k + j HEADs (fewer
 * when no item of a group began: none for it), whatever the timing; no
 * HEAD is shared with or waits for another
 * window's or a batch fill's. Each group's HEAD is submitted by the
 * window thread as soon as the group's items all began (bm_ask,
 * backend_head_follow_submit) and its end told on the store's I/O thread
 * (bm_headed): no object waits for another's HEAD, no thread waits for
 * one, and the HEAD's round trip overlaps the rest of its items' transfer
 * (until 2026-12-02 it went only once they had all arrived whole: an
 * object's HEAD then began one item's transfer later). Until 2026-12-03
 * each ran on a thread of its own (bm_head: now only where the store
 * cannot submit it, none sent ahead; without a thread the window thread
 * sends it itself): some 300 threads an epoch (tests/bench/README.md L9).
 *
 * A HEAD's two hops (AIStore's proxy answers an object's HEAD with a 307 to
 * its target, which answers it): the first goes with the window's requests
 * (backend_head_ahead, one per group), its redirect kept unfollowed; the
 * object's HEAD follows it (backend_head_follow_submit), so the HEAD on
 * the window's path costs the target's round trip only. The proxy's answer
 * is a redirect chosen by the object's name, none of its state: what the
 * rule below reads is the target's answer, sent when the window thread
 * asks for it, or when the proxy's answer comes if that is later (S
 * below). A group none of whose items began
 * drops its redirect unfollowed. Stores that answer a HEAD at once (no
 * redirect) get the whole HEAD at S, as before.
 *
 * Why an item given from memory is of the listed version (the stage's
 * argument for ranged spans is cachetier_memread.c's header: If-Match and
 * the answer's ETag; GetBatch has neither, nor a version per item in its
 * answer: AIStore's apc.MossOut has name, bucket, size and an error only,
 * its TAR headers name, size, mode and an access time, and no request
 * field asks for a version):
 *
 * - One item, one version. The target reads an item as it reads an
 *   object for a GET: it opens the object (its current version) and
 *   streams the item's bytes from that open; a replacement (a PUT writes
 *   a work file and renames it over the object) does not change what an
 *   open reads. That is the same property the ranged path's If-Match and
 *   the answer's ETag rely on (a GET's body is of one version), and the
 *   backend never resumes an item across answers (backend_ais_batch.c: a
 *   cut item is -EIO, its bytes dropped, "a resume could mix versions").
 *   So item j's bytes are of the version V_j the object had at O_j, when
 *   the target opened it for j.
 * - When the target opened it. O_j is before the target sent j's first
 *   byte, so before that byte arrived here (A_j: the sink, off == the
 *   item's off, sets begun[j] and only then counts j off its group's
 *   open tally). The group's HEAD is sent at S > A_j for every begun
 *   item j of the group (the window thread asks for it after the tally
 *   read zero; it goes then or at the proxy's answer, later), and the
 *   store answers it at H > S. So O_j < A_j < S < H for every item of
 *   the group whose bytes may be given (an item that did not begin has
 *   no bytes to give: it is refused). Which items make a group does not
 *   enter the argument: each item is given on a HEAD sent after it
 *   began.
 * - What the HEAD then proves. It says the ETag and size listed (V, the
 *   identity cachetier_obj_read_mem sends as If-Match) at H. Suppose some
 *   V_j were another version V'. The object was V at the listing, V' at
 *   O_j, V again at H: replaced and put back with the same ETag (the same
 *   bytes) between the listing and H. That ABA case is the one the rule
 *   cannot see, as before (a HEAD after the item's last byte sees exactly
 *   as much: a version cannot change under an open, so the bytes after
 *   the first add nothing to prove), and as the batch fills'
 *   (cachetier_batchv.c). Any other replacement before H (before the
 *   item was opened, or after it but before the HEAD) leaves another ETag
 *   (or none) at H: every item of the group is refused
 *   (-ESTALE) and its reads go the ordinary way, which gives the bytes or
 *   the errno they give without the stage. A replacement after H changes
 *   nothing already opened, so bytes still streaming are of V.
 * - What a HEAD before or during the item cannot prove: one answered at
 *   H < O_j says nothing about a replacement between H and O_j, and the
 *   client cannot know that H > O_j unless the HEAD was sent after A_j
 *   (a HEAD whose answer arrived after A_j may still have been answered
 *   before O_j). So the HEAD goes no earlier than this (cachetier/README.md,
 *   "Why the HEAD cannot go with or before the request").
 *
 * A buffer's bytes are never rewritten after they were given: the sink
 * takes each byte once, in order (off == next), and an item is given once,
 * once it settled (after its last byte) and its group's HEAD is back,
 * by the window thread alone. An item failed or cut (backend_batch_read's
 * err[i]), or whose HEAD failed, is refused with an errno; a request that
 * could not start (no slot, the tier stops, no thread) refuses its items.
 *
 * Threads and lifetime: the window thread is detached and counted in
 * ct->batch_windows, the requests in ct->batch_running (cachetier_close
 * waits for both: cachetier__batch_stop; a submitted request's slot is
 * given back by the window thread, which ends only after every request
 * ended); the window thread joins the
 * readers (if any) once every request ended and the caller started them all, and
 * the objects' HEAD threads (if any) once every object was given; the
 * window is freed by the last of that thread, the call and the submitted
 * requests' and HEADs' ends (bm_unref: each holds a reference until its
 * post). Each
 * item's object is referenced from the call until its done ran.
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cachetier_batch_i.h"

/* A HEAD group of the window: an object's items of the window, or, in a
 * window of several requests, its items of the first request and its items
 * of the others (two groups, a HEAD each: bm_new): its items not begun yet
 * (no byte arrived and not settled: the sink's and the readers' tally;
 * zero: its HEAD may go), its HEAD's answer, and where the window thread
 * is with it. */
struct bm_win;
struct bm_obj {
	struct ct_file *f;
	int first; /* the group of the object's items of the window's first request */
	atomic_uint open;
	atomic_int headed; /* its HEAD's end set v (and posted the window's arrive) */
	int v;		   /* the HEAD's answer: 0, -ESTALE, -EIO (written before headed) */
	int asked;	   /* the window thread: its HEAD sent (or no HEAD needed) */
	int given;	   /* the window thread: every item of it was given */
	int started;	   /* its HEAD thread runs (joined by the window thread) */
	pthread_t th;
	struct bm_win *w;
	unsigned heads, stale;	     /* its HEAD's counts, read once headed (and joined) */
	struct backend_objinfo info; /* the submitted HEAD's answer (bm_headed) */
	/* its HEAD's first hop, sent with the window's requests (NULL: none,
	 * the whole HEAD goes at its time): set by the caller before any
	 * request starts, taken by its HEAD thread */
	struct backend_head_ahead *ahead;
};

/* A request: items [a, b) of the window, submitted (its end told on the
 * store's I/O thread: bm_read_done) or on a reader thread. */
struct bm_rd {
	struct bm_win *w;
	size_t a, b;
	pthread_t th;
	int started;	/* its thread runs (joined by the window thread) */
	int submitted;	/* submitted: its slot given back by the window thread */
	atomic_int fin; /* submitted and ended (rd->ret set): bm_read_done's */
	int freed;	/* the window thread gave its slot back */
	int ret;	/* backend_batch_read's answer */
};

struct bm_win {
	struct cachetier *ct;
	size_t n, nobj, nreq;
	struct cachetier_batch_mem *it;	  /* the callers' items (a copy) */
	struct backend_batch_item *items; /* the store's items */
	int *err;			  /* backend_batch_read's per item */
	uint64_t *next;			  /* object offset of the next byte expected */
	uint8_t *whole;			  /* 1: arrived whole (the sink's) */
	uint8_t *begun;			  /* 1: its first byte arrived (the sink's) */
	atomic_uchar *settled;		  /* 1: arrived whole or failed (whole, ierr final) */
	uint8_t *given;			  /* 1: given to its caller (the window thread's) */
	int *ierr;			  /* an item not whole: its errno (its reader's) */
	size_t *obj;			  /* item -> window object */
	struct bm_obj *o;
	struct bm_rd *rd;
	sem_t arrive;	     /* posted at a group's items all begun or all settled, an item settled
			      * once its group's HEAD is back, a HEAD's end, each request's end,
			      * the launch */
	atomic_size_t ended; /* requests that ended (or never started) */
	atomic_int launched; /* the caller started or refused every request */
	atomic_int refs;     /* the window thread's and the caller's: the last frees */
	struct cachetier_batch_result res;
};

/* One item off an object's tally; the window thread told when it reaches
 * zero (the only count it acts on). */
static void bm_tally(struct bm_win *w, atomic_uint *t)
{
	if (atomic_fetch_sub_explicit(t, 1, memory_order_acq_rel) == 1)
		sem_post(&w->arrive);
}

/* Item j settled (whole, or w->ierr[j] set): marked, and the window thread
 * told if its group's HEAD is back (it gives the item now); else the
 * HEAD's end tells it. settled is stored before headed is loaded, as
 * headed is stored before the window thread loads settled (bm_verdict,
 * bm_ask; seq_cst both): one of the two sees the other. */
static void bm_item_settled(struct bm_win *w, size_t j)
{
	atomic_store(&w->settled[j], 1);
	if (atomic_load(&w->o[w->obj[j]].headed))
		sem_post(&w->arrive);
}

/* backend_batch_sink_cb, the store's I/O thread: item a + i's bytes at
 * off, copied into its buffer in order; an item's first byte counts it
 * off its group's tally of items not begun, its last settles it. */
static int bm_sink(void *arg, size_t i, uint64_t off, const void *buf, size_t len)
{
	struct bm_rd *rd = arg;
	struct bm_win *w = rd->w;
	size_t j = rd->a + i;
	uint64_t end;

	if (i >= rd->b - rd->a)
		return -EIO;
	end = w->it[j].off + w->it[j].len;
	if (off != w->next[j] || len > end - off)
		return -EIO; /* each byte once, in order */
	memcpy((char *)w->it[j].buf + (off - w->it[j].off), buf, len);
	if (off == w->it[j].off) { /* the target opened the item's version before this */
		w->begun[j] = 1;
		bm_tally(w, &w->o[w->obj[j]].open);
	}
	w->next[j] += len;
	if (w->next[j] == end) {
		w->whole[j] = 1;
		bm_item_settled(w, j);
	}
	return 0;
}

/* Items [a, b) that did not come whole are settled with err (or their
 * own errno), those not begun counted off their groups' tallies. */
static void bm_settle(struct bm_win *w, size_t a, size_t b, int ret)
{
	for (size_t j = a; j < b; j++) {
		int e = w->err[j];

		if (w->whole[j])
			continue;
		if (ret == -EOPNOTSUPP || ret == -ENOMEM || e == 0)
			e = ret < 0 ? ret : -EIO;
		w->ierr[j] = e;
		bm_item_settled(w, j);
		if (!w->begun[j])
			bm_tally(w, &w->o[w->obj[j]].open);
	}
}

/* A request's end (its answer ret): its slot given back. ct->lock not
 * held; its reader thread, or the window thread for a submitted one. */
static void bm_slot_free(struct cachetier *ct, int ret)
{
	cachetier__lock(ct);
	if (ret == -EOPNOTSUPP)
		ct->batch.refused = 1;
	else if (ret == 0)
		ct->batch_answered = 1;
	ct->batch_running--;
	pthread_cond_broadcast(&ct->unit_cond); /* a slot is free */
	disk_mutex_unlock(&ct->lock);
}

/* A request of the window, on its reader thread: the answer read, its
 * items not whole settled, its slot given back. */
static void *bm_read(void *arg)
{
	struct bm_rd *rd = arg;
	struct bm_win *w = rd->w;
	struct cachetier *ct = w->ct;

	CT_OFF_LOOP();
	rd->ret = backend_batch_read(ct->be, w->items + rd->a, rd->b - rd->a, bm_sink, rd,
				     w->err + rd->a);
	bm_settle(w, rd->a, rd->b, rd->ret);
	bm_slot_free(ct, rd->ret);
	atomic_fetch_add_explicit(&w->ended, 1, memory_order_acq_rel);
	sem_post(&w->arrive);
	return NULL;
}

/* The window freed by the last of its thread, its caller (the caller posts
 * the launch after setting it: the thread may end before that) and its
 * submitted requests and HEADs (bm_read_done and bm_headed post after
 * what the thread reads: it may end before that too). */
static void bm_unref(struct bm_win *w)
{
	if (atomic_fetch_sub_explicit(&w->refs, 1, memory_order_acq_rel) != 1)
		return;
	sem_destroy(&w->arrive);
	free(w);
}

/* A submitted request ended (backend_batch_read_submit's done: the store's
 * I/O thread, no lock, nothing blocks): its items not whole settled, the
 * window thread told (it gives the slot back: ct->lock is not taken
 * here). The request holds a reference to the window, dropped last. */
static void bm_read_done(void *arg, int ret)
{
	struct bm_rd *rd = arg;
	struct bm_win *w = rd->w;

	rd->ret = ret;
	bm_settle(w, rd->a, rd->b, ret);
	atomic_store_explicit(&rd->fin, 1, memory_order_release);
	atomic_fetch_add_explicit(&w->ended, 1, memory_order_acq_rel);
	sem_post(&w->arrive);
	bm_unref(w);
}

/* The slots of submitted requests that ended given back. The window
 * thread. */
static void bm_slots(struct bm_win *w)
{
	for (size_t g = 0; g < w->nreq; g++) {
		struct bm_rd *rd = &w->rd[g];

		if (!rd->freed && atomic_load_explicit(&rd->fin, memory_order_acquire)) {
			rd->freed = 1;
			bm_slot_free(w->ct, rd->ret);
		}
	}
}

/* Object o's HEAD answered herr, info: its verdict in o->v (and counts),
 * then o headed. Whoever ended the HEAD; no lock held. */
static void bm_verdict(struct bm_obj *o, int herr, const struct backend_objinfo *info)
{
	int v = 0;

	o->heads = 1;
	if (herr < 0 && herr != -ENOENT)
		v = -EIO;
	else if (herr == -ENOENT || !backend_version_same(info->etag, info->size, info->mtime,
							  o->f->etag, o->f->size, o->f->mtime))
		v = -ESTALE;
	o->stale = v == -ESTALE;
	o->v = v;
	atomic_store(&o->headed, 1); /* seq_cst: bm_item_settled */
}

/* Object o's HEAD submitted (backend_head_follow_submit) ended: on the
 * store's I/O thread (no lock, nothing blocks), the window thread told.
 * The HEAD holds a reference to the window (the window thread may see o
 * headed and end before this post): dropped last. */
static void bm_headed(void *arg, int err)
{
	struct bm_obj *o = arg;
	struct bm_win *w = o->w;

	bm_verdict(o, err, &o->info);
	sem_post(&w->arrive);
	bm_unref(w);
}

/* Object o of its window, every item of which has begun: its HEAD (the
 * store without a submitted one, or none sent ahead), its answer in o->v;
 * then the window thread told. Its HEAD thread (or the window thread);
 * no lock held. */
static void *bm_head(void *arg)
{
	struct bm_obj *o = arg;
	struct bm_win *w = o->w;
	struct backend_objinfo info;
	int herr;

	CT_OFF_LOOP();
	memset(&info, 0, sizeof(info));
	herr = backend_head_follow(w->ct->be, o->ahead, o->f->key, &info);
	o->ahead = NULL;
	bm_verdict(o, herr, &info);
	sem_post(&w->arrive);
	return NULL;
}

/* Object x's HEAD, once every item of it began (its first byte arrived:
 * the target opened its version) or settled: none when no item began (its
 * redirect dropped); else the target's HEAD of the redirect asked with the
 * requests (the proxy's answer names the target, nothing of the object),
 * the one whose answer counts, sent only now: submitted, its end told on
 * the store's I/O thread (bm_headed), so no thread waits for it; a store
 * that cannot submit it (none sent ahead: an endpoint that answers HEADs
 * itself) has it on a HEAD thread of its own (bm_head), so that no object
 * waits for another's (without a thread, here). The window thread. */
static void bm_ask(struct bm_win *w, size_t x)
{
	struct bm_obj *o = &w->o[x];
	struct backend_head_ahead *h = o->ahead;
	int any = 0;

	o->asked = 1;
	o->w = w;
	for (size_t j = 0; j < w->n && !any; j++)
		any = w->obj[j] == x && w->begun[j];
	if (!any) {
		o->ahead = NULL;
		backend_head_drop_nowait(w->ct->be, h); /* no item began: no HEAD */
		o->v = 0;
		atomic_store(&o->headed, 1); /* seq_cst: bm_item_settled */
		return;
	}
	atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed); /* bm_headed's */
	if (h) {
		int err;

		o->ahead = NULL;
		err = backend_head_follow_submit(w->ct->be, h, o->f->key, &o->info, bm_headed, o);
		if (err == 0)
			return;
		o->ahead = h; /* the store cannot: followed by bm_head */
	}
	atomic_fetch_sub_explicit(&w->refs, 1, memory_order_relaxed); /* (ours stays) */
	o->started = cachetier__batch_thread(w->ct, &o->th, 0, bm_head, o) == 0;
	if (!o->started)
		bm_head(o);
}

/* Group o's items that settled and were not given yet, given, its HEAD
 * being back: each its bytes (the HEAD, sent after it began, confirmed
 * the listed version) or its refusal; each item once, as soon as it
 * settled (until 2026-12-04 only once every item of its object in the
 * window had: a reader of the window's first item waited for the answers'
 * last items of its object). Returns the group's items not given yet. The
 * window thread; no lock held. */
static size_t bm_give(struct bm_win *w, struct bm_obj *o)
{
	size_t x = (size_t)(o - w->o), left = 0;

	for (size_t j = 0; j < w->n; j++) {
		const struct cachetier_batch_mem *it = &w->it[j];

		if (w->obj[j] != x || w->given[j])
			continue;
		if (!atomic_load(&w->settled[j])) { /* seq_cst: bm_item_settled */
			left++;
			continue;
		}
		w->given[j] = 1;
		if (!w->whole[j]) {
			it->done(it->arg, w->ierr[j]);
		} else if (o->v == 0) {
			if (it->progress)
				it->progress(it->arg, it->off + it->len);
			it->done(it->arg, 0);
		} else {
			it->done(it->arg, o->v);
		}
	}
	return left;
}

/* Groups whose items all began get their HEAD (bm_ask); the items of
 * groups whose HEAD is back are given as they settle. Returns the groups
 * not wholly given yet. The window thread. */
static size_t bm_decide(struct bm_win *w)
{
	size_t left = 0;

	for (size_t x = 0; x < w->nobj; x++) {
		struct bm_obj *o = &w->o[x];

		if (!o->asked && !atomic_load_explicit(&o->open, memory_order_acquire))
			bm_ask(w, x);
		if (!o->given && o->asked && atomic_load(&o->headed))
			o->given = bm_give(w, o) == 0;
		left += !o->given;
	}
	return left;
}

/* The window: each object's HEAD sent once its items began, its items
 * given once they settled and the HEAD is back; at the end (every request
 * ended, all started, every object given) the readers joined, the counts
 * added, the objects released, the window freed. */
static void *bm_window(void *arg)
{
	struct bm_win *w = arg;
	struct cachetier *ct = w->ct;

	CT_OFF_LOOP();
	for (;;) {
		int last;

		while (sem_wait(&w->arrive) < 0 && errno == EINTR)
			;
		while (sem_trywait(&w->arrive) == 0)
			; /* one look at all that came so far */
		last = atomic_load_explicit(&w->launched, memory_order_acquire) &&
		       atomic_load_explicit(&w->ended, memory_order_acquire) == w->nreq;
		bm_slots(w);
		if (bm_decide(w) == 0 && last)
			break;
	}
	for (size_t g = 0; g < w->nreq; g++) {
		struct bm_rd *rd = &w->rd[g];

		if (rd->started)
			pthread_join(rd->th, NULL);
		if ((rd->started || rd->submitted) && rd->ret != -EOPNOTSUPP &&
		    rd->ret != -ENOMEM) {
			w->res.requests++;
			w->res.items += rd->b - rd->a;
		}
		for (size_t j = rd->a; j < rd->b; j++)
			w->res.failed += !w->whole[j] && w->ierr[j] != -EOPNOTSUPP &&
					 w->ierr[j] != -ECANCELED && w->ierr[j] != -EAGAIN;
	}
	for (size_t x = 0; x < w->nobj; x++) {
		int counted = 0; /* stale: an object once, whatever its groups */

		if (w->o[x].started)
			pthread_join(w->o[x].th, NULL);
		w->res.heads += w->o[x].heads;
		for (size_t y = 0; y < x; y++)
			counted |= w->o[y].f == w->o[x].f && w->o[y].stale;
		w->res.stale += w->o[x].stale && !counted;
	}
	for (size_t j = 0; j < w->n; j++)
		cachetier_obj_unref(w->it[j].o);
	cachetier__lock(ct);
	ct->batch.requests += w->res.requests;
	ct->batch.items += w->res.items;
	ct->batch.failed += w->res.failed;
	ct->batch.stale += w->res.stale;
	ct->batch.heads += w->res.heads;
	ct->batch_windows--;
	pthread_cond_broadcast(&ct->unit_cond); /* cachetier__batch_stop */
	disk_mutex_unlock(&ct->lock);
	bm_unref(w);
	return NULL;
}

/* The window's arrays in one block after it; its HEAD groups: an object's
 * items, or, when first > 0 (the window's first request is items [0,
 * first) and others follow), its items of the first request and its
 * others, two groups: the first request's HEAD then goes once its own
 * items began, not once the object's items of every request did (the
 * requests run at once, each streams its items in order: an object's last
 * item of the window begins near the requests' ends), so the items the
 * reader reaches first are given that much sooner, for at most one HEAD
 * more an object of the first request. NULL: no memory. */
static struct bm_win *bm_new(const struct cachetier_batch_mem *it, size_t n, size_t nreq,
			     size_t first)
{
	const size_t al = _Alignof(max_align_t);
	struct bm_win *w;
	size_t sz[13] = {sizeof(*w),
			 n * sizeof(*w->it),
			 n * sizeof(*w->items),
			 n * sizeof(*w->err),
			 n * sizeof(*w->next),
			 n * sizeof(*w->whole),
			 n * sizeof(*w->ierr),
			 n * sizeof(*w->obj),
			 n * sizeof(*w->o),
			 nreq * sizeof(*w->rd),
			 n * sizeof(*w->begun),
			 n * sizeof(*w->settled),
			 n * sizeof(*w->given)};
	size_t at[13], total = 0;
	char *p;

	for (int k = 0; k < 13; k++) {
		at[k] = total;
		total += (sz[k] + al - 1) / al * al;
	}
	p = calloc(1, total);
	if (!p)
		return NULL;
	w = (struct bm_win *)(void *)p;
	w->it = (void *)(p + at[1]);
	w->items = (void *)(p + at[2]);
	w->err = (void *)(p + at[3]);
	w->next = (void *)(p + at[4]);
	w->whole = (void *)(p + at[5]);
	w->ierr = (void *)(p + at[6]);
	w->obj = (void *)(p + at[7]);
	w->o = (void *)(p + at[8]);
	w->rd = (void *)(p + at[9]);
	w->begun = (void *)(p + at[10]);
	w->settled = (void *)(p + at[11]);
	w->given = (void *)(p + at[12]);
	w->n = n;
	w->nreq = nreq;
	memcpy(w->it, it, n * sizeof(*it));
	for (size_t j = 0; j < n; j++) {
		struct ct_file *f = it[j].o->file;
		int one = j < first;
		size_t x = 0;

		while (x < w->nobj && (w->o[x].f != f || w->o[x].first != one))
			x++;
		if (x == w->nobj) {
			w->o[w->nobj].f = f;
			w->o[w->nobj].first = one;
			atomic_init(&w->o[w->nobj].open, 0);
			atomic_init(&w->o[w->nobj].headed, 0);
			w->nobj++;
		}
		atomic_fetch_add_explicit(&w->o[x].open, 1, memory_order_relaxed);
		w->obj[j] = x;
		atomic_init(&w->settled[j], 0);
		w->next[j] = it[j].off;
		w->items[j].key = f->key;
		w->items[j].off = it[j].off;
		w->items[j].len = it[j].len;
	}
	for (size_t g = 0; g < nreq; g++)
		atomic_init(&w->rd[g].fin, 0);
	atomic_init(&w->ended, 0);
	atomic_init(&w->launched, 0);
	atomic_init(&w->refs, 2);
	return w;
}

int cachetier_batch_read_mem(struct cachetier *ct, const struct cachetier_batch_mem *it, size_t n,
			     const size_t *ends, size_t nreq, unsigned par)
{
	struct bm_win *w;
	pthread_t th;
	int started = 0, refused = 0;

	par = par ? par : 1;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		const struct cachetier_obj *o = it[i].o;

		if (!o || !o->file || !cachetier_obj_can_read_mem(o) || it[i].len == 0 ||
		    it[i].off > o->size || it[i].len > o->size - it[i].off || !it[i].done)
			return -EINVAL;
	}
	for (size_t g = 0; g < nreq; g++) {
		if (ends[g] > n || (g > 0 && ends[g] <= ends[g - 1]) || (g == 0 && ends[0] == 0))
			return -EINVAL;
	}
	if (nreq == 0 || ends[nreq - 1] != n)
		return -EINVAL;
	w = bm_new(it, n, nreq, nreq > 1 ? ends[0] : 0);
	if (!w)
		return -ENOMEM;
	w->ct = ct;
	if (sem_init(&w->arrive, 0, 0) < 0) {
		free(w);
		return -ENOMEM;
	}
	cachetier__lock(ct);
	if (ct->stopping) {
		disk_mutex_unlock(&ct->lock);
		sem_destroy(&w->arrive);
		free(w);
		return -ECANCELED;
	}
	ct->batch_windows++;
	disk_mutex_unlock(&ct->lock);
	started = cachetier__batch_thread(ct, &th, 1, bm_window, w) == 0;
	if (!started) {
		cachetier__lock(ct);
		ct->batch_windows--;
		pthread_cond_broadcast(&ct->unit_cond);
		disk_mutex_unlock(&ct->lock);
		sem_destroy(&w->arrive);
		free(w);
		return -ENOMEM;
	}
	/* from here on the window thread owns w and ends every item */
	for (size_t i = 0; i < n; i++)
		cachetier_obj_ref(it[i].o);
	/* each object's HEAD's first hop (the proxy's 307 to its target) now,
	 * beside the requests' own: its HEAD, once its items began, then costs
	 * the target's round trip only (no object is asked before a request
	 * started: the window thread reads o->ahead after a request's post) */
	for (size_t x = 0; x < w->nobj; x++)
		w->o[x].ahead = backend_head_ahead(ct->be, w->o[x].f->key);
	for (size_t g = 0; g < nreq; g++) {
		struct bm_rd *rd = &w->rd[g];
		int ret;

		rd->w = w;
		rd->a = g ? ends[g - 1] : 0;
		rd->b = ends[g];
		ret = cachetier__batch_slot(ct, par); /* as a batch fill's request takes one */
		if (ret == 0) {
			/* submitted: no thread waits for it (the store's I/O
			 * thread ends it); a store that cannot has a reader */
			atomic_fetch_add_explicit(&w->refs, 1, memory_order_relaxed);
			rd->submitted = 1; /* (read by the window thread after its fin) */
			if (backend_batch_read_submit(ct->be, w->items + rd->a, rd->b - rd->a,
						      bm_sink, rd, w->err + rd->a, bm_read_done,
						      rd) == 0)
				continue;
			rd->submitted = 0;
			atomic_fetch_sub_explicit(&w->refs, 1, memory_order_relaxed);
			rd->started = cachetier__batch_thread(ct, &rd->th, 0, bm_read, rd) == 0;
			if (!rd->started) {
				ret = -EAGAIN;
				cachetier__lock(ct);
				ct->batch_running--;
				pthread_cond_broadcast(&ct->unit_cond);
				disk_mutex_unlock(&ct->lock);
			}
		}
		if (ret < 0) { /* never sent: its items refused */
			refused |= ret == -EOPNOTSUPP;
			bm_settle(w, rd->a, rd->b, ret);
			atomic_fetch_add_explicit(&w->ended, 1, memory_order_acq_rel);
			sem_post(&w->arrive);
		}
	}
	atomic_store_explicit(&w->launched, 1, memory_order_release);
	sem_post(&w->arrive);
	bm_unref(w); /* w may be freed from here on */
	return refused ? -EOPNOTSUPP : 0;
}
