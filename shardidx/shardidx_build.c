/*
 * shardidx_build.c — the tar push parser.
 *
 * Design: a small state machine over 512-byte blocks. The caller feeds bytes
 * starting at want(); header blocks, the data of metadata members (GNU 'L'
 * and 'K' long names, pax 'x' and 'g' records), old GNU extended sparse
 * headers and the GNU sparse 1.0 map at the start of a member's data are
 * buffered and parsed; member data itself is never looked at: want() jumps
 * over it, so a caller with random access reads headers only. Each complete
 * member is handed to the tree (shardidx_tree.c), which applies the name
 * rules and tar's "later copy wins".
 *
 * Formats: v7, ustar (prefix field), GNU (L, K, base-256 numbers, old sparse
 * 'S' with extended headers, 'D' dumpdirs as directories, 'V' labels
 * skipped), pax ('x', 'g'; path, linkpath, size, mtime, GNU.sparse 0.0, 0.1
 * and 1.0). Header checksums are checked as tar does (unsigned or signed
 * sum). The first zero block ends the archive (GNU tar also stops at a lone
 * zero block). Like GNU tar, the data area of every member type except '5'
 * is size bytes long (a regular member named "dir/", an old-style
 * directory, included).
 *
 * Where tar readers disagree this follows GNU tar: a numeric field may
 * start with one NUL and ends at a NUL or space (what follows is not
 * read); of several pax 'x' headers before one member only the last
 * applies; a pax mtime is read up to its first stray byte ("999xxx" is
 * 999) and ignored when it has no digits (either is noted, naming the
 * member: shardidx_builder_note); unknown type flags ('A'-'Z' other than
 * GNU's D, K, L, M, S, V, and POSIX's X) are regular files.
 *
 * Damage: a header that fails its checksum or does not parse, a malformed
 * pax record (or a malformed size, path or sparse value: GNU tar reports
 * those as errors and the member's bytes would be a guess) or sparse map
 * stops parsing with -EBADMSG at the offset of the member's first header;
 * finish() records -EIO where the stream ends if the end-of-archive marker
 * was not seen.
 *
 * Non-goals: no I/O, no decompression, no extraction; uid/gid/uname/xattrs
 * are not kept.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx_i.h"

#define BLK		 512u
#define XDATA_MAX	 (16u << 20) /* largest L/K/x/g member we buffer */
#define SPARSE_MAX_PAIRS (1u << 22)
#define SIZE_MAX_STORED	 (1ull << 62)

enum state {
	ST_HDR,	  /* reading a header block */
	ST_XDATA, /* reading the data of an L/K/x/g member */
	ST_SPEXT, /* reading an old GNU extended sparse header */
	ST_SPMAP, /* reading the GNU sparse 1.0 map */
	ST_END,
	ST_DAMAGED,
};

struct sbuf {
	char *p;
	size_t len;
	int set;
};

struct pax {
	struct sbuf path, linkpath, sp_name;
	int has_size, has_mtime, has_realsize;
	uint64_t size, realsize;
	int64_t mtime;
	int sp_major, sp_minor; /* -1: absent */
	int sp_pairs;		/* 0.0 / 0.1 map seen */
};

struct shardidx_builder {
	uint64_t pos; /* want() */
	uint64_t fed_end;
	uint64_t end_off;
	uint64_t grp_off; /* first header of the current member */
	int state;
	int err;

	unsigned char blk[BLK];
	size_t bfill;

	/* ST_XDATA */
	char *x;
	size_t xlen, xcap, xneed;
	int xtype;
	uint64_t xnext;

	/* pending for the next member */
	struct sbuf longname, longlink;
	struct pax px, gx;

	/* member being assembled */
	struct sbuf mname, mlink;
	int mkind;
	uint16_t mmode;
	uint32_t mmtime;
	uint64_t mdata;	  /* data area start */
	uint64_t mstored; /* data area length (size field / pax size) */
	uint64_t mrealsize;
	int msparse;
	uint64_t *sp; /* (offset, numbytes) pairs */
	size_t nsp, csp;
	struct shardidx__seg *segs;
	size_t csegs;

	/* ST_SPMAP */
	char line[32];
	size_t linelen;
	uint64_t map_count; /* UINT64_MAX until read */
	uint64_t map_blocks;

	struct shardidx__tree *tree;
	uint32_t skipped;
	char msg[160];
	/* Fields read past (a malformed pax mtime): how many; the first one
	 * as shardidx_builder_note says it; the current member's first one,
	 * until member_done names the member in note. */
	uint32_t nignored;
	char note[400];
	char mnote[160];
};

/* ---- small helpers -------------------------------------------------------- */

