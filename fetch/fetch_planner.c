/*
 * fetch_planner.c — fetching ahead along the reading plans (fetch.h:
 * fetch_planner_*; the plans are the core's, fs/core/fs_plan.c): a
 * shuffled epoch over a remote dataset larger than the cache misses on
 * nearly every sample, and each miss waits a round trip; a reader that
 * published its order (fs_plan.c) gets its samples fetched before it asks,
 * at the rate of every connection instead of one round trip per sample.
 *
 * One thread, the core's (fs/core/fs_plan_fetch.c: fs_plan.c's listener
 * hook wakes it at every publish, clear and read of a planned path, once
 * the read's reply is sent and the cache units it pinned are released:
 * fs_plan_wake); at each wake it calls fetch_planner_pass, which looks at
 * each plan: from the plan's position (1 + the furthest planned path read) on,
 * the extents not read
 * yet, in plan order, are handed to the cache tier as range prefetches
 * (cachetier_obj_prefetch_range, CACHETIER_PF_EVICT: they may evict what
 * was read, never what was fetched ahead and not read yet) until the
 * bytes from the position to the last extent handed over reach the
 * plan's share of the lookahead. The cache tier fetches ranges in the
 * order given, after demand and readahead fills, one request per chunk a
 * range lies in, and skips units that are there already; a reader that
 * reaches an extent first fills it on demand.
 *
 * Requests shaped by the plan: unless the gap is 0 (--plan-gap 0), the
 * extents go in batches (the next once the reader is half-way through the
 * last, a staged plan's once it read a quarter of what is ahead: s->mark,
 * pfx_mark), and within a batch extents of one object at most the
 * gap apart go as one span with the bytes between them
 * (cachetier_obj_prefetch_span: those bytes are evicted first while no
 * plan names them), the smallest gaps first while the bytes between stay
 * within a quarter of the batch's planned bytes (PFX_GAP_SHARE), a span
 * at most one gap long, spans in the order of their first extent. The gap (pfx_gap): the rate of a
 * connection x its time to first byte as the cache tier measured them on
 * its fills (the bytes between cost less than another request),
 * --plan-gap until then, at most a chunk.
 *
 * AIStore (ais:// sources, --get-batch auto): a batch goes to the cache
 * tier as one window fetched with GetBatch (pfx_getbatch,
 * fetch_batch_fill) instead of spans; this thread waits while every
 * connection but two has a GetBatch request in flight, and for the first
 * window until it was answered. A store that refuses GetBatch gets spans
 * from then on.
 *
 * The lookahead (fetch_plan_lookahead, fetch/fetch_plan.c, sized when a plan's batch is due): as
 * far ahead as the link needs to keep every connection busy, within what
 * the cache can hold ahead of the readers, at most --plan-lookahead:
 *   link:    FETCH_PLAN_SAFETY (4) x connections x (rate x ttfb + sample) /
 *            plans, with the rate of a connection and its time to first
 *            byte as the cache tier measured them (fetch_link_get, fetch_link.c),
 *            --plan-gap for rate x ttfb until both are measured (the
 *            floor), the plan's mean planned path as the sample, and the
 *            connections planned ranges may use (pfx_connections:
 *            --max-connections, or --connections when larger);
 *   cache:   (min(--cache-size - bytes readers pin, what fills ahead may
 *            hold in a full cache: half of it) - the cache bytes the plans
 *            hold ahead of their readers besides this plan's lookahead:
 *            the other plans' paths handed over and not read, and each
 *            plan's paths behind its position not read yet, at most half
 *            its lookahead) x sample / (sample + unit): a planned path
 *            costs its whole units (cachetier_held_get), and a prefetch
 *            fill past that half evicts nothing and is skipped;
 *   ceiling: --plan-lookahead / plans.
 * The least of the three, each plan's own; plan_lookahead_bytes is their
 * sum. So what is fetched ahead fits in the cache beside what readers
 * read meanwhile and is not evicted before its reader gets there (the
 * cache evicts what the plans read first, and a planned unit only for one
 * needed sooner: cachetier_plan.c). Bytes between planned extents fetched
 * with them are not counted (they go first when room is needed), nor
 * readahead and prefetches of readers outside the plans, nor other
 * processes sharing the directory: their fills ahead share the half, and
 * a fill that does not fit is skipped (its reader fills it on demand). A
 * plan's members of compressed shards are fetched as whole objects
 * (decoding reads from the start).
 *
 * Non-goals: local sources (their files are read in place); ordering
 * between plans (each has its share; the cache tier serves ranges in the
 * order handed over, so plans interleave at the pace of their readers).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fetch_i.h"

/* Extents looked at per call of the plans' ahead (fetch_plans_src). */
#define PFX_BATCH 64u

/* What the fetcher knows of one plan: the plan (a reference held), the
 * index of the next extent to hand over and how much of it was handed
 * over already (the lookahead's end cut it), and
 * the position at which the next batch is due (mark). */
struct pfx_plan {
	void *p;
	uint32_t next;
	uint64_t part;
	uint32_t mark;
	uint64_t la; /* its lookahead at its last batch (fetch_plan_lookahead) */
	int stages;  /* ... bounded by the stage, its paths whole (pfx_stages) */
};

