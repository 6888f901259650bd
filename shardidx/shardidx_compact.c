/*
 * shardidx_compact.c — the compact index file (version 4; 3 is read):
 * front-coded blocks of entries read in place, their encoder, and a load
 * that checks every byte of them once.
 *
 * Format (version 4), all fixed-width integers little-endian:
 *   0   magic "SHRDIDX\0"
 *   8   u32 version (4), u32 header size (240)
 *   16  u64 checksum: FNV-1a 64 of the whole file with these 8 bytes zero
 *   24  u64 file length
 *   32  u32 nrecs, root_n, strs_len, nsparse, nsegs, nlinks, nsamples, identlen
 *   64  u64 stream_size, u64 end_off, i32 damage, u32 skipped, u64 damage_off
 *   96  9 x {u64 offset, u64 length}: ident, heads, blocks, dirs, strs,
 *       sparse, segs, links, skip (each section 8-byte aligned, after the
 *       header). Version 3: the same without skip (8 rows, header 224).
 * heads: one u32 per block of SHARDIDX__BLOCK (16) entries, the offset of
 * the block's first byte in the blocks section (the first is 0, they grow
 * strictly). dirs: one row per directory in entry order, u32 entry,
 * first_child, nchild, nsub (child directories); the child ranges follow
 * each other from root_n in row order and end at nrecs. strs: the symlink
 * targets, NUL-terminated. sparse, segs, links: version 2's rows. skip:
 * the first member left out (shardidx_skipped_first), its bytes without a
 * NUL, at most SHARDIDX_SKIPPED_MAX; empty when none was.
 *
 * An entry in a block (varints are LEB128, zz() is a zigzag varint):
 *   varint shared, varint suffix_len, suffix bytes: the name is the first
 *     `shared` bytes of the previous entry's name in the block (0 at the
 *     block's head, so a head's name is whole) then the suffix;
 *   u8 tf: bits 0-1 type, bit 2 a mode follows, bit 3 an mtime follows,
 *     bit 4 a flags byte follows (else flags 0); other bits 0;
 *   [u8 flags] [varint mode] [zz mtime - previous mtime]: mode and mtime
 *     are the previous entry's in the block (0 at the head) unless given;
 *   REG: varint size, then varint sparse row (SPARSE) or zz(off - pred),
 *     where pred is the previous non-sparse file's off + its size rounded
 *     up to 512 + 512 (0 at the head): a tar's next member, so 0 in the
 *     usual case; SYMLINK: varint strs offset, varint length; DIR: nothing
 *     (its row in dirs).
 * Names are the entries' base names: a WebDataset sample's members share
 * their key, so a name costs its differing tail; offsets cost a byte.
 *
 * Reading: entry i is decoded from its block's head (at most 15 entries
 * before it); a sequential reader decodes each entry once (a cursor; the
 * per-thread cursors of shardidx_entry_get, shardidx_index.c); a
 * lookup is a binary search over the heads of the blocks inside the
 * directory's child range and a scan of one block. Parents come from a
 * binary search of the dirs rows. The blocks, heads and dirs are read with
 * byte loads wherever the buffer lies: the file is read in place at any
 * alignment, on any host (the small sparse/segment/link tables are copied
 * when the buffer is misaligned or the host big-endian).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "disk.h"
#include "shardidx_i.h"

#define B	  SHARDIDX__BLOCK
#define V3_HDR	  224u
#define V4_HDR	  240u
#define DIR_ROW	  16u
#define TF_TYPE	  0x03u
#define TF_MODE	  0x04u
#define TF_MTIME  0x08u
#define TF_FLAGS  0x10u
#define TF_KNOWN  0x1fu
#define ENTRY_MAX (2 * 10 + SHARDIDX__NAME_MAX + 2 + 3 * 10) /* bytes of one entry at most */

_Thread_local uint64_t shardidx__ndecoded;

/* The last load's id (shardidx.id): loads number their indexes from 1. */
static _Atomic uint64_t last_id;

enum { C_IDENT, C_HEADS, C_BLOB, C_DIRS, C_STRS, C_SPARSE, C_SEGS, C_LINKS, C_SKIP, C_NSECT };

