/*
 * fs_plan_use.c — next use: the marks by which the cache tier's eviction
 * orders the units reading plans will read (fs_plan.c publishes the plans
 * and notes their reads; this file turns both into marks).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs_plan_i.h"

/* ---- next use: the cache tier's eviction order ----------------------------
 * Every unit a plan will read is marked in the cache tier with the plan
 * position of its next use (cachetier_plan_mark), so that eviction keeps
 * what a plan needs soonest and lets go first what no plan needs again
 * (cachetier.h). A position is bytes of planned reading on one clock for
 * every plan: extent i of plan p is read at p->base + cum[i], where base is
 * the clock when p was published and the clock (fs->plans->clock) is the
 * furthest any plan's readers got (base + bytes before its position). Two
 * plans read at the same pace so compare by the bytes each has left to
 * read before a unit; a unit two plans need is marked with the nearer use.
 *
 * When: at every publish and clear, all marks are dropped and every extent
 * not read yet of every plan is marked (O(extents of the plans), under
 * use_lock). As reads of a planned path land (fs_plan_note_read, every read
 * request, the first of which marks the path read), the units the path's
 * bytes read so far cover are needed by none (cachetier_plan_read: a path
 * read in several requests keeps the units it has not read yet, which a
 * fill between its requests would otherwise evict first), then the extents
 * that share those units and are not read yet, in any plan, mark them again
 * (found through p->byoff: from the read's own extent's place, p->rank, in
 * O(extents sharing its units), in a plan without it in O(log extents)). A
 * read of a whole path while no path is being read takes no reading_lock
 * (nothing to keep in the list). A request makes unneeded the
 * units its bytes end in or pass (a reader reads a file in order: the unit
 * a request starts in was begun by the one before), and once the path's
 * requests read as many bytes as it has, in any order (the kernel's
 * readahead may send the last request first), all its units; a sparse
 * member's pieces do not map its offsets, so its first read makes all its
 * units unneeded. A path whose reader stops
 * part-way keeps the rest of its units marked, as needed now, until PLAN_READING paths started
 * after it (use_reading) or the next publish or clear. Members of compressed shards are not marked
 * (their object is read once, by its decoding). Lock order: fs->plans->use_lock, then
 * fs->plans->lock (fs_plan_list; a read's marks, use_again_all), then the cache tier's. A publish
 * or clear takes use_lock exclusive (no read's marks interleave with its reset); reads take it
 * shared and the list of paths being read under reading_lock, a leaf held for the list work only,
 * so reads never wait for each other's marks: two reads' marks may interleave, each read's own in
 * order (a unit an extent not read yet shares is marked again after the read made it unneeded, and
 * an extent just read may see a unit it shares marked again for it by a read that looked before it
 * was read: that unit keeps a next use a plan is past, until the next publish or clear). */

#define USE_SHIFT     12	 /* positions given to the cache tier: 4 KiB of reading */
#define USE_AHEAD_MAX (1u << 30) /* the furthest position marked ahead of the clock */

/* The bytes whose units x reads: 0 for none (compressed, or empty). */
static int use_range(const struct fs_plan_extent *x, uint64_t *off, uint64_t *len)
{
	uint64_t hdr = x->flags & FS_PLAN_HEADER ? 512 : 0;

	if (x->flags & FS_PLAN_DECODED)
		return 0;
	*off = x->off - hdr;
	*len = x->len + hdr;
	return *len > 0;
}

static uint64_t use_start(const struct fs_plan_extent *x)
{
	uint64_t off, len;

	return use_range(x, &off, &len) ? off : x->off;
}

struct use_sort {
	uint32_t obj, i;
	uint64_t off;
};

static int use_cmp(const void *pa, const void *pb)
{
	const struct use_sort *a = pa, *b = pb;

	if (a->obj != b->obj)
		return a->obj < b->obj ? -1 : 1;
	if (a->off != b->off)
		return a->off < b->off ? -1 : 1;
	return a->i < b->i ? -1 : a->i > b->i;
}

/* p->byoff: p's extents by (object, first byte, index); p->rank: each
 * extent's place in it. */
int fs_plan__use_index(struct fs_plan *p)
{
	struct use_sort *t = malloc((p->n ? p->n : 1) * sizeof(*t));

	p->byoff = malloc((p->n ? p->n : 1) * sizeof(*p->byoff));
	p->rank = malloc((p->n ? p->n : 1) * sizeof(*p->rank));
	if (!t || !p->byoff || !p->rank) {
		free(t);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < p->n; i++)
		t[i] = (struct use_sort){p->ext[i].obj, i, use_start(&p->ext[i])};
	qsort(t, p->n, sizeof(*t), use_cmp);
	for (uint32_t i = 0; i < p->n; i++) {
		p->byoff[i] = t[i].i;
		p->rank[t[i].i] = i;
	}
	free(t);
	return 0;
}