/* A piece of a batch: bytes [from, to) of planned extent idx (x), and
 * what they cost in the store's object: [off, off + len) (with the tar
 * header of a first piece). */
struct pfx_piece {
	struct fetch_plan_extent x;
	uint32_t idx;
	uint64_t from, to;
	uint64_t off, len;
};

/* A span: pieces [a, b) of the batch sorted by (object, offset), fetched
 * as one range; first: the lowest plan index among them. */
struct pfx_span {
	uint32_t a, b, first;
	uint64_t off, end;
	struct cachetier_obj *raw; /* its object in the cache tier; NULL: cannot open */
	int store;		   /* pfx_dest: the rule gives it to the store, not the stage */
};

/* The fetcher's scratch, grown as batches need (its thread only). */
struct pfx_buf {
	struct pfx_piece *pc, *sorted;
	struct pfx_span *sp;
	struct cachetier_piece *cp;
	uint64_t *gaps, *cand; /* pfx_spans: per sorted piece, the gap after it */
	size_t n, cap;
};

/* The plan fetcher (fetch.h): what the core gave it, what it knows of each
 * plan since its last pass, its scratch. Only the calling thread touches
 * it (the core's plan fetcher thread), but for batch_refused. */
struct fetch_planner {
	struct fetch *s; /* its link (fetch_link_get) */
	struct cachetier *ct;
	struct fetch_plans_src src;
	struct fetch_plan_config cfg;
	struct fetch_plan_counters *c;
	struct pfx_plan st[FETCH_PLANS_MAX];
	size_t nst;
	struct pfx_buf b;
	atomic_int batch_refused; /* the store refused GetBatch: spans from now on */
	int weak_said;		  /* src.stage_weak called */
};

/* Hand bytes [from, to) of extent x to the cache tier (all of a
 * compressed shard's at from 0: decoding needs the whole object). */
static void pfx_issue(struct fetch_planner *pl, struct cachetier_obj *raw,
		      const struct fetch_plan_extent *x, uint64_t from, uint64_t to)
{
	int err;

	if (x->flags & FETCH_PLAN_DECODED) {
		if (from > 0)
			return;
		err = cachetier_obj_prefetch(raw, CACHETIER_PF_EVICT);
		to = x->len;
	} else {
		/* the header with the first piece (FETCH_PLAN_HEADER) */
		uint64_t hdr = from == 0 && (x->flags & FETCH_PLAN_HEADER) ? 512 : 0;

		err = cachetier_obj_prefetch_range(raw, x->off + from - hdr, to - from + hdr,
						   CACHETIER_PF_EVICT);
	}
	if (err < 0)
		return; /* the object changed size (a refresh) or no memory: a reader fetches it */
	pl->c->ranges++;
	if (from == 0)
		pl->c->paths++;
	pl->c->bytes += to - from;
}

/* The largest gap between planned extents of one object worth fetching
 * with them: what one connection moves in one time to first byte (another
 * request would cost that time), as the cache tier measured its fills;
 * --plan-gap until it has; at most a chunk (the cache tier's largest
 * request); 0 when --plan-gap is 0. */
static uint64_t pfx_gap(struct fetch_planner *pl)
{
	struct fetch_link l;
	uint64_t gap = pl->cfg.gap;

	if (gap == 0)
		return 0;
	fetch_link_get(pl->s, &l);
	if (l.rate > 0 && l.ttfb_ns > 0)
		gap = (uint64_t)((double)l.rate * (double)l.ttfb_ns / 1e9);
	if (gap > pl->cfg.chunk)
		gap = pl->cfg.chunk;
	pl->c->gap = gap;
	return gap;
}

static int piece_cmp(const void *a, const void *b)
{
	const struct pfx_piece *x = a, *y = b;

	if (x->x.obj != y->x.obj)
		return x->x.obj < y->x.obj ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int span_cmp(const void *a, const void *b)
{
	const struct pfx_span *x = a, *y = b;

	return x->first < y->first ? -1 : x->first > y->first;
}

/* Bytes between planned extents fetched with them: at most a quarter of
 * the batch's planned bytes. The smallest gaps go first (the most requests
 * saved per byte), so a plan over a cache much smaller than its data (where
 * such bytes are evicted before a later extent could use them) fetches at
 * most 1.25 x the units it needs, not the whole objects again and again
 * (tests/bench/link_bench.py L7 with every gap up to the threshold taken:
 * 6.4 x the bytes read). */
#define PFX_GAP_SHARE 4u

static int gap_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return *x < *y ? -1 : *x > *y;
}

/* Sort the batch's pieces by (object, offset) into b->sorted and group
 * them into spans in b->sp: pieces of one object that overlap or touch
 * always (staged: while the span stays within gap bytes or they add no
 * byte to it), and across gaps
 * of at most gap bytes, smallest gaps first, while the gaps taken stay
 * within a PFX_GAP_SHARE-th of the pieces' bytes and a span within gap
 * bytes (a reader waits for a fill's last byte: a longer span would delay
 * its first sample by more than a time to first byte; a staged read waits
 * for its own bytes only, which lie at most gap bytes into the span: one
 * time to first byte of body). Returns the spans' count. */