static int get_varint(const unsigned char **pp, const unsigned char *end, uint64_t *v)
{
	const unsigned char *p = *pp;
	uint64_t x = 0;

	for (unsigned sh = 0; sh < 64; sh += 7) {
		unsigned char c;

		if (p >= end)
			return -1;
		c = *p++;
		if (sh == 63 && c > 1)
			return -1;
		x |= (uint64_t)(c & 0x7f) << sh;
		if (!(c & 0x80)) {
			*pp = p;
			*v = x;
			return 0;
		}
	}
	return -1;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	*p++ = (unsigned char)v;
	return p;
}

static uint64_t zz(uint64_t v) /* v: a two's complement difference */
{
	return (v << 1) ^ ((v >> 63) ? UINT64_MAX : 0);
}

static uint64_t unzz(uint64_t v)
{
	return (v >> 1) ^ ((v & 1) ? UINT64_MAX : 0);
}

static uint64_t next_pred(uint64_t off, uint64_t size)
{
	return off + ((size + 511) & ~(uint64_t)511) + 512;
}

static uint32_t row_get(const struct shardidx *ix, uint32_t k, int field)
{
	return disk_le32_get(ix->dirs + (size_t)k * DIR_ROW + 4 * (size_t)field);
}

int shardidx__dir_row(const struct shardidx *ix, uint32_t i, uint32_t *first, uint32_t *n,
		      uint32_t *nsub)
{
	uint32_t lo = 0, hi = ix->ndirs;

	while (lo < hi) {
		uint32_t m = lo + (hi - lo) / 2, e = row_get(ix, m, 0);

		if (e == i) {
			*first = row_get(ix, m, 1);
			*n = row_get(ix, m, 2);
			*nsub = row_get(ix, m, 3);
			/* load checked the rows; a rewrite since is caught here */
			if (*first > ix->nrecs || *n > ix->nrecs - *first || *nsub > *n)
				return -1;
			return 1;
		}
		if (e < i)
			lo = m + 1;
		else
			hi = m;
	}
	return 0;
}

/* The directory whose child range holds entry i (i >= root_n): the last
 * row with first_child <= i (empty directories before it share its start). */
/* The last row whose child range starts at or before entry i (>= root_n):
 * its number + 1, 0 when none does. */
static uint32_t parent_row(const struct shardidx *ix, uint32_t i)
{
	uint32_t lo = 0, hi = ix->ndirs;

	while (lo < hi) {
		uint32_t m = lo + (hi - lo) / 2;

		if (row_get(ix, m, 1) <= i)
			lo = m + 1;
		else
			hi = m;
	}
	return lo;
}

uint32_t shardidx__parent_of(const struct shardidx *ix, uint32_t i)
{
	uint32_t k;

	if (i < ix->root_n)
		return SHARDIDX_NONE;
	k = parent_row(ix, i);
	return k ? row_get(ix, k - 1, 0) : SHARDIDX_NONE;
}

/* shardidx__parent_of for c's seek to entry i: from the range c's last
 * search found when i lies in it (the rows' child ranges follow each other
 * in row order, so the row found is the one whose range holds i, up to the
 * next row's start), else searched and that range kept. A row rewritten
 * since the range was kept is seen by the caller's check of the file, as
 * any other byte of a mapped index read earlier. */
static uint32_t cur_parent(struct shardidx__cur *c, uint32_t i)
{
	const struct shardidx *ix = c->ix;
	uint32_t k;

	if (i >= c->par_lo && i < c->par_hi)
		return c->par;
	if (i < ix->root_n) {
		c->par_lo = 0;
		c->par_hi = ix->root_n;
		c->par = SHARDIDX_NONE;
		return SHARDIDX_NONE;
	}
	k = parent_row(ix, i);
	if (!k)
		return SHARDIDX_NONE;
	c->par_lo = row_get(ix, k - 1, 1);
	c->par_hi = k < ix->ndirs ? row_get(ix, k, 1) : ix->nrecs;
	c->par = row_get(ix, k - 1, 0);
	return c->par;
}

/* Decode the entry at c->p into c->rec and c->namebuf (no parent, no
 * directory row). 0, or -1 for bytes that do not decode. */
