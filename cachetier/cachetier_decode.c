/*
 * cachetier_decode.c — decode a compressed shard once into the cache dir.
 *
 * gzip (zlib, multi-member) and zstd (multi-frame) streams are decoded
 * sequentially into a temp file (disk_tmp_open) which is fsynced and renamed
 * to its final name, then the directory fsynced (disk_commit); a small
 * record (magic, version, sizes, damage, a CRC32C per CT_DEC_UNIT of the
 * copy, checksums) written after it marks the decode complete. A later
 * open finds the record, checks the data file's size against it and reuses
 * the copy; the CRCs go with the object (o->dcrc), and the read path
 * (cachetier_objread.c obj_dec_check) checks each unit on its first read by this
 * process. The CRCs are computed as the decoder writes (dec_crc: one more
 * pass over bytes in the L1/L2 cache), so a copy this process wrote is
 * trusted without reading it back.
 *
 * Never wrong bytes: a gzip member or zstd frame is trusted only once its
 * checksum has been verified at its end. On corruption the output of the
 * member/frame that failed is cut off (the file is truncated back to where
 * that member began). A stream that simply ends early (truncated download)
 * keeps everything it decoded: a prefix of a valid deflate/zstd stream
 * decodes to a prefix of the original bytes. Either way the damage and its
 * compressed offset are recorded.
 *
 * Bytes after a complete stream (after at least one gzip member or zstd
 * frame ended with its checksum verified, where no further member or frame
 * begins) are not damage: zero padding (bsdtar pads its compressed output
 * to a 10240-byte block) is read past silently; anything else is ignored,
 * as gzip does, with one warning naming the shard, the offset and the
 * count, logged through the backend's log when the stream is decoded (a
 * reused copy does not log it again). A tar cut short by them is damage
 * the index reports.
 *
 * Decoded copies count in the cache tier's usage (the directory's counter
 * and ct->decoded_used, from the first byte written) and are evicted least
 * recently used (cachetier_evict.c; decoding makes room every
 * DEC_ROOM_BYTES). A copy bigger than cache_size_bytes is allowed: the
 * cache then runs over its limit while the copy is in use, as it does for
 * pinned units.
 *
 * Whole or error (docs/design.md section 3): decoding is refused, the partial
 * output removed and cachetier_obj_open fails, when
 *   - the decoded bytes pass cfg.max_decoded_bytes, or pass
 *     DEC_RATIO_FLOOR_BYTES and cfg.max_decode_ratio times the compressed
 *     bytes read so far (-EFBIG: a decompression bomb; checked on every
 *     write, so a bomb stops after at most max(floor, ratio x what it
 *     read) bytes, never after the whole stream). A refusal record keeps
 *     the bound and the point; a later open whose bound is no looser fails
 *     at once (cachetier_obj_refusal reads it for the log line);
 *   - the disk has no room left above cfg.min_free_bytes, even after
 *     cachetier__make_room evicted what it could (-ENOSPC; looked at with
 *     fstatvfs at the start, every DEC_FREE_CHECK_BYTES written and
 *     whenever the room seen last is used up; a write that fails with
 *     ENOSPC or EDQUOT counts the same). Nothing is recorded: the next open
 *     tries again.
 * Only damage (a truncated or corrupt stream) keeps a prefix.
 *
 * The compressed bytes of a remote shard are read through the unit store
 * (d->raw: parallel fills, readahead, cached for later).
 *
 * Non-goals: decoding while a reader waits on a prefix; evicting decoded
 * copies (they count in the usage; only the unit store is evicted to make
 * room).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "cachetier_i.h"

#define DEC_IN_BYTES  (1u << 20)
#define DEC_OUT_BYTES (1u << 20)
/* How often the free space is looked at again while decoding. */
#define DEC_FREE_CHECK_BYTES (64u << 20)
/* How often decoding makes room in the cache for what it wrote. */
#define DEC_ROOM_BYTES (4u << 20)
/* The ratio bound applies past this many decoded bytes only: small tars
 * are mostly headers and zero padding and may compress far more than any
 * real shard (a 10 KiB tar of one tiny member: ~100 compressed bytes). A
 * bomb may always cost this much disk, briefly. */
#define DEC_RATIO_FLOOR_BYTES (64ull << 20)

