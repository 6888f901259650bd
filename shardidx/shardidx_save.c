/*
 * shardidx_save.c — the index file format: save, and a load that trusts
 * nothing.
 *
 * Three versions are read: 4, the compact file every save writes
 * (shardidx_compact.c has its layout), 3, the same without the first
 * member left out, and 2, the fixed-width records of earlier releases,
 * read in place as they are (a cache directory of an older release keeps
 * working; it is not rewritten). Versions 2 and 3 cannot name the first
 * member left out: a file of theirs that counts members left out is
 * -EPROTO (built again; check_file). SHARDFS_INDEX_VERSION=2 in the
 * environment makes save write version 2 for an index without members
 * left out: a hook for the benchmark that measures both side by side
 * (tests/bench/index_bench.sh), not an option.
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
 * reading a loaded index can never go out of bounds or loop forever. On a
 * little-endian host the sections are the in-memory arrays (shardidx_i.h):
 * load reads them in place, in the caller's buffer — the daemon's is a
 * read-only mapping of the cache file, so an index costs no heap; a
 * misaligned buffer or a big-endian host decodes them into fresh arrays.
 *
 * Non-goals: no file I/O (the caller writes to a temp file and renames).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disk.h"
#include "shardidx_i.h"

#define MAGIC	    "SHRDIDX"
#define VERSION	    2u /* 2: the sample table is no longer stored */
#define VERSION_C   3u /* 3: compact (shardidx_compact.c) */
#define VERSION_S   4u /* 4: compact with the first member left out */
#define HDR_SIZE    208u
#define HDR_SIZE_C  224u
#define HDR_SIZE_S  240u
#define NSECT	    7
#define REC_SIZE    32u
#define SPARSE_SIZE 16u
#define SEG_SIZE    24u
#define LINK_SIZE   8u

enum { SEC_IDENT, SEC_RECS, SEC_NAMES, SEC_SPARSE, SEC_SEGS, SEC_LINKS, SEC_SAMPLES };

/* The checksum: FNV-1a 64 of the whole file, its own 8 bytes read as zeros. */
uint64_t shardidx__file_sum(const unsigned char *p, size_t len)
{
	static const unsigned char zero[8];
	uint64_t h = disk_fnv64(p, 16);

	h = disk_fnv64_update(h, zero, 8);
	return disk_fnv64_update(h, p + 24, len - 24);
}

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

/* Version 2: records and a name table, from any index (built, or loaded
 * from either version: the cursor decodes its entries). */
void shardidx__put_common(unsigned char *out, const struct shardidx *ix,
			  const struct shardidx__head *h, const void *ident, size_t identlen)
{
	unsigned char *p;

	memcpy(out, MAGIC, 8);
	disk_le32_put(out + 8, h->version);
	disk_le32_put(out + 12, h->hdr_size);
	disk_le64_put(out + 24, h->total);
	disk_le32_put(out + 32, ix->nrecs);
	disk_le32_put(out + 36, ix->root_n);
	disk_le32_put(out + 40, h->names_len);
	disk_le32_put(out + 44, ix->nsparse);
	disk_le32_put(out + 48, ix->nsegs);
	disk_le32_put(out + 52, ix->nlinks);
	disk_le32_put(out + 56, ix->nsamples);
	disk_le32_put(out + 60, (uint32_t)identlen);
	disk_le64_put(out + 64, ix->stream_size);
	disk_le64_put(out + 72, ix->end_off);
	disk_le32_put(out + 80, (uint32_t)ix->damage);
	disk_le32_put(out + 84, ix->skipped);
	disk_le64_put(out + 88, ix->damage_off);
	for (int s = 0; s < h->nsect; s++) {
		disk_le64_put(out + 96 + 16 * s, h->sec_off[s]);
		disk_le64_put(out + 104 + 16 * s, h->sec_len[s]);
	}
	if (identlen)
		memcpy(out + h->ident_off, ident, identlen);
	p = out + h->sparse_off;
	for (uint32_t i = 0; i < ix->nsparse; i++, p += SPARSE_SIZE) {
		disk_le32_put(p, ix->sparse[i].first_seg);
		disk_le32_put(p + 4, ix->sparse[i].nseg);
		disk_le64_put(p + 8, ix->sparse[i].data_off);
	}
	p = out + h->segs_off;
	for (uint32_t i = 0; i < ix->nsegs; i++, p += SEG_SIZE) {
		disk_le64_put(p, ix->segs[i].logical);
		disk_le64_put(p + 8, ix->segs[i].stream_off);
		disk_le64_put(p + 16, ix->segs[i].len);
	}
	p = out + h->links_off;
	for (uint32_t i = 0; i < ix->nlinks; i++, p += LINK_SIZE) {
		disk_le32_put(p, ix->links[i].entry);
		disk_le32_put(p + 4, ix->links[i].val);
	}
}