static int dec_entry(struct shardidx__cur *c)
{
	const unsigned char *p = c->p, *end = c->pend;
	struct shardidx__rec *r = &c->rec;
	uint64_t shared, suf, v;
	unsigned tf, flags = 0;

	shardidx__ndecoded++;
	if (get_varint(&p, end, &shared) || get_varint(&p, end, &suf) || shared > c->name_len ||
	    suf > SHARDIDX__NAME_MAX - shared || (uint64_t)(end - p) < suf)
		return -1;
	memcpy(c->namebuf + shared, p, (size_t)suf);
	p += suf;
	c->name_len = (size_t)(shared + suf);
	c->namebuf[c->name_len] = 0;
	/* load checked the name; a rewrite since must not make it empty, . or
	 * .. (a byte rewritten inside it is another name, as any other field:
	 * the caller's check of the file's change answers for those) */
	if (!c->name_len || (c->namebuf[0] == '.' && c->name_len <= 2 &&
			     (c->name_len == 1 || c->namebuf[1] == '.')))
		return -1;
	if (p >= end)
		return -1;
	tf = *p++;
	if (tf & ~TF_KNOWN)
		return -1;
	if (tf & TF_FLAGS) {
		if (p >= end || !*p)
			return -1;
		flags = *p++;
	}
	if (tf & TF_MODE) {
		if (get_varint(&p, end, &v) || v > 07777)
			return -1;
		c->mode = (uint32_t)v;
	}
	if (tf & TF_MTIME) {
		uint64_t m;

		if (get_varint(&p, end, &v))
			return -1;
		m = c->mtime + unzz(v);
		if (m > UINT32_MAX)
			return -1;
		c->mtime = (uint32_t)m;
	}
	memset(r, 0, sizeof(*r));
	r->type = (uint8_t)(tf & TF_TYPE);
	r->flags = (uint8_t)flags;
	r->mode = (uint16_t)c->mode;
	r->mtime = c->mtime;
	switch (r->type) {
	case SHARDIDX_REG:
		if (get_varint(&p, end, &r->size) || get_varint(&p, end, &v))
			return -1;
		if (flags & SHARDIDX_F_SPARSE) {
			r->off = v;
		} else {
			r->off = c->pred + unzz(v);
			c->pred = next_pred(r->off, r->size);
		}
		break;
	case SHARDIDX_SYMLINK:
		if (get_varint(&p, end, &r->off) || get_varint(&p, end, &r->size))
			return -1;
		break;
	case SHARDIDX_DIR:
		break;
	default:
		return -1;
	}
	c->p = p;
	return 0;
}

void shardidx__cur_init(struct shardidx__cur *c, const struct shardidx *ix)
{
	c->ix = ix;
	c->i = SHARDIDX_NONE;
	c->name = c->namebuf;
	c->name_len = 0;
	c->p = c->pend = NULL;
	c->par_lo = c->par_hi = 0;
	c->fin = 0;
}

/* Start decoding block b. 0, or -1 when its bounds are wrong. */
static int block_start(struct shardidx__cur *c, uint32_t b)
{
	const struct shardidx *ix = c->ix;
	uint64_t s = disk_le32_get(ix->heads + 4 * (size_t)b);
	uint64_t e =
	    b + 1 < ix->nblocks ? disk_le32_get(ix->heads + 4 * (size_t)b + 4) : ix->blob_len;

	if (s > e || e > ix->blob_len)
		return -1;
	c->p = ix->blob + s;
	c->pend = ix->blob + e;
	c->name_len = 0;
	c->mode = 0;
	c->mtime = 0;
	c->pred = 0;
	return 0;
}

/* Entry i of a compact index decoded into c: its name and record, but not
 * yet its parent and directory row, nor their checks (shardidx__cur_seek
 * finishes it: c->fin). 0, or -1 with c emptied for bytes that do not
 * decode. A lookup's scan compares the names of a block's entries so and
 * finishes only the one it found. */
static int cur_decode(struct shardidx__cur *c, uint32_t i)
{
	uint32_t j;

	if (c->i == i)
		return 0;
	c->fin = 0;
	if (c->i == SHARDIDX_NONE || i < c->i || i / B != c->i / B) {
		if (block_start(c, i / B) < 0)
			goto bad;
		j = i / B * B;
	} else {
		j = c->i + 1; /* further on in the block c decoded: go on from there */
	}
	for (; j <= i; j++)
		if (dec_entry(c) < 0)
			goto bad;
	c->i = i;
	c->name = c->namebuf;
	return 0;
bad:
	c->i = SHARDIDX_NONE;
	c->name = c->namebuf;
	c->name_len = 0;
	return -1;
}