/* Whether place k of p->byoff lies before (obj, lo). */
static int use_before(const struct fs_plan *p, uint32_t k, uint32_t obj, uint64_t lo)
{
	const struct fs_plan_extent *x = &p->ext[p->byoff[k]];

	return x->obj < obj || (x->obj == obj && use_start(x) < lo);
}

/* Steps fs_plan__use_first walks from its hint before it searches: a
 * unit's extents (a read's lo is its first unit's start, before its own
 * extent by less than a unit). */
#define USE_WALK 8

uint32_t fs_plan__use_first(const struct fs_plan *p, uint32_t obj, uint64_t lo, uint32_t at)
{
	uint32_t a = 0, b = p->n;

	if (at < p->n) {
		uint32_t k = at, steps = 0;

		if (use_before(p, k, obj, lo)) { /* forward: the first not before */
			while (++k < p->n && use_before(p, k, obj, lo))
				if (++steps == USE_WALK)
					break;
			if (k == p->n || !use_before(p, k, obj, lo))
				return k;
			a = k + 1;
		} else { /* back: while the one before is not before either */
			while (k > 0 && !use_before(p, k - 1, obj, lo) && steps++ < USE_WALK)
				k--;
			if (k == 0 || use_before(p, k - 1, obj, lo))
				return k;
			b = k;
		}
	}
	while (a < b) { /* the first at or after (obj, lo) in [a, b), else b */
		uint32_t m = a + (b - a) / 2;

		if (use_before(p, m, obj, lo))
			a = m + 1;
		else
			b = m;
	}
	return a;
}

void fs_plan__use_each(const struct fs_plan *p, uint32_t obj, uint64_t lo, uint64_t hi, uint32_t at,
		       void (*fn)(void *ctx, uint32_t i), void *ctx)
{
	uint32_t a = fs_plan__use_first(p, obj, lo, at);

	for (uint32_t k = a; k-- > 0;) { /* before lo, reaching into it */
		const struct fs_plan_extent *x = &p->ext[p->byoff[k]];
		uint64_t off, len;

		if (x->obj != obj || !use_range(x, &off, &len) || off + len <= lo)
			break;
		if (!atomic_load_explicit(&p->done[p->byoff[k]], memory_order_relaxed))
			fn(ctx, p->byoff[k]);
	}
	for (uint32_t k = a; k < p->n; k++) {
		const struct fs_plan_extent *x = &p->ext[p->byoff[k]];

		if (x->obj != obj || use_start(x) >= hi)
			break;
		if (!atomic_load_explicit(&p->done[p->byoff[k]], memory_order_relaxed))
			fn(ctx, p->byoff[k]);
	}
}

/* The position of extent i of p, for the cache tier: at most USE_AHEAD_MAX
 * past the clock (the tier's serial numbers span 2^31). */
static uint32_t use_seq(struct fs *fs, const struct fs_plan *p, uint32_t i)
{
	uint64_t now = atomic_load(&fs->plans->clock) >> USE_SHIFT;
	uint64_t at = (p->base + p->cum[i]) >> USE_SHIFT;

	return (uint32_t)(at > now + USE_AHEAD_MAX ? now + USE_AHEAD_MAX : at);
}

/* Mark the units of extent i of p with its position (raw: its object's). */
static void use_mark(struct fs *fs, const struct fs_plan *p, uint32_t i, struct cachetier_obj *raw)
{
	uint64_t off, len;

	if (use_range(&p->ext[i], &off, &len))
		cachetier_plan_mark(raw, off, len, use_seq(fs, p, i));
}

/* The raw object obj when it is open (a read opened it); else NULL. */
static struct cachetier_obj *use_raw(struct fs *fs, uint32_t obj)
{
	struct fs_obj *o = fs_obj(fs, obj);
	struct cachetier_obj *raw;

	disk_mutex_lock(&o->lock);
	raw = o->raw;
	disk_mutex_unlock(&o->lock);
	return raw;
}

