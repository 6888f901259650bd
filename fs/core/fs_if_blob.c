/*
 * fs_if_blob.c — the --layout imagefolder view's blob: its format, writing
 * it in pieces from the build's sorts (fs_if_build.c), and validating a
 * blob before it is used (fs_if_store.c maps or reads it).
 *
 * The assembled view becomes one cachetier meta blob, "ifview-<srckey>-
 * <fingerprint>" (both in hex), which is mapped and used in place: lookups
 * are binary searches over its records, listings walk them, no name is
 * copied to the heap. A file's name is stored (front-coded, below), so a
 * listing or a lookup needs no shard's index; the file refers to its image
 * (shard, canonical entry) in the shard's index, whose attributes are the
 * file's (read in place when it is stat'ed or opened). A name is <key>.<ext>,
 * or for a file renamed because its name was taken <key>~<dir>.<ext> or
 * <key>~<dir>~<entry>.<ext>, dir the shard's directory name (fs_if_name,
 * at the build). The
 * fingerprint (FNV-1a 64) covers what the view is made of: this format's
 * version, --class-from, and for each shard in order its key, size, mtime,
 * ETag (a local file's stands for its size, mtime, inode and ctime), the codec its
 * name suggests and its directory name (part of renamed files' names). A
 * changed dataset has another fingerprint, so its view is built again.
 * The blob is in a family of the cache tier, "ifview-<srckey>" (ifv_family:
 * the source and --class-from): a mount that saves or maps its view removes
 * the family's other blobs, the views of older versions of the dataset
 * (ifv_clean; other sources and --class-from are other families). (After a
 * refresh that replaced or removed shards, their numbers stay unused until
 * unmount: that view is saved too, but only this mount's numbering meets
 * its fingerprint.)
 * Layout, version 4 (little-endian, every section 8-byte aligned):
 *   0  "SHIFVIEW", u32 version, u32 nclasses
 *  16  u64 checksum of bytes [0, 16) and [24, end) (ifv_sum)
 *  24  u64 fingerprint, u32 nfiles, u32 nshards
 *  40  u64 strtab_len; u64 samples without image, without class, left out
 *      as duplicates (what the build counted); u32 class_from, u32 nblocks
 *  80  u64 names_len, u64 0
 *  96  classes: nclasses x {u64 name, u32 first, u32 n, i64 mtime,
 *               u32 first block, u32 0}: name an offset into strtab, files
 *               [first, first + n), blocks [first block, + ceil(n / 16))
 *      files:   nfiles x {u32 shard, u32 entry | kind << 30}: in a class, in
 *               the order of their names (strcmp); entry is the image's
 *               canonical one (the inode's: a hard link's target), below
 *               2^30; kind how the name was made from the image member's
 *               (IFV_NAME_*: plain, ~dir, ~dir~entry, or 3: the image is a
 *               hard link to entry, named after the link member)
 *      blocks:  nblocks x u64, where each block of names starts in names:
 *               a class's names in blocks of IFV_BLOCK (16), the last one
 *               of a class shorter
 *      counts:  nshards x u32, the entries of each shard's index when the
 *               view was built (0: left out); zero-padded to 8
 *      sums:    nshards x u64, the checksum of each shard's index file the
 *               view was built from (shardidx_file_sum; 0: an index built
 *               and never saved, or none)
 *      names:   per file in order, u8 shared, u8 n, then n bytes: the name
 *               is the first `shared` bytes of the name before it and those
 *               n (a block's first: shared 0, the name whole); names_len
 *               bytes, zero-padded to 8
 *      strtab:  the class names, NUL-terminated (the first is ""),
 *               zero-padded to 8
 * The arithmetic: a file costs 8 bytes of record, 1/16 of an 8-byte block
 * offset, and 2 bytes plus what its name does not share with the one
 * before it (the whole name once a block); a shard 12, a class 32 and its
 * name. index_bench.sh's set (500 shards of 4,300 samples named like
 * s12_004321.jpg, every key in every shard, so 499 of 500 are named
 * s12_004321~shard-000123.jpg, 1,000 classes): 8 + 0.5 + 8.5 = 17.0 bytes a
 * sample (36.6 MB for 2.15 M samples). Keys unique across shards, sorted
 * in a class as s12_004321.jpg, s12_004877.jpg: about 2 + 8 of name, 18.5
 * bytes a sample. 1.18 B members in 588 M samples (68,000 shards) at 17-19
 * bytes a sample: 10.0-11.2 GB (version 2, which kept no name but
 * referred to the member's in the shard's index, 12 bytes: 7.1 GB, and had
 * to map every shard's index to list a class; version 1 stored each name
 * and its attributes, about 56-67 bytes a sample: 33-39 GB). Version 3
 * was version 4 without the sums and the kinds: it bound the view to a
 * shard's index by its entry count alone.
 * A mapped blob is validated once, when it is loaded: checksum,
 * fingerprint, sizes (every section where the counts put it, the blob's
 * length the sum), every class name inside strtab (which ends in NUL),
 * classes contiguous and sorted (empty only with --class-gaps empty), each
 * class's first block the sum of the blocks before, every shard below
 * nshards and every entry below its shard's count, and every name: each
 * block starts where its offset says with a name stored whole, no entry
 * shares more than the name before it has or runs past the names, no name
 * is empty, ".", "..", or holds '/' or NUL or is over 255 bytes, the names
 * of a class ascend strictly, and they end at names_len. One that fails is
 * counted (imagefolder_view_rejected) and built again. A blob of an older
 * version (1 to 3: an older release's) is not read: its name differs, as
 * the fingerprint covers the version, so it is not even opened; the view
 * is built again and the old blob removed (ifv_clean). A file's reference
 * is checked again where its attributes are read (fs_if_view.c): the
 * shard's index must be the file the view was built from (its checksum,
 * the one its load verified), and a file looked up or listed with its
 * attributes must have the name its member makes (fs_if_name of the
 * member's name, the record's kind, the shard's directory and the entry);
 * else the view is retired, its blob removed, counted as rejected, and
 * built again. A view
 * that left a shard out (no index) is not saved: the next mount tries
 * again.
 *
 * Contract: the writers run on the building thread, into a sink that is a
 * cachetier meta writer or a zeroed buffer (struct ifv_sink); they take
 * a 64 KiB buffer for each section being written and 1 MiB to checksum a
 * written blob, whatever the view's size. Non-goals:
 * portability of the build's records (native-endian, never saved); the
 * blob itself is little-endian.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fs_if_i.h"

#define IFV_OUT_BUF (64u << 10)

static uint64_t ifv_mix(uint64_t h, uint64_t w)
{
	return ((h << 31 | h >> 33) ^ w) * IFV_PRIME;
}

/* Checksum of a blob (len a multiple of 8, at least IFV_HDR): four lanes of
 * 64-bit words, so a large view is checked at memory speed. */
