/*
 * shardidx_save.c — the index file format: save, and a load that trusts
 * nothing.
 *
 * Format (version 2), all integers little-endian, fixed width:
 *   0   magic "SHRDIDX\0"
 *   8   u32 version, u32 header size (208)
 *   16  u64 checksum: FNV-1a 64 of the whole file with these 8 bytes zero
 *   24  u64 file length
 *   32  u32 nrecs, root_n, names_len, nsparse, nsegs, nlinks, nsamples, identlen
 *   64  u64 stream_size, u64 end_off, i32 damage, u32 skipped, u64 damage_off
 *   96  7 x {u64 offset, u64 length}: ident, recs, names, sparse, segs,
 *       links, samples (each section 8-byte aligned, after the header; the
 *       samples section is empty since version 2: the table is derived)
 *   Records are 32 bytes {u64 off, u64 size, u32 name_off, u32 parent,
 *   u32 mtime, u16 mode, u8 type, u8 flags}; sparse rows 16 bytes {u32
 *   first_seg, u32 nseg, u64 data_off}; segments 24 bytes {u64 logical,
 *   u64 stream_off, u64 len}; links 8 bytes {u32 entry, u32 val}.
 *
 * Load order of checks: magic (-EBADMSG), version (-EPROTO), length and
 * checksum (-EBADMSG), ident (-ESTALE), then every count, offset, name,
 * tree link, sparse segment, hardlink row and sample (-EBADMSG), so that
 * reading a loaded index can never go out of bounds or loop forever. Load
 * decodes into fresh arrays (no host-layout assumptions) and frees buf.
 *
 * Non-goals: no file I/O (the caller writes to a temp file and renames).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx_i.h"

#define MAGIC	    "SHRDIDX"
#define VERSION	    2u /* 2: the sample table is no longer stored */
#define HDR_SIZE    208u
#define NSECT	    7
#define REC_SIZE    32u
#define SPARSE_SIZE 16u
#define SEG_SIZE    24u
#define LINK_SIZE   8u

enum { SEC_IDENT, SEC_RECS, SEC_NAMES, SEC_SPARSE, SEC_SEGS, SEC_LINKS, SEC_SAMPLES };

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
	       ((uint32_t)p[3] << 24);
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

