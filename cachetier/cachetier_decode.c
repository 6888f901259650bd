/*
 * cachetier_decode.c — decode a compressed shard once into the cache dir.
 *
 * gzip (zlib, multi-member) and zstd (multi-frame) streams are decoded
 * sequentially into a temp file which is fsynced and renamed to its final
 * name; a small record (magic, version, sizes, damage, checksum) written
 * after it marks the decode complete. A later open finds the record, checks
 * the data file's size against it and reuses the copy.
 *
 * Never wrong bytes: a gzip member or zstd frame is trusted only once its
 * checksum has been verified at its end. On corruption the output of the
 * member/frame that failed is cut off (the file is truncated back to where
 * that member began). A stream that simply ends early (truncated download)
 * keeps everything it decoded: a prefix of a valid deflate/zstd stream
 * decodes to a prefix of the original bytes. Either way the damage and its
 * compressed offset are recorded.
 *
 * Decoded copies count in the cache tier's usage (cachetier_evict.c) but
 * are not evicted.
 *
 * Decompression bombs (issue 7): a small hostile stream may decode to far
 * more bytes than the disk holds. One decoded copy may hold at most
 *   cfg.cache_size_bytes              (--cache-size: one copy never needs more
 *                                      than the whole cache, and it is never
 *                                      evicted), and
 *   free space - cfg.min_free_bytes   (the reserve cachetier_evict.c keeps;
 *                                      checked with fstatvfs at the start and
 *                                      every DEC_FREE_CHECK_BYTES written),
 * whichever is hit first. At the cap decoding stops as for a stream that
 * ends early: the bytes decoded so far are kept (the last write is cut to
 * the cap), the damage is -EFBIG at the compressed offset read so far, so
 * members before the cut are served and the rest is EIO or absent
 * (DESIGN.md section 3; fs_shard.c logs the shard, the error and the kept
 * size, which is the cap). The record is written, but a later open reuses
 * a copy cut this way only while cache_size_bytes is not larger than the
 * kept size (a cut made by a full disk or a smaller --cache-size is
 * decoded again).
 *
 * Non-goals: decoding while a reader waits on a prefix; reading the
 * compressed bytes of a remote shard through the chunk store (they are
 * read through the backend once, 1 MiB at a time, and only the decoded
 * copy is kept).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "cachetier_i.h"

#define DEC_IN_BYTES (1u << 20)
#define DEC_OUT_BYTES (1u << 20)
/* How often the free space is looked at again while decoding. */
#define DEC_FREE_CHECK_BYTES (64u << 20)

/* The decode record: fixed-width little-endian fields. */
#define REC_MAGIC "SHDEC\0\0\1"
#define REC_VERSION 1u
#define REC_BYTES 48

struct dec {
	struct cachetier *ct;
	const struct backend_objinfo *info;
	int srcfd;          /* local source fd, or -1: remote, read through raw */
	struct cachetier_obj *raw; /* remote: the compressed object in the chunk store
				    * (parallel fills, readahead, cached for later) */
	uint64_t in_off;    /* compressed bytes read so far */
	int outfd;
	uint64_t out_total; /* decoded bytes written */
	uint64_t unit_start; /* decoded offset where the current member/frame began */
	int damage;
	uint64_t damage_off;
	uint64_t limit;	     /* most decoded bytes (see the header) */
	uint64_t next_check; /* out_total at which the free space is checked again */
	unsigned char *in, *out;
};

static ssize_t dec_read(struct dec *d, size_t *len)
{
	ssize_t n;

	for (;;) {
		if (d->srcfd >= 0)
			n = pread(d->srcfd, d->in, DEC_IN_BYTES, (off_t)d->in_off);
		else
			n = cachetier_obj_pread(d->raw, d->in, DEC_IN_BYTES, d->in_off);
		if (n < 0 && d->srcfd >= 0 && errno == EINTR)
			continue;
		break;
	}
	if (n < 0)
		return d->srcfd >= 0 ? -errno : n;
	*len = (size_t)n;
	return 0;
}

/* Lower d->limit to what the free space above the reserve allows. */
static void dec_check_free(struct dec *d)
{
	struct statvfs sv;

	d->next_check = d->out_total + DEC_FREE_CHECK_BYTES;
	if (fstatvfs(d->outfd, &sv) == 0) {
		uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		uint64_t room =
		    avail > d->ct->cfg.min_free_bytes ? avail - d->ct->cfg.min_free_bytes : 0;

		if (d->out_total + room < d->limit)
			d->limit = d->out_total + room;
	}
}

