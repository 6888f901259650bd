/*
 * shardidx_index.c — reading the immutable index: entries, lookup, data maps,
 * samples.
 *
 * Design: everything is computed from the 32-byte records and the side tables
 * (see shardidx_i.h), heap arrays or a mapped file read in place alike;
 * nothing is mutated after the index is built or loaded (but for the sample
 * table, published once), so any number of threads may read it. lookup is a binary search in the
 * parent's sorted child range; map walks the sparse segments of one entry
 * from a binary-searched start. The caller never gets a byte range that lies
 * past the end of the stream: such a request fails with -EIO.
 *
 * Samples (WebDataset): a sample is a maximal run of consecutive
 * non-directory children of one directory whose names share the key (the
 * name up to its first '.'); a directory between two such entries ends the
 * run. The table holds the first entry of each sample; its length is found
 * by scanning the run, which costs O(members of the sample).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "disk.h"
#include "shardidx_i.h"

int shardidx__name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

size_t shardidx__key_len(const char *name)
{
	const char *dot = strchr(name, '.');

	return dot ? (size_t)(dot - name) : strlen(name);
}

/* The sample rule over entries read in order: the previous entry's parent,
 * type and key, and whether the current one continues its sample. */
struct sscan {
	int have, dir;
	uint32_t parent;
	size_t keylen;
	char key[SHARDIDX__NAME_MAX + 1];
};

static int sscan_continues(const struct sscan *s, const struct shardidx__cur *c)
{
	size_t kl;

	if (!s->have || s->dir || c->rec.type == SHARDIDX_DIR || s->parent != c->rec.parent)
		return 0;
	kl = shardidx__key_len(c->name);
	return kl == s->keylen && memcmp(s->key, c->name, kl) == 0;
}

/* Feed entry c: 1 when it starts a sample. */
static int sscan_put(struct sscan *s, const struct shardidx__cur *c)
{
	int starts = c->rec.type != SHARDIDX_DIR && !sscan_continues(s, c);

	s->have = 1;
	s->dir = c->rec.type == SHARDIDX_DIR;
	s->parent = c->rec.parent;
	s->keylen = shardidx__key_len(c->name);
	memcpy(s->key, c->name, s->keylen);
	return starts;
}

const char *shardidx__flat_name(const struct shardidx *ix, const struct shardidx__rec *r,
				size_t *len)
{
	const char *nm;

	if (r->name_off >= ix->names_len)
		return NULL;
	nm = ix->names + r->name_off;
	*len = strnlen(nm, ix->names_len - r->name_off);
	return *len < ix->names_len - r->name_off && shardidx__name_ok(nm, *len) ? nm : NULL;
}

void shardidx__count_samples(struct shardidx *ix)
{
	struct shardidx__cur c;
	struct sscan s = {0};

	shardidx__cur_init(&c, ix);
	ix->nsamples = 0;
	for (uint32_t i = 0; i < ix->nrecs; i++)
		if (shardidx__cur_seek(&c, i) == 0)
			ix->nsamples += (uint32_t)sscan_put(&s, &c);
}

/* The sample table, built on first use. Concurrent first callers may both
 * build it; one wins the compare-and-swap, the other frees its copy. */
static const uint32_t *samples_table(const struct shardidx *ix)
{
	struct shardidx *m = (struct shardidx *)ix; /* lazily filled cache, not content */
	uint32_t *t = atomic_load_explicit(&m->samples, memory_order_acquire), *expected = NULL;
	struct shardidx__cur c;
	struct sscan s = {0};
	uint32_t n = 0;

	if (t)
		return t;
	t = malloc((ix->nsamples ? ix->nsamples : 1) * sizeof(*t));
	if (!t)
		return NULL;
	shardidx__cur_init(&c, ix);
	for (uint32_t i = 0; i < ix->nrecs && n < ix->nsamples; i++)
		if (shardidx__cur_seek(&c, i) == 0 && sscan_put(&s, &c))
			t[n++] = i;
	if (!atomic_compare_exchange_strong_explicit(&m->samples, &expected, t,
						     memory_order_acq_rel, memory_order_acquire)) {
		free(t);
		t = expected;
	}
	return t;
}