static uint64_t ifv_sum(const unsigned char *b, size_t len)
{
	uint64_t h[4] = {DISK_FNV64_INIT, DISK_FNV64_INIT ^ 1, DISK_FNV64_INIT ^ 2,
			 DISK_FNV64_INIT ^ 3};
	uint64_t r = DISK_FNV64_INIT ^ len;
	size_t i = 24;

	for (; i + 32 <= len; i += 32)
		for (int k = 0; k < 4; k++)
			h[k] = ifv_mix(h[k], disk_le64_get(b + i + 8 * k));
	for (; i < len; i += 8)
		h[0] = ifv_mix(h[0], disk_le64_get(b + i));
	h[1] = ifv_mix(h[1], disk_le64_get(b));
	h[2] = ifv_mix(h[2], disk_le64_get(b + 8));
	for (int k = 0; k < 4; k++)
		r = ifv_mix(r, h[k]);
	return r ^ r >> 29;
}

static size_t pad8(uint64_t n)
{
	return (size_t)((n + 7) & ~(uint64_t)7);
}

/* The entry of a name at *pos of v's names into dst: the first `shared`
 * bytes are those of the name before it (prev, len bytes; dst may be
 * prev), the rest follow. head: a block's first name (shares nothing).
 * Every read is bounded by the sizes load validated (in the heap), so a
 * blob whose file changed since reads nothing past its names. */
