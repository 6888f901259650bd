/*
 * shardidx_tree.c — the member tree a builder grows, and its freezing into
 * the immutable index.
 *
 * Design: every path ever seen is one node (nodes are never deleted; tar can
 * only add or replace names). A node keeps its base name, its parent node
 * and the FNV-1a hash of its full normalized path; the hash table is keyed by
 * that hash and a probe matches on (parent, base name), so resolving a path
 * costs O(its length) however deep it is. Regular files point to a data
 * object (struct dobj): hardlinks point to the same object, so a hardlink
 * keeps the bytes its target had when the link was seen even if the target
 * name is later replaced. At finish the nodes are laid out breadth-first with
 * each directory's children sorted by name, and each data object picks its
 * canonical entry (the member that stored it if it still does, else its
 * first holder in index order).
 *
 * Non-goals: no tar parsing here (shardidx_build.c), no reading API
 * (shardidx_index.c).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "disk.h"
#include "shardidx_i.h"

#define NONE SHARDIDX_NONE

struct node {
	uint64_t name_off; /* base name in the arena (not NUL-terminated) */
	uint64_t link_off; /* SYMLINK: target in the arena */
	uint32_t link_len;
	uint32_t hash; /* of the full normalized path */
	uint32_t parent;
	uint32_t nchild; /* nodes whose parent is this one */
	uint32_t data;	 /* REG: dobj id */
	uint32_t mtime;
	uint16_t mode;
	uint8_t name_len; /* at most 255 (longer names are left out) */
	uint8_t type;
	uint8_t flags;
};

struct dobj {
	uint64_t data_off;
	uint64_t size;
	uint64_t stored;
	uint32_t first_seg; /* into t->segs when sparse */
	uint32_t nseg;
	uint32_t owner; /* node that stored these bytes */
	uint32_t mtime;
	uint16_t mode;
	uint8_t sparse;
	/* finish only */
	uint32_t refs;
	uint32_t canon;
	uint32_t sp_index;
};

struct shardidx__tree {
	struct node *nodes;
	uint32_t nnodes, cnodes;
	struct dobj *dobjs;
	uint32_t ndobjs, cdobjs;
	struct shardidx__seg *segs;
	uint64_t nsegs, csegs;
	char *arena;
	uint64_t arena_len, arena_cap;
	uint32_t *hash; /* node id + 1, 0 = empty */
	uint32_t hash_cap;
	char *scratch;	 /* normalized path */
	uint32_t hidden; /* files and symlinks a later path made directories */
	size_t scratch_cap;
};

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
	uint64_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	if (n > SIZE_MAX / elem)
		return -ENOMEM;
	q = realloc(*p, n * elem);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static int grow32(void **p, uint32_t *cap, uint64_t need, size_t elem)
{
	uint64_t c = *cap;
	int r;

	if (need >= UINT32_MAX - 1)
		return -ENOMEM;
	r = grow(p, &c, need, elem);
	if (r == 0)
		*cap = c > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)c;
	return r;
}

struct shardidx__tree *shardidx__tree_new(void)
{
	return calloc(1, sizeof(struct shardidx__tree));
}

void shardidx__tree_free(struct shardidx__tree *t)
{
	if (!t)
		return;
	free(t->nodes);
	free(t->dobjs);
	free(t->segs);
	free(t->arena);
	free(t->hash);
	free(t->scratch);
	free(t);
}

static int arena_add(struct shardidx__tree *t, const char *s, size_t len, uint64_t *off)
{
	int r = grow((void **)&t->arena, &t->arena_cap, t->arena_len + len + 1, 1);

	if (r)
		return r;
	memcpy(t->arena + t->arena_len, s, len);
	t->arena[t->arena_len + len] = 0;
	*off = t->arena_len;
	t->arena_len += len + 1;
	return 0;
}

static int node_is(const struct shardidx__tree *t, uint32_t id, uint32_t hash, uint32_t parent,
		   const char *name, size_t len)
{
	const struct node *n = &t->nodes[id];

	return n->hash == hash && n->parent == parent && n->name_len == len &&
	       memcmp(t->arena + n->name_off, name, len) == 0;
}