int shardidx__cur_seek(struct shardidx__cur *c, uint32_t i)
{
	const struct shardidx *ix = c->ix;
	uint32_t first, n, nsub;
	int row;

	if (i >= ix->nrecs)
		return -EINVAL;
	if (!ix->compact) {
		c->rec = ix->recs[i];
		c->name = shardidx__flat_name(ix, &c->rec, &c->name_len);
		if (!c->name || !shardidx__rec_in_bounds(ix, i, &c->rec))
			goto bad;
		c->i = i;
		return 0;
	}
	if (c->i == i && c->fin)
		return 0;
	if (cur_decode(c, i) < 0)
		return -EBADMSG;
	c->rec.parent = cur_parent(c, i);
	row = c->rec.type == SHARDIDX_DIR ? shardidx__dir_row(ix, i, &first, &n, &nsub) : 0;
	if (row > 0) {
		c->rec.off = first | (uint64_t)nsub << 32;
		c->rec.size = n;
	}
	if (row < 0 || !shardidx__rec_in_bounds(ix, i, &c->rec))
		goto bad;
	c->fin = 1;
	return 0;
bad:
	c->i = SHARDIDX_NONE;
	c->name = c->namebuf;
	c->name_len = 0;
	return -EBADMSG;
}

/* Block b's head name against name[0..len). */
static int head_cmp(const struct shardidx *ix, uint32_t b, const char *name, size_t len)
{
	struct shardidx__cur c;
	const unsigned char *p;
	uint64_t shared, l;

	shardidx__cur_init(&c, ix);
	if (block_start(&c, b) < 0)
		return 1;
	p = c.p;
	if (get_varint(&p, c.pend, &shared) || get_varint(&p, c.pend, &l) ||
	    l > (uint64_t)(c.pend - p))
		return 1;
	return shardidx__name_cmp((const char *)p, (size_t)l, name, len);
}

int shardidx__lookup_compact(const struct shardidx *ix, uint32_t lo, uint32_t hi, const char *name,
			     size_t len,
			     struct shardidx__cur *(*take)(const struct shardidx *ix, uint32_t i))
{
	struct shardidx__cur *c;
	uint32_t a, z, b, start, end;

	if (lo >= hi)
		return -ENOENT;
	/* the last block inside (lo, hi) whose head is <= name, else lo's */
	a = lo / B + 1;
	z = (hi - 1) / B + 1;
	while (a < z) {
		uint32_t m = a + (z - a) / 2;

		if (head_cmp(ix, m, name, len) <= 0)
			a = m + 1;
		else
			z = m;
	}
	b = a - 1;
	start = b * B > lo ? b * B : lo;
	end = (b + 1) * B < hi ? (b + 1) * B : hi;
	c = take(ix, start);
	for (uint32_t j = start; j < end; j++) {
		int r;

		if (j >= ix->nrecs || cur_decode(c, j) < 0)
			return -ENOENT;
		r = shardidx__name_cmp(c->name, c->name_len, name, len);
		if (r == 0) /* found: its parent and row set and checked */
			return shardidx__cur_seek(c, j) < 0 ? -ENOENT : (int)j;
		if (r > 0)
			break;
	}
	return -ENOENT;
}

/* ---- save ------------------------------------------------------------------ */

struct enc {
	unsigned char *blob; /* NULL: count only */
	uint64_t blob_len;
	unsigned char *heads, *dirs;
	char *strs;
	uint64_t strs_len;
	uint32_t ndirs;
	uint32_t running; /* next directory's first child */
};

