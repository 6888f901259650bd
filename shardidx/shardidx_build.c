/*
 * shardidx_build.c — the tar push parser: its state machine and the
 * members it records.
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
 * and 1.0). The first zero block ends the archive (GNU tar also stops at a
 * lone zero block). Like GNU tar, the data area of every member type except
 * '5' is size bytes long (a regular member named "dir/", an old-style
 * directory, included). Where tar readers disagree this follows GNU tar:
 * unknown type flags ('A'-'Z' other than GNU's D, K, L, M, S, V, and
 * POSIX's X) are regular files.
 *
 * Damage: a header that fails its checksum or does not parse, a malformed
 * pax record (or a malformed size, path or sparse value: GNU tar reports
 * those as errors and the member's bytes would be a guess) or sparse map
 * stops parsing with -EBADMSG at the offset of the member's first header;
 * finish() records -EIO where the stream ends if the end-of-archive marker
 * was not seen.
 *
 * The rest of the parser, one concern a file (sharing the builder's state
 * through shardidx_i.h):
 *   shardidx_field.c   header fields and numbers, checksums, pax numbers
 *   shardidx_pax.c     pax records, GNU long names, the member's name
 *   shardidx_sparse.c  sparse maps: old GNU, pax 0.0/0.1, GNU 1.0
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

int shardidx__damage(struct shardidx_builder *b, int err, uint64_t off, const char *what)
{
	b->err = err;
	b->state = ST_DAMAGED;
	b->pos = off;
	snprintf(b->msg, sizeof(b->msg), "damaged tar stream at offset %llu: %s",
		 (unsigned long long)off, what);
	return err;
}

/* ---- members ------------------------------------------------------------------ */

static void member_reset(struct shardidx_builder *b)
{
	b->mnote[0] = '\0';
	shardidx__sbuf_clear(&b->longname);
	shardidx__sbuf_clear(&b->longlink);
	shardidx__pax_clear(&b->px);
	shardidx__sbuf_clear(&b->mname);
	shardidx__sbuf_clear(&b->mlink);
	b->nsp = 0;
	b->msparse = 0;
	b->mrealsize = 0;
	b->map_count = UINT64_MAX;
	b->map_blocks = 0;
	b->linelen = 0;
}

/* The member's headers (and sparse map) are complete: record it. */
int shardidx__member_done(struct shardidx_builder *b, uint64_t data_start)
{
	struct shardidx__member m;
	const char *why = "";
	uint64_t next = b->mdata + shardidx__round_blk(b->mstored);
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

		r = shardidx__sparse_segments(b, data_start, m.stored, &nseg);
		if (r == -ENOMEM)
			return r;
		if (r)
			return shardidx__damage(b, r, b->grp_off, "bad sparse map");
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
			snprintf(b->msg, sizeof(b->msg), "member at offset %llu %s: %s",
				 (unsigned long long)b->grp_off, r == 2 ? "indexed" : "left out",
				 why);
		}
	}
	/* the member that made the count nonzero (here, or by its type in
	 * member_kind): named with b->msg's reason */
	if (b->skipped && !b->skip[0])
		snprintf(b->skip, sizeof(b->skip), "'%.*s%s': %s",
			 (int)(m.path_len < 200 ? m.path_len : 200), m.path,
			 m.path_len > 200 ? "..." : "", b->msg);
	member_reset(b);
	b->pos = next;
	b->end_off = next;
	b->grp_off = next;
	b->state = ST_HDR;
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

static int on_header(struct shardidx_builder *b)
{
	const unsigned char *h = b->blk;
	uint64_t hoff = b->pos - BLK;
	int64_t size, mode = 0, mtime = 0;
	int posix, gnu, r;
	unsigned char type = h[156];
	uint64_t stored;

	if (shardidx__is_zero_block(h)) {
		b->state = ST_END;
		return 1;
	}
	if (!shardidx__cksum_ok(h))
		return shardidx__damage(b, -EBADMSG, hoff, "header checksum mismatch");
	posix = memcmp(h + 257, "ustar\0", 6) == 0;
	gnu = memcmp(h + 257, "ustar  \0", 8) == 0;
	if (shardidx__num_field(h + 124, 12, &size) || size < 0 || (uint64_t)size > SIZE_MAX_STORED)
		return shardidx__damage(b, -EBADMSG, hoff, "bad size field");

	/* Metadata members whose data we need. */
	if (type == 'L' || type == 'K' || type == 'x' || type == 'g' || type == 'X')
		return shardidx__xdata_start(b, type, size, hoff);

	/* A real member. */
	if (shardidx__num_field(h + 100, 8, &mode))
		mode = 0;
	if (shardidx__num_field(h + 136, 12, &mtime))
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
		return shardidx__damage(b, -EBADMSG, hoff, "bad size");
	b->mmode = (uint16_t)(mode & 07777);
	b->mmtime = shardidx__clamp_mtime(mtime);
	b->mdata = b->pos;
	b->mstored = stored;
	member_kind(b, type);
	r = shardidx__member_sparse(b, h, gnu, hoff);
	if (r)
		return r;

	/* A regular member whose name ends in '/' is a directory (how v7 and
	 * old GNU archives store one); as GNU tar does, its data area is still
	 * size bytes long and is skipped. */
	r = shardidx__member_names(b, h, posix);
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
			return shardidx__damage(b, -EBADMSG, hoff,
						"sparse 1.0 member without a map");
		b->state = ST_SPMAP;
		return 0;
	}
	return shardidx__member_done(b, b->pos);
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
	shardidx__pax_clear(&b->px);
	shardidx__pax_clear(&b->gx);
	b->map_count = UINT64_MAX;
	b->state = ST_HDR;
	return b;
}

void shardidx_builder_free(struct shardidx_builder *b)
{
	if (!b)
		return;
	member_reset(b);
	shardidx__pax_clear(&b->gx);
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

const char *shardidx_builder_skipped(const struct shardidx_builder *b, uint32_t *count)
{
	if (count)
		*count = b->skipped;
	return b->skip;
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
				r = shardidx__on_xdata(b);
		} else if (b->bfill == BLK) {
			b->bfill = 0;
			if (b->state == ST_HDR)
				r = on_header(b);
			else if (b->state == ST_SPEXT)
				r = shardidx__on_spext(b);
			else
				r = shardidx__on_spmap(b);
		}
		if (r < 0 && b->state != ST_DAMAGED) /* -ENOMEM */
			return shardidx__damage(b, r, b->grp_off, "out of memory");
	}
	/* An empty L/K/x/g member needs no bytes. */
	while (b->state == ST_XDATA && b->xlen == b->xneed)
		if ((r = shardidx__on_xdata(b)) < 0)
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

		shardidx__damage(b, -EIO, at, "the stream ends before the end-of-archive marker");
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
	if (b->skip[0] && !(ix->skip_first = strdup(b->skip))) {
		r = -ENOMEM;
		goto out;
	}
	*out = ix;
	ix = NULL;
out:
	shardidx_free(ix);
	shardidx_builder_free(b);
	return r;
}