/* What the binary searches here seek (disk_bsearch): a link row's entry,
 * a name among an index's records, or, in one entry's sparse segments,
 * the first segment not wholly before an offset. */
struct ix_key {
	const struct shardidx *ix;
	const struct shardidx__seg *sg;
	const char *name;
	size_t len;
	uint64_t off;
	uint32_t entry;
};

static int link_cmp(const void *ctx, size_t i)
{
	const struct ix_key *k = ctx;
	uint32_t e = k->ix->links[i].entry;

	return e < k->entry ? -1 : e > k->entry;
}

const struct shardidx__link *shardidx__link_find(const struct shardidx *ix, uint32_t entry)
{
	struct ix_key k = {.ix = ix, .entry = entry};
	int found;
	size_t i = disk_bsearch(0, ix->nlinks, link_cmp, &k, &found);

	return found ? &ix->links[i] : NULL;
}

size_t shardidx__mem_bytes(const struct shardidx *ix)
{
	size_t tables = (size_t)ix->nsparse * sizeof(*ix->sparse) +
			(size_t)ix->nsegs * sizeof(*ix->segs) +
			(size_t)ix->nlinks * sizeof(*ix->links);
	size_t arrays = (size_t)ix->nrecs * sizeof(*ix->recs) + ix->names_len + tables;

	return sizeof(*ix) + (ix->skip_first ? strlen(ix->skip_first) + 1 : 0) +
	       (ix->in_place ? (ix->tables_heap ? tables : 0) : arrays) +
	       (atomic_load(&((struct shardidx *)ix)->samples)
		    ? (size_t)ix->nsamples * sizeof(uint32_t)
		    : 0);
}

void shardidx_free(struct shardidx *ix)
{
	if (!ix)
		return;
	if (!ix->in_place && !ix->compact) {
		free(ix->recs);
		free(ix->names);
	}
	if ((!ix->in_place && !ix->compact) || ix->tables_heap) {
		free(ix->sparse);
		free(ix->segs);
		free(ix->links);
	}
	free(ix->samples);
	free(ix->skip_first);
	if (ix->release)
		ix->release(ix->release_arg);
	free(ix);
}

void shardidx_get_info(const struct shardidx *ix, struct shardidx_info *info)
{
	memset(info, 0, sizeof(*info));
	info->nentries = ix->nrecs;
	info->nsamples = ix->nsamples;
	info->stream_size = ix->stream_size;
	info->end_off = ix->end_off;
	info->damage = ix->damage;
	info->damage_off = ix->damage_off;
	info->skipped = ix->skipped;
	info->mem_bytes = shardidx__mem_bytes(ix);
	info->in_place_bytes = ix->in_place ? ix->buf_len : 0;
}

uint32_t shardidx_count(const struct shardidx *ix)
{
	return ix->nrecs;
}

const char *shardidx_skipped_first(const struct shardidx *ix)
{
	return ix->skip_first ? ix->skip_first : "";
}

uint64_t shardidx_file_sum(const struct shardidx *ix)
{
	return ix->file_sum;
}

void shardidx_root(const struct shardidx *ix, uint32_t *first, uint32_t *n)
{
	*first = 0;
	*n = ix->root_n;
}

/* ---- the per-thread cursors of entry_get and map ------------------------------
 * A compact index decodes an entry from its block's head. Its readers mostly
 * ask for the entry they asked for last (readdirplus: the name, then the
 * attributes) or for the next one (a listing, a walk over a directory), now
 * and then for another one in between (a hardlink's canon). So each thread
 * keeps two cursors, each keyed by an index's pointer and its load's id
 * (never reused, so an index freed and another loaded at the same address
 * is not taken for it): a seek uses the one it is cheapest from (nothing to
 * decode when it holds the entry, the entries between when the entry lies
 * further on in its block), else starts the one used less recently afresh.
 * A lookup scans with one of them too, so the attributes asked for next
 * (a lookup's reply carries them) decode nothing. Nothing is shared between
 * threads; the index stays immutable. A cursor holds what its decode
 * checked; a decode that fails leaves it empty. */
struct ix_tcur {
	const struct shardidx *ix;
	uint64_t id;
	struct shardidx__cur c;
};

static _Thread_local struct ix_tcur tcur[2];
static _Thread_local unsigned tcur_last; /* the one used last */