/* Encode every entry of ix (into e's buffers when they are set). */
static int encode(const struct shardidx *ix, struct enc *e)
{
	struct shardidx__cur c;
	char prev[SHARDIDX__NAME_MAX + 1];
	size_t prevlen = 0;
	uint32_t mode = 0, mtime = 0;
	uint64_t pred = 0;

	shardidx__cur_init(&c, ix);
	e->blob_len = 0;
	e->strs_len = 0;
	e->ndirs = 0;
	e->running = ix->root_n;
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		unsigned char tmp[ENTRY_MAX], *p = tmp;
		const struct shardidx__rec *r;
		size_t shared = 0;
		unsigned tf;

		if (shardidx__cur_seek(&c, i) < 0)
			return -EINVAL;
		r = &c.rec;
		if (i % B == 0) {
			if (e->heads) {
				if (e->blob_len > UINT32_MAX)
					return -ENOMEM;
				disk_le32_put(e->heads + 4 * (size_t)(i / B),
					      (uint32_t)e->blob_len);
			}
			prevlen = 0;
			mode = 0;
			mtime = 0;
			pred = 0;
		}
		while (shared < prevlen && shared < c.name_len && prev[shared] == c.name[shared])
			shared++;
		p = put_varint(p, shared);
		p = put_varint(p, c.name_len - shared);
		memcpy(p, c.name + shared, c.name_len - shared);
		p += c.name_len - shared;
		memcpy(prev, c.name, c.name_len);
		prevlen = c.name_len;
		tf = r->type | (r->mode != mode ? TF_MODE : 0) |
		     (r->mtime != mtime ? TF_MTIME : 0) | (r->flags ? TF_FLAGS : 0);
		*p++ = (unsigned char)tf;
		if (r->flags)
			*p++ = r->flags;
		if (r->mode != mode)
			p = put_varint(p, r->mode);
		if (r->mtime != mtime)
			p = put_varint(p, zz((uint64_t)r->mtime - mtime));
		mode = r->mode;
		mtime = r->mtime;
		if (r->type == SHARDIDX_REG) {
			p = put_varint(p, r->size);
			if (r->flags & SHARDIDX_F_SPARSE) {
				p = put_varint(p, r->off);
			} else {
				p = put_varint(p, zz(r->off - pred));
				pred = next_pred(r->off, r->size);
			}
		} else if (r->type == SHARDIDX_SYMLINK) {
			const char *t = ix->names + r->off;

			p = put_varint(p, e->strs_len);
			p = put_varint(p, r->size);
			if (e->strs)
				memcpy(e->strs + e->strs_len, t, (size_t)r->size + 1);
			e->strs_len += r->size + 1;
		} else {
			if (e->dirs) {
				unsigned char *d = e->dirs + (size_t)e->ndirs * DIR_ROW;

				disk_le32_put(d, i);
				disk_le32_put(d + 4, e->running);
				disk_le32_put(d + 8, (uint32_t)r->size);
				disk_le32_put(d + 12, (uint32_t)(r->off >> 32));
			}
			e->ndirs++;
			e->running += (uint32_t)r->size;
		}
		if (e->blob)
			memcpy(e->blob + e->blob_len, tmp, (size_t)(p - tmp));
		e->blob_len += (uint64_t)(p - tmp);
	}
	return e->strs_len > UINT32_MAX ? -ENOMEM : 0;
}

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

int shardidx__save_compact(const struct shardidx *ix, const void *ident, size_t identlen,
			   void **buf, size_t *len)
{
	uint64_t sec_len[C_NSECT], sec_off[C_NSECT], total = V4_HDR;
	uint32_t nblocks = (uint32_t)((ix->nrecs + (uint64_t)B - 1) / B);
	struct enc e = {0};
	unsigned char *out;
	int r;

	r = encode(ix, &e); /* sizes first: the file is allocated once */
	if (r < 0)
		return r;
	sec_len[C_IDENT] = identlen;
	sec_len[C_HEADS] = (uint64_t)nblocks * 4;
	sec_len[C_BLOB] = e.blob_len;
	sec_len[C_DIRS] = (uint64_t)e.ndirs * DIR_ROW;
	sec_len[C_STRS] = e.strs_len;
	sec_len[C_SPARSE] = (uint64_t)ix->nsparse * 16;
	sec_len[C_SEGS] = (uint64_t)ix->nsegs * 24;
	sec_len[C_LINKS] = (uint64_t)ix->nlinks * 8;
	sec_len[C_SKIP] = ix->skip_first ? strlen(ix->skip_first) : 0;
	for (int s = 0; s < C_NSECT; s++) {
		sec_off[s] = total;
		total = align8(total + sec_len[s]);
	}
	if (total > SIZE_MAX)
		return -ENOMEM;
	out = calloc(1, (size_t)total);
	if (!out)
		return -ENOMEM;
	e.blob = out + sec_off[C_BLOB];
	e.heads = out + sec_off[C_HEADS];
	e.dirs = out + sec_off[C_DIRS];
	e.strs = (char *)out + sec_off[C_STRS];
	if (sec_len[C_SKIP])
		memcpy(out + sec_off[C_SKIP], ix->skip_first, (size_t)sec_len[C_SKIP]);
	r = encode(ix, &e);
	if (r < 0) {
		free(out);
		return r;
	}
	shardidx__put_common(out, ix,
			     &(struct shardidx__head){.version = 4,
						      .hdr_size = V4_HDR,
						      .names_len = (uint32_t)e.strs_len,
						      .total = total,
						      .sec_off = sec_off,
						      .sec_len = sec_len,
						      .nsect = C_NSECT,
						      .ident_off = sec_off[C_IDENT],
						      .sparse_off = sec_off[C_SPARSE],
						      .segs_off = sec_off[C_SEGS],
						      .links_off = sec_off[C_LINKS]},
			     ident, identlen);
	disk_le64_put(out + 16, shardidx__file_sum(out, (size_t)total));
	*buf = out;
	*len = (size_t)total;
	return 0;
}