/* The decode record: fixed-width little-endian fields.
 *    0 magic (8)           8 version (8)        16 decoded size (8)
 *   24 -damage (8)        32 damage offset (8)  40 bound (4)
 *   44 max ratio (4)      48 max bytes (8)      56 unit bytes, CT_DEC_UNIT (4)
 *   60 reserved, 0 (4)    64 FNV-1a of [0, 64) (8)
 *   72 the copy's CRC32C per unit (4 each): ceil(size / unit) of them, none
 *      in a refusal; then FNV-1a of those CRC bytes (8).
 * Version 3 added the unit CRCs (a copy with a version 2 record is decoded
 * again). Since version 2 a record with damage -EFBIG is a refusal (no
 * data file), never a copy cut at a limit (version 1 kept those). */
#define REC_MAGIC   "SHDEC\0\0\1"
#define REC_VERSION 3u
#define REC_HDR	    72

struct dec_rec {
	uint64_t size;	     /* decoded bytes (a refusal: when it stopped) */
	int damage;	     /* 0, damage found, or -EFBIG: refused */
	uint64_t damage_off; /* compressed offset of the damage or of the stop */
	uint32_t bound;	     /* refusal: enum cachetier_bound */
	uint32_t max_ratio;  /* refusal: the bounds in force */
	uint64_t max_bytes;
};

struct dec {
	struct cachetier *ct;
	const struct backend_objinfo *info;
	int srcfd;		   /* local source fd, or -1: remote, read through raw */
	struct cachetier_obj *raw; /* remote: the compressed object in the unit store
				    * (parallel fills, readahead, cached for later) */
	uint64_t in_off;	   /* compressed bytes read so far */
	int outfd;
	uint64_t out_total;  /* decoded bytes written */
	uint64_t counted;    /* bytes added to ct->decoded_used */
	uint64_t unit_start; /* decoded offset where the current member/frame began */
	int damage;
	uint64_t damage_off;
	uint64_t disk_limit; /* out_total the room on the disk allowed when last looked at */
	uint64_t next_check; /* out_total at which the free space is looked at again */
	uint64_t next_room;  /* out_total at which older cache objects are evicted for it */
	enum cachetier_codec codec;
	uint64_t units;		      /* gzip members / zstd frames decoded whole so far */
	int in_tail;		      /* past the end of the stream: only trailing bytes follow */
	uint64_t tail_off;	      /* compressed offset where they begin */
	enum cachetier_bound refused; /* 0, or the bound that stopped the decode */
	uint64_t refused_at, refused_in; /* decoded and compressed bytes then */
	unsigned char *in, *out;
	uint32_t *crcs; /* CRC32C of each whole CT_DEC_UNIT written so far */
	size_t ncrc;	/* ... how many: out_total / CT_DEC_UNIT */
	size_t crc_cap; /* room in crcs: at least ceil(out_total / CT_DEC_UNIT) */
	uint32_t crc;	/* of the unit being written (out_total % CT_DEC_UNIT bytes) */
};

static ssize_t dec_read(struct dec *d, size_t *len)
{
	ssize_t n;

	for (;;) {
		if (d->srcfd >= 0)
			n = pread(d->srcfd, d->in, DEC_IN_BYTES, (off_t)d->in_off);
		else
			/* the window the rules give a decoder (it reads the
			 * whole object in order) */
			n = cachetier_obj_pread_ahead(d->raw, d->in, DEC_IN_BYTES, d->in_off,
						      cachetier__decode_ahead(d->raw->ct));
		if (n < 0 && d->srcfd >= 0 && errno == EINTR)
			continue;
		break;
	}
	if (n < 0)
		return d->srcfd >= 0 ? -errno : n;
	*len = (size_t)n;
	return 0;
}

/* The room above the reserve on the cache directory's filesystem
 * (decoded/ is in it), as cachetier_disk tells anyone who asks. */
static uint64_t dec_room(struct dec *d)
{
	uint64_t avail, reserve;

	if (cachetier_disk(d->ct, &avail, &reserve) < 0)
		return UINT64_MAX; /* unknown: a full disk still fails the write */
	return avail > reserve ? avail - reserve : 0;
}

/* Look at the room above the reserve again; when a write of len does not
 * fit, let eviction free units of the unit store first. */
static void dec_check_free(struct dec *d, size_t len)
{
	uint64_t room = dec_room(d);

	if (room < len) {
		disk_mutex_lock(&d->ct->lock);
		cachetier__make_room(d->ct, len, 0);
		disk_mutex_unlock(&d->ct->lock);
		room = dec_room(d);
	}
	d->next_check = d->out_total + DEC_FREE_CHECK_BYTES;
	d->disk_limit = room > UINT64_MAX - d->out_total ? UINT64_MAX : d->out_total + room;
}