/* Append len decoded bytes; at the limit, write what fits and return
 * -EFBIG (the caller records the damage and stops). */
static int dec_write(struct dec *d, const void *buf, size_t len)
{
	size_t done = 0;
	int cut = 0;

	if (d->out_total + len > d->next_check)
		dec_check_free(d);
	if (len > d->limit - d->out_total) {
		len = (size_t)(d->limit - d->out_total);
		cut = 1;
	}
	while (done < len) {
		ssize_t n = write(d->outfd, (const char *)buf + done, len - done);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)n;
	}
	d->out_total += len;
	return cut ? -EFBIG : 0;
}

/* The decoded size reached d->limit: keep what came before, as for a
 * stream that ends early. */
static void dec_cut(struct dec *d, uint64_t in_off)
{
	d->damage = -EFBIG;
	d->damage_off = in_off;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i])
			return 0;
	}
	return 1;
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

		err = (int)dec_read(d, &n);
		if (err < 0)
			break;
		if (n == 0) {
			if (in_unit) { /* ended inside a member: keep the prefix */
				d->damage = -EIO;
				d->damage_off = d->in_off;
			}
			break;
		}
		zs.next_in = d->in;
		zs.avail_in = (uInt)n;
		while (zs.avail_in > 0 && !done) {
			uint64_t consumed_before = d->in_off + (n - zs.avail_in);
			int ret;

			if (!in_unit) {
				/* between members: trailing zeros are padding, anything
				 * that is not a gzip header ends the stream */
				if (all_zero(zs.next_in, zs.avail_in))
					break;
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
				err = dec_write(d, d->out, DEC_OUT_BYTES - zs.avail_out);
				if (err == -EFBIG) {
					dec_cut(d, d->in_off + (n - zs.avail_in));
					err = 0;
					done = 1;
					break;
				}
				if (err < 0) {
					done = 1;
					break;
				}
			}
			if (ret == Z_STREAM_END) {
				in_unit = 0;
				inflateReset(&zs);
			} else if (ret == Z_BUF_ERROR && zs.avail_in == 0) {
				break; /* needs more input */
			} else if (ret != Z_OK) {
				/* corrupt data or CRC mismatch: distrust this member */
				d->damage = -EBADMSG;
				d->damage_off = d->in_off + (n - zs.avail_in);
				d->out_total = d->unit_start;
				done = 1;
			}
		}
		d->in_off += n;
	}
	inflateEnd(&zs);
	return err;
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

		err = (int)dec_read(d, &n);
		if (err < 0)
			break;
		if (n == 0) {
			if (in_unit) {
				d->damage = -EIO;
				d->damage_off = d->in_off;
			}
			break;
		}
		in.src = d->in;
		in.size = n;
		in.pos = 0;
		while (in.pos < in.size && !done) {
			ZSTD_outBuffer out = {d->out, DEC_OUT_BYTES, 0};
			size_t ret;

			if (!in_unit) {
				in_unit = 1;
				d->unit_start = d->out_total;
			}
			ret = ZSTD_decompressStream(dctx, &out, &in);
			if (ZSTD_isError(ret)) {
				d->damage = -EBADMSG;
				d->damage_off = d->in_off + in.pos;
				d->out_total = d->unit_start;
				done = 1;
				break;
			}
			err = dec_write(d, d->out, out.pos);
			if (err == -EFBIG) {
				dec_cut(d, d->in_off + in.pos);
				err = 0;
				done = 1;
				break;
			}
			if (err < 0) {
				done = 1;
				break;
			}
			if (ret == 0)
				in_unit = 0; /* frame complete, checksum verified */
		}
		d->in_off += n;
	}
	ZSTD_freeDCtx(dctx);
	return err;
}

static int rec_load(struct cachetier *ct, const char *recname, uint64_t *size, int *damage,
		    uint64_t *damage_off)
{
	unsigned char rec[REC_BYTES];
	ssize_t n;
	int fd = openat(ct->decfd, recname, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, rec, sizeof(rec));
	close(fd);
	if (n != REC_BYTES || memcmp(rec, REC_MAGIC, 8) != 0)
		return -EBADMSG;
	if (cachetier__le64_get(rec + 8) != REC_VERSION)
		return -EPROTO;
	if (cachetier__le64_get(rec + 40) != cachetier__fnv64(rec, 40))
		return -EBADMSG;
	*size = cachetier__le64_get(rec + 16);
	*damage = -(int)cachetier__le64_get(rec + 24);
	*damage_off = cachetier__le64_get(rec + 32);
	return 0;
}