static uint32_t hash_find(const struct shardidx__tree *t, uint32_t hash, uint32_t parent,
			  const char *name, size_t len)
{
	uint32_t mask = t->hash_cap - 1;

	if (!t->hash_cap)
		return NONE;
	for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
		uint32_t v = t->hash[i];

		if (!v)
			return NONE;
		if (node_is(t, v - 1, hash, parent, name, len))
			return v - 1;
	}
}

static void hash_put(uint32_t *tab, uint32_t cap, uint32_t hash, uint32_t id)
{
	uint32_t mask = cap - 1;
	uint32_t i = hash & mask;

	while (tab[i])
		i = (i + 1) & mask;
	tab[i] = id + 1;
}

static int hash_grow(struct shardidx__tree *t)
{
	uint32_t cap;
	uint32_t *tab;

	if ((uint64_t)(t->nnodes + 1) * 2 <= t->hash_cap)
		return 0;
	if (t->hash_cap >= (1u << 31))
		return -ENOMEM;
	cap = t->hash_cap ? t->hash_cap * 2 : 1024;
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->nnodes; i++)
		hash_put(tab, cap, t->nodes[i].hash, i);
	free(t->hash);
	t->hash = tab;
	t->hash_cap = cap;
	return 0;
}

static int node_new(struct shardidx__tree *t, uint32_t hash, uint32_t parent, const char *name,
		    size_t len, uint32_t *id)
{
	struct node *n;
	uint64_t off;
	int r;

	r = hash_grow(t);
	if (r)
		return r;
	r = grow32((void **)&t->nodes, &t->cnodes, (uint64_t)t->nnodes + 1, sizeof(*t->nodes));
	if (r)
		return r;
	r = arena_add(t, name, len, &off);
	if (r)
		return r;
	n = &t->nodes[t->nnodes];
	memset(n, 0, sizeof(*n));
	n->name_off = off;
	n->name_len = (uint8_t)len;
	n->hash = hash;
	n->parent = parent;
	n->data = NONE;
	if (parent != NONE)
		t->nodes[parent].nchild++;
	hash_put(t->hash, t->hash_cap, hash, t->nnodes);
	*id = t->nnodes++;
	return 0;
}

/*
 * Normalize name[0..len) into t->scratch: drop empty and '.' components.
 * Returns the normalized length, 0 when the name is left out ('..', empty,
 * a component over 255 bytes), or -ENOMEM.
 */
static const char empty_name[] = "empty name";

static int64_t normalize(struct shardidx__tree *t, const char *name, size_t len, const char **why)
{
	size_t o = 0, i = 0;

	if (t->scratch_cap < len + 1) {
		char *s = realloc(t->scratch, len + 1);

		if (!s)
			return -ENOMEM;
		t->scratch = s;
		t->scratch_cap = len + 1;
	}
	while (i < len) {
		size_t j = i;

		while (j < len && name[j] != '/')
			j++;
		if (j - i == 0 || (j - i == 1 && name[i] == '.')) {
			/* empty or '.': drop */
		} else if (j - i == 2 && name[i] == '.' && name[i + 1] == '.') {
			*why = "name with a '..' component";
			return 0;
		} else if (j - i > SHARDIDX__NAME_MAX) {
			*why = "name component longer than 255 bytes";
			return 0;
		} else {
			if (o)
				t->scratch[o++] = '/';
			memcpy(t->scratch + o, name + i, j - i);
			o += j - i;
		}
		i = j + 1;
	}
	if (!o)
		*why = empty_name;
	return (int64_t)o;
}

static void make_implicit_dir(struct shardidx__tree *t, uint32_t id, uint32_t mtime)
{
	struct node *n = &t->nodes[id];

	n->type = SHARDIDX_DIR;
	n->flags = SHARDIDX_F_IMPLICIT;
	n->mode = 0755;
	n->mtime = mtime;
	n->data = NONE;
}

/*
 * Resolve the normalized path p[0..len). With create, missing parents are
 * created as implicit directories and non-directory parents become
 * directories (a directory needed by children wins). Returns 0 and sets
 * *parent, *node (NONE if the last component does not exist yet), *hash;
 * 1 if (without create) a parent is missing; -ENOMEM.
 */