static int sbuf_set(struct sbuf *s, const char *p, size_t len)
{
	char *q = malloc(len + 1);

	if (!q)
		return -ENOMEM;
	memcpy(q, p, len);
	q[len] = 0;
	free(s->p);
	s->p = q;
	s->len = len;
	s->set = 1;
	return 0;
}

static void sbuf_clear(struct sbuf *s)
{
	free(s->p);
	s->p = NULL;
	s->len = 0;
	s->set = 0;
}

static void pax_clear(struct pax *p)
{
	sbuf_clear(&p->path);
	sbuf_clear(&p->linkpath);
	sbuf_clear(&p->sp_name);
	memset(p, 0, sizeof(*p));
	p->sp_major = -1;
	p->sp_minor = -1;
}

static uint64_t round_blk(uint64_t n)
{
	return (n + BLK - 1) & ~(uint64_t)(BLK - 1);
}

static uint32_t clamp_mtime(int64_t t)
{
	if (t < 0)
		return 0;
	if (t > (int64_t)UINT32_MAX)
		return UINT32_MAX;
	return (uint32_t)t;
}

/*
 * A numeric header field, read as GNU tar reads it: GNU base-256 (high bit
 * of the first byte set; 0x40 is the sign), else octal: one leading NUL and
 * then leading spaces are skipped, the digits end at a NUL, a space or the
 * end of the field, and what follows that end is not looked at (a field
 * with no digits is 0). Any other byte after the digits: -EBADMSG.
 */
static int num_field(const unsigned char *f, size_t len, int64_t *out)
{
	size_t i = 0;
	int64_t v = 0;

	if (f[0] & 0x80) {
		v = (int64_t)(f[0] & 0x3f) - (int64_t)(f[0] & 0x40);
		for (i = 1; i < len; i++) {
			if (v > INT64_MAX / 256 || v < INT64_MIN / 256)
				return -EBADMSG;
			v = v * 256 + f[i];
		}
		*out = v;
		return 0;
	}
	if (len && f[0] == 0)
		i = 1;
	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++)
		v = v * 8 + (f[i] - '0'); /* 12 octal digits fit easily */
	if (i < len && f[i] != 0 && f[i] != ' ')
		return -EBADMSG;
	*out = v;
	return 0;
}

static int cksum_ok(const unsigned char *h)
{
	int64_t stored;
	uint32_t u = 0;
	int32_t s = 0;

	if (num_field(h + 148, 8, &stored) || (h[148] & 0x80))
		return 0;
	for (size_t i = 0; i < BLK; i++) {
		unsigned char c = (i >= 148 && i < 156) ? ' ' : h[i];

		u += c;
		s += (signed char)c;
	}
	return stored == (int64_t)u || stored == (int64_t)s;
}

static int is_zero_block(const unsigned char *h)
{
	for (size_t i = 0; i < BLK; i++)
		if (h[i])
			return 0;
	return 1;
}

int shardidx_looks_like_tar(const void *buf, size_t len)
{
	const unsigned char *h = buf;

	if (len >= 262 && memcmp(h + 257, "ustar", 5) == 0)
		return 1;
	return len >= BLK && (is_zero_block(h) || cksum_ok(h));
}

int shardidx_header_describes(const void *hdr, const struct shardidx_entry *e)
{
	const unsigned char *h = hdr;
	char name[101];
	const char *base;
	int64_t size;

	if (!cksum_ok(h) || num_field(h + 124, 12, &size) || size < 0 || (uint64_t)size != e->size)
		return 0;
	memcpy(name, h, 100);
	name[100] = '\0';
	base = strrchr(name, '/');
	base = base ? base + 1 : name;
	/* a name too long for the field came in a pax/GNU header before: size only */
	return strcmp(base, e->name) == 0 || strlen(e->name) > 90 || strlen(name) >= 99;
}

/* Decimal digits only, no sign; returns 0 or -EBADMSG. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (!len)
		return -EBADMSG;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		if (v > (UINT64_MAX - 9) / 10)
			return -EBADMSG;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* pax time, read as GNU tar reads it: [-]digits[.digits] at the start of
 * the value, anything after them ignored ("999xxx" is 999; *used: the
 * bytes read); floored to whole seconds. -EBADMSG when the value does not
 * start with a digit (the caller then ignores the record, as GNU tar does). */