/* Reuse an earlier complete decode named 'name' if its record matches. */
static int decode_reuse(struct cachetier *ct, const char *name, const char *recname,
			struct cachetier_obj *o)
{
	uint64_t size = 0, doff = 0;
	struct stat st;
	int damage = 0, fd, err;

	err = rec_load(ct, recname, &size, &damage, &doff);
	if (err < 0)
		return err;
	if (damage == -EFBIG && size < ct->cfg.cache_size_bytes)
		return -EAGAIN; /* cut short by a smaller limit or a full disk: decode again */
	fd = openat(ct->decfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != size) {
		close(fd);
		return -EBADMSG;
	}
	o->fd = fd;
	o->size = size;
	o->damage = damage;
	o->damage_off = doff;
	return 0;
}

int cachetier__decode(struct cachetier *ct, const struct backend_objinfo *info,
		      enum cachetier_codec codec, const char *name, struct cachetier_obj *o)
{
	char tmp[96], recname[40];
	unsigned char rec[REC_BYTES];
	struct dec d;
	int err;

	snprintf(recname, sizeof(recname), "%s.rec", name);
	if (decode_reuse(ct, name, recname, o) == 0) {
		ct->decoded_reused++;
		return 0;
	}

	memset(&d, 0, sizeof(d));
	d.ct = ct;
	d.info = info;
	d.srcfd = -1;
	d.outfd = -1;
	d.in = malloc(DEC_IN_BYTES);
	d.out = malloc(DEC_OUT_BYTES);
	if (!d.in || !d.out) {
		err = -ENOMEM;
		goto out;
	}
	if (backend_is_local(ct->be)) {
		d.srcfd = backend_open_fd(ct->be, info->key);
		if (d.srcfd < 0) {
			err = d.srcfd;
			goto out;
		}
	} else {
		/* a different table entry (RAW codec): no lock is held here */
		err = cachetier_obj_open(ct, info, CACHETIER_RAW, &d.raw);
		if (err < 0)
			goto out;
	}
	snprintf(tmp, sizeof(tmp), ".tmp.%d.%u", (int)getpid(), atomic_fetch_add(&ct->tmp_seq, 1));
	d.outfd = openat(ct->decfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (d.outfd < 0) {
		err = -errno;
		goto out;
	}
	d.limit = ct->cfg.cache_size_bytes;
	dec_check_free(&d);
	err = codec == CACHETIER_GZIP ? decode_gzip(&d) : decode_zstd(&d);
	if (err < 0)
		goto out_unlink;
	if (ftruncate(d.outfd, (off_t)d.out_total) < 0 || fsync(d.outfd) < 0 ||
	    renameat(ct->decfd, tmp, ct->decfd, name) < 0) {
		err = -errno;
		goto out_unlink;
	}
	memcpy(rec, REC_MAGIC, 8);
	cachetier__le64_put(rec + 8, REC_VERSION);
	cachetier__le64_put(rec + 16, d.out_total);
	cachetier__le64_put(rec + 24, (uint64_t)(-(int64_t)d.damage));
	cachetier__le64_put(rec + 32, d.damage_off);
	cachetier__le64_put(rec + 40, cachetier__fnv64(rec, 40));
	err = cachetier__write_atomic(ct, ct->decfd, recname, rec, sizeof(rec));
	if (err < 0)
		goto out;
	o->fd = d.outfd;
	d.outfd = -1;
	o->size = d.out_total;
	o->damage = d.damage;
	o->damage_off = d.damage_off;
	ct->decoded_streams++;
	ct->decoded_bytes += d.out_total;
	atomic_fetch_add(&ct->decoded_used, d.out_total);
	cachetier__usage_add(ct, (int64_t)d.out_total); /* counts against the cache size */
	goto out;
out_unlink:
	unlinkat(ct->decfd, tmp, 0);
out:
	if (d.outfd >= 0)
		close(d.outfd);
	if (d.srcfd >= 0)
		close(d.srcfd);
	cachetier_obj_unref(d.raw);
	free(d.in);
	free(d.out);
	return err;
}