static int resolve(struct shardidx__tree *t, const char *p, size_t len, int create, uint32_t mtime,
		   uint32_t *parent, uint32_t *node, uint32_t *hash)
{
	uint32_t h = DISK_FNV32_INIT, cur = NONE;
	size_t i = 0;

	for (;;) {
		size_t j = i;
		uint32_t id;

		while (j < len && p[j] != '/')
			j++;
		h = disk_fnv32_update(h, p + i, j - i);
		id = hash_find(t, h, cur, p + i, j - i);
		if (j == len) {
			*parent = cur;
			*node = id;
			*hash = h;
			return 0;
		}
		if (id == NONE) {
			int r;

			if (!create)
				return 1;
			r = node_new(t, h, cur, p + i, j - i, &id);
			if (r)
				return r;
			make_implicit_dir(t, id, mtime);
		} else if (t->nodes[id].type != SHARDIDX_DIR) {
			if (!create)
				return 1;
			/* a file or symlink whose name a later member's path needs
			 * as a directory: hidden (GNU tar keeps it and fails to
			 * extract the later member), counted by the caller */
			make_implicit_dir(t, id, mtime);
			t->hidden++;
		}
		cur = id;
		h = disk_fnv32_update(h, "/", 1);
		i = j + 1;
	}
}

static int dobj_new(struct shardidx__tree *t, const struct shardidx__member *m, uint32_t owner,
		    uint32_t *id)
{
	struct dobj *d;
	int r;

	r = grow32((void **)&t->dobjs, &t->cdobjs, (uint64_t)t->ndobjs + 1, sizeof(*t->dobjs));
	if (r)
		return r;
	d = &t->dobjs[t->ndobjs];
	memset(d, 0, sizeof(*d));
	d->data_off = m->data_off;
	d->size = m->size;
	d->stored = m->stored;
	d->owner = owner;
	d->mtime = m->mtime;
	d->mode = m->mode;
	d->sparse = m->sparse ? 1 : 0;
	if (m->sparse) {
		if (t->nsegs + m->nseg >= UINT32_MAX)
			return -ENOMEM;
		r = grow((void **)&t->segs, &t->csegs, t->nsegs + m->nseg, sizeof(*t->segs));
		if (r)
			return r;
		if (m->nseg)
			memcpy(t->segs + t->nsegs, m->segs, m->nseg * sizeof(*m->segs));
		d->first_seg = (uint32_t)t->nsegs;
		d->nseg = m->nseg;
		t->nsegs += m->nseg;
	}
	*id = t->ndobjs++;
	return 0;
}

/* The node a hardlink member m names (its link, normalized): 0 and a copy
 * of it in *target, 1 with *why when the name is no earlier file or symlink
 * of the archive (the member is skipped), or a negative errno. A copy: the
 * member's own node may be added after, which can move t->nodes. */
static int hardlink_target(struct shardidx__tree *t, const struct shardidx__member *m,
			   const char **why, struct node *target)
{
	uint32_t tp, tid, th;
	int64_t len = normalize(t, m->link, m->link_len, why);
	int r;

	if (len <= 0)
		return len < 0 ? (int)len : 1;
	r = resolve(t, t->scratch, (size_t)len, 0, 0, &tp, &tid, &th);
	if (r < 0)
		return r;
	if (r > 0 || tid == NONE || t->nodes[tid].type == SHARDIDX_DIR) {
		*why = "hardlink to a name not earlier in the archive";
		return 1;
	}
	*target = t->nodes[tid];
	return 0;
}

/* Node n as member m of kind kind stores it: a directory, a symlink (its
 * target's link and attributes when it is a hardlink to one, target), or a
 * file of data object data. */
static void node_set(struct node *n, const struct shardidx__member *m, int kind,
		     const struct node *target, uint64_t link_off, uint32_t data)
{
	n->flags = 0;
	n->mode = m->mode & 07777;
	n->mtime = m->mtime;
	n->data = NONE;
	switch (kind) {
	case SHARDIDX__K_DIR:
		n->type = SHARDIDX_DIR;
		break;
	case SHARDIDX__K_SYMLINK:
		n->type = SHARDIDX_SYMLINK;
		n->link_off = link_off;
		n->link_len = target ? target->link_len : (uint32_t)m->link_len;
		if (target) {
			n->mode = target->mode;
			n->mtime = target->mtime;
		}
		break;
	default: /* REG or HARDLINK to a REG */
		n->type = SHARDIDX_REG;
		n->data = data;
		break;
	}
}