static size_t pfx_spans(struct pfx_buf *b, uint64_t gap, int staged)
{
	size_t k = b->n, ns = 0, ng = 0;
	uint64_t allow = 0, run = 0, thr = 0;

	memcpy(b->sorted, b->pc, k * sizeof(*b->pc));
	qsort(b->sorted, k, sizeof(*b->sorted), piece_cmp);
	/* gaps[i]: bytes from the end of pieces [.., i] of its object to piece
	 * i + 1 (UINT64_MAX: another object) */
	for (size_t i = 0; i < k; i++) {
		allow += b->sorted[i].len;
		uint64_t e = b->sorted[i].off + b->sorted[i].len;

		if (i == 0 || b->sorted[i].x.obj != b->sorted[i - 1].x.obj || e > run)
			run = e;
		if (i + 1 < k) {
			const struct pfx_piece *nx = &b->sorted[i + 1];

			b->gaps[i] = nx->x.obj != b->sorted[i].x.obj ? UINT64_MAX
				     : nx->off > run		     ? nx->off - run
								     : 0;
			if (b->gaps[i] > 0 && b->gaps[i] <= gap)
				b->cand[ng++] = b->gaps[i];
		}
	}
	/* the largest gap taken: the smallest ones while they fit the allowance */
	allow /= PFX_GAP_SHARE;
	qsort(b->cand, ng, sizeof(*b->cand), gap_cmp);
	for (size_t i = 0; i < ng && b->cand[i] <= allow; i++) {
		allow -= b->cand[i];
		thr = b->cand[i];
	}
	for (size_t i = 0; i < k;) {
		struct pfx_span *sp = &b->sp[ns++];
		size_t j = i;

		sp->a = (uint32_t)i;
		sp->first = b->sorted[i].idx;
		sp->off = b->sorted[i].off;
		sp->end = b->sorted[i].off + b->sorted[i].len;
		/* (gaps equal to the largest taken go too) */
		while (j + 1 < k && b->gaps[j] != UINT64_MAX && b->gaps[j] <= thr &&
		       ((b->gaps[j] == 0 &&
			 (!staged || b->sorted[j + 1].off + b->sorted[j + 1].len <= sp->end)) ||
			b->sorted[j + 1].off + b->sorted[j + 1].len - sp->off <= gap)) {
			j++;
			if (b->sorted[j].off + b->sorted[j].len > sp->end)
				sp->end = b->sorted[j].off + b->sorted[j].len;
			if (b->sorted[j].idx < sp->first)
				sp->first = b->sorted[j].idx;
		}
		sp->b = (uint32_t)(j + 1);
		i = j + 1;
	}
	return ns;
}

/* Hand span sp of the batch (b->sorted) to the cache tier: one piece as a
 * range, more as a span whose gaps are fetched with them. */
static void pfx_span_issue(struct fetch_planner *pl, struct pfx_buf *b, const struct pfx_span *sp)
{
	const struct pfx_piece *pc = &b->sorted[sp->a];
	struct cachetier_obj *raw = sp->raw;
	uint64_t covered = 0, at = sp->off;
	size_t n = sp->b - sp->a;

	if (!raw)
		return; /* logged */
	if (n == 1) {
		pfx_issue(pl, raw, &pc->x, pc->from, pc->to);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		b->cp[i].off = pc[i].off;
		b->cp[i].len = pc[i].len;
		/* bytes the pieces cover, overlaps once */
		if (pc[i].off + pc[i].len > at) {
			uint64_t lo = pc[i].off > at ? pc[i].off : at;

			covered += pc[i].off + pc[i].len - lo;
			at = pc[i].off + pc[i].len;
		}
	}
	if (cachetier_obj_prefetch_span(raw, b->cp, n, CACHETIER_PF_EVICT) < 0)
		return; /* the object changed size (a refresh) or no memory: readers fetch */
	pl->c->ranges++;
	pl->c->gap_bytes += sp->end - sp->off - covered;
	for (size_t i = 0; i < n; i++) {
		if (pc[i].from == 0)
			pl->c->paths++;
		pl->c->bytes += pc[i].to - pc[i].from;
	}
}

/* Count span sp of the batch (b->sorted) as handed over: one range, its
 * paths and bytes, the bytes between its pieces. */
static void pfx_span_count(struct fetch_planner *pl, const struct pfx_buf *b,
			   const struct pfx_span *sp)
{
	const struct pfx_piece *pc = &b->sorted[sp->a];
	uint64_t covered = 0, at = sp->off;

	for (size_t i = 0; i < sp->b - sp->a; i++) {
		if (pc[i].off + pc[i].len > at) {
			uint64_t lo = pc[i].off > at ? pc[i].off : at;

			covered += pc[i].off + pc[i].len - lo;
			at = pc[i].off + pc[i].len;
		}
		if (pc[i].from == 0)
			pl->c->paths++;
		pl->c->bytes += pc[i].to - pc[i].from;
	}
	pl->c->ranges++;
	pl->c->gap_bytes += sp->end - sp->off - covered;
}

/* Whether plan s's next batch is the stage's: a stage, and the object of
 * its next unread extent one the store can read into memory (remote, not
 * decoded, an ETag that pins its bytes: cachetier_obj_can_read_mem). A
 * plan of objects that cannot be staged plans as without a stage: the
 * cache's lookahead, paths cut at its end. So does every plan with
 * --plan-gap 0: its extents go to the cache one by one (pfx_plan), never
 * to the stage, so the stage's bound must not size what the cache holds. */