static int save_v2(const struct shardidx *ix, const void *ident, size_t identlen, void **buf,
		   size_t *len)
{
	struct shardidx__cur c;
	uint64_t names_len = 0;
	char *names;
	uint64_t sec_len[NSECT], sec_off[NSECT], total = HDR_SIZE;
	unsigned char *out, *p;

	if (!ix || !buf || !len || (identlen && !ident) || identlen > UINT32_MAX)
		return -EINVAL;
	sec_len[SEC_IDENT] = identlen;
	sec_len[SEC_RECS] = (uint64_t)ix->nrecs * REC_SIZE;
	shardidx__cur_init(&c, ix);
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		if (shardidx__cur_seek(&c, i) < 0)
			return -EINVAL;
		names_len += c.name_len + 1;
		if (c.rec.type == SHARDIDX_SYMLINK)
			names_len += c.rec.size + 1;
	}
	if (names_len > UINT32_MAX)
		return -ENOMEM;
	sec_len[SEC_NAMES] = names_len;
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

	shardidx__put_common(out, ix,
			     &(struct shardidx__head){.version = VERSION,
						      .hdr_size = HDR_SIZE,
						      .names_len = (uint32_t)names_len,
						      .total = total,
						      .sec_off = sec_off,
						      .sec_len = sec_len,
						      .nsect = NSECT,
						      .ident_off = sec_off[SEC_IDENT],
						      .sparse_off = sec_off[SEC_SPARSE],
						      .segs_off = sec_off[SEC_SEGS],
						      .links_off = sec_off[SEC_LINKS]},
			     ident, identlen);
	p = out + sec_off[SEC_RECS];
	names = (char *)out + sec_off[SEC_NAMES];
	names_len = 0;
	for (uint32_t i = 0; i < ix->nrecs; i++, p += REC_SIZE) {
		const struct shardidx__rec *r = &c.rec;
		uint64_t off;

		if (shardidx__cur_seek(&c, i) < 0) {
			free(out);
			return -EINVAL;
		}
		off = r->off;
		memcpy(names + names_len, c.name, c.name_len + 1);
		disk_le32_put(p + 16, (uint32_t)names_len);
		names_len += c.name_len + 1;
		if (r->type == SHARDIDX_SYMLINK) {
			memcpy(names + names_len, ix->names + r->off, (size_t)r->size + 1);
			off = names_len;
			names_len += r->size + 1;
		}
		disk_le64_put(p, off);
		disk_le64_put(p + 8, r->size);
		disk_le32_put(p + 20, r->parent);
		disk_le32_put(p + 24, r->mtime);
		disk_le16_put(p + 28, r->mode);
		p[30] = r->type;
		p[31] = r->flags;
	}

	disk_le64_put(out + 16, shardidx__file_sum(out, (size_t)total));
	*buf = out;
	*len = (size_t)total;
	return 0;
}