/* Take n bytes off ct->decoded_used (never below zero). */
static void dec_uncount(struct cachetier *ct, uint64_t n)
{
	unsigned long long cur = atomic_load(&ct->decoded_used);

	while (!atomic_compare_exchange_weak(&ct->decoded_used, &cur, cur > n ? cur - n : 0))
		;
	cachetier__usage_add(ct, -(int64_t)n); /* the directory's usage (cachetier_share.c) */
}

/* The CRCs of len bytes written at d->out_total (room in d->crcs made by
 * the caller): continue the current unit's, one more CRC per unit
 * completed. */
static void dec_crc(struct dec *d, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint64_t pos = d->out_total;

	while (len > 0) {
		size_t n = CT_DEC_UNIT - (size_t)(pos % CT_DEC_UNIT);

		if (n > len)
			n = len;
		d->crc = disk_crc32c_update(d->crc, p, n);
		p += n;
		len -= n;
		pos += n;
		if (pos % CT_DEC_UNIT == 0) {
			d->crcs[d->ncrc++] = d->crc;
			d->crc = 0;
		}
	}
}

/* The output is cut back to where the current member or frame began (it
 * failed its check): the CRCs follow, the unit it began in is read back
 * (at most CT_DEC_UNIT bytes, into d->out, which is not used after). 0 or
 * -errno. */
static int dec_cut(struct dec *d)
{
	uint64_t from = d->unit_start / CT_DEC_UNIT * CT_DEC_UNIT;
	size_t len = (size_t)(d->unit_start - from);
	int err;

	d->out_total = d->unit_start;
	d->ncrc = (size_t)(d->unit_start / CT_DEC_UNIT);
	d->crc = 0;
	if (len == 0)
		return 0;
	err = disk_pread_all(d->outfd, d->out, len, from);
	if (err == 0)
		d->crc = disk_crc32c_update(0, d->out, len);
	return err;
}

/* Append len decoded bytes (and their CRCs); in_used: compressed bytes
 * consumed to make them. Returns 0, -EFBIG past a bound (d->refused says
 * which), -ENOSPC when the disk has no room above the reserve, -ENOMEM (no
 * room for the CRCs: 4 bytes a unit) or a write error. */
static int dec_write(struct dec *d, const void *buf, size_t len, uint64_t in_used)
{
	const struct cachetier_config *cfg = &d->ct->cfg;
	uint64_t end = d->out_total + len;
	size_t done = 0;

	if (end > cfg->max_decoded_bytes ||
	    (end > DEC_RATIO_FLOOR_BYTES && end / cfg->max_decode_ratio > in_used)) {
		d->refused =
		    end > cfg->max_decoded_bytes ? CACHETIER_BOUND_SIZE : CACHETIER_BOUND_RATIO;
		d->refused_at = end;
		d->refused_in = in_used;
		return -EFBIG;
	}
	if (end > d->next_room) {
		/* the copy counts in the usage as it grows: keep the directory
		 * within --cache-size by evicting older units and copies (a
		 * copy bigger than the cache runs over it while in use) */
		d->next_room = end + DEC_ROOM_BYTES;
		disk_mutex_lock(&d->ct->lock);
		cachetier__make_room(d->ct, len, 0);
		disk_mutex_unlock(&d->ct->lock);
	}
	if (end > d->next_check || end > d->disk_limit) {
		dec_check_free(d, len);
		if (end > d->disk_limit)
			return -ENOSPC;
	}
	if ((end + CT_DEC_UNIT - 1) / CT_DEC_UNIT > d->crc_cap) {
		size_t cap = d->crc_cap ? d->crc_cap * 2 : 64;
		uint32_t *crcs;

		while (cap < (end + CT_DEC_UNIT - 1) / CT_DEC_UNIT)
			cap *= 2;
		crcs = realloc(d->crcs, cap * sizeof(*crcs));
		if (!crcs)
			return -ENOMEM;
		d->crcs = crcs;
		d->crc_cap = cap;
	}
	while (done < len) {
		ssize_t n = write(d->outfd, (const char *)buf + done, len - done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == EDQUOT ? -ENOSPC : -errno;
		}
		done += (size_t)n;
	}
	dec_crc(d, buf, len);
	d->out_total = end;
	d->counted += len;
	atomic_fetch_add(&d->ct->decoded_used, len);
	cachetier__usage_add(d->ct, (int64_t)len); /* counts against the cache size */
	return 0;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i])
			return 0;
	}
	return 1;
}