int shardidx__tree_add(struct shardidx__tree *t, const struct shardidx__member *m, const char **why)
{
	uint32_t parent, id, hash, data = NONE, hidden;
	const struct node *target = NULL;
	struct node linked; /* a hardlink's target (hardlink_target) */
	uint64_t link_off = 0;
	int64_t len;
	int r, kind = m->kind;

	/* A hardlink resolves its target now: later copies of it do not matter. */
	if (kind == SHARDIDX__K_HARDLINK) {
		r = hardlink_target(t, m, why, &linked);
		if (r)
			return r;
		target = &linked;
		if (target->type == SHARDIDX_SYMLINK) {
			/* A hardlink to a symlink is another symlink to the same target. */
			kind = SHARDIDX__K_SYMLINK;
			link_off = target->link_off;
		} else {
			data = target->data;
		}
	}

	len = normalize(t, m->path, m->path_len, why);
	/* './' (what 'tar -C dir .' stores first) is the shard's own root
	 * directory: nothing to show, and nothing hostile to count */
	if (len == 0 && *why == empty_name && kind == SHARDIDX__K_DIR)
		return 0;
	if (len <= 0)
		return len < 0 ? (int)len : 1;
	hidden = t->hidden;
	r = resolve(t, t->scratch, (size_t)len, 1, m->mtime, &parent, &id, &hash);
	if (r)
		return r < 0 ? r : 1;
	if (t->hidden != hidden)
		*why = "an earlier file or symlink hidden: this member's path needs a directory of "
		       "its "
		       "name";
	if (id != NONE && t->nodes[id].nchild && kind != SHARDIDX__K_DIR) {
		*why = "non-directory stored over a directory with members";
		return 1;
	}
	if (id == NONE) {
		const char *base = t->scratch + len;

		while (base > t->scratch && base[-1] != '/')
			base--;
		r = node_new(t, hash, parent, base, (size_t)(t->scratch + len - base), &id);
		if (r)
			return r;
	}

	if (kind == SHARDIDX__K_SYMLINK && !target) {
		r = arena_add(t, m->link, m->link_len, &link_off);
		if (r)
			return r;
	}
	if (kind == SHARDIDX__K_REG) {
		r = dobj_new(t, m, id, &data);
		if (r)
			return r;
	}

	node_set(&t->nodes[id], m, kind, target, link_off, data);
	return t->hidden != hidden ? 2 : 0;
}

/* ---- freezing ------------------------------------------------------------ */

static int child_cmp(const void *a, const void *b, void *ctx)
{
	const struct shardidx__tree *t = ctx;
	const struct node *x = &t->nodes[*(const uint32_t *)a];
	const struct node *y = &t->nodes[*(const uint32_t *)b];

	return shardidx__name_cmp(t->arena + x->name_off, x->name_len, t->arena + y->name_off,
				  y->name_len);
}

/* The breadth-first order of a tree's nodes (shardidx__tree_finish). */
struct tree_layout {
	uint32_t *start;  /* [n + 2]: bucket k is bucket[start[k] .. start[k + 1]) */
	uint32_t *bucket; /* [n + 1]: node numbers, children of node k - 1 in
			   * bucket k sorted by name; the top level is bucket 0 */
	uint32_t *order;  /* [n + 1]: record i is node order[i] */
	uint32_t *idx;	  /* [n + 1]: node i is record idx[i] */
};

static void layout_free(struct tree_layout *lay)
{
	free(lay->start);
	free(lay->bucket);
	free(lay->order);
	free(lay->idx);
}

/* Sort the n nodes of t into buckets by parent, then breadth-first; sets
 * ix->root_n. Returns 0 or -ENOMEM (the caller frees lay). */