/* ---- load ------------------------------------------------------------------ */

static int section(const unsigned char *b, size_t len, int s, uint64_t count, uint64_t elem,
		   const unsigned char **p, uint64_t *l_out)
{
	uint64_t off = disk_le64_get(b + 96 + 16 * s), l = disk_le64_get(b + 104 + 16 * s);

	/* after the header: its size (224 or 240) was checked against the version */
	if (off < disk_le32_get(b + 12) || (off & 7) || off > len || l > len - off ||
	    (elem && (count > UINT64_MAX / elem || l != count * elem)))
		return -1;
	*p = b + off;
	if (l_out)
		*l_out = l;
	return 0;
}

/* What a link row's entry held (for the checks after the scan). */
struct link_seen {
	uint64_t off, size;
	uint8_t flags;
	uint32_t nhard;
};

/* The order of directories and their child ranges. 1 when valid. */
static int dirs_ok(const struct shardidx *ix)
{
	uint64_t running = ix->root_n;

	for (uint32_t k = 0; k < ix->ndirs; k++) {
		uint32_t e = row_get(ix, k, 0), f = row_get(ix, k, 1), n = row_get(ix, k, 2);

		if (e >= ix->nrecs || (k && row_get(ix, k - 1, 0) >= e) || f != running ||
		    n > ix->nrecs - running || row_get(ix, k, 3) > n || (n && e >= f))
			return 0;
		running += n;
	}
	return running == ix->nrecs;
}

/* Block heads: the first is 0, they grow strictly inside the blocks. */
static int heads_ok(const struct shardidx *ix)
{
	uint64_t prev = 0;

	if (ix->nblocks != (ix->nrecs + (uint64_t)B - 1) / B || (!ix->nrecs) != (!ix->blob_len))
		return 0;
	for (uint32_t b = 0; b < ix->nblocks; b++) {
		uint64_t h = disk_le32_get(ix->heads + 4 * (size_t)b);

		if ((b == 0 && h) || (b && h <= prev) || h >= ix->blob_len)
			return 0;
		prev = h;
	}
	return 1;
}

struct scan {
	uint32_t range_end, range_parent, range_nsub, nsub, row, dk, lk, nflagged, nsamples;
	char prev[SHARDIDX__NAME_MAX + 1];
	size_t prevlen;
	/* the previous entry, for samples */
	uint32_t s_parent;
	int s_have, s_dir;
	char key[SHARDIDX__NAME_MAX + 1];
	size_t keylen;
};

/* Entering entry i: a new child range starts when the last one ended. 1
 * when valid. */
static int scan_range(const struct shardidx *ix, struct scan *s, uint32_t i)
{
	while (i == s->range_end) {
		if (s->range_nsub != SHARDIDX_NONE && s->nsub != s->range_nsub)
			return 0;
		while (s->row < ix->ndirs && !row_get(ix, s->row, 2))
			s->row++;
		if (s->row >= ix->ndirs)
			return 0;
		s->range_parent = row_get(ix, s->row, 0);
		s->range_end = row_get(ix, s->row, 1) + row_get(ix, s->row, 2);
		s->range_nsub = row_get(ix, s->row, 3);
		s->row++;
		s->nsub = 0;
		s->prevlen = 0;
	}
	return 1;
}