/* Bytes after the end of a complete compressed stream (every gzip member or
 * zstd frame before them ended with its checksum verified), first seen at
 * compressed offset d->tail_off: zero padding (bsdtar pads its .tar.zst to
 * a block) is no damage and says nothing; anything else is logged once,
 * here, and ignored as gzip does: it is not a damaged shard (the members
 * before it were read whole; a tar cut short there is damage the index
 * reports). p[0..len) are the next bytes at compressed offset off. Returns
 * 1 when the scan is over (bytes that are not zero were found). */
static int dec_tail(struct dec *d, const unsigned char *p, size_t len, uint64_t off)
{
	if (all_zero(p, len))
		return 0;
	for (size_t i = 0; i < len && !p[i]; i++)
		off++;
	backend_log(d->ct->be, BACKEND_LOG_WARN,
		    "shard %s: %llu bytes after the end of its %s stream (the first not zero at "
		    "offset %llu) are not %s data: ignored, as gzip ignores them; the members "
		    "before them were read whole",
		    d->info->key, (unsigned long long)(d->info->size - d->tail_off),
		    d->codec == CACHETIER_GZIP ? "gzip" : "zstd", (unsigned long long)off,
		    d->codec == CACHETIER_GZIP ? "gzip" : "zstd");
	return 1;
}

/* The next piece of the compressed input for a codec's loop: 1 with *n
 * bytes in d->in to decode; 0 when there is none: the input ended (in the
 * middle of a member or frame, in_unit, that is damage, and the prefix
 * decoded so far is kept), or bytes after the stream (handled here:
 * zeros, or bytes to log) ended the decode (*done); or dec_read's
 * negative errno. */
static int dec_next(struct dec *d, int in_unit, size_t *n, int *done)
{
	for (;;) {
		int err = (int)dec_read(d, n);

		if (err < 0)
			return err;
		if (*n == 0) {
			if (in_unit) {
				d->damage = -EIO;
				d->damage_off = d->in_off;
			}
			return 0;
		}
		if (!d->in_tail)
			return 1;
		*done = dec_tail(d, d->in, *n, d->in_off);
		d->in_off += *n;
		if (*done)
			return 0;
	}
}

static int decode_gzip(struct dec *d)
{
	z_stream zs;
	int err = 0, in_unit = 0, done = 0;

	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 15 + 16) != Z_OK)
		return -ENOMEM;
	while (!done) {
		size_t n;

		err = dec_next(d, in_unit, &n, &done);
		if (err <= 0)
			break;
		err = 0;
		zs.next_in = d->in;
		zs.avail_in = (uInt)n;
		while (zs.avail_in > 0 && !done) {
			uint64_t consumed_before = d->in_off + (n - zs.avail_in);
			int ret;

			if (!in_unit) {
				/* between members: anything that is not a gzip header
				 * after a complete member is trailing bytes (zero
				 * padding or else); before the first it is damage */
				if (d->units && (zs.next_in[0] != 0x1f ||
						 (zs.avail_in > 1 && zs.next_in[1] != 0x8b))) {
					d->in_tail = 1;
					d->tail_off = consumed_before;
					done =
					    dec_tail(d, zs.next_in, zs.avail_in, consumed_before);
					break;
				}
				if (zs.next_in[0] != 0x1f ||
				    (zs.avail_in > 1 && zs.next_in[1] != 0x8b)) {
					d->damage = -EBADMSG;
					d->damage_off = consumed_before;
					done = 1;
					break;
				}
				in_unit = 1;
				d->unit_start = d->out_total;
			}
			zs.next_out = d->out;
			zs.avail_out = DEC_OUT_BYTES;
			ret = inflate(&zs, Z_NO_FLUSH);
			if (ret == Z_OK || ret == Z_STREAM_END || ret == Z_BUF_ERROR) {
				err = dec_write(d, d->out, DEC_OUT_BYTES - zs.avail_out,
						d->in_off + (n - zs.avail_in));
				if (err < 0) {
					done = 1;
					break;
				}
			}
			if (ret == Z_STREAM_END) {
				in_unit = 0;
				d->units++; /* CRC and length verified */
				inflateReset(&zs);
			} else if (ret == Z_BUF_ERROR && zs.avail_in == 0) {
				break; /* needs more input */
			} else if (ret != Z_OK) {
				/* corrupt data or CRC mismatch: distrust this member */
				d->damage = -EBADMSG;
				d->damage_off = d->in_off + (n - zs.avail_in);
				err = dec_cut(d);
				done = 1;
			}
		}
		d->in_off += n;
	}
	inflateEnd(&zs);
	return err;
}