static int name_entry(const struct fs_ifview *v, uint64_t *pos, const char *prev, int len,
		      char *dst, int head)
{
	uint64_t p = *pos;
	unsigned shared, n;

	if (p > v->names_len || v->names_len - p < 2)
		return -EBADMSG;
	shared = v->names[p];
	n = v->names[p + 1];
	if ((head && shared) || (int)shared > len || n == 0 || shared + n > SHARDIDX_NAME_MAX ||
	    v->names_len - p - 2 < n)
		return -EBADMSG;
	if (dst != prev)
		memcpy(dst, prev, shared);
	memcpy(dst + shared, v->names + p + 2, n);
	dst[shared + n] = '\0';
	*pos = p + 2 + n;
	return (int)(shared + n);
}

/* Every name of v in order: each block starts where the blocks say, with
 * a name stored whole; each name is not empty, ".", "..", and holds no
 * '/' or NUL; the names of a class ascend strictly (strcmp: no two
 * alike, the order the lookups' binary search needs); they end where the
 * names do. */
static int ifv_check_names(const struct fs_ifview *v)
{
	char a[SHARDIDX_NAME_MAX + 1], b[SHARDIDX_NAME_MAX + 1];
	uint64_t pos = 0;
	uint32_t blk = 0;

	for (uint32_t c = 0; c < v->nclasses; c++) {
		const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;
		uint32_t n = disk_le32_get(r + 12);
		char *prev = a, *cur = b;
		int len = 0;

		if (disk_le32_get(r + 24) != blk)
			return -EBADMSG;
		for (uint32_t j = 0; j < n; j++) {
			int head = j % IFV_BLOCK == 0, nl;
			uint64_t at = pos;
			char *t;

			if (head && (blk >= v->nblocks ||
				     disk_le64_get(v->blocks + (size_t)blk++ * 8) != pos))
				return -EBADMSG;
			nl = name_entry(v, &pos, prev, len, cur, head);
			if (nl < 0 || memchr(v->names + at + 2, '/', v->names[at + 1]) ||
			    memchr(v->names + at + 2, '\0', v->names[at + 1]) ||
			    strcmp(cur, ".") == 0 || strcmp(cur, "..") == 0 ||
			    (j && strcmp(prev, cur) >= 0))
				return -EBADMSG;
			len = nl;
			t = prev;
			prev = cur;
			cur = t;
		}
	}
	return blk == v->nblocks && pos == v->names_len ? 0 : -EBADMSG;
}

/* The class and file records of v (set up by fs__if_open) are sound. */
static int ifv_check_records(const struct fs_ifview *v)
{
	const char *prev = NULL;
	uint32_t next = 0;

	for (uint32_t c = 0; c < v->nclasses; c++) {
		const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;
		uint64_t off = disk_le64_get(r);
		uint32_t first = disk_le32_get(r + 8), n = disk_le32_get(r + 12);

		if (off >= v->strtab_len || first != next || n > v->nfiles - first ||
		    disk_le32_get(r + 28) != 0 || (prev && strcmp(prev, v->strtab + off) >= 0))
			return -EBADMSG;
		prev = v->strtab + off;
		next += n;
	}
	if (next != v->nfiles)
		return -EBADMSG;
	for (uint32_t i = 0; i < v->nfiles; i++) {
		const unsigned char *r = v->files + (size_t)i * IFV_FILE_REC;
		uint32_t shard = disk_le32_get(r), entry = disk_le32_get(r + 4) & IFV_ENTRY_MASK;

		if (shard >= v->nshards || entry >= disk_le32_get(v->counts + (size_t)shard * 4))
			return -EBADMSG;
	}
	return ifv_check_names(v);
}

/* Where the sections of a blob of these counts start (l->strtab_len,
 * names_len and nblocks set). */
static void ifv_place(struct ifv_layout *l, uint32_t nclasses, uint32_t nfiles, uint32_t nshards)
{
	l->classes = IFV_HDR;
	l->files = l->classes + (uint64_t)nclasses * IFV_CLASS_REC;
	l->blocks = l->files + (uint64_t)nfiles * IFV_FILE_REC;
	l->counts = l->blocks + (uint64_t)l->nblocks * 8;
	l->sums = l->counts + pad8((uint64_t)nshards * 4);
	l->names = l->sums + (uint64_t)nshards * 8;
	l->strtab = l->names + pad8(l->names_len);
	l->len = l->strtab + pad8(l->strtab_len);
}