static int pfx_stages(struct fetch_planner *pl, const struct pfx_plan *s)
{
	struct fetch_plan_extent x;
	struct cachetier_obj *raw;
	uint32_t idx, from = s->next;

	if (pl->cfg.gap == 0 || fetch__stage_max(pl->s) == 0 ||
	    pl->src.ahead(s->p, &from, &x, &idx, 1) != 1 || (x.flags & FETCH_PLAN_DECODED) ||
	    pl->src.raw(pl->src.ctx, x.obj, &raw) < 0)
		return 0;
	return cachetier_obj_can_read_mem(raw);
}

/* What the store said of an object's read into memory: can
 * (cachetier_obj_can_read_mem), else weak (cachetier_obj_mem_weak). Both
 * are the object's alone (its ETag, its kind), so a batch asks once an
 * object (pfx_dest: PFX_MEMABLE objects remembered), not once a span: an
 * ask looks at the ETag, some 1,100 instructions. */
#define PFX_MEMABLE 8u
struct pfx_memable {
	const struct cachetier_obj *raw;
	int can, weak;
};

/* Whether span sp's object can be read into memory (cachetier_obj_can_read_mem):
 * the store's read, which the stage needs. One refused for a weak ETag alone
 * is counted, the first said (the stage is on by default: over nginx it
 * stages nothing). seen, *nseen: the batch's answers so far (NULL: ask). */
static int pfx_span_memable_in(struct fetch_planner *pl, const struct pfx_buf *b,
			       const struct pfx_span *sp, struct pfx_memable *seen, size_t *nseen)
{
	struct pfx_memable m = {sp->raw, 0, 0};
	size_t i = 0;

	if (!sp->raw)
		return 0;
	while (seen && i < *nseen && seen[i].raw != sp->raw)
		i++;
	if (seen && i < *nseen) {
		m = seen[i];
	} else {
		m.can = cachetier_obj_can_read_mem(sp->raw);
		m.weak = !m.can && cachetier_obj_mem_weak(sp->raw);
		if (seen && *nseen < PFX_MEMABLE)
			seen[(*nseen)++] = m;
	}
	if (m.can)
		return 1;
	if (m.weak) {
		pl->c->stage_weak++;
		if (!pl->weak_said && pl->src.stage_weak)
			pl->src.stage_weak(pl->src.ctx, b->sorted[sp->a].x.obj);
		pl->weak_said = 1;
	}
	return 0;
}

/* Whether the rule gives span sp to the store (fetch__rules_stage: its bytes
 * within *room, the cache's room less the spans of this batch given to it
 * before, or all cached already; *room then less its bytes), not the stage. */
static int pfx_span_store(const struct pfx_span *sp, uint64_t *room)
{
	uint64_t len = sp->end - sp->off;

	if (fetch__rules_stage(len, *room, cachetier_obj_range_cached(sp->raw, sp->off, len)))
		return 0;
	*room -= len < *room ? len : *room;
	return 1;
}

/* Span sp of plan s (its position now: position) into the stage's memory,
 * its planned paths noted. read, ctx: the read into memory (NULL: the
 * store's ranged one; a GetBatch window's: pfx_getbatch_staged). 1:
 * staged; 0: no room in the stage (counted), or not stageable: the store's. */
static int pfx_span_add(struct fetch_planner *pl, struct pfx_buf *b, const struct pfx_span *sp,
			const struct pfx_plan *s, uint32_t position, fetch_stage_read_fn read,
			void *ctx)
{
	const struct pfx_piece *pc = &b->sorted[sp->a];
	size_t n = sp->b - sp->a;
	uint32_t last = 0;

	for (size_t i = 0; i < n; i++) { /* the planned data (not the header before it) */
		b->cp[i].off = pc[i].x.off + pc[i].from;
		b->cp[i].len = pc[i].to - pc[i].from;
		if (pc[i].idx > last)
			last = pc[i].idx;
	}
	if (fetch__stage_add_via(pl->s, sp->raw, sp->off, sp->end, b->cp, n, s->p, last, position,
				 read, ctx) < 0)
		return 0;
	pfx_span_count(pl, b, sp);
	return 1;
}

/* Where each span of a batch (b->sp[0..ns), in plan order) goes
 * (sp->store): the cache's room, room, is given from the batch's last span
 * back, so the spans its reader reaches first are the stage's. The
 * stage's spans are read at once, by this thread, in plan order; the
 * cache's fills are queued to the store's fill workers, woken once the
 * batch is handed over (cachetier_wake_hold), so they reach the link
 * behind every staged GET of the batch: given the cache's room in plan
 * order, the first batch of a cold epoch (the cache's room then about 1-5
 * MB) sent its first paths to the cache, and their readers waited
 * 30-250 ms behind the batch's 200-odd staged GETs on 128 connections
 * (tests/bench/README.md, "The stage": "The cache's room, from the
 * batch's end"). */