static uint64_t fnv64(const unsigned char *p, size_t len)
{
	uint64_t h = 14695981039346656037ull;

	for (size_t i = 0; i < len; i++) {
		/* the checksum field itself counts as zeros */
		h ^= (i >= 16 && i < 24) ? 0 : p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

int shardidx_save(const struct shardidx *ix, const void *ident, size_t identlen, void **buf,
		  size_t *len)
{
	uint64_t sec_len[NSECT], sec_off[NSECT], total = HDR_SIZE;
	unsigned char *out, *p;

	if (!ix || !buf || !len || (identlen && !ident) || identlen > UINT32_MAX)
		return -EINVAL;
	sec_len[SEC_IDENT] = identlen;
	sec_len[SEC_RECS] = (uint64_t)ix->nrecs * REC_SIZE;
	sec_len[SEC_NAMES] = ix->names_len;
	sec_len[SEC_SPARSE] = (uint64_t)ix->nsparse * SPARSE_SIZE;
	sec_len[SEC_SEGS] = (uint64_t)ix->nsegs * SEG_SIZE;
	sec_len[SEC_LINKS] = (uint64_t)ix->nlinks * LINK_SIZE;
	sec_len[SEC_SAMPLES] = 0; /* derived from the entries on first use */
	for (int s = 0; s < NSECT; s++) {
		sec_off[s] = total;
		total = align8(total + sec_len[s]);
	}
	if (total > SIZE_MAX)
		return -ENOMEM;
	out = calloc(1, (size_t)total);
	if (!out)
		return -ENOMEM;

	memcpy(out, MAGIC, 8);
	put32(out + 8, VERSION);
	put32(out + 12, HDR_SIZE);
	put64(out + 24, total);
	put32(out + 32, ix->nrecs);
	put32(out + 36, ix->root_n);
	put32(out + 40, ix->names_len);
	put32(out + 44, ix->nsparse);
	put32(out + 48, ix->nsegs);
	put32(out + 52, ix->nlinks);
	put32(out + 56, ix->nsamples);
	put32(out + 60, (uint32_t)identlen);
	put64(out + 64, ix->stream_size);
	put64(out + 72, ix->end_off);
	put32(out + 80, (uint32_t)ix->damage);
	put32(out + 84, ix->skipped);
	put64(out + 88, ix->damage_off);
	for (int s = 0; s < NSECT; s++) {
		put64(out + 96 + 16 * s, sec_off[s]);
		put64(out + 104 + 16 * s, sec_len[s]);
	}

	if (identlen)
		memcpy(out + sec_off[SEC_IDENT], ident, identlen);
	p = out + sec_off[SEC_RECS];
	for (uint32_t i = 0; i < ix->nrecs; i++, p += REC_SIZE) {
		const struct shardidx__rec *r = &ix->recs[i];

		put64(p, r->off);
		put64(p + 8, r->size);
		put32(p + 16, r->name_off);
		put32(p + 20, r->parent);
		put32(p + 24, r->mtime);
		put16(p + 28, r->mode);
		p[30] = r->type;
		p[31] = r->flags;
	}
	if (ix->names_len)
		memcpy(out + sec_off[SEC_NAMES], ix->names, ix->names_len);
	p = out + sec_off[SEC_SPARSE];
	for (uint32_t i = 0; i < ix->nsparse; i++, p += SPARSE_SIZE) {
		put32(p, ix->sparse[i].first_seg);
		put32(p + 4, ix->sparse[i].nseg);
		put64(p + 8, ix->sparse[i].data_off);
	}
	p = out + sec_off[SEC_SEGS];
	for (uint32_t i = 0; i < ix->nsegs; i++, p += SEG_SIZE) {
		put64(p, ix->segs[i].logical);
		put64(p + 8, ix->segs[i].stream_off);
		put64(p + 16, ix->segs[i].len);
	}
	p = out + sec_off[SEC_LINKS];
	for (uint32_t i = 0; i < ix->nlinks; i++, p += LINK_SIZE) {
		put32(p, ix->links[i].entry);
		put32(p + 4, ix->links[i].val);
	}

	put64(out + 16, fnv64(out, (size_t)total));
	*buf = out;
	*len = (size_t)total;
	return 0;
}

/* ---- load ------------------------------------------------------------------- */

/* NUL-terminated string at off inside the table; returns its length or -1. */
static int64_t table_str(const struct shardidx *ix, uint64_t off)
{
	const char *z;

	if (off >= ix->names_len)
		return -1;
	z = memchr(ix->names + off, 0, ix->names_len - off);
	return z ? z - (ix->names + off) : -1;
}

static int name_ok(const struct shardidx *ix, uint32_t off)
{
	int64_t l = table_str(ix, off);
	const char *s = ix->names + off;

	if (l < 1 || l > SHARDIDX__NAME_MAX || memchr(s, '/', (size_t)l))
		return 0;
	if (s[0] == '.' && (l == 1 || (l == 2 && s[1] == '.')))
		return 0;
	return 1;
}

static int child_range_ok(const struct shardidx *ix, uint32_t dir, uint32_t first, uint32_t n,
			  uint32_t *nsub)
{
	const char *prev = NULL;
	size_t prevlen = 0;

	if (first > ix->nrecs || n > ix->nrecs - first)
		return 0;
	*nsub = 0;
	for (uint32_t j = first; j < first + n; j++) {
		const char *nm = ix->names + ix->recs[j].name_off;
		size_t l = strlen(nm);

		if (ix->recs[j].parent != dir)
			return 0;
		if (prev && shardidx__name_cmp(prev, prevlen, nm, l) >= 0)
			return 0;
		if (ix->recs[j].type == SHARDIDX_DIR)
			(*nsub)++;
		prev = nm;
		prevlen = l;
	}
	return 1;
}

static int validate(struct shardidx *ix)
{
	uint64_t *sp_end = NULL;
	uint32_t *nhard = NULL, nsaved, nflagged = 0, nsub;
	int ok = 0, r = -EBADMSG;

	if (ix->nrecs == UINT32_MAX || ix->root_n > ix->nrecs)
		return -EBADMSG;
	if (ix->names_len && ix->names[ix->names_len - 1] != 0)
		return -EBADMSG;
	if (ix->damage > 0 || ix->damage < -4095)
		return -EBADMSG;

	/* Sparse rows and their segments: ordered, in range, no overflow. */
	sp_end = calloc(ix->nsparse ? ix->nsparse : 1, sizeof(*sp_end));
	nhard = calloc(ix->nrecs ? ix->nrecs : 1, sizeof(*nhard));
	if (!sp_end || !nhard) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t s = 0; s < ix->nsparse; s++) {
		const struct shardidx__sparse *sp = &ix->sparse[s];
		uint64_t lend = 0, send = sp->data_off;

		if (sp->first_seg > ix->nsegs || sp->nseg > ix->nsegs - sp->first_seg)
			goto out;
		for (uint32_t k = sp->first_seg; k < sp->first_seg + sp->nseg; k++) {
			const struct shardidx__seg *g = &ix->segs[k];

			if (!g->len || g->len > (1ull << 62) || g->logical > (1ull << 62) ||
			    g->stream_off > (1ull << 62) || g->logical < lend ||
			    g->stream_off < send)
				goto out;
			lend = g->logical + g->len;
			send = g->stream_off + g->len;
		}
		sp_end[s] = lend;
	}

	/* Names first: the checks below compare names of other entries. */
	for (uint32_t i = 0; i < ix->nrecs; i++)
		if (!name_ok(ix, ix->recs[i].name_off))
			goto out;
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		const struct shardidx__rec *rc = &ix->recs[i];

		if (rc->mode > 07777)
			goto out;
		if ((i < ix->root_n) != (rc->parent == SHARDIDX_NONE))
			goto out;
		if (rc->parent != SHARDIDX_NONE) {
			const struct shardidx__rec *p;

			if (rc->parent >= i)
				goto out;
			p = &ix->recs[rc->parent];
			if (p->type != SHARDIDX_DIR || i < (uint32_t)p->off ||
			    i - (uint32_t)p->off >= p->size)
				goto out;
		}
		switch (rc->type) {
		case SHARDIDX_DIR:
			if (rc->flags & ~SHARDIDX_F_IMPLICIT || rc->size > UINT32_MAX)
				goto out;
			if (!child_range_ok(ix, i, (uint32_t)rc->off, (uint32_t)rc->size, &nsub) ||
			    nsub != rc->off >> 32)
				goto out;
			break;
		case SHARDIDX_SYMLINK:
			if (rc->flags || table_str(ix, rc->off) != (int64_t)rc->size)
				goto out;
			break;
		case SHARDIDX_REG: {
			uint64_t dend;

			if (rc->flags & ~(SHARDIDX_F_SPARSE | SHARDIDX_F_TRUNCATED |
					  SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED))
				goto out;
			if ((rc->flags & SHARDIDX_F_HARDLINK) && (rc->flags & SHARDIDX__F_LINKED))
				goto out;
			if (rc->flags & (SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED))
				nflagged++;
			if (rc->size > (1ull << 62))
				goto out;
			if (rc->flags & SHARDIDX_F_SPARSE) {
				const struct shardidx__sparse *sp;

				if (rc->off >= ix->nsparse || sp_end[rc->off] > rc->size)
					goto out;
				sp = &ix->sparse[rc->off];
				dend = sp->nseg
					   ? ix->segs[sp->first_seg + sp->nseg - 1].stream_off +
						 ix->segs[sp->first_seg + sp->nseg - 1].len
					   : 0;
			} else {
				if (rc->off > (1ull << 62))
					goto out;
				dend = rc->off + rc->size;
			}
			if ((dend > ix->stream_size) != !!(rc->flags & SHARDIDX_F_TRUNCATED))
				goto out;
			break;
		}
		default:
			goto out;
		}
	}
	if (!child_range_ok(ix, SHARDIDX_NONE, 0, ix->root_n, &nsub))
		goto out;

	/* Hardlink rows: sorted, one per flagged entry, canon consistent. */
	if (ix->nlinks != nflagged)
		goto out;
	for (uint32_t k = 0; k < ix->nlinks; k++) {
		const struct shardidx__link *l = &ix->links[k];
		const struct shardidx__rec *rc, *c;

		if (l->entry >= ix->nrecs || (k && ix->links[k - 1].entry >= l->entry))
			goto out;
		rc = &ix->recs[l->entry];
		if (rc->type != SHARDIDX_REG ||
		    !(rc->flags & (SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED)))
			goto out;
		if (rc->flags & SHARDIDX_F_HARDLINK) {
			if (l->val >= ix->nrecs)
				goto out;
			c = &ix->recs[l->val];
			if (c->type != SHARDIDX_REG || !(c->flags & SHARDIDX__F_LINKED) ||
			    c->off != rc->off || c->size != rc->size ||
			    ((c->flags ^ rc->flags) & SHARDIDX_F_SPARSE))
				goto out;
			nhard[l->val]++;
		} else if (l->val < 2) {
			goto out;
		}
	}
	for (uint32_t k = 0; k < ix->nlinks; k++) {
		const struct shardidx__link *l = &ix->links[k];

		if ((ix->recs[l->entry].flags & SHARDIDX__F_LINKED) &&
		    nhard[l->entry] + 1 != l->val)
			goto out;
	}

	/* Samples: the stored count must be what the entries imply. */
	nsaved = ix->nsamples;
	shardidx__count_samples(ix);
	if (ix->nsamples != nsaved)
		goto out;
	ok = 1;
out:
	free(sp_end);
	free(nhard);
	return ok ? 0 : r;
}