/* ---- reading the records (the lookups: fs_if_view.c) ---- */

const char *fs_if_class(const struct fs_ifview *v, uint32_t c, uint32_t *first, uint32_t *n,
			int64_t *mtime)
{
	const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;

	if (first)
		*first = disk_le32_get(r + 8);
	if (n)
		*n = disk_le32_get(r + 12);
	if (mtime)
		*mtime = (int64_t)disk_le64_get(r + 16);
	return v->strtab + disk_le64_get(r);
}

void fs_if_file(const struct fs_ifview *v, uint32_t i, uint32_t *shard, uint32_t *entry)
{
	const unsigned char *r = v->files + (size_t)i * IFV_FILE_REC;

	*shard = disk_le32_get(r);
	*entry = disk_le32_get(r + 4) & IFV_ENTRY_MASK;
}

uint32_t fs_if_file_kind(const struct fs_ifview *v, uint32_t i)
{
	return disk_le32_get(v->files + (size_t)i * IFV_FILE_REC + 4) >> IFV_KIND_SHIFT;
}

/* Class c's first block and its number of blocks, or -EBADMSG. */
static int class_blocks(const struct fs_ifview *v, uint32_t c, uint32_t *blk, uint32_t *nb,
			uint32_t *first, uint32_t *n)
{
	const unsigned char *r = v->classes + (size_t)c * IFV_CLASS_REC;

	*first = disk_le32_get(r + 8);
	*n = disk_le32_get(r + 12);
	*blk = disk_le32_get(r + 24);
	*nb = (uint32_t)(((uint64_t)*n + IFV_BLOCK - 1) / IFV_BLOCK);
	return *blk > v->nblocks || *nb > v->nblocks - *blk ? -EBADMSG : 0;
}

int fs_if_name_at(const struct fs_ifview *v, uint32_t c, uint32_t j, char *buf, uint64_t *next)
{
	uint32_t blk, nb, first, n;
	uint64_t pos;
	int len;

	if (c >= v->nclasses || class_blocks(v, c, &blk, &nb, &first, &n) < 0 || j >= n)
		return -EBADMSG;
	pos = disk_le64_get(v->blocks + (size_t)(blk + j / IFV_BLOCK) * 8);
	len = name_entry(v, &pos, buf, 0, buf, 1);
	for (uint32_t k = 0; len >= 0 && k < j % IFV_BLOCK; k++)
		len = name_entry(v, &pos, buf, len, buf, 0);
	*next = pos;
	return len;
}

int fs_if_name_next(const struct fs_ifview *v, uint64_t *pos, char *buf, int len)
{
	return name_entry(v, pos, buf, len, buf, 0);
}