static void pfx_dest(struct fetch_planner *pl, struct pfx_buf *b, size_t ns, uint64_t room)
{
	struct pfx_memable seen[PFX_MEMABLE];
	size_t nseen = 0;

	for (size_t i = 0; i < ns; i++) /* (a weak ETag's object said in plan order) */
		b->sp[i].store = !pfx_span_memable_in(pl, b, &b->sp[i], seen, &nseen);
	for (size_t i = ns; i-- > 0;) {
		if (!b->sp[i].store)
			b->sp[i].store = pfx_span_store(&b->sp[i], &room);
	}
}

/* Add bytes [from, to) of extent x (plan index idx) to the batch. 0 or
 * -ENOMEM. */
static int pfx_add(struct pfx_buf *b, const struct fetch_plan_extent *x, uint32_t idx,
		   uint64_t from, uint64_t to)
{
	struct pfx_piece *pc;
	uint64_t hdr = from == 0 && (x->flags & FETCH_PLAN_HEADER) ? 512 : 0;

	if (b->n == b->cap) {
		size_t nc = b->cap ? 2 * b->cap : 256;
		struct pfx_piece *a = realloc(b->pc, nc * sizeof(*a));
		struct pfx_piece *s = a ? realloc(b->sorted, nc * sizeof(*s)) : NULL;
		struct pfx_span *sp = s ? realloc(b->sp, nc * sizeof(*sp)) : NULL;
		struct cachetier_piece *cp = sp ? realloc(b->cp, nc * sizeof(*cp)) : NULL;
		uint64_t *g = cp ? realloc(b->gaps, nc * sizeof(*g)) : NULL;
		uint64_t *c = g ? realloc(b->cand, nc * sizeof(*c)) : NULL;

		if (a)
			b->pc = a;
		if (s)
			b->sorted = s;
		if (sp)
			b->sp = sp;
		if (cp)
			b->cp = cp;
		if (g)
			b->gaps = g;
		if (!c)
			return -ENOMEM;
		b->cand = c;
		b->cap = nc;
	}
	pc = &b->pc[b->n++];
	pc->x = *x;
	pc->idx = idx;
	pc->from = from;
	pc->to = to;
	pc->off = x->off + from - hdr;
	pc->len = to - from + hdr;
	return 0;
}

/* Hand the batch of plan s (its position now: position) to the cache
 * tier: its pieces grouped into spans (pfx_spans), the spans in the order
 * of their first planned extent; with a stage, each span the cache could
 * keep only by evicting goes to the stage instead (pfx_dest). */
static void pfx_flush(struct fetch_planner *pl, struct pfx_buf *b, uint64_t gap,
		      const struct pfx_plan *s, uint32_t position)
{
	int stage = fetch__stage_max(pl->s) > 0;
	uint64_t room = stage ? cachetier_room(pl->ct) : 0;
	size_t ns;

	if (b->n == 0)
		return;
	ns = pfx_spans(b, gap, s->stages);
	qsort(b->sp, ns, sizeof(*b->sp), span_cmp);
	/* the objects opened first (a HEAD, a map load): nothing waits inside
	 * the hold, which holds the spans' fills back */
	for (size_t i = 0; i < ns; i++) {
		if (pl->src.raw(pl->src.ctx, b->sorted[b->sp[i].a].x.obj, &b->sp[i].raw) < 0)
			b->sp[i].raw = NULL; /* logged */
	}
	if (stage)
		pfx_dest(pl, b, ns, room);
	cachetier_wake_hold(pl->ct, 1); /* one fill worker woken for the batch, not one a span */
	for (size_t i = 0; i < ns; i++) {
		if (!stage || b->sp[i].store ||
		    !pfx_span_add(pl, b, &b->sp[i], s, position, NULL, NULL))
			pfx_span_issue(pl, b, &b->sp[i]);
	}
	cachetier_wake_hold(pl->ct, 0);
}

/* The store refused GetBatch: spans from now on (logged once). */
static void pfx_refused(struct fetch_planner *pl)
{
	if (!atomic_exchange(&pl->batch_refused, 1) && pl->src.batch_refused)
		pl->src.batch_refused(pl->src.ctx);
}

/* Pieces pc[0..n) (plan order) fetched with GetBatch into the cache
 * (fetch_batch_fill); counted. 0, or -1: the caller hands them over
 * another way (refused: noted; no memory). */
static int pfx_getbatch_cache(struct fetch_planner *pl, const struct pfx_piece *pc, size_t n,
			      unsigned par)
{
	struct cachetier_batch_piece *p;
	size_t k = 0;
	int err;

	if (n == 0)
		return 0;
	p = calloc(n, sizeof(*p));
	if (!p)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (pl->src.raw(pl->src.ctx, pc[i].x.obj, &p[k].o) < 0)
			continue; /* logged */
		p[k].off = pc[i].off;
		p[k++].len = pc[i].len;
	}
	err = fetch_batch_fill(pl->ct, p, k, par);
	free(p);
	if (err == -EOPNOTSUPP) {
		pfx_refused(pl);
		return -1;
	}
	if (err == -ENOMEM)
		return -1; /* as spans */
	if (err < 0)
		return 0; /* an object changed size (a refresh), or stopping: readers fetch */
	for (size_t i = 0; i < n; i++) {
		if (pc[i].from == 0)
			pl->c->paths++;
		pl->c->bytes += pc[i].to - pc[i].from;
	}
	return 0;
}