/* Drop every mark, then mark every extent not read yet of every plan. */
void fs_plan__use_all(struct fs *fs)
{
	struct fs_plan *ps[FS_PLAN_MAX];
	size_t n;

	if (backend_is_local(fs->be))
		return; /* read in place: no units */
	disk_rwlock_wrlock(&fs->plans->use_lock);
	n = fs_plan_list(fs, ps, FS_PLAN_MAX);
	cachetier_plan_reset(fs->ct);
	atomic_store(&fs->plans->nreading, 0); /* the marks start again from the plans */
	for (size_t k = 0; k < n; k++) {
		struct cachetier_obj *raw = NULL;
		uint32_t obj = UINT32_MAX;

		for (uint32_t i = 0; i < ps[k]->n; i++) {
			const struct fs_plan_extent *x = &ps[k]->ext[i];

			if (atomic_load_explicit(&ps[k]->done[i], memory_order_relaxed) ||
			    (x->flags & FS_PLAN_DECODED))
				continue;
			if (x->obj != obj) {
				obj = x->obj;
				if (fs_obj_raw(fs, obj, &raw) < 0) /* logged */
					raw = NULL;
			}
			if (raw)
				use_mark(fs, ps[k], i, raw);
		}
	}
	disk_rwlock_unlock(&fs->plans->use_lock);
	for (size_t k = 0; k < n; k++)
		fs_plan_put(ps[k]);
}

/* p's position moved: the clock follows the furthest plan. Under
 * fs->plans->lock (shared). */
void fs_plan__use_moved(struct fs *fs, const struct fs_plan *p)
{
	unsigned pos = atomic_load_explicit(&p->position, memory_order_relaxed);
	uint64_t at = p->base + p->cum[pos < p->n ? pos : p->n];
	unsigned long long clock = atomic_load(&fs->plans->clock);

	while (clock < at && !atomic_compare_exchange_weak(&fs->plans->clock, &clock, at))
		;
	if (!backend_is_local(fs->be))
		cachetier_plan_now(fs->ct, (uint32_t)(atomic_load(&fs->plans->clock) >> USE_SHIFT));
}

struct use_again_ctx {
	struct fs *fs;
	const struct fs_plan *p;
	struct cachetier_obj *raw;
};

static void use_again_mark(void *ctx, uint32_t i)
{
	struct use_again_ctx *c = ctx;

	use_mark(c->fs, c->p, i, c->raw);
}

/* Units of obj covering [lo, hi) were made unneeded: mark them again for
 * the extents not read yet that read them, in every plan (fs_plan__use_each:
 * found from the place of the read's own extent in the plans hits names,
 * in O(extents sharing its units); by binary search in the others).
 * use_lock held (shared or exclusive). The plans in place are walked under
 * fs->plans->lock shared, with no reference taken (fs_plan_list's two
 * atomics a plan and a copy, on every planned read): a plan leaves
 * fs->plans->v only under the lock held exclusive, and its slot's
 * reference keeps it until then; a hit is taken only while its slot holds
 * the plan of its seq (publish order: never reused); the marks are the
 * cache tier's atomics, no lock. */
static void use_again_all(struct fs *fs, uint32_t obj, uint64_t lo, uint64_t hi,
			  struct cachetier_obj *raw, const struct fs_plan_hit *hits, uint32_t nhits)
{
	if (lo >= hi)
		return;
	disk_rwlock_rdlock(&fs->plans->lock);
	/* the slots up to the last plan (fs->plans->n: its plans) */
	for (unsigned s = 0, left = atomic_load(&fs->plans->n); s < FS_PLAN_MAX && left; s++) {
		const struct fs_plan *p = fs->plans->v[s];
		struct use_again_ctx c = {fs, p, raw};
		uint32_t at = UINT32_MAX;

		if (!p)
			continue;
		left--;
		for (uint32_t h = 0; h < nhits; h++) {
			if (hits[h].slot == s && hits[h].seq == p->seq)
				at = p->rank[hits[h].i];
		}
		fs_plan__use_each(p, obj, lo, hi, at, use_again_mark, &c);
	}
	disk_rwlock_unlock(&fs->plans->lock);
}

/* Extent x's units are needed by none now (all of them, its reader done
 * with it or gone), but for the extents not read yet sharing them.
 * use_lock held (shared or exclusive), not reading_lock. */
static void use_done(struct fs *fs, const struct fs_plan_extent *x)
{
	struct cachetier_obj *raw = use_raw(fs, x->obj);
	uint64_t off, len, lo, hi;

	if (raw && use_range(x, &off, &len) && cachetier_plan_done(raw, off, len, &lo, &hi) == 0)
		use_again_all(fs, x->obj, lo, hi, raw, NULL, 0);
}

/* Whether one request of size bytes at off reads all of x that its path
 * maps: from its start to its end, or any of a sparse path. */