uint64_t shardidx_decodes(void)
{
	return shardidx__ndecoded;
}

/* Entries to decode to reach i from t (0: it holds i), or UINT32_MAX when
 * t is another index's or i lies behind it or in another block (but for
 * the head of the next one: a walk goes on in t). */
static uint32_t tcur_cost(const struct ix_tcur *t, const struct shardidx *ix, uint32_t i)
{
	uint32_t at = t->c.i;

	if (t->ix != ix || t->id != ix->id || at == SHARDIDX_NONE || i < at)
		return UINT32_MAX;
	if (i / SHARDIDX__BLOCK == at / SHARDIDX__BLOCK || i == at + 1)
		return i - at; /* the next block's head: one decode from t too */
	return UINT32_MAX;
}

/* This thread's cursor to reach entry i of ix (compact) from. */
static struct shardidx__cur *tcur_take(const struct shardidx *ix, uint32_t i)
{
	struct ix_tcur *t;
	uint32_t c0 = tcur_cost(&tcur[0], ix, i), c1 = tcur_cost(&tcur[1], ix, i);
	unsigned k = c0 <= c1 ? 0 : 1;

	t = &tcur[k];
	if ((k ? c1 : c0) == UINT32_MAX) {
		k = tcur_last ^ 1;
		t = &tcur[k];
		t->ix = ix;
		t->id = ix->id;
		shardidx__cur_init(&t->c, ix);
	}
	tcur_last = k;
	return &t->c;
}

/* A cursor of this thread's on entry i of ix into *out: 0, -EINVAL (out
 * of range) or -EBADMSG (bytes that do not decode, or offsets outside the
 * index: checked at use). Flat indexes: a fresh cursor in *own. */
static int seek(const struct shardidx *ix, uint32_t i, struct shardidx__cur *own,
		const struct shardidx__cur **out)
{
	struct shardidx__cur *c = own;

	if (ix->compact)
		c = tcur_take(ix, i);
	else
		shardidx__cur_init(own, ix);
	*out = c;
	return shardidx__cur_seek(c, i);
}

int shardidx_entry_get(const struct shardidx *ix, uint32_t i, struct shardidx_entry *e)
{
	const struct shardidx__rec *r;
	const struct shardidx__link *l;
	const struct shardidx__cur *c;
	struct shardidx__cur own;
	int err = seek(ix, i, &own, &c);

	if (err < 0)
		return err;
	r = &c->rec;
	memset(e, 0, offsetof(struct shardidx_entry, name));
	memcpy(e->name, c->name, c->name_len + 1);
	e->parent = r->parent;
	e->canon = i;
	e->type = r->type;
	e->flags = r->flags & SHARDIDX__F_PUBLIC;
	e->mode = r->mode;
	e->mtime = r->mtime;
	e->nlink = 1;
	switch (r->type) {
	case SHARDIDX_DIR:
		e->first_child = (uint32_t)r->off;
		e->nchild = (uint32_t)r->size;
		e->nlink = 2 + (uint32_t)(r->off >> 32);
		break;
	case SHARDIDX_SYMLINK:
		/* r was checked when decoded (shardidx__rec_in_bounds); its
		 * target's end again now, a cursor may hold r for long */
		if (ix->names[r->off + r->size])
			return -EBADMSG;
		e->link = ix->names + r->off;
		e->size = r->size;
		break;
	default:
		e->size = r->size;
		/* r->off < nsparse: checked when decoded */
		e->data_off = (r->flags & SHARDIDX_F_SPARSE) ? ix->sparse[r->off].data_off : r->off;
		if (r->flags & SHARDIDX_F_HARDLINK) {
			l = shardidx__link_find(ix, i);
			if (l) {
				if (l->val >= ix->nrecs)
					return -EBADMSG;
				e->canon = l->val;
				l = shardidx__link_find(ix, l->val);
				if (l)
					e->nlink = l->val;
			}
		} else if (r->flags & SHARDIDX__F_LINKED) {
			l = shardidx__link_find(ix, i);
			if (l)
				e->nlink = l->val;
		}
		break;
	}
	return 0;
}