int shardidx_save(const struct shardidx *ix, const void *ident, size_t identlen, void **buf,
		  size_t *len)
{
	const char *v = getenv("SHARDFS_INDEX_VERSION");

	if (!ix || !buf || !len || (identlen && !ident) || identlen > UINT32_MAX)
		return -EINVAL;
	/* version 2 cannot say which member was left out: such an index is
	 * saved as version 4 whatever the hook says */
	if (v && strcmp(v, "2") == 0 && ix->skipped == 0)
		return save_v2(ix, ident, identlen, buf, len);
	return shardidx__save_compact(ix, ident, identlen, buf, len);
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

int shardidx__name_ok(const char *s, size_t l)
{
	if (l < 1 || l > SHARDIDX__NAME_MAX || memchr(s, '/', l) || memchr(s, 0, l))
		return 0;
	if (s[0] == '.' && (l == 1 || (l == 2 && s[1] == '.')))
		return 0;
	return 1;
}

static int name_ok(const struct shardidx *ix, uint32_t off)
{
	int64_t l = table_str(ix, off);

	return l >= 0 && shardidx__name_ok(ix->names + off, (size_t)l);
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

/* Sparse rows and their segments: ordered, in range, no overflow; each
 * row's logical end goes to sp_end[row]. 1 when valid. */
int shardidx__sparse_ok(const struct shardidx *ix, uint64_t *sp_end)
{
	for (uint32_t s = 0; s < ix->nsparse; s++) {
		const struct shardidx__sparse *sp = &ix->sparse[s];
		uint64_t lend = 0, send = sp->data_off;

		if (sp->first_seg > ix->nsegs || sp->nseg > ix->nsegs - sp->first_seg)
			return 0;
		for (uint32_t k = sp->first_seg; k < sp->first_seg + sp->nseg; k++) {
			const struct shardidx__seg *g = &ix->segs[k];

			if (!g->len || g->len > (1ull << 62) || g->logical > (1ull << 62) ||
			    g->stream_off > (1ull << 62) || g->logical < lend ||
			    g->stream_off < send)
				return 0;
			lend = g->logical + g->len;
			send = g->stream_off + g->len;
		}
		sp_end[s] = lend;
	}
	return 1;
}

/* A regular file's record: flags, size, and data that ends past the stream
 * exactly when it is flagged truncated. Counts hardlink-flagged records in
 * *nflagged. 1 when valid. */
int shardidx__reg_ok(const struct shardidx *ix, const struct shardidx__rec *rc,
		     const uint64_t *sp_end, uint32_t *nflagged)
{
	uint64_t dend;

	if (rc->flags &
	    ~(SHARDIDX_F_SPARSE | SHARDIDX_F_TRUNCATED | SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED))
		return 0;
	if ((rc->flags & SHARDIDX_F_HARDLINK) && (rc->flags & SHARDIDX__F_LINKED))
		return 0;
	if (rc->flags & (SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED))
		(*nflagged)++;
	if (rc->size > (1ull << 62))
		return 0;
	if (rc->flags & SHARDIDX_F_SPARSE) {
		const struct shardidx__sparse *sp;
		const struct shardidx__seg *g;

		if (rc->off >= ix->nsparse || sp_end[rc->off] > rc->size)
			return 0;
		sp = &ix->sparse[rc->off];
		g = sp->nseg ? &ix->segs[sp->first_seg + sp->nseg - 1] : NULL;
		dend = g ? g->stream_off + g->len : 0;
	} else {
		if (rc->off > (1ull << 62))
			return 0;
		dend = rc->off + rc->size;
	}
	return (dend > ix->stream_size) == !!(rc->flags & SHARDIDX_F_TRUNCATED);
}

/* Record i: mode, its place in the tree, and what its type says of off,
 * size and flags. 1 when valid. */
static int rec_ok(const struct shardidx *ix, uint32_t i, const uint64_t *sp_end, uint32_t *nflagged)
{
	const struct shardidx__rec *rc = &ix->recs[i];
	uint32_t nsub;

	if (rc->mode > 07777 || (i < ix->root_n) != (rc->parent == SHARDIDX_NONE))
		return 0;
	if (rc->parent != SHARDIDX_NONE) {
		const struct shardidx__rec *p;

		if (rc->parent >= i)
			return 0;
		p = &ix->recs[rc->parent];
		if (p->type != SHARDIDX_DIR || i < (uint32_t)p->off ||
		    i - (uint32_t)p->off >= p->size)
			return 0;
	}
	switch (rc->type) {
	case SHARDIDX_DIR:
		return !(rc->flags & ~SHARDIDX_F_IMPLICIT) && rc->size <= UINT32_MAX &&
		       child_range_ok(ix, i, (uint32_t)rc->off, (uint32_t)rc->size, &nsub) &&
		       nsub == rc->off >> 32;
	case SHARDIDX_SYMLINK:
		return !rc->flags && table_str(ix, rc->off) == (int64_t)rc->size;
	case SHARDIDX_REG:
		return shardidx__reg_ok(ix, rc, sp_end, nflagged);
	default:
		return 0;
	}
}

/* Hardlink rows: sorted, one per flagged entry, canon consistent (nhard:
 * nrecs zeroed counters). 1 when valid. */
static int links_ok(const struct shardidx *ix, uint32_t nflagged, uint32_t *nhard)
{
	if (ix->nlinks != nflagged)
		return 0;
	for (uint32_t k = 0; k < ix->nlinks; k++) {
		const struct shardidx__link *l = &ix->links[k];
		const struct shardidx__rec *rc, *c;

		if (l->entry >= ix->nrecs || (k && ix->links[k - 1].entry >= l->entry))
			return 0;
		rc = &ix->recs[l->entry];
		if (rc->type != SHARDIDX_REG ||
		    !(rc->flags & (SHARDIDX_F_HARDLINK | SHARDIDX__F_LINKED)))
			return 0;
		if (rc->flags & SHARDIDX_F_HARDLINK) {
			if (l->val >= ix->nrecs)
				return 0;
			c = &ix->recs[l->val];
			if (c->type != SHARDIDX_REG || !(c->flags & SHARDIDX__F_LINKED) ||
			    c->off != rc->off || c->size != rc->size ||
			    ((c->flags ^ rc->flags) & SHARDIDX_F_SPARSE))
				return 0;
			nhard[l->val]++;
		} else if (l->val < 2) {
			return 0;
		}
	}
	for (uint32_t k = 0; k < ix->nlinks; k++) {
		const struct shardidx__link *l = &ix->links[k];

		if ((ix->recs[l->entry].flags & SHARDIDX__F_LINKED) &&
		    nhard[l->entry] + 1 != l->val)
			return 0;
	}
	return 1;
}

/* Every field of a loaded index, so that reading it can never go out of
 * bounds or loop: 0, -EBADMSG or -ENOMEM. */
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
	/* scratch of the checks, freed before return: per sparse member, and
	 * per entry only when there are hardlinks */
	sp_end = calloc(ix->nsparse ? ix->nsparse : 1, sizeof(*sp_end));
	nhard = ix->nlinks ? calloc(ix->nrecs, sizeof(*nhard)) : NULL;
	if (!sp_end || (ix->nlinks && !nhard)) {
		r = -ENOMEM;
		goto out;
	}
	if (!shardidx__sparse_ok(ix, sp_end))
		goto out;
	/* names first: the records' checks compare names of other entries */
	for (uint32_t i = 0; i < ix->nrecs; i++)
		if (!name_ok(ix, ix->recs[i].name_off))
			goto out;
	for (uint32_t i = 0; i < ix->nrecs; i++)
		if (!rec_ok(ix, i, sp_end, &nflagged))
			goto out;
	if (!child_range_ok(ix, SHARDIDX_NONE, 0, ix->root_n, &nsub) ||
	    !links_ok(ix, nflagged, nhard))
		goto out;
	/* samples: the stored count must be what the entries imply */
	nsaved = ix->nsamples;
	shardidx__count_samples(ix);
	ok = ix->nsamples == nsaved;
out:
	free(sp_end);
	free(nhard);
	return ok ? 0 : r;
}

static int section(const unsigned char *b, size_t len, int s, uint64_t count, uint64_t elem,
		   const unsigned char **p)
{
	uint64_t off = disk_le64_get(b + 96 + 16 * s), l = disk_le64_get(b + 104 + 16 * s);

	/* sections start 8-byte aligned (the writer pads): read in place,
	 * every array is then aligned for its type */
	if (off < HDR_SIZE || (off & 7) || off > len || l > len - off ||
	    count > UINT64_MAX / elem || l != count * elem)
		return -EBADMSG;
	*p = b + off;
	return 0;
}

static void *alloc_n(uint64_t n, size_t elem)
{
	return calloc(n ? (size_t)n : 1, elem);
}

/* Magic, version (2, 3 or 4), header size, length and checksum of the
 * file in b[0..len): 0, -EBADMSG or -EPROTO. A file of version 2 or 3 does
 * not hold the first member left out (shardidx_skipped_first): one that
 * counts members left out is -EPROTO (the caller builds the index again,
 * which names that member); one that counts none says all a build would. */
static int check_file(const unsigned char *b, size_t len)
{
	uint32_t v, hs;

	if (!b || len < 12 || memcmp(b, MAGIC, 8) != 0)
		return -EBADMSG;
	v = disk_le32_get(b + 8);
	if (v != VERSION && v != VERSION_C && v != VERSION_S)
		return -EPROTO;
	hs = v == VERSION ? HDR_SIZE : v == VERSION_C ? HDR_SIZE_C : HDR_SIZE_S;
	if (len < hs || disk_le32_get(b + 12) != hs || disk_le64_get(b + 24) != len ||
	    disk_le64_get(b + 16) != shardidx__file_sum(b, len))
		return -EBADMSG;
	if (v != VERSION_S && disk_le32_get(b + 84) != 0)
		return -EPROTO;
	return 0;
}

int shardidx_ident(const void *buf, size_t len, const void **ident, size_t *identlen)
{
	const unsigned char *b = buf, *p;
	int r = check_file(b, len);

	if (r < 0)
		return r;
	if (section(b, len, SEC_IDENT, disk_le32_get(b + 60), 1, &p))
		return -EBADMSG;
	*ident = p;
	*identlen = disk_le32_get(b + 60);
	return 0;
}

/* Magic, version, length, checksum and identity of the file in b[0..len),
 * then the header's counts into ix and each section's start into s[]. */
static int read_header(const unsigned char *b, size_t len, const void *ident, size_t identlen,
		       struct shardidx *ix, const unsigned char **s)
{
	int r = check_file(b, len);

	if (r < 0)
		return r;
	if (section(b, len, SEC_IDENT, disk_le32_get(b + 60), 1, &s[SEC_IDENT]))
		return -EBADMSG;
	if (disk_le32_get(b + 60) != identlen ||
	    (identlen && memcmp(s[SEC_IDENT], ident, identlen)))
		return -ESTALE;
	ix->nrecs = disk_le32_get(b + 32);
	ix->root_n = disk_le32_get(b + 36);
	ix->names_len = disk_le32_get(b + 40);
	ix->nsparse = disk_le32_get(b + 44);
	ix->nsegs = disk_le32_get(b + 48);
	ix->nlinks = disk_le32_get(b + 52);
	ix->nsamples = disk_le32_get(b + 56);
	ix->stream_size = disk_le64_get(b + 64);
	ix->end_off = disk_le64_get(b + 72);
	ix->damage = (int32_t)disk_le32_get(b + 80);
	ix->skipped = disk_le32_get(b + 84);
	ix->damage_off = disk_le64_get(b + 88);
	ix->file_sum = disk_le64_get(b + 16);
	if (disk_le32_get(b + 8) != VERSION)
		return 1; /* shardidx__load_compact reads the sections */
	if (section(b, len, SEC_RECS, ix->nrecs, REC_SIZE, &s[SEC_RECS]) ||
	    section(b, len, SEC_NAMES, ix->names_len, 1, &s[SEC_NAMES]) ||
	    section(b, len, SEC_SPARSE, ix->nsparse, SPARSE_SIZE, &s[SEC_SPARSE]) ||
	    section(b, len, SEC_SEGS, ix->nsegs, SEG_SIZE, &s[SEC_SEGS]) ||
	    section(b, len, SEC_LINKS, ix->nlinks, LINK_SIZE, &s[SEC_LINKS]) ||
	    section(b, len, SEC_SAMPLES, 0, 4, &s[SEC_SAMPLES]))
		return -EBADMSG;
	return 0;
}

/* Point ix's arrays at the sections: the structs are the file's layout on
 * this host (shardidx_i.h), and every section starts 8-byte aligned in an
 * 8-byte aligned buffer. Nothing writes through these pointers. */
static void point_in_place(struct shardidx *ix, const unsigned char *const *s, size_t len)
{
	ix->recs = (struct shardidx__rec *)(uintptr_t)s[SEC_RECS];
	ix->names = (char *)(uintptr_t)s[SEC_NAMES];
	ix->sparse = (struct shardidx__sparse *)(uintptr_t)s[SEC_SPARSE];
	ix->segs = (struct shardidx__seg *)(uintptr_t)s[SEC_SEGS];
	ix->links = (struct shardidx__link *)(uintptr_t)s[SEC_LINKS];
	ix->in_place = 1;
	ix->buf_len = len;
}

/* Decode the sparse, segment and link sections into fresh arrays. */
int shardidx__decode_tables(struct shardidx *ix, const unsigned char *sp, const unsigned char *sg,
			    const unsigned char *lk)
{
	ix->tables_heap = 1;
	ix->sparse = alloc_n(ix->nsparse, sizeof(*ix->sparse));
	ix->segs = alloc_n(ix->nsegs, sizeof(*ix->segs));
	ix->links = alloc_n(ix->nlinks, sizeof(*ix->links));
	if (!ix->sparse || !ix->segs || !ix->links)
		return -ENOMEM;
	for (uint32_t i = 0; i < ix->nsparse; i++) {
		const unsigned char *p = sp + (size_t)i * SPARSE_SIZE;

		ix->sparse[i].first_seg = disk_le32_get(p);
		ix->sparse[i].nseg = disk_le32_get(p + 4);
		ix->sparse[i].data_off = disk_le64_get(p + 8);
	}
	for (uint32_t i = 0; i < ix->nsegs; i++) {
		const unsigned char *p = sg + (size_t)i * SEG_SIZE;

		ix->segs[i].logical = disk_le64_get(p);
		ix->segs[i].stream_off = disk_le64_get(p + 8);
		ix->segs[i].len = disk_le64_get(p + 16);
	}
	for (uint32_t i = 0; i < ix->nlinks; i++) {
		const unsigned char *p = lk + (size_t)i * LINK_SIZE;

		ix->links[i].entry = disk_le32_get(p);
		ix->links[i].val = disk_le32_get(p + 4);
	}
	return 0;
}

/* Decode the sections into fresh arrays (no host-layout assumptions). */
static int decode_copy(struct shardidx *ix, const unsigned char *const *s)
{
	int r;

	ix->recs = alloc_n(ix->nrecs, sizeof(*ix->recs));
	ix->names = alloc_n(ix->names_len, 1);
	if (!ix->recs || !ix->names)
		return -ENOMEM;
	for (uint32_t i = 0; i < ix->nrecs; i++) {
		const unsigned char *p = s[SEC_RECS] + (size_t)i * REC_SIZE;
		struct shardidx__rec *rc = &ix->recs[i];

		rc->off = disk_le64_get(p);
		rc->size = disk_le64_get(p + 8);
		rc->name_off = disk_le32_get(p + 16);
		rc->parent = disk_le32_get(p + 20);
		rc->mtime = disk_le32_get(p + 24);
		rc->mode = disk_le16_get(p + 28);
		rc->type = p[30];
		rc->flags = p[31];
	}
	if (ix->names_len)
		memcpy(ix->names, s[SEC_NAMES], ix->names_len);
	r = shardidx__decode_tables(ix, s[SEC_SPARSE], s[SEC_SEGS], s[SEC_LINKS]);
	ix->tables_heap = 0; /* freed with the records: not in place */
	if (r < 0)
		return r;
	return 0;
}

int shardidx_load_in_place(const void *buf, size_t len, const void *ident, size_t identlen,
			   void (*release)(void *arg), void *arg, struct shardidx **out)
{
	const unsigned char *s[NSECT];
	struct shardidx *ix = NULL;
	int r = -EINVAL;

	if (!out)
		goto fail;
	*out = NULL;
	r = -ENOMEM;
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		goto fail;
	r = read_header(buf, len, ident, identlen, ix, s);
	if (r < 0)
		goto fail;
	if (r == 1) { /* version 3: read in place at any alignment */
		r = shardidx__load_compact(ix, buf, len);
		if (r < 0)
			goto fail;
	} else if (SHARDIDX__IN_PLACE_HOST && ((uintptr_t)buf & 7) == 0) {
		point_in_place(ix, s, len);
	} else {
		r = decode_copy(ix, s);
		if (r < 0)
			goto fail;
	}
	r = ix->compact ? 0 : validate(ix);
	if (r < 0)
		goto fail;
	if (ix->in_place) {
		ix->release = release;
		ix->release_arg = arg;
	} else if (release) {
		release(arg); /* the copies are the index now */
	}
	*out = ix;
	return 0;
fail:
	shardidx_free(ix); /* in_place but no release yet: frees only the struct */
	if (release)
		release(arg);
	return r;
}

int shardidx_load(void *buf, size_t len, const void *ident, size_t identlen, struct shardidx **out)
{
	return shardidx_load_in_place(buf, len, ident, identlen, free, buf, out);
}

void *shardidx_release_arg(const struct shardidx *ix)
{
	return ix->in_place && ix->release ? ix->release_arg : NULL;
}