static int use_whole(const struct fs_plan_extent *x, uint64_t off, uint64_t size)
{
	return (x->flags & FS_PLAN_SPARSE) || (off == 0 && size >= x->len);
}

/* Keep fs->plans->reading, the planned paths being read, up to date for a
 * read request of size bytes at off of x's file, and say whether the path
 * is read whole now (1: its reader is done with it): its requests so far
 * read as many bytes as it has (in any order: the kernel's readahead may
 * send a path's last request first, on another FUSE thread), or one
 * request read it all, or it is sparse (its pieces do not map its
 * offsets). A path read whole leaves the list; one not in it enters it,
 * and when it is full the path that entered first leaves it, its units
 * needed by none (its reader stopped part-way: PLAN_READING paths started
 * since: *left set, its extent in *old, for the caller to make unneeded
 * once reading_lock is released). *begun: the request starts the path or
 * continues its last one (so the unit it starts in was begun before).
 * reading_lock held. */
static int use_reading(struct fs *fs, const struct fs_plan_extent *x, uint64_t off, uint64_t size,
		       int *begun, struct fs_plan_extent *old, int *left)
{
	struct fs_plans *pl = fs->plans;
	uint32_t i = 0, n = atomic_load_explicit(&pl->nreading, memory_order_relaxed);

	while (i < n && pl->reading[i].x.key != x->key)
		i++;
	*begun = off == 0 || (i < n && pl->reading[i].next == off);
	if (i < n) {
		pl->reading[i].got += size;
		pl->reading[i].next = off + size;
		if (pl->reading[i].got < x->len && !(x->flags & FS_PLAN_SPARSE))
			return 0;
		memmove(&pl->reading[i], &pl->reading[i + 1], (n - i - 1) * sizeof(pl->reading[0]));
		atomic_store_explicit(&pl->nreading, n - 1, memory_order_relaxed);
		return 1;
	}
	if (use_whole(x, off, size) || off >= x->len)
		return 1;
	if (n == PLAN_READING) {
		*old = pl->reading[0].x;
		*left = 1;
		memmove(&pl->reading[0], &pl->reading[1],
			(PLAN_READING - 1) * sizeof(pl->reading[0]));
		n--;
	}
	pl->reading[n] = (struct plan_reading){*x, size, off + size};
	atomic_store_explicit(&pl->nreading, n + 1, memory_order_relaxed);
	return 0;
}

/* A read of [off, off + size) of the file of planned extent x landed: the
 * units of x its bytes read so far cover are needed by none but the
 * extents not read yet that share them. O(units of the request); at the
 * path's end O(units of the path), once. */
void fs_plan__use_read(struct fs *fs, const struct fs_plan_extent *x, uint64_t off, uint64_t size,
		       const struct fs_plan_hit *hits, uint32_t nhits)
{
	struct cachetier_obj *raw;
	struct fs_plan_extent old = {0}; /* set with left */
	uint64_t uoff, ulen, from, lo, hi;
	int end, err, begun, left = 0;

	if (backend_is_local(fs->be) || !use_range(x, &uoff, &ulen))
		return;
	raw = use_raw(fs, x->obj);
	if (!raw)
		return;
	disk_rwlock_rdlock(&fs->plans->use_lock);
	if (use_whole(x, off, size) &&
	    !atomic_load_explicit(&fs->plans->nreading, memory_order_relaxed)) {
		/* read whole by one request while no path is being read: no
		 * list to keep (use_reading would answer 1 and change nothing;
		 * a path another request enters meanwhile is as if it entered
		 * after this one) */
		end = begun = 1;
	} else {
		disk_mutex_lock(&fs->plans->reading_lock);
		end = use_reading(fs, x, off, size, &begun, &old, &left);
		disk_mutex_unlock(&fs->plans->reading_lock);
	}
	if (left)
		use_done(fs, &old);
	if (end) {
		/* all of it, units a reader skipped too: it is done with the path */
		err = cachetier_plan_done(raw, uoff, ulen, &lo, &hi);
	} else {
		/* this request's bytes as stored (a first one with the tar
		 * header of FS_PLAN_HEADER): the units they end in or pass; the
		 * unit it starts in too when the request before ended where it
		 * starts (that one read the unit's start), not when it came out
		 * of order */
		from = off == 0 ? uoff : x->off + off;
		err = cachetier_plan_read(raw, from, uoff + ulen - from, x->off + off + size, begun,
					  &lo, &hi);
	}
	if (err == 0)
		use_again_all(fs, x->obj, lo, hi, raw, hits, nhits);
	disk_rwlock_unlock(&fs->plans->use_lock);
}