static int section(const unsigned char *b, size_t len, int s, uint64_t count, uint64_t elem,
		   const unsigned char **p)
{
	uint64_t off = get64(b + 96 + 16 * s), l = get64(b + 104 + 16 * s);

	if (off < HDR_SIZE || off > len || l > len - off || count > UINT64_MAX / elem ||
	    l != count * elem)
		return -EBADMSG;
	*p = b + off;
	return 0;
}

static void *alloc_n(uint64_t n, size_t elem)
{
	return calloc(n ? (size_t)n : 1, elem);
}

int shardidx_ident(const void *buf, size_t len, const void **ident, size_t *identlen)
{
	const unsigned char *b = buf, *p;

	if (!buf || len < 12 || memcmp(b, MAGIC, 8) != 0)
		return -EBADMSG;
	if (get32(b + 8) != VERSION)
		return -EPROTO;
	if (len < HDR_SIZE || get32(b + 12) != HDR_SIZE || get64(b + 24) != len ||
	    get64(b + 16) != fnv64(b, len) || section(b, len, SEC_IDENT, get32(b + 60), 1, &p))
		return -EBADMSG;
	*ident = p;
	*identlen = get32(b + 60);
	return 0;
}

int shardidx_load(void *buf, size_t len, const void *ident, size_t identlen, struct shardidx **out)
{
	const unsigned char *b = buf, *s[NSECT];
	struct shardidx *ix = NULL;
	int r = -EBADMSG;

	if (!out) {
		free(buf);
		return -EINVAL;
	}
	*out = NULL;
	if (!buf || len < 12 || memcmp(b, MAGIC, 8) != 0)
		goto out;
	if (get32(b + 8) != VERSION) {
		r = -EPROTO;
		goto out;
	}
	if (len < HDR_SIZE || get32(b + 12) != HDR_SIZE || get64(b + 24) != len ||
	    get64(b + 16) != fnv64(b, len))
		goto out;
	if (section(b, len, SEC_IDENT, get32(b + 60), 1, &s[SEC_IDENT]))
		goto out;
	if (get32(b + 60) != identlen || (identlen && memcmp(s[SEC_IDENT], ident, identlen))) {
		r = -ESTALE;
		goto out;
	}

	ix = calloc(1, sizeof(*ix));
	if (!ix) {
		r = -ENOMEM;
		goto out;
	}
	ix->nrecs = get32(b + 32);
	ix->root_n = get32(b + 36);
	ix->names_len = get32(b + 40);
	ix->nsparse = get32(b + 44);
	ix->nsegs = get32(b + 48);
	ix->nlinks = get32(b + 52);
	ix->nsamples = get32(b + 56);
	ix->stream_size = get64(b + 64);
	ix->end_off = get64(b + 72);
	ix->damage = (int32_t)get32(b + 80);
	ix->skipped = get32(b + 84);
	ix->damage_off = get64(b + 88);
	if (section(b, len, SEC_RECS, ix->nrecs, REC_SIZE, &s[SEC_RECS]) ||
	    section(b, len, SEC_NAMES, ix->names_len, 1, &s[SEC_NAMES]) ||
	    section(b, len, SEC_SPARSE, ix->nsparse, SPARSE_SIZE, &s[SEC_SPARSE]) ||
	    section(b, len, SEC_SEGS, ix->nsegs, SEG_SIZE, &s[SEC_SEGS]) ||
	    section(b, len, SEC_LINKS, ix->nlinks, LINK_SIZE, &s[SEC_LINKS]) ||
	    section(b, len, SEC_SAMPLES, 0, 4, &s[SEC_SAMPLES]))
		goto out;

	r = -ENOMEM;
	ix->recs = alloc_n(ix->nrecs, sizeof(*ix->recs));
	ix->names = alloc_n(ix->names_len, 1);
	ix->sparse = alloc_n(ix->nsparse, sizeof(*ix->sparse));
	ix->segs = alloc_n(ix->nsegs, sizeof(*ix->segs));
	ix->links = alloc_n(ix->nlinks, sizeof(*ix->links));
	if (!ix->recs || !ix->names || !ix->sparse || !ix->segs || !ix->links)
		goto out;
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		const unsigned char *p = s[SEC_RECS] + (size_t)i * REC_SIZE;
		struct shardidx__rec *rc = &ix->recs[i];

		rc->off = get64(p);
		rc->size = get64(p + 8);
		rc->name_off = get32(p + 16);
		rc->parent = get32(p + 20);
		rc->mtime = get32(p + 24);
		rc->mode = get16(p + 28);
		rc->type = p[30];
		rc->flags = p[31];
	}
	if (ix->names_len)
		memcpy(ix->names, s[SEC_NAMES], ix->names_len);
	for (uint32_t i = 0; i < ix->nsparse; i++) {
		const unsigned char *p = s[SEC_SPARSE] + (size_t)i * SPARSE_SIZE;

		ix->sparse[i].first_seg = get32(p);
		ix->sparse[i].nseg = get32(p + 4);
		ix->sparse[i].data_off = get64(p + 8);
	}
	for (uint32_t i = 0; i < ix->nsegs; i++) {
		const unsigned char *p = s[SEC_SEGS] + (size_t)i * SEG_SIZE;

		ix->segs[i].logical = get64(p);
		ix->segs[i].stream_off = get64(p + 8);
		ix->segs[i].len = get64(p + 16);
	}
	for (uint32_t i = 0; i < ix->nlinks; i++) {
		const unsigned char *p = s[SEC_LINKS] + (size_t)i * LINK_SIZE;

		ix->links[i].entry = get32(p);
		ix->links[i].val = get32(p + 4);
	}

	r = validate(ix);
	if (r)
		goto out;
	*out = ix;
	ix = NULL;
out:
	shardidx_free(ix);
	free(buf);
	return r;
}
