/*
 * shardidx_pax.c — pax extended headers ('x' and 'g' records), GNU long
 * names ('L', 'K'), the buffered data of those metadata members, and the
 * choice of a member's name (pax beats GNU long names beats the header).
 *
 * Where tar readers disagree this follows GNU tar: of several pax 'x'
 * headers before one member only the last applies; a pax mtime is read up
 * to its first stray byte ("999xxx" is 999) and ignored when it has no
 * digits (either is noted, naming the member: shardidx_builder_note).
 *
 * Non-goals: the sparse map a pax header may carry is parsed here as
 * records, but its segments are shardidx_sparse.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx_i.h"

void shardidx__pax_clear(struct pax *p)
{
	shardidx__sbuf_clear(&p->path);
	shardidx__sbuf_clear(&p->linkpath);
	shardidx__sbuf_clear(&p->sp_name);
	memset(p, 0, sizeof(*p));
	p->sp_major = -1;
	p->sp_minor = -1;
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
			if (shardidx__parse_u64(v + i, j - i, &vals[k]))
				return -EBADMSG;
			if (k == 0 && j >= len)
				return -EBADMSG;
			i = j + 1;
		}
		r = shardidx__sp_push(b, vals[0], vals[1]);
		if (r)
			return r;
		if (i > len)
			return 0;
	}
}

/* A field read past (the member's bytes are not in doubt): counted; the
 * first becomes the note, naming the member once shardidx__member_done knows its
 * name (global: the global header, at once). */
__attribute__((format(printf, 3, 4))) void shardidx__ignored(struct shardidx_builder *b, int global,
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
		return shardidx__sbuf_set(&p->path, v, vlen);
	if (key_is(k, klen, "linkpath"))
		return shardidx__sbuf_set(&p->linkpath, v, vlen);
	if (key_is(k, klen, "size")) {
		if (shardidx__parse_u64(v, vlen, &p->size))
			return -EBADMSG;
		p->has_size = 1;
		return 0;
	}
	if (key_is(k, klen, "mtime")) {
		/* a malformed mtime leaves the member's bytes alone: ignored, as
		 * GNU tar ignores it (the header's mtime is used), or read up to
		 * its first stray byte; noted (shardidx_builder_note) */
		size_t used;
		int bad = shardidx__parse_time(v, vlen, &p->mtime, &used);

		if (bad || used < vlen)
			shardidx__ignored(
			    b, global, "extended header record mtime=%.*s%s %s",
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
		return shardidx__sbuf_set(&p->sp_name, v, vlen);
	if (key_is(k, klen, "GNU.sparse.major") || key_is(k, klen, "GNU.sparse.minor")) {
		if (shardidx__parse_u64(v, vlen, &u) || u > 1000)
			return -EBADMSG;
		if (k[11] == 'm' && k[12] == 'a')
			p->sp_major = (int)u;
		else
			p->sp_minor = (int)u;
		return 0;
	}
	if (key_is(k, klen, "GNU.sparse.realsize") || key_is(k, klen, "GNU.sparse.size")) {
		if (shardidx__parse_u64(v, vlen, &p->realsize))
			return -EBADMSG;
		p->has_realsize = 1;
		return 0;
	}
	if (key_is(k, klen, "GNU.sparse.offset")) {
		if (shardidx__parse_u64(v, vlen, &u))
			return -EBADMSG;
		p->sp_pairs = 1;
		return shardidx__sp_push(b, u, UINT64_MAX); /* numbytes must follow */
	}
	if (key_is(k, klen, "GNU.sparse.numbytes")) {
		if (shardidx__parse_u64(v, vlen, &u) || !b->nsp ||
		    b->sp[2 * b->nsp - 1] != UINT64_MAX)
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
		if (j >= len || d[j] != ' ' || shardidx__parse_u64(d + i, j - i, &rlen))
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

/* Choose the name of the member: pax beats GNU long names beats the header. */
int shardidx__member_names(struct shardidx_builder *b, const unsigned char *h, int posix)
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
		if (shardidx__sbuf_set(&b->mname, name->p, strnlen(name->p, name->len)))
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
		if (shardidx__sbuf_set(&b->mname, tmp, n))
			return -ENOMEM;
	}

	if (b->px.linkpath.set)
		link = &b->px.linkpath;
	else if (b->gx.linkpath.set)
		link = &b->gx.linkpath;
	else if (b->longlink.set)
		link = &b->longlink;
	if (link)
		return shardidx__sbuf_set(&b->mlink, link->p, strnlen(link->p, link->len)) ? -ENOMEM
											   : 0;
	return shardidx__sbuf_set(&b->mlink, (const char *)h + 157,
				  strnlen((const char *)h + 157, 100))
		   ? -ENOMEM
		   : 0;
}

/* A metadata member of type (L, K, x, g, X) and size bytes whose data is
 * read next (ST_XDATA). Returns 0, -ENOMEM, or damage. */
int shardidx__xdata_start(struct shardidx_builder *b, unsigned char type, int64_t size,
			  uint64_t hoff)
{
	if ((uint64_t)size > XDATA_MAX) {
		char what[160];

		/* GNU tar reads one; this reader buffers one whole (shardidx.h,
		 * README: the limit), so the members from here on are left out */
		snprintf(what, sizeof(what),
			 "extended header ('%c') of %" PRIu64
			 " bytes is over the %u MiB this reader takes; "
			 "the members after it are left out",
			 type, (uint64_t)size, XDATA_MAX >> 20);
		return shardidx__damage(b, -EBADMSG, hoff, what);
	}
	b->xtype = type;
	b->xneed = (size_t)size;
	b->xlen = 0;
	b->xnext = b->pos + shardidx__round_blk((uint64_t)size);
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

int shardidx__on_xdata(struct shardidx_builder *b)
{
	int r = 0;

	b->x[b->xlen] = 0;
	switch (b->xtype) {
	case 'L':
		r = shardidx__sbuf_set(&b->longname, b->x, strnlen(b->x, b->xlen));
		break;
	case 'K':
		r = shardidx__sbuf_set(&b->longlink, b->x, strnlen(b->x, b->xlen));
		break;
	case 'x':
	case 'X':
		/* of several extended headers before one member only the last
		 * applies (GNU tar, bsdtar, Go): an earlier one is dropped whole */
		shardidx__pax_clear(&b->px);
		b->nsp = 0;
		r = pax_parse(b, &b->px, 0, b->x, b->xlen);
		break;
	case 'g':
		shardidx__pax_clear(&b->gx);
		r = pax_parse(b, &b->gx, 1, b->x, b->xlen);
		break;
	}
	if (r == -ENOMEM)
		return r;
	if (r)
		return shardidx__damage(b, r, b->grp_off, "malformed extended header");
	b->pos = b->xnext;
	b->state = ST_HDR;
	if (b->xtype == 'g') { /* a global header is a member group of its own */
		b->end_off = b->pos;
		b->grp_off = b->pos;
	}
	return 0;
}