static int layout_make(struct shardidx__tree *t, struct tree_layout *lay, struct shardidx *ix)
{
	uint32_t n = t->nnodes, q = 0;
	uint32_t *start, *bucket, *order, *idx;

	start = lay->start = calloc((size_t)n + 2, sizeof(*start));
	bucket = lay->bucket = malloc(((size_t)n + 1) * sizeof(*bucket));
	order = lay->order = malloc(((size_t)n + 1) * sizeof(*order));
	idx = lay->idx = malloc(((size_t)n + 1) * sizeof(*idx));
	if (!start || !bucket || !order || !idx)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t p = t->nodes[i].parent;

		start[(p == NONE ? 0 : p + 1) + 1]++;
	}
	for (uint32_t k = 0; k <= n; k++)
		start[k + 1] += start[k];
	{
		uint32_t *fill = order; /* reuse as cursor space */

		memcpy(fill, start, ((size_t)n + 1) * sizeof(*fill));
		for (uint32_t i = 0; i < n; i++) {
			uint32_t p = t->nodes[i].parent;
			uint32_t k = p == NONE ? 0 : p + 1;

			bucket[fill[k]++] = i;
		}
	}
	for (uint32_t k = 0; k <= n; k++)
		if (start[k + 1] - start[k] > 1)
			qsort_r(bucket + start[k], start[k + 1] - start[k], sizeof(*bucket),
				child_cmp, t);

	/* Breadth-first layout. */
	for (uint32_t i = start[0]; i < start[1]; i++)
		order[q++] = bucket[i];
	ix->root_n = q;
	for (uint32_t i = 0; i < q; i++) {
		uint32_t k = order[i] + 1;

		idx[order[i]] = i;
		for (uint32_t j = start[k]; j < start[k + 1]; j++)
			order[q++] = bucket[j];
	}
	return 0;
}

/* Reference counts and canonical records of the data objects; the bytes
 * of all names and link targets into *names_len. */
static void layout_dobjs(struct shardidx__tree *t, const uint32_t *order, uint64_t *names_len)
{
	*names_len = 0;
	for (uint32_t d = 0; d < t->ndobjs; d++) {
		t->dobjs[d].refs = 0;
		t->dobjs[d].canon = NONE;
		t->dobjs[d].sp_index = NONE;
	}
	for (uint32_t i = 0; i < t->nnodes; i++) {
		const struct node *nd = &t->nodes[order[i]];

		if (nd->type == SHARDIDX_REG) {
			struct dobj *d = &t->dobjs[nd->data];

			if (!d->refs++)
				d->canon = i;
			if (order[i] == d->owner)
				d->canon = i;
		}
		*names_len += nd->name_len + 1u;
		if (nd->type == SHARDIDX_SYMLINK)
			*names_len += nd->link_len + 1u;
	}
}

/* Number the sparse members, allocate ix's sparse, segment and link
 * tables and copy the segments. Returns 0 or -ENOMEM. */
static int layout_sparse(struct shardidx__tree *t, const uint32_t *order, struct shardidx *ix)
{
	uint64_t nseg_out = 0;
	uint32_t nsparse = 0, nlinks = 0;

	for (uint32_t i = 0; i < t->nnodes; i++) {
		const struct node *nd = &t->nodes[order[i]];

		if (nd->type == SHARDIDX_REG) {
			struct dobj *d = &t->dobjs[nd->data];

			if (d->canon != i)
				nlinks++;
			else if (d->refs > 1)
				nlinks++;
			if (d->sparse && d->sp_index == NONE) {
				d->sp_index = nsparse++;
				nseg_out += d->nseg;
			}
		}
	}
	ix->sparse = calloc(nsparse ? nsparse : 1, sizeof(*ix->sparse));
	ix->segs = calloc(nseg_out ? nseg_out : 1, sizeof(*ix->segs));
	ix->links = calloc(nlinks ? nlinks : 1, sizeof(*ix->links));
	if (!ix->sparse || !ix->segs || !ix->links)
		return -ENOMEM;
	ix->nsparse = nsparse;
	ix->nsegs = (uint32_t)nseg_out;
	ix->nlinks = nlinks;
	nseg_out = 0;
	for (uint32_t d = 0; d < t->ndobjs; d++) {
		const struct dobj *o = &t->dobjs[d];
		struct shardidx__sparse *sp;

		if (o->sp_index == NONE)
			continue;
		sp = &ix->sparse[o->sp_index];
		sp->first_seg = (uint32_t)nseg_out;
		sp->nseg = o->nseg;
		sp->data_off = o->data_off;
		if (o->nseg) /* a sparse member may have no segments; t->segs may be NULL */
			memcpy(ix->segs + nseg_out, t->segs + o->first_seg,
			       o->nseg * sizeof(*ix->segs));
		nseg_out += o->nseg;
	}
	return 0;
}

/* The record rc (number i) of a regular file nd; its link entry at
 * ix->links[*nlinks] when it has one. */