int shardidx_dir_get(const struct shardidx *ix, uint32_t i, uint32_t *first, uint32_t *n,
		     uint32_t *parent)
{
	uint32_t nsub;

	if (i >= ix->nrecs)
		return -EINVAL;
	if (ix->compact) {
		/* the rows were checked at load (every directory has one), their
		 * ranges and the parent again now (shardidx__rec_in_bounds) */
		int row = shardidx__dir_row(ix, i, first, n, &nsub);

		if (row <= 0)
			return row < 0 ? -EBADMSG : -ENOTDIR;
		*parent = shardidx__parent_of(ix, i);
		return *parent == SHARDIDX_NONE || *parent < i ? 0 : -EBADMSG;
	}
	{
		struct shardidx__rec r = ix->recs[i];

		if (r.type != SHARDIDX_DIR)
			return -ENOTDIR;
		if (!shardidx__rec_in_bounds(ix, i, &r))
			return -EBADMSG;
		*first = (uint32_t)r.off;
		*n = (uint32_t)r.size;
		*parent = r.parent;
	}
	return 0;
}

static int rec_name_cmp(const void *ctx, size_t i) /* flat indexes */
{
	const struct ix_key *k = ctx;
	struct shardidx__rec r = k->ix->recs[i];
	size_t l;
	const char *mn = shardidx__flat_name(k->ix, &r, &l);

	/* a name outside the table (rewritten since load): the search goes
	 * on inside the range, and what it finds is checked when read */
	return mn ? shardidx__name_cmp(mn, l, k->name, k->len) : 1;
}

int64_t shardidx_lookup(const struct shardidx *ix, uint32_t parent, const char *name, size_t len)
{
	struct ix_key k = {.ix = ix, .name = name, .len = len};
	uint32_t lo, hi;
	size_t i;
	int found;

	if (parent == SHARDIDX_NONE) {
		lo = 0;
		hi = ix->root_n;
	} else if (ix->compact) {
		uint32_t n, nsub;
		int row = shardidx__dir_row(ix, parent, &lo, &n, &nsub);

		if (row <= 0)
			return row < 0 ? -EBADMSG : -ENOENT;
		hi = lo + n;
	} else {
		struct shardidx__rec r;

		if (parent >= ix->nrecs || ix->recs[parent].type != SHARDIDX_DIR)
			return -ENOENT;
		r = ix->recs[parent];
		if (r.type != SHARDIDX_DIR || !shardidx__rec_in_bounds(ix, parent, &r))
			return -EBADMSG;
		lo = (uint32_t)r.off;
		hi = lo + (uint32_t)r.size;
	}
	if (ix->compact) /* the getattr that follows finds the entry decoded */
		return shardidx__lookup_compact(ix, lo, hi, name, len, tcur_take);
	i = disk_bsearch(lo, hi, rec_name_cmp, &k, &found);
	return found ? (int64_t)i : -ENOENT;
}

/* Segments that fit in the stream come before (stream_off ascending). */
static int seg_fits_cmp(const void *ctx, size_t i)
{
	const struct ix_key *k = ctx;

	return k->sg[i].stream_off + k->sg[i].len <= k->ix->stream_size ? -1 : 1;
}

/* Segments that end at or before off come before (logical ascending). */
static int seg_before_cmp(const void *ctx, size_t i)
{
	const struct ix_key *k = ctx;

	return k->sg[i].logical + k->sg[i].len <= k->off ? -1 : 1;
}

/* Logical offset up to which the entry's bytes are in the stream. */
static uint64_t sparse_avail(const struct shardidx *ix, const struct shardidx__seg *sg, uint32_t n,
			     uint64_t size)
{
	struct ix_key k = {.ix = ix, .sg = sg};
	/* first segment that does not fit in the stream */
	uint32_t lo = (uint32_t)disk_bsearch(0, n, seg_fits_cmp, &k, NULL);

	if (lo == n)
		return size;
	if (sg[lo].stream_off >= ix->stream_size)
		return sg[lo].logical;
	return sg[lo].logical + (ix->stream_size - sg[lo].stream_off);
}

int shardidx_map(const struct shardidx *ix, uint32_t i, uint64_t off, uint64_t len,
		 struct shardidx_extent *ext, int max)
{
	const struct shardidx__rec *r;
	const struct shardidx__seg *sg;
	struct ix_key k = {.ix = ix};
	const struct shardidx__cur *c;
	struct shardidx__cur own;
	uint64_t end;
	uint32_t lo, nseg, first_seg;
	int n = 0, err = seek(ix, i, &own, &c);