/* Entry c->i in the sequential scan: type, name, order, fields. 1 when valid. */
static int scan_entry(const struct shardidx *ix, struct scan *s, const struct shardidx__cur *c,
		      const uint64_t *sp_end, struct link_seen *seen)
{
	const struct shardidx__rec *r = &c->rec;
	uint32_t i = c->i, nflag = s->nflagged;
	int is_dir = s->dk < ix->ndirs && row_get(ix, s->dk, 0) == i;
	size_t kl;

	if (!scan_range(ix, s, i) || r->parent != s->range_parent ||
	    is_dir != (r->type == SHARDIDX_DIR) || !shardidx__name_ok(c->name, c->name_len) ||
	    (s->prevlen && shardidx__name_cmp(s->prev, s->prevlen, c->name, c->name_len) >= 0))
		return 0;
	memcpy(s->prev, c->name, c->name_len);
	s->prevlen = c->name_len;
	if (is_dir) {
		s->dk++;
		s->nsub++;
		if (r->flags & ~SHARDIDX_F_IMPLICIT)
			return 0;
	} else if (r->type == SHARDIDX_SYMLINK) {
		const char *z;

		if (r->flags || r->off >= ix->names_len)
			return 0;
		z = memchr(ix->names + r->off, 0, ix->names_len - r->off);
		if (!z || (uint64_t)(z - (ix->names + r->off)) != r->size)
			return 0;
	} else if (!shardidx__reg_ok(ix, r, sp_end, &s->nflagged)) {
		return 0;
	}
	if (s->nflagged != nflag) {
		if (s->lk >= ix->nlinks || ix->links[s->lk].entry != i)
			return 0;
		seen[s->lk].off = r->off;
		seen[s->lk].size = r->size;
		seen[s->lk].flags = r->flags;
		s->lk++;
	}
	/* samples: as shardidx_index.c's sample_starts */
	kl = shardidx__key_len(c->name);
	if (r->type != SHARDIDX_DIR && !(s->s_have && !s->s_dir && s->s_parent == r->parent &&
					 s->keylen == kl && memcmp(s->key, c->name, kl) == 0))
		s->nsamples++;
	s->s_have = 1;
	s->s_dir = r->type == SHARDIDX_DIR;
	s->s_parent = r->parent;
	memcpy(s->key, c->name, kl);
	s->keylen = kl;
	return 1;
}

static int link_row(const struct shardidx *ix, uint32_t entry)
{
	const struct shardidx__link *l = shardidx__link_find(ix, entry);

	return l ? (int)(l - ix->links) : -1;
}

/* Hardlink rows against what the scan saw of their entries. 1 when valid. */
static int links_ok(const struct shardidx *ix, struct link_seen *seen)
{
	for (uint32_t k = 0; k < ix->nlinks; k++) {
		const struct shardidx__link *l = &ix->links[k];
		int c;

		if (!(seen[k].flags & SHARDIDX_F_HARDLINK)) {
			if (l->val < 2)
				return 0;
			continue;
		}
		c = l->val < ix->nrecs ? link_row(ix, l->val) : -1;
		if (c < 0 || !(seen[c].flags & SHARDIDX__F_LINKED) || seen[c].off != seen[k].off ||
		    seen[c].size != seen[k].size ||
		    ((seen[c].flags ^ seen[k].flags) & SHARDIDX_F_SPARSE))
			return 0;
		seen[c].nhard++;
	}
	for (uint32_t k = 0; k < ix->nlinks; k++)
		if ((seen[k].flags & SHARDIDX__F_LINKED) && seen[k].nhard + 1 != ix->links[k].val)
			return 0;
	return 1;
}

/* Every byte of a compact index, once: 0, -EBADMSG or -ENOMEM. Scratch:
 * a few words per sparse member and per hardlink row, freed here. */