static void rec_file(const struct shardidx__tree *t, const struct node *nd, uint32_t i,
		     uint64_t stream_size, struct shardidx__rec *rc, struct shardidx *ix,
		     uint32_t *nlinks)
{
	const struct dobj *d = &t->dobjs[nd->data];
	int trunc;

	rc->mode = d->mode & 07777;
	rc->mtime = d->mtime;
	rc->size = d->size;
	if (d->sparse) {
		/* no segments (all holes): t->segs may be NULL */
		const struct shardidx__seg *sg =
		    d->nseg ? t->segs + d->first_seg + d->nseg - 1 : NULL;

		rc->off = d->sp_index;
		rc->flags |= SHARDIDX_F_SPARSE;
		trunc = sg && sg->stream_off + sg->len > stream_size;
	} else {
		rc->off = d->data_off;
		trunc = d->data_off + d->size > stream_size;
	}
	if (trunc)
		rc->flags |= SHARDIDX_F_TRUNCATED;
	if (d->canon != i) {
		rc->flags |= SHARDIDX_F_HARDLINK;
		ix->links[*nlinks].entry = i;
		ix->links[(*nlinks)++].val = d->canon;
	} else if (d->refs > 1) {
		rc->flags |= SHARDIDX__F_LINKED;
		ix->links[*nlinks].entry = i;
		ix->links[(*nlinks)++].val = d->refs;
	}
}

/* Fill ix's records and names in the order of lay. */
static void layout_recs(const struct shardidx__tree *t, const struct tree_layout *lay,
			uint64_t stream_size, struct shardidx *ix)
{
	const uint32_t *start = lay->start, *bucket = lay->bucket, *idx = lay->idx;
	uint64_t names_len = 0;
	uint32_t nlinks = 0, running = ix->root_n; /* next directory's first child */

	for (uint32_t i = 0; i < t->nnodes; i++) {
		const struct node *nd = &t->nodes[lay->order[i]];
		struct shardidx__rec *rc = &ix->recs[i];

		rc->name_off = (uint32_t)names_len;
		memcpy(ix->names + names_len, t->arena + nd->name_off, nd->name_len);
		names_len += nd->name_len;
		ix->names[names_len++] = 0;
		rc->parent = nd->parent == NONE ? NONE : idx[nd->parent];
		rc->type = nd->type;
		rc->mode = nd->mode;
		rc->mtime = nd->mtime;
		rc->flags = nd->flags & SHARDIDX_F_IMPLICIT;
		if (nd->type == SHARDIDX_DIR) {
			uint32_t k = lay->order[i] + 1, nsub = 0;
			/* an empty directory's first child is where its children
			 * would be: the child ranges follow each other (version 3
			 * stores only that) */
			uint32_t first = running;

			for (uint32_t j = start[k]; j < start[k + 1]; j++)
				if (t->nodes[bucket[j]].type == SHARDIDX_DIR)
					nsub++;
			rc->off = first | ((uint64_t)nsub << 32);
			rc->size = start[k + 1] - start[k];
			running += (uint32_t)rc->size;
		} else if (nd->type == SHARDIDX_SYMLINK) {
			rc->off = names_len;
			rc->size = nd->link_len;
			memcpy(ix->names + names_len, t->arena + nd->link_off, nd->link_len);
			names_len += nd->link_len;
			ix->names[names_len++] = 0;
		} else {
			rec_file(t, nd, i, stream_size, rc, ix, &nlinks);
		}
	}
	ix->names_len = (uint32_t)names_len;
}

int shardidx__tree_finish(struct shardidx__tree *t, uint64_t stream_size, struct shardidx *ix)
{
	struct tree_layout lay = {0};
	uint32_t n = t->nnodes;
	uint64_t names_len;
	int r;

	r = layout_make(t, &lay, ix);
	if (r < 0)
		goto out;
	layout_dobjs(t, lay.order, &names_len);
	r = -ENOMEM;
	if (names_len > UINT32_MAX)
		goto out;
	ix->recs = calloc(n ? n : 1, sizeof(*ix->recs));
	ix->names = malloc(names_len ? names_len : 1);
	if (!ix->recs || !ix->names)
		goto out;
	ix->nrecs = n;
	r = layout_sparse(t, lay.order, ix);
	if (r < 0)
		goto out;
	layout_recs(t, &lay, stream_size, ix);
	ix->stream_size = stream_size;
	shardidx__count_samples(ix);
	r = 0;
out:
	layout_free(&lay);
	return r;
}