static int parse_time(const char *s, size_t len, int64_t *out, size_t *used)
{
	size_t i = 0, j;
	int neg = 0, frac = 0;
	uint64_t v;

	if (len && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	for (j = i; j < len && s[j] >= '0' && s[j] <= '9'; j++)
		;
	if (j == i || parse_u64(s + i, j - i, &v))
		return -EBADMSG;
	if (j < len && s[j] == '.') {
		for (j++; j < len && s[j] >= '0' && s[j] <= '9'; j++) {
			if (s[j] != '0')
				frac = 1;
		}
	}
	*used = j;
	if (v > (uint64_t)INT64_MAX - 1)
		v = (uint64_t)INT64_MAX - 1;
	*out = neg ? -(int64_t)v - frac : (int64_t)v;
	return 0;
}

static int damage(struct shardidx_builder *b, int err, uint64_t off, const char *what)
{
	b->err = err;
	b->state = ST_DAMAGED;
	b->pos = off;
	snprintf(b->msg, sizeof(b->msg), "damaged tar stream at offset %llu: %s",
		 (unsigned long long)off, what);
	return err;
}

static int sp_push(struct shardidx_builder *b, uint64_t off, uint64_t nb)
{
	if (b->nsp >= SPARSE_MAX_PAIRS)
		return -EBADMSG;
	if (b->nsp == b->csp) {
		size_t c = b->csp ? b->csp * 2 : 16;
		uint64_t *p = realloc(b->sp, c * 2 * sizeof(*p));

		if (!p)
			return -ENOMEM;
		b->sp = p;
		b->csp = c;
	}
	b->sp[2 * b->nsp] = off;
	b->sp[2 * b->nsp + 1] = nb;
	b->nsp++;
	return 0;
}

/* ---- pax records ------------------------------------------------------------ */

static int key_is(const char *k, size_t klen, const char *want)
{
	return strlen(want) == klen && memcmp(k, want, klen) == 0;
}

/* GNU.sparse.map: "off,nb,off,nb,..." */
static int pax_sparse_map(struct shardidx_builder *b, const char *v, size_t len)
{
	size_t i = 0;
	uint64_t vals[2];
	int r;

	b->nsp = 0;
	if (!len)
		return 0;
	for (;;) {
		for (int k = 0; k < 2; k++) {
			size_t j = i;

			while (j < len && v[j] != ',')
				j++;
			if (parse_u64(v + i, j - i, &vals[k]))
				return -EBADMSG;
			if (k == 0 && j >= len)
				return -EBADMSG;
			i = j + 1;
		}
		r = sp_push(b, vals[0], vals[1]);
		if (r)
			return r;
		if (i > len)
			return 0;
	}
}

/* A field read past (the member's bytes are not in doubt): counted; the
 * first becomes the note, naming the member once member_done knows its
 * name (global: the global header, at once). */
__attribute__((format(printf, 3, 4))) static void ignored(struct shardidx_builder *b, int global,
							  const char *fmt, ...)
{
	char what[sizeof(b->mnote)];
	va_list ap;

	b->nignored++;
	if (b->note[0] || (!global && b->mnote[0]))
		return;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (global)
		snprintf(b->note, sizeof(b->note), "global extended header at offset %llu: %s",
			 (unsigned long long)b->grp_off, what);
	else
		memcpy(b->mnote, what, sizeof(what));
}

static int pax_record(struct shardidx_builder *b, struct pax *p, int global, const char *k,
		      size_t klen, const char *v, size_t vlen)
{
	uint64_t u;
	int r = 0;

	if (key_is(k, klen, "path"))
		return sbuf_set(&p->path, v, vlen);
	if (key_is(k, klen, "linkpath"))
		return sbuf_set(&p->linkpath, v, vlen);
	if (key_is(k, klen, "size")) {
		if (parse_u64(v, vlen, &p->size))
			return -EBADMSG;
		p->has_size = 1;
		return 0;
	}
	if (key_is(k, klen, "mtime")) {
		/* a malformed mtime leaves the member's bytes alone: ignored, as
		 * GNU tar ignores it (the header's mtime is used), or read up to
		 * its first stray byte; noted (shardidx_builder_note) */
		size_t used;
		int bad = parse_time(v, vlen, &p->mtime, &used);

		if (bad || used < vlen)
			ignored(b, global, "extended header record mtime=%.*s%s %s",
				(int)(vlen < 40 ? vlen : 40), v, vlen > 40 ? "..." : "",
				bad ? "ignored: not a time, the header's mtime is used"
				    : "read up to its first stray byte, the rest ignored");
		if (!bad)
			p->has_mtime = 1;
		return 0;
	}
	if (global || klen < 11 || memcmp(k, "GNU.sparse.", 11) != 0)
		return 0;
	if (key_is(k, klen, "GNU.sparse.name"))
		return sbuf_set(&p->sp_name, v, vlen);
	if (key_is(k, klen, "GNU.sparse.major") || key_is(k, klen, "GNU.sparse.minor")) {
		if (parse_u64(v, vlen, &u) || u > 1000)
			return -EBADMSG;
		if (k[11] == 'm' && k[12] == 'a')
			p->sp_major = (int)u;
		else
			p->sp_minor = (int)u;
		return 0;
	}
	if (key_is(k, klen, "GNU.sparse.realsize") || key_is(k, klen, "GNU.sparse.size")) {
		if (parse_u64(v, vlen, &p->realsize))
			return -EBADMSG;
		p->has_realsize = 1;
		return 0;
	}
	if (key_is(k, klen, "GNU.sparse.offset")) {
		if (parse_u64(v, vlen, &u))
			return -EBADMSG;
		p->sp_pairs = 1;
		return sp_push(b, u, UINT64_MAX); /* numbytes must follow */
	}
	if (key_is(k, klen, "GNU.sparse.numbytes")) {
		if (parse_u64(v, vlen, &u) || !b->nsp || b->sp[2 * b->nsp - 1] != UINT64_MAX)
			return -EBADMSG;
		b->sp[2 * b->nsp - 1] = u;
		return 0;
	}
	if (key_is(k, klen, "GNU.sparse.map")) {
		p->sp_pairs = 1;
		r = pax_sparse_map(b, v, vlen);
	}
	return r;
}

/* Parse "LEN KEY=VALUE\n" records. */
static int pax_parse(struct shardidx_builder *b, struct pax *p, int global, const char *d,
		     size_t len)
{
	size_t i = 0;

	while (i < len) {
		size_t j = i, eq, end;
		uint64_t rlen;
		int r;

		if (d[i] == 0) /* NUL padding after the last record */
			break;
		while (j < len && d[j] >= '0' && d[j] <= '9')
			j++;
		if (j >= len || d[j] != ' ' || parse_u64(d + i, j - i, &rlen))
			return -EBADMSG;
		if (rlen < j - i + 4 || rlen > len - i)
			return -EBADMSG;
		end = i + rlen - 1;
		if (d[end] != '\n')
			return -EBADMSG;
		/* a NUL in the keyword is malformed too (GNU tar: "missing
		 * equal sign") */
		for (eq = j + 1; eq < end && d[eq] != '=' && d[eq] != 0; eq++)
			;
		if (eq >= end || eq == j + 1 || d[eq] != '=')
			return -EBADMSG;
		r = pax_record(b, p, global, d + j + 1, eq - j - 1, d + eq + 1, end - eq - 1);
		if (r)
			return r;
		i = end + 1;
	}
	if (p->sp_pairs && b->nsp && b->sp[2 * b->nsp - 1] == UINT64_MAX)
		return -EBADMSG; /* an offset without its numbytes */
	return 0;
}

/* ---- members ------------------------------------------------------------------ */

static void member_reset(struct shardidx_builder *b)
{
	b->mnote[0] = '\0';
	sbuf_clear(&b->longname);
	sbuf_clear(&b->longlink);
	pax_clear(&b->px);
	sbuf_clear(&b->mname);
	sbuf_clear(&b->mlink);
	b->nsp = 0;
	b->msparse = 0;
	b->mrealsize = 0;
	b->map_count = UINT64_MAX;
	b->map_blocks = 0;
	b->linelen = 0;
}

/* Build the segments of a sparse member from its (offset, numbytes) pairs. */
static int sparse_segments(struct shardidx_builder *b, uint64_t data_start, uint64_t avail,
			   uint32_t *nseg)
{
	uint64_t so = 0, prev_end = 0, realsize = b->mrealsize;
	size_t n = 0;

	if (b->csegs < b->nsp) {
		struct shardidx__seg *s = realloc(b->segs, b->nsp * sizeof(*s));

		if (!s)
			return -ENOMEM;
		b->segs = s;
		b->csegs = b->nsp;
	}
	for (size_t i = 0; i < b->nsp; i++) {
		uint64_t off = b->sp[2 * i], nb = b->sp[2 * i + 1];

		if (off < prev_end || nb > SIZE_MAX_STORED || off > SIZE_MAX_STORED ||
		    off + nb > realsize)
			return -EBADMSG;
		if (!nb)
			continue;
		if (nb > avail - so)
			return -EBADMSG;
		b->segs[n].logical = off;
		b->segs[n].stream_off = data_start + so;
		b->segs[n].len = nb;
		n++;
		so += nb;
		prev_end = off + nb;
	}
	*nseg = (uint32_t)n;
	return 0;
}

/* The member's headers (and sparse map) are complete: record it. */
static int member_done(struct shardidx_builder *b, uint64_t data_start)
{
	struct shardidx__member m;
	const char *why = "";
	uint64_t next = b->mdata + round_blk(b->mstored);
	int r;

	memset(&m, 0, sizeof(m));
	m.path = b->mname.p ? b->mname.p : "";
	m.path_len = b->mname.len;
	m.link = b->mlink.p ? b->mlink.p : "";
	m.link_len = b->mlink.len;
	m.kind = b->mkind;
	m.mode = b->mmode;
	m.mtime = b->mmtime;
	m.data_off = data_start;
	m.size = b->mstored;
	m.stored = b->mstored - (data_start - b->mdata);
	if (b->mkind == SHARDIDX__K_REG && b->msparse) {
		uint32_t nseg;

		r = sparse_segments(b, data_start, m.stored, &nseg);
		if (r == -ENOMEM)
			return r;
		if (r)
			return damage(b, r, b->grp_off, "bad sparse map");
		m.sparse = 1;
		m.segs = b->segs;
		m.nseg = nseg;
		m.size = b->mrealsize;
	}
	if (b->mnote[0] && !b->note[0])
		snprintf(b->note, sizeof(b->note), "member %.*s at offset %llu: %s",
			 (int)(m.path_len < 160 ? m.path_len : 160), m.path,
			 (unsigned long long)b->grp_off, b->mnote);
	b->mnote[0] = '\0';
	if (m.kind) {
		r = shardidx__tree_add(b->tree, &m, &why);
		if (r < 0)
			return r;
		if (r > 0) {
			b->skipped++;
			snprintf(b->msg, sizeof(b->msg), "member at offset %llu left out: %s",
				 (unsigned long long)b->grp_off, why);
		}
	}
	member_reset(b);
	b->pos = next;
	b->end_off = next;
	b->grp_off = next;
	b->state = ST_HDR;
	return 0;
}

/* Choose the name of the member: pax beats GNU long names beats the header. */
static int member_names(struct shardidx_builder *b, const unsigned char *h, int posix)
{
	const struct sbuf *name = NULL, *link = NULL;
	char tmp[256 + 1 + 100];
	size_t n = 0;

	if (b->px.sp_name.set && b->msparse)
		name = &b->px.sp_name;
	else if (b->px.path.set)
		name = &b->px.path;
	else if (b->gx.path.set)
		name = &b->gx.path;
	else if (b->longname.set)
		name = &b->longname;
	if (name) {
		if (sbuf_set(&b->mname, name->p, strnlen(name->p, name->len)))
			return -ENOMEM;
	} else {
		if (posix && h[345]) {
			size_t pl = strnlen((const char *)h + 345, 155);

			memcpy(tmp, h + 345, pl);
			tmp[pl] = '/';
			n = pl + 1;
		}
		size_t nl = strnlen((const char *)h, 100);

		memcpy(tmp + n, h, nl);
		n += nl;
		if (sbuf_set(&b->mname, tmp, n))
			return -ENOMEM;
	}

	if (b->px.linkpath.set)
		link = &b->px.linkpath;
	else if (b->gx.linkpath.set)
		link = &b->gx.linkpath;
	else if (b->longlink.set)
		link = &b->longlink;
	if (link)
		return sbuf_set(&b->mlink, link->p, strnlen(link->p, link->len)) ? -ENOMEM : 0;
	return sbuf_set(&b->mlink, (const char *)h + 157, strnlen((const char *)h + 157, 100))
		   ? -ENOMEM
		   : 0;
}

/* Old GNU sparse entries: n entries of 12+12 bytes at e. 1: list ended. */
static int old_sparse_entries(struct shardidx_builder *b, const unsigned char *e, int n)
{
	for (int i = 0; i < n; i++, e += 24) {
		int64_t off, nb;
		int r;

		if (!e[0])
			return 1;
		if (num_field(e, 12, &off) || num_field(e + 12, 12, &nb) || off < 0 || nb < 0)
			return -EBADMSG;
		r = sp_push(b, (uint64_t)off, (uint64_t)nb);
		if (r)
			return r;
	}
	return 0;
}

/* A metadata member of type (L, K, x, g, X) and size bytes whose data is
 * read next (ST_XDATA). Returns 0, -ENOMEM, or damage. */
static int xdata_start(struct shardidx_builder *b, unsigned char type, int64_t size, uint64_t hoff)
{
	if ((uint64_t)size > XDATA_MAX)
		return damage(b, -EBADMSG, hoff, "extended header too large");
	b->xtype = type;
	b->xneed = (size_t)size;
	b->xlen = 0;
	b->xnext = b->pos + round_blk((uint64_t)size);
	if (b->xcap < b->xneed + 1) {
		char *x = realloc(b->x, b->xneed + 1);

		if (!x)
			return -ENOMEM;
		b->x = x;
		b->xcap = b->xneed + 1;
	}
	b->state = ST_XDATA;
	return 0;
}

/* b->mkind of a member of type (0: left out, counted in b->skipped with
 * a reason in b->msg). */
static void member_kind(struct shardidx_builder *b, unsigned char type)
{
	b->mkind = 0;
	switch (type) {
	case '0':
	case '\0':
	case '7':
	case 'S':
		b->mkind = SHARDIDX__K_REG;
		break;
	case '1':
		b->mkind = SHARDIDX__K_HARDLINK;
		break;
	case '2':
		b->mkind = SHARDIDX__K_SYMLINK;
		break;
	case '5':
		b->mkind = SHARDIDX__K_DIR;
		b->mstored = 0; /* tar ignores a directory's size */
		break;
	case 'D':
		b->mkind = SHARDIDX__K_DIR; /* dumpdir: its data is a listing, skipped */
		break;
	case 'V':
		break; /* volume label */
	case '3':
	case '4':
	case '6':
		b->skipped++;
		snprintf(b->msg, sizeof(b->msg), "device or fifo at offset %llu left out",
			 (unsigned long long)b->grp_off);
		break;
	case 'M':
		/* the rest of a file begun on another volume: GNU tar does not
		 * extract it either */
		b->skipped++;
		snprintf(b->msg, sizeof(b->msg),
			 "member at offset %llu left out: continued from another volume",
			 (unsigned long long)b->grp_off);
		break;
	default:
		/* any other type, vendor types 'A'-'Z' included, is a regular
		 * file: GNU tar extracts it as one (with a warning), as POSIX
		 * says of unknown types */
		b->mkind = SHARDIDX__K_REG;
		break;
	}
}

/* Whether the regular member of header h is sparse (old GNU 'S' in a gnu
 * header, or PAX GNU.sparse 0.x/1.0), and its real size. Returns 0,
 * -ENOMEM, or damage. */
static int member_sparse(struct shardidx_builder *b, const unsigned char *h, int gnu, uint64_t hoff)
{
	int r;

	if (b->mkind != SHARDIDX__K_REG)
		return 0;
	if (h[156] == 'S' && gnu) {
		int64_t rs;

		b->msparse = 1;
		b->nsp = 0;
		r = old_sparse_entries(b, h + 386, 4);
		if (r < 0)
			return r == -ENOMEM ? r : damage(b, r, hoff, "bad sparse header");
		if (num_field(h + 483, 12, &rs) || rs < 0)
			return damage(b, -EBADMSG, hoff, "bad sparse realsize");
		b->mrealsize = (uint64_t)rs;
	} else if (b->px.sp_major > 1 || (b->px.sp_major == 1 && b->px.sp_minor > 0)) {
		return damage(b, -EBADMSG, hoff, "unsupported GNU sparse version");
	} else if (b->px.sp_major == 1 || b->px.sp_pairs) {
		b->msparse = 1;
		b->mrealsize = b->px.has_realsize ? b->px.realsize : b->mstored;
	}
	if (b->msparse && !b->mrealsize) {
		/* no realsize: the end of the last piece */
		for (size_t i = 0; i < b->nsp; i++)
			if (b->sp[2 * i] + b->sp[2 * i + 1] > b->mrealsize &&
			    b->sp[2 * i] <= SIZE_MAX_STORED && b->sp[2 * i + 1] <= SIZE_MAX_STORED)
				b->mrealsize = b->sp[2 * i] + b->sp[2 * i + 1];
	}
	return 0;
}

static int on_header(struct shardidx_builder *b)
{
	const unsigned char *h = b->blk;
	uint64_t hoff = b->pos - BLK;
	int64_t size, mode = 0, mtime = 0;
	int posix, gnu, r;
	unsigned char type = h[156];
	uint64_t stored;

	if (is_zero_block(h)) {
		b->state = ST_END;
		return 1;
	}
	if (!cksum_ok(h))
		return damage(b, -EBADMSG, hoff, "header checksum mismatch");
	posix = memcmp(h + 257, "ustar\0", 6) == 0;
	gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
	if (num_field(h + 124, 12, &size) || size < 0 || (uint64_t)size > SIZE_MAX_STORED)
		return damage(b, -EBADMSG, hoff, "bad size field");

	/* Metadata members whose data we need. */
	if (type == 'L' || type == 'K' || type == 'x' || type == 'g' || type == 'X')
		return xdata_start(b, type, size, hoff);

	/* A real member. */
	if (num_field(h + 100, 8, &mode))
		mode = 0;
	if (num_field(h + 136, 12, &mtime))
		mtime = 0;
	if (b->px.has_mtime)
		mtime = b->px.mtime;
	else if (b->gx.has_mtime)
		mtime = b->gx.mtime;
	stored = (uint64_t)size;
	if (b->px.has_size)
		stored = b->px.size;
	else if (b->gx.has_size)
		stored = b->gx.size;
	if (stored > SIZE_MAX_STORED)
		return damage(b, -EBADMSG, hoff, "bad size");
	b->mmode = (uint16_t)(mode & 07777);
	b->mmtime = clamp_mtime(mtime);
	b->mdata = b->pos;
	b->mstored = stored;
	member_kind(b, type);
	r = member_sparse(b, h, gnu, hoff);
	if (r)
		return r;

	/* A regular member whose name ends in '/' is a directory (how v7 and
	 * old GNU archives store one); as GNU tar does, its data area is still
	 * size bytes long and is skipped. */
	r = member_names(b, h, posix);
	if (r)
		return r;
	if (b->mkind == SHARDIDX__K_REG && !b->msparse && b->mname.len &&
	    b->mname.p[b->mname.len - 1] == '/')
		b->mkind = SHARDIDX__K_DIR;

	if (b->mkind == SHARDIDX__K_REG && type == 'S' && gnu && h[482]) {
		b->state = ST_SPEXT;
		return 0;
	}
	if (b->mkind == SHARDIDX__K_REG && b->msparse && b->px.sp_major == 1) {
		b->nsp = 0;
		b->map_count = UINT64_MAX;
		b->map_blocks = 0;
		b->linelen = 0;
		if (!stored)
			return damage(b, -EBADMSG, hoff, "sparse 1.0 member without a map");
		b->state = ST_SPMAP;
		return 0;
	}
	return member_done(b, b->pos);
}

static int on_xdata(struct shardidx_builder *b)
{
	int r = 0;

	b->x[b->xlen] = 0;
	switch (b->xtype) {
	case 'L':
		r = sbuf_set(&b->longname, b->x, strnlen(b->x, b->xlen));
		break;
	case 'K':
		r = sbuf_set(&b->longlink, b->x, strnlen(b->x, b->xlen));
		break;
	case 'x':
	case 'X':
		/* of several extended headers before one member only the last
		 * applies (GNU tar, bsdtar, Go): an earlier one is dropped whole */
		pax_clear(&b->px);
		b->nsp = 0;
		r = pax_parse(b, &b->px, 0, b->x, b->xlen);
		break;
	case 'g':
		pax_clear(&b->gx);
		r = pax_parse(b, &b->gx, 1, b->x, b->xlen);
		break;
	}
	if (r == -ENOMEM)
		return r;
	if (r)
		return damage(b, r, b->grp_off, "malformed extended header");
	b->pos = b->xnext;
	b->state = ST_HDR;
	if (b->xtype == 'g') { /* a global header is a member group of its own */
		b->end_off = b->pos;
		b->grp_off = b->pos;
	}
	return 0;
}

static int on_spext(struct shardidx_builder *b)
{
	int r = old_sparse_entries(b, b->blk, 21);

	if (r < 0)
		return r == -ENOMEM ? r : damage(b, r, b->grp_off, "bad extended sparse header");
	if (b->blk[504]) {
		b->mdata = b->pos; /* data follows the extended headers */
		return 0;
	}
	b->mdata = b->pos;
	return member_done(b, b->pos);
}

/* One 512-byte block of the GNU sparse 1.0 map: decimal numbers, one a line. */
static int on_spmap(struct shardidx_builder *b)
{
	b->map_blocks++;
	if (b->map_blocks * BLK > b->mstored)
		return damage(b, -EBADMSG, b->grp_off, "sparse map longer than the member");
	for (size_t i = 0; i < BLK; i++) {
		char c = (char)b->blk[i];
		uint64_t v;
		int r;

		if (c != '\n') {
			if (b->linelen >= 20)
				return damage(b, -EBADMSG, b->grp_off, "bad sparse map");
			b->line[b->linelen++] = c;
			continue;
		}
		if (parse_u64(b->line, b->linelen, &v))
			return damage(b, -EBADMSG, b->grp_off, "bad sparse map");
		b->linelen = 0;
		if (b->map_count == UINT64_MAX) {
			if (v > SPARSE_MAX_PAIRS)
				return damage(b, -EBADMSG, b->grp_off, "sparse map too large");
			b->map_count = v;
		} else if (b->nsp && b->sp[2 * b->nsp - 1] == UINT64_MAX) {
			b->sp[2 * b->nsp - 1] = v;
		} else {
			r = sp_push(b, v, UINT64_MAX);
			if (r)
				return r;
		}
		if (b->map_count != UINT64_MAX && b->nsp == b->map_count &&
		    (!b->nsp || b->sp[2 * b->nsp - 1] != UINT64_MAX))
			return member_done(b, b->mdata + b->map_blocks * BLK);
	}
	return 0;
}

/* ---- public ------------------------------------------------------------------- */

struct shardidx_builder *shardidx_builder_new(void)
{
	struct shardidx_builder *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->tree = shardidx__tree_new();
	if (!b->tree) {
		free(b);
		return NULL;
	}
	pax_clear(&b->px);
	pax_clear(&b->gx);
	b->map_count = UINT64_MAX;
	b->state = ST_HDR;
	return b;
}

void shardidx_builder_free(struct shardidx_builder *b)
{
	if (!b)
		return;
	member_reset(b);
	pax_clear(&b->gx);
	free(b->x);
	free(b->sp);
	free(b->segs);
	shardidx__tree_free(b->tree);
	free(b);
}

uint64_t shardidx_builder_want(const struct shardidx_builder *b)
{
	return b->pos;
}

const char *shardidx_builder_message(const struct shardidx_builder *b)
{
	return b->msg;
}

const char *shardidx_builder_note(const struct shardidx_builder *b, uint32_t *count)
{
	if (count)
		*count = b->nignored;
	return b->note;
}

int shardidx_builder_feed(struct shardidx_builder *b, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t cur = b->pos; /* stream offset of p[0] */
	int r;

	if (b->state == ST_DAMAGED)
		return b->err;
	if (len && cur + len > b->fed_end)
		b->fed_end = cur + len;
	while (len && b->state != ST_END && b->state != ST_DAMAGED) {
		size_t n;

		if (cur < b->pos) { /* member data: skip */
			uint64_t skip = b->pos - cur;

			n = skip < len ? (size_t)skip : len;
			p += n;
			len -= n;
			cur += n;
			continue;
		}
		if (b->state == ST_XDATA) {
			n = b->xneed - b->xlen < len ? b->xneed - b->xlen : len;
			memcpy(b->x + b->xlen, p, n);
			b->xlen += n;
		} else {
			n = BLK - b->bfill < len ? BLK - b->bfill : len;
			memcpy(b->blk + b->bfill, p, n);
			b->bfill += n;
		}
		p += n;
		len -= n;
		cur += n;
		b->pos += n;
		r = 0;
		if (b->state == ST_XDATA) {
			if (b->xlen == b->xneed)
				r = on_xdata(b);
		} else if (b->bfill == BLK) {
			b->bfill = 0;
			if (b->state == ST_HDR)
				r = on_header(b);
			else if (b->state == ST_SPEXT)
				r = on_spext(b);
			else
				r = on_spmap(b);
		}
		if (r < 0 && b->state != ST_DAMAGED) /* -ENOMEM */
			return damage(b, r, b->grp_off, "out of memory");
	}
	/* An empty L/K/x/g member needs no bytes. */
	while (b->state == ST_XDATA && b->xlen == b->xneed)
		if ((r = on_xdata(b)) < 0)
			return r;
	if (b->state == ST_DAMAGED)
		return b->err;
	return b->state == ST_END ? 1 : 0;
}

int shardidx_builder_finish(struct shardidx_builder *b, uint64_t stream_size, struct shardidx **out)
{
	struct shardidx *ix = NULL;
	int r;

	if (!out) {
		shardidx_builder_free(b);
		return -EINVAL;
	}
	*out = NULL;
	if (!b)
		return -EINVAL;
	if (stream_size < b->fed_end) {
		r = -EINVAL;
		goto out;
	}
	/* A stream that ends exactly after a complete member, with no header
	 * begun, is whole: many writers leave out the two zero blocks and GNU
	 * tar reads such archives without complaint (an empty file too). */
	if (b->state == ST_HDR && b->bfill == 0 && b->pos == stream_size && b->grp_off == b->pos)
		b->state = ST_END;
	if (b->state != ST_END && b->state != ST_DAMAGED) {
		uint64_t at = b->pos < stream_size ? b->pos : stream_size;

		damage(b, -EIO, at, "the stream ends before the end-of-archive marker");
	}
	ix = calloc(1, sizeof(*ix));
	if (!ix) {
		r = -ENOMEM;
		goto out;
	}
	r = shardidx__tree_finish(b->tree, stream_size, ix);
	if (r)
		goto out;
	ix->end_off = b->end_off < stream_size ? b->end_off : stream_size;
	ix->damage = b->state == ST_DAMAGED ? b->err : 0;
	ix->damage_off = b->state == ST_DAMAGED ? b->pos : 0;
	ix->skipped = b->skipped;
	*out = ix;
	ix = NULL;
out:
	shardidx_free(ix);
	shardidx_builder_free(b);
	return r;
}
