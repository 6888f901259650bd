/*
 * shardidx_sparse.c — sparse members: old GNU 'S' headers and their
 * extended sparse headers, the pax GNU.sparse 0.0/0.1 pairs and the GNU
 * sparse 1.0 map at the start of the member's data (decimal numbers, one a
 * line), and the segments of a member built from its (offset, numbytes)
 * pairs.
 *
 * A malformed map stops parsing with -EBADMSG (shardidx_build.c says
 * where). Non-goals: the holes themselves are never read; reading a
 * sparse member is the index's (shardidx_index.c).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardidx_i.h"

int shardidx__sp_push(struct shardidx_builder *b, uint64_t off, uint64_t nb)
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

/* Build the segments of a sparse member from its (offset, numbytes) pairs. */
int shardidx__sparse_segments(struct shardidx_builder *b, uint64_t data_start, uint64_t avail,
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

/* Old GNU sparse entries: n entries of 12+12 bytes at e. 1: list ended. */
static int old_sparse_entries(struct shardidx_builder *b, const unsigned char *e, int n)
{
	for (int i = 0; i < n; i++, e += 24) {
		int64_t off, nb;
		int r;

		if (!e[0])
			return 1;
		if (shardidx__num_field(e, 12, &off) || shardidx__num_field(e + 12, 12, &nb) ||
		    off < 0 || nb < 0)
			return -EBADMSG;
		r = shardidx__sp_push(b, (uint64_t)off, (uint64_t)nb);
		if (r)
			return r;
	}
	return 0;
}

/* Whether the regular member of header h is sparse (old GNU 'S' in a gnu
 * header, or PAX GNU.sparse 0.x/1.0), and its real size. Returns 0,
 * -ENOMEM, or damage. */
int shardidx__member_sparse(struct shardidx_builder *b, const unsigned char *h, int gnu,
			    uint64_t hoff)
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
			return r == -ENOMEM ? r : shardidx__damage(b, r, hoff, "bad sparse header");
		if (shardidx__num_field(h + 483, 12, &rs) || rs < 0)
			return shardidx__damage(b, -EBADMSG, hoff, "bad sparse realsize");
		b->mrealsize = (uint64_t)rs;
	} else if (b->px.sp_major > 1 || (b->px.sp_major == 1 && b->px.sp_minor > 0)) {
		return shardidx__damage(b, -EBADMSG, hoff, "unsupported GNU sparse version");
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

int shardidx__on_spext(struct shardidx_builder *b)
{
	int r = old_sparse_entries(b, b->blk, 21);

	if (r < 0)
		return r == -ENOMEM
			   ? r
			   : shardidx__damage(b, r, b->grp_off, "bad extended sparse header");
	if (b->blk[504]) {
		b->mdata = b->pos; /* data follows the extended headers */
		return 0;
	}
	b->mdata = b->pos;
	return shardidx__member_done(b, b->pos);
}

/* One 512-byte block of the GNU sparse 1.0 map: decimal numbers, one a line. */
int shardidx__on_spmap(struct shardidx_builder *b)
{
	b->map_blocks++;
	if (b->map_blocks * BLK > b->mstored)
		return shardidx__damage(b, -EBADMSG, b->grp_off,
					"sparse map longer than the member");
	for (size_t i = 0; i < BLK; i++) {
		char c = (char)b->blk[i];
		uint64_t v;
		int r;

		if (c != '\n') {
			if (b->linelen >= 20)
				return shardidx__damage(b, -EBADMSG, b->grp_off, "bad sparse map");
			b->line[b->linelen++] = c;
			continue;
		}
		if (shardidx__parse_u64(b->line, b->linelen, &v))
			return shardidx__damage(b, -EBADMSG, b->grp_off, "bad sparse map");
		b->linelen = 0;
		if (b->map_count == UINT64_MAX) {
			if (v > SPARSE_MAX_PAIRS)
				return shardidx__damage(b, -EBADMSG, b->grp_off,
							"sparse map too large");
			b->map_count = v;
		} else if (b->nsp && b->sp[2 * b->nsp - 1] == UINT64_MAX) {
			b->sp[2 * b->nsp - 1] = v;
		} else {
			r = shardidx__sp_push(b, v, UINT64_MAX);
			if (r)
				return r;
		}
		if (b->map_count != UINT64_MAX && b->nsp == b->map_count &&
		    (!b->nsp || b->sp[2 * b->nsp - 1] != UINT64_MAX))
			return shardidx__member_done(b, b->mdata + b->map_blocks * BLK);
	}
	return 0;
}