int64_t fs_if_file_lookup(const struct fs_ifview *v, uint32_t c, const char *name, size_t len,
			  uint32_t *shard, uint32_t *canon)
{
	char buf[SHARDIDX_NAME_MAX + 1];
	uint32_t blk, nb, first, n, lo = 0, hi, b;
	uint64_t pos;
	int nl;

	if (c >= v->nclasses || len == 0 || len > SHARDIDX_NAME_MAX)
		return -ENOENT;
	if (class_blocks(v, c, &blk, &nb, &first, &n) < 0)
		return -EBADMSG;
	/* the first block whose head (stored whole) is after name */
	for (hi = nb; lo < hi;) {
		uint32_t mid = lo + (hi - lo) / 2;
		uint64_t p = disk_le64_get(v->blocks + (size_t)(blk + mid) * 8);
		size_t hl, m;
		int cmp;

		if (p > v->names_len || v->names_len - p < 2 ||
		    (hl = v->names[p + 1]) > v->names_len - p - 2)
			return -EBADMSG;
		m = hl < len ? hl : len;
		cmp = memcmp(v->names + p + 2, name, m);
		if (cmp == 0)
			cmp = hl < len ? -1 : hl > len;
		if (cmp == 0)
			lo = hi = mid + 1;
		else if (cmp < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -ENOENT; /* before the class's first name */
	b = lo - 1;
	pos = disk_le64_get(v->blocks + (size_t)(blk + b) * 8);
	nl = 0;
	for (uint32_t k = 0; k < IFV_BLOCK && b * IFV_BLOCK + k < n; k++) {
		int cmp;

		nl = name_entry(v, &pos, buf, nl, buf, k == 0);
		if (nl < 0)
			return -EBADMSG;
		cmp = memcmp(buf, name, (size_t)nl < len ? (size_t)nl : len);
		if (cmp == 0)
			cmp = (size_t)nl < len ? -1 : (size_t)nl > len;
		if (cmp > 0)
			break;
		if (cmp == 0) {
			uint32_t i = first + b * IFV_BLOCK + k;

			if (i >= v->nfiles)
				return -EBADMSG;
			fs_if_file(v, i, shard, canon);
			return (int64_t)i;
		}
	}
	return -ENOENT;
}

/* Append src[0..n) at *pos of buf (size bytes): 0, or -1 when it does
 * not fit with a NUL after it. */
static int name_put(char *buf, size_t size, size_t *pos, const char *src, size_t n)
{
	if (n >= size - *pos)
		return -1;
	memcpy(buf + *pos, src, n);
	*pos += n;
	return 0;
}

int fs_if_name(const char *member, uint32_t kind, const char *dir, uint32_t canon, char *buf,
	       size_t size)
{
	const char *first = strchr(member, '.'), *last = strrchr(member, '.');
	size_t keylen = first ? (size_t)(first - member) : strlen(member), pos = 0;
	const char *ext = last ? last : ""; /* with its '.' */
	char num[12];
	int bad;

	if (size == 0)
		return -ENAMETOOLONG;
	/* memcpy, not snprintf: a lookup or listing makes one name a file */
	bad = name_put(buf, size, &pos, member, keylen);
	if (kind != IFV_NAME_PLAIN)
		bad |=
		    name_put(buf, size, &pos, "~", 1) | name_put(buf, size, &pos, dir, strlen(dir));
	if (kind == IFV_NAME_ENTRY)
		bad |= name_put(buf, size, &pos, num,
				(size_t)snprintf(num, sizeof(num), "~%" PRIu32, canon));
	bad |= name_put(buf, size, &pos, ext, strlen(ext));
	if (bad)
		return -ENAMETOOLONG;
	buf[pos] = '\0';
	return (int)pos;
}

/* Make v the view in blob b[0..len), built from what want describes (its
 * counts go to *got): 0, -EBADMSG (torn, corrupt, inconsistent), -EPROTO
 * (another version) or -ESTALE (made of other shards or options). */
int fs__if_open(struct fs_ifview *v, const unsigned char *b, size_t len,
		const struct ifv_meta *want, struct ifv_meta *got)
{
	struct ifv_layout l;

	if (!b || len < IFV_HDR || len % 8 || memcmp(b, IFV_MAGIC, 8) != 0)
		return -EBADMSG;
	if (disk_le32_get(b + 8) != IFV_VERSION)
		return -EPROTO;
	if (disk_le64_get(b + 16) != ifv_sum(b, len))
		return -EBADMSG;
	got->fp = disk_le64_get(b + 24);
	got->nshards = disk_le32_get(b + 36);
	got->class_from = disk_le32_get(b + 72);
	if (got->fp != want->fp || got->nshards != want->nshards ||
	    got->class_from != want->class_from)
		return -ESTALE;
	v->nclasses = disk_le32_get(b + 12);
	v->nfiles = disk_le32_get(b + 32);
	v->nshards = got->nshards;
	v->fp = got->fp;
	l.strtab_len = disk_le64_get(b + 40);
	l.nblocks = disk_le32_get(b + 76);
	l.names_len = disk_le64_get(b + 80);
	if (l.strtab_len == 0 || l.strtab_len > len || l.names_len > len || l.nblocks > len / 8 ||
	    disk_le64_get(b + 88) != 0)
		return -EBADMSG;
	ifv_place(&l, v->nclasses, v->nfiles, v->nshards);
	if (l.len != len)
		return -EBADMSG;
	v->classes = b + l.classes;
	v->files = b + l.files;
	v->blocks = b + l.blocks;
	v->counts = b + l.counts;
	v->sums = b + l.sums;
	v->names = b + l.names;
	v->names_len = l.names_len;
	v->nblocks = l.nblocks;
	v->strtab = (const char *)b + l.strtab;
	v->strtab_len = l.strtab_len;
	if (v->strtab[l.strtab_len - 1] != '\0')
		return -EBADMSG;
	got->no_image = disk_le64_get(b + 48);
	got->no_class = disk_le64_get(b + 56);
	got->dup = disk_le64_get(b + 64);
	return ifv_check_records(v);
}

int fs__if_layout(const struct if_pass *p, uint32_t nshards, struct ifv_layout *l)
{
	l->strtab_len = 1 + p->cnames_len;
	l->names_len = p->names_len;
	l->nblocks = p->nblocks;
	ifv_place(l, p->nclasses, p->nfiles, nshards);
	return l->len > SIZE_MAX ? -EFBIG : 0;
}

/* One section written front to back. */
struct ifv_out {
	struct ifv_sink *k;
	uint64_t off; /* where buf[0] goes */
	unsigned char *buf;
	size_t n;
	int err;
};

static void out_open(struct ifv_out *o, struct ifv_sink *k, uint64_t off)
{
	*o = (struct ifv_out){.k = k, .off = off};
	if (k->w) {
		o->buf = malloc(IFV_OUT_BUF);
		o->err = o->buf ? 0 : -ENOMEM;
	}
}

static void out_flush(struct ifv_out *o)
{
	if (o->n && o->err == 0)
		o->err = cachetier_meta_pwrite(o->k->w, o->buf, o->n, o->off);
	o->off += o->n;
	o->n = 0;
}

static void out_put(struct ifv_out *o, const void *p, size_t n)
{
	if (!o->k->w) {
		memcpy(o->k->heap + o->off, p, n);
		o->off += n;
		return;
	}
	while (n && o->err == 0) {
		size_t c = IFV_OUT_BUF - o->n < n ? IFV_OUT_BUF - o->n : n;

		memcpy(o->buf + o->n, p, c);
		o->n += c;
		p = (const char *)p + c;
		n -= c;
		if (o->n == IFV_OUT_BUF)
			out_flush(o);
	}
}

/* Flush and free o; its error (or err, when that is one). */
static int out_close(struct ifv_out *o, int err)
{
	if (o->k->w)
		out_flush(o);
	free(o->buf);
	o->buf = NULL;
	return err ? err : o->err;
}

/* The class record of class c: name at name_off, files [first, first + n),
 * newest mtime. */
static void class_rec(struct ifv_out *o, uint64_t name_off, uint32_t first, uint32_t n,
		      int64_t mtime, uint32_t blk)
{
	unsigned char r[IFV_CLASS_REC] = {0};

	disk_le64_put(r, name_off);
	disk_le32_put(r + 8, first);
	disk_le32_put(r + 12, n);
	disk_le64_put(r + 16, (uint64_t)mtime);
	disk_le32_put(r + 24, blk);
	out_put(o, r, sizeof(r));
}

/* A file's name of nlen bytes into the names section on (*npos: its size
 * so far): a block's first (block_first) whole, its offset into the blocks
 * section ob (*blk: their count), the others after what they share with
 * prev, the name before. */
static void name_rec(struct ifv_out *ob, struct ifv_out *on, uint64_t *npos, uint32_t *blk,
		     const char *prev, const char *name, size_t nlen, int block_first)
{
	unsigned char hdr[2], w[8];
	unsigned shared = 0;

	if (block_first) {
		disk_le64_put(w, *npos);
		out_put(ob, w, 8);
		(*blk)++;
	} else {
		shared = ifv_lcp(prev, name);
	}
	hdr[0] = (unsigned char)shared;
	hdr[1] = (unsigned char)(nlen - shared);
	out_put(on, hdr, 2);
	out_put(on, name + shared, hdr[1]);
	*npos += 2u + hdr[1];
}

/* The classes, files, blocks, names and class names sections from the
 * files in order (the class spool beside them). */
static int ifv_write_files(struct if_pass *p, const struct ifv_layout *l, struct ifv_sink *k)
{
	struct ifv_out oc, of, ob, on, ocn; /* classes, files, blocks, names, class names */
	struct fs_sort_iter *it = NULL, *cit = NULL;
	uint64_t coff = 1, cur_off = 0, npos = 0;
	uint32_t ci = UINT32_MAX, first = 0, fi = 0, blk = 0, cblk = 0;
	const char *cname = "";
	int64_t cmtime = 0;
	struct if_prev prev = {0};
	const void *v;
	size_t len;
	int err = fs_sort_iter_open(p->files, &it), got = 0;

	if (err == 0)
		err = fs_sort_iter_open(p->classes, &cit);
	out_open(&oc, k, l->classes);
	out_open(&of, k, l->files);
	out_open(&ob, k, l->blocks);
	out_open(&on, k, l->names);
	out_open(&ocn, k, l->strtab + 1);
	while (err == 0 && (got = fs_sort_next(it, &v, &len)) > 0) {
		const unsigned char *r = v;
		const char *name = (const char *)r + FR_HDR;
		unsigned char rec[IFV_FILE_REC];

		if (get32(r) != ci) {
			const void *c;
			size_t clen;

			if (ci != UINT32_MAX)
				class_rec(&oc, cur_off, first, fi - first, cmtime, cblk);
			/* classes without files (--class-gaps empty) before this one */
			while ((got = fs_sort_next(cit, &c, &clen)) > 0 &&
			       get32(r) != (uint32_t)(ci + 1)) {
				ci++;
				out_put(&ocn, (const char *)c + CR_HDR, clen - CR_HDR);
				class_rec(&oc, coff, fi, 0, (int64_t)get64(c), blk);
				coff += clen - CR_HDR;
			}
			if (got <= 0 || get32(r) != (uint32_t)(ci + 1)) {
				err = got < 0 ? got : -EIO; /* files of a class not spooled */
				break;
			}
			ci = get32(r);
			cmtime = (int64_t)get64(c);
			cname = (const char *)c + CR_HDR;
			out_put(&ocn, cname, clen - CR_HDR);
			cur_off = coff;
			coff += clen - CR_HDR;
			first = fi;
			cblk = blk;
			prev.set = 0;
		} else if (prev.set && strcmp((const char *)prev.p, name) == 0) {
			fs_log(FS_LOG_WARN, "imagefolder: %s/%s stored twice; left out once", cname,
			       name);
			continue;
		}
		disk_le32_put(rec, get32(r + 4));
		disk_le32_put(rec + 4, get32(r + 8) | get32(r + 40) << IFV_KIND_SHIFT);
		out_put(&of, rec, IFV_FILE_REC);
		name_rec(&ob, &on, &npos, &blk, (const char *)prev.p, name, len - FR_HDR - 1,
			 (fi - first) % IFV_BLOCK == 0);
		fi++;
		err = fs__if_prev_keep(&prev, name, len - FR_HDR);
	}
	if (err == 0 && got < 0)
		err = got;
	if (err == 0 && ci != UINT32_MAX)
		class_rec(&oc, cur_off, first, fi - first, cmtime, cblk);
	if (err == 0 && (fi != p->nfiles || (ci == UINT32_MAX ? 0 : ci + 1) != p->nclasses ||
			 blk != p->nblocks || npos != p->names_len))
		err = -EIO; /* not what if_count_files read */
	fs_sort_iter_close(it);
	fs_sort_iter_close(cit);
	free(prev.p);
	err = out_close(&oc, err);
	err = out_close(&of, err);
	err = out_close(&ob, err);
	err = out_close(&on, err);
	return out_close(&ocn, err);
}

/* The counts and sums sections: each shard's entries and its index
 * file's checksum. */
static int ifv_write_counts(const struct if_pass *p, const struct ifv_layout *l, uint32_t nshards,
			    struct ifv_sink *k)
{
	struct ifv_out o, os;
	unsigned char w[8];

	out_open(&o, k, l->counts);
	out_open(&os, k, l->sums);
	for (uint32_t s = 0; s < nshards; s++) {
		disk_le32_put(w, p->counts[s]);
		out_put(&o, w, 4);
		disk_le64_put(w, p->sums[s]);
		out_put(&os, w, 8);
	}
	return out_close(&os, out_close(&o, 0));
}

/* ifv_sum of the blob in sink k (hdr: its first 16 bytes), reading it
 * back a MiB at a time when it is a file. */
static int ifv_sum_sink(struct ifv_sink *k, const unsigned char *hdr, uint64_t len, uint64_t *sum)
{
	uint64_t h[4] = {DISK_FNV64_INIT, DISK_FNV64_INIT ^ 1, DISK_FNV64_INIT ^ 2,
			 DISK_FNV64_INIT ^ 3};
	uint64_t r = DISK_FNV64_INIT ^ len, blocks_end = 24 + (len - 24) / 32 * 32;
	size_t cap = 1u << 20; /* a multiple of 32: blocks never straddle two reads */
	unsigned char *buf;
	int err = 0;

	if (!k->w) {
		*sum = ifv_sum(k->heap, (size_t)len);
		return 0;
	}
	buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	for (uint64_t pos = 24; err == 0 && pos < len;) {
		size_t n = len - pos < cap ? (size_t)(len - pos) : cap, i = 0;

		err = cachetier_meta_pread(k->w, buf, n, pos);
		for (; err == 0 && i + 32 <= n && pos + i + 32 <= blocks_end; i += 32)
			for (int q = 0; q < 4; q++)
				h[q] = ifv_mix(h[q], disk_le64_get(buf + i + 8 * q));
		for (; err == 0 && i < n; i += 8)
			h[0] = ifv_mix(h[0], disk_le64_get(buf + i));
		pos += n;
	}
	free(buf);
	h[1] = ifv_mix(h[1], disk_le64_get(hdr));
	h[2] = ifv_mix(h[2], disk_le64_get(hdr + 8));
	for (int q = 0; q < 4; q++)
		r = ifv_mix(r, h[q]);
	*sum = r ^ r >> 29;
	return err;
}

/* The header, the padding after the names and the checksum. */
static int ifv_seal(struct ifv_sink *k, const struct if_pass *p, const struct ifv_layout *l,
		    const struct ifv_meta *m)
{
	unsigned char b[IFV_HDR] = {0}, zero[8] = {0};
	struct ifv_out o;
	uint64_t sum = 0;
	int err;

	memcpy(b, IFV_MAGIC, 8);
	disk_le32_put(b + 8, IFV_VERSION);
	disk_le32_put(b + 12, p->nclasses);
	disk_le64_put(b + 24, m->fp);
	disk_le32_put(b + 32, p->nfiles);
	disk_le32_put(b + 36, m->nshards);
	disk_le64_put(b + 40, l->strtab_len);
	disk_le64_put(b + 48, m->no_image);
	disk_le64_put(b + 56, m->no_class);
	disk_le64_put(b + 64, m->dup);
	disk_le32_put(b + 72, m->class_from);
	disk_le32_put(b + 76, l->nblocks);
	disk_le64_put(b + 80, l->names_len);
	out_open(&o, k, 0);
	out_put(&o, b, IFV_HDR);
	err = out_close(&o, 0);
	out_open(&o, k, l->strtab);
	out_put(&o, zero, 1); /* the empty name */
	err = out_close(&o, err);
	out_open(&o, k, l->strtab + l->strtab_len);
	out_put(&o, zero, (size_t)(l->len - l->strtab - l->strtab_len));
	err = out_close(&o, err);
	if (err == 0)
		err = ifv_sum_sink(k, b, l->len, &sum);
	disk_le64_put(b + 16, sum);
	out_open(&o, k, 16);
	out_put(&o, b + 16, 8);
	return out_close(&o, err);
}

/* Write the blob of p (counted, laid out as l) to sink k. The padding
 * after the counts and the names is the sink's zeros (a new file, or a
 * zeroed buffer). */
int fs__if_write(struct if_pass *p, const struct ifv_meta *m, const struct ifv_layout *l,
		 struct ifv_sink *k)
{
	int err = ifv_write_files(p, l, k);

	if (err == 0)
		err = ifv_write_counts(p, l, m->nshards, k);
	if (err == 0)
		err = ifv_seal(k, p, l, m);
	return err;
}