/* 1 when p[0..len) may begin a zstd frame or a skippable frame (the
 * little-endian magic 0xFD2FB528 or 0x184D2A5?, as far as len shows it). */
static int zstd_magic_prefix(const unsigned char *p, size_t len)
{
	static const unsigned char zstd[4] = {0x28, 0xb5, 0x2f, 0xfd};
	static const unsigned char skip[4] = {0x50, 0x2a, 0x4d, 0x18};
	size_t n = len < 4 ? len : 4;

	if (memcmp(p, zstd, n) == 0)
		return 1;
	return (p[0] & 0xf0) == skip[0] && (n < 2 || memcmp(p + 1, skip + 1, n - 1) == 0);
}

static int decode_zstd(struct dec *d)
{
	ZSTD_DCtx *dctx = ZSTD_createDCtx();
	int err = 0, in_unit = 0, done = 0;

	if (!dctx)
		return -ENOMEM;
	while (!done) {
		ZSTD_inBuffer in;
		size_t n;

		err = dec_next(d, in_unit, &n, &done);
		if (err <= 0)
			break;
		err = 0;
		in.src = d->in;
		in.size = n;
		in.pos = 0;
		while (in.pos < in.size && !done) {
			ZSTD_outBuffer out = {d->out, DEC_OUT_BYTES, 0};
			size_t ret;

			if (!in_unit) {
				/* after a complete frame, bytes that cannot begin
				 * another (zstd or skippable frame magic) are
				 * trailing bytes: zero padding or else */
				if (d->units &&
				    !zstd_magic_prefix(d->in + in.pos, in.size - in.pos)) {
					d->in_tail = 1;
					d->tail_off = d->in_off + in.pos;
					done = dec_tail(d, d->in + in.pos, in.size - in.pos,
							d->tail_off);
					break;
				}
				in_unit = 1;
				d->unit_start = d->out_total;
			}
			ret = ZSTD_decompressStream(dctx, &out, &in);
			if (ZSTD_isError(ret)) {
				d->damage = -EBADMSG;
				d->damage_off = d->in_off + in.pos;
				err = dec_cut(d);
				done = 1;
				break;
			}
			err = dec_write(d, d->out, out.pos, d->in_off + in.pos);
			if (err < 0) {
				done = 1;
				break;
			}
			if (ret == 0) {
				in_unit = 0; /* frame complete, checksum verified */
				d->units++;
			}
		}
		d->in_off += n;
	}
	ZSTD_freeDCtx(dctx);
	return err;
}

/* Read record recname into *r; with crcs, also the copy's unit CRCs into
 * a malloc'd *crcs (r->size's units; NULL when there are none). 0,
 * -ENOENT (none), -EPROTO (another version), -EBADMSG (damaged, or of
 * another unit size), -ENOMEM or a read error. */