static int piece_plan_cmp(const void *a, const void *b)
{
	const struct pfx_piece *x = a, *y = b;

	if (x->idx != y->idx)
		return x->idx < y->idx ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* A GetBatch window of plan s (its position now: position) with a stage:
 * grouped into spans as a ranged window is (pfx_spans), each span the
 * cache could keep only by evicting goes to the stage as a ranged span
 * does (pfx_dest, the same rule: the cache's room from the window's last
 * span back, so the spans its reader reaches first are staged), its bytes
 * read with GetBatch into the stage's memory (fetch__batch_mem_run:
 * cachetier_batch_read_mem, the version rule of the batch fills; nothing
 * written to the cache, nothing evicted); the other spans' pieces, in plan
 * order, go to the cache as GetBatch (pfx_getbatch_cache) or, refused, as
 * ranges. Until 2026-12-03 the room went from the window's front: at a
 * cold epoch's head (the cache empty) the reader's first paths were batch
 * fills, valid only at their HEAD groups' answers, and the first window's
 * (which the planner waits for) the reader's first (tests/bench/README.md,
 * batch11). Always handed over (0); -1 only when nothing was (no memory:
 * the caller's spans). */
static int pfx_getbatch_staged(struct fetch_planner *pl, struct pfx_buf *b, uint64_t gap,
			       const struct pfx_plan *s, uint32_t position, unsigned par)
{
	struct fetch_batch_mem bm = {0};
	struct pfx_piece *rest = malloc(b->n * sizeof(*rest));
	uint64_t room;
	size_t ns, nrest = 0;

	if (!rest)
		return -1;
	room = cachetier_room(pl->ct);
	ns = pfx_spans(b, gap, 1);
	qsort(b->sp, ns, sizeof(*b->sp), span_cmp);
	for (size_t i = 0; i < ns; i++) {
		if (pl->src.raw(pl->src.ctx, b->sorted[b->sp[i].a].x.obj, &b->sp[i].raw) < 0)
			b->sp[i].raw = NULL; /* logged */
	}
	pfx_dest(pl, b, ns, room);
	for (size_t i = 0; i < ns; i++) {
		const struct pfx_span *sp = &b->sp[i];

		if (!sp->store && pfx_span_add(pl, b, sp, s, position, fetch__batch_mem_add, &bm))
			continue;
		if (!sp->raw)
			continue; /* logged */
		memcpy(rest + nrest, b->sorted + sp->a, (sp->b - sp->a) * sizeof(*rest));
		nrest += sp->b - sp->a;
	}
	if (fetch__batch_mem_run(pl->ct, &bm, par) == -EOPNOTSUPP)
		pfx_refused(pl); /* the staged reads end: their readers go the ordinary way */
	free(bm.it);
	qsort(rest, nrest, sizeof(*rest), piece_plan_cmp);
	if (atomic_load(&pl->batch_refused) || pfx_getbatch_cache(pl, rest, nrest, par) < 0) {
		for (size_t i = 0; i < nrest; i++) {
			struct cachetier_obj *raw;

			if (pl->src.raw(pl->src.ctx, rest[i].x.obj, &raw) == 0)
				pfx_issue(pl, raw, &rest[i].x, rest[i].from, rest[i].to);
		}
	}
	free(rest);
	return 0;
}

/* ais:// sources (--get-batch auto): the batch b, in plan order, fetched
 * with AIStore's GetBatch (fetch_batch_fill: requests of a stretch of
 * the plan's order each, at most --connections - 2 at once, only the units
 * not cached, bytes kept only for objects a HEAD after their items
 * arrived confirms as listed) instead of spans of ranged GETs. Blocks this thread while
 * every connection has a request of earlier batches (and, for the first
 * batch, until it was answered; each request bounded by the store's retry
 * budget and stall timeout). Returns 0 when it went so, -1 when the caller
 * is to hand it over as spans: other stores, --get-batch off, a store that
 * refused GetBatch (then and for the rest of the mount: logged once), no
 * memory; 0 also when an object changed size (a refresh) or the mount
 * stops: readers fetch those paths. With a stage (s->stages), the spans
 * the cache could keep only by evicting go to the stage's memory, read
 * with GetBatch (pfx_getbatch_staged). */
static int pfx_getbatch(struct fetch_planner *pl, struct pfx_buf *b, uint64_t gap,
			const struct pfx_plan *s, uint32_t position)
{
	/* two connections stay free for readers' misses and the HEADs of the
	 * version rule (as prefetch fills leave them: cachetier_queue.c) */
	unsigned par = pl->cfg.connections > 2 ? pl->cfg.connections - 2 : 1;

	if (!pl->cfg.get_batch || atomic_load(&pl->batch_refused))
		return -1;
	if (s->stages && fetch__stage_max(pl->s) > 0)
		return pfx_getbatch_staged(pl, b, gap, s, position, par);
	return pfx_getbatch_cache(pl, b->pc, b->n, par);
}

/* Staged plans: the next batch is due once the reader moved through
 * 1/PFX_STAGE_HANDOVER of the paths ahead of it after the last (pfx_mark).
 * A reader's workers read their samples from memory in bursts (a worker
 * runs up to its prefetched batches ahead of the others: 0.2 ms a sample,
 * about 100 samples in 25 ms), and a staged span's first byte comes one
 * time to first byte after it was handed over (30-55 ms measured, the
 * store's queue included): what is ahead when a batch is handed over must
 * cover what the reader takes in that time. Handed over half-way through
 * the last batch, a third of the lookahead was ahead then (batches settle
 * at 2/3 of it) and the leading worker reached the new spans before their
 * first byte (tests/bench/README.md, "The stage"); at a quarter, 3/4 of it
 * is (batches of a quarter of the lookahead: the cache path keeps the
 * half, whose larger batches join more paths into one request). */
#define PFX_STAGE_HANDOVER 4u

/* Where plan s's next batch is due, after batch b was handed over (in:
 * s's info then): half-way through b's paths; a staged plan's once its
 * reader moved through 1/PFX_STAGE_HANDOVER of the paths ahead of it. */
static uint32_t pfx_mark(const struct pfx_buf *b, const struct pfx_plan *s,
			 const struct fetch_plan_info *in)
{
	if (s->stages)
		return in->position +
		       (s->next > in->position ? s->next - in->position : 0) / PFX_STAGE_HANDOVER +
		       1;
	return b->pc[0].idx + (b->pc[b->n - 1].idx - b->pc[0].idx) / 2 + 1;
}

/* Hand over the extents of plan s from its position on, up to share bytes
 * past the position: an extent across that end only up to it (the rest
 * once the position moves). With gap 0 each extent goes as it enters the
 * lookahead. Otherwise in batches, so that extents close together go
 * out together: a batch is due once the reader is half-way through the
 * extents the last one handed over (a staged plan's: a quarter through
 * those ahead of it then; s->mark, pfx_mark) or past them; it holds what
 * the lookahead allows, grouped into spans (pfx_flush). */
static void pfx_plan(struct fetch_planner *pl, struct pfx_plan *s, uint64_t share, uint64_t gap,
		     struct pfx_buf *b)
{
	struct fetch_plan_extent x[PFX_BATCH];
	uint32_t idx[PFX_BATCH];
	struct fetch_plan_info in;
	uint64_t limit;
	int stop = 0, stage = s->stages;

	pl->src.info(s->p, &in);
	if (s->next < in.position) {
		s->next = in.position;
		s->part = 0;
	}
	if (gap > 0 && in.position < s->mark && s->next < in.paths)
		return; /* not at the mark yet (pfx_mark) */
	limit = pl->src.bytes_before(s->p, in.position) + share;
	b->n = 0;
	while (!stop && s->next < in.paths && pl->src.bytes_before(s->p, s->next) < limit) {
		uint32_t from = s->next, n = pl->src.ahead(s->p, &from, x, idx, PFX_BATCH);

		for (uint32_t k = 0; k < n && !stop; k++) {
			uint64_t at = pl->src.bytes_before(s->p, idx[k]), part = 0, to;

			if (at >= limit) {
				s->next = idx[k];
				s->part = 0;
				stop = 1;
				break;
			}
			if (idx[k] == s->next)
				part = s->part;
			to = x[k].len < limit - at ? x[k].len : limit - at;
			/* with a stage an extent goes whole: a read is served from
			 * the stage only when one staged span holds all of it */
			if (stage && gap > 0 && !(x[k].flags & FETCH_PLAN_DECODED))
				to = x[k].len;
			if (to > part) {
				struct cachetier_obj *raw;

				if (gap == 0 || (x[k].flags & FETCH_PLAN_DECODED)) {
					if (pl->src.raw(pl->src.ctx, x[k].obj, &raw) == 0)
						pfx_issue(pl, raw, &x[k], part,
							  to); /* else logged */
				} else if (pfx_add(b, &x[k], idx[k], part, to) < 0) {
					stop = 1; /* no memory: what the batch holds goes */
				}
			}
			if (to < x[k].len) {
				s->next = idx[k];
				s->part = to > part ? to : part;
				stop = 1;
			}
		}
		if (!stop) {
			s->next = from;
			s->part = 0;
		}
	}
	if (b->n > 0) {
		if (pfx_getbatch(pl, b, gap, s, in.position) < 0)
			pfx_flush(pl, b, gap, s, in.position);
		s->mark = pfx_mark(b, s, &in);
	}
	/* reads wake this thread only from the mark on (gap 0: every read;
	 * none once every path was handed over) */
	pl->src.wake_at(s->p, s->next >= in.paths ? UINT32_MAX : gap > 0 ? s->mark : 0);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The connections planned ranges may use: --max-connections (the store
 * runs fills of planned ranges of at most 1 MiB past --connections up to
 * it), --connections when that is larger. Read here and nowhere else. */
static unsigned pfx_connections(const struct fetch_planner *pl)
{
	unsigned c = pl->cfg.connections, cap = pl->cfg.max_connections;

	return cap > c ? cap : c;
}

/* Is a batch of plan s due (as pfx_plan decides): extents past its
 * position not handed over yet and, in batches (gap > 0), its reader
 * at the mark (pfx_mark)? in: s's info. */
static int pfx_due(const struct pfx_plan *s, const struct fetch_plan_info *in, uint64_t gap)
{
	uint32_t next = s->next < in->position ? in->position : s->next;

	return next < in->paths && (gap == 0 || in->position >= s->mark);
}

/* The plan's mean planned path. */
static uint64_t pfx_sample(const struct fetch_plan_info *in)
{
	return in->paths ? in->bytes / in->paths : 0;
}

/* The cache bytes plan s holds ahead of its reader, each path costing
 * about its bytes and a unit (fetch_plan_lookahead): the paths behind its
 * position not read yet (a reader's workers read batches side by side:
 * the position is the furthest read), at most half its lookahead (paths a
 * reader skips then take at most a third of its own: la' = room - la / 2
 * settles at 2/3 of the room), and, unless window is 0, the bytes handed
 * over past its position (fetched, in flight or queued). */
static uint64_t pfx_held(const struct fetch_planner *pl, const struct pfx_plan *s,
			 const struct fetch_plan_info *in, uint32_t unit, int window)
{
	uint64_t sample = pfx_sample(in), handed = 0;

	if (sample == 0)
		return 0;
	if (window && s->next >= in->position) {
		uint64_t from = pl->src.bytes_before(s->p, in->position);
		uint64_t to = pl->src.bytes_before(s->p, s->next) + s->part;

		handed = to > from ? to - from : 0;
	}
	return fetch_plan_held(in->position > in->read ? in->position - in->read : 0, sample, s->la,
			       handed, unit);
}

/* One pass: the plans now (those that went are dropped from st, new ones
 * start at their position), each with a batch due fetched ahead within
 * its lookahead (fetch_plan_lookahead: sized when a batch is due, from the
 * link and the cache as they are then; the plans sized before it in the
 * pass count with what they handed over). */
static size_t pfx_pass(struct fetch_planner *pl, struct pfx_plan *st, size_t nst, struct pfx_buf *b)
{
	void *now[FETCH_PLANS_MAX];
	struct pfx_plan next[FETCH_PLANS_MAX];
	struct fetch_plan_info info[FETCH_PLANS_MAX];
	size_t n = pl->src.list(pl->src.ctx, now, FETCH_PLANS_MAX);
	uint64_t gap = pfx_gap(pl), total = 0;
	struct cachetier_held h;
	struct fetch_link l;
	int sized = 0;

	for (size_t i = 0; i < n; i++) {
		memset(&next[i], 0, sizeof(next[i]));
		next[i].p = now[i];
		for (size_t k = 0; k < nst; k++) {
			if (st[k].p == now[i])
				next[i] = st[k];
		}
	}
	for (size_t k = 0; k < nst; k++)
		pl->src.put(st[k].p);
	fetch__stage_plans(pl->s, now, n);
	for (size_t i = 0; i < n; i++)
		pl->src.info(next[i].p, &info[i]);
	for (size_t i = 0; i < n; i++) {
		struct fetch_plan_sizing in = {0};
		struct fetch_plan_lookahead la;

		if (!pfx_due(&next[i], &info[i], gap))
			continue;
		if (!sized) {
			fetch_link_get(pl->s, &l);
			cachetier_held_get(pl->ct, &h);
			sized = 1;
		}
		in.rate = l.rate;
		in.ttfb_ns = l.ttfb_ns;
		in.gap = pl->cfg.gap;
		in.connections = pfx_connections(pl);
		in.sample = pfx_sample(&info[i]);
		in.plans = (unsigned)n;
		in.ceiling = pl->cfg.lookahead;
		in.cache = pl->cfg.cache_size;
		in.pinned = h.pinned;
		in.ahead_max = h.ahead_max;
		in.unit = h.unit;
		in.stage = pfx_stages(pl, &next[i]) ? fetch__stage_max(pl->s) : 0;
		next[i].stages = in.stage > 0;
		for (size_t k = 0; k < n; k++)
			in.held =
			    add_sat(in.held, pfx_held(pl, &next[k], &info[k], h.unit, k != i));
		fetch_plan_lookahead(&in, &la);
		next[i].la = la.bytes;
		if (la.bytes > 0)
			pfx_plan(pl, &next[i], la.bytes, gap, b);
	}
	for (size_t i = 0; i < n; i++) {
		total = add_sat(total, next[i].la);
		st[i] = next[i];
	}
	pl->c->lookahead = total;
	return n;
}

void fetch_planner_pass(struct fetch_planner *pl)
{
	pl->nst = pfx_pass(pl, pl->st, pl->nst, &pl->b);
}

int fetch_planner_new(struct fetch *s, const struct fetch_plans_src *src,
		      const struct fetch_plan_config *cfg, struct fetch_plan_counters *c,
		      struct fetch_planner **out)
{
	struct fetch_planner *pl = calloc(1, sizeof(*pl));

	*out = NULL;
	if (!pl)
		return -ENOMEM;
	pl->s = s;
	pl->ct = s->ct;
	pl->src = *src;
	pl->cfg = *cfg;
	pl->c = c;
	if (fetch__stage_new(s, cfg->memory) < 0) {
		free(pl);
		return -ENOMEM;
	}
	*out = pl;
	return 0;
}

void fetch_planner_free(struct fetch_planner *pl)
{
	if (!pl)
		return;
	for (size_t k = 0; k < pl->nst; k++)
		pl->src.put(pl->st[k].p);
	free(pl->b.pc);
	free(pl->b.sorted);
	free(pl->b.sp);
	free(pl->b.cp);
	free(pl->b.gaps);
	free(pl->b.cand);
	free(pl);
}