	if (err < 0)
		return err;
	if (c->rec.type != SHARDIDX_REG || max < 0)
		return -EINVAL;
	r = &c->rec;
	if (off >= r->size || len == 0)
		return 0;
	end = len > r->size - off ? r->size : off + len;
	if (!(r->flags & SHARDIDX_F_SPARSE)) {
		if (r->off > ix->stream_size || end > ix->stream_size - r->off)
			return -EIO;
		if (max < 1)
			return -EINVAL;
		ext[0].logical = off;
		ext[0].stream_off = r->off + off;
		ext[0].len = end - off;
		ext[0].hole = 0;
		return 1;
	}

	/* r->off < nsparse: checked when decoded; the row's segments and
	 * each segment used are checked here, at use (rewritten since?) */
	first_seg = ix->sparse[r->off].first_seg;
	nseg = ix->sparse[r->off].nseg;
	if (!shardidx__sparse_row_ok(ix, first_seg, nseg))
		return -EBADMSG;
	sg = ix->segs + first_seg;
	if (end > sparse_avail(ix, sg, nseg, r->size))
		return -EIO;
	if (max < 1)
		return -EINVAL;
	/* first segment that ends after off */
	k.sg = sg;
	k.off = off;
	lo = (uint32_t)disk_bsearch(0, nseg, seg_before_cmp, &k, NULL);
	while (off < end && n < max) {
		struct shardidx_extent *x = &ext[n++];
		struct shardidx__seg g = lo < nseg ? sg[lo] : (struct shardidx__seg){0};

		x->logical = off;
		if (lo < nseg && g.logical <= off) {
			uint64_t e = g.logical + g.len;

			if (e <= off || e < g.logical)
				return -EBADMSG;
			x->stream_off = g.stream_off + (off - g.logical);
			x->len = (e < end ? e : end) - off;
			x->hole = 0;
			if (x->stream_off < g.stream_off || x->stream_off > ix->stream_size ||
			    x->len > ix->stream_size - x->stream_off)
				return -EBADMSG;
			lo++;
		} else {
			uint64_t e = lo < nseg ? g.logical : end;

			x->stream_off = 0;
			x->len = (e < end ? e : end) - off;
			x->hole = 1;
		}
		off += x->len;
	}
	return n;
}

int shardidx_sample_next(const struct shardidx *ix, uint32_t from, uint32_t *first, uint32_t *n)
{
	struct shardidx__cur c;
	struct sscan sc = {0};
	uint32_t i = from, j;

	shardidx__cur_init(&c, ix);
	/* the rule looks at the entry before: as the table's scan saw it */
	if (from > 0 && from <= ix->nrecs && shardidx__cur_seek(&c, from - 1) == 0)
		sscan_put(&sc, &c);
	for (; i < ix->nrecs; i++)
		if (shardidx__cur_seek(&c, i) == 0 && sscan_put(&sc, &c))
			break;
	if (i >= ix->nrecs)
		return -ENOENT;
	j = i;
	while (j + 1 < ix->nrecs && shardidx__cur_seek(&c, j + 1) == 0 && sscan_continues(&sc, &c))
		j++;
	*first = i;
	*n = j - i + 1;
	return 0;
}

int shardidx_sample_get(const struct shardidx *ix, uint32_t s, uint32_t *first, uint32_t *n)
{
	const uint32_t *t;
	struct shardidx__cur c;
	struct sscan sc = {0};
	uint32_t j;

	if (s >= ix->nsamples)
		return -EINVAL;
	t = samples_table(ix);
	if (!t)
		return -ENOMEM;
	j = t[s];
	shardidx__cur_init(&c, ix);
	if (shardidx__cur_seek(&c, j) < 0)
		return -EINVAL;
	sscan_put(&sc, &c);
	while (j + 1 < ix->nrecs && shardidx__cur_seek(&c, j + 1) == 0 && sscan_continues(&sc, &c))
		j++;
	*first = t[s];
	*n = j - t[s] + 1;
	return 0;
}