static int rec_load(struct cachetier *ct, const char *recname, struct dec_rec *r, uint32_t **crcs)
{
	unsigned char hdr[REC_HDR], *tail = NULL;
	uint64_t units = 0;
	struct stat st;
	ssize_t n;
	int err = 0, fd = openat(ct->decfd, recname, O_RDONLY | O_CLOEXEC);

	if (crcs)
		*crcs = NULL;
	if (fd < 0)
		return -errno;
	do {
		n = pread(fd, hdr, sizeof(hdr), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 16 || memcmp(hdr, REC_MAGIC, 8) != 0)
		err = n < 0 ? -errno : -EBADMSG;
	else if (disk_le64_get(hdr + 8) != REC_VERSION)
		err = -EPROTO;
	else if (n != REC_HDR || disk_le64_get(hdr + 64) != disk_fnv64(hdr, 64) ||
		 disk_le32_get(hdr + 56) != CT_DEC_UNIT)
		err = -EBADMSG;
	if (err == 0) {
		r->size = disk_le64_get(hdr + 16);
		r->damage = -(int)disk_le64_get(hdr + 24);
		r->damage_off = disk_le64_get(hdr + 32);
		r->bound = disk_le32_get(hdr + 40);
		r->max_ratio = disk_le32_get(hdr + 44);
		r->max_bytes = disk_le64_get(hdr + 48);
		/* hdr + 60: reserved, 0 */
		if (r->damage != -EFBIG)
			units = r->size / CT_DEC_UNIT + (r->size % CT_DEC_UNIT != 0);
	}
	if (err == 0 && crcs) {
		/* the file's size first: a damaged size field allocates nothing */
		if (fstat(fd, &st) < 0)
			err = -errno;
		else if (units > (SIZE_MAX - 8) / 4 ||
			 (uint64_t)st.st_size != REC_HDR + units * 4 + 8)
			err = -EBADMSG;
		else if (!(tail = malloc((size_t)units * 4 + 8)) ||
			 (units && !(*crcs = malloc((size_t)units * sizeof(**crcs)))))
			err = -ENOMEM;
		else
			err = disk_pread_all(fd, tail, (size_t)units * 4 + 8, REC_HDR);
		if (err == 0 && disk_le64_get(tail + units * 4) != disk_fnv64(tail, units * 4))
			err = -EBADMSG;
		for (uint64_t u = 0; err == 0 && u < units; u++)
			(*crcs)[u] = disk_le32_get(tail + u * 4);
		free(tail);
		if (err < 0) {
			free(*crcs);
			*crcs = NULL;
		}
	}
	close(fd);
	return err;
}

/* Write record recname: r, and the copy's unit CRCs crcs[0..units) (none
 * for a refusal). 0 or -errno. */
static int rec_save(struct cachetier *ct, const char *recname, const struct dec_rec *r,
		    const uint32_t *crcs, size_t units)
{
	size_t len = REC_HDR + units * 4 + 8;
	unsigned char *rec = calloc(1, len);
	int err;

	if (!rec)
		return -ENOMEM;
	memcpy(rec, REC_MAGIC, 8);
	disk_le64_put(rec + 8, REC_VERSION);
	disk_le64_put(rec + 16, r->size);
	disk_le64_put(rec + 24, (uint64_t)(-(int64_t)r->damage));
	disk_le64_put(rec + 32, r->damage_off);
	disk_le32_put(rec + 40, r->bound);
	disk_le32_put(rec + 44, r->max_ratio);
	disk_le64_put(rec + 48, r->max_bytes);
	disk_le32_put(rec + 56, CT_DEC_UNIT);
	disk_le64_put(rec + 64, disk_fnv64(rec, 64));
	for (size_t u = 0; u < units; u++)
		disk_le32_put(rec + REC_HDR + u * 4, crcs[u]);
	disk_le64_put(rec + REC_HDR + units * 4, disk_fnv64(rec + REC_HDR, units * 4));
	err = disk_write_atomic(ct->decfd, recname, rec, len, 0600);
	free(rec);
	return err;
}

/* Would the decode a refusal record describes stop again under the bounds
 * in force? Only when the bound that stopped it is no looser now: a
 * stricter other bound stops it earlier, a looser one did not stop it
 * before. */
static int rec_refuses(const struct cachetier *ct, const struct dec_rec *r)
{
	if (r->bound == CACHETIER_BOUND_RATIO)
		return ct->cfg.max_decode_ratio <= r->max_ratio;
	return ct->cfg.max_decoded_bytes <= r->max_bytes;
}

/* Reuse an earlier complete decode named 'name' if its record matches;
 * -EFBIG when a refusal recorded for it holds under today's bounds. An
 * existing copy is reused whatever the bounds are now (it costs no more
 * disk). Another decode wrote it (an earlier mount, another process): its
 * units are checked on their first read here (o->dcrc, o->dchecked). */
static int decode_reuse(struct cachetier *ct, const char *name, const char *recname,
			struct cachetier_obj *o, uint64_t *size)
{
	struct dec_rec r;
	struct stat st;
	uint32_t *crcs = NULL;
	uint64_t units;
	int fd, err;

	err = rec_load(ct, recname, &r, &crcs);
	if (err == -EPROTO)
		cachetier__note_version(ct, CT_FMT_REC, recname);
	if (err < 0)
		return err;
	if (r.damage == -EFBIG)
		return rec_refuses(ct, &r) ? -EFBIG : -EAGAIN;
	units = r.size / CT_DEC_UNIT + (r.size % CT_DEC_UNIT != 0);
	if (units && !(o->dchecked = calloc((size_t)units, sizeof(*o->dchecked)))) {
		free(crcs);
		return -ENOMEM;
	}
	fd = openat(ct->decfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size != r.size) {
		err = fd < 0 ? -errno : -EBADMSG;
		if (fd >= 0)
			close(fd);
		free(crcs);
		free((void *)o->dchecked);
		o->dchecked = NULL;
		return err;
	}
	o->fd = fd;
	*size = r.size;
	o->damage = r.damage;
	o->damage_off = r.damage_off;
	o->dcrc = crcs;
	o->dunits = units;
	return 0;
}

int cachetier__decode_drop(struct cachetier *ct, const char *name, int fd)
{
	char recname[40];
	struct stat st, mine;

	if (fd >= 0 && fstat(fd, &mine) < 0)
		return 0;
	if (fstatat(ct->decfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && fd >= 0 &&
	    (st.st_dev != mine.st_dev || st.st_ino != mine.st_ino))
		return 0; /* another decode's copy by now: not the damaged one */
	snprintf(recname, sizeof(recname), "%s.rec", name);
	unlinkat(ct->decfd, recname, 0);
	if (fstatat(ct->decfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    unlinkat(ct->decfd, name, 0) == 0) {
		dec_uncount(ct, (uint64_t)st.st_size);
		return 1;
	}
	return 0;
}

int cachetier__decode_refusal(struct cachetier *ct, const char *name, struct cachetier_refusal *r)
{
	char recname[40];
	struct dec_rec rec;
	int err;

	snprintf(recname, sizeof(recname), "%s.rec", name);
	err = rec_load(ct, recname, &rec, NULL);
	if (err < 0 || rec.damage != -EFBIG)
		return -ENOENT;
	r->bound = (enum cachetier_bound)rec.bound;
	r->decoded_bytes = rec.size;
	r->compressed_bytes = rec.damage_off;
	r->max_decode_ratio = rec.max_ratio;
	r->max_decoded_bytes = rec.max_bytes;
	return 0;
}

/* Stop watching the object's decoded copy (its fd number may come back). */
static void dec_unwatch(struct cachetier *ct, struct cachetier_obj *o)
{
	if (o->dwrec)
		cachetier__watch_drop(ct->watch, o->dwrec);
	o->dwrec = NULL;
	o->dwfail = 0;
}

/* The decoder's source: the local file itself, or the object through the
 * cache tier (a different table entry: RAW codec, no lock held here). */
static int dec_open_src(struct dec *d)
{
	if (backend_is_local(d->ct->be)) {
		d->srcfd = backend_open_fd(d->ct->be, d->info->key);
		return d->srcfd < 0 ? d->srcfd : 0;
	}
	return cachetier_obj_open(d->ct, d->info, CACHETIER_RAW, &d->raw);
}

/* The object takes the committed copy d->outfd and its unit CRCs (every
 * unit trusted: checked again after the file changes under the mount,
 * cachetier_objread.c), and watches it from now. */
static void dec_adopt(struct cachetier *ct, struct cachetier_obj *o, struct dec *d)
{
	if (d->ncrc && (o->dchecked = calloc(d->ncrc, sizeof(*o->dchecked))) != NULL) {
		for (size_t u = 0; u < d->ncrc; u++)
			atomic_store_explicit(&o->dchecked[u], 1, memory_order_relaxed);
		o->dcrc = d->crcs;
		d->crcs = NULL;
		o->dunits = d->ncrc;
	}
	o->fd = d->outfd;
	d->outfd = -1;
	/* the decoder's own writes came before the watch, so they are no
	 * change (cachetier_objread.c, obj_dec_watch) */
	dec_unwatch(ct, o);
	if (o->dcrc && ct->watch && !cachetier__live_check_off() &&
	    cachetier__watch_add(ct->watch, o->fd, &o->dwrec, &o->dwevents) < 0) {
		o->dwrec = NULL;
		o->dwfail = 1;
	}
	o->dwfd = o->fd;
	o->damage = d->damage;
	o->damage_off = d->damage_off;
}

/* Before o's copy is decoded again: the unit checks of a copy closed
 * before go (no read uses them), and its watch. */
static void dec_forget(struct cachetier *ct, struct cachetier_obj *o)
{
	free(o->dcrc);
	free((void *)o->dchecked);
	o->dcrc = NULL;
	o->dchecked = NULL;
	o->dunits = 0;
	dec_unwatch(ct, o);
}

/* The record recname of a decode refused by a bound (-EFBIG, d->refused):
 * the next open refuses it without decoding. If it cannot be saved, the
 * next open decodes again. */
static void dec_save_refusal(struct cachetier *ct, const struct dec *d, const char *recname)
{
	struct dec_rec rec;

	memset(&rec, 0, sizeof(rec));
	rec.size = d->refused_at;
	rec.damage = -EFBIG;
	rec.damage_off = d->refused_in;
	rec.bound = d->refused;
	rec.max_ratio = ct->cfg.max_decode_ratio;
	rec.max_bytes = ct->cfg.max_decoded_bytes;
	rec_save(ct, recname, &rec, NULL, 0);
}

/* The record recname of a decoded copy committed: its size, damage and
 * unit CRCs (the last unit's added); bytes cut off a corrupt member, which
 * were counted when written, are taken off decoded_used first. 0 or the
 * error of rec_save. */
static int dec_save_copy(struct cachetier *ct, struct dec *d, const char *recname)
{
	struct dec_rec rec;

	if (d->counted > d->out_total)
		dec_uncount(ct, d->counted - d->out_total);
	if (d->out_total % CT_DEC_UNIT)
		d->crcs[d->ncrc++] = d->crc; /* the last unit's (dec_write made room) */
	memset(&rec, 0, sizeof(rec));
	rec.size = d->out_total;
	rec.damage = d->damage;
	rec.damage_off = d->damage_off;
	return rec_save(ct, recname, &rec, d->crcs, d->ncrc);
}

int cachetier__decode(struct cachetier *ct, const struct backend_objinfo *info,
		      enum cachetier_codec codec, const char *name, struct cachetier_obj *o,
		      uint64_t *size)
{
	char tmp[96], recname[40];
	struct dec d;
	int err;

	dec_forget(ct, o);
	snprintf(recname, sizeof(recname), "%s.rec", name);
	err = decode_reuse(ct, name, recname, o, size);
	if (err == 0) {
		ct->decoded_reused++;
		return 0;
	}
	if (err == -EFBIG)
		return err;
	/* remove what an earlier decode left (a record of another version, a
	 * refusal, a copy without a record), record first, and take the
	 * copy's bytes off decoded_used (the scan at open counted them) */
	cachetier__decode_drop(ct, name, -1);

	memset(&d, 0, sizeof(d));
	d.ct = ct;
	d.info = info;
	d.codec = codec;
	d.srcfd = -1;
	d.outfd = -1;
	d.in = malloc(DEC_IN_BYTES);
	d.out = malloc(DEC_OUT_BYTES);
	if (!d.in || !d.out) {
		err = -ENOMEM;
		goto out;
	}
	err = dec_open_src(&d);
	if (err < 0)
		goto out;
	d.outfd = disk_tmp_open(ct->decfd, name, O_RDWR, 0600, tmp, sizeof(tmp));
	if (d.outfd < 0) {
		err = d.outfd;
		goto out;
	}
	/* d.disk_limit = d.next_check = 0: the first write looks at the disk */
	err = codec == CACHETIER_GZIP ? decode_gzip(&d) : decode_zstd(&d);
	if (err == -EFBIG)
		dec_save_refusal(ct, &d, recname);
	if (err < 0)
		goto out_unlink;
	if (ftruncate(d.outfd, (off_t)d.out_total) < 0) {
		err = -errno;
		goto out_unlink;
	}
	err = disk_commit(ct->decfd, d.outfd, tmp, name);
	if (err < 0)
		goto out_unlink;
	err = dec_save_copy(ct, &d, recname);
	if (err < 0)
		goto out; /* the copy stays, counted; without a record it is decoded again */
	dec_adopt(ct, o, &d);
	*size = d.out_total;
	ct->decoded_streams++;
	ct->decoded_bytes += d.out_total;
	goto out;
out_unlink:
	unlinkat(ct->decfd, tmp, 0);
	dec_uncount(ct, d.counted);
out:
	if (d.outfd >= 0)
		close(d.outfd);
	if (d.srcfd >= 0)
		close(d.srcfd);
	cachetier_obj_unref(d.raw);
	free(d.in);
	free(d.out);
	free(d.crcs);
	return err;
}