static int validate(struct shardidx *ix)
{
	struct shardidx__cur c;
	struct scan *s = NULL;
	struct link_seen *seen = NULL;
	uint64_t *sp_end = NULL;
	int r = -EBADMSG;

	if (ix->nrecs == UINT32_MAX || ix->root_n > ix->nrecs || ix->ndirs > ix->nrecs ||
	    (ix->names_len && ix->names[ix->names_len - 1] != 0) || ix->damage > 0 ||
	    ix->damage < -4095 || !heads_ok(ix) || !dirs_ok(ix))
		return -EBADMSG;
	s = calloc(1, sizeof(*s));
	sp_end = calloc(ix->nsparse ? ix->nsparse : 1, sizeof(*sp_end));
	seen = calloc(ix->nlinks ? ix->nlinks : 1, sizeof(*seen));
	if (!s || !sp_end || !seen) {
		r = -ENOMEM;
		goto out;
	}
	if (!shardidx__sparse_ok(ix, sp_end))
		goto out;
	for (uint32_t k = 1; k < ix->nlinks; k++)
		if (ix->links[k - 1].entry >= ix->links[k].entry)
			goto out;
	s->range_end = ix->root_n;
	s->range_parent = SHARDIDX_NONE;
	s->range_nsub = SHARDIDX_NONE; /* the top level's: not stored */
	shardidx__cur_init(&c, ix);
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		if (shardidx__cur_seek(&c, i) < 0 || !scan_entry(ix, s, &c, sp_end, seen))
			goto out;
		/* a block's bytes hold exactly its entries */
		if ((i + 1) % B == 0 || i + 1 == ix->nrecs) {
			if (c.p != c.pend)
				goto out;
		}
	}
	if (s->range_end != ix->nrecs ||
	    (s->range_nsub != SHARDIDX_NONE && s->nsub != s->range_nsub) || s->lk != ix->nlinks ||
	    !links_ok(ix, seen) || s->nsamples != ix->nsamples)
		goto out;
	r = 0;
out:
	free(s);
	free(sp_end);
	free(seen);
	return r;
}

int shardidx__load_compact(struct shardidx *ix, const unsigned char *b, size_t len)
{
	const unsigned char *sec[C_NSECT];
	uint64_t dirs_len, blob_len;

	ix->nblocks = (uint32_t)((ix->nrecs + (uint64_t)B - 1) / B);
	if (section(b, len, C_HEADS, ix->nblocks, 4, &sec[C_HEADS], NULL) ||
	    section(b, len, C_BLOB, 0, 0, &sec[C_BLOB], &blob_len) ||
	    section(b, len, C_DIRS, 0, 0, &sec[C_DIRS], &dirs_len) || dirs_len % DIR_ROW ||
	    section(b, len, C_STRS, ix->names_len, 1, &sec[C_STRS], NULL) ||
	    section(b, len, C_SPARSE, ix->nsparse, 16, &sec[C_SPARSE], NULL) ||
	    section(b, len, C_SEGS, ix->nsegs, 24, &sec[C_SEGS], NULL) ||
	    section(b, len, C_LINKS, ix->nlinks, 8, &sec[C_LINKS], NULL))
		return -EBADMSG;
	ix->compact = 1;
	ix->heads = sec[C_HEADS];
	ix->blob = sec[C_BLOB];
	ix->blob_len = blob_len;
	ix->dirs = sec[C_DIRS];
	ix->ndirs = (uint32_t)(dirs_len / DIR_ROW);
	if (dirs_len / DIR_ROW > UINT32_MAX)
		return -EBADMSG;
	ix->names = (char *)(uintptr_t)sec[C_STRS];
	if (disk_le32_get(b + 8) == 4) {
		/* the first member left out: its bytes, no NUL, only when
		 * members were left out (a version 3 file has none: loaded only
		 * when skipped is 0, shardidx_save.c) */
		uint64_t l;

		if (section(b, len, C_SKIP, 0, 0, &sec[C_SKIP], &l) || l > SHARDIDX_SKIPPED_MAX ||
		    (l && !ix->skipped) || memchr(sec[C_SKIP], 0, (size_t)l))
			return -EBADMSG;
		if (l) {
			ix->skip_first = malloc((size_t)l + 1);
			if (!ix->skip_first)
				return -ENOMEM;
			memcpy(ix->skip_first, sec[C_SKIP], (size_t)l);
			ix->skip_first[l] = '\0';
		}
	}
	ix->in_place = 1;
	ix->buf_len = len;
	if (SHARDIDX__IN_PLACE_HOST && ((uintptr_t)b & 7) == 0) {
		ix->sparse = (struct shardidx__sparse *)(uintptr_t)sec[C_SPARSE];
		ix->segs = (struct shardidx__seg *)(uintptr_t)sec[C_SEGS];
		ix->links = (struct shardidx__link *)(uintptr_t)sec[C_LINKS];
	} else {
		int r = shardidx__decode_tables(ix, sec[C_SPARSE], sec[C_SEGS], sec[C_LINKS]);

		if (r < 0)
			return r;
	}
	ix->id = atomic_fetch_add_explicit(&last_id, 1, memory_order_relaxed) + 1;
	return validate(ix);
}
